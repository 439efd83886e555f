# SPDX-License-Identifier: Apache-2.0
"""Instructions per ``schedule()`` call, counted by valgrind.

Timing ``schedule()`` on a shared 2-core machine has +-1-2 % noise, more than
the effect being measured. Instruction counts do not depend on the load:
``valgrind --tool=cachegrind --cache-sim=no`` counts every instruction the
process executes (event ``Ir``). ``bench_schedule_overhead.py
--count-worker`` (see its ``count_worker``) runs under valgrind and forks one
child per (pair, queue, side, number of calls); this module starts it, reads
each child's ``cachegrind.out.<pid>`` total, and turns the totals into
instructions per call: ``(Ir(2K calls) - Ir(K calls)) / K``, which cancels
interpreter start-up, imports and building the schedulers.

Two independent runs (separate valgrind processes, fresh interpreters) are
shown side by side: the counts are deterministic up to address-dependent
work (allocator, hash of object ids), which the spread column shows.
``PYTHONHASHSEED=0`` fixes string hashing across runs.

Valgrind runs CPython about 50x slower: importing vLLM and torch then takes
several minutes per run, the counted calls themselves seconds.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

MISSING = (
    "valgrind not found: --count instructions needs it "
    "(Debian/Ubuntu: apt-get install valgrind)"
)
#: (pair, baseline side, measured side) in table order.
PAIRS = {
    "balance": ("upstream", "balance"),
    "refactor": ("original", "patched"),
}
RUN_TIMEOUT_S = 3 * 3600  # hang guard only
#: One-request add/schedule/abort/schedule cycles per side before its row.
CLASS_WARMUP = 100


def find_valgrind() -> str | None:
    return shutil.which("valgrind")


def _no_aslr() -> list[str]:
    """``setarch <arch> -R``, where it exists: the same addresses in every
    run, so id-based hashing and the allocator take the same paths."""
    setarch = shutil.which("setarch")
    return [setarch, platform.machine(), "-R"] if setarch else []


def _total_ir(path: Path) -> int:
    """The ``summary:`` total of a cachegrind output file (event ``Ir``)."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"error: no summary line in {path}")


def count_once(
    valgrind: str,
    script: Path,
    *,
    pairs: list[str],
    queues: list[int],
    calls: dict[int, int],
    warmup: int,
    repeats: int,
) -> tuple[dict[tuple[str, int, str], float], dict[tuple[str, int, str], Any]]:
    """One valgrind run: instructions per call for every (pair, queue, side),
    ``(Ir(B1) + Ir(B2) - Ir(A0) - Ir(A3)) / 2K`` for each ABBA block of
    children (A: no call, B: K calls), median over ``repeats`` blocks; also
    every child's total (``{block: [Ir A0, B1, B2, A3]}``)."""
    with tempfile.TemporaryDirectory(prefix="vab-cachegrind-") as tmp:
        work = Path(tmp)
        spec = work / "spec.json"
        manifest = work / "manifest.json"
        spec.write_text(
            json.dumps(
                {
                    "pairs": pairs,
                    "queues": queues,
                    "calls": {str(w): k for w, k in calls.items()},
                    "warmup": warmup,
                    "class_warmup": CLASS_WARMUP,
                    "repeats": repeats,
                    "manifest": str(manifest),
                }
            ),
            encoding="utf-8",
        )
        log = work / "worker.log"
        cmd = [
            *_no_aslr(),
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--branch-sim=no",
            f"--cachegrind-out-file={work}/cachegrind.out.%p",
            sys.executable,
            str(script),
            "--count-worker",
            str(spec),
        ]
        # One OpenMP/MKL thread: idle pool threads spin for a while after a
        # parallel region, and valgrind counts their instructions too, by
        # the wall clock, in the parent between two forks.
        env = os.environ | {
            "PYTHONHASHSEED": "0",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OMP_WAIT_POLICY": "PASSIVE",
        }
        with log.open("w", encoding="utf-8") as out:
            proc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                timeout=RUN_TIMEOUT_S, check=False,
            )  # fmt: skip
        if proc.returncode != 0 or not manifest.exists():
            tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise SystemExit(
                f"error: the valgrind run exited {proc.returncode}:\n{tail}"
            )
        totals: dict[tuple[str, int, str], dict[int, list[int]]] = {}
        entries = manifest.read_text(encoding="utf-8").splitlines()
        for entry in sorted(map(json.loads, entries), key=lambda e: e["position"]):
            key = (entry["pair"], int(entry["waiting"]), entry["side"])
            ir = _total_ir(work / f"cachegrind.out.{entry['pid']}")
            totals.setdefault(key, {}).setdefault(int(entry["block"]), []).append(ir)
    per_call = {}
    for key, blocks in totals.items():
        k = calls[key[1]]
        # Children 0 and 3 ran no call, 1 and 2 ran K each: the parent's
        # work between forks (linear in the fork's index) cancels.
        per_block = [(b[1] + b[2] - b[0] - b[3]) / (2 * k) for b in blocks.values()]
        per_call[key] = statistics.median(per_block)
    return per_call, totals


