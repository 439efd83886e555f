# SPDX-License-Identifier: Apache-2.0
"""The ``throttled`` policy through the simulated engine (``replay --engine
sim``): vLLM's own schedulers in lock step, each ``schedule()`` throttled
where the gate says so (``balance_throttles()``, as the engine hook asks),
the workload of ``test_replay_sim.py``.

Checks on the run's records: the ranks agree on every step, no rank admits
a new request on a frozen step, no rank with decodes to run computes
prefill tokens on a frozen step (chunks in flight are held), and every
request completes. Negative control: ``batched``'s run of the same workload
(it holds no chunk in flight) fails the chunk check.
"""

from __future__ import annotations

import pytest

from tests.test_replay_sim import OPTS, REQUESTS
from tests.test_replay_sim_batched import batched_errors
from vllm_ascend_balance.replay.sim.fleet import SimResult, simulate

# vLLM 0.27 and later (schedule(throttle_prefills)).
pytestmark = pytest.mark.lane_scope("release", "main", "fork")

BOUNDS = {"balance_align_window": 8, "balance_max_held_steps": 16}


def chunk_errors(result: SimResult) -> list[str]:
    """Frozen steps on which a rank with decodes computed prefill tokens."""
    return [
        f"step {s.step} rank {s.rank}: frozen, yet {s.prefill_tokens} prefill tokens"
        for steps in result.rank_steps
        for s in steps
        if s.frozen and s.decode_requests and s.prefill_tokens
    ]


def run(policy: str) -> SimResult:
    return simulate(True, REQUESTS, OPTS, bounds={"balance_policy": policy, **BOUNDS})


def test_throttled_holds_chunks_in_flight_through_the_sim() -> None:
    result = run("throttled")
    assert batched_errors(result) == [] and chunk_errors(result) == []
    frozen = [s.frozen for s in result.rank_steps[0]]
    assert any(frozen) and not all(frozen)
    done = [r for rs in result.rank_requests for r in rs if r.finish_step is not None]
    assert len(done) == len(REQUESTS)
    # Negative control: batched (no chunk hold) runs chunks on frozen steps.
    assert chunk_errors(run("batched"))
