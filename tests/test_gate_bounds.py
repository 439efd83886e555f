# SPDX-License-Identifier: Apache-2.0
"""The contract (``leader_at_cap``) in lock step, unbounded and under each
bound, against the reference model of docs/gate-contract.md.

Real schedulers, one per DP rank, step in lock step over the simulated
all-gather (:mod:`tests.support.lockstep`: properties (a)-(g), the oracle
:mod:`tests.support.gate_oracle`): the contract unbounded, with the
frozen-run bound ``balance_max_frozen_steps`` and with the hold bound
``balance_max_held_steps`` (N 1-4). The generated traces replace the DP
group mid-trace (a rank may join); a hand-made one replaces it in the
middle of a frozen run, where the restart changes the decision.

Negative controls (each must fail the property it names): a bound one step
late, the frozen-run bound counted per rank, the hold age read per rank, a
rank deciding on the previous step's vector, a seam that ignores the
decision, a gate that keeps its run state when the group is replaced, and
``balance_frozen_gathers`` counted on every gather. Also: the seam defers to
the composed ``scheduler_cls`` while the gate is open (``or super()``), with
the gate that drops it as control.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import strategies as st
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support import known_bad_gates as bad
from tests.support import lockstep
from tests.support.lockstep import Gate, Trace
from tests.support.scheduler_rig import BASES, Rig, Scenario
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.wiring.composition import compose_scheduler

# why: real schedulers per rank in lock step (queues, caps, preemption)
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

CONTRACT = "leader_at_cap"
#: The gates under test, by bound.
GATES = {
    "unbounded": st.just(Gate(CONTRACT)),
    "frozen": st.builds(Gate, st.just(CONTRACT), max_frozen_steps=st.integers(1, 4)),
    "held": st.builds(Gate, st.just(CONTRACT), max_held_steps=st.integers(1, 4)),
}


def leader_trace(
    base: type = Scheduler, regroup: int | None = 7, joiner: bool = False
) -> Trace:
    """Rank 0 stays at the cap (2) with a queue; rank 1, decoding, gets a
    40-token prompt on a held step (chunked once admitted); the group is
    replaced at step 7, two steps into a frozen run under N = 3."""
    leader = tuple((0, 8, 40) for _ in range(4))
    rank1 = ((1, 4, 40), (4, 40, 4))
    joins = ((7, 8, 4), (9, 8, 4)) if joiner else None
    return Trace(base, 2, 16, 14, (leader, rank1), regroup=regroup, joiner=joins)


#: Hand-made traces run first, by bound.
EXAMPLES = {
    "unbounded": ((leader_trace(BASES[1], joiner=True), Gate(CONTRACT)),),
    "frozen": ((leader_trace(), Gate(CONTRACT, max_frozen_steps=3)),),
    "held": ((leader_trace(BASES[1]), Gate(CONTRACT, max_held_steps=2)),),
}


@pytest.mark.parametrize(
    ("bound", "reached"),
    [
        pytest.param(
            "unbounded",
            {"held", "open", "starved rank", "arrival on a held step", "rank joined"},
            id="unbounded",
        ),
        pytest.param(
            "frozen",
            {"fail-open", "frozen run of N", "regroup changed the decision"},
            id="frozen-run-bound",
        ),
        pytest.param(
            "held",
            {"fail-open", "held N times", "a held request is a chunk in flight"},
            id="hold-bound",
        ),
    ],
)
def test_contract_properties(bound: str, reached: set[str]) -> None:
    lockstep.check_reached(GATES[bound], reached, EXAMPLES[bound])


def test_frozen_run_bound_opens_after_n_example() -> None:
    """One hand-made trace: a leader pinned at the cap with N = 2 gives
    held, held, fail-open, ...; the properties hold on it."""
    seen = lockstep.run_trace(
        leader_trace(regroup=None), Gate(CONTRACT, max_frozen_steps=2)
    )
    assert {"fail-open", "frozen run of N"} <= seen


def _hold_age_column(gate: Gate) -> int:
    plan = compose_scheduler(Scheduler, gate.settings()).balance_plan()
    return plan.layout.quantities.index("hold_age")


@pytest.mark.parametrize(
    ("bound", "prop", "control"),
    [
        pytest.param(
            "frozen",
            "(c)",
            {"oracle_gate": lockstep.one_more("max_frozen_steps")},
            id="frozen-bound-off-by-one",
        ),
        pytest.param(
            "held",
            "(c)",
            {"oracle_gate": lockstep.one_more("max_held_steps")},
            id="hold-bound-off-by-one",
        ),
        pytest.param(
            "frozen", "(a)", {"make": bad.per_rank_counter}, id="per-rank-frozen-run"
        ),
        pytest.param(
            "held",
            "(a)",
            {"group": bad.local_column_group(_hold_age_column(Gate(CONTRACT, 1)))},
            id="per-rank-hold-age",
        ),
        pytest.param("frozen", "(a)", {"group": bad.stale_rank_one}, id="stale-vector"),
        pytest.param(
            "unbounded", "(d)", {"make": bad.with_gate(bad.LeakyGate)}, id="never-holds"
        ),
        pytest.param(
            "frozen", "(b)", {"make": bad.with_gate(bad.NoRestart)}, id="no-restart"
        ),
        pytest.param(
            "unbounded",
            "(g)",
            {"make": bad.with_gate(bad.CountsEveryGather)},
            id="counts-every-gather",
        ),
    ],
)
def test_negative_control_fails(bound: str, prop: str, control: dict[str, Any]) -> None:
    lockstep.check_fails(GATES[bound], prop, examples=EXAMPLES[bound], **control)


def _gather(sched: Any, group: BoardGroup, others: list[tuple[int, ...]]) -> bool:
    """Rank 0's real ``admission_gather()`` on ``group``, the other ranks
    posting ``others``; whether it holds admission."""
    group.board.post([sched.admission_payload(), *others])
    sched.dp_group = group
    sched.admission_gather()
    return bool(sched.balance_frozen)


@pytest.mark.parametrize("base", BASES)
def test_replaced_group_restarts_a_frozen_run(base: type) -> None:
    """Elastic EP replaces ``dp_group`` in the middle of a frozen run: a
    joining rank has no history, so every member starts the run over
    (N = 2: held, held, fail-open on the first group; replaced after one
    held step, two more held steps before the fail-open)."""
    scenario = Scenario(base, 3, 200, 512, 1, ())
    gated = compose_scheduler(base, GateSettings(max_frozen_steps=2))
    sched = Rig(gated, scenario).scheduler
    first, second = GatherBoard(2), GatherBoard(3)
    held = [_gather(sched, BoardGroup(first, 0), [(3,)])]
    group = BoardGroup(second, 0)
    held += [_gather(sched, group, [(3,), (3,)]) for _ in range(3)]
    assert held == [True, True, True, False], "the run did not restart"
    assert sched.balance_frozen_run == 0


def test_unbounded_is_the_contract() -> None:
    """No setting: the composed class is the unbounded contract."""
    for base in BASES:
        contract = compose_scheduler(base)
        assert contract.balance_settings == GateSettings()
        assert contract.balance_settings.max_frozen_steps is None
        assert contract.balance_settings.max_held_steps is None
        bounded = compose_scheduler(base, GateSettings(max_frozen_steps=3))
        assert bounded.balance_settings.max_frozen_steps == 3


def test_one_class_per_settings() -> None:
    """``compose_scheduler`` makes one class per combination (its
    docstring), however the settings are passed: the default and the same
    settings spelt out are one class."""
    for base in BASES:
        default = compose_scheduler(base)
        assert compose_scheduler(base, GateSettings()) is default, (
            "two classes for the contract's settings"
        )
        assert compose_scheduler(base, settings=GateSettings()) is default


class HoldingScheduler(Scheduler):
    """A ``scheduler_cls`` with an admission rule of its own: it admits
    nothing from WAITING."""

    def _should_stop_admitting_waiting(self) -> bool:
        return True


class DropsSuper(BalanceSchedulerMixin):
    """Known-bad: the seam answers the gate's decision alone."""

    def _should_stop_admitting_waiting(self) -> bool:
        return bool(self.balance_frozen)


