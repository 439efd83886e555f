# SPDX-License-Identifier: Apache-2.0
"""Differential against vllm-ascend main's real ``BalanceScheduler`` (from the
checkout in ``$VAB_VLLM_ASCEND_SRC``, .github/vllm-ascend-main.commit) on the
vLLM it pins (0.27.1, the release lane) vs this package's gate composed onto
upstream's ``Scheduler``/``AsyncScheduler``, stepped through the same
hypothesis-driven traces (the machine of ``test_vllm_ascend_differential.py``,
which does this for vllm-ascend 0.23.0.post1 on the ascend lane).

Before every step both gates gather the same scripted DP vector through their
real gathers (``dist.all_gather`` replaced): the gate decisions must be
identical on every step. Every field of both ``SchedulerOutput``s, the
``EngineCoreOutputs`` (scheduler stats included) and the scheduler state must
agree too, except the paths in :data:`DRIFT`: each is vllm-ascend's copied
``schedule()`` departing from upstream, pinned below by a minimal
reproduction that runs upstream's ungated ``Scheduler`` on the same inputs
and shows it agrees with this package (``test_drift_*``). On a vllm-ascend
tree whose ``BalanceScheduler`` gates through vLLM's seam (patch 1 of
``downstream_patch/vllm-ascend/main/``) no copy runs and :data:`DRIFT` is
empty: the outputs must then be identical everywhere.

Negative control: a gate that freezes one request early (``max >= cap - 1``)
makes the same machine fail.

vllm-ascend's NPU-only modules are the suite's stand-ins
(tests/support/npu_stubs.py); its patch module is executed by file path, so
the rest of its platform patches are not applied to this process.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.support import vllm_ascend_src

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # two hypothesis state machines over real schedulers
]

SRC = vllm_ascend_src.activate_or_skip()

import vllm.v1.core.sched.scheduler as scheduler_mod  # noqa: E402
import vllm.v1.engine.core as engine_core_mod  # noqa: E402
from hypothesis.stateful import rule  # noqa: E402

from tests.support import differential  # noqa: E402
from tests.support.differential import (  # noqa: E402
    BLOCK_SIZE,
    PREFIXES,
    DifferentialMachine,
    Sides,
    assert_caught,
    balance_config,
    machine_for,
    off_by_one,
    prompt,
    request_shapes,
    run_differential,
)
from tests.support.model_outputs import fake_model_output  # noqa: E402
from tests.support.original_scheduler import async_scheduler_over  # noqa: E402
from tests.support.vllm_objects import make_request  # noqa: E402
from vllm_ascend_balance.gate.scheduler import SEAM  # noqa: E402


def _load_patch_module() -> Any:
    """vllm-ascend's ``patch_balance_schedule.py`` executed by file path (its
    package ``vllm_ascend.patch.platform`` would apply every platform patch).
    Its import-time swaps (the module-level ``Scheduler``,
    ``EngineCoreProc.run_engine_core``) are put back at once."""
    saved = (
        scheduler_mod.Scheduler,
        engine_core_mod.EngineCoreProc.__dict__["run_engine_core"],
        engine_core_mod.DPEngineCoreProc,
    )
    path = SRC / "vllm_ascend" / "patch" / "platform" / "patch_balance_schedule.py"
    spec = importlib.util.spec_from_file_location("vab_vllm_ascend_main_balance", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        scheduler_mod.Scheduler = saved[0]
        engine_core_mod.EngineCoreProc.run_engine_core = saved[1]
        engine_core_mod.DPEngineCoreProc = saved[2]
    return module


ascend = _load_patch_module()
ASCEND = ascend.BalanceScheduler
UPSTREAM = ASCEND.__bases__[0]
UPSTREAM_ASYNC = async_scheduler_over("vab_main_diff_upstream_async", UPSTREAM)
ASCEND_ASYNC = async_scheduler_over("vab_main_diff_ascend_async", ASCEND)
SIDES = Sides(ASCEND, ASCEND_ASYNC, UPSTREAM, UPSTREAM_ASYNC)
THROTTLE = SIDES.throttle
# Whether vllm-ascend's copied schedule() is what runs with balance on (main
# as it is), or upstream's through the seam (patch 1 on a vLLM with the seam).
COPY_RUNS = "schedule" in vars(ASCEND) and not getattr(
    ascend, "_HAS_ADMISSION_SEAM", False
)

# Known drift of the copy: output/state paths the differential leaves out of
# the comparison, each pinned by a test_drift_* below with its reproduction.
DRIFT: frozenset[str] = (
    frozenset(
        {
            # Reset preemptions not reported (test_drift_reset_preemptions_*).
            "SchedulerOutput.preempted_req_ids",
            # Prefix-cache counters (test_drift_prefix_cache_stats_*).
            "EngineCoreOutputs.scheduler_stats.prefix_cache_stats",
        }
    )
    if COPY_RUNS
    else frozenset()
)
# The copy defers a throttled full prefix hit (and a 1-token prompt) that
# upstream admits (test_drift_throttled_step_defers_full_prefix_hit): where the
# copy runs, throttled steps are drawn only without prefix caching, and prompts
# have at least 2 tokens, where the two rules agree.
THROTTLE_NEEDS_NO_PREFIX_CACHE = COPY_RUNS


class MainDifferential(DifferentialMachine):
    """The machine with main's drift left out and its throttle rule kept to
    where the copy and upstream agree."""

    drift = DRIFT

    def may_throttle(self) -> bool:
        return self.throttle and not (
            THROTTLE_NEEDS_NO_PREFIX_CACHE and self.prefix_caching
        )

    @rule(shapes=request_shapes(min_tail=2))
    def add_requests(self, shapes: list[tuple[int, int, int, int]]) -> None:
        self.add(shapes)


def test_sides_are_what_they_claim() -> None:
    """vllm-ascend's class comes from the checkout, its decision reads the
    setting, and loading it left the process as it was."""
    assert Path(ascend.__file__).is_relative_to(SRC)
    assert ASCEND.__module__ == ascend.__name__
    assert ASCEND is not UPSTREAM and UPSTREAM is scheduler_mod.Scheduler
    assert ASCEND_ASYNC.__mro__[1] is ASCEND
    assert ascend._balance_scheduling_enabled(balance_config())
    # Which of its two paths runs: the copy (main as it is, or patch 1 on a
    # vLLM without the seam) or upstream's schedule() through the seam.
    if not COPY_RUNS:
        assert hasattr(UPSTREAM, SEAM) and SEAM in vars(ASCEND)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_vllm_ascend_main_equals_gate_over_upstream(asynchronous: bool) -> None:
    run_differential(
        machine_for(MainDifferential, SIDES, SIDES.ours(asynchronous), asynchronous),
        note=f" drift: {sorted(DRIFT)}",
    )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_negative_control_off_by_one_gate_is_caught(asynchronous: bool) -> None:
    assert_caught(
        machine_for(
            MainDifferential, SIDES, off_by_one(SIDES.ours(asynchronous)), asynchronous
        )
    )


# --------------------------------------------------------------------------
# Drift of the copy, pinned: minimal reproductions (three schedulers on the
# same inputs: vllm-ascend's BalanceScheduler, this package's gate, upstream
# without a gate; both gates open)
# --------------------------------------------------------------------------

needs_copy = pytest.mark.skipif(
    not COPY_RUNS, reason="vllm-ascend's BalanceScheduler runs upstream's schedule()"
)


def trio(asynchronous: bool = False, **config: Any) -> tuple[Any, Any, Any]:
    """(vllm-ascend's BalanceScheduler, this package's gate, upstream without
    a gate)."""
    return differential.trio(SIDES, asynchronous, **config)


def _add(scheds: tuple[Any, ...], rid: str, tokens: list[int], max_tokens: int) -> None:
    for sched in scheds:
        sched.add_request(
            make_request(
                rid, len(tokens), max_tokens, BLOCK_SIZE, prompt_token_ids=tokens
            )
        )


def _step(scheds: tuple[Any, ...], step: int, **kwargs: Any) -> list[Any]:
    outs = [sched.schedule(**kwargs) for sched in scheds]
    for sched, out in zip(scheds, outs, strict=True):
        sched.update_from_output(out, fake_model_output(sched, out, step))
    return outs


@needs_copy
def test_drift_prefix_cache_stats_never_recorded() -> None:
    """Upstream records prefix-cache queries and hits when it admits a request
    (``kv_cache_manager.record_prefix_cache_stats``, "so unscheduled lookups
    are not counted"); the copy predates that split and never records them:
    with balance on, vllm-ascend's prefix-cache hit rate reads 0 queries. Two
    32-token prompts sharing 16 tokens, prefix caching on."""
    scheds = trio(enable_prefix_caching=True, max_num_seqs=4, num_blocks=64)
    shared = PREFIXES[0][:16]
    _add(scheds, "r0", shared + prompt(-1, 0, 16, 1), 2)
    stats = []
    for step in range(3):
        if step == 1:
            _add(scheds, "r1", shared + prompt(-1, 0, 16, 2), 2)
        outs = [sched.schedule() for sched in scheds]
        for sched, out in zip(scheds, outs, strict=True):
            eco = sched.update_from_output(out, fake_model_output(sched, out, step))
            if step == 1:
                stats.append(
                    next(iter(eco.values())).scheduler_stats.prefix_cache_stats
                )
    copy, ours, upstream = ((s.queries, s.hits) for s in stats)
    assert upstream == (32, 16), "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == (0, 0)


@needs_copy
def test_drift_reset_preemptions_not_reported() -> None:
    """``reset_prefix_cache(reset_running_requests=True)`` between steps
    preempts every running request; upstream reports those ids in the next
    ``SchedulerOutput.preempted_req_ids`` (``reset_preempted_req_ids``, which
    the worker needs to drop their state), the copy reports only what its own
    step preempted: nothing."""
    scheds = trio(max_num_seqs=4, num_blocks=64)
    _add(scheds, "r0", prompt(-1, 0, 8, 0), 8)
    _add(scheds, "r1", prompt(-1, 0, 8, 1), 8)
    _step(scheds, 0)
    for sched in scheds:
        assert sched.reset_prefix_cache(reset_running_requests=True)
    copy, ours, upstream = (set(out.preempted_req_ids) for out in _step(scheds, 1))
    assert upstream == {"r0", "r1"}, "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == set()


@needs_copy
def test_drift_cap_ignores_parked_streaming_sessions() -> None:
    """Upstream's admission cap counts paused streaming-input sessions
    (``num_waiting_for_streaming_input``: not in ``running`` but holding a
    model-runner slot); the copy compares ``len(running)`` alone. With
    ``max_num_seqs=2``, one request running and one session parked, upstream
    admits nothing, the copy admits a second request: three slots in use.
    The counter is set as the streaming-session path does when a session
    parks (``_update_request_as_session``)."""
    scheds = trio(max_num_seqs=2, num_blocks=64)
    _add(scheds, "r0", prompt(-1, 0, 8, 0), 8)
    _step(scheds, 0)
    for sched in scheds:
        sched.num_waiting_for_streaming_input = 1
    _add(scheds, "r1", prompt(-1, 0, 8, 1), 8)
    copy, ours, upstream = (
        [r.req_id for r in out.scheduled_new_reqs] for out in _step(scheds, 1)
    )
    assert upstream == [], "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == ["r1"]


@needs_copy
@pytest.mark.skipif(not THROTTLE, reason="this schedule() has no throttle_prefills")
def test_drift_throttled_step_defers_full_prefix_hit() -> None:
    """On a throttled step (``throttle_prefills=True``, a decode running)
    upstream defers only requests with prefill compute left
    (``num_computed_tokens < num_tokens - 1`` after the prefix-cache lookup)
    and admits a full prefix hit (one token to compute); the copy defers
    every request it has not computed yet (``request.num_computed_tokens ==
    0``), so the full hit waits for a cadence-aligned step (as does a 1-token
    prompt, which upstream admits)."""
    scheds = trio(enable_prefix_caching=True, max_num_seqs=4, num_blocks=64)
    tokens = PREFIXES[1][:33]
    _add(scheds, "r0", tokens, 8)
    _step(scheds, 0)  # r0 prefilled: its 2 full blocks are cached
    _step(scheds, 1)  # r0 decoding
    _add(scheds, "r1", tokens, 8)  # the same 33 tokens: 32 hit
    copy, ours, upstream = (
        [r.req_id for r in out.scheduled_new_reqs]
        for out in _step(scheds, 2, throttle_prefills=True)
    )
    assert upstream == ["r1"], "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == []
