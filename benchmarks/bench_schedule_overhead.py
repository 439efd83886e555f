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
import json
import logging
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: this checkout first (_checkout.py)
    import _checkout  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parent.parent
# Tables on stdout, vLLM's import-time notices on stderr (an explicit
# setting wins).
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

import torch  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

from benchmarks import instruction_count  # noqa: E402
from tests.support.original_scheduler import original_classes  # noqa: E402
from tests.support.vllm_objects import (  # noqa: E402
    make_request,
    make_scheduler,
    make_vllm_config,
)
from vllm_ascend_balance.gate.scheduler import SEAM, admission_cap  # noqa: E402
from vllm_ascend_balance.wiring.composition import compose_scheduler  # noqa: E402

GOAL = 1.01
CAP = 256  # max_num_seqs: admission stops at the cap with long queues
BUDGET = 8192  # token budget: never the limiting factor below
PROMPT_LEN = 16  # one block per request; keeps schedule() admission-bound


def _build(cls: type, dp_size: int | None, num_blocks: int = 20_000) -> Any:
    sched = make_scheduler(
        cls,
        vllm_config=make_vllm_config(
            max_num_seqs=CAP, max_num_batched_tokens=BUDGET, num_blocks=num_blocks
        ),
    )
    if dp_size is not None:
        # What admission_gather() leaves behind on a rank whose group has
        # dp_size ranks, the busiest of them one below the cap: not frozen.
        cap = admission_cap(sched)
        gathered = torch.arange(dp_size, dtype=torch.int64) % cap
        gathered[-1] = cap - 1
        sched.balance_gathered = gathered
        sched.balance_frozen = int(gathered.max()) == cap
        assert not sched.balance_frozen
    return sched


def _timed_schedule(sched: Any, requests: list) -> float:
    for request in requests:
        sched.add_request(request)
    gc.disable()  # no collection inside the timed call (gc.freeze() in main)
    try:
        start = time.perf_counter()
        sched.schedule()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    # Back to an empty scheduler with the same operations on both sides:
    # abort everything, then one (untimed) step to flush the finished ids.
    sched.finish_requests(
        [r.request_id for r in requests], RequestStatus.FINISHED_ABORTED
    )
    sched.schedule()
    return elapsed


def measure(
    a_cls: type, b_cls: type, dp_size: int | None, waiting: int, trials: int
) -> tuple[float, float, float]:
    """(median schedule() s of a, of b, median of the per-trial b/a ratios);
    b gets the gathered vector when ``dp_size`` is set.

    Each trial times a and b back to back on the same state (alternating
    which goes first), so the per-trial ratio cancels the slow drifts of a
    shared machine (another process taking a core for a while) that shift
    both timings alike; its median is the row's ratio.
    """
    a, b = _build(a_cls, None), _build(b_cls, dp_size)
    times: dict[str, list[float]] = {"a": [], "b": []}
    warmup = 2
    for trial in range(trials + warmup):
        order = [("a", a), ("b", b)] if trial % 2 == 0 else [("b", b), ("a", a)]
        batches = {
            key: [
                make_request(f"{key}{trial}-{i}", PROMPT_LEN, max_tokens=8)
                for i in range(waiting)
            ]
            for key, _ in order
        }
        for key, sched in order:
            elapsed = _timed_schedule(sched, batches[key])
            if trial >= warmup:
                times[key].append(elapsed)
    ratios = [tb / ta for ta, tb in zip(times["a"], times["b"], strict=True)]
    return (
        statistics.median(times["a"]),
        statistics.median(times["b"]),
        statistics.median(ratios),
    )


def seam_calls_per_schedule(cls: type, waiting: int, dp_size: int | None = 2) -> int:
    """How many times one schedule() of this row calls the seam (untimed)."""
    counter = {"calls": 0}

    def counting(self: Any) -> bool:
        counter["calls"] += 1
        return cls._should_stop_admitting_waiting(self)

    counting_cls = type("Counting", (cls,), {SEAM: counting})
    sched = _build(counting_cls, dp_size)
    for i in range(waiting):
        sched.add_request(make_request(f"c-{i}", PROMPT_LEN, max_tokens=8))
    sched.schedule()
    return counter["calls"]


def _seam_ns(sched: Any) -> float:
    """ns per ``_should_stop_admitting_waiting()`` call on ``sched``."""
    number = 200_000
    best = min(timeit.repeat(getattr(sched, SEAM), number=number, repeat=5))
    return best / number * 1e9


def seam_call_cost(balance_cls: type) -> tuple[float, float]:
    """ns per ``_should_stop_admitting_waiting()`` call: plain vs balance."""
    return _seam_ns(_build(Scheduler, None)), _seam_ns(_build(balance_cls, 8))


