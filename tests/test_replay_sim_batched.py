# SPDX-License-Identifier: Apache-2.0
"""The ``batched`` policy through the simulated engine (``replay --engine
sim``): vLLM's own schedulers in lock step, the package's gather and
decision, the workload of ``test_replay_sim.py``.

Checks on the run's records: every rank takes the same decision on every
step, both decisions occur, no rank admits a new request on a frozen step,
and every request completes. Negative controls: the same run's records
with one rank's decision flipped on a step, and with a request admitted on
a frozen step, each fail the check. (A rank-local transport is no usable
control here: a rank that sees only its own payload can close forever and
the run never ends; the property tests hold that control.)
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.test_replay_sim import OPTS, REQUESTS
from vllm_ascend_balance.replay.sim.fleet import SimResult, simulate

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

BOUNDS = {
    "balance_policy": "batched",
    "balance_align_window": 8,
    "balance_max_held_steps": 16,
}


def batched_errors(result: SimResult) -> list[str]:
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


@pytest.fixture(scope="module")
def batched_run() -> SimResult:
    return simulate(True, REQUESTS, OPTS, bounds=BOUNDS)


def test_batched_runs_through_the_sim(batched_run: SimResult) -> None:
    result = batched_run
    assert batched_errors(result) == []
    frozen = [s.frozen for s in result.rank_steps[0]]
    assert any(frozen) and not all(frozen)  # the check saw both decisions
    assert result.board_gathers == [result.steps] * 2
    done = [r for rs in result.rank_requests for r in rs if r.finish_step is not None]
    assert len(done) == len(REQUESTS)


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
    batched_run: SimResult, frozen: bool, change: dict[str, object], reason: str
) -> None:
    errors = batched_errors(_altered(batched_run, frozen, **change))
    assert any(reason in e for e in errors)
