# SPDX-License-Identifier: Apache-2.0
"""Lanes and their pins: which vLLM release each lane pins (``.github/``),
where its series lives (``upstream_patch/<tag>/``) and the cache folder.

The apply/revert machinery is the package's
:mod:`vllm_ascend_balance.tools.patch.series`
(``vllm-ascend-balance patch-vllm`` uses the same code), imported from this
checkout whatever is installed (the package's ``__init__`` puts it first on
``sys.path``)."""

from __future__ import annotations

import os
from pathlib import Path

from vllm_ascend_balance.tools.patch.series import SeriesError, read_series

from .constants import SCHEDULER_REL

#: Where a maintainer reads how to re-sync a series (the runbook).
RUNBOOK = "docs/upstream-patch.md"

ROOT = Path(__file__).resolve().parents[2]

PATCH_DIR = ROOT / "upstream_patch"
PIN_FILES = {
    "release": ROOT / ".github" / "vllm-release-tag.commit",
    "main": ROOT / ".github" / "vllm-main-verified.commit",
    "fork": ROOT / ".github" / "vllm-fork-base.commit",
    "ascend": ROOT / ".github" / "vllm-ascend-base.commit",
}
# The vllm-ascend release the ascend lane installs (a version, not a tag).
ASCEND_VERSION_FILE = ROOT / ".github" / "vllm-ascend.version"

# Series shipped though no lane pins their tag: tag -> why it is kept.
KEPT_TAGS = {
    "v0.29.0": "the vLLM vllm-ascend main pins (vllm-ascend #16393)",
    "v0.33.0": "the fork lane's previous pin, the newest release before 0.34",
}


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
            f"upstream_patch/{tag}/ for this pin, see {RUNBOOK}"
        )
    return read_series(series.parent)


def ascend_version(root: Path | None = None) -> str:
    """The vllm-ascend release pinned in ``.github/vllm-ascend.version``."""
    pin = (root or ROOT) / ASCEND_VERSION_FILE.relative_to(ROOT)
    version = "".join(pin.read_text().split())
    if not version or version.startswith("v"):
        raise SeriesError(
            f"{pin.relative_to(root or ROOT)} must hold a version like X.Y.Z[.postN]"
        )
    return version


def source_tree(tree: Path, needed: tuple[str, ...] = (SCHEDULER_REL,)) -> Path:
    """``tree``, checked to be a vLLM source tree: a directory holding
    ``needed`` (``check`` asks for the scheduler only: whether the series
    fits the rest is ``git apply``'s answer; ``resync`` reads all three).

    Raises:
        SeriesError: one line naming the tree and the first file missing.
    """
    tree = Path(tree)
    if not tree.is_dir():
        raise SeriesError(f"--tree {tree}: no such directory (a vLLM source tree)")
    missing = [rel for rel in needed if not (tree / rel).is_file()]
    if missing:
        raise SeriesError(f"{tree} is not a vLLM source tree (missing {missing[0]})")
    return tree
