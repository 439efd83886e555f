# SPDX-License-Identifier: Apache-2.0
"""vLLM's ``prefill_schedule_interval`` next to ``throttled`` (issue 54, item 6).

vLLM's interval throttle has an escape: a rank whose last admitting step
was capacity-bound (``prefill_capacity_bound``: requests left waiting) is
not deferred on the interval's throttled steps. The gate clears that flag
to defer chunks on its own chunk-holding step; it must put it back after
that step, so the escape still works on the interval's next throttled
step. On a real scheduler with a decode and a prefill chunk in flight:

1. the rank is capacity-bound (vLLM's flag set);
2. a gate step that holds chunks: ``schedule(throttle_prefills=True)``
   defers the chunk (the gate cleared the flag for that call);
3. the next exchange closes the step (the flag is vLLM's again);
4. an open gate step on which vLLM's own interval throttles:
   ``schedule(throttle_prefills=True)`` runs the chunk (the escape).

Negative control: a ledger that does not put the flag back defers the
chunk on step 4.
"""

from __future__ import annotations

from typing import Any

import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.holds import HoldLedger
from vllm_ascend_balance.gate.policies import OPEN, Decision
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.wiring import composition

pytestmark = pytest.mark.lane_scope("release", "main", "fork")

HOLD_CHUNKS = Decision(True, True, "batching_wait")


def _scheduler() -> Any:
    additional = {
        "scheduler_config": {
            "enable_balance_scheduling": True,
            "balance_policy": "throttled",
        }
    }
    cls = composition.compose_scheduler(Scheduler, GateSettings("throttled"))
    scheduler = make_scheduler(
        cls,
        vllm_config=make_vllm_config(
            data_parallel_size=2, additional_config=additional
        ),
    )
    scheduler.add_request(make_request("decode", 16, max_tokens=64))
    for step, rid in enumerate(("chunk", None)):
        if rid is not None:
            scheduler.add_request(make_request(rid, 4000, max_tokens=4))
        out = scheduler.schedule()
        scheduler.update_from_output(out, fake_model_output(scheduler, out, step))
    assert [r.request_id for r in scheduler.running if r.is_prefill_chunk] == ["chunk"]
    return scheduler


def _step(scheduler: Any, throttle: bool, step: int) -> bool:
    """One ``schedule()``; whether the chunk ran."""
    out = scheduler.schedule(throttle_prefills=throttle)
    scheduler.update_from_output(out, fake_model_output(scheduler, out, step))
    return "chunk" in out.num_scheduled_tokens


def _escape_holds(scheduler: Any) -> bool:
    scheduler.prefill_capacity_bound = True  # 1. the rank is capacity-bound
    scheduler.balance_decision = HOLD_CHUNKS  # 2. a chunk-holding gate step
    scheduler.balance_frozen = True
    assert scheduler.balance_throttles() is True
    assert _step(scheduler, True, 10) is False, "the gate's step deferred nothing"
    scheduler.admission_payload()  # 3. the next exchange closes the step
    scheduler._balance_payload = None
    scheduler.balance_decision = OPEN  # 4. open; vLLM's interval throttles
    scheduler.balance_frozen = False
    assert scheduler.balance_throttles() is False
    return _step(scheduler, True, 11)


def test_interval_escape_survives_a_gate_step() -> None:
    assert _escape_holds(_scheduler()), (
        "vLLM's prefill_capacity_bound escape was lost after the gate's step"
    )


def test_negative_control_a_ledger_that_keeps_the_flag_cleared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    close = HoldLedger.close_step

    def forgetful(self: HoldLedger, scheduler: Any) -> None:
        self.saved_capacity_bound = None
        close(self, scheduler)

    monkeypatch.setattr(HoldLedger, "close_step", forgetful)
    assert not _escape_holds(_scheduler())
