# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``cohort`` policy (``balance_policy:
"cohort"``, :class:`~vllm_ascend_balance.policies.Cohort`).

Several real ``Scheduler``/``AsyncScheduler`` objects, one per DP rank, step
in lock step in this process through generated workloads (the lock-step
scenarios of ``test_gate_properties.py``, with a token budget small enough
that prompts are chunked, so the "riding" flag is exercised). Before every
step each rank runs the package's real ``admission_gather()`` over the
simulated engine's ``BoardGroup`` (torch's own ``dist.all_gather`` on a
duck-typed group; nothing is mocked but the group's transport). The test
posts each rank's payload ``(len(running), held, queued, idle, riding)``
computed from the scheduler's queues by its own code, so the board also
checks that the mixin sends exactly that payload; the generated window and
deadline vary per example.

Properties:

a. every rank takes the same decision and keeps the same run state;
b. the decision equals :func:`expected`, an oracle written from the policy's
   docstring, independently of the package;
c. the deadline bounds every hold: no run of frozen steps on which some rank
   held a request is longer than the deadline D;
d. on a frozen step no rank admits a request from WAITING.

Negative controls (each must make the properties fail): the riding flag
read from the rank's own requests instead of the gathered flag (ranks
disagree), a deadline off by one (held past it), and the gate open by
default when nothing is held (``aligned``'s rule; wrong decision).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from tests.test_gate_properties import (
    BASES,
    LockstepScenario,
    Rig,
    Scenario,
    hypothesis_settings,
    lockstep_scenarios,
)
from vllm_ascend_balance import activation
from vllm_ascend_balance.policies import Cohort, Gathered, Knobs
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.scheduler import BalanceSchedulerMixin, admission_cap

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

Row = tuple[int, int, int, int, int]
#: The per-step token budget of every rank: prompts of the generated
#: scenarios (1-24 tokens) are chunked above it.
BUDGET = 16


@dataclasses.dataclass(frozen=True)
class Setting:
    window: int
    deadline: int


def compose(base: type, s: Setting) -> type:
    return activation.compose_scheduler(
        base, max_held_steps=s.deadline, policy="cohort", align_window=s.window
    )


def payload(scheduler: Any) -> Row:
    """``(len(running), held, queued, idle, riding)`` from the scheduler's
    queues: riding = a running prompt with at least half the budget left."""
    running = len(scheduler.running)
    below = running < admission_cap(scheduler)
    waiting = len(scheduler.waiting) > 0
    riding = any(
        r.num_prompt_tokens - r.num_computed_tokens >= BUDGET // 2
        for r in scheduler.running
    )
    return (
        running,
        int(waiting and below),
        int(waiting and not below),
        int(below and not waiting),
        int(riding),
    )


def expected(rows: list[list[Row]], s: Setting) -> list[str]:
    """The policy's docstring as an oracle: per gather ``"frozen"``,
    ``"open"`` or ``"fail-open"``."""
    decisions: list[str] = []
    held_run = 0
    last_open = None  # step of the last opening that had a request to admit
    for step, row in enumerate(rows):
        held, queued, idle, riding = (any(r[i] for r in row) for i in range(1, 5))
        since = math.inf if last_open is None else step - last_open
        if not held:
            decisions.append("frozen")  # closed by default; the run ignores it
            continue
        if riding:
            freeze = False
        elif queued:
            freeze = True
        elif not idle:
            freeze = False
        else:
            freeze = since < s.window
        if freeze and held_run >= s.deadline:
            decisions.append("fail-open")
            held_run = 0
        elif freeze:
            decisions.append("frozen")
            held_run += 1
        else:
            decisions.append("open")
            held_run = 0
        if decisions[-1] != "frozen":
            last_open = step
    return decisions


def cohort_trace(make: Any, scenario: LockstepScenario, s: Setting) -> set[str]:
    """Run every rank in lock step, a gather before each step, and check the
    properties (assertion messages name the property)."""
    cap = scenario.cap
    ranks = [
        Rig(
            make(scenario.base, s),
            Scenario(scenario.base, cap, 400, BUDGET, scenario.horizon, requests),
        )
        for requests in scenario.requests
    ]
    board = GatherBoard(len(ranks))
    groups = [BoardGroup(board, rank) for rank in range(len(ranks))]
    rows: list[list[Row]] = []
    decided: list[str] = []
    seen: set[str] = set()
    held_run = 0
    for step in range(scenario.horizon):
        for rig in ranks:
            rig.arrive(step)
        row = [payload(rig.scheduler) for rig in ranks]
        rows.append(row)
        board.post([(r[0], r[1:]) for r in row])
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
            runs.add((sched.balance_frozen_run, sched._balance_rule.since))
        assert len(set(states)) == 1 and len(runs) == 1, (
            f"decision differs across ranks at step {step}: {states} {runs} for {row}"
        )
        state = states[0]
        decided.append(state)
        held = any(r[1] for r in row)
        if state == "frozen" and held:
            held_run += 1
            seen.add("held while frozen")
        elif state != "frozen":
            held_run = 0
        assert held_run <= s.deadline, (
            f"held past the deadline D={s.deadline} at step {step}"
        )
        if held_run == s.deadline:
            seen.add("held up to the deadline")
        if state == "frozen" and held and not any(r[2] for r in row):
            seen.add("frozen for alignment")
        if state == "open" and any(r[4] for r in row) and any(r[3] for r in row):
            seen.add("rode a chunk")
        seen.add(state)
        for rig in ranks:
            out = rig.schedule(step)
            if state == "frozen":
                assert out["new"] == [] and out["resumed"] == [], "left WAITING"
    assert decided == expected(rows, s), "wrong decision"
    return seen