def admitted_while_open(make: Callable[[type], type]) -> dict[str, int]:
    """Requests admitted on a step the gate leaves open, per composed base:
    upstream's ``Scheduler`` and :class:`HoldingScheduler`."""
    admitted = {}
    for base in (Scheduler, HoldingScheduler):
        rig = Rig(make(base), Scenario(base, 3, 200, 512, 1, ()))
        for i in range(2):
            rig.add(f"w{i}", 8, 4)
        assert not _gather(rig.scheduler, BoardGroup(GatherBoard(2), 0), [(0,)])
        admitted[base.__name__] = len(rig.schedule(0)["new"])
    return admitted


def check_open_gate_defers_to_the_class(make: Callable[[type], type]) -> None:
    admitted = admitted_while_open(make)
    assert admitted == {"Scheduler": 2, "HoldingScheduler": 0}, (
        f"the open gate does not defer to the scheduler_cls's seam: {admitted}"
    )


def test_open_gate_defers_to_the_scheduler_cls() -> None:
    """The seam is the gate's decision ``or super()``: composed onto a
    ``scheduler_cls`` whose own seam holds, the gate holds while open."""
    check_open_gate_defers_to_the_class(compose_scheduler)


def test_open_gate_defers_negative_control() -> None:
    def drops_super(base: type) -> type:
        return type(
            f"DropsSuper{base.__name__}", (DropsSuper, compose_scheduler(base)), {}
        )

    with pytest.raises(AssertionError, match="does not defer"):
        check_open_gate_defers_to_the_class(drops_super)
