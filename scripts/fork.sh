#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (or reuse) the fork lane: vLLM as a fork branch, installed the way
# NPU clusters install vLLM (a source tree with VLLM_TARGET_DEVICE=empty).
#   scripts/fork.sh            -> prints the venv path on stdout
#   scripts/fork.sh --repo     -> prints the fork repository path instead
#
# 1. The release sdist of the tag in .github/vllm-fork-base.commit, fetched
#    from pip's configured index (upstream_patch/series.py sdist).
# 2. A git repository of it: the pristine tree committed and tagged as the
#    release, then branch "balance-seam" = `git am` of upstream_patch/<tag>/
#    in `series` order (so `git log v<X.Y.Z>..balance-seam` is the series).
# 3. A cached venv keyed by what it holds (vLLM version, Python version, the
#    release's build requirements with its torch pin, its
#    requirements/common.txt, scripts/requirements-dev.txt), then the branch
#    installed into it with `pip install --no-build-isolation --no-deps`.
#    Steps 2's branch and the vLLM install are re-done (about a minute) only
#    when the series content changes; the heavy venv is not rebuilt.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
want=venv
case "${1:-}" in
  "") ;;
  --repo) want=repo ;;
  *) echo "usage: scripts/fork.sh [--repo]" >&2; exit 2 ;;
esac
pin_file=$root/.github/vllm-fork-base.commit
tag=$(tr -d '[:space:]' < "$pin_file")
version=${tag#v}
branch=balance-seam
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cache=${VAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-ascend-balance}
export VAB_CACHE=$cache
log() { echo "[lane fork/$tag] $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

# The series, in order (series.py's format: one name a line, # comments).
series_dir=$root/upstream_patch/$tag
[ -f "$series_dir/series" ] || die "the fork lane pins $tag (.github/vllm-fork-base.commit) but there is no upstream_patch/$tag/series: re-sync the series for this pin, see CONTRIBUTING.md"
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
sdist=$("$python" "$root/upstream_patch/series.py" sdist --lane fork)

# 2. The fork repository: pristine tag once, branch per series content.
repo=$cache/fork/vllm-$version
git_env=(env GIT_AUTHOR_NAME="vllm-ascend-balance fork lane" GIT_AUTHOR_EMAIL="fork-lane@localhost"
  GIT_COMMITTER_NAME="vllm-ascend-balance fork lane" GIT_COMMITTER_EMAIL="fork-lane@localhost"
  GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null)
git_() { "${git_env[@]}" git -C "$repo" -c core.autocrlf=false -c advice.detachedHead=false "$@"; }
if ! git_ rev-parse -q --verify "refs/tags/$tag" >/dev/null 2>&1; then
  log "making a git repository of the $tag sdist at $repo (pristine tree, tag $tag)"
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
fi
head_key=$(git_ config --get vab.series-key 2>/dev/null || true)
if [ "$head_key" != "$series_key" ] || ! git_ rev-parse -q --verify "refs/heads/$branch" >/dev/null; then
  log "branch $branch = $tag + git am of upstream_patch/$tag (${#patches[@]} patch(es))"
  git_ am --abort >/dev/null 2>&1 || true
  git_ checkout -q -f -B "$branch" "$tag"
  git_ clean -q -fdx
  if ! out=$(git_ am -q --keep-non-patch "${patches[@]}" 2>&1); then
    git_ am --abort >/dev/null 2>&1 || true
    die "upstream_patch/$tag does not apply to the $tag tree with git am ($(echo "$out" | head -1)): re-sync the fork lane's series, see CONTRIBUTING.md"
  fi
  git_ config vab.series-key "$series_key"
fi
if [ "$want" = repo ]; then
  echo "$repo"
  exit 0
fi

# 3. The heavy venv. The torch pin and the build requirements are the
#    release's own ([build-system] requires of its pyproject.toml), so they
#    are read from the tree, never written here.
build_reqs=$("$python" - "$repo/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
EOF
)
key=$( { echo "vllm==$version empty py$pyver"; echo "$build_reqs"; cat "$repo/requirements/common.txt" "$root/scripts/requirements-dev.txt"; } | sha256sum | cut -c1-12)
venv=$cache/venvs/vllm-$version-empty-py$pyver-$key
if [ ! -f "$venv/.complete" ]; then
  log "building cached venv $venv (torch as $tag pins it, build and runtime requirements, dev tools; several GB, a few minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  mapfile -t build_req_args <<< "$build_reqs"
  # One resolver run, so the build requirements (torch included), the
  # release's runtime requirements and the dev tools agree with each other.
  "$venv/bin/python" -m pip install -q "${build_req_args[@]}" \
    -r "$repo/requirements/common.txt" -r "$root/scripts/requirements-dev.txt" >&2
  touch "$venv/.complete"
fi

# 4. The branch, installed (not editable: what a cluster installs).
installed=$(cat "$venv/.fork-installed" 2>/dev/null || true)
want_installed="$series_key $(git_ rev-parse "refs/heads/$branch")"
if [ "$installed" != "$want_installed" ]; then
  log "installing $branch into the venv (VLLM_TARGET_DEVICE=empty, about a minute)"
  git_ checkout -q -f "$branch"
  # The version reports the release the branch is based on (X.Y.Z+empty);
  # git describe would make it X.Y.(Z+1).devN, a release that does not exist.
  if ! VLLM_TARGET_DEVICE=empty SETUPTOOLS_SCM_PRETEND_VERSION=$version \
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
echo "$venv"
