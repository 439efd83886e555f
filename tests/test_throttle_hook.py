# SPDX-License-Identifier: Apache-2.0
"""The ``throttled`` policy's engine hook and refusal
(:mod:`~vllm_ascend_balance.wiring.throttle_hook`,
:func:`~vllm_ascend_balance.wiring.reach.can_throttle`).

On vLLM's real ``DPEngineCoreProc``: activation installs the hook on
``_should_throttle_prefills`` only where the active policy holds chunks;
the hooked method says yes on a step whose decision holds chunks, on a
rank with a chunk in flight and a decode to run (and clears the
scheduler's ``prefill_capacity_bound`` for that step only: the gate's next
exchange puts it back), keeps vLLM's own answer otherwise. A release whose
``Scheduler.schedule`` takes no ``throttle_prefills`` runs the policy
without chunk holds, with a note saying so (it was refused before the gate
bounded every hold itself). Real schedulers with real requests in flight;
the engine object handed to the hooked method is a stand-in carrying the
fields that method reads (an engine process cannot start here without a
model run).

Negative controls: ``queued_leader`` (a policy that does not hold chunks)
gets no hook; a decision that holds admission but not chunks, and a rank
with nothing to defer, are not throttled; without the hook vLLM's own
answer stays no on a step whose decision holds chunks.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import vllm.v1.engine.core as engine_core_mod
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.policies import OPEN, Decision
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.wiring import (
    activation,
    activation_plan,
    composition,
    engine_chain,
)
from vllm_ascend_balance.wiring.engine_hook import (
    remove_gather_hook,
    upstream_dp_engine,
)
from vllm_ascend_balance.wiring.reach import can_throttle
from vllm_ascend_balance.wiring.throttle_hook import (
    THROTTLE,
    remove_throttle_hook,
    throttle_hook_installed,
)

pytestmark = pytest.mark.lane_scope("release", "main", "fork")

UPSTREAM_ENGINE = upstream_dp_engine(engine_core_mod.DPEngineCoreProc)


def config(policy: str, **kwargs: Any) -> Any:
    kwargs.setdefault("data_parallel_size", 2)
    switch = {"enable_balance_scheduling": True, "balance_policy": policy}
    return make_vllm_config(additional_config={"scheduler_config": switch}, **kwargs)


@pytest.fixture(autouse=True)
def _clean_engine(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(engine_core_mod, "DPEngineCoreProc", UPSTREAM_ENGINE)
    monkeypatch.setattr(engine_chain, "_next", lambda *a, **k: None)
    for remove in (remove_gather_hook, remove_throttle_hook):
        remove(UPSTREAM_ENGINE)
    yield
    for remove in (remove_gather_hook, remove_throttle_hook):
        remove(UPSTREAM_ENGINE)


@pytest.mark.parametrize(
    ("policy", "hooked"),
    [
        ("throttled", True),
        ("adp_balance", True),
        ("queued_leader", False),
        ("leader_at_cap", False),
    ],
)
def test_activation_hooks_only_a_chunk_holding_policy(
    policy: str, hooked: bool
) -> None:
    activation.run_engine_core(vllm_config=config(policy), dp_rank=0, local_dp_rank=0)
    assert throttle_hook_installed(UPSTREAM_ENGINE) is hooked


#: A decision that holds admission and chunks in flight (as ``throttled``'s
#: batching wait), and one that holds admission only.
HOLD_CHUNKS = Decision(True, True, "batching_wait")
HOLD_WAITING = Decision(True, False, "idle")


def _in_flight(scheduler: Any, chunk: bool = True) -> None:
    """Step ``scheduler`` until it runs a decode and (``chunk``) a prefill
    chunk in flight: a short prompt, then a prompt longer than the token
    budget."""
    scheduler.add_request(make_request("decode", 16, max_tokens=64))
    for step, rid in enumerate(("chunk", None) if chunk else (None,)):
        if rid is not None:
            scheduler.add_request(make_request(rid, 4000, max_tokens=4))
        out = scheduler.schedule()
        scheduler.update_from_output(out, fake_model_output(scheduler, out, step))
    chunks = [r.request_id for r in scheduler.running if r.is_prefill_chunk]
    assert chunks == (["chunk"] if chunk else []), chunks


def _engine(
    policy: str,
    decision: Decision,
    interval: int = 1,
    step: int = 0,
    chunk: bool = True,
) -> Any:
    """A stand-in engine: a real gated scheduler with a decode and a prefill
    chunk in flight, the gate's decision for the next ``schedule()``, and
    the two fields vLLM's own ``_should_throttle_prefills`` reads."""
    settings = GateSettings(policy=policy, max_held_steps=64)
    cls = composition.compose_scheduler(Scheduler, settings)
    scheduler = make_scheduler(cls, vllm_config=config(policy))
    _in_flight(scheduler, chunk)
    scheduler.balance_decision = decision
    scheduler.balance_frozen = decision.hold_waiting
    scheduler.prefill_capacity_bound = True  # as after a step the seam held
    return SimpleNamespace(
        scheduler=scheduler, prefill_schedule_interval=interval, step_counter=step
    )


