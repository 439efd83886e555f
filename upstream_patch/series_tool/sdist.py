# SPDX-License-Identifier: Apache-2.0
"""Release sdists from the package index pip is configured with: downloaded
once into the cache, sha256-checked against the index, unpacked.

Several processes share the cache (the release lane's two shards, the fork
lane's build, a second checkout): one fetch of a given sdist at a time
(an exclusive lock per sdist under ``$VAB_CACHE/locks``), unpacked beside the
cache and renamed into place with its ``.complete`` stamp already inside, so
no process ever reads a tree another one is deleting or still writing. The
stamp lists the tree's files; a tree missing one of them (an older unlocked
fetch, a hand edit) is fetched again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from .lanes import SeriesError, ascend_version, cache_dir, lane_tag


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
    if tree := _complete_tree(cache, candidates):
        return tree
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"sdist-{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Another process may have fetched it while this one waited.
        if tree := _complete_tree(cache, candidates):
            return tree
        cache.mkdir(parents=True, exist_ok=True)
        return _download_and_unpack(project, version, cache, candidates)


#: The stamp a whole unpacked sdist carries: its files, one relative path
#: per line.
STAMP = ".complete"


def _files(tree: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(top, name), tree)
        for top, _, names in os.walk(tree)
        for name in names
    )


def _complete_tree(cache: Path, candidates: list[str]) -> Path | None:
    """The unpacked tree of one of ``candidates`` if its stamp is there and
    every file it lists still is (files added, e.g. ``__pycache__``, are
    fine); else None."""
    for name in candidates:
        tree = cache / name[: -len(".tar.gz")]
        try:
            listed = (tree / STAMP).read_text().splitlines()
        except OSError:
            continue
        if listed and all(os.path.isfile(tree / f) for f in listed):
            return tree
    return None


def _download_and_unpack(
    project: str, version: str, cache: Path, candidates: list[str]
) -> Path:
    """Download ``candidates``' sdist from the index, check its sha256, unpack
    it beside ``cache`` and rename it into place, stamped (caller holds the
    lock)."""
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
    with tempfile.TemporaryDirectory(dir=cache, prefix=".unpack-") as staging:
        archive = Path(staging) / filename
        with (
            open(archive, "wb") as out,
            urllib.request.urlopen(entry["url"], timeout=600) as response,
        ):
            shutil.copyfileobj(response, out)
        expected = entry.get("hashes", {}).get("sha256")
        actual = hashlib.sha256(archive.read_bytes()).hexdigest()
        if expected and actual != expected:
            raise SeriesError(f"{filename}: sha256 {actual} does not match the index")
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        archive.unlink()
        unpacked = Path(staging) / tree.name
        if not unpacked.is_dir():
            raise SeriesError(f"{filename} does not unpack to {tree.name}/")
        (unpacked / STAMP).write_text("\n".join(_files(unpacked)) + "\n")
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(unpacked, tree)
    return tree


def sdist(lane: str, root: Path | None = None) -> Path:
    """Path of the unpacked release sdist of the lane (downloaded once, cached)."""
    return fetch_sdist("vllm", lane_tag(lane, root)[1:])


def ascend_sdist(root: Path | None = None) -> Path:
    """Path of the unpacked vllm-ascend sdist the ascend lane installs."""
    return fetch_sdist("vllm-ascend", ascend_version(root))
