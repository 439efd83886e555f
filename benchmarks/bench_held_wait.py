#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-gather cost of the held-wait tracker
(``vllm_ascend_balance.observability.held_wait``).

The engine's gather hook calls ``HeldWait.after_gather(scheduler)`` once per
active step, right after the gather. This times that call on a real balance
scheduler (``composition.compose_scheduler`` over the installed
``Scheduler``) holding ``--running`` running and ``--waiting`` waiting
requests, in the two states that cost differently: a frozen gather (one
pass over the waiting queue) and an open one with nothing pending (a set of
the running ids only). Prints microseconds per gather (median of blocks)
and the share of a 25 ms step (the replay cost model's fixed ``step_ms``);
no goal is set: the numbers are for reading.

    python benchmarks/bench_held_wait.py                 # 256 running, 1000 waiting
    python benchmarks/bench_held_wait.py --waiting 10000
    python benchmarks/bench_held_wait.py --quick --json held.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402

from tests.support.vllm_objects import make_request, make_scheduler  # noqa: E402
from vllm_ascend_balance.observability.held_wait import HeldWait  # noqa: E402
from vllm_ascend_balance.wiring.composition import compose_scheduler  # noqa: E402

STEP_MS = 25.0


def build(running: int, waiting: int) -> object:
    """A balance scheduler with ``running`` running, ``waiting`` waiting."""
    prompt = 16
    scheduler = make_scheduler(
        compose_scheduler(Scheduler),
        max_num_seqs=running,
        max_num_batched_tokens=running * prompt,
        num_blocks=(running + waiting) * 4 + 16,
    )
    for index in range(running + waiting):
        scheduler.add_request(make_request(f"b{index}", prompt, max_tokens=1000))
    scheduler.schedule()
    assert len(scheduler.running) == running, len(scheduler.running)
    assert len(scheduler.waiting) == waiting, len(scheduler.waiting)
    return scheduler


def time_gathers(scheduler: object, frozen: bool, blocks: int, calls: int) -> float:
    """Median over ``blocks`` of the mean seconds per ``after_gather``."""
    tracker = HeldWait()
    scheduler.balance_frozen = frozen  # type: ignore[attr-defined]
    tracker.after_gather(scheduler)  # the running set, entries when frozen
    per_call = []
    gc.disable()
    try:
        for _ in range(blocks):
            start = time.perf_counter()
            for _ in range(calls):
                tracker.after_gather(scheduler)
            per_call.append((time.perf_counter() - start) / calls)
    finally:
        gc.enable()
    return statistics.median(per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--running", type=int, default=256)
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    blocks, calls = (3, 20) if args.quick else (15, 200)
    scheduler = build(args.running, args.waiting)
    rows = []
    print(f"held_wait.after_gather, {args.running} running, {args.waiting} waiting")
    for frozen in (True, False):
        seconds = time_gathers(scheduler, frozen, blocks, calls)
        share = seconds * 1e3 / STEP_MS
        rows.append({"frozen": frozen, "us_per_gather": seconds * 1e6,
                     "share_of_25ms_step": share})  # fmt: skip
        state = "frozen gather" if frozen else "open gather  "
        print(f"  {state}: {seconds * 1e6:8.1f} us per gather "
              f"({100 * share:.3f}% of a {STEP_MS:.0f} ms step)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "benchmark": "bench_held_wait",
                    "running": args.running,
                    "waiting": args.waiting,
                    "rows": rows,
                },
                indent=2,
            )  # fmt: skip
        )


if __name__ == "__main__":
    main()
