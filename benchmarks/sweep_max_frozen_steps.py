# SPDX-License-Identifier: Apache-2.0
"""Sweep the bounded freeze (``balance_max_frozen_steps`` = N) on three
workloads and print what the bound costs and what it saves.

Runs ``vllm-ascend-balance replay`` on the simulated engine (deterministic:
one run per mode, differences are exact for that input) for ``off``,
unbounded ``on`` and ``on`` with each N, on

- the starvation workload (``benchmarks/results/starvation_dp2.jsonl``: rank
  0 gets cap-many requests with 1,200-token outputs at once, rank 1 a short
  request every 0.3 s), DP 2;
- the built-in workload, DP 2;
- the Azure slice (first 60 s at twice its rate), DP 4;

and writes a Markdown table (``--markdown``) and the per-run metrics
(``--json``). Usage::

    venv=$(scripts/lane.sh release)   # a Python with vLLM (the replay runs it)
    $venv/bin/python benchmarks/sweep_max_frozen_steps.py     # ~10 min on 2 cores
    $venv/bin/python benchmarks/sweep_max_frozen_steps.py --bounds 8 32

Without vLLM in the Python running it, it stops in one line naming that
command, before any replay.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
PROG = "benchmarks/sweep_max_frozen_steps.py"
#: The fix where vLLM is missing: the lane venv, as README.md runs benchmarks.
LANE_PYTHON = f"$(scripts/lane.sh release)/bin/python {PROG}"
WORKLOADS: dict[str, list[str]] = {
    "starvation, DP 2": [
        "--dp",
        "2",
        "--trace",
        str(ROOT / "benchmarks/results/starvation_dp2.jsonl"),
    ],
    "built-in, DP 2": ["--dp", "2"],
    "Azure, DP 4": [
        "--dp",
        "4",
        "--trace",
        str(ROOT / "tests/data/azure_llm_inference_2023_conv_first300.csv"),
        "--duration",
        "60",
        "--rate-scale",
        "2",
    ],
}
COLUMNS = [
    ("TPOT p50 ms", "tpot_p50_ms", "{:.1f}"),
    ("TPOT p99 ms", "tpot_p99_ms", "{:.1f}"),
    ("TTFT p50 ms", "ttft_p50_ms", "{:,.0f}"),
    ("worst-rank TTFT p50 ms", "worst_rank_ttft_p50_ms", "{:,.0f}"),
    ("worst-rank TTFT p99 ms", "worst_rank_ttft_p99_ms", "{:,.0f}"),
    ("output tok/s", "output_tokens_per_s", "{:.1f}"),
    ("frozen", "frozen_share", "{:.1%}"),
    ("mixed P+D", "mixed_share", "{:.1%}"),
]


class ReplayFailed(Exception):
    """A replay exited non-zero; it said why on stderr."""


def replay(args: list[str], out: Path) -> list[dict[str, Any]]:
    """One replay invocation on the simulated engine; its runs' metrics.

    Raises:
        ReplayFailed: the replay exited non-zero (its own error line is
            above on stderr).
    """
    cmd = [sys.executable, "-m", "vllm_ascend_balance", "replay", "--engine", "sim"]
    cmd += ["--repeat", "1", "--max-num-seqs", "16", "--json", str(out), *args]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if done.returncode:
        raise ReplayFailed(
            f"`vllm-ascend-balance replay {' '.join(args)}` exited with status "
            f"{done.returncode} (its error is above): fix that, then run {PROG} again"
        )
    runs = json.loads(out.read_text())["runs"]
    return [{"mode": r["mode"], **r["metrics"]} for r in runs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounds", type=int, nargs="+", default=[4, 16, 64, 256])
    parser.add_argument(
        "--markdown", type=Path, default=ROOT / "benchmarks/results/max_frozen_steps.md"
    )
    parser.add_argument(
        "--json", type=Path, default=ROOT / "benchmarks/results/max_frozen_steps.json"
    )
    opts = parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        # Checked first: each replay would say it, after the sweep started.
        print(
            f"{PROG}: error: vLLM is not installed in this Python ({sys.executable}); "
            f"the replays it runs need one: run it with the lane venv's Python, "
            f"{LANE_PYTHON}",
            file=sys.stderr,
        )
        return 1
    try:
        return sweep(opts)
    except ReplayFailed as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1


def sweep(opts: argparse.Namespace) -> int:
    """The sweep of :func:`main`'s options: the table and the JSON written."""
    results: dict[str, list[dict[str, Any]]] = {}
    lines = [
        "<!-- written by benchmarks/sweep_max_frozen_steps.py -->",
        "Simulated engine, cap 16/rank, one run per row (deterministic). "
        "`N` = `balance_max_frozen_steps`.",
        "",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, wargs in WORKLOADS.items():
            rows = replay(["--mode", "off,on", *wargs], Path(tmp) / "base.json")
            rows[0]["label"], rows[1]["label"] = "off", "on, unbounded"
            for n in opts.bounds:
                run = replay(
                    ["--mode", "on", "--balance-max-frozen-steps", str(n), *wargs],
                    Path(tmp) / f"n{n}.json",
                )[0]
                rows.append({**run, "label": f"on, N = {n}"})
            results[name] = rows
            print(f"done: {name}", file=sys.stderr)
            lines += [f"**{name}**", ""]
            lines.append("| mode | " + " | ".join(c[0] for c in COLUMNS) + " |")
            lines.append("|---" * (len(COLUMNS) + 1) + "|")
            for row in rows:
                cells = [fmt.format(row[key]) for _, key, fmt in COLUMNS]
                lines.append(f"| {row['label']} | " + " | ".join(cells) + " |")
            lines.append("")
    opts.json.write_text(json.dumps(results, indent=1))
    opts.markdown.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
