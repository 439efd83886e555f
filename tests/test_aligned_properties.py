# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``aligned`` policy (``balance_policy:
"aligned"``, :class:`~vllm_ascend_balance.gate.policies.aligned.Aligned`).

Real schedulers in lock step over the simulated all-gather, the harness of
``tests/support/lockstep_policy.py``: each rank's payload is
``(len(running), held, queued, idle)``; the generated window, load
threshold and deadline vary per example.

Properties (a)-(d) of the harness: ranks agree, the decision equals
:func:`expected` (an oracle written from the policy's docstring,
independently of the package), the deadline bounds every hold, nothing
leaves WAITING while frozen; and

e. the contract is untouched: the default class sends ``len(running)``
   alone (the board refuses any other payload) and decides as before
   (``test_gate_properties.py``, ``test_queued_leader_properties.py``).

Negative controls (each must make the properties fail): the "every rank can
prefill" test read from the rank's own queue instead of the gathered flag
(ranks disagree), a deadline off by one, and a window that does not follow
the load (wrong decision).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.support import lockstep_policy as lockstep
from tests.support.lockstep_policy import Row, anyone
from tests.test_gate_properties import BASES, LockstepScenario, Rig, Scenario
from vllm_ascend_balance.gate.policies import Aligned, Gathered, Knobs
from vllm_ascend_balance.gate.scheduler import admission_cap
from vllm_ascend_balance.wiring import composition

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


@dataclasses.dataclass(frozen=True)
class Setting:
    window: int
    min_load: float
    deadline: int


def compose(base: type, s: Setting) -> type:
    return composition.compose_scheduler(
        base,
        max_held_steps=s.deadline,
        policy="aligned",
        align_window=s.window,
        align_min_load=s.min_load,
    )


def freeze_rule(row: list[Row], since: float, cap: int, s: Setting) -> bool:
    """The policy's docstring: a queued leader freezes; nothing held, no
    idle rank or a load under the threshold opens; else the window, growing
    with the load, must have passed since the last opening."""
    held, queued, idle = anyone(row)
    counts = [r[0] for r in row]
    load = (max(counts) + min(counts)) / (2 * cap)
    if queued:
        return True
    if not held or not idle or load < s.min_load:
        return False
    span = 1.0 - s.min_load
    window = (
        1 if span <= 0 else 1 + math.floor((s.window - 1) * (load - s.min_load) / span)
    )
    return since < window


def expected(rows: list[list[Row]], cap: int, s: Setting) -> list[str]:
    """Per gather ``"frozen"``, ``"open"`` or ``"fail-open"``."""
    return lockstep.expected(rows, cap, s, freeze_rule)


def classify(row: list[Row], state: str) -> Iterator[str]:
    if state == "frozen" and not anyone(row)[1]:
        yield "frozen for alignment"


def _aligning_example() -> LockstepScenario:
    """A trace that surely freezes for alignment (random ones do so only
    now and then): rank 0 keeps getting work while rank 1 runs one long
    request with nothing waiting (idle), at half the cap."""
    busy = tuple([(0, 8, 30)] * 3 + [(step, 8, 30) for step in (1, 2, 3)])
    return LockstepScenario(BASES[0], 4, 4, 8, (busy, ((0, 8, 30),)))


ALIGNED = lockstep.Policy(
    columns=("held", "queued", "idle"),
    rule=freeze_rule,
    settings=st.builds(
        Setting,
        window=st.integers(1, 6),
        min_load=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
        deadline=st.integers(1, 4),
    ),
    reached=frozenset(
        {"frozen for alignment", "held up to the deadline", "fail-open", "open"}
    ),
    classify=classify,
    examples=((_aligning_example(), Setting(6, 0.0, 1)),),
)


def test_aligned_properties() -> None:
    lockstep.check_reached(ALIGNED, compose)


def test_contract_class_sends_running_alone_and_aligned_four_columns() -> None:
    """(e) The default class's payload is ``len(running)`` alone; the
    aligned one's ``(len(running), held, queued, idle)``."""
    base = BASES[0]
    scenario = Scenario(base, 2, 400, 512, 4, ((0, 8, 4), (0, 8, 4), (0, 8, 4)))
    contract = Rig(composition.compose_scheduler(base), scenario)
    aligned = Rig(compose(base, Setting(4, 0.5, 8)), scenario)
    for rig in (contract, aligned):
        rig.arrive(0)
    assert contract.scheduler.admission_payload() == (0, ())
    assert aligned.scheduler.admission_payload() == (0, (1, 0, 0))


def test_aligned_waits_for_the_window_then_opens() -> None:
    """One hand-made trace at a full load: an idle rank keeps the others
    waiting for the window, never past it."""
    rule = Aligned(Knobs(None, 64, 3, 0.0))
    seen = Gathered(4, 4, 4, held=True, idle=True)
    decisions = [rule.decide(seen) for _ in range(8)]
    # The first request opens at once; then one opening every 3 gathers.
    assert decisions == [False, True, True, False, True, True, False, True]


#: Known-bad: "some rank is idle" read from this rank's own queues.
LocalIdleGate = lockstep.local_view(
    "idle",
    lambda sched: not sched.waiting and len(sched.running) < admission_cap(sched),
)


def _fixed_window(base: type, s: Setting) -> type:
    # The window at its largest whatever the load.
    return compose(base, dataclasses.replace(s, min_load=0.0, window=s.window + 2))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(
            lockstep.with_gate(LocalIdleGate, compose),
            "decision differs across ranks",
            id="local",
        ),
        pytest.param(
            lockstep.off_by_one(compose), "held past the deadline", id="off-by-one"
        ),
        pytest.param(_fixed_window, "wrong decision", id="fixed-window"),
    ],
)
def test_negative_controls_fail(make: Any, reason: str) -> None:
    lockstep.check_fails(ALIGNED, make, reason)
