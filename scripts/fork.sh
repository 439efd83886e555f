#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (or reuse) a source-install lane: vLLM as a fork branch, installed the
# way NPU clusters install vLLM (a source tree with VLLM_TARGET_DEVICE=empty).
#   scripts/fork.sh [--lane fork|ascend]          -> prints the venv path on stdout
#   scripts/fork.sh [--lane fork|ascend] --repo   -> prints the vLLM repository path
# --lane fork (default): the tag in .github/vllm-fork-base.commit.
# --lane ascend: the tag in .github/vllm-ascend-base.commit, plus vllm-ascend's
#   Python code (.github/vllm-ascend.version) and the NPU stubs (see below).
#
# 1. The release sdist of the lane's tag, fetched from pip's configured index
#    (upstream_patch/series.py sdist). ascend: also the vllm-ascend sdist,
#    whose .github/vllm-release-tag.commit must equal the lane's tag.
# 2. A git repository of it: the pristine tree committed and tagged as the
#    release, then branch "balance-seam" = `git am` of upstream_patch/<tag>/
#    in `series` order (so `git log v<X.Y.Z>..balance-seam` is the series).
# 3. A cached venv keyed by what it holds (vLLM version, Python version, the
#    release's build requirements with its torch pin, its
#    requirements/common.txt, scripts/requirements-dev.txt; ascend: the
#    vllm-ascend requirements it takes, torch pin included), then the branch
#    installed into it with `pip install --no-build-isolation --no-deps`.
#    Step 2's branch and the vLLM install are re-done (about a minute) only
#    when the series content changes; the heavy venv is not rebuilt.
# 4. ascend only: vllm_ascend/ and its egg-info copied from the sdist into
#    site-packages (its setup.py would build NPU kernels; importlib.metadata
#    reads the egg-info, so vLLM sees its entry points), and
#    tests/support/npu_stubs.py linked into site-packages with a .pth that
#    imports it in every Python process of the venv (spawned ones included).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/heartbeat.sh
. "$root/scripts/heartbeat.sh"
want=venv
lane=fork
usage="usage: scripts/fork.sh [--lane fork|ascend] [--repo]"
while [ $# -gt 0 ]; do
  case "$1" in
    --repo) want=repo; shift ;;
    --lane) lane=${2:-}; shift 2 || { echo "$usage" >&2; exit 2; } ;;
    --lane=*) lane=${1#--lane=}; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
case "$lane" in
  fork) pin_file=$root/.github/vllm-fork-base.commit; steps=4 ;;
  ascend) pin_file=$root/.github/vllm-ascend-base.commit; steps=6 ;;
  *) echo "scripts/fork.sh: unknown lane '$lane' (expected fork or ascend): $usage" >&2; exit 2 ;;
