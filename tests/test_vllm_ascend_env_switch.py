# SPDX-License-Identifier: Apache-2.0
"""vllm-ascend main's deprecated environment switch
(``VLLM_ASCEND_BALANCE_SCHEDULING=1``, nothing else) in a real vLLM DP 2
deployment with vllm-ascend's own platform patches
(:mod:`tests.support.ascend_dp_run`), gathers counted on every rank.

On main, engine cores started by ``spawn`` (vLLM's CPU platform, and on NPU
``VLLM_WORKER_MULTIPROC_METHOD=spawn``, which vllm-ascend's e2e server
harness sets) build vLLM's ``DPEngineCoreProc``: vllm-ascend's
``_balance_run_engine_core`` asks ``_balance_scheduling_enabled``, whose
fallback before ``AscendConfig`` exists in that process reads
``additional_config`` only. The scheduler, built later with ``AscendConfig``,
reads the switch as on; no rank gathers, so its gate never fires. The
controls: the nested key in the same deployment gathers once per busy-loop
sync on every rank (the count can see gathers), and engine cores started by
``fork`` inherit the front-end's ``AscendConfig`` and gather too (the bug is
the spawned engine core's). With patch 0 of
``downstream_patch/vllm-ascend/main/`` applied to a scratch clone the switch
reaches the spawned engine core: one gather per sync on every rank.

Runs on the release lane (the vLLM vllm-ascend main pins) with the checkout
in ``$VAB_VLLM_ASCEND_SRC``; skipped without it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import vllm_ascend_src
from tests.support.ascend_dp_run import DP_SIZE, ENV_SWITCH, run_dp2
from tests.support.lanes import REPO_ROOT

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # one vLLM DP 2 deployment per case, ~30 s each
    pytest.mark.multiproc,
]

UPSTREAM_ENGINE = "vllm.v1.engine.core.DPEngineCoreProc"
BALANCE_ENGINE = (
    "vllm_ascend.patch.platform.patch_balance_schedule.BalanceDPEngineCoreProc"
)
ENV_ONLY: dict[str, Any] = {"env": {ENV_SWITCH: "1"}, "additional": {}}
NESTED_KEY: dict[str, Any] = {
    "env": {},
    "additional": {"scheduler_config": {"enable_balance_scheduling": True}},
}


def _assert_gathers_every_sync(ranks: list[dict[str, Any]]) -> None:
    assert len(ranks) == DP_SIZE
    for rank in ranks:
        assert rank["engine_cls"] == BALANCE_ENGINE, rank
        assert rank["balance_enabled"] is True, rank
        assert rank["syncs"] > 0 and rank["gathers"] == rank["syncs"], rank


def test_main_env_switch_never_reaches_a_spawned_engine_core(tmp_path: Path) -> None:
    """The bug: the scheduler reads balance as on, the engine core as off."""
    ranks = run_dp2(vllm_ascend_src.require(), tmp_path, start="spawn", **ENV_ONLY)
    assert len(ranks) == DP_SIZE
    for rank in ranks:
        assert rank["engine_cls"] == UPSTREAM_ENGINE, rank
        assert rank["scheduler_cls"] == "BalanceScheduler", rank
        assert rank["balance_enabled"] is True, rank
        assert rank["busy_steps"] > 0 and rank["syncs"] > 0, rank
        assert rank["gathers"] == 0, rank


def test_control_main_nested_key_gathers_every_sync(tmp_path: Path) -> None:
    ranks = run_dp2(vllm_ascend_src.require(), tmp_path, start="spawn", **NESTED_KEY)
    _assert_gathers_every_sync(ranks)


def test_control_main_env_switch_reaches_a_forked_engine_core(tmp_path: Path) -> None:
    ranks = run_dp2(vllm_ascend_src.require(), tmp_path, start="fork", **ENV_ONLY)
    _assert_gathers_every_sync(ranks)


def _patch0_tree(tmp_path: Path) -> Path:
    """The checkout with patch 0 of the series applied, in a scratch clone."""
    sys.path.insert(0, str(REPO_ROOT / "downstream_patch"))
    try:
        import apply_main  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO_ROOT / "downstream_patch"))
    tree = tmp_path / "vllm-ascend"
    count = apply_main.TREES["patch0"]
    apply_main.make_tree(vllm_ascend_src.require(), tree, apply_main.series()[:count])
    return tree


def test_patch0_env_switch_reaches_a_spawned_engine_core(tmp_path: Path) -> None:
    ranks = run_dp2(_patch0_tree(tmp_path), tmp_path / "run", start="spawn", **ENV_ONLY)
    _assert_gathers_every_sync(ranks)
