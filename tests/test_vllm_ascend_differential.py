# SPDX-License-Identifier: Apache-2.0
"""Differential proof against the code this package replaces: vllm-ascend's
real ``BalanceScheduler`` (its copied ``schedule()``, balance enabled) vs this
package's gate composed onto upstream's ``Scheduler``/``AsyncScheduler`` on the
same vLLM, stepped through the same hypothesis-driven traces.

Traces: bursts of requests (some sharing prompt prefixes, for prefix caching),
chunked prefill under a small token budget, a KV pool small enough to force
preemption, natural finishes (``max_tokens``), aborts, forced
``reset_prefix_cache(reset_running_requests=True)``; throttled steps only
where the installed ``schedule()`` takes ``throttle_prefills``. Before every
step both gates gather the same scripted DP vector (this rank's own slot is
its real ``len(running)``; the other ranks: gate open, leader at the cap,
lagging), through their real ``balance_gather`` with ``dist.all_gather``
replaced. Both decisions and every field of both ``SchedulerOutput``s (and of
the ``EngineCoreOutputs``, scheduler stats included) must agree, except the
differences listed in :data:`DRIFT`: each is the copy departing from upstream,
pinned below by a minimal reproduction that also runs upstream's ungated
``Scheduler`` on the same inputs and shows it agrees with this package.

Negative control: a gate that freezes one request early (``max >= cap - 1``)
makes the same machine fail.

Runs on the ascend lane (vllm-ascend installed); skipped elsewhere.
"""

from __future__ import annotations

import importlib.util
import os
from collections import deque
from typing import Any

import pytest

if importlib.util.find_spec("vllm_ascend") is None:
    pytest.skip(
        "vllm-ascend is not installed: the differential needs its real "
        "BalanceScheduler (the ascend lane: scripts/fork.sh --lane ascend)",
        allow_module_level=True,
    )
if os.environ.get("VAB_LANE") == "ascend-main":
    pytest.skip(
        "the 0.23.0.post1 differential (vllm-ascend main's is "
        "tests/test_vllm_ascend_main_differential.py)",
        allow_module_level=True,
    )

import vllm.v1.core.sched.scheduler as scheduler_mod  # noqa: E402
import vllm.v1.engine.core as engine_core_mod  # noqa: E402

pytestmark = pytest.mark.lane_scope("ascend")

# vllm-ascend's patch module, imported for its classes only. Importing it
# swaps process-wide hooks (the module-level Scheduler, run_engine_core) that
# other test modules of the same process rely on (test_coexistence keeps the
# parent process unpatched), so both are put back at once. vLLM imports it
# (platform pre_register_and_update()) before the engine resolves its
# scheduler class, so vLLM's AsyncScheduler then subclasses BalanceScheduler:
# ASCEND_ASYNC below is built that way explicitly, whatever this process
# imported first.
_saved = (
    scheduler_mod.Scheduler,
    engine_core_mod.EngineCoreProc.__dict__["run_engine_core"],
)
from vllm_ascend.patch.platform import (  # noqa: E402
    patch_balance_schedule as ascend,
)

scheduler_mod.Scheduler = _saved[0]
engine_core_mod.EngineCoreProc.run_engine_core = _saved[1]

from tests.support import differential  # noqa: E402
from tests.support.differential import BLOCK_SIZE, prompt  # noqa: E402
from tests.support.model_outputs import fake_model_output  # noqa: E402
from tests.support.original_scheduler import async_scheduler_over  # noqa: E402
from tests.support.vllm_objects import make_request, make_vllm_config  # noqa: E402

UPSTREAM = ascend._ORIGINAL_SCHEDULER
ASCEND = ascend.BalanceScheduler
UPSTREAM_ASYNC = async_scheduler_over("vab_diff_upstream_async", UPSTREAM)
ASCEND_ASYNC = async_scheduler_over("vab_diff_ascend_async", ASCEND)
SIDES = differential.Sides(ASCEND, ASCEND_ASYNC, UPSTREAM, UPSTREAM_ASYNC)

# Known drift of the copy that is a setting upstream reads and the copy
# ignores: the differential runs with the setting at the value under which
# upstream behaves as the copy does (so every other difference still shows);
# each is pinned by a test_drift_* below at upstream's default. (No output
# path drifts: the machine compares every field.)
DRIFT_SETTINGS: dict[str, Any] = {
    # Upstream passes full_sequence_must_fit=scheduler_reserve_full_isl
    # (default on) to allocate_slots when admitting from WAITING; the copy
    # does not (test_drift_admits_prompt_that_cannot_fit).
    "scheduler_reserve_full_isl": False,
}


class Differential(differential.DifferentialMachine):
    """The machine with :data:`DRIFT_SETTINGS` applied to both sides."""

    def config(self, **config: Any) -> Any:
        vllm_config = differential.balance_config(**config)
        for name, value in DRIFT_SETTINGS.items():
            if hasattr(vllm_config.scheduler_config, name):
                setattr(vllm_config.scheduler_config, name, value)
        return vllm_config


