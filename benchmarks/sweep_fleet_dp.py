#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Balance off vs on at fleet scale, controlled: DP 8 to 256 at the same
load per rank for the same modeled time.

What it measures: for each DP size N, the replay's simulated engine
(``replay --engine sim``, ``--routing vllm``, cap 16/rank) runs the Azure
LLM inference 2023 conversation trace (the whole hour,
``tests/data/azure_llm_inference_2023_conv.csv``) with balance off and on,
and prints, per N: requests, active steps, the frozen share (on), the share
of steps whose slowest rank mixes prefill and decode, TPOT and TTFT p50/p99,
output tokens/s, the mean ``len(running)`` per rank, and the wall seconds.

Why it is controlled (the README's table "Balance off vs on at fleet scale"
is not): that table replays the same 10-minute slice at every N, compressed
by ``--rate-scale N/3``, so the fleet stays saturated for 225 modeled s at
DP 8 but for 7 s at DP 256, and its rows differ in that as much as in N.
Here every row has

- the same arrival rate per rank: ``--rate-scale N/3``, the README's DP 4
  example's load (and that table's);
- the same arrival window: requests arriving within W modeled seconds,
  i.e. ``--duration W * N/3`` seconds of the trace (the workload selection
  applies ``--duration`` in the trace's own time, before rate scaling).

How W was chosen: the largest whole number of modeled seconds the trace
holds at the largest N of the sweep (the trace spans 3,502 s of arrivals:
41 s at DP 256, 3,502 / (256/3)); ``--window`` overrides it, for every N
alike. Rows of small N read the start of the hour and DP 256 reads all of
it, so the request mix is not identical; the table prints each row's
arrivals per rank per modeled second and mean output length, to read the
rows with.

There is no run-to-run noise: the simulated engine is deterministic (same
input and options, same numbers; ``tests/test_replay_sim.py`` checks it), so
each mode runs once and every difference in the table is the model's, not
noise. Wall seconds are the only numbers that move with the machine's load.

Everything is the replay's own code: ``ReplayOptions.load_workload``, the ``sim`` engine
(``load_engine``), ``run_metrics``; each row's JSON holds the equivalent
``vllm-ascend-balance replay`` command. One progress line per run goes to
stderr. Usage::

    python benchmarks/sweep_fleet_dp.py                        # DP 8..256, W = 41 s
    python benchmarks/sweep_fleet_dp.py --dp 8 16 --window 20
    python benchmarks/sweep_fleet_dp.py --json out.json --markdown out.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from benchmarks.fleet.table import markdown  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRACE = "tests/data/azure_llm_inference_2023_conv.csv"
RESULTS = ROOT / "benchmarks" / "results"
#: --rate-scale per rank: N/3 gives each rank the arrival rate of the
#: README's DP 4 example.
LOAD_PER_RANK = 1 / 3
CAP = 16
MODES = "off,on"


def rate_scale(dp: int) -> str:
    return f"{dp * LOAD_PER_RANK:.6g}"


def replay_argv(dp: int, window_s: float, trace: str) -> list[str]:
    """The ``vllm-ascend-balance replay`` arguments of one row."""
    rate = rate_scale(dp)
    return [
        "--engine", "sim", "--routing", "vllm", "--dp", str(dp),
        "--max-num-seqs", str(CAP), "--mode", MODES, "--repeat", "1",
        "--trace", trace, "--rate-scale", rate,
        "--duration", f"{window_s * float(rate):.6g}",
    ]  # fmt: skip


def largest_window(trace: str, dp: int) -> int:
    """Whole modeled seconds of arrivals the trace holds at ``--rate-scale
    dp/3``."""
    from vllm_ascend_balance.replay.pipeline.workload import load_workload

    workload = load_workload(
        str(ROOT / trace),
        seed=0,
        start_s=0.0,
        duration_s=None,
        limit=None,
        rate_scale=float(rate_scale(dp)),
        max_model_len=16384,
        dp_size=dp,
        clip=False,
    )
    return math.floor(workload.summary()["span_s"])


def _metrics_json(metrics: Any) -> dict[str, Any]:
    # Per-rank lists hold N entries each; the table reads none of them, and
    # at DP 256 they would make the file mostly per-rank noise.
    out: dict[str, Any] = dataclasses.asdict(metrics)
    out.pop("per_rank")
    gathers = out.pop("gathers_per_rank")
    out["gathers_per_rank_min_max"] = [min(gathers), max(gathers)]
    return out


def run_row(dp: int, window_s: float, trace: str, progress: Any) -> dict[str, Any]:
    """Both modes of one DP size, in this process, with the replay's code."""
    from vllm_ascend_balance.replay.pipeline.engine import load_engine
    from vllm_ascend_balance.replay.pipeline.metrics import run_metrics
    from vllm_ascend_balance.replay.pipeline.options import parse
    from vllm_ascend_balance.replay.pipeline.records import RunStatus

    argv = replay_argv(dp, window_s, trace)
    options = parse(argv)
    workload = options.load_workload(ROOT)
    summary = workload.summary()
    reqs = workload.requests
    row: dict[str, Any] = {
        "dp": dp,
        "rate_scale": options.rate_scale,
        "window_s": window_s,
        "trace_duration_s": options.duration,
        "requests": len(reqs),
        "span_s": summary["span_s"],
        "arrivals_per_rank_s": len(reqs) / window_s / dp,
        "prompt_tokens_mean": summary["prompt_tokens"] / len(reqs),
        "output_tokens_mean": summary["output_tokens"] / len(reqs),
        "output_tokens_per_rank_s": summary["output_tokens"] / window_s / dp,
        "command": " ".join(["vllm-ascend-balance", "replay", *argv]),
        "runs": {},
    }
    engine = load_engine(options.engine)
    for mode in options.modes():
        progress(f"DP {dp} balance {mode.label}: {len(reqs):,} requests, started")
        t0 = time.monotonic()
        records = engine.run(workload, mode, options, 0)
        wall = time.monotonic() - t0
        if records.status is not RunStatus.OK:
            raise SystemExit(f"DP {dp} balance {mode.label}: {records.cause}")
        metrics = run_metrics(records, options.starvation_steps)
        rank_steps = len(records.steps) * dp
        row["runs"][mode.label] = {
            **_metrics_json(metrics),
            "rank_steps": rank_steps,
            "wall_s": round(wall, 1),
            "wall_build_s": round(records.wall_startup_s, 1),
            "wall_run_s": round(records.wall_run_s, 1),
        }
        progress(
            f"DP {dp} balance {mode.label}: {metrics.completed:,}/{len(reqs):,} "
            f"completed, {metrics.steps:,} steps ({rank_steps:,} rank-steps), "
            f"frozen {100 * (metrics.frozen_share or 0):.1f} %, {wall:.0f} s wall "
            f"({records.wall_run_s / max(rank_steps, 1) * 1000:.2f} s per 1,000 "
            f"rank-steps)"
        )
    row["wall_s"] = round(sum(r["wall_s"] for r in row["runs"].values()), 1)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dp", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    parser.add_argument(
        "--window",
        type=float,
        metavar="S",
        help="arrival window in modeled seconds, the same for every DP (default: "
        "the largest whole number of seconds the trace holds at the largest DP)",
    )
    parser.add_argument("--trace", default=TRACE, help="relative to the checkout")
    parser.add_argument("--json", type=Path, default=RESULTS / "fleet_dp.json")
    parser.add_argument("--markdown", type=Path, default=RESULTS / "fleet_dp.md")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python", "benchmarks/sweep_fleet_dp.py", *given])
    if args.window is not None and args.window <= 0:
        parser.error("--window must be > 0")

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from vllm_ascend_balance.replay.pipeline.environment import vllm_logs_to_stderr

    window = args.window or largest_window(args.trace, max(args.dp))
    started = time.monotonic()
    total = 2 * len(args.dp)
    done = 0

    def progress(text: str) -> None:
        nonlocal done
        if not text.endswith("started"):
            done += 1
        elapsed = time.monotonic() - started
        print(f"[{done}/{total}, {elapsed:,.0f} s] {text}", file=sys.stderr, flush=True)

    rows: list[dict[str, Any]] = []
    with vllm_logs_to_stderr():
        for dp in args.dp:
            rows.append(run_row(dp, window, args.trace, progress))
            # Written after every DP size: a long sweep keeps what it ran.
            wall = round(time.monotonic() - started, 1)
            payload = {
                "command": command,
                "trace": args.trace,
                "window_s": window,
                "cap": CAP,
                "wall_s": wall,
                "rows": rows,
            }
            args.json.write_text(json.dumps(payload, indent=1))
            table = markdown(rows, window, command, wall, CAP)
            args.markdown.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
