# SPDX-License-Identifier: Apache-2.0
"""A peer policy on the real deployment's schedulers: real vLLM
``Scheduler`` objects in spawned ranks, a real gloo DP group from vLLM's
``ParallelConfig.stateless_init_dp_group()``, the engine's order of calls
(``schedule()``, the model's output, then the gather that
``DPEngineCoreProc._has_global_unfinished_reqs()`` is followed by).

Checked, per step:

- every rank gathered the same vector (the states of all ranks) and holds
  alike, and the hold is what the simulated engine's policy decides from
  that vector (the same class, fed the gathered vectors in order);
- a held step admits no new WAITING request though some wait, and such
  steps occur (not vacuous);
- negative control: a scheduler whose seam (and throttle) ignores the hold
  admits on held steps, and the same check flags it.

The right scheduler and the known-bad one run in the same two spawned
ranks on the same gloo group, one after the other, each a fresh scheduler
(issue 58: one start-up of the ranks, which import vLLM, not two).

What the real AsyncLLM deployment adds (the hooks on ``DPEngineCoreProc``)
is exercised by ``scripts/replay`` runs recorded in docs/peer-policies.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import run_processes
from tests.support.scratch import exit_without_teardown
from vllm_ascend_balance.replay.peers import RankState, make_policy

pytestmark = [pytest.mark.lane_scope("release"), pytest.mark.multiproc]

#: TensorRT-LLM's attention-DP balance, no batching wait: it holds context
#: while one rank has some and another none (up to 50 iterations).
SPEC = "trtllm-adp:50:0"
STEPS = 24
JOIN_TIMEOUT_S = 300  # hang guard only


def _arrivals(rank: int) -> dict[int, int]:
    """Step -> new requests: both ranks start with two; rank 0 gets three
    more at step 3, rank 1 one at step 12 (which releases the hold)."""
    return {0: 2, 3: 3} if rank == 0 else {0: 2, 12: 1}


def _seam_ignores_hold(cls: type, vllm_scheduler: type) -> type:
    """Known bad: the seam answers as vLLM's own, whatever the hold, and
    the hold throttles nothing (on a vLLM with ``throttle_prefills`` the
    throttle alone would keep a rank with decodes from admitting)."""

    def _should_stop_admitting_waiting(self: Any) -> bool:
        return bool(vllm_scheduler._should_stop_admitting_waiting(self))

    bad = {
        "_should_stop_admitting_waiting": _should_stop_admitting_waiting,
        "peer_throttles": lambda self: False,
    }
    return type("Bad", (cls,), bad)


def _rank_main(rank: int, parallel_config: Any, out_paths: dict[str, str]) -> None:
    """Both variants on this rank, the right one then the known-bad one
    (``out_paths``: variant -> its rows' file), on one DP group."""
    from vllm.distributed.utils import (
        stateless_destroy_torch_distributed_process_group,
    )

    parallel_config.data_parallel_rank = rank
    parallel_config.data_parallel_rank_local = rank
    group = parallel_config.stateless_init_dp_group()
    for variant, out_path in out_paths.items():
        rows = _steps(rank, group, bad=variant == "bad")
        Path(out_path).write_text(json.dumps(rows))
    stateless_destroy_torch_distributed_process_group(group)
    exit_without_teardown()


def _steps(rank: int, group: Any, bad: bool) -> list[dict[str, Any]]:
    """:data:`STEPS` engine steps of a fresh scheduler on this rank."""
    import dataclasses
    import inspect

    from vllm.v1.core.sched.scheduler import Scheduler

    from tests.support.model_outputs import fake_model_output
    from tests.support.vllm_objects import make_request, make_scheduler
    from vllm_ascend_balance.replay.real.peer_gate import peer_scheduler_class

    cls = peer_scheduler_class(Scheduler, SPEC, lambda: 0.0)
    if bad:
        cls = _seam_ignores_hold(cls, Scheduler)
    sched = make_scheduler(cls, max_num_seqs=8, max_num_batched_tokens=256)
    throttles = "throttle_prefills" in inspect.signature(sched.schedule).parameters
    rows = []
    for step in range(STEPS):
        for i in range(_arrivals(rank).get(step, 0)):
            sched.add_request(make_request(f"r{rank}-{step}-{i}", 32, max_tokens=40))
        held, waiting = sched.peer_hold, len(sched.waiting)
        # The engine's order: _should_throttle_prefills() (the pass noted),
        # schedule(), the executor's execute_model (the pass recorded).
        sched.peer_before_pass()
        kwargs = {"throttle_prefills": sched.peer_throttles()} if throttles else {}
        output = sched.schedule(**kwargs)
        sched.peer_after_pass(output)
        sched.update_from_output(output, fake_model_output(sched, output, step))
        sched.peer_decide(group)
        rows.append(
            {
                "held": held,
                "waiting": waiting,
                "admitted": len(output.scheduled_new_reqs),
                "gathered": [dataclasses.asdict(g) for g in sched.peer_gathered],
                "next_hold": sched.peer_hold,
            }
        )
    return rows


VARIANTS = ("ok", "bad")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[dict]]]:
    """Variant (``ok``, ``bad``) -> per rank, its rows; both variants from
    one start-up of the two ranks."""
    from vllm.config import ParallelConfig

    tmp = tmp_path_factory.mktemp("peer-gate")
    config = ParallelConfig(data_parallel_size=2, data_parallel_master_ip="127.0.0.1")
    paths = {v: [tmp / f"{v}{rank}.json" for rank in range(2)] for v in VARIANTS}
    args = [(r, config, {v: str(paths[v][r]) for v in VARIANTS}) for r in range(2)]
    joined = run_processes(_rank_main, args, JOIN_TIMEOUT_S)
    assert not joined.hung and joined.exitcodes == [0, 0], joined
    return {v: [json.loads(p.read_text()) for p in paths[v]] for v in VARIANTS}


