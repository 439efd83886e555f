# SPDX-License-Identifier: Apache-2.0
"""The ``throttled`` policy through the simulated engine (``replay --engine
sim``): vLLM's own schedulers in lock step, the package's exchange and
decision, each ``schedule()`` throttled where the gate says so
(``balance_throttles()``, as the engine hook asks), the workload of
``test_replay_sim.py``.

Checks on the run's records: every rank takes the same decision on every
step, both decisions occur, no rank admits a new request on a frozen step,
no rank with decodes to run computes prefill tokens on a step whose
decision holds chunks (chunks in flight are held), and every request
completes. (The policy that this file checked before, ``batched``, was
retired into ``throttled``; its checks run here.)

Negative controls: the same run's records with one rank's decision flipped
on a step, and with a request admitted on a frozen step, each fail the
agreement check; a run whose chunk holds never reach ``schedule()`` (the
engine hook left out) fails the chunk check. (A rank-local transport is no
usable control here: a rank that sees only its own payload can close
forever and the run never ends; the property tests hold that control.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from tests.test_replay_sim import OPTS, REQUESTS
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.replay.sim.fleet import SimResult, simulate

# vLLM 0.27 and later (schedule(throttle_prefills)).
pytestmark = pytest.mark.lane_scope("release", "main", "fork")

BOUNDS = {
    "balance_policy": "throttled",
    "balance_align_window": 8,
    "balance_max_held_steps": 16,
}

#: rank -> the ``balance_gathers`` values (one per step) at which the
#: decision for that step's ``schedule()`` held chunks.
ChunkSteps = dict[int, set[int]]


@dataclasses.dataclass
class Run:
    result: SimResult
    chunk_steps: ChunkSteps


def agreement_errors(result: SimResult) -> list[str]:
    """Violations in a run's per-rank step records (messages name them)."""
    errors: list[str] = []
    ranks = result.rank_steps
    for k in range(result.steps):
        frozen = {ranks[r][k].frozen for r in range(len(ranks))}
        if len(frozen) != 1:
            errors.append(f"step {k}: ranks decided differently")
            continue
        if frozen == {True}:
            admitted = [ranks[r][k].new_requests for r in range(len(ranks))]
            if any(admitted):
                errors.append(f"step {k}: frozen, yet admitted {admitted}")
    return errors


def chunk_errors(run: Run) -> list[str]:
    """Steps whose decision held chunks on which a rank with decodes
    computed prefill tokens."""
    return [
        f"step {s.step} rank {s.rank}: chunks held, yet {s.prefill_tokens} "
        f"prefill tokens"
        for steps in run.result.rank_steps
        for s in steps
        if s.gathers in run.chunk_steps[s.rank]
        and s.decode_requests
        and s.prefill_tokens
    ]


def _simulate(hook: bool = True) -> Run:
    """The throttled run, noting each rank's steps whose decision held
    chunks; ``hook`` False: ``balance_throttles`` answers no (the engine
    hook left out: the decision holds chunks, ``schedule()`` never hears)."""
    original = BalanceSchedulerMixin.balance_throttles
    chunk_steps: ChunkSteps = {}

    def noted(self: Any) -> bool:
        if self.balance_decision.hold_chunks:  # decided by a gather: a group
            rank = self.dp_group.rank()
            chunk_steps.setdefault(rank, set()).add(self.balance_gathers)
        return original(self) if hook else False

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BalanceSchedulerMixin, "balance_throttles", noted)
        result = simulate(True, REQUESTS, OPTS, bounds=BOUNDS)
    for rank in range(len(result.rank_steps)):
        chunk_steps.setdefault(rank, set())
    return Run(result, chunk_steps)


@pytest.fixture(scope="module")
def throttled_run() -> Iterator[Run]:
    yield _simulate()


def test_throttled_runs_through_the_sim(throttled_run: Run) -> None:
    result = throttled_run.result
    assert agreement_errors(result) == []
    frozen = [s.frozen for s in result.rank_steps[0]]
    assert any(frozen) and not all(frozen)  # the check saw both decisions
    assert result.board_gathers == [result.steps] * 2
    done = [r for rs in result.rank_requests for r in rs if r.finish_step is not None]
    assert len(done) == len(REQUESTS)


def test_throttled_holds_chunks_in_flight_through_the_sim(throttled_run: Run) -> None:
    assert chunk_errors(throttled_run) == []
    # The check saw steps that held chunks while a rank had decodes to run.
    held = [
        s
        for steps in throttled_run.result.rank_steps
        for s in steps
        if s.gathers in throttled_run.chunk_steps[s.rank] and s.decode_requests
    ]
    assert held
    # Negative control: the same policy without the hook runs chunks there.
    assert chunk_errors(_simulate(hook=False))


def _altered(result: SimResult, decision: bool, **change: object) -> SimResult:
    """``result`` with rank 1's record of its first step of the given
    decision replaced by ``change``."""
    steps = [list(r) for r in result.rank_steps]
    k = next(i for i, s in enumerate(steps[1]) if s.frozen == decision)
    steps[1][k] = dataclasses.replace(steps[1][k], **change)
    return dataclasses.replace(result, rank_steps=steps)


@pytest.mark.parametrize(
    ("frozen", "change", "reason"),
    [
        (False, {"frozen": True}, "decided differently"),
        (True, {"new_requests": 1}, "frozen, yet admitted"),
    ],
)
def test_negative_controls_fail_the_check(
    throttled_run: Run, frozen: bool, change: dict[str, object], reason: str
) -> None:
    errors = agreement_errors(_altered(throttled_run.result, frozen, **change))
    assert any(reason in e for e in errors)
