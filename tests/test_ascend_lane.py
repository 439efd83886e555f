# SPDX-License-Identifier: Apache-2.0
"""Smoke test of the ascend lane: vllm-ascend's real Python code installed
next to the vLLM release it pins (scripts/fork.sh --lane ascend).

Runs wherever ``vllm_ascend`` is installed; elsewhere it is skipped. What is
mocked: only the NPU-only modules of ``tests/support/npu_stubs.py`` (no NPU,
CANN runtime or Mooncake library exists here), loaded by a ``.pth`` in the
lane venv. Checks that install with vLLM's own machinery: entry points,
platform resolution, vllm-ascend's balance patch, spawned processes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import multiprocessing
import subprocess
import sys
import textwrap

import pytest

from tests.support.lanes import ascend_version

pytestmark = [
    pytest.mark.lane_scope("ascend"),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm_ascend") is None,
        reason="vllm-ascend is not installed in this venv (the ascend lane installs "
        "it: scripts/test --lane ascend)",
    ),
]

STUBS = "vab_npu_stubs"  # the name the lane's .pth imports


def _run(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter of this venv: importing vllm-ascend's
    patches swaps vLLM classes for the whole process, which must not leak into
    the rest of the suite."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_installed_vllm_ascend_is_the_pinned_release() -> None:
    assert importlib.metadata.version("vllm_ascend") == ascend_version()
    import vllm_ascend._version

    assert vllm_ascend._version.__version__ == ascend_version()


def test_entry_points_are_visible_to_importlib_metadata() -> None:
    """vLLM finds plugins through importlib.metadata; the copied egg-info
    must expose vllm-ascend's platform and general plugins."""
    dist = importlib.metadata.distribution("vllm_ascend")
    own = {(ep.group, ep.name, ep.value) for ep in dist.entry_points}
    groups = {group for group, _, _ in own}
    assert {"vllm.platform_plugins", "vllm.general_plugins"} <= groups
    for group in ("vllm.platform_plugins", "vllm.general_plugins"):
        visible = {
            (ep.group, ep.name, ep.value)
            for ep in importlib.metadata.entry_points(group=group)
        }
        assert {entry for entry in own if entry[0] == group} <= visible


def test_platform_plugin_resolves_to_vllm_ascend() -> None:
    """vLLM's own platform resolution picks the platform class vllm-ascend's
    platform plugin names."""
    (plugin,) = (
        ep
        for ep in importlib.metadata.entry_points(group="vllm.platform_plugins")
        if ep.value.startswith("vllm_ascend")
    )
    qualname = plugin.load()()
    assert qualname
    from vllm.platforms import current_platform

    platform_cls = type(current_platform)
    assert f"{platform_cls.__module__}.{platform_cls.__qualname__}" == qualname


def test_balance_patch_installs_its_scheduler() -> None:
    """vllm-ascend's patch_balance_schedule imports on this vLLM and makes its
    BalanceScheduler the module-level Scheduler (in a child process)."""
    result = _run(
        """
        import vllm.v1.core.sched.scheduler as sched
        original = sched.Scheduler
        from vllm_ascend.patch.platform import patch_balance_schedule as patch
        assert sched.Scheduler is patch.BalanceScheduler, sched.Scheduler
        assert issubclass(patch.BalanceScheduler, original)
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def _child_state(queue: multiprocessing.Queue) -> None:
    import torch_npu

    from tests.support.npu_stubs import is_stub

    queue.put((STUBS in sys.modules, is_stub(torch_npu)))


def test_stubs_are_active_in_spawned_processes() -> None:
    """vLLM starts engines and workers with the spawn method: the stubs must
    be there without the parent's help (the .pth, not a conftest)."""
    assert STUBS in sys.modules
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_state, args=(queue,))
    child.start()
    try:
        loaded, stubbed = queue.get(timeout=120)
    finally:
        child.join(timeout=60)
    assert child.exitcode == 0
    assert loaded, f"{STUBS} is not loaded in a spawned process"
    assert stubbed, "torch_npu in a spawned process is not the stand-in"
