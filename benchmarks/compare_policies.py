#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Balance scheduling against every peer's DP admission policy, same work.

Runs the replay on the simulated engine (``--engine sim``: N real vLLM
schedulers in lock step) with the modes ``off``, ``on`` (the contract),
``on+max-frozen:64`` (the bound docs/operating.md recommends),
``on+queued-leader+max-held:64`` (the opt-in rule docs/peer-policies.md
recommends) and the four peer policies at their sources' default
parameters (``sglang-delayer``, ``trtllm-adp``, ``vllm-align``,
``atom-delayer``; see ``vllm_ascend_balance/replay/peers/``), on three
workloads at DP 4, 16 and 64, the same arrival rate per rank at every DP
size:

- ``builtin``: the replay's built-in bursty mix (seed 0, 250 requests) at
  ``--rate-scale DP/2``, each rank's rate of the default DP 2 replay (at
  DP 64 that is one short burst, ~4 requests per rank);
- ``azure``: the Azure LLM inference 2023 conversation trace
  (``tests/data/azure_llm_inference_2023_conv.csv``) at ``--rate-scale
  DP/2`` (each rank's rate of the README's DP 4 example) over a 30 modeled
  s arrival window;
- ``starvation``: rank 0 at its cap with long outputs while short requests
  arrive on every other rank (``compare_prefill_interval.starvation_jsonl``).

Noise: the simulated engine is deterministic (one run per mode, no run-to-
run noise), so its differences are the model's. What sets the scale below
which a difference is not an effect is the real engine's run-to-run scatter
at DP 2-4 (:data:`REAL_NOISE`, the A/A half-ranges of the real runs in
``docs/replay.md``): a cell whose difference against ``off`` is inside it
prints ``~``.

Writes ``<out>.json`` (each replay's payload) and ``<out>.md`` (the tables)::

    venv=$(scripts/lane.sh main)   # vLLM 0.32: throttle_prefills for chunk holds
    $venv/bin/python benchmarks/compare_policies.py           # ~27 min on 2 cores
    $venv/bin/python benchmarks/compare_policies.py --dp 4 --workload builtin

``--add-modes M1,M2`` adds rows to the stored ``<out>.json`` instead of
re-running every mode: it runs ``off,M1,M2`` per case and splices the new
modes in, after checking that this run's ``off`` reproduces the stored
``off`` exactly (the simulated engine is deterministic; a mismatch means the
stored rows are from other code and the script stops)::

    $venv/bin/python benchmarks/compare_policies.py --add-modes on+max-held:32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

# This checkout first on the import path, here and in every process this
# script starts (PYTHONPATH), whichever checkout the lane venv's editable
# install names: `$venv/bin/python benchmarks/x.py` runs the code next to it.
_CHECKOUT = str(Path(__file__).resolve().parents[1])
if sys.path[:1] != [_CHECKOUT]:
    sys.path.insert(0, _CHECKOUT)
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != _CHECKOUT:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [_CHECKOUT, os.environ.get("PYTHONPATH")])
    )

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from compare_prefill_interval import replay_payload, starvation_jsonl  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TRACE = "tests/data/azure_llm_inference_2023_conv.csv"
AZURE_WINDOW_S = 30
MODES = (
    "off,on,on+max-frozen:64,on+queued-leader+max-held:64,"
    "sglang-delayer,trtllm-adp,vllm-align,atom-delayer"
)
WORKLOADS = ("builtin", "azure", "starvation")
CAP = 16

#: (column, the replay's metric label, digits, kind): kind "rel" compares
#: relative to ``off`` against :data:`REAL_NOISE`, "pts" in share points,
#: "count" prints the count.
COLUMNS = (
    ("TPOT p50 ms", "TPOT p50 (ms)", 1, "rel"),
    ("TPOT p99 ms", "TPOT p99 (ms)", 1, "rel"),
    ("TTFT p50 ms", "TTFT p50 (ms)", 0, "rel"),
    ("TTFT p99 ms", "TTFT p99 (ms)", 0, "rel"),
    ("worst-rank TTFT p99 ms", "TTFT p99 worst rank (ms)", 0, "rel"),
    ("output tok/s", "output tokens/s", 0, "rel"),
    ("mixed P+D steps", "steps slowest rank mixed P+D", 1, "pts"),
    ("held steps", "steps frozen", 1, "pts"),
    ("starved requests", "starved requests", 0, "count"),
)

