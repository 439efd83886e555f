# SPDX-License-Identifier: Apache-2.0
"""The simulated engine (``replay --engine sim``): real schedulers, the real
gate decision, vLLM's real DP load-balancer rule, determinism.

Everything here runs vLLM's own ``Scheduler`` objects (the class activation
composes) in one process. Only the DP group's transport is stood in for
(:mod:`vllm_ascend_balance.replay.sim.dp_group`: N peers of a gloo/HCCL group
cannot exist in one process); ``torch.distributed.all_gather`` itself and the
mixin's decision code run unchanged.

Negative controls: a DP-group stand-in that hands every rank zeros (the
gate can then never see the leader at the cap) and one that hands each rank
only its own count (a rank-local gate) must both fail the gate trace check;
a rank posting a count other than its own is refused by the stand-in.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any
from unittest import mock

import pytest
import torch
from vllm.v1.core.sched.scheduler import Scheduler

from vllm_ascend_balance.replay.pipeline.engine import load_engine
from vllm_ascend_balance.replay.pipeline.metrics import run_metrics
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
from vllm_ascend_balance.replay.pipeline.workload import builtin_requests, load_workload
from vllm_ascend_balance.replay.sim import dp_group
from vllm_ascend_balance.replay.sim.fleet import SimOptions, SimResult, simulate
from vllm_ascend_balance.replay.sim.routing import Router
from vllm_ascend_balance.wiring.composition import compose_scheduler

# why: vLLM's real schedulers and its DP load-balancer rule
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

# The simulated engine composes balance in-process (plan_activation), which
# is refused while vllm-ascend's own balance patch is loaded.

# Two bursts of the built-in mix at DP 2, cap 8: ranks reach the cap, so
# the gate freezes on some steps and not on others.
OPTS = SimOptions(dp_size=2, max_num_seqs=8, max_num_batched_tokens=1024)
REQUESTS = builtin_requests(seed=3, num_bursts=2, burst=(24, 30))


@pytest.fixture(scope="module")
def on_run() -> SimResult:
    return simulate(True, REQUESTS, OPTS)


def gate_trace_errors(result: SimResult, cap: int) -> list[str]:
    """Violations of the contract in a simulated run's records: one gather
    per step on every rank, the same vector on every rank, each rank's own
    count at its index, and the next step frozen iff ``max == cap``."""
    errors: list[str] = []
    n = len(result.rank_steps)
    for rank in range(n):
        if len(result.gathers[rank]) != result.steps:
            errors.append(f"rank {rank}: {len(result.gathers[rank])} gathers")
    for k in range(result.steps):
        vectors = {tuple(result.gathers[r][k].gathered) for r in range(n)}
        if len(vectors) != 1:
            errors.append(f"step {k}: ranks gathered different vectors {vectors}")
        for r in range(n):
            g = result.gathers[r][k]
            if g.gathered[r] != g.local:
                errors.append(f"step {k}: rank {r} sent {g.local}, got {g.gathered}")
            if k + 1 < result.steps:
                used = result.rank_steps[r][k + 1].frozen
                if used != (max(g.gathered) == cap):
                    errors.append(f"step {k + 1}: rank {r} frozen={used} for {g}")
    return errors


def test_scheduler_class_is_what_activation_composes() -> None:
    on = simulate(True, REQUESTS[:3], OPTS)
    off = simulate(False, REQUESTS[:3], OPTS)
    assert on.starts[0].scheduler == compose_scheduler(Scheduler).__name__
    assert off.starts[0].scheduler == Scheduler.__name__
    assert off.board_gathers == [0, 0] and off.gathers == [[], []]


def test_gate_trace_follows_the_contract(on_run: SimResult) -> None:
    cap = on_run.starts[0].cap
    assert gate_trace_errors(on_run, cap) == []
    frozen = [s.frozen for s in on_run.rank_steps[0]]
    assert any(frozen) and not all(frozen)  # the check saw both decisions
    assert on_run.board_gathers == [on_run.steps] * 2
    # every request of the workload completes
    done = [r for rs in on_run.rank_requests for r in rs if r.finish_step is not None]
    assert len(done) == len(REQUESTS)


class _ZerosGroup(dp_group.BoardGroup):
    """Known-bad transport: every rank receives zeros."""

    def allgather(self, output_tensor_lists: Any, input_tensor_list: Any, opts=None):
        for slot in output_tensor_lists[0]:
            slot.zero_()
        self.board.gathers[self.dp_rank] += 1


class _LocalOnlyGroup(dp_group.BoardGroup):
    """Known-bad transport: each rank receives only its own count (a
    rank-local gate)."""

    def allgather(self, output_tensor_lists: Any, input_tensor_list: Any, opts=None):
        for i, slot in enumerate(output_tensor_lists[0]):
            slot.fill_(int(input_tensor_list[0][0]) if i == self.dp_rank else 0)
        self.board.gathers[self.dp_rank] += 1


@pytest.mark.parametrize("bad", [_ZerosGroup, _LocalOnlyGroup])
def test_negative_control_bad_transport_fails_the_check(bad: type) -> None:
    with mock.patch("vllm_ascend_balance.replay.sim.fleet.BoardGroup", bad):
        result = simulate(True, REQUESTS, OPTS)
    assert gate_trace_errors(result, result.starts[0].cap)


def test_stand_in_refuses_a_stale_count() -> None:
    board = dp_group.GatherBoard(2)
    board.post([3, 5])
    group = dp_group.BoardGroup(board, 1)
    gathered = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="sends 4 but 5 was posted"):
        group.allgather([list(gathered.split(1))], [torch.tensor([4])])
    group.allgather([list(gathered.split(1))], [torch.tensor([5])])
    assert gathered.tolist() == [3, 5]
    with pytest.raises(AttributeError, match="all_gather only"):
        group.allreduce  # noqa: B018


def test_deterministic_same_input_same_numbers() -> None:
    a = simulate(True, REQUESTS, OPTS)
    b = simulate(True, REQUESTS, OPTS)
    assert a.rank_steps == b.rank_steps
    assert a.rank_requests == b.rank_requests
    assert a.gathers == b.gathers


@pytest.mark.skipif(
    "throttle_prefills" not in inspect.signature(Scheduler.schedule).parameters,
    reason="runs the interval mode: this release's schedule() has no throttle",
)
def test_sim_engine_runs_both_modes_through_the_metrics() -> None:
    options = ReplayOptions(dp=2, engine="sim", max_num_seqs=8, repeat=1)
    workload = load_workload(
        None,
        seed=3,
        start_s=0.0,
        duration_s=15.0,
        limit=None,
        rate_scale=1.0,
        max_model_len=options.max_model_len,
        dp_size=2,
        clip=False,
    )
    engine = load_engine("sim")
    metrics = {
        mode.label: run_metrics(engine.run(workload, mode, options, 0), 64)
        for mode in options.modes()
    }
    for label, m in metrics.items():
        assert m.completed == m.requests, label
    assert metrics["off"].gathers_per_rank == (0, 0)
    on = metrics["on"]
    assert len(set(on.gathers_per_rank)) == 1 and on.gathers_per_step == 1.0
    interval = run_metrics(
        engine.run(workload, Mode("interval:4", False, 4), options, 0), 64
    )
    assert interval.completed == interval.requests


def test_vllm_router_is_upstreams_rule_with_stale_stats() -> None:
    class Sched:
        def __init__(self, running: int, waiting: int) -> None:
            self.counts = (running, waiting)

        def get_request_counts(self) -> tuple[int, int]:
            return self.counts

        def get_kv_cache_usage(self) -> float:
            return 0.0

    router = Router("vllm", 4, stats_interval_s=1.0)
    # Fresh deployment: the in-flight floor spreads a burst round-robin.
    assert [router.route(f"req-{i}", i, None) for i in range(8)] == [
        0,
        1,
        2,
        3,
        0,
        1,
        2,
        3,
    ]
    for i in range(8):
        router.finished(f"req-{i}")
    loaded = [Sched(9, 0), Sched(0, 0), Sched(9, 0), Sched(9, 0)]
    router.publish(0.0, loaded)
    assert router.route("a", 8, None) == 1
    router.publish(0.5, [Sched(0, 0)] * 4)  # not due: the stats stay stale
    assert router.route("b", 9, None) == 1
    assert router.route("c", 10, 2) == 2  # pinned (JSONL rank)
    rr = Router("round-robin", 4, 1.0)
    assert [rr.route("x", i, None) for i in (5, 6)] == [1, 2]
    with pytest.raises(ValueError, match="--routing vllm"):
        Router("random", 4, 1.0)


def test_options_reach_the_simulation() -> None:
    from vllm_ascend_balance.replay.sim.engine import sim_options

    options = ReplayOptions(dp=8, engine="sim", max_num_seqs=4, routing="round-robin")
    sim = sim_options(options)
    assert (sim.dp_size, sim.max_num_seqs, sim.routing) == (8, 4, "round-robin")
    assert sim.cost == options.cost
    assert dataclasses.replace(sim, dp_size=2).dp_size == 2


def test_scale_benchmark_smoke(tmp_path: Any, capsys: pytest.CaptureFixture) -> None:
    """``benchmarks/bench_sim_scale.py --quick`` prints its table and writes
    its JSON (no timing asserted)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks/bench_sim_scale.py"
    spec = importlib.util.spec_from_file_location("bench_sim_scale", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "scale.json"
    assert bench.main(["--quick", "--mode", "on", "--json", str(out)]) == 0
    assert "s/1k rank-steps" in capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [r["dp"] for r in rows] == [2, 4]
    assert all(r["completed"] == r["requests"] == 60 for r in rows)
    assert all(r["rank_steps"] == r["steps"] * r["dp"] for r in rows)


def test_fleet_sweep_smoke(tmp_path: Any, capsys: pytest.CaptureFixture) -> None:
    """``benchmarks/sweep_fleet_dp.py`` on one tiny row (DP 2, 15 modeled s
    of arrivals: 13 requests): both modes complete the same requests, the
    table and the JSON are written (no number is asserted)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks/sweep_fleet_dp.py"
    spec = importlib.util.spec_from_file_location("sweep_fleet_dp", path)
    assert spec is not None and spec.loader is not None
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    out, md = tmp_path / "fleet.json", tmp_path / "fleet.md"
    argv = ["--dp", "2", "--window", "15", "--json", str(out), "--markdown", str(md)]
    assert sweep.main(argv) == 0
    captured = capsys.readouterr()
    assert "| 2 |" in captured.out and md.read_text() in captured.out
    assert "DP 2 balance on:" in captured.err
    (row,) = json.loads(out.read_text())["rows"]
    assert row["dp"] == 2 and row["window_s"] == 15
    # --rate-scale 2/3 and --duration 15 * 2/3 s of the trace.
    assert "--rate-scale 0.666667 --duration 10" in row["command"]
    assert set(row["runs"]) == {"off", "on"}
    assert all(r["completed"] == row["requests"] > 0 for r in row["runs"].values())