settings_st = st.builds(Setting, window=st.integers(1, 6), deadline=st.integers(1, 4))

#: What the generated traces must reach, so the properties are not checked
#: on easy traces only.
REACHED = {
    "frozen for alignment",
    "held up to the deadline",
    "fail-open",
    "open",
    "rode a chunk",
}


def _riding_example() -> LockstepScenario:
    """A trace that surely rides a chunk and freezes for alignment: rank 0
    gets a 40-token prompt (chunks of 16, 16, 8) and then short ones that
    wait behind it, rank 1 one short request early and then nothing
    (idle)."""
    rank0 = ((0, 40, 6), (1, 4, 4), (3, 4, 4), (5, 4, 4))
    return LockstepScenario(BASES[0], 4, 4, 10, (rank0, ((0, 4, 3),)))


def check(make: Any, negative: bool = False) -> set[str]:
    covered: set[str] = set()

    @hypothesis_settings(80, negative)
    @example(scenario=_riding_example(), s=Setting(6, 2))
    @given(scenario=lockstep_scenarios(), s=settings_st)
    def run(scenario: LockstepScenario, s: Setting) -> None:
        for what in cohort_trace(make, scenario, s):
            covered.add(what)
            event(what)

    run()
    return covered


def test_cohort_properties() -> None:
    missing = REACHED - check(compose)
    assert not missing, f"the generated traces never reached {missing}"


def test_cohort_sends_five_columns_and_contract_one() -> None:
    """The cohort class's payload is ``(len(running), held, queued, idle,
    riding)``; the default class's stays ``len(running)`` alone."""
    base = BASES[0]
    scenario = Scenario(base, 2, 400, BUDGET, 4, ((0, 24, 4), (0, 4, 4)))
    contract = Rig(activation.compose_scheduler(base), scenario)
    cohort = Rig(compose(base, Setting(4, 8)), scenario)
    for rig in (contract, cohort):
        rig.arrive(0)
    assert contract.scheduler.admission_payload() == (0, ())
    assert cohort.scheduler.admission_payload() == (0, (1, 0, 0, 0))
    # The 24-token prompt takes the whole budget (chunked, 8 tokens left:
    # riding); the 4-token one still waits (held).
    cohort.schedule(0)
    assert cohort.scheduler.admission_payload() == (1, (1, 0, 0, 1))


def test_cohort_closed_by_default_then_waits_for_the_window() -> None:
    """One hand-made trace: nothing held freezes without counting; an idle
    rank keeps a held request waiting for the window, never past it; a
    chunk in flight opens at once."""
    rule = Cohort(Knobs(None, 64, 3))
    quiet = Gathered(1, 0, 4)
    held = Gathered(1, 0, 4, held=True, idle=True)
    riding = dataclasses.replace(held, riding=True)
    assert [rule.decide(quiet) for _ in range(3)] == [True] * 3
    assert rule.run == 0
    # The first held request opens at once (no opening yet); then one
    # opening every 3 gathers, unless a chunk rides.
    decisions = [rule.decide(held) for _ in range(5)]
    assert decisions == [False, True, True, False, True]
    assert rule.decide(riding) is False
    assert Cohort(Knobs()).knobs.align_window == 16  # DEFAULT_COHORT_WINDOW


class LocalRidingGate(BalanceSchedulerMixin):
    """Known-bad: "a chunk rides" read from this rank's own requests."""

    def _balance_decide(self, seen: Gathered) -> bool:
        mine = self._balance_riding()
        return super()._balance_decide(dataclasses.replace(seen, riding=mine))


@functools.cache
def _local_riding(base: type, s: Setting) -> type:
    namespace = {
        "balance_max_held_steps": s.deadline,
        "balance_policy": "cohort",
        "balance_align_window": s.window,
    }
    return type(f"LocalRiding{base.__name__}", (LocalRidingGate, base), namespace)


def _off_by_one(base: type, s: Setting) -> type:
    return compose(base, dataclasses.replace(s, deadline=s.deadline + 1))


class OpenByDefault(Cohort):
    """Known-bad: open when nothing is held (``aligned``'s rule 2): the
    request that arrives next is admitted alone before any rank saw it."""

    def _closed(self) -> bool:
        super()._closed()
        return False


class OpenByDefaultGate(BalanceSchedulerMixin):
    def _balance_policy(self) -> Any:
        if self._balance_rule is None:
            self._balance_rule = OpenByDefault(
                Knobs(None, self.balance_max_held_steps, self.balance_align_window)
            )
        return self._balance_rule


@functools.cache
def _open_by_default(base: type, s: Setting) -> type:
    namespace = {
        "balance_max_held_steps": s.deadline,
        "balance_policy": "cohort",
        "balance_align_window": s.window,
    }
    return type(f"OpenByDefault{base.__name__}", (OpenByDefaultGate, base), namespace)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(_local_riding, "decision differs across ranks", id="local"),
        pytest.param(_off_by_one, "held past the deadline", id="off-by-one"),
        pytest.param(_open_by_default, "wrong decision", id="open-by-default"),
    ],
)
def test_negative_controls_fail(make: Any, reason: str) -> None:
    with pytest.raises(AssertionError, match=reason):
        check(make, negative=True)