def _verdict(ratio: float, aa: float) -> str:
    verdict = "PASS" if ratio <= GOAL else "FAIL"
    if verdict == "FAIL" and ratio <= GOAL + abs(aa - 1):
        verdict += " (within the A/A noise)"
    return verdict


def balance_table(
    queues: list[int], dp_sizes: list[int], trials_for: Callable[[int], int]
) -> dict[str, Any]:
    """Balance scheduler vs plain patched ``Scheduler``, per (DP, queue);
    returns the table (times in seconds) for ``--json``."""
    import vllm

    balance_cls = compose_scheduler(Scheduler)
    print(
        f"schedule() overhead of balance scheduling (vLLM {vllm.__version__}, "
        f"cap={CAP}, prompt={PROMPT_LEN} tokens, median of paired ratios)"
    )
    plain_ns, balance_ns = seam_call_cost(balance_cls)
    print(
        f"seam call: plain {plain_ns:.0f} ns, balance {balance_ns:.0f} ns "
        f"(+{balance_ns - plain_ns:.0f} ns per seam call)"
    )
    header = (
        f"{'dp':>5} {'waiting':>7} {'plain ms':>9} {'balance ms':>10} "
        f"{'ratio':>7} {'model':>7}"
    )
    print(header + "  verdict")
    print("-" * (len(header) + 9))
    failures = 0
    rows: list[dict[str, Any]] = []
    for waiting in queues:
        trials = trials_for(waiting)
        plain_t, other_t, aa = measure(Scheduler, Scheduler, None, waiting, trials)
        calls = seam_calls_per_schedule(balance_cls, waiting)
        # Expected ratio from first principles: the only extra work in
        # schedule() is the balance seam's extra cost, once per call.
        model = 1 + calls * (balance_ns - plain_ns) * 1e-9 / plain_t
        print(
            f"{'A/A':>5} {waiting:>7} {plain_t * 1e3:>9.3f} {other_t * 1e3:>10.3f} "
            f"{aa:>7.3f} {'':>7}  noise floor (plain vs plain); "
            f"{calls} seam calls/schedule(), {trials} trials/row"
        )
        for dp_size in dp_sizes:
            plain_t, balance_t, ratio = measure(
                Scheduler, balance_cls, dp_size, waiting, trials
            )
            verdict = _verdict(ratio, aa)
            failures += verdict.startswith("FAIL")
            print(
                f"{dp_size:>5} {waiting:>7} {plain_t * 1e3:>9.3f} "
                f"{balance_t * 1e3:>10.3f} {ratio:>7.3f} {model:>7.4f}  {verdict}"
            )
            rows.append(
                {
                    "dp": dp_size,
                    "waiting": waiting,
                    "plain_s": plain_t,
                    "balance_s": balance_t,
                    "ratio": ratio,
                    "model": model,
                    "aa_ratio": aa,
                    "seam_calls": calls,
                    "trials": trials,
                    "verdict": verdict,
                }
            )
    print(
        f"summary: {len(rows) - failures}/{len(rows)} rows within {GOAL} (goal); "
        f"'model' = 1 + seam calls x extra seam cost / plain time"
    )
    return {
        "vllm": vllm.__version__,
        "seam_ns": {"plain": plain_ns, "balance": balance_ns},
        "rows": rows,
        "within_goal": len(rows) - failures,
    }


