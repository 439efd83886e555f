# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``queued_leader`` policy: admission held
while some rank is *queued* (requests waiting at its cap), under the hold
bound ``balance_max_held_steps`` or the frozen-run bound
``balance_max_frozen_steps`` (N 1-4).

Real schedulers in lock step over the simulated all-gather, checked
against the reference model of docs/gate-contract.md
(:mod:`tests.support.lockstep`, properties (a)-(g)); and a leader at the
cap with no queue does not hold admission under ``queued_leader`` (the
contract does).

Negative controls (each must fail the property it names): the hold bound
one step late, the *queued* flag read per rank (ranks disagree), the
contract's gate where ``queued_leader`` is asked (differs from the oracle),
and a seam that ignores the decision (admits while held).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support import known_bad_gates as bad
from tests.support import lockstep
from tests.support.lockstep import Gate, Trace
from tests.support.scheduler_rig import BASES
from vllm_ascend_balance.wiring.composition import compose_scheduler

# why: real schedulers per rank in lock step (waiting queue)
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

POLICY = "queued_leader"
GATES = {
    "held": st.builds(Gate, st.just(POLICY), max_held_steps=st.integers(1, 4)),
    "frozen": st.builds(Gate, st.just(POLICY), max_frozen_steps=st.integers(1, 4)),
}


def idle_leader(base: type = Scheduler) -> Trace:
    """Rank 0 fills its cap exactly (nothing waits there) while rank 1
    gets work."""
    burst = tuple((0, 8, 30) for _ in range(3))
    return Trace(base, 3, 16, 8, (burst, ((1, 8, 4), (2, 8, 4))))


def queued_trace(base: type = Scheduler) -> Trace:
    """Rank 0 at its cap (2) with a queue; rank 1 gets requests while it
    is held; the group is replaced mid-trace."""
    leader = tuple((0, 8, 40) for _ in range(4))
    return Trace(base, 2, 16, 14, (leader, ((3, 8, 4), (4, 30, 4))), regroup=8)


EXAMPLES = {
    "held": (
        (queued_trace(), Gate(POLICY, max_held_steps=2)),
        (idle_leader(BASES[1]), Gate(POLICY, max_held_steps=1)),
    ),
    "frozen": ((queued_trace(BASES[1]), Gate(POLICY, max_frozen_steps=3)),),
}


@pytest.mark.parametrize(
    ("bound", "reached"),
    [
        pytest.param(
            "held",
            {"held", "fail-open", "held N times", "arrival on a held step"},
            id="hold-bound",
        ),
        pytest.param(
            "frozen",
            {"held", "fail-open", "frozen run of N", "regroup changed the decision"},
            id="frozen-run-bound",
        ),
    ],
)
def test_queued_leader_properties(bound: str, reached: set[str]) -> None:
    lockstep.check_reached(GATES[bound], reached, EXAMPLES[bound])


def test_no_hold_behind_a_leader_with_no_queue() -> None:
    """One hand-made trace, the properties checked on it: the contract
    holds admission behind rank 0 at its cap, ``queued_leader`` does not."""
    queued = lockstep.run_trace(idle_leader(), Gate(POLICY, max_held_steps=4))
    assert "held" not in queued
    contract = lockstep.run_trace(idle_leader(), Gate("leader_at_cap"))
    assert "held" in contract


def _column(quantity: str) -> int:
    gate = Gate(POLICY, max_held_steps=1)
    plan = compose_scheduler(Scheduler, gate.settings()).balance_plan()
    return plan.layout.quantities.index(quantity)


def _contract(base: type, gate: Gate) -> type:
    """Known-bad: the contract's gate under the same bound."""
    return lockstep.compose(base, Gate("leader_at_cap", gate.max_held_steps))


@pytest.mark.parametrize(
    ("prop", "control"),
    [
        pytest.param(
            "(c)",
            {"oracle_gate": lockstep.one_more("max_held_steps")},
            id="off-by-one",
        ),
        pytest.param(
            "(a)", {"group": bad.local_column_group(_column("queued"))}, id="local"
        ),
        pytest.param("(b)", {"make": _contract}, id="contract"),
        pytest.param("(d)", {"make": bad.with_gate(bad.LeakyGate)}, id="leaky"),
    ],
)
def test_negative_control_fails(prop: str, control: dict[str, Any]) -> None:
    lockstep.check_fails(GATES["held"], prop, examples=EXAMPLES["held"], **control)
