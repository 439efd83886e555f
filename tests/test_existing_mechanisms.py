# SPDX-License-Identifier: Apache-2.0
"""Why the gate is a new hook and not ``schedule(throttle_prefills)`` or
``PauseState`` (issue 18, item 3), and how it couples to
``prefill_capacity_bound`` (item 5). Releases without these skip.

One frozen step, three ways of asking for it, on the same scheduler state: a
decoding request, a request in the middle of a chunked prefill (its next
chunk is in flight), and a new request waiting. The balance gate must hold
the new request and nothing else.

=====================  ===============  ==============  ===================
what                   new request      in-flight chunk  unfinished reported
=====================  ===============  ==============  ===================
seam returns True      held             scheduled       counts the waiting
throttle_prefills      held*            **deferred**    counts the waiting
PauseState.PAUSED_NEW  held             scheduled       **drops the waiting**
=====================  ===============  ==============  ===================

\\* unless ``prefill_capacity_bound`` is set (the previous release step left
requests waiting: #44558's escape), and then it admits: exactly the
backed-up state in which a DP rank must not admit. ``PauseState`` is also
the one state the ``pause_scheduler``/``resume_scheduler`` RPCs own, and a
paused engine starts no DP wave. Reproduce the table with
``python -m pytest -s tests/test_existing_mechanisms.py`` (each test prints
its row).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler

try:
    from vllm.v1.core.sched.interface import PauseState
except ImportError:  # a release without pause states
    PauseState = None  # type: ignore[assignment,misc]

pytestmark = [
    # why: each release's throttle_prefills, PauseState, capacity bound
    pytest.mark.lane_scope("release", "main", "fork", "ascend"),
    pytest.mark.skipif(
        PauseState is None
        or not hasattr(PauseState, "PAUSED_NEW")
        or "throttle_prefills" not in inspect.signature(Scheduler.schedule).parameters
        or "prefill_capacity_bound" not in inspect.getsource(Scheduler.schedule),
        reason="this release has no throttle_prefills / PAUSED_NEW to compare with",
    ),
]


class Gate:
    closed = False

    def _should_stop_admitting_waiting(self) -> bool:
        # super(): from vLLM 0.34 the seam's default is the PAUSED_NEW test,
        # which an override must keep (the seam's docstring says so).
        return self.closed or super()._should_stop_admitting_waiting()  # type: ignore[misc]


class GatedScheduler(Gate, Scheduler):
    pass


def _mid_prefill() -> tuple[Any, int]:
    """A scheduler with ``dec`` decoding and ``long`` mid-chunked-prefill,
    after two steps; then ``new`` arrives. Returns (scheduler, next step)."""
    scheduler = make_scheduler(
        GatedScheduler, max_num_seqs=8, max_num_batched_tokens=64
    )
    scheduler.add_request(make_request("dec", 16, max_tokens=50))
    # 16 + 48, then 1 + 63 tokens: after two steps ``long`` has its last
    # chunk (29 tokens) to go, and the budget has room for ``new`` too.
    scheduler.add_request(make_request("long", 140, max_tokens=4))
    for step in range(2):
        output = scheduler.schedule()
        scheduler.update_from_output(output, fake_model_output(scheduler, output, step))
    assert scheduler.requests["long"].num_computed_tokens == 111  # chunk in flight
    scheduler.add_request(make_request("new", 16))
    return scheduler, 2


def _row(what: str, output: Any, scheduler: Any) -> tuple[bool, bool, int]:
    scheduled = set(output.num_scheduled_tokens)
    row = (
        "new" in scheduled,
        "long" in scheduled,
        scheduler.get_num_unfinished_requests(),
    )
    print(
        f"{what:<22} admits new={row[0]!s:<5} in-flight chunk={row[1]!s:<5} "
        f"unfinished={row[2]}"
    )
    return row


def test_seam_holds_only_the_new_request():
    scheduler, _ = _mid_prefill()
    scheduler.closed = True
    assert _row("seam returns True", scheduler.schedule(), scheduler) == (
        False,
        True,
        3,
    )


def test_throttle_prefills_defers_the_in_flight_chunk():
    """Not the gate: a throttled step also stalls running requests' prefill."""
    scheduler, _ = _mid_prefill()
    scheduler.prefill_capacity_bound = False
    assert _row("throttle_prefills", scheduler.schedule(True), scheduler) == (
        False,
        False,
        3,
    )


def test_throttle_prefills_admits_once_capacity_bound():
    """Not the gate: backed up (requests left waiting), the throttle is off."""
    scheduler, _ = _mid_prefill()
    scheduler.prefill_capacity_bound = True
    admits, _, _ = _row("throttle (cap. bound)", scheduler.schedule(True), scheduler)
    assert admits


def test_paused_new_hides_the_waiting_request_from_the_engine():
    """Not the gate: same admissions this step, but the engine is told the
    waiting request is not unfinished work (and the state is the RPC's)."""
    scheduler, _ = _mid_prefill()
    scheduler.set_pause_state(PauseState.PAUSED_NEW)
    assert _row("PauseState.PAUSED_NEW", scheduler.schedule(), scheduler) == (
        False,
        True,
        2,
    )
    # A rank whose only work is waiting reports none: its engine would leave
    # the DP wave (and stop gathering) while the gate still holds its work.
    only_waiting = make_scheduler(GatedScheduler)
    only_waiting.add_request(make_request("w", 16))
    only_waiting.closed = True
    assert only_waiting.has_unfinished_requests()
    only_waiting.set_pause_state(PauseState.PAUSED_NEW)
    assert not only_waiting.has_unfinished_requests()


def test_a_frozen_step_sets_prefill_capacity_bound_and_lifts_the_throttle():
    """Item 5, the coupling: a step the seam stops leaves requests waiting,
    so it records ``prefill_capacity_bound = True``; the next
    ``schedule(throttle_prefills=True)`` is then not throttled (#44558's
    escape) and admits. Without the freeze, the same throttled step defers
    the new request. With both on, the first step after a freeze admits
    whatever the ``prefill_schedule_interval`` cadence says."""
    frozen, step = _mid_prefill()
    frozen.closed = True
    output = frozen.schedule()
    assert "new" not in output.num_scheduled_tokens
    assert frozen.prefill_capacity_bound
    frozen.update_from_output(output, fake_model_output(frozen, output, step))
    frozen.closed = False
    assert "new" in frozen.schedule(throttle_prefills=True).num_scheduled_tokens

    open_, step = _mid_prefill()
    open_.prefill_capacity_bound = False
    assert "new" not in open_.schedule(throttle_prefills=True).num_scheduled_tokens
