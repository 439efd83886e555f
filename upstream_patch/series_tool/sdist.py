# SPDX-License-Identifier: Apache-2.0
"""Release sdists from the package index pip is configured with: downloaded
once into the cache, sha256-checked against the index, unpacked."""

from __future__ import annotations

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
