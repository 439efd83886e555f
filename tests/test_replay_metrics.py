# SPDX-License-Identifier: Apache-2.0
"""Replay metrics in modeled time: the clock of the join, latencies per
request and per rank (router-placed requests included), idle steps apart,
starvation; and the property that identical modeled schedules give identical
metrics whatever the wall clock did, with a wall-clock metric as its
negative control."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_ascend_balance.replay.pipeline.join import join_run
from vllm_ascend_balance.replay.pipeline.metrics import run_metrics
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.records import (
    RankRequest,
    RankStep,
    RunRecords,
    RunStatus,
)
from vllm_ascend_balance.replay.pipeline.workload import ReplayRequest

pytestmark = pytest.mark.lane_scope("release")


def _step(k: int, rank: int, step_ms: float, **kw) -> RankStep:
    fields = dict(
        cost_ms=step_ms, step_ms=step_ms, running=1, waiting=0, prefill_tokens=0,
        decode_requests=1, new_requests=0, frozen=False, gathers=k, dummy=False,
    )  # fmt: skip
    fields.update(kw)
    return RankStep(step=k, rank=rank, **fields)


def _records(workload, routed, steps, requests, dp=2) -> RunRecords:
    rec = RunRecords(Mode("on", True), 0, dp)
    rec.steps, rec.requests = join_run(workload, routed, steps, requests)
    return rec


def test_clock_follows_steps_and_jumps_to_arrivals_after_idle():
    workload = [ReplayRequest(0, 0.0, 10, 2), ReplayRequest(1, 5.0, 10, 2)]
    # Steps 0-2 warm-up (dropped); request 0 admitted at 3, first token 3,
    # finished 4; request 1 (arrives at 5 s, engine idle) admitted at 6.
    steps = [[_step(k, r, 100.0) for k in range(8)] for r in range(2)]
    reqs = [
        [RankRequest("req-0-ab12cd34", 0, 3, 3, 4, 2)],
        [RankRequest("req-1", 1, 6, 6, 7, 2), RankRequest("warmup-1-0", 1, 0, 0, 1, 4)],
    ]
    run = _records(workload, [True, False], steps, reqs)
    assert [s.index for s in run.steps] == [3, 4, 5, 6, 7]
    assert [round(s.start_s, 6) for s in run.steps] == [0.0, 0.1, 0.2, 5.0, 5.1]
    r0, r1 = run.requests
    assert (r0.rank, r0.routed_by_vllm, r1.rank, r1.routed_by_vllm) == (
        0,
        True,
        1,
        False,
    )
    m = run_metrics(run, starvation_steps=2)
    assert m.ttft_p50_ms == pytest.approx(100.0)  # (0.1 - 0.0) and (5.1 - 5.0)
    assert m.tpot_p50_ms == pytest.approx(100.0)
    assert m.makespan_s == pytest.approx(5.2)
    # Per rank, whoever placed the request (vLLM's router for request 0).
    assert [x.requests for x in m.per_rank] == [1, 1]
    assert m.gathers_per_rank == (4, 4) and m.gathers_per_step == 1.0


def test_idle_steps_are_counted_apart_from_the_shares():
    workload = [ReplayRequest(0, 0.0, 10, 2)]
    idle = dict(running=0, waiting=0, dummy=True, decode_requests=0)
    steps = [
        [_step(0, r, 50.0, frozen=True), _step(1, r, 50.0), _step(2, r, 25.0, **idle),
         _step(3, r, 25.0, **idle)]
        for r in range(2)
    ]  # fmt: skip
    reqs = [[RankRequest("req-0", 0, 0, 0, 1, 2)], []]
    m = run_metrics(_records(workload, [True], steps, reqs), starvation_steps=1)
    assert (m.steps, m.idle_steps) == (2, 2)
    assert m.frozen_share == 0.5 and m.step_ms_mean == 50.0


def test_starvation_names_rank_and_longest_wait():
    workload = [ReplayRequest(i, 0.0, 10, 2) for i in range(3)]
    steps = [[_step(k, r, 100.0, frozen=k < 5) for k in range(8)] for r in range(2)]
    reqs = [
        [RankRequest("req-0", 0, 0, 0, 1, 2)],
        [RankRequest("req-1", 1, 5, 5, 6, 2), RankRequest("req-2", 1, 6, 6, 7, 2)],
    ]
    m = run_metrics(_records(workload, [True] * 3, steps, reqs), starvation_steps=5)
    s = m.starvation
    assert (s.requests, s.rank, s.per_rank) == (2, 1, {1: 2})
    assert s.longest_wait_s == pytest.approx(0.6)
    assert m.worst_rank == 1 and m.worst_rank_ttft_p50_ms == pytest.approx(650.0)


# ------------------------------------------------------------ the property
def _random_schedule(seed: int, dp: int):
    """A random but self-consistent modeled schedule: per-rank steps (costs,
    queue lengths, frozen flags) and per-request step indices."""
    rng = random.Random(seed)
    n_steps = rng.randint(5, 60)
    costs = [[rng.choice([25.0, 40.0, 76.5, 270.1]) for _ in range(dp)]
             for _ in range(n_steps)]  # fmt: skip
    steps = [
        [
            _step(k, r, max(costs[k]), cost_ms=costs[k][r],
                  running=rng.randint(0, 16), waiting=rng.randint(0, 4),
                  frozen=rng.random() < 0.3, prefill_tokens=rng.choice([0, 512]),
                  dummy=rng.random() < 0.1)
            for k in range(n_steps)
        ]
        for r in range(dp)
    ]  # fmt: skip
    workload, requests = [], [[] for _ in range(dp)]
    for i in range(rng.randint(1, 20)):
        admitted = rng.randrange(n_steps)
        first = rng.randint(admitted, n_steps - 1)
        finish = rng.randint(first, n_steps - 1)
        tokens = finish - first + 1
        workload.append(ReplayRequest(i, round(rng.uniform(0, 3), 3), 100, tokens))
        rank = rng.randrange(dp)
        requests[rank].append(
            RankRequest(f"req-{i}", rank, admitted, first, finish, tokens)
        )
    workload.sort(key=lambda r: r.arrival_s)
    return workload, steps, requests


def _wall_perturbed(steps, requests, rng: random.Random):
    """The same schedule as another run would record it: other wall times,
    other overruns, records in another order, vLLM's request-id suffixes."""
    steps = [
        [dataclasses.replace(s, wall_start=rng.uniform(0, 1e4),
                             wall_end=rng.uniform(1e4, 2e4),
                             overrun_s=rng.uniform(0, 0.1)) for s in rank]
        for rank in steps
    ]  # fmt: skip
    requests = [
        rng.sample(
            [dataclasses.replace(r, request_id=f"{r.request_id}-{rng.random():.8f}")
             for r in rank],
            len(rank),
        )
        for rank in requests
    ]  # fmt: skip
    return steps, requests


