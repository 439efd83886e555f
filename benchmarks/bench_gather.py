#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-step cost of the balance gather, next to upstream's own DP sync.

Every active engine step, each DP rank calls ``admission_gather()`` (one
``all_gather`` of a 1-element int64 CPU tensor over the DP group) right after
upstream's ``DPEngineCoreProc._has_global_unfinished_reqs()``. Upstream's own
cross-rank sync there (``ParallelConfig.sync_dp_state``, one ``all_reduce``)
only runs every N steps (N read from the installed release: the
``dp_sync_interval`` setting where it exists, else the literal in upstream's
``_has_global_unfinished_reqs``), precisely to keep CPU collectives off most
steps. This benchmark measures what the gather adds to every step.

For each DP size, that many real processes are spawned (loopback only); each
builds a real balance scheduler (``composition.compose_scheduler`` over the
installed ``Scheduler``) and vLLM's own stateless gloo DP group
(``ParallelConfig.stateless_init_dp_group()``, the ``ParallelConfig`` built in
the parent and copied to every rank, as vLLM's engine launcher does), then
times, after a warm-up, in alternating blocks:

- ``scheduler.admission_gather()`` per call;
- ``ParallelConfig.sync_dp_state(...)`` per call, divided by the sync
  interval: upstream's sync cost per step, amortized.

Each rank takes the median of its per-call times; the table shows the
slowest rank's median, and the gather's share of a step of 10 ms, 25 ms
(the replay cost model's fixed ``step_ms``) and 70 ms (the TPOT vllm-ascend
reports for DeepSeek-V3.1). No goal is set: the numbers are for reading.

    python benchmarks/bench_gather.py            # DP 2, 4, 8 (~3 min, 2 loaded cores)
    python benchmarks/bench_gather.py --quick    # DP 2, fewer calls
    python benchmarks/bench_gather.py --calls 5000
    python benchmarks/bench_gather.py --json gather.json   # also the table as JSON

Fleet scale (after the table above): the timing also covers the opt-in
log-depth exchange (``balance_collective: "all_reduce_max"``); then every
collective's sequential message rounds are counted per rank on real gloo
groups of DP 2-16 (``gather_rounds.py``: strace counts, independent of CPU
contention), one hop's cost here is the DP 2 time / its rounds, and a model
prints each collective as a share of a 50 ms and a 75 ms step for DP 16-256
at hop latencies of 10, 30 and 50 us (vLLM's sync amortized over its
interval):

    python benchmarks/bench_gather.py --quick --rounds-dp 2-16 \
        --scale-out benchmarks/results/gather_scale   # .md + .json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from vllm.config import ParallelConfig  # noqa: E402

from benchmarks.gather.ranks import BLOCK, run_dp, sync_interval  # noqa: E402
from benchmarks.gather.scale import fleet_scale  # noqa: E402
from vllm_ascend_balance.replay.pipeline.cost import CostModel  # noqa: E402

STEP_TIMES_MS = (10.0, CostModel().step_ms, 70.0)


def _pct(us: float, step_ms: float) -> str:
    return f"{us / (step_ms * 1e3) * 100:.3f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="DP 2, fewer calls")
    parser.add_argument("--calls", type=int, help="timed calls per collective")
    parser.add_argument(
        "--json", type=Path, metavar="PATH", help="also write the table as JSON"
    )
    parser.add_argument(
        "--rounds-dp",
        metavar="SIZES",
        help="DP sizes whose message rounds are counted (default 2-16; --quick: 2-4)",
    )
    parser.add_argument(
        "--scale-out",
        type=Path,
        metavar="PREFIX",
        help="also write the fleet-scale tables to PREFIX.md and PREFIX.json",
    )
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # vLLM's CPU-platform notices

    import vllm

    # Oversubscribed sizes take ~10 ms a call on 2 cores: fewer calls (the
    # median of a few hundred is stable) keep the full run to a few minutes.
    if args.quick:
        warmup, default_calls = 50, {2: 300}
    else:
        warmup, default_calls = 100, {2: 2000, 4: 1000, 8: 400}
    calls_for = {
        dp: max((args.calls or n) // BLOCK, 1) * BLOCK
        for dp, n in default_calls.items()
    }
    cores = os.cpu_count() or 1
    interval, source = sync_interval(ParallelConfig(data_parallel_size=2))
    print(
        f"per-step cost of the balance gather (vLLM {vllm.__version__}, gloo over "
        f"loopback, {cores} CPU cores, load average {os.getloadavg()[0]:.1f}, one "
        f"process per rank, median per rank after {warmup} warm-up calls, "
        f"slowest rank shown)"
    )
    print(
        f"upstream DP sync: ParallelConfig.sync_dp_state every {interval} steps "
        f"({source}); amortized = per-call cost / {interval}"
    )
    steps = "  ".join(f"{f'% of {ms:g} ms':>11}" for ms in STEP_TIMES_MS)
    header = (
        f"{'dp':>3} {'calls':>5} {'gather us/step':>14} {'sync us/call':>12} "
        f"{'sync us/step':>12} {'gather/sync':>11}  {steps}"
    )
    print(header + "  note")
    print("-" * (len(header) + 6))
    fair: list[tuple[int, float, float]] = []
    rows: list[dict[str, Any]] = []
    for dp_size, calls in calls_for.items():
        results, _ = run_dp(dp_size, warmup, calls)
        gather_us = max(r["gather_us"] for r in results)
        sync_call_us = max(r["sync_us"] for r in results)
        reduce_us = max(r["reduce_us"] for r in results)
        flags_us = max(r["flags_us"] for r in results)
        sync_step_us = sync_call_us / interval
        shares = "  ".join(f"{_pct(gather_us, ms):>11}" for ms in STEP_TIMES_MS)
        if dp_size > cores:
            note = f"oversubscribed: {dp_size} ranks on {cores} cores"
        else:
            note = ""
            fair.append((dp_size, gather_us, gather_us / sync_step_us))
        rows.append(
            {
                "dp": dp_size,
                "calls": calls,
                "gather_us_per_step": gather_us,
                "sync_us_per_call": sync_call_us,
                "sync_us_per_step": sync_step_us,
                "gather_over_sync": gather_us / sync_step_us,
                "all_reduce_max_us_per_step": reduce_us,
                "flags_payload_us_per_step": flags_us,
                "share_of_step": {
                    f"{ms:g} ms": gather_us / (ms * 1e3) for ms in STEP_TIMES_MS
                },
                "oversubscribed": dp_size > cores,
            }
        )
        print(
            f"{dp_size:>3} {calls:>5} {gather_us:>14.1f} {sync_call_us:>12.1f} "
            f"{sync_step_us:>12.2f} {gather_us / sync_step_us:>10.1f}x  "
            f"{shares}  {note}".rstrip()
        )
    print(
        "throttled's quantities [len(running), held, queued, starved, "
        "hold_age] (all_gather of 5 int64 per rank) against the contract's 1: "
        + "; ".join(
            f"DP {r['dp']} {r['flags_payload_us_per_step']:.1f} us vs "
            f"{r['gather_us_per_step']:.1f} us "
            f"({r['flags_payload_us_per_step'] / r['gather_us_per_step']:.2f}x)"
            for r in rows
        )
    )
    step_ms = STEP_TIMES_MS[1]
    if fair:
        dp_size, gather_us, over_sync = fair[-1]
        reading = (
            f"reading: with a core per rank (DP {dp_size}) the gather adds "
            f"{_pct(gather_us, step_ms)} to a {step_ms:g} ms step ({gather_us:.0f} "
            f"us, {over_sync:.1f}x upstream's amortized sync)"
        )
    else:
        reading = f"reading: no DP size fits the {cores} cores"
    if len(fair) < len(calls_for):
        reading += (
            "; oversubscribed rows time CPU contention between the rank "
            "processes, an upper bound rather than the cost on a host with a "
            "core per engine core"
        )
    print(reading + ".")
    rounds_dp = args.rounds_dp or ("2-4" if args.quick else "2-16")
    scale = fleet_scale(rows, rounds_dp, interval, source)
    print()
    print(scale["text"])
    if args.scale_out:
        args.scale_out.parent.mkdir(parents=True, exist_ok=True)
        header_lines = [
            f"vLLM {vllm.__version__}, {cores} CPU cores, load average "
            f"{os.getloadavg()[0]:.1f}; command: python benchmarks/bench_gather.py "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "",
        ]
        args.scale_out.with_suffix(".md").write_text(
            "\n".join(header_lines) + scale["text"] + "\n", encoding="utf-8"
        )
        write_json(
            args.scale_out.with_suffix(".json"),
            {k: v for k, v in scale.items() if k != "text"}
            | {"vllm": vllm.__version__, "cores": cores, "timing_rows": rows},
        )
    if args.json:
        write_json(
            args.json,
            {
                "benchmark": "bench_gather",
                "vllm": vllm.__version__,
                "cores": cores,
                "load_average": os.getloadavg()[0],
                "warmup_calls": warmup,
                "sync_interval": interval,
                "sync_interval_source": source,
                "rows": rows,
                "reading": reading,
            },
        )
    return 0


def write_json(path: Path, data: dict[str, Any]) -> None:
    """The printed table as JSON (times in microseconds, shares as fractions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