esac
tag=$(tr -d '[:space:]' < "$pin_file")
version=${tag#v}
branch=balance-seam
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cache=${VAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-ascend-balance}
export VAB_CACHE=$cache
# shellcheck source=scripts/cache_lock.sh
. "$root/scripts/cache_lock.sh"
cache_lock "fork-$lane"
step=0
# One line per phase that does work, whether or not stderr is a terminal, so
# a CI log shows the build is alive.
phase() { step=$((step + 1)); echo "[lane $lane/$tag] step $step/$steps: $*" >&2; }
skip() { step=$((step + 1)); }
die() { echo "error: $*" >&2; exit 1; }

# The series, in order (series.py's format: one name a line, # comments).
series_dir=$root/upstream_patch/$tag
[ -f "$series_dir/series" ] || die "the $lane lane pins $tag (${pin_file#"$root"/}) but there is no upstream_patch/$tag/series: re-sync the series for this pin, see CONTRIBUTING.md"
patches=()
while read -r name; do
  name=${name%%#*}
  name=$(echo "$name" | tr -d '[:space:]')
  [ -n "$name" ] || continue
  [ -f "$series_dir/$name" ] || die "upstream_patch/$tag/series lists a missing patch: $name"
  patches+=("$series_dir/$name")
done < "$series_dir/series"
[ "${#patches[@]}" -gt 0 ] || die "upstream_patch/$tag/series lists no patch"
series_key=$(cat "$series_dir/series" "${patches[@]}" | sha256sum | cut -c1-16)

# 1. The release sdist (cached by series.py, sha256 checked against the index).
if [ -f "$cache/sdist/vllm-$version/.complete" ]; then skip; else phase "fetching the vLLM $tag sdist"; fi
sdist=$("$python" "$root/upstream_patch/series.py" sdist --lane "$lane")

# 1b. ascend: the vllm-ascend sdist, and the vLLM it pins must be the lane's.
if [ "$lane" = ascend ]; then
  ascend_version=$(tr -d '[:space:]' < "$root/.github/vllm-ascend.version")
  if [ -f "$cache/sdist/vllm_ascend-$ascend_version/.complete" ]; then skip; else phase "fetching the vllm-ascend $ascend_version sdist"; fi
  ascend_sdist=$("$python" "$root/upstream_patch/series.py" sdist --project vllm-ascend)
  ascend_base=$(tr -d '[:space:]' < "$ascend_sdist/.github/vllm-release-tag.commit" 2>/dev/null || true)
  [ "$ascend_base" = "$tag" ] || die "vllm-ascend $ascend_version pins vLLM '${ascend_base:-?}' (its .github/vllm-release-tag.commit) but .github/vllm-ascend-base.commit says $tag: set the base pin to its tag and re-sync upstream_patch/ for it (CONTRIBUTING.md)"
fi

# 2. The fork repository: pristine tag once, branch per series content.
repo=$cache/fork/vllm-$version
git_env=(env GIT_AUTHOR_NAME="vllm-ascend-balance fork lane" GIT_AUTHOR_EMAIL="fork-lane@localhost"
  GIT_COMMITTER_NAME="vllm-ascend-balance fork lane" GIT_COMMITTER_EMAIL="fork-lane@localhost"
  GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null)
git_() { "${git_env[@]}" git -C "$repo" -c core.autocrlf=false -c advice.detachedHead=false "$@"; }
head_key=$(git_ config --get vab.series-key 2>/dev/null || true)
# The tag is remade when the sdist it was made from is not this one (its
# stamp lists the files, series_tool/sdist.py): a tag made from a broken
# unpack would otherwise stay, and every series fail on it, for good.
sdist_key=$(sha256sum < "$sdist/.complete" | cut -c1-16)
if [ "$(git_ config --get vab.sdist-key 2>/dev/null || true)" != "$sdist_key" ]; then
  rm -rf "$repo"
  head_key=
fi
if git_ rev-parse -q --verify "refs/tags/$tag" >/dev/null 2>&1 && [ "$head_key" = "$series_key" ] \
  && git_ rev-parse -q --verify "refs/heads/$branch" >/dev/null; then
  skip
else
  phase "making the git branch $branch = $tag + git am of upstream_patch/$tag (${#patches[@]} patch(es)) at $repo"
fi
if ! git_ rev-parse -q --verify "refs/tags/$tag" >/dev/null 2>&1; then
  rm -rf "$repo"
  mkdir -p "$repo"
  # Everything the sdist holds, ignored paths included (-f): the tag is the
  # release tree as published, byte for byte.
  (cd "$sdist" && tar --exclude=./.complete -cf - .) | tar -C "$repo" -xf -
  git_ init -q -b main
  git_ add -A -f
  GIT_AUTHOR_DATE="@0 +0000" GIT_COMMITTER_DATE="@0 +0000" \
    git_ commit -q -m "vLLM $tag (release sdist)"
  git_ tag -a "$tag" -m "vLLM $tag, the release sdist from the package index"
  git_ config vab.sdist-key "$sdist_key"
fi
if [ "$head_key" != "$series_key" ] || ! git_ rev-parse -q --verify "refs/heads/$branch" >/dev/null; then
  git_ am --abort >/dev/null 2>&1 || true
  git_ checkout -q -f -B "$branch" "$tag"
  git_ clean -q -fdx
  if ! out=$(git_ am -q --keep-non-patch "${patches[@]}" 2>&1); then
    git_ am --abort >/dev/null 2>&1 || true
    die "upstream_patch/$tag does not apply to the $tag tree with git am ($(echo "$out" | head -1)): re-sync the $lane lane's series, see CONTRIBUTING.md"
  fi
  git_ config vab.series-key "$series_key"
fi
if [ "$want" = repo ]; then
  echo "$repo"
  exit 0
fi

# 3. The heavy venv. The torch pin and the build requirements are the
#    release's own ([build-system] requires of its pyproject.toml), so they
#    are read from the tree, never written here. ascend: vllm-ascend's pins
#    win where it has them (torch first: the cluster's torch-npu pairs with
#    the torch vllm-ascend pins, not with the one vLLM was built against).
build_reqs=$("$python" - "$repo/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
EOF
)
ascend_reqs=""
if [ "$lane" = ascend ]; then
  # What vllm-ascend's Python code needs at run time, as its requirements.txt
  # pins it. Left out: NPU-only packages (torch-npu, triton-ascend, the
  # memfabric/memcache KV pool), build-only tools, torchvision/torchaudio
  # (vision/audio models only) and arctic-inference (speculative decoding
  # plugin, not imported by the code the suite loads).
  ascend_reqs=$("$python" - "$ascend_sdist/requirements.txt" <<'EOF'
import re, sys
LEFT_OUT = {
    "torch-npu", "triton-ascend", "memfabric-hybrid", "memcache-hybrid",
    "cmake", "pip", "pybind11", "setuptools", "setuptools-scm", "wheel",
    "pandas-stubs", "torchvision", "torchaudio", "arctic-inference",
}
for line in open(sys.argv[1]):
    req = line.split("#")[0].strip()
    if not req:
        continue
    name = re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0]
    if re.sub(r"[-_.]+", "-", name).lower() not in LEFT_OUT:
        print(req)
EOF
)
  grep -qE '^torch\s*[=<>~]' <<< "$ascend_reqs" || die "vllm-ascend $ascend_version's requirements.txt has no torch pin: the ascend lane takes torch from it; check the sdist"
  # vllm-ascend's torch pin replaces the one in vLLM's build requirements.
  build_reqs=$(grep -vE '^torch\s*[=<>~]' <<< "$build_reqs" || true)
fi
key=$( { echo "vllm==$version empty py$pyver"; echo "$build_reqs"; echo "$ascend_reqs"; cat "$repo/requirements/common.txt" "$root/scripts/requirements-dev.txt"; } | sha256sum | cut -c1-12)
if [ "$lane" = ascend ]; then
  venv=$cache/venvs/vllm-$version-ascend-py$pyver-$key
else
  venv=$cache/venvs/vllm-$version-empty-py$pyver-$key
fi
if [ -f "$venv/.complete" ]; then
  skip
else
  phase "building the cached venv $venv (torch and build/runtime requirements, dev tools; several GB, a few minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  req_args=()
  while IFS= read -r req; do [ -n "$req" ] && req_args+=("$req"); done <<< "$build_reqs"$'\n'"$ascend_reqs"
  # One resolver run, so the build requirements (torch included), the
  # release's runtime requirements and the dev tools agree with each other.
  with_heartbeat "[lane $lane/$tag] installing the lane's requirements" \
    "$venv/bin/python" -m pip install -q "${req_args[@]}" \
    -r "$repo/requirements/common.txt" -r "$root/scripts/requirements-dev.txt" >&2 \
    || die "installing the $lane lane's requirements into $venv failed (pip's message above): check pip's index and the pins"
  touch "$venv/.complete"
fi

# 4. The branch, installed (not editable: what a cluster installs).
installed=$(cat "$venv/.fork-installed" 2>/dev/null || true)
want_installed="$series_key $(git_ rev-parse "refs/heads/$branch")"
if [ "$installed" = "$want_installed" ]; then
  skip
else
  phase "installing vLLM $branch into the venv (VLLM_TARGET_DEVICE=empty, about a minute)"
  git_ checkout -q -f "$branch"
  # The version reports the release the branch is based on (X.Y.Z+empty);
  # git describe would make it X.Y.(Z+1).devN, a release that does not exist.
  if ! VLLM_TARGET_DEVICE=empty SETUPTOOLS_SCM_PRETEND_VERSION=$version \
    with_heartbeat "[lane $lane/$tag] installing vLLM" \
    "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$repo" >"$venv/.fork-install.log" 2>&1; then
    tail -20 "$venv/.fork-install.log" >&2
    die "installing the $branch branch of $repo failed (log: $venv/.fork-install.log)"
  fi
  # The build rewrites vllm/_version.py and the sdist's egg-info: put the
  # tree back to the branch, so `git status` stays clean.
  git_ reset -q --hard
  git_ clean -q -fdx
  echo "$want_installed" > "$venv/.fork-installed"
fi

# 5. ascend: vllm-ascend's Python tree, and the NPU stubs in every process.
if [ "$lane" = ascend ]; then
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ascend_key="$ascend_version $(sha256sum "$ascend_sdist/vllm_ascend.egg-info/SOURCES.txt" | cut -c1-16)"
  if [ "$(cat "$venv/.ascend-installed" 2>/dev/null || true)" = "$ascend_key" ]; then
    skip
  else
    phase "installing vllm-ascend $ascend_version's Python tree (vllm_ascend/ + egg-info, no setup.py)"
    rm -rf "$site/vllm_ascend" "$site"/vllm_ascend*.egg-info
    cp -a "$ascend_sdist/vllm_ascend" "$site/vllm_ascend"
    cp -a "$ascend_sdist/vllm_ascend.egg-info" "$site/vllm_ascend-$ascend_version-py$pyver.egg-info"
    echo "$ascend_key" > "$venv/.ascend-installed"
  fi
  # Re-pointed on every call (last caller's checkout wins, as for the
  # editable install): the stubs are this checkout's tests/support/npu_stubs.py.
  # The .pth skips a link whose checkout is gone (a deleted clone): every
  # python start before the re-link would otherwise print a traceback.
  ln -sfn "$root/tests/support/npu_stubs.py" "$site/vab_npu_stubs.py"
  echo "import os; os.path.exists('$site/vab_npu_stubs.py') and __import__('vab_npu_stubs')" > "$site/vab_npu_stubs.pth"
fi
echo "$venv"