def refactor_table(
    original_cls: type, queues: list[int], trials_for: Callable[[int], int]
) -> dict[str, Any]:
    """Patched plain ``Scheduler`` vs the release's original, per queue;
    returns the table (times in seconds) for ``--json``."""
    import vllm

    check_refactor_pair(original_cls)
    print(
        f"schedule() overhead of the seam refactor (vLLM {vllm.__version__}, "
        f"patched Scheduler vs the release's original, cap={CAP}, "
        f"prompt={PROMPT_LEN} tokens, median of paired ratios)"
    )
    seam_ns = _seam_ns(_build(Scheduler, None))
    print(
        f"seam call: patched {seam_ns:.0f} ns per call "
        f"(asked once per schedule(), before the WAITING loop)"
    )
    header = (
        f"{'pair':>5} {'waiting':>7} {'orig ms':>9} {'patched ms':>10} "
        f"{'ratio':>7} {'model':>7}"
    )
    print(header + "  verdict")
    print("-" * (len(header) + 9))
    failures = 0
    rows: list[dict[str, Any]] = []
    for waiting in queues:
        trials = trials_for(waiting)
        orig_t, other_t, aa = measure(original_cls, original_cls, None, waiting, trials)
        calls = seam_calls_per_schedule(Scheduler, waiting, None)
        # From first principles: the patch adds the seam calls counted here
        # (one per schedule() that reaches the WAITING loop).
        model = 1 + calls * seam_ns * 1e-9 / orig_t
        print(
            f"{'A/A':>5} {waiting:>7} {orig_t * 1e3:>9.3f} {other_t * 1e3:>10.3f} "
            f"{aa:>7.3f} {'':>7}  noise floor (original vs original); "
            f"{calls} seam calls/schedule(), {trials} trials/row"
        )
        orig_t, patched_t, ratio = measure(
            original_cls, Scheduler, None, waiting, trials
        )
        verdict = _verdict(ratio, aa)
        failures += verdict.startswith("FAIL")
        print(
            f"{'patch':>5} {waiting:>7} {orig_t * 1e3:>9.3f} "
            f"{patched_t * 1e3:>10.3f} {ratio:>7.3f} {model:>7.4f}  {verdict}"
        )
        rows.append(
            {
                "waiting": waiting,
                "original_s": orig_t,
                "patched_s": patched_t,
                "ratio": ratio,
                "model": model,
                "aa_ratio": aa,
                "seam_calls": calls,
                "trials": trials,
                "verdict": verdict,
            }
        )
    print(
        f"refactor summary: {len(rows) - failures}/{len(rows)} rows within {GOAL} "
        f"(goal); 'model' = 1 + seam calls x seam call cost / original time "
        f"(upper bound: the inline condition it replaces is not subtracted)"
    )
    return {
        "vllm": vllm.__version__,
        "seam_ns": {"patched": seam_ns},
        "rows": rows,
        "within_goal": len(rows) - failures,
    }


def check_refactor_pair(original_cls: type) -> None:
    """Never measure the patched class against itself (or an original that
    already has the seam): that would report a meaningless 1.000."""
    if original_cls is Scheduler or hasattr(original_cls, SEAM):
        raise SystemExit("error: the 'original' Scheduler is not the unpatched one")
    if not hasattr(Scheduler, SEAM):
        raise SystemExit("error: the installed Scheduler is not patched")


#: DP size of the gathered vector in the instruction count's balance rows:
#: ``schedule()`` never reads the DP size (see the module docstring).
COUNT_DP_SIZE = 8
#: Calls (in units of K) of the four children of one ABBA block.
ABBA_CALLS = (0, 1, 1, 0)
#: KV blocks per scheduler in the instruction count: >= CAP one-block
#: prompts, and small, since every counted call needs its own scheduler.
COUNT_NUM_BLOCKS = 2048


def count_worker(spec_path: Path) -> int:
    """The process valgrind runs for ``--count instructions``.

    For each (pair, waiting queue, side), in a process of its own per side,
    it builds ``warmup + calls`` schedulers holding identical waiting queues
    (same request ids, so the dict and set work inside ``schedule()`` is the
    same), warms up on that class only (``class_warmup`` one-request cycles,
    then ``schedule()`` on ``warmup`` of the schedulers: CPython's
    specializing interpreter settles), then forks children in ABBA blocks
    (``repeats`` of them): one that calls ``schedule()`` on no scheduler,
    two that call it on the ``calls`` fresh ones, one on none again. A forked
    child stays under valgrind and writes its own count at exit
    (``cachegrind.out.<pid>``), which includes everything its parent ran
    before the fork: the children differ by their ``schedule()`` calls and
    by the parent's own work between forks, which grows by the same amount
    per fork and so cancels in ``(B1 + B2) - (A0 + A3)``. Appends what each
    pid counted to the manifest the spec names.
    """
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    calls_for = {int(w): int(k) for w, k in spec["calls"].items()}
    warmup = int(spec["warmup"])
    pairs: dict[str, tuple[tuple[str, type, int | None], ...]] = {}
    if "balance" in spec["pairs"]:
        balance_cls = compose_scheduler(Scheduler)
        pairs["balance"] = (
            ("upstream", Scheduler, None),
            ("balance", balance_cls, COUNT_DP_SIZE),
        )
    if "refactor" in spec["pairs"]:
        original_cls, _ = original_classes()
        check_refactor_pair(original_cls)
        pairs["refactor"] = (
            ("original", original_cls, None),
            ("patched", Scheduler, None),
        )
    gc.disable()  # no collection in a counted call; the children are short
    manifest = Path(spec["manifest"])
    for pair, sides in pairs.items():
        for waiting in spec["queues"]:
            for side, cls, dp_size in sides:
                # Each side in its own process: schedule()'s code is shared by
                # the classes, and CPython specializes it for the class that
                # runs it; a process that ran another class first would count
                # the re-specialization (as production never does).
                pid = os.fork()
                if pid == 0:
                    _count_side(
                        cls, dp_size, waiting, calls_for[waiting], warmup,
                        int(spec["class_warmup"]), manifest, pair, side,
                        int(spec["repeats"]),
                    )  # fmt: skip
                    os._exit(0)
                _, status = os.waitpid(pid, 0)
                if status != 0:
                    raise SystemExit(f"error: counting {pair}/{side}: {status}")
    return 0


