# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``throttled`` policy (admission and prefill
chunks held for alignment, docs/gate-contract.md), under the hold bound
``balance_max_held_steps`` (N 1-4, its window ``balance_align_window`` W
1-6 or the default), the frozen-run bound, and the hold bound's default.

Real schedulers in lock step over the simulated all-gather, prompts
chunked by a small token budget, each step's ``schedule()`` throttled where
the gate asks (``balance_throttles()``), checked against the reference
model of the contract page (:mod:`tests.support.lockstep`, properties
(a)-(g)). Hand-made traces: a chunk held on a rank at its cap, one long
prompt at light load (its chunks are never held), the DP group replaced in
the middle of a wait, and the default bound read off the contract page.

Negative controls (each must fail the property it names): the old
``throttled`` (a chunk held on a rank at its cap not counted), the hold
bound one step late, a rank deciding on the previous step's vector, a gate
that leaves vLLM's ``prefill_capacity_bound`` set (a chunk runs on a step
that holds chunks), chunks held on every held step (with no rank held), a
gate that keeps its ``since`` when the group is replaced, and a seam that
ignores the decision.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support import known_bad_gates as bad
from tests.support import lockstep
from tests.support.gate_oracle import throttled_default_held
from tests.support.lockstep import Gate, Lockstep, Trace, compose
from tests.support.scheduler_rig import BASES
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup

# vLLM releases whose schedule() takes throttle_prefills; activation refuses
# the policy on the ascend lane's (tests/test_throttle_hook.py).
pytestmark = pytest.mark.lane_scope("release", "main", "fork")

POLICY = "throttled"
WINDOWS = st.one_of(st.none(), st.integers(1, 6))
GATES = {
    "held": st.builds(
        Gate, st.just(POLICY), max_held_steps=st.integers(1, 4), align_window=WINDOWS
    ),
    "frozen": st.builds(
        Gate, st.just(POLICY), max_frozen_steps=st.integers(1, 4), align_window=WINDOWS
    ),
}


def chunk_at_cap(base: type = Scheduler) -> Trace:
    """Rank 0 at its cap (2) with a queue and a 160-token prompt chunked
    beside a decode; rank 1 gets a short request every three steps, held
    until the bound opens: rank 0's chunk is held on every such wait."""
    rank0 = ((0, 4, 60), (0, 160, 4), (0, 4, 4))
    rank1 = ((0, 4, 60), *((at, 4, 4) for at in range(2, 16, 3)))
    return Trace(base, 2, 16, 16, (rank0, rank1))


def mid_wait(base: type = Scheduler) -> Trace:
    """Three decodes on each rank (cap 4), then a request on rank 1: with
    W = 16 it waits ceil(16 * 9 / 16) = 9 steps for alignment; the group is
    replaced on the fourth, which restarts the wait."""
    decodes = tuple((0, 4, 40) for _ in range(3))
    return Trace(base, 4, 16, 10, (decodes, (*decodes, (2, 4, 4))), regroup=5)


def light_load(base: type = Scheduler) -> Trace:
    """One 120-token prompt on rank 0 beside a decode; nothing else waits
    anywhere while it is chunked."""
    return Trace(base, 2, 16, 14, (((0, 4, 40), (2, 120, 4)), ((0, 4, 40),)))


EXAMPLES = {
    "held": (
        (chunk_at_cap(), Gate(POLICY, max_held_steps=2)),
        (mid_wait(BASES[1]), Gate(POLICY, max_held_steps=8, align_window=16)),
        (light_load(), Gate(POLICY, max_held_steps=4)),
    ),
    "frozen": ((chunk_at_cap(BASES[1]), Gate(POLICY, max_frozen_steps=3)),),
}


@pytest.mark.parametrize(
    ("bound", "reached"),
    [
        pytest.param(
            "held",
            {
                "chunk held at the cap",
                "chunk in flight, nothing waiting",
                "held N times",
                "fail-open",
                "starved rank",
                "regroup changed the decision",
            },
            id="hold-bound",
        ),
        pytest.param(
            "frozen", {"chunk held", "frozen run of N", "fail-open"}, id="frozen-run"
        ),
    ],
)
def test_throttled_properties(bound: str, reached: set[str]) -> None:
    lockstep.check_reached(GATES[bound], reached, EXAMPLES[bound])


def _run(trace: Trace, gate: Gate) -> Lockstep:
    run = Lockstep(trace, gate, compose, BoardGroup)
    run.run()
    run.verdict()
    return run


@pytest.mark.parametrize("base", BASES)
def test_long_prompt_at_light_load_is_never_held(base: type) -> None:
    """Nothing waits anywhere while the prompt is chunked: no step holds
    its chunks (it waited for alignment only before admission, less than
    the bound)."""
    run = _run(light_load(base), Gate(POLICY, max_held_steps=4))
    assert "chunk in flight, nothing waiting" in run.seen
    assert "chunk held" not in run.seen
    assert run.oracle.most_held.get("r0-1", 0) < 4


def test_chunk_at_the_cap_counts() -> None:
    """A chunk deferred on a rank at its cap counts toward the bound, as a
    waiting request does."""
    run = _run(chunk_at_cap(), Gate(POLICY, max_held_steps=2))
    assert "chunk held at the cap" in run.seen
    assert run.oracle.most_held["r0-1"] == 2


@pytest.mark.parametrize("base", BASES)
def test_default_hold_bound_is_the_documented_one(base: type) -> None:
    """No ``balance_max_held_steps`` configured: a request on a rank below
    its cap, held behind a queued leader, is held exactly the number of
    steps docs/gate-contract.md states for ``throttled``, then admitted."""
    documented = throttled_default_held()
    steps = documented + 6
    rank0 = ((0, 4, steps), (0, 4, steps), (0, 4, 4))
    rank1 = ((0, 4, steps), (2, 4, 4))
    run = _run(Trace(base, 2, 16, steps, (rank0, rank1)), Gate(POLICY))
    assert run.oracle.most_held["r1-1"] == documented, "not the documented bound"
    assert "fail-open" in run.seen


@pytest.mark.parametrize(
    ("prop", "control"),
    [
        pytest.param(
            "(c)",
            {"make": bad.with_gate(bad.ChunkAtCapUncounted)},
            id="chunk-at-cap-uncounted",
        ),
        pytest.param(
            "(c)",
            {"oracle_gate": lockstep.one_more("max_held_steps")},
            id="off-by-one",
        ),
        pytest.param("(a)", {"group": bad.stale_rank_one}, id="stale-vector"),
        pytest.param(
            "(e)",
            {"make": bad.with_gate(bad.KeepsCapacityBound)},
            id="capacity-bound-kept",
        ),
        pytest.param(
            "(f)",
            {"make": bad.with_gate(bad.ChunksWhenHeld)},
            id="chunks-with-nothing-held",
        ),
        pytest.param("(b)", {"make": bad.with_gate(bad.NoRestart)}, id="no-restart"),
        pytest.param("(d)", {"make": bad.with_gate(bad.LeakyGate)}, id="leaky"),
    ],
)
def test_negative_control_fails(prop: str, control: dict[str, Any]) -> None:
    lockstep.check_fails(GATES["held"], prop, examples=EXAMPLES["held"], **control)