#: The real engine's run-to-run scatter at DP 2-4, per metric: the largest
#: A/A half-range (half the range of two runs of one mode, ABBA order)
#: relative to its mean, or in share points, over the real runs shown in
#: docs/replay.md (``scripts/replay``, ``scripts/replay --mode aa --repeat
#: 2`` at DP 2 and the Azure run at DP 4). A simulated difference smaller
#: than this could not be told from noise on the real engine.
REAL_NOISE = {
    "TPOT p50 (ms)": 0.027,
    "TPOT p99 (ms)": 0.23,
    "TTFT p50 (ms)": 0.42,
    "TTFT p99 (ms)": 0.096,
    "TTFT p99 worst rank (ms)": 0.096,
    "output tokens/s": 0.018,
    "steps slowest rank mixed P+D": 0.006,
    "steps frozen": 0.027,
    "starved requests": 0.05,
}


def workload_args(name: str, dp: int) -> list[str]:
    if name == "builtin":
        return ["--rate-scale", f"{dp / 2:g}"]
    if name == "azure":
        rate = dp / 2
        return [
            "--trace", TRACE, "--rate-scale", f"{rate:.6g}",
            "--duration", f"{AZURE_WINDOW_S * rate:.6g}",
        ]  # fmt: skip
    if name == "starvation":
        path = starvation_jsonl(RESULTS / f"starvation_dp{dp}.jsonl", dp)
        return ["--trace", str(path.relative_to(ROOT))]
    raise ValueError(f"--workload: unknown {name!r} (use {', '.join(WORKLOADS)})")


def run_replay(modes: str, name: str, dp: int, work: Path) -> dict[str, Any]:
    argv = [
        "--engine", "sim", "--dp", str(dp), "--mode", modes, "--repeat", "1",
        "--max-num-seqs", str(CAP), *workload_args(name, dp),
    ]  # fmt: skip
    out = work / f"{name}_dp{dp}.json"
    return replay_payload(argv, out, f"{name} DP {dp}", echo=False)


def value(metrics: dict[str, Any], label: str, mode: str) -> float | None:
    values = metrics[label].get(mode, {}).get("values") or []
    return sum(values) / len(values) if values else None


def cell(
    x: float | None, base: float | None, digits: int, kind: str, label: str
) -> str:
    """The value, and against ``off``: the change, or ``~`` inside the
    real engine's noise."""
    if x is None:
        return "-"
    text = f"{100 * x:.1f} %" if kind == "pts" else f"{x:,.{digits}f}"
    if base is None or x == base:
        return text
    noise = REAL_NOISE[label]
    if kind == "pts":
        diff = x - base
        inside = abs(diff) <= noise
        change = f"{100 * diff:+.1f}"
    elif kind == "count":
        return text  # held steps are defined differently per mode: no diff
    else:
        rel = (x - base) / base if base else float("inf")
        inside = abs(rel) <= noise
        change = f"{100 * rel:+.0f} %"
    return f"{text} (~)" if inside else f"{text} ({change})"


#: The mode the scorecard judges, and the cells it is judged on: (column,
#: metric label, lower is better).
CANDIDATE = "on+queued-leader+max-held:64"
SCORED = (
    ("TPOT p50", "TPOT p50 (ms)", True),
    ("TPOT p99", "TPOT p99 (ms)", True),
    ("TTFT p50", "TTFT p50 (ms)", True),
    ("TTFT p99", "TTFT p99 (ms)", True),
    ("tok/s", "output tokens/s", False),
)
PEERS = ("sglang-delayer", "trtllm-adp", "vllm-align", "atom-delayer")


