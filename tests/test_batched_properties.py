# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``batched`` policy (``balance_policy:
"batched"``, :class:`~vllm_ascend_balance.gate.policies.batched.Batched`).

Real schedulers in lock step over the simulated all-gather, the harness of
``tests/support/lockstep_policy.py``, prompts chunked by a small token
budget as ``cohort``'s: each rank's payload is ``(len(running), held,
queued, starved, riding)``; the window and deadline vary per example.

Properties (a)-(d) of the harness: ranks agree, the decision equals
:func:`expected` (an oracle written from the policy's docstring,
independently of the package), the deadline bounds every hold, nothing
leaves WAITING while frozen.

Negative controls (each must make the properties fail): the batching wait
from the rank's own running count instead of the gathered smallest (ranks
disagree), the starved or the riding flag from the rank's own queues (ranks
disagree), a deadline off by one (held past it), no batching wait
(``cohort``'s rule 4; wrong decision), and a seam that ignores the freeze
(admits while frozen).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import lockstep_policy as lockstep
from tests.support.lockstep_policy import CHUNKED, Row, Setting, anyone
from tests.test_gate_properties import BASES, LockstepScenario, Rig, Scenario
from vllm_ascend_balance.gate.policies import Batched, Gathered, Knobs
from vllm_ascend_balance.gate.policies.batched import batching_wait
from vllm_ascend_balance.wiring import composition

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


def compose(base: type, s: Setting) -> type:
    return composition.compose_scheduler(
        base, max_held_steps=s.deadline, policy="batched", align_window=s.window
    )


def freeze_rule(row: list[Row], since: float, cap: int, s: Setting) -> bool:
    """The policy's docstring: closed by default when nothing is held (the
    deadline ignores it); a starved rank or a chunk riding opens; a queued
    leader freezes; else the batching wait, ``ceil(W (lowest / cap)^2)``
    from the gathered smallest running count, must have passed since the
    last opening."""
    held, queued, starved, riding = anyone(row)
    if not held:
        return True
    if starved or riding:
        return False
    if queued:
        return True
    lowest = min(r[0] for r in row)
    return since < math.ceil(s.window * lowest**2 / cap**2)


def expected(rows: list[list[Row]], cap: int, s: Setting) -> list[str]:
    """Per gather ``"frozen"``, ``"open"`` or ``"fail-open"``."""
    return lockstep.expected(rows, cap, s, freeze_rule)


def classify(row: list[Row], state: str) -> Iterator[str]:
    if state == "frozen" and anyone(row) == (True, False, False, False):
        yield "batching wait"


def _batching_example() -> LockstepScenario:
    """A trace that surely waits to batch: two ranks at cap 4, each two
    long requests early (decoding, so the smallest running count is 2, a
    wait of ``ceil(6 * 4 / 16) = 2`` at W 6) and short ones arriving after
    the first opening."""
    rank0 = ((0, 4, 20), (0, 4, 20), (2, 4, 4), (3, 4, 4))
    rank1 = ((0, 4, 20), (0, 4, 20), (2, 4, 4), (4, 4, 4))
    return LockstepScenario(BASES[0], 4, 4, 12, (rank0, rank1))


BATCHED = lockstep.Policy(
    columns=("held", "queued", "starved", "riding"),
    rule=freeze_rule,
    settings=lockstep.SETTINGS,
    reached=frozenset(
        {"batching wait", "held up to the deadline", "fail-open", "open"}
    ),
    classify=classify,
    examples=(
        (_batching_example(), Setting(6, 8)),
        (_batching_example(), Setting(6, 2)),
    ),
    budget=CHUNKED,
)


def test_batched_properties() -> None:
    lockstep.check_reached(BATCHED, compose)


def test_batched_sends_its_four_flags() -> None:
    """The batched class's payload is ``(len(running), held, queued,
    starved, riding)``; its gathered flags land on those fields, not on
    cohort's ``idle``."""
    base = BASES[0]
    scenario = Scenario(base, 2, 400, CHUNKED, 4, ((0, 24, 4), (0, 4, 4)))
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


#: Known-bad: the batching wait from this rank's own running count.
LocalLoadGate = lockstep.local_view("lowest", lambda s: len(s.running))
#: Known-bad: "a rank is starved" read from this rank's own queues.
LocalStarvedGate = lockstep.local_view(
    "starved", lambda s: not s.running and bool(s.waiting)
)
#: Known-bad: "a long chunk is in flight" read from this rank alone.
LocalRidingGate = lockstep.local_view("riding", lambda s: bool(s._balance_riding()))


class NoWait(Batched):
    """Known-bad: no batching wait (``cohort``'s rule 4)."""

    def decide(self, seen: Gathered) -> bool:
        return super().decide(dataclasses.replace(seen, lowest=0))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(
            lockstep.with_gate(LocalLoadGate, compose),
            "decision differs across ranks",
            id="local-load",
        ),
        pytest.param(
            lockstep.with_gate(LocalStarvedGate, compose),
            "decision differs across ranks",
            id="local-starved",
        ),
        pytest.param(
            lockstep.with_gate(LocalRidingGate, compose),
            "decision differs across ranks",
            id="local-riding",
        ),
        pytest.param(
            lockstep.off_by_one(compose), "held past the deadline", id="off-by-one"
        ),
        pytest.param(
            lockstep.with_gate(lockstep.rule_gate(NoWait), compose),
            "wrong decision",
            id="no-wait",
        ),
        pytest.param(
            lockstep.with_gate(lockstep.LeakyGate, compose), "left WAITING", id="leaky"
        ),
    ],
)
def test_negative_controls_fail(make: Any, reason: str) -> None:
    lockstep.check_fails(BATCHED, make, reason)
