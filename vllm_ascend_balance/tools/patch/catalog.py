# SPDX-License-Identifier: Apache-2.0
"""The series this package carries: where they are, which one fits a vLLM.

One ``upstream_patch/vX.Y.Z/`` folder per vLLM release: a ``series`` file
(patch names in order, ``#`` comments) and the ``git format-patch`` files it
names. Standard library only; never imports vLLM.

Errors: :class:`SeriesError`, one line saying what to do.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# Where a maintainer rebuilds a series for another release (docs site page
# and the repository file that holds the same runbook).
RESYNC_RUNBOOK = (
    "the re-sync runbook in docs/upstream-patch.md (CONTRIBUTING.md in a checkout)"
)
_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


class SeriesError(Exception):
    """A one-line, user-facing reason the command cannot proceed."""


def series_root() -> Path:
    """The folder holding the ``vX.Y.Z/`` series folders.

    The package's own data (a wheel or sdist install) first, then the
    checkout the package is imported from (editable install, ``PYTHONPATH``).
    """
    here = Path(__file__).resolve().parents[2]  # the package folder
    for candidate in (here / "upstream_patch", here.parent / "upstream_patch"):
        if any(candidate.glob("v*/series")):
            return candidate
    raise SeriesError(
        f"no patch series found next to {here} (neither {here}/upstream_patch/ "
        "nor a checkout's upstream_patch/): reinstall vllm-ascend-balance from "
        "its wheel or sdist, which carry them"
    )


def _tag_key(tag: str) -> tuple[int, int, int]:
    match = _TAG.match(tag)
    assert match is not None, tag
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch)


def available_series(root: Path | None = None) -> list[str]:
    """Release tags with a series under ``root`` (default: :func:`series_root`),
    oldest first."""
    root = root or series_root()
    tags = [p.parent.name for p in root.glob("v*/series") if _TAG.match(p.parent.name)]
    return sorted(tags, key=_tag_key)


def release_of(version: str) -> str | None:
    """``vX.Y.Z`` of an installed version string (``0.27.1+cpu``,
    ``0.33.0+empty``, ``0.28.0rc1.dev12+g1234``), or None when it has no
    X.Y.Z."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)", version)
    return f"v{match.group(1)}.{match.group(2)}.{match.group(3)}" if match else None


def nearest_series(version: str, tags: list[str]) -> str | None:
    """The series closest to ``version``: the newest one not newer than it,
    else the oldest (a series for an older release is the usual starting
    point of a re-sync)."""
    release = release_of(version)
    if not tags:
        return None
    if release is None:
        return tags[-1]
    older = [t for t in tags if _tag_key(t) <= _tag_key(release)]
    return older[-1] if older else tags[0]


def read_series(series_dir: Path) -> list[Path]:
    """The patch files ``series_dir/series`` lists, in order."""
    series = series_dir / "series"
    names = [
        line.strip()
        for line in series.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    patches = [series_dir / name for name in names]
    missing = [p.name for p in patches if not p.is_file()]
    if missing or not patches:
        raise SeriesError(
            f"upstream_patch/{series_dir.name}/series lists missing patches: {missing}"
        )
    return patches


def series_digest(patches: list[Path]) -> str:
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes())
    return digest.hexdigest()


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


def normalize_tag(wanted: str) -> str:
    """``--series`` as a tag: ``0.27.1`` is taken for ``v0.27.1`` (the
    version as vLLM and pip spell it); anything else is returned as given."""
    return f"v{wanted}" if _TAG.match(f"v{wanted}") else wanted


def tag_of_digest(digest: str | None, root: Path | None = None) -> str | None:
    """The carried series whose :func:`series_digest` is ``digest`` (what a
    state folder records as applied), or None: none, or no longer carried
    as it was applied."""
    if digest is None:
        return None
    root = root or series_root()
    for tag in available_series(root):
        if series_digest(read_series(root / tag)) == digest:
            return tag
    return None


def _no_series(version: str, tags: list[str]) -> SeriesError:
    release = release_of(version) or "vX.Y.Z"
    nearest = nearest_series(version, tags)
    return SeriesError(
        f"this vllm-ascend-balance carries no series for vLLM {version} (it has "
        f"{', '.join(tags)}); the nearest is {nearest}: try it with "
        f"`vllm-ascend-balance patch-vllm --series {nearest}` (written only if "
        f"it fits), or make {release}'s from a checkout: `python "
        f"upstream_patch/series.py resync --tree <vLLM {release} source> --tag "
        f"{release}`, see {RESYNC_RUNBOOK}"
    )


def pick_series(
    version: str, wanted: str | None, recorded: str | None
) -> tuple[str, list[Path]]:
    """(tag, its patches) to check or apply on a vLLM of ``version``:
    ``wanted`` (``--series``), else ``recorded`` (the series applied and still
    in the files), else the version's own. Raises :class:`SeriesError` for a
    ``wanted`` not carried, or no series for the version (naming the nearest
    and the re-sync runbook)."""
    tags = available_series()
    wanted = None if wanted is None else normalize_tag(wanted)
    tag = wanted or recorded or release_of(version)
    if wanted is not None and wanted not in tags:
        raise SeriesError(
            f"--series {wanted}: no such series (this package has {', '.join(tags)})"
        )
    if tag not in tags:
        raise _no_series(version, tags)
    assert tag is not None
    return tag, read_series(series_root() / tag)
