#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Overhead of balance scheduling and of the seam refactor on ``schedule()``.

Balance table: for each (DP size, waiting-queue length) row this times
``schedule()`` of the balance scheduler (the activation's composed mixin over
the installed, patched ``Scheduler``; gathered vector of the DP size with
max < cap, so not frozen) against the plain upstream ``Scheduler`` on
identical states, and prints the median of the per-trial ratios. Goal: <= 1.01.

Refactor table (``--refactor``): for each waiting-queue length it times the
installed, PATCHED plain ``Scheduler`` against the release's ORIGINAL
``Scheduler`` (unpatched ``scheduler.py`` loaded at run time from the lane's
release sdist, ``tests/support/original_scheduler.py``) on identical states:
the cost of the upstream patch itself. Same machinery and goal; DP size plays
no part.

DP size only changes the length of the gathered vector: ``schedule()`` never
touches the process group (the gather runs in the engine core, once per
step, and is not part of ``schedule()``), so no group is created here.

Noise control for a shared 2-core machine: both schedulers get the same
operations in the same order; each trial times both back to back, alternating
which goes first, and the row's ratio is the median of the per-trial ratios;
GC is off while timing. An A/A row per queue length
(plain vs an identical plain scheduler) shows the noise floor of the machine.

    python benchmarks/bench_schedule_overhead.py              # both tables
    python benchmarks/bench_schedule_overhead.py --refactor   # refactor table only
    python benchmarks/bench_schedule_overhead.py --quick      # smoke sizes, both
    python benchmarks/bench_schedule_overhead.py --json out.json   # tables as JSON too

Instruction counts (``--count instructions``): the same pairs on the same
states, each side's ``schedule()`` counted in instructions under
``valgrind --tool=cachegrind --cache-sim=no`` instead of timed, so the ratio
does not depend on a quiet machine (see ``instruction_count.py``).

    python benchmarks/bench_schedule_overhead.py --count instructions   # ~20 min
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

# Tables on stdout, vLLM's import-time notices on stderr (an explicit
# setting wins).
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

from benchmarks.schedule_overhead.counting import (  # noqa: E402
    count_instructions,
    count_worker,
)
from benchmarks.schedule_overhead.rig import GOAL, write_json  # noqa: E402
from benchmarks.schedule_overhead.timing import balance_table, refactor_table  # noqa: E402
from tests.support.original_scheduler import original_classes  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes only")
    parser.add_argument("--trials", type=int, help="timed trials per row")
    parser.add_argument(
        "--refactor",
        action="store_true",
        help="only the refactor table (patched vs original Scheduler)",
    )
    parser.add_argument(
        "--count",
        choices=["time", "instructions"],
        default="time",
        help="time schedule() (default), or count its instructions under valgrind",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=2,
        help="--count instructions: independent valgrind runs, shown side by side",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="--count instructions: ABBA blocks of counted children per run "
        "(the median of their per-call counts is used)",
    )
    parser.add_argument(
        "--json", type=Path, metavar="PATH", help="also write the tables as JSON"
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="PATH",
        help="--count instructions: also write the table and its command as Markdown",
    )
    parser.add_argument("--count-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("runs", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    logging.disable(logging.WARNING)  # vLLM's CPU-platform notices
    if args.count_worker:
        return count_worker(args.count_worker)
    if args.count == "instructions":
        return count_instructions(args, argv, Path(__file__).resolve())

    # Short queues make short calls, whose ratios are noisier: give them more
    # trials (they are cheap); about 1.5 min in all on a 2-core machine.
    default_trials = {1: 400, 10: 200, 100: 60, 1000: 30}
    if args.quick:
        dp_sizes, queues = [2, 4], [1, 10]
        default_trials = dict.fromkeys(queues, 3)
    else:
        dp_sizes = [2, 4, 8, 16, 32, 64, 128, 256]
        queues = [1, 10, 100, 1000]

    def trials_for(waiting: int) -> int:
        return args.trials or default_trials[waiting]

    # Loaded before the freeze below, like the rest of the import-time heap.
    original_cls, _ = original_classes()
    # Move vLLM/torch's import-time heap out of the collector's way once: a
    # full gc.collect() before each timed call would cost more than the call.
    gc.collect()
    gc.freeze()
    tables: dict[str, Any] = {}
    if not args.refactor:
        tables["balance"] = balance_table(queues, dp_sizes, trials_for)
        print()
    tables["refactor"] = refactor_table(original_cls, queues, trials_for)
    gc.unfreeze()  # let interpreter shutdown collect as usual
    if args.json:
        write_json(
            args.json,
            {"benchmark": "bench_schedule_overhead", "count": "time", "goal": GOAL}
            | tables,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