def test_hook_throttles_a_chunk_holding_step_and_clears_the_capacity_bound() -> None:
    activation.run_engine_core(
        vllm_config=config("throttled"), dp_rank=0, local_dp_rank=0
    )
    ask = getattr(UPSTREAM_ENGINE, THROTTLE)
    held = _engine("throttled", HOLD_CHUNKS)
    assert ask(held) is True
    assert held.scheduler.prefill_capacity_bound is False
    # The deferred chunk is on the ledger, and the next exchange's payload
    # (the step closed) puts vLLM's own flag back.
    held.scheduler.admission_payload()
    assert held.scheduler.prefill_capacity_bound is True
    assert held.scheduler._ledger().holds == {"chunk": 1}
    opened = _engine("throttled", OPEN)
    assert ask(opened) is False and opened.scheduler.prefill_capacity_bound is True
    # vLLM's own cadence still throttles an open step.
    assert ask(_engine("throttled", OPEN, interval=2, step=1)) is True
    # Negative controls: admission held, chunks not (nothing to align
    # with); a rank with no chunk in flight has nothing to defer.
    idle = _engine("throttled", HOLD_WAITING)
    assert ask(idle) is False and idle.scheduler.prefill_capacity_bound is True
    bare = _engine("throttled", HOLD_CHUNKS, chunk=False)
    assert ask(bare) is False and bare.scheduler.prefill_capacity_bound is True


def test_without_the_hook_a_chunk_holding_step_is_not_throttled() -> None:
    """Negative control of the hook: vLLM's own answer on the same step is
    no, so the hook is what holds the chunks."""
    ask = getattr(UPSTREAM_ENGINE, THROTTLE)
    assert not throttle_hook_installed(UPSTREAM_ENGINE)
    assert ask(_engine("throttled", HOLD_CHUNKS)) is False


class NoThrottleScheduler(Scheduler):
    """A ``schedule()`` without ``throttle_prefills`` (vLLM before 0.27;
    it reaches the seam through ``super()``)."""

    def schedule(self) -> Any:  # type: ignore[override]
        return super().schedule()


def test_release_without_throttle_prefills_runs_without_chunk_holds() -> None:
    """Changed on purpose (the gate bounds every hold itself): such a
    release is no longer refused for ``throttled``; the policy runs
    without chunk holds (no hook), and a note says so."""
    assert can_throttle(Scheduler) and not can_throttle(NoThrottleScheduler)
    cfg = config("throttled")
    cfg.scheduler_config.scheduler_cls = NoThrottleScheduler
    plan = activation_plan.plan_activation(cfg)
    assert plan.active and not plan.throttles
    note = next(n for n in plan.notes if "chunks in flight are not held" in n)
    assert "throttle_prefills" in note and "balance_policy" in note
    activation.run_engine_core(vllm_config=cfg, dp_rank=0, local_dp_rank=0)
    assert not throttle_hook_installed(UPSTREAM_ENGINE)
    # Control: the stock Scheduler holds chunks, and says nothing of it.
    plan = activation_plan.plan_activation(config("throttled"))
    assert plan.active and plan.throttles
    assert not any("chunks in flight are not held" in n for n in plan.notes)


@pytest.mark.lane_scope("ascend")
def test_the_ascend_lanes_vllm_runs_throttled_without_chunk_holds() -> None:
    """vLLM 0.23 (the ascend lane's pin) has no ``throttle_prefills``: the
    stock ``Scheduler`` runs ``throttled`` without chunk holds, with the
    note (it was refused before the gate bounded every hold)."""
    assert not can_throttle(Scheduler)
    plan = activation_plan.plan_activation(config("throttled"))
    assert plan.active and not plan.throttles
    assert any("chunks in flight are not held" in n for n in plan.notes)
