# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``adp_balance`` policy (TensorRT-LLM's
attention-DP balance: context held until every rank has some, a batching
wait, a timeout; docs/gate-contract.md), under the hold bound
``balance_max_held_steps`` (N 1-4), the frozen-run bound, and the hold
bound's default (64), with ``balance_timeout_iters`` T 0-6 and
``balance_batching_wait_iters`` W 0-4 or their defaults.

Real schedulers in lock step over the simulated all-gather, prompts
chunked by a small token budget, each step's ``schedule()`` throttled where
the gate asks, checked against the reference model of the contract page
(:mod:`tests.support.lockstep`, properties (a)-(g)). Hand-made traces,
each with its count worked out by hand (so a mistake shared by the
oracle and the policy still fails): a rank with no context holds the
others' arrival until the timeout; synchronised arrivals wait W steps, and
wait again the next time; a rank running nothing with requests waiting
opens at once; the default hold bound read off the contract page.

Negative controls (each must fail the property it names): the batching
counter never reset, the timeout one step late, a hold that ignores "some
rank has no generation work", the hold bound one step late, a gate that
keeps its counters when the group is replaced, and a seam that ignores the
decision.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support import known_bad_gates as bad
from tests.support import lockstep
from tests.support.gate_oracle import adp_balance_default_held
from tests.support.lockstep import Gate, Lockstep, Trace, compose
from tests.support.scheduler_rig import BASES
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup

# vLLM releases whose schedule() takes throttle_prefills; the ascend lane's
# holds no chunks, only admission (tests/test_throttle_hook.py).
pytestmark = pytest.mark.lane_scope("release", "main", "fork")

POLICY = "adp_balance"
TIMEOUTS = st.one_of(st.none(), st.integers(0, 6))
WAITS = st.one_of(st.none(), st.integers(0, 4))
GATES = {
    "held": st.builds(
        Gate,
        st.just(POLICY),
        max_held_steps=st.integers(1, 4),
        timeout_iters=TIMEOUTS,
        batching_wait_iters=WAITS,
    ),
    "frozen": st.builds(
        Gate,
        st.just(POLICY),
        max_frozen_steps=st.integers(1, 4),
        timeout_iters=TIMEOUTS,
        batching_wait_iters=WAITS,
    ),
    "default": st.builds(
        Gate,
        st.just(POLICY),
        timeout_iters=st.integers(0, 6),
        batching_wait_iters=st.integers(0, 4),
    ),
}


def lone_arrival(base: type = Scheduler) -> Trace:
    """A decode on each rank (cap 4) from step 0, admitted together on
    step 1; rank 1 gets a short request on step 4 while rank 0 has no
    context."""
    return Trace(base, 4, 16, 14, (((0, 4, 40),), ((0, 4, 40), (4, 4, 4))))


def regrouped(base: type = Scheduler) -> Trace:
    """:func:`lone_arrival` with the group replaced on step 4, in the
    middle of the wait for the timeout (the counters restart)."""
    return Trace(base, 4, 16, 14, lone_arrival(base).ranks, regroup=4)


def starved_beside_decoder(base: type = Scheduler) -> Trace:
    """Rank 0 idle until its first request on step 3; rank 1 decodes with
    nothing else: rank 0 then has context and no generation work, rank 1
    generation work and no context (the timeout's other way out)."""
    return Trace(base, 4, 16, 8, (((3, 4, 4), (4, 4, 4)), ((0, 4, 40),)))


def synchronised(base: type = Scheduler) -> Trace:
    """A decode on each rank, then one request on each rank on step 3 and
    again on step 10 (every rank has context: the batching wait)."""
    rank = ((0, 4, 40), (3, 4, 4), (10, 4, 4))
    return Trace(base, 4, 16, 18, (rank, rank))


def chunked(base: type = Scheduler) -> Trace:
    """A decode on each rank; rank 0 gets a 120-token prompt (chunked by
    the 16-token budget) on step 3, rank 1 short requests now and then, the
    group replaced on step 9."""
    rank0 = ((0, 4, 40), (3, 120, 4))
    rank1 = ((0, 4, 40), (2, 4, 4), (7, 4, 4), (12, 4, 4))
    return Trace(base, 2, 16, 20, (rank0, rank1), regroup=9)


EXAMPLES = {
    "held": (
        (lone_arrival(), Gate(POLICY, max_held_steps=4, timeout_iters=3)),
        (synchronised(BASES[1]), Gate(POLICY, max_held_steps=4, batching_wait_iters=2)),
        (chunked(), Gate(POLICY, max_held_steps=3, timeout_iters=5)),
        (regrouped(BASES[1]), Gate(POLICY, max_held_steps=8, timeout_iters=3)),
        (starved_beside_decoder(), Gate(POLICY, max_held_steps=8)),
    ),
    "frozen": ((chunked(BASES[1]), Gate(POLICY, max_frozen_steps=2)),),
    "default": ((chunked(), Gate(POLICY, timeout_iters=4, batching_wait_iters=2)),),
}


