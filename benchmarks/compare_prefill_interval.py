#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Balance scheduling against vLLM's own ``prefill_schedule_interval``.

Runs the replay (``vllm-ascend-balance replay``, one subprocess per workload
and DP size) with the modes ``off, on, interval:2, interval:4,
on+interval:2, on+interval:4`` on three workloads:

- ``builtin``: the replay's built-in bursty mix (seed 0);
- ``azure``: the committed Azure LLM inference 2023 conversation slice
  (``tests/data/azure_llm_inference_2023_conv_first300.csv``, 300 requests),
  at ``--rate-scale DP/2`` so each rank sees the DP 2 load;
- ``starvation``: ``benchmarks/results/starvation_dpN.jsonl``, written by
  this script (pinned ``rank``
  fields): rank 0 receives cap-many long-output requests at once and stays
  at the cap, while short requests arrive on every other rank. This is the
  case where balance's freeze holds the other ranks' admissions.

Every mode runs ``--repeat`` times in the replay's ABBA order; each metric
is the mean with the replay's 99 % band, and a difference against ``off``
inside its band prints ``~`` (not an effect). On ``--engine sim`` (the
default) runs are deterministic: the band is 0 and every repetition is
identical; ``--engine asyncllm`` runs the real deployment (about 1-2 min per
mode run on 2 cores) and gives real noise bands.

Writes ``<out>.json`` (every replay's JSON payload) and ``<out>.md`` (the
table)::

    python benchmarks/compare_prefill_interval.py                 # sim, DP 2 and 4
    python benchmarks/compare_prefill_interval.py --engine asyncllm --dp 2 \\
        --workload builtin --mode off,on,interval:2,on+interval:2 --repeat 2 \\
        --out benchmarks/results/prefill_interval_real
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
AZURE = "tests/data/azure_llm_inference_2023_conv_first300.csv"
MODES = "off,on,interval:2,interval:4,on+interval:2,on+interval:4"
WORKLOADS = ("builtin", "azure", "starvation")
CAP = 16
#: (label in the table, the replay's metric label, digits, share)
COLUMNS = (
    ("TPOT p50 ms", "TPOT p50 (ms)", 1, False),
    ("TPOT p99 ms", "TPOT p99 (ms)", 1, False),
    ("TTFT p50 ms", "TTFT p50 (ms)", 0, False),
    ("TTFT p99 ms", "TTFT p99 (ms)", 0, False),
    ("worst-rank TTFT p50 ms", "TTFT p50 worst rank (ms)", 0, False),
    ("worst-rank TTFT p99 ms", "TTFT p99 worst rank (ms)", 0, False),
    ("output tok/s", "output tokens/s", 1, False),
    ("mixed P+D steps", "steps slowest rank mixed P+D", 1, True),
)


def starvation_jsonl(path: Path, dp: int) -> Path:
    """Rank 0: ``CAP`` requests with 1,200-token outputs at t=0; ranks 1..N-1:
    a short request (256 prompt, 16 output tokens) every 0.3 modeled s for
    30 s. Deterministic (no randomness)."""
    lines = [
        {"arrival_s": 0.0, "prompt_tokens": 256, "output_tokens": 1200, "rank": 0}
        for _ in range(CAP)
    ]
    for i in range(100):
        for rank in range(1, dp):
            lines.append(
                {
                    "arrival_s": round(0.1 + 0.3 * i, 3),
                    "prompt_tokens": 256,
                    "output_tokens": 16,
                    "rank": rank,
                }
            )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def workload_args(name: str, dp: int) -> list[str]:
    """Replay options selecting workload ``name`` at DP ``dp`` (paths
    relative to the checkout, where the replay runs)."""
    if name == "builtin":
        return []
    if name == "azure":
        return ["--trace", AZURE, "--rate-scale", f"{dp / 2:g}", "--clip"]
    if name == "starvation":
        path = starvation_jsonl(RESULTS / f"starvation_dp{dp}.jsonl", dp)
        return ["--trace", str(path.relative_to(ROOT))]
    raise ValueError(f"--workload: unknown {name!r} (use {', '.join(WORKLOADS)})")


