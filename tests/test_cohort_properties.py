# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``cohort`` policy (``balance_policy:
"cohort"``, :class:`~vllm_ascend_balance.gate.policies.cohort.Cohort`).

Real schedulers in lock step over the simulated all-gather, the harness of
``tests/support/lockstep_policy.py``, with a token budget small enough that
prompts are chunked, so the "riding" flag is exercised: each rank's payload
is ``(len(running), held, queued, idle, riding)``; the generated window and
deadline vary per example.

Properties (a)-(d) of the harness: ranks agree, the decision equals
:func:`expected` (an oracle written from the policy's docstring,
independently of the package), the deadline bounds every hold, nothing
leaves WAITING while frozen.

Negative controls (each must make the properties fail): the riding flag
read from the rank's own requests instead of the gathered flag (ranks
disagree), a deadline off by one (held past it), and the gate open by
default when nothing is held (``aligned``'s rule; wrong decision).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import lockstep_policy as lockstep
from tests.support.lockstep_policy import CHUNKED, Row, Setting, anyone
from tests.test_gate_properties import BASES, LockstepScenario, Rig, Scenario
from vllm_ascend_balance.gate.policies import Cohort, Gathered, Knobs
from vllm_ascend_balance.wiring import composition

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


def compose(base: type, s: Setting) -> type:
    return composition.compose_scheduler(
        base, max_held_steps=s.deadline, policy="cohort", align_window=s.window
    )


def freeze_rule(row: list[Row], since: float, cap: int, s: Setting) -> bool:
    """The policy's docstring: closed by default when nothing is held (the
    deadline ignores it); a chunk riding opens; a queued leader freezes; no
    idle rank opens; else the window must have passed since the last
    opening."""
    held, queued, idle, riding = anyone(row)
    if not held:
        return True
    if riding:
        return False
    if queued:
        return True
    return idle and since < s.window


def expected(rows: list[list[Row]], cap: int, s: Setting) -> list[str]:
    """Per gather ``"frozen"``, ``"open"`` or ``"fail-open"``."""
    return lockstep.expected(rows, cap, s, freeze_rule)


def classify(row: list[Row], state: str) -> Iterator[str]:
    held, queued, idle, riding = anyone(row)
    if state == "frozen" and held and not queued:
        yield "frozen for alignment"
    if state == "open" and riding and idle:
        yield "rode a chunk"


def _riding_example() -> LockstepScenario:
    """A trace that surely rides a chunk and freezes for alignment: rank 0
    gets a 40-token prompt (chunks of 16, 16, 8) and then short ones that
    wait behind it, rank 1 one short request early and then nothing
    (idle)."""
    rank0 = ((0, 40, 6), (1, 4, 4), (3, 4, 4), (5, 4, 4))
    return LockstepScenario(BASES[0], 4, 4, 10, (rank0, ((0, 4, 3),)))


COHORT = lockstep.Policy(
    columns=("held", "queued", "idle", "riding"),
    rule=freeze_rule,
    settings=lockstep.SETTINGS,
    reached=frozenset(
        {
            "frozen for alignment",
            "held up to the deadline",
            "fail-open",
            "open",
            "rode a chunk",
        }
    ),
    classify=classify,
    examples=((_riding_example(), Setting(6, 2)),),
    budget=CHUNKED,
)


def test_cohort_properties() -> None:
    lockstep.check_reached(COHORT, compose)


def test_cohort_sends_five_columns_and_contract_one() -> None:
    """The cohort class's payload is ``(len(running), held, queued, idle,
    riding)``; the default class's stays ``len(running)`` alone."""
    base = BASES[0]
    scenario = Scenario(base, 2, 400, CHUNKED, 4, ((0, 24, 4), (0, 4, 4)))
    contract = Rig(composition.compose_scheduler(base), scenario)
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


#: Known-bad: "a chunk rides" read from this rank's own requests.
LocalRidingGate = lockstep.local_view("riding", lambda s: s._balance_riding())


class OpenByDefault(Cohort):
    """Known-bad: open when nothing is held (``aligned``'s rule 2): the
    request that arrives next is admitted alone before any rank saw it."""

    def _closed(self) -> bool:
        super()._closed()
        return False


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(
            lockstep.with_gate(LocalRidingGate, compose),
            "decision differs across ranks",
            id="local",
        ),
        pytest.param(
            lockstep.off_by_one(compose), "held past the deadline", id="off-by-one"
        ),
        pytest.param(
            lockstep.with_gate(lockstep.rule_gate(OpenByDefault), compose),
            "wrong decision",
            id="open-by-default",
        ),
    ],
)
def test_negative_controls_fail(make: Any, reason: str) -> None:
    lockstep.check_fails(COHORT, make, reason)
