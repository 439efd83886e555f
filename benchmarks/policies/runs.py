# SPDX-License-Identifier: Apache-2.0
"""Running the replay for one case and seed, and reducing its payload to
the per-seed values the judging reads.

A case's record (what ``OUT.json`` keeps)::

    {"case": "builtin-dp4", "workload": "builtin", "dp": 4, "seeds": [0, 1, 2],
     "runs": [{"seed": 0, "command": "...", "wall_s": 41.2,
               "requests": 250, "span_s": 25.1,
               "mode_wall_s": {mode: s}, "values": {mode: {metric: x}}}, ...]}

:func:`case_values` turns it into ``{mode: {metric: [x per seed]}}``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import settings
from .cases import CAP, Case, replay_args
from .judging import slo_goodput

ROOT = Path(__file__).resolve().parents[2]


def run_values(run: dict[str, Any]) -> dict[str, float]:
    """One replay run's metrics (the replay's ``runs[i]``, with its
    per-request records and timeline) as the judging's keys."""
    m = run["metrics"]
    timeline = run["timeline"]
    _, goodput = slo_goodput(
        run["requests"], dict(zip(timeline["step"], timeline["t_s"], strict=True)),
        m["makespan_s"],
        settings.SLO_TTFT_MS, settings.SLO_TPOT_MS,
    )  # fmt: skip
    return {
        "tpot_p50": m["tpot_p50_ms"],
        "tpot_p99": m["tpot_p99_ms"],
        "ttft_p50": m["ttft_p50_ms"],
        "ttft_p99": m["ttft_p99_ms"],
        "tok_s": m["output_tokens_per_s"],
        "goodput": goodput,
        "completed": m["completed"] / m["requests"],
    }


def run_seed(case: Case, seed: int, modes: list[str], work: Path) -> dict[str, Any]:
    """Run ``modes`` on ``case``'s workload for ``seed`` (one replay, one run
    per mode: the simulated engine is deterministic).

    Raises:
        SystemExit: the replay failed (its output is shown).
    """
    argv = [
        "--engine", "sim", "--dp", str(case.dp), "--mode", ",".join(modes),
        "--repeat", "1", "--max-num-seqs", str(CAP),
        *replay_args(case, seed, work),
    ]  # fmt: skip
    out = work / f"{case.key}-seed{seed}.json"
    shown = [a if not a.startswith(str(work)) else Path(a).name for a in argv]
    command = " ".join(["vllm-ascend-balance", "replay", *shown])
    print(f"$ {command}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "vllm_ascend_balance", "replay", *argv]
    done = subprocess.run(
        [*cmd, "--json", str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0 or not out.exists():
        sys.stderr.write(done.stdout)
        raise SystemExit(
            f"replay {case.key} seed {seed} failed (exit {done.returncode})"
        )
    payload = json.loads(out.read_text())
    out.unlink()
    runs = payload["runs"]
    return {
        "seed": seed,
        "command": command,
        "wall_s": round(time.monotonic() - t0, 1),
        "requests": payload["workload"]["requests"],
        "span_s": payload["workload"]["span_s"],
        "mode_wall_s": {
            r["mode"]: round(r["wall"]["startup_s"] + r["wall"]["run_s"], 2)
            for r in runs
        },
        "values": {r["mode"]: run_values(r) for r in runs},
    }


def case_values(record: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """``{mode: {metric: [value per seed]}}`` of a case record, for modes
    that ran on every seed."""
    runs = record["runs"]
    common = set(runs[0]["values"]).intersection(*(r["values"] for r in runs))
    out: dict[str, dict[str, list[float]]] = {}
    for mode in runs[0]["values"]:
        if mode in common:
            keys = runs[0]["values"][mode]
            out[mode] = {k: [r["values"][mode][k] for r in runs] for k in keys}
    return out
