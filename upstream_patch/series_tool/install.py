# SPDX-License-Identifier: Apache-2.0
"""Apply, revert and check a lane's series: on the installed vLLM (or a
``--site`` directory), or ``git apply --check`` against a source tree."""

from __future__ import annotations

from pathlib import Path

from vllm_ascend_balance.tools.patch.series import (
    SeriesError,
    applied_digest,
    apply_series,
    git_apply,
    installed_vllm,
    revert_series,
    series_digest,
)

from .lanes import RUNBOOK, lane_tag, series_patches, source_tree
from .sdist import sdist


def apply(
    lane: str, quiet: bool = False, site: Path | None = None, root: Path | None = None
) -> None:
    tag = lane_tag(lane, root)
    patches = series_patches(tag, root, lane)
    site, version = installed_vllm(site)
    if f"v{version}" != tag:
        raise SeriesError(
            f"installed vLLM is {version} but the {lane} lane pins {tag}: "
            f"this lane's venv is built by scripts/lane.sh {lane}; to patch this "
            f"vLLM by its own version, run `vllm-ascend-balance patch-vllm`"
        )
    message = apply_series(site, tag, patches, version)
    if not quiet:
        print(message)


def revert(
    lane: str, quiet: bool = False, site: Path | None = None, root: Path | None = None
) -> None:
    lane_tag(lane, root)
    site, _ = installed_vllm(site)
    reverted = revert_series(site)
    if not quiet:
        print(
            f"reverted the series in {site / 'vllm'}"
            if reverted
            else "series not applied; nothing to revert"
        )


def status(lane: str, site: Path | None = None, root: Path | None = None) -> bool:
    tag = lane_tag(lane, root)
    site, version = installed_vllm(site)
    if f"v{version}" != tag:
        print(
            f"lane {lane}: pin {tag}, but the installed vLLM is {version}: "
            f"this lane's series does not apply to it"
        )
        return False
    applied = applied_digest(site) == series_digest(series_patches(tag, root, lane))
    print(
        f"lane {lane}: pin {tag}, installed vLLM {version}, series applied: {applied}"
    )
    return applied


def check_tag(tag: str, tree: Path, root: Path | None = None) -> None:
    """``git apply --check`` of ``upstream_patch/<tag>/`` on ``tree``."""
    patches = series_patches(tag, root)
    tree = source_tree(tree)
    result = git_apply(tree, patches, "--check")
    if result.returncode != 0:
        first = result.stderr.strip().splitlines()[0] if result.stderr else ""
        raise SeriesError(
            f"upstream_patch/{tag}/series does not apply to {tree} ({first}): "
            f"re-sync it with `series.py resync --tag {tag}`, see {RUNBOOK}"
        )
    print(f"upstream_patch/{tag}: {len(patches)} patch(es) apply cleanly to {tree}")


def check(lane: str, tree: Path | None = None, root: Path | None = None) -> None:
    tag = lane_tag(lane, root)
    patches = series_patches(tag, root, lane)
    tree = source_tree(tree) if tree else sdist(lane, root)
    result = git_apply(tree, patches, "--check")
    if result.returncode != 0:
        first = result.stderr.strip().splitlines()[0] if result.stderr else ""
        raise SeriesError(
            f"upstream_patch/{tag}/series no longer applies to the {tag} source "
            f"tree ({first}): re-sync the {lane} lane's series, see {RUNBOOK}"
        )
    print(f"upstream_patch/{tag}: {len(patches)} patch(es) apply cleanly to {tree}")
