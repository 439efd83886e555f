#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Wall cost of the simulated engine (``replay --engine sim``) against DP size.

For each DP size N, the first 10 minutes of the Azure conversation trace
(``tests/data/azure_llm_inference_2023_conv_first10min.csv``, 2,867
requests) are replayed at ``--rate-scale N/3``, which gives each rank the
arrival rate of the README's DP 4 example (191 requests in 30 modeled
seconds on 4 ranks: ~1.6 requests/s per rank), with balance off and on. The
table shows, per run, the lock-step iterations, the rank-steps (iterations
x N: one ``schedule()`` + ``update_from_output()`` or dummy per rank), the
wall seconds to build the N schedulers and to step them, and **wall seconds
per 1,000 rank-steps**: constant when the cost per rank-step does not grow
with N (nothing O(N^2) per step), rising otherwise. Ranks are busier at some
DP sizes than at others (the slice drains differently), which moves the
per-rank-step cost by itself: read the ``running/rank`` column with it.

Deterministic counts (steps, rank-steps) repeat exactly; wall seconds move
with the machine's load (run twice to see the noise; two runs of DP 64 on
this 2-core machine differed by a few percent). No goal is asserted.

    python benchmarks/bench_sim_scale.py                   # DP 8..256, off and on
    python benchmarks/bench_sim_scale.py --dp 8 64 --mode on
    python benchmarks/bench_sim_scale.py --quick           # DP 2 and 4, 60 requests
    python benchmarks/bench_sim_scale.py --json out.json   # default: next to this file
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACE = REPO_ROOT / "tests/data/azure_llm_inference_2023_conv_first10min.csv"
#: Arrival rate per rank of the README's DP 4 example, per unit of rate-scale
#: on the 10-minute slice: --rate-scale N * LOAD_PER_RANK.
LOAD_PER_RANK = 1 / 3


def run_one(dp: int, balance: bool, limit: int | None) -> dict[str, Any]:
    from vllm_ascend_balance.replay.pipeline.join import join_run
    from vllm_ascend_balance.replay.pipeline.metrics import run_metrics
    from vllm_ascend_balance.replay.pipeline.modes import Mode
    from vllm_ascend_balance.replay.pipeline.records import RunRecords
    from vllm_ascend_balance.replay.pipeline.workload import load_workload
    from vllm_ascend_balance.replay.sim.fleet import SimOptions, simulate

    rate_scale = dp * LOAD_PER_RANK
    workload = load_workload(
        str(TRACE),
        seed=0,
        start_s=0.0,
        duration_s=None,
        limit=limit,
        rate_scale=rate_scale,
        max_model_len=16384,
        dp_size=dp,
        clip=True,
    )
    t0 = time.perf_counter()
    result = simulate(balance, workload.requests, SimOptions(dp_size=dp))
    wall_total = time.perf_counter() - t0
    records = RunRecords(Mode("on" if balance else "off", balance), 0, dp)
    records.steps, records.requests = join_run(
        workload.requests,
        result.routed_by_vllm,
        result.rank_steps,
        result.rank_requests,
    )
    m = run_metrics(records, 64)
    rank_steps = result.rank_step_count
    return {
        "dp": dp,
        "mode": "on" if balance else "off",
        "rate_scale": round(rate_scale, 4),
        "requests": len(workload.requests),
        "completed": m.completed,
        "steps": result.steps,
        "rank_steps": rank_steps,
        "running_mean": m.running_mean,
        "frozen_share": m.frozen_share,
        "wall_build_s": round(result.wall_build_s, 3),
        "wall_run_s": round(result.wall_run_s, 3),
        "wall_total_s": round(wall_total, 3),
        "wall_s_per_1k_rank_steps": round(result.wall_run_s / rank_steps * 1000, 4),
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'DP':>4} {'mode':>4} {'requests':>8} {'steps':>7} {'rank-steps':>11} "
        f"{'running/rank':>12} {'frozen':>7} {'build s':>8} {'run s':>8} "
        f"{'s/1k rank-steps':>15}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['dp']:>4} {r['mode']:>4} {r['requests']:>8} {r['steps']:>7} "
            f"{r['rank_steps']:>11,} {r['running_mean']:>12.2f} "
            f"{100 * (r['frozen_share'] or 0):>6.1f}% {r['wall_build_s']:>8.1f} "
            f"{r['wall_run_s']:>8.1f} {r['wall_s_per_1k_rank_steps']:>15.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    parser.add_argument("--mode", choices=("off", "on", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="DP 2, 4; 60 requests")
    parser.add_argument("--json", type=Path, help="default: next to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    logging.getLogger("vllm").setLevel("WARNING")
    sizes = [2, 4] if args.quick else args.dp
    limit = 60 if args.quick else None
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.mode]
    rows = []
    for dp in sizes:
        for balance in modes:
            rows.append(run_one(dp, balance, limit))
            print(f"DP {dp} balance {rows[-1]['mode']}: done", file=sys.stderr)
    print(format_table(rows))
    out = args.json or Path(__file__).with_name("bench_sim_scale.json")
    out.write_text(json.dumps({"trace": str(TRACE.name), "rows": rows}, indent=1))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