def run(
    valgrind: str,
    *,
    script: Path,
    pairs: list[str],
    queues: list[int],
    runs: int,
    calls: dict[int, int],
    warmup: int,
    repeats: int,
    jobs: int,
    goal: float,
    seam_calls: dict[int, int],
    header: str,
) -> dict[str, Any]:
    """``runs`` independent counts; returns the table as lines and rows.

    ``ratio`` = measured side / baseline side per run; a row passes when
    every run's ratio is within ``goal``; ``spread`` is the largest relative
    difference between runs of one side's count.
    """
    print(
        f"{runs} valgrind runs, {jobs} at a time (minutes each) ...",
        file=sys.stderr,
        flush=True,
    )
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = list(
            pool.map(
                lambda _: count_once(
                    valgrind,
                    script,
                    pairs=pairs,
                    queues=queues,
                    calls=calls,
                    warmup=warmup,
                    repeats=repeats,
                ),
                range(runs),
            )
        )
    results = [per_call for per_call, _ in done]
    raw = [totals for _, totals in done]
    run_cols = " ".join(f"{f'run {i + 1}':>11}" for i in range(runs))
    ratio_cols = " ".join(f"{f'ratio {i + 1}':>8}" for i in range(runs))
    lines = [
        header,
        "per call = (Ir(B1) + Ir(B2) - Ir(A0) - Ir(A3)) / 2K, children forked "
        f"in ABBA order (A: no call, B: K calls), median of {repeats} blocks, K = "
        + ", ".join(f"{k} ({w} waiting)" for w, k in calls.items())
        + f"; each side in its own process, warmed up by {CLASS_WARMUP} "
        f"one-request cycles and {warmup} calls at the row's size; "
        f"{runs} independent valgrind runs; cachegrind --cache-sim=no",
    ]
    rows: list[dict[str, Any]] = []
    failures = 0
    worst_spread = 0.0
    for pair in pairs:
        base, measured = PAIRS[pair]
        head = (
            f"{'pair':<8} {'side':<8} {'waiting':>7} {'seam calls':>10} "
            f"{run_cols}  {ratio_cols} {'spread':>7}"
        )
        lines += ["", head + "  verdict", "-" * (len(head) + 9)]
        for waiting in queues:
            counts = {
                side: [r[(pair, waiting, side)] for r in results]
                for side in (base, measured)
            }
            child_totals = {
                side: [r[(pair, waiting, side)] for r in raw]
                for side in (base, measured)
            }
            ratios = [
                m / b for m, b in zip(counts[measured], counts[base], strict=True)
            ]
            spread = max(
                (max(v) - min(v)) / min(v) for v in counts.values() if min(v) > 0
            )
            worst_spread = max(worst_spread, spread)
            verdict = "PASS" if max(ratios) <= goal else "FAIL"
            failures += verdict == "FAIL"
            for side in (base, measured):
                values = " ".join(f"{v:>11,.0f}" for v in counts[side])
                tail = (
                    " ".join(f"{r:>8.4f}" for r in ratios)
                    + f" {spread * 100:>6.3f}%  {verdict}"
                    if side == measured
                    else ""
                )
                lines.append(
                    f"{pair:<8} {side:<8} {waiting:>7} {seam_calls[waiting]:>10} "
                    f"{values}  {tail}".rstrip()
                )
            rows.append(
                {
                    "pair": pair,
                    "waiting": waiting,
                    "seam_calls": seam_calls[waiting],
                    "baseline": base,
                    "measured": measured,
                    "instructions_per_call": counts,
                    "child_totals_per_run": child_totals,
                    "ratio": ratios,
                    "spread": spread,
                    "verdict": verdict,
                }
            )
    lines += [
        "",
        f"summary: {len(rows) - failures}/{len(rows)} rows within {goal} (goal); "
        f"runs agree within {worst_spread * 100:.3f}% (largest spread); "
        "ratio = measured / baseline instructions per call",
    ]
    return {
        "goal": goal,
        "runs": runs,
        "calls": {str(w): k for w, k in calls.items()},
        "warmup": warmup,
        "repeats": repeats,
        "class_warmup": CLASS_WARMUP,
        "rows": rows,
        "largest_spread": worst_spread,
        "within_goal": len(rows) - failures,
        "lines": lines,
    }


def write_markdown(path: Path, command: str, result: dict[str, Any]) -> None:
    """The table with the command that printed it, ready to paste."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "\n".join(result["lines"])
    path.write_text(
        "Instructions per `Scheduler.schedule()` call, counted with valgrind "
        f"(vLLM {result['vllm']}):\n\n```\n$ {command}\n{body}\n```\n",
        encoding="utf-8",
    )
