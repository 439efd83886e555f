# SPDX-License-Identifier: Apache-2.0
"""The instruction counts (``--count instructions``): each side's
``schedule()`` counted under ``valgrind --tool=cachegrind`` in forked ABBA
blocks, so the ratio does not depend on a quiet machine
(``benchmarks/instruction_count.py``)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from benchmarks import instruction_count
from benchmarks.schedule_overhead.rig import (
    CAP,
    GOAL,
    PROMPT_LEN,
    build,
    check_refactor_pair,
    seam_calls_per_schedule,
    write_json,
)
from tests.support.original_scheduler import original_classes
from tests.support.vllm_objects import make_request
from vllm_ascend_balance.wiring.composition import compose_scheduler

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
    sched = build(cls, dp_size, num_blocks=COUNT_NUM_BLOCKS)
    for i in range(class_warmup):
        # Quickening and instruction specialization settle over tens of
        # executions of each instruction: cheap one-request cycles.
        request = make_request(f"w{i}", PROMPT_LEN, max_tokens=8)
        sched.add_request(request)
        sched.schedule()
        sched.finish_requests([request.request_id], RequestStatus.FINISHED_ABORTED)
        sched.schedule()
    scheds = [
        build(cls, dp_size, num_blocks=COUNT_NUM_BLOCKS) for _ in range(warmup + calls)
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


def count_instructions(
    args: argparse.Namespace, argv: list[str] | None, script: Path
) -> int:
    """``--count instructions``: the tables counted under valgrind, which runs
    ``script --count-worker`` (see :func:`count_worker`)."""
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
        script=script,
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