def _modeled(m):
    """Everything but the wall-clock diagnostics."""
    return {k: v for k, v in dataclasses.asdict(m).items() if not k.startswith("wall_")}


def _wall_ttft_p50(run: RunRecords) -> float:
    """Negative control: TTFT on the wall clock, as the replay measured it
    before (front-end send to first-token step's wall end)."""
    ends = {s.index: s.ranks[0].wall_end for s in run.steps}
    start = run.steps[0].ranks[0].wall_start
    ttft = sorted(
        ends[r.first_token_step] - start - r.arrival_s
        for r in run.requests
        if r.first_token_step in ends
    )
    return ttft[len(ttft) // 2] if ttft else 0.0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), dp=st.integers(1, 4))
def test_identical_modeled_schedules_give_identical_metrics(seed, dp):
    workload, steps, requests = _random_schedule(seed, dp)
    routed = [True] * len(workload)
    rng = random.Random(seed + 1)
    a = _records(workload, routed, *_wall_perturbed(steps, requests, rng), dp=dp)
    b = _records(workload, routed, *_wall_perturbed(steps, requests, rng), dp=dp)
    assert _modeled(run_metrics(a, 3)) == _modeled(run_metrics(b, 3))
    # Negative control: a wall-clock latency tells the two runs apart, so
    # the comparison above would catch a metric that read the wall clock.
    if a.steps and any(r.first_token_step is not None for r in a.requests):
        assert _wall_ttft_p50(a) != _wall_ttft_p50(b)


def test_a_run_that_stopped_early_keeps_its_status_and_partial_requests():
    workload = [ReplayRequest(0, 0.0, 10, 2), ReplayRequest(1, 0.0, 10, 2)]
    steps = [[_step(k, r, 30.0) for k in range(2)] for r in range(2)]
    reqs = [[RankRequest("req-0", 0, 0, 0, None, 1)], []]
    run = _records(workload, [True, True], steps, reqs)
    run.status, run.cause = RunStatus.FAILED, "RuntimeError: engine died"
    m = run_metrics(run, 3)
    assert m.completed == 0 and m.requests == 2 and run.measured
    assert run.requests[1].rank is None and not run.requests[0].done


def test_plot_and_json_of_a_run(tmp_path):
    from vllm_ascend_balance.replay.pipeline.report import plot_running, run_json

    workload, steps, requests = _random_schedule(5, 2)
    run = _records(workload, [True] * len(workload), steps, requests)
    plot_running(tmp_path / "running.png", [run], cap=16)
    assert (tmp_path / "running.png").read_bytes()[:4] == b"\x89PNG"
    data = run_json(run, run_metrics(run, 3))
    assert data["status"] == "ok" and len(data["requests"]) == len(workload)
    assert len(data["timeline"]["running"]) == 2
