# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``batched`` policy (``balance_policy:
"batched"``, :class:`~vllm_ascend_balance.gate.policies.batched.Batched`).

The rig of ``test_cohort_properties.py``: real ``Scheduler`` /
``AsyncScheduler`` objects, one per DP rank, step in lock step through
generated workloads (prompts chunked by a small token budget), each
running the package's real ``admission_gather()`` over the simulated
engine's ``BoardGroup`` before every step. The test posts each rank's
payload ``(len(running), held, queued, starved, riding)`` computed by
its own code, so the board also checks the mixin sends exactly that;
the window and deadline vary per example.

Properties:

a. every rank takes the same decision and keeps the same run state;
b. the decision equals :func:`expected`, an oracle written from the
   policy's docstring (the batching wait from the gathered smallest
   running count), independently of the package;
c. the deadline bounds every hold: no run of frozen steps on which some
   rank held a request is longer than the deadline D;
d. on a frozen step no rank admits a request from WAITING.

Negative controls (each must make the properties fail): the batching wait
from the rank's own running count instead of the gathered smallest (ranks
disagree), the starved or the riding flag from the rank's own queues (ranks
disagree), a deadline off by one (held past it), no batching wait
(``cohort``'s rule 4; wrong decision), and a seam that ignores the freeze
(admits while frozen).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from tests.test_cohort_properties import BUDGET, Setting
from tests.test_cohort_properties import payload as cohort_payload
from tests.test_gate_properties import (
    BASES,
    LockstepScenario,
    Rig,
    Scenario,
    hypothesis_settings,
    lockstep_scenarios,
)
from vllm_ascend_balance.gate.policies import Batched, Gathered, Knobs
from vllm_ascend_balance.gate.policies.batched import batching_wait
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.wiring import composition

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

Row = tuple[int, int, int, int, int]


def payload(scheduler: Any) -> Row:
    """``(len(running), held, queued, starved, riding)`` from the
    scheduler's queues: starved = requests waiting and none running; riding
    as ``cohort``'s."""
    running, held, queued, _, riding = cohort_payload(scheduler)
    starved = int(len(scheduler.waiting) > 0 and running == 0)
    return running, held, queued, starved, riding


def compose(base: type, s: Setting) -> type:
    return composition.compose_scheduler(
        base, max_held_steps=s.deadline, policy="batched", align_window=s.window
    )


def expected(rows: list[list[Row]], s: Setting, cap: int) -> list[str]:
    """The policy's docstring as an oracle: per gather ``"frozen"``,
    ``"open"`` or ``"fail-open"``."""
    decisions: list[str] = []
    held_run = 0
    last_open = None  # step of the last opening that had a request to admit
    for step, row in enumerate(rows):
        held, queued, starved, riding = (any(r[i] for r in row) for i in range(1, 5))
        lowest = min(r[0] for r in row)
        wait = math.ceil(s.window * lowest**2 / cap**2)
        since = math.inf if last_open is None else step - last_open
        if not held:
            decisions.append("frozen")  # closed by default; the run ignores it
            continue
        if starved or riding:
            freeze = False
        elif queued:
            freeze = True
        else:
            freeze = since < wait
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


def batched_trace(make: Any, scenario: LockstepScenario, s: Setting) -> set[str]:
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
        flags = [any(r[i] for r in row) for i in range(1, 5)]
        if state == "frozen" and held and flags == [True, False, False, False]:
            seen.add("batching wait")
        seen.add(state)
        for rig in ranks:
            out = rig.schedule(step)
            if state == "frozen":
                assert out["new"] == [] and out["resumed"] == [], "left WAITING"
    assert decided == expected(rows, s, cap), "wrong decision"
    return seen


settings_st = st.builds(Setting, window=st.integers(1, 6), deadline=st.integers(1, 4))

#: What the generated traces must reach, so the properties are not checked
#: on easy traces only.
REACHED = {"batching wait", "held up to the deadline", "fail-open", "open"}


def _batching_example() -> LockstepScenario:
    """A trace that surely waits to batch: two ranks at cap 4, each two
    long requests early (decoding, so the smallest running count is 2, a
    wait of ``ceil(6 * 4 / 16) = 2`` at W 6) and short ones arriving after
    the first opening."""
    rank0 = ((0, 4, 20), (0, 4, 20), (2, 4, 4), (3, 4, 4))
    rank1 = ((0, 4, 20), (0, 4, 20), (2, 4, 4), (4, 4, 4))
    return LockstepScenario(BASES[0], 4, 4, 12, (rank0, rank1))


def check(make: Any, negative: bool = False) -> set[str]:
    covered: set[str] = set()

    @hypothesis_settings(80, negative)
    @example(scenario=_batching_example(), s=Setting(6, 8))
    @example(scenario=_batching_example(), s=Setting(6, 2))
    @given(scenario=lockstep_scenarios(), s=settings_st)
    def run(scenario: LockstepScenario, s: Setting) -> None:
        for what in batched_trace(make, scenario, s):
            covered.add(what)
            event(what)

    run()
    return covered


def test_batched_properties() -> None:
    missing = REACHED - check(compose)
    assert not missing, f"the generated traces never reached {missing}"


def test_batched_sends_its_four_flags() -> None:
    """The batched class's payload is ``(len(running), held, queued,
    starved, riding)``; its gathered flags land on those fields, not on
    cohort's ``idle``."""
    base = BASES[0]
    scenario = Scenario(base, 2, 400, BUDGET, 4, ((0, 24, 4), (0, 4, 4)))
    rig = Rig(compose(base, Setting(4, 8)), scenario)
    rig.arrive(0)
    # Nothing running, two waiting: held and starved.
    assert rig.scheduler.admission_payload() == (0, (1, 0, 1, 0))
    seen = Gathered.of(0, 0, 2, (True, False, True, False), Batched.columns)
    assert seen.starved and not seen.riding and not seen.idle


def test_batching_wait_follows_the_load() -> None:
    """0 while the least loaded rank runs nothing, the window at the cap,
    rounded up in between; integers only."""
    assert [batching_wait(8, low, 16) for low in (0, 1, 4, 8, 15, 16)] == [
        0, 1, 1, 2, 8, 8
    ]  # fmt: skip
    assert batching_wait(8, 20, 16) == 8  # never past the window
    assert batching_wait(8, 3, 0) == 0


def test_batched_waits_then_opens_together() -> None:
    """One hand-made trace: nothing held freezes without counting; the wait
    is ``ceil(W * (lowest / cap) ** 2)``, an idle rank or not; a rank with work and
    nothing running, or a long chunk in flight, opens at once; a queued
    leader freezes."""
    rule = Batched(Knobs(None, 64, 4))
    assert [rule.decide(Gathered(1, 0, 4)) for _ in range(2)] == [True, True]
    assert rule.run == 0
    busy = Gathered(4, 3, 4, held=True)  # wait ceil(4 * 9 / 16) = 3
    assert [rule.decide(busy) for _ in range(5)] == [False, True, True, False, True]
    light = Gathered(1, 0, 4, held=True)  # wait 0: open at once
    assert [rule.decide(light) for _ in range(2)] == [False, False]
    # An idle rank changes nothing: the wait still follows the least
    # loaded rank, ceil(4 * 4 / 16) = 1.
    assert rule.decide(Gathered(4, 2, 4, held=True, idle=True)) is False
    idle = Gathered(3, 3, 4, held=True, idle=True)  # wait 3
    assert [rule.decide(idle) for _ in range(3)] == [True, True, False]
    queued = Gathered(4, 2, 4, held=True, queued=True)
    assert [rule.decide(queued) for _ in range(3)] == [True, True, True]
    assert rule.decide(dataclasses.replace(queued, starved=True)) is False
    assert rule.decide(dataclasses.replace(queued, riding=True)) is False
    assert Batched(Knobs()).knobs.align_window == 32  # DEFAULT_BATCHED_WINDOW


class LocalLoadGate(BalanceSchedulerMixin):
    """Known-bad: the batching wait from this rank's own running count."""

    def _balance_decide(self, seen: Gathered) -> bool:
        mine = len(self.running)  # type: ignore[attr-defined]
        return super()._balance_decide(dataclasses.replace(seen, lowest=mine))


class LocalStarvedGate(BalanceSchedulerMixin):
    """Known-bad: "a rank is starved" read from this rank's own queues."""

    def _balance_decide(self, seen: Gathered) -> bool:
        mine = not self.running and bool(self.waiting)  # type: ignore[attr-defined]
        return super()._balance_decide(dataclasses.replace(seen, starved=mine))


class LocalRidingGate(BalanceSchedulerMixin):
    """Known-bad: "a long chunk is in flight" read from this rank alone."""

    def _balance_decide(self, seen: Gathered) -> bool:
        mine = bool(self._balance_riding())
        return super()._balance_decide(dataclasses.replace(seen, riding=mine))


class NoWait(Batched):
    """Known-bad: no batching wait (``cohort``'s rule 4)."""

    def decide(self, seen: Gathered) -> bool:
        return super().decide(dataclasses.replace(seen, lowest=0))


class NoWaitGate(BalanceSchedulerMixin):
    def _balance_policy(self) -> Any:
        if self._balance_rule is None:
            self._balance_rule = NoWait(
                Knobs(None, self.balance_max_held_steps, self.balance_align_window)
            )
        return self._balance_rule


class LeakyGate(BalanceSchedulerMixin):
    """Known-bad: the seam ignores the freeze."""

    def _should_stop_admitting_waiting(self) -> bool:
        return False


def _namespace(s: Setting) -> dict[str, Any]:
    return {
        "balance_max_held_steps": s.deadline,
        "balance_policy": "batched",
        "balance_align_window": s.window,
    }


@functools.cache
def _with(gate: type, base: type, s: Setting) -> type:
    return type(f"{gate.__name__}{base.__name__}", (gate, base), _namespace(s))


def _off_by_one(base: type, s: Setting) -> type:
    return compose(base, dataclasses.replace(s, deadline=s.deadline + 1))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(
            functools.partial(_with, LocalLoadGate),
            "decision differs across ranks",
            id="local-load",
        ),
        pytest.param(
            functools.partial(_with, LocalStarvedGate),
            "decision differs across ranks",
            id="local-starved",
        ),
        pytest.param(
            functools.partial(_with, LocalRidingGate),
            "decision differs across ranks",
            id="local-riding",
        ),
        pytest.param(_off_by_one, "held past the deadline", id="off-by-one"),
        pytest.param(
            functools.partial(_with, NoWaitGate), "wrong decision", id="no-wait"
        ),
        pytest.param(functools.partial(_with, LeakyGate), "left WAITING", id="leaky"),
    ],
)
def test_negative_controls_fail(make: Any, reason: str) -> None:
    with pytest.raises(AssertionError, match=reason):
        check(make, negative=True)