def _count_side(
    cls: type,
    dp_size: int | None,
    waiting: int,
    calls: int,
    warmup: int,
    class_warmup: int,
    manifest: Path,
    pair: str,
    side: str,
    repeats: int,
) -> None:
    """One side of one row, in a process of its own (see ``count_worker``):
    warm up on this class only, then fork ``repeats`` ABBA blocks of
    children (0, K, K, 0 calls) and append them to the manifest (one JSON
    object per line)."""
    sched = _build(cls, dp_size, num_blocks=COUNT_NUM_BLOCKS)
    for i in range(class_warmup):
        # Quickening and instruction specialization settle over tens of
        # executions of each instruction: cheap one-request cycles.
        request = make_request(f"w{i}", PROMPT_LEN, max_tokens=8)
        sched.add_request(request)
        sched.schedule()
        sched.finish_requests([request.request_id], RequestStatus.FINISHED_ABORTED)
        sched.schedule()
    scheds = [
        _build(cls, dp_size, num_blocks=COUNT_NUM_BLOCKS) for _ in range(warmup + calls)
    ]
    for sched in scheds:
        for i in range(waiting):
            sched.add_request(make_request(f"r{i}", PROMPT_LEN, max_tokens=8))
    for sched in scheds[:warmup]:
        sched.schedule()
    counted = scheds[warmup:]
    entries = []
    for block in range(repeats):
        for position, n in enumerate(ABBA_CALLS):
            pid = os.fork()
            if pid == 0:
                for sched in counted[: n * calls]:
                    sched.schedule()
                os._exit(0)  # no atexit work inside the count
            _, status = os.waitpid(pid, 0)
            if status != 0:
                raise SystemExit(f"error: counting child {pid}: {status}")
            entry = {"pid": pid, "pair": pair, "waiting": waiting, "side": side}
            entries.append(
                entry | {"calls": n * calls, "block": block, "position": position}
            )
    # Written once all children ran: every child forks from the same state.
    with manifest.open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(entry) + "\n" for entry in entries)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """The printed tables as JSON (times in seconds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


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
        return _count_instructions(args, argv)

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


def _count_instructions(args: argparse.Namespace, argv: list[str] | None) -> int:
    import vllm

    valgrind = instruction_count.find_valgrind()
    if valgrind is None:
        print(instruction_count.MISSING, file=sys.stderr)
        return 1
    queues = [1, 10] if args.quick else [1, 10, 100, 1000]
    pairs = ["refactor"] if args.refactor else ["balance", "refactor"]
    if "refactor" in pairs:
        # Outside valgrind: download/unpack the release sdist once, and
        # refuse a pair that would compare a class with itself.
        check_refactor_pair(original_classes()[0])
    seam_calls = {
        waiting: seam_calls_per_schedule(Scheduler, waiting, None) for waiting in queues
    }
    command = "python benchmarks/bench_schedule_overhead.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    result = instruction_count.run(
        valgrind,
        script=Path(__file__).resolve(),
        pairs=pairs,
        queues=queues,
        runs=args.runs,
        # More calls where a call is short: a one-off cost inside the counted
        # calls (a dict resize, a new allocator arena) is then spread thin.
        calls={1: 16, 10: 16} if args.quick else {1: 256, 10: 128, 100: 32, 1000: 8},
        warmup=2,
        repeats=args.repeats,
        # Independent processes: one per core (valgrind runs one thread).
        jobs=min(args.runs, os.cpu_count() or 1),
        goal=GOAL,
        seam_calls=seam_calls,
        header=(
            f"instructions per schedule() call (vLLM {vllm.__version__}, "
            f"cap={CAP}, prompt={PROMPT_LEN} tokens, gate open, DP vector of "
            f"{COUNT_DP_SIZE})"
        ),
    )
    print("\n".join(result["lines"]))
    result |= {"benchmark": "bench_schedule_overhead", "count": "instructions"}
    result |= {"vllm": vllm.__version__, "command": command.strip()}
    if args.json:
        write_json(args.json, result)
    if args.markdown:
        instruction_count.write_markdown(args.markdown, command.strip(), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