def scorecard(results: list[dict[str, Any]], mode: str = CANDIDATE) -> list[str]:
    """Per case and scored metric: ``mode`` against the best of ``off`` and
    the four peers. A cell is held (``ok``) when ``mode`` is better, or
    worse by no more than the real engine's A/A scatter
    (:data:`REAL_NOISE`); otherwise it is given up (``gives up``), naming
    the mode that wins it. Empty when no case ran ``mode``."""
    rows: list[str] = []
    given_up = 0
    for r in results:
        metrics = r["comparison"]["metrics"]
        if mode not in metrics[SCORED[0][1]]:
            continue
        cells = []
        for _, label, lower in SCORED:
            rivals = {
                m: value(metrics, label, m)
                for m in ("off", *PEERS)
                if value(metrics, label, m) is not None
            }
            best_mode = (min if lower else max)(rivals, key=lambda m: rivals[m])
            best, x = rivals[best_mode], value(metrics, label, mode)
            assert x is not None
            worse = (x - best) / best if lower else (best - x) / best
            if worse <= REAL_NOISE[label]:
                cells.append("ok" if worse <= 0 else f"ok (~, {100 * worse:+.0f} %)")
            else:
                given_up += 1
                # What the winner pays for the cell: TTFT p50 for a TPOT or
                # throughput cell, TPOT p50 for a TTFT cell.
                other = "TPOT p50 (ms)" if label.startswith("TTFT") else "TTFT p50 (ms)"
                mine, theirs = (
                    value(metrics, other, mode),
                    value(metrics, other, best_mode),
                )
                paid = (
                    f"{100 * (theirs - mine) / mine:+.0f} %" if mine and theirs else "?"
                )
                cells.append(
                    f"**gives up**: {best_mode} {100 * worse:+.0f} % "
                    f"(its {other.split(' (')[0]} {paid})"
                )
        rows.append(f"| {r['name']}, DP {r['dp']} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    cells = sum(len(SCORED) for _ in rows)
    return [
        f"**Scorecard: `{mode}` against the best of `off` and the four peers**, "
        f"per cell: `ok` when it is better or worse by no more than the real "
        f"engine's A/A scatter (`~`, by how much), else the mode that wins "
        f"the cell, by how much `{mode}` is worse, and what the winner pays "
        f"against `{mode}` on the other latency (TTFT p50 for a TPOT or "
        f"throughput cell, TPOT p50 for a TTFT cell). {cells - given_up} of "
        f"{cells} cells held.",
        "",
        "| case | " + " | ".join(c[0] for c in SCORED) + " |",
        "|---" * (len(SCORED) + 1) + "|",
        *rows,
        "",
    ]


def markdown(results: list[dict[str, Any]], vllm_version: str) -> str:
    lines = [
        "<!-- written by benchmarks/compare_policies.py -->",
        f"Simulated engine on vLLM {vllm_version} (real vLLM schedulers in lock "
        "step, modeled step cost; `trtllm-adp` and `vllm-align` also hold "
        "in-flight chunks where `schedule()` has `throttle_prefills`, vLLM 0.32 "
        f"and later), cap {CAP}/rank, one run per mode (deterministic: no run-to-run "
        "noise). Each cell: the value, then its change against `off` "
        "(relative for latencies and throughput, share points for step "
        "shares), `~` when the change is inside the real engine's A/A scatter "
        "at DP 2-4 (`REAL_NOISE` in the script: TPOT p50 2.7 %, TPOT p99 23 %, "
        "TTFT p50 42 %, TTFT p99 9.6 %, tok/s 1.8 %, step shares 0.6-2.7 "
        "points). *held steps*: active steps on which the mode held new "
        "admissions, whether or not anything waited (the replay's *steps "
        "frozen*); *starved requests*: requests that waited through 64 or more "
        "held steps, so a count of what a mode's own gate held, not comparable "
        "across modes (no difference is printed).",
        "",
    ]
    for r in results:
        metrics = r["comparison"]["metrics"]
        w = r["workload"]
        modes = list(metrics[COLUMNS[0][1]])
        lines += [
            f"**{r['name']}, DP {r['dp']}** ({w['requests']} requests over "
            f"{w['span_s']:g} modeled s; {r['bench_wall_s']:g} s wall)",
            "",
            f"`{r['command']}`",
            "",
            "| mode | " + " | ".join(c[0] for c in COLUMNS) + " |",
            "|---" * (len(COLUMNS) + 1) + "|",
        ]
        for mode in modes:
            cells = []
            for _, label, digits, kind in COLUMNS:
                base = None if mode == modes[0] else value(metrics, label, modes[0])
                cells.append(
                    cell(value(metrics, label, mode), base, digits, kind, label)
                )
            lines.append(f"| `{mode}` | " + " | ".join(cells) + " |")
        lines.append("")
    for mode in (CANDIDATE, "on+max-frozen:64", "on"):
        lines += scorecard(results, mode)
    attributions = {r.get("attribution") for r in results} - {None}
    lines += sorted(attributions)
    return "\n".join(lines) + "\n"


def splice(stored: dict[str, Any], fresh: dict[str, Any], modes: list[str]) -> None:
    """Add ``modes``' metrics of ``fresh`` (a run of ``off,*modes``) to
    ``stored`` (the same case's stored payload).

    Raises:
        SystemExit: ``fresh``'s ``off`` differs from the stored one.
    """
    old, new = stored["comparison"]["metrics"], fresh["comparison"]["metrics"]
    for _, label, _, _ in COLUMNS:
        if old[label].get("off") != new[label].get("off"):
            raise SystemExit(
                f"--add-modes: {stored['name']} DP {stored['dp']}: this run's "
                f"off differs from the stored one on {label!r}; the stored rows "
                f"come from other code: re-run without --add-modes"
            )
    for label, by_mode in new.items():
        if label in old:
            # New rows right after the contract's, the peers after them.
            rows = {m: v for m, v in old[label].items() if m not in modes}
            head = [m for m in ("off", "on") if m in rows]
            old[label] = {
                **{m: rows[m] for m in head},
                **{m: by_mode[m] for m in modes},
                **{m: v for m, v in rows.items() if m not in head},
            }
    stored["command"] += f" (rows {', '.join(modes)} added by: {fresh['command']})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dp", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--workload", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--mode", default=MODES)
    p.add_argument(
        "--out", default=str(RESULTS / "policies"), help="writes OUT.json and OUT.md"
    )
    p.add_argument(
        "--add-modes",
        help="run only off and these modes and add them to OUT.json's cases",
    )
    p.add_argument(
        "--render", action="store_true", help="rewrite OUT.md from OUT.json only"
    )
    args = p.parse_args()
    import vllm

    if args.render:
        results = json.loads(Path(args.out).with_suffix(".json").read_text())
        table = markdown(results, results[0]["vllm"])
        Path(args.out).with_suffix(".md").write_text(table)
        print(table)
        return 0
    if args.add_modes:
        return add_modes(Path(args.out), args.add_modes.split(","), vllm.__version__)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    table = ""
    with tempfile.TemporaryDirectory(prefix="vab-policies-") as tmp:
        for dp in args.dp:
            for name in args.workload:
                payload = run_replay(args.mode, name, dp, Path(tmp))
                payload.update(name=name, dp=dp, vllm=vllm.__version__)
                results.append(payload)
                # Written after every case: a long matrix keeps what it ran.
                out.with_suffix(".json").write_text(json.dumps(results, indent=1))
                table = markdown(results, vllm.__version__)
                out.with_suffix(".md").write_text(table)
    print(table)
    return 0


def add_modes(out: Path, modes: list[str], version: str) -> int:
    """``--add-modes``: splice ``modes`` into every case of ``out``.json."""
    results = json.loads(out.with_suffix(".json").read_text())
    with tempfile.TemporaryDirectory(prefix="vab-policies-") as tmp:
        for stored in results:
            fresh = run_replay(
                ",".join(["off", *modes]), stored["name"], stored["dp"], Path(tmp)
            )
            splice(stored, fresh, modes)
            out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    table = markdown(results, version)
    out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