def replay_payload(
    argv: list[str], out: Path, what: str, *, echo: bool = True
) -> dict[str, Any]:
    """Run ``vllm-ascend-balance replay ARGV --json OUT`` in the checkout and
    return its JSON payload without this machine's temporary paths and
    per-request records, with ``bench_wall_s`` and the ``command`` (without
    ``--json``) added. ``echo``: pass the replay's table on to stderr (it is
    always shown when the replay fails).

    Raises:
        SystemExit: the replay failed (``what`` names the case).
    """
    cmd = [sys.executable, "-m", "vllm_ascend_balance", "replay", *argv]
    command = " ".join(["vllm-ascend-balance", "replay", *argv])
    print(f"$ {command}", file=sys.stderr)
    t0 = time.monotonic()
    done = subprocess.run(
        [*cmd, "--json", str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    failed = done.returncode != 0 or not out.exists()
    if echo or failed:
        sys.stderr.write(done.stdout)
    if failed:
        raise SystemExit(f"replay {what} failed (exit {done.returncode})")
    payload = json.loads(out.read_text())
    for key in ("json", "run_dir"):  # temporary paths of this machine
        payload["options"][key] = None
    for run in payload["runs"]:  # per-request records: the replay's --json
        run.pop("requests", None)
        run.pop("timeline", None)
    payload["bench_wall_s"] = round(time.monotonic() - t0, 1)
    payload["command"] = command
    return payload


def run_replay(args: argparse.Namespace, name: str, dp: int, work: Path) -> Any:
    argv = [
        "--engine", args.engine, "--dp", str(dp), "--mode", args.mode,
        "--repeat", str(args.repeat), "--max-num-seqs", str(CAP),
        *workload_args(name, dp),
    ]  # fmt: skip
    return replay_payload(argv, work / f"{name}_dp{dp}.json", f"{name} DP {dp}")


def _num(x: float, digits: int, share: bool) -> str:
    return f"{100 * x:.1f} %" if share else f"{x:.{digits}f}"


def format_cell(entry: dict[str, Any], digits: int, share: bool, base: bool) -> str:
    """``mean`` for the baseline; ``mean (diff)`` elsewhere, ``~`` when the
    difference is inside the replay's band."""
    values = entry.get("values") or []
    if not values:
        return "-"
    mean = sum(values) / len(values)
    text = _num(mean, digits, share)
    if base or entry.get("diff") is None:
        return text
    diff = entry["diff"]
    if entry.get("effect") is False:
        return f"{text} (~)"
    sign = "+" if diff >= 0 else "-"
    return f"{text} ({sign}{_num(abs(diff), digits, share)})"


def band_text(metric: dict[str, Any], digits: int, share: bool) -> str:
    bands = [e["band"] for e in metric.values() if e.get("band") is not None]
    return _num(max(bands), digits, share) if bands else "n/a"


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "<!-- written by benchmarks/compare_prefill_interval.py -->",
        f"Engine `{args.engine}`, cap {CAP}/rank, modes `{args.mode}`, "
        f"`--repeat {args.repeat}` per mode (ABBA). Each cell: mean over the "
        "runs, then (difference against `off`), `~` when the difference is "
        "inside the replay's 99 % band. Last row of each block: the widest "
        "band of the difference over the modes.",
        "",
    ]
    for r in results:
        metrics = r["comparison"]["metrics"]
        w = r["workload"]
        lines += [
            f"**{r['name']}, DP {r['dp']}** ({w['requests']} requests over "
            f"{w['span_s']:g} modeled s)",
            "",
            f"`{r['command']}`",
            "",
            "| mode | " + " | ".join(c[0] for c in COLUMNS) + " |",
            "|---" * (len(COLUMNS) + 1) + "|",
        ]
        modes = list(metrics[COLUMNS[0][1]])
        for mode in modes:
            cells = [
                format_cell(metrics[label][mode], d, s, mode == modes[0])
                for _, label, d, s in COLUMNS
            ]
            lines.append(f"| `{mode}` | " + " | ".join(cells) + " |")
        bands = [band_text(metrics[label], d, s) for _, label, d, s in COLUMNS]
        lines += ["| band (99 %) | " + " | ".join(bands) + " |", ""]
    if any(r.get("attribution") for r in results):
        lines.append(next(r["attribution"] for r in results if r.get("attribution")))
    return "\n".join(lines) + "\n"


#: (label, the replay's metric label, relative?, tolerance): the tolerances
#: of ``validate-sim`` (:mod:`vllm_ascend_balance.replay.validation.cli`).
AGREEMENT = (
    ("steps frozen", "steps frozen", False, 0.03),
    ("mixed P+D steps", "steps slowest rank mixed P+D", False, 0.02),
    ("TPOT p50", "TPOT p50 (ms)", True, 0.10),
    ("TPOT p99", "TPOT p99 (ms)", True, 0.10),
)


def agreement(sim: list[dict[str, Any]], real: list[dict[str, Any]]) -> str:
    """Markdown: the real runs' cases and modes against the simulated ones,
    within ``validate-sim``'s tolerances."""
    lines = [
        "| case | mode | " + " | ".join(f"{a[0]} real / sim" for a in AGREEMENT)
        + " |",
        "|---" * (len(AGREEMENT) + 2) + "|",
    ]  # fmt: skip
    by_case = {(r["name"], r["dp"]): r for r in sim}
    for r in real:
        s = by_case.get((r["name"], r["dp"]))
        if s is None:
            continue
        for mode in r["comparison"]["metrics"][AGREEMENT[0][1]]:
            cells = []
            for _, label, relative, tol in AGREEMENT:
                a = r["comparison"]["metrics"][label][mode]["values"]
                b = s["comparison"]["metrics"][label].get(mode, {}).get("values")
                if not a or not b:
                    cells.append("-")
                    continue
                x, y = sum(a) / len(a), sum(b) / len(b)
                ok = abs(y - x) <= (tol * abs(x) if relative else tol)
                text = f"{x:.1f} / {y:.1f}" if relative else f"{x:.1%} / {y:.1%}"
                cells.append(f"{text} {'ok' if ok else 'OUT'}")
            lines.append(
                f"| {r['name']} DP {r['dp']} | `{mode}` | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="sim", choices=("sim", "asyncllm"))
    p.add_argument("--dp", type=int, nargs="+", default=[2, 4])
    p.add_argument("--workload", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--mode", default=MODES)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--out",
        default=str(RESULTS / "prefill_interval"),
        help="writes OUT.json and OUT.md",
    )
    p.add_argument(
        "--agreement",
        nargs=2,
        metavar=("SIM.json", "REAL.json"),
        help="only print the real runs of REAL.json against SIM.json (no runs)",
    )
    args = p.parse_args()
    if args.agreement:
        sim, real = (json.loads(Path(f).read_text()) for f in args.agreement)
        print(agreement(sim, real))
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    table = ""
    with tempfile.TemporaryDirectory(prefix="vab-interval-") as tmp:
        for name in args.workload:
            for dp in args.dp:
                payload = run_replay(args, name, dp, Path(tmp))
                payload.update(name=name, dp=dp)
                results.append(payload)
                # Written after every case: a long matrix keeps what it ran.
                out.with_suffix(".json").write_text(json.dumps(results, indent=1))
                table = markdown(results, args)
                out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