def admitted_while_held(ranks: list[list[dict[str, Any]]]) -> list[tuple[int, int]]:
    """``(rank, step)`` where a held step admitted a new request."""
    return [
        (r, s)
        for r, rows in enumerate(ranks)
        for s, row in enumerate(rows)
        if row["held"] and row["admitted"]
    ]


def test_peer_holds_alike_on_every_rank_and_admits_nothing_held(runs):
    ranks = runs["ok"]
    policy = make_policy(SPEC)
    for step, rows in enumerate(zip(*ranks, strict=True)):
        # Every rank gathered the same vector, and the decision after the
        # gather is the simulated engine's policy's on it.
        assert rows[0]["gathered"] == rows[1]["gathered"], step
        want = policy.decide([RankState(**g) for g in rows[0]["gathered"]])
        assert [row["next_hold"] for row in rows] == list(want), step
    assert admitted_while_held(ranks) == []
    held_with_waiting = sum(
        row["held"] and row["waiting"] > 0 for rows in ranks for row in rows
    )
    assert held_with_waiting >= 3  # the hold really kept requests waiting


def test_negative_control_a_seam_that_ignores_the_hold_is_caught(runs):
    ranks = runs["bad"]
    assert admitted_while_held(ranks), "the known-bad seam went unnoticed"


def test_a_scheduler_without_the_seam_or_bad_knobs_is_one_line() -> None:
    from vllm_ascend_balance.replay.peers import PolicyError
    from vllm_ascend_balance.replay.real.peer_gate import peer_scheduler_class

    class NoSeam:  # an unpatched vLLM's Scheduler, as far as the seam goes
        pass

    with pytest.raises(PolicyError, match="has no _should_stop_admitting_waiting"):
        peer_scheduler_class(NoSeam, SPEC, lambda: 0.0)
    with pytest.raises(PolicyError, match="TIMEOUT_ITERS must be|expected trtllm"):
        peer_scheduler_class(NoSeam, "trtllm-adp:x", lambda: 0.0)