def test_sides_are_what_they_claim() -> None:
    """Guard against comparing a class with itself, or with a neutralised
    vllm-ascend decision (another test in the process may have patched it)."""
    assert ASCEND.schedule is not UPSTREAM.schedule
    assert ASCEND_ASYNC.__mro__[1] is ASCEND
    # The import of vllm-ascend's patch left the process as it found it.
    assert scheduler_mod.Scheduler is UPSTREAM
    assert UPSTREAM_ASYNC.__mro__[1] is UPSTREAM
    assert ascend._balance_scheduling_enabled(
        make_vllm_config(additional_config={"enable_balance_scheduling": True})
    )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_copy_equals_gate_over_upstream(asynchronous: bool) -> None:
    differential.run_differential(
        differential.machine_for(
            Differential, SIDES, SIDES.ours(asynchronous), asynchronous
        )
    )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_negative_control_off_by_one_gate_is_caught(asynchronous: bool) -> None:
    differential.assert_caught(
        differential.machine_for(
            Differential,
            SIDES,
            differential.off_by_one(SIDES.ours(asynchronous)),
            asynchronous,
        )
    )


# --------------------------------------------------------------------------
# Drift of the copy, pinned: minimal reproductions (three schedulers on the
# same inputs: vllm-ascend's copy, this package's gate, upstream ungated)
# --------------------------------------------------------------------------


def trio(asynchronous: bool = False, **config: Any) -> tuple[Any, Any, Any]:
    """(vllm-ascend's copy, this package's gate, upstream without a gate)."""
    return differential.trio(SIDES, asynchronous, **config)


def _add(scheds: tuple[Any, ...], rid: str, prompt_len: int, max_tokens: int) -> None:
    tokens = prompt(-1, 0, prompt_len, int(rid[1:]))
    for sched in scheds:
        sched.add_request(
            make_request(
                rid, prompt_len, max_tokens, BLOCK_SIZE, prompt_token_ids=tokens
            )
        )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_drift_admits_prompt_that_cannot_fit(asynchronous: bool) -> None:
    """The copy's WAITING loop calls ``allocate_slots`` without upstream's
    ``full_sequence_must_fit=self.scheduler_reserve_full_isl`` (on by
    default): with 6 blocks of 16 tokens, one 1-token request running and a
    65-token prompt waiting, upstream (and this package's gate, open) does
    not start a prompt whose full sequence cannot fit in the free KV cache;
    the copy starts its prefill (31 tokens) and will have to preempt later.
    """
    scheds = trio(asynchronous, max_num_seqs=2, num_blocks=6, max_num_batched_tokens=32)
    copy, ours, upstream = scheds
    _add(scheds, "r0", 1, 1)
    _add(scheds, "r1", 65, 1)
    got, want, ref = (dict(s.schedule().num_scheduled_tokens) for s in scheds)
    assert ref == {"r0": 1}, "upstream's behaviour changed: re-derive this pin"
    assert want == ref
    assert got == {"r0": 1, "r1": 31}
    # The differential neutralises it with the setting off, under which
    # upstream behaves as the copy does.
    scheds = trio(asynchronous, max_num_seqs=2, num_blocks=6, max_num_batched_tokens=32)
    for sched in scheds:
        sched.scheduler_reserve_full_isl = DRIFT_SETTINGS["scheduler_reserve_full_isl"]
    _add(scheds, "r0", 1, 1)
    _add(scheds, "r1", 65, 1)
    got, want, ref = (dict(s.schedule().num_scheduled_tokens) for s in scheds)
    assert got == want == ref


def test_drift_ignores_pp_decode_cadence() -> None:
    """The copy dropped upstream's V2-model-runner + pipeline-parallel +
    async decode cadence (``current_step`` / ``next_decode_eligible_step``):
    with PP 2, upstream (and this package) schedules a decoding request every
    other step, as the worker's sampled-token broadcast ring expects; the
    copy schedules it every step. ``use_v2_model_runner`` and ``pp_size`` are
    set on the schedulers as their ``__init__`` derives them from such a
    config (a real PP 2 config needs a device platform)."""
    scheds = trio(True, max_num_seqs=4, num_blocks=64, max_num_batched_tokens=64)
    for sched in scheds:
        sched.use_v2_model_runner = True
        sched.pp_size = 2
    _add(scheds, "r0", 8, 8)
    seen: list[list[dict[str, int]]] = []
    pending: deque = deque()
    for step in range(6):
        outs = [sched.schedule() for sched in scheds]
        seen.append([dict(out.num_scheduled_tokens) for out in outs])
        pending.append(outs)
        if len(pending) == 2:  # the async engine's two steps in flight
            for sched, out in zip(scheds, pending.popleft(), strict=True):
                sched.update_from_output(out, fake_model_output(sched, out, step))
    copy, ours, upstream = zip(*seen, strict=True)
    assert upstream[1:] == ({}, {"r0": 1}, {}, {"r0": 1}, {}), upstream
    assert ours == upstream
    assert copy[1:] == ({"r0": 1},) * 5, copy