@pytest.mark.parametrize(
    ("bound", "reached"),
    [
        pytest.param(
            "held",
            {
                "held",
                "chunk held",
                "held N times",
                "fail-open",
                "starved rank",
                "arrival on a held step",
                "regroup changed the decision",
            },
            id="hold-bound",
        ),
        pytest.param(
            "frozen", {"held", "frozen run of N", "fail-open"}, id="frozen-run"
        ),
        pytest.param("default", {"held", "chunk held"}, id="default-bound"),
    ],
)
def test_adp_balance_properties(bound: str, reached: set[str]) -> None:
    lockstep.check_reached(GATES[bound], reached, EXAMPLES[bound])


def _run(trace: Trace, gate: Gate) -> Lockstep:
    run = Lockstep(trace, gate, compose, BoardGroup)
    run.run()
    run.verdict()
    return run


def _reasons(run: Lockstep) -> dict[str, int]:
    return run.ranks[0].scheduler.balance_reasons


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("timeout", [2, 3, 5])
def test_a_rank_without_context_holds_the_others_until_the_timeout(
    base: type, timeout: int
) -> None:
    """Worked by hand: step 0 holds (no rank has context; waiting_iters 1);
    on step 1 every rank has a request waiting and none running (all
    context, not all decoding): open, waiting_iters 0; from step 2 both
    ranks decode and rank 0 never has context, so waiting_iters reaches T
    on steps 1 + T, 1 + 2T, ..., which open. Rank 1's request arrives on
    step 4 (after that step's decision) and is held from step 4 until the
    first of those openings on or after it."""
    gate = Gate(POLICY, max_held_steps=16, timeout_iters=timeout)
    run = _run(lone_arrival(base), gate)
    first = next(1 + k * timeout for k in range(1, 20) if 1 + k * timeout >= 4)
    assert run.oracle.most_held.get("r1-1", 0) == first - 4
    assert _reasons(run)["timeout"] >= 1


@pytest.mark.parametrize("base", BASES)
def test_synchronised_ranks_wait_to_batch_every_time(base: type) -> None:
    """Both ranks get a request on step 3 and on step 10 while decoding;
    each arrives after its step's decision (held once, no rank had
    context), then waits W = 2 steps (the batching counter 1, 2), and is
    admitted on the next (the counter restarts): held W + 1 = 3 steps, the
    second pair as long as the first."""
    gate = Gate(POLICY, max_held_steps=8, batching_wait_iters=2)
    run = _run(synchronised(base), gate)
    for rank in (0, 1):
        assert run.oracle.most_held[f"r{rank}-1"] == 3
        assert run.oracle.most_held[f"r{rank}-2"] == 3
    assert _reasons(run)["batched"] == 2


@pytest.mark.parametrize("base", BASES)
def test_a_rank_with_nothing_to_run_opens_at_once(base: type) -> None:
    """Rank 0 gets its first request on step 3 while rank 1 decodes with a
    request waiting: rank 0 has requests waiting and nothing running (no
    generation work: the source's dummy only pads a rank with no active
    request), so the step opens although a batching wait is due."""
    trace = Trace(base, 4, 16, 8, (((3, 4, 4),), ((0, 4, 40), (3, 4, 4))))
    run = _run(trace, Gate(POLICY, max_held_steps=8, batching_wait_iters=4))
    assert run.oracle.most_held.get("r0-0", 0) == 1  # step 3 held, 4 opens
    assert run.oracle.most_held.get("r1-1", 0) == 1
    assert _reasons(run)["no_decode"] >= 1


@pytest.mark.parametrize("base", BASES)
def test_default_hold_bound_is_the_documented_one(base: type) -> None:
    """No ``balance_max_held_steps`` configured and a timeout longer than
    the trace: rank 1's request, held while rank 0 has no context, is held
    exactly the number of steps docs/gate-contract.md states for
    ``adp_balance``, then admitted by the bound."""
    documented = adp_balance_default_held()
    steps = documented + 6
    rank0 = ((0, 4, steps),)
    rank1 = ((0, 4, steps), (2, 4, 4))
    run = _run(
        Trace(base, 2, 16, steps, (rank0, rank1)),
        Gate(POLICY, timeout_iters=10 * steps),
    )
    assert run.oracle.most_held["r1-1"] == documented, "not the documented bound"
    assert "fail-open" in run.seen


@pytest.mark.parametrize(
    ("prop", "control"),
    [
        pytest.param(
            "(b)",
            {"make": bad.with_decide(bad.adp_batching_never_reset)},
            id="batching-never-reset",
        ),
        pytest.param(
            "(b)", {"make": bad.with_decide(bad.adp_timeout_late)}, id="timeout-late"
        ),
        pytest.param(
            "(b)",
            {"make": bad.with_decide(bad.adp_holds_without_decodes)},
            id="holds-without-decodes",
        ),
        pytest.param(
            "(c)",
            {"oracle_gate": lockstep.one_more("max_held_steps")},
            id="off-by-one",
        ),
        pytest.param("(b)", {"make": bad.with_gate(bad.NoRestart)}, id="no-restart"),
        pytest.param("(d)", {"make": bad.with_gate(bad.LeakyGate)}, id="leaky"),
    ],
)
def test_negative_control_fails(prop: str, control: dict[str, Any]) -> None:
    lockstep.check_fails(GATES["held"], prop, examples=EXAMPLES["held"], **control)
