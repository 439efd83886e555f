# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in rules: the held-step bound
(``balance_max_held_steps``) and the ``queued_leader`` policy.

Several real ``Scheduler``/``AsyncScheduler`` objects, one per DP rank, step
in lock step in this process through generated workloads (the lock-step
scenarios of ``test_gate_properties.py``: a leader that often stays at the
cap, generated loads elsewhere). Before every step each rank runs the
package's real ``admission_gather()`` over the simulated engine's
``BoardGroup`` (torch's own ``dist.all_gather`` on a duck-typed group). The
test posts each rank's payload ``(len(running), held, queued)`` computed
from the scheduler's state by its own code, so the board also checks that
the mixin sends exactly that payload.

Properties, per rule:

a. every rank takes the same decision and keeps the same run counter;
b. the decision equals :func:`expected`, an oracle written independently of
   the package;
c. with the bound N, no run of frozen steps that held a request is longer
   than N (no request waits behind the gate more than N consecutive frozen
   steps);
d. on a frozen step no rank admits a request from WAITING.

Negative controls (each must make the properties fail): the bound counted
from each rank's own queue instead of the gathered flag (ranks disagree),
a bound off by one, and the contract's gate run where ``queued_leader`` is
asked for (freezes with no rank at the cap having a queue).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, given

from tests.test_gate_properties import (
    LockstepScenario,
    Rig,
    Scenario,
    hypothesis_settings,
    lockstep_scenarios,
)
from vllm_ascend_balance.gate.policies import Gathered
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin, admission_cap
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.wiring import composition

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

#: (policy, bound): the rules under test.
RULES = [
    ("queued_leader", None),
    ("leader_at_cap", "held"),
    ("queued_leader", "held"),
]
Compose = Callable[[type, int | None, str], type]


def compose(base: type, bound: int | None, policy: str) -> type:
    return composition.compose_scheduler(base, max_held_steps=bound, policy=policy)


def payload(scheduler: Any) -> tuple[int, int, int]:
    """``(len(running), held, queued)``, from the scheduler's own queues."""
    running = len(scheduler.running)
    below = running < admission_cap(scheduler)
    waiting = len(scheduler.waiting) > 0
    return running, int(waiting and below), int(waiting and not below)


def expected(
    rows: list[list[tuple[int, int, int]]], cap: int, policy: str, bound: int | None
) -> list[str]:
    """The rules, written independently of the package: per gather
    ``"frozen"``, ``"open"`` or ``"fail-open"``."""
    decisions, run = [], 0
    for row in rows:
        if policy == "queued_leader":
            gate = any(queued for _, _, queued in row)
        else:
            gate = max(running for running, _, _ in row) == cap
        held = any(h for _, h, _ in row)
        if not gate:
            decisions.append("open")
            run = 0
        elif bound is None or not held:
            decisions.append("frozen")
        elif run >= bound:
            decisions.append("fail-open")
            run = 0
        else:
            decisions.append("frozen")
            run += 1
    return decisions


def lockstep_trace(
    make: Compose, scenario: LockstepScenario, policy: str, bounded: bool
) -> set[str]:
    """Run every rank in lock step, a gather before each step, and check the
    properties (assertion messages name the property)."""
    cap = scenario.cap
    bound = scenario.bound if bounded else None
    ranks = [
        Rig(
            make(scenario.base, bound, policy),
            Scenario(scenario.base, cap, 400, 512, scenario.horizon, requests),
        )
        for requests in scenario.requests
    ]
    cls = type(ranks[0].scheduler)
    flags = cls.balance_max_held_steps is not None or cls.balance_policy != (
        "leader_at_cap"
    )
    board = GatherBoard(len(ranks))
    groups = [BoardGroup(board, rank) for rank in range(len(ranks))]
    rows: list[list[tuple[int, int, int]]] = []
    decided: list[str] = []
    seen: set[str] = set()
    held_run = 0
    for step in range(scenario.horizon):
        for rig in ranks:
            rig.arrive(step)
        row = [payload(rig.scheduler) for rig in ranks]
        rows.append(row)
        # The contract's class sends len(running) alone (the payload's cost
        # grows only where a rule reads the flags).
        board.post([(r, (h, q) if flags else ()) for r, h, q in row])
        states, runs = [], set()
        for rank, rig in enumerate(ranks):
            sched = rig.scheduler
            before = sched.balance_fail_opens
            sched.dp_group = groups[rank]
            sched.admission_gather()
            state = "frozen" if sched.balance_frozen else "open"
            if sched.balance_fail_opens > before:
                state = "fail-open"
            states.append(state)
            runs.add(sched.balance_frozen_run)
        assert len(set(states)) == 1 and len(runs) == 1, (
            f"decision differs across ranks at step {step}: {states} {runs} for {row}"
        )
        state = states[0]
        decided.append(state)
        if state == "frozen" and any(h for _, h, _ in row):
            held_run += 1
            seen.add("held while frozen")
        elif state != "frozen":
            held_run = 0
        if bound is not None:
            assert held_run <= bound, f"held run longer than N={bound} at step {step}"
            if held_run == bound:
                seen.add("held run of N")
        seen.add(state)
        for rig in ranks:
            out = rig.schedule(step)
            if state == "frozen":
                assert out["new"] == [] and out["resumed"] == [], "left WAITING"
    assert decided == expected(rows, cap, policy, bound), "wrong decision"
    return seen


def check_rule(
    make: Compose, policy: str, bounded: bool, negative: bool = False
) -> None:
    @hypothesis_settings(60, negative)
    @given(scenario=lockstep_scenarios())
    def run(scenario: LockstepScenario) -> None:
        for what in lockstep_trace(make, scenario, policy, bounded):
            event(what)

    run()


@pytest.mark.parametrize(("policy", "bound"), RULES)
def test_rule_properties(policy: str, bound: str | None) -> None:
    check_rule(compose, policy, bound is not None)


def test_queued_leader_does_not_freeze_behind_a_leader_with_no_queue() -> None:
    """One hand-made trace: rank 0 fills its cap exactly (nothing waits
    there) while rank 1 gets work: the contract freezes rank 1,
    ``queued_leader`` does not."""
    from tests.test_gate_properties import BASES

    burst = tuple((0, 8, 30) for _ in range(3))
    scenario = LockstepScenario(BASES[0], 3, 2, 8, (burst, ((1, 8, 4), (2, 8, 4))))
    assert "frozen" not in lockstep_trace(compose, scenario, "queued_leader", False)
    assert "frozen" in lockstep_trace(compose, scenario, "leader_at_cap", False)


class LocalHeldGate(BalanceSchedulerMixin):
    """Known-bad: the bound counts a frozen step by this rank's own queue,
    not by the gathered flag."""

    def _balance_decide(self, seen: Gathered) -> bool:
        mine = bool(self.waiting) and len(self.running) < admission_cap(self)  # type: ignore[attr-defined]
        return super()._balance_decide(dataclasses.replace(seen, held=mine))


@functools.cache
def _local_held(base: type, bound: int | None, policy: str) -> type:
    namespace = {"balance_max_held_steps": bound, "balance_policy": policy}
    return type(f"LocalHeld{base.__name__}", (LocalHeldGate, base), namespace)


def _off_by_one(base: type, bound: int | None, policy: str) -> type:
    return compose(base, None if bound is None else bound + 1, policy)


def _contract_gate(base: type, bound: int | None, policy: str) -> type:
    return compose(base, bound, "leader_at_cap")


@pytest.mark.parametrize(
    ("make", "policy", "reason"),
    [
        pytest.param(
            _local_held, "leader_at_cap", "decision differs across ranks", id="local"
        ),
        pytest.param(
            _off_by_one, "leader_at_cap", "held run longer than N", id="off-by-one"
        ),
        pytest.param(_contract_gate, "queued_leader", "wrong decision", id="contract"),
    ],
)
def test_negative_controls_fail(make: Compose, policy: str, reason: str) -> None:
    with pytest.raises(AssertionError, match=reason):
        check_rule(make, policy, bounded=True, negative=True)
