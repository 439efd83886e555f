#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Placement against admission: how much of a peer's edge is its router.

TensorRT-LLM's rows in ``benchmarks/results/policies.md`` run behind its
own attention-DP router (one global queue, a request handed to a rank only
while it is below the expected active count, the rank with the fewest
active prompt tokens first: ``DefaultADPRouter``); every other row runs
behind vLLM's front-end balancer (per-rank queues, stale stats). A
WAITING-only gate cannot change where a request goes, so this runs our
settings and ``off`` behind TensorRT-LLM's router too (the replay's
``--routing trtllm-adp``, simulated engine only) and puts both beside the
case's strongest peer. The other way round, a TensorRT-LLM peer's own rule
also runs behind vLLM's router (``--peer-router shared``): what its
admission rule alone would give a vLLM deployment.

Per case and workload seed: the rows behind vLLM's router are read from
``benchmarks/results/policies.json`` (the simulated engine is
deterministic: the same command gives the same row); the rows behind
TensorRT-LLM's router are run. Each cell: mean ± the 95 % Student-t
half-width over the seeds; "score": the tuning score of
``benchmarks/policies/judging.py`` (mean over seeds of log(TTFT p50 /
off) + log(TPOT p99 / off), ``off`` behind vLLM's router; lower is
better); "held": the cells (TPOT p50/p99, TTFT p50/p99, output tok/s)
within the paired interval of the strongest peer or better, as
``policies.md`` counts them.

Writes ``benchmarks/results/placement.{json,md}``::

    python benchmarks/compare_placement.py            # 5 cases x 3 seeds
    python benchmarks/compare_placement.py --case builtin-dp16 --seeds 0
    python benchmarks/compare_placement.py --render   # the .md from the .json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from benchmarks.policies import cases, settings  # noqa: E402
from benchmarks.policies.judging import SCORED, held_cells, strongest  # noqa: E402
from benchmarks.policies.render import _cell  # noqa: E402
from benchmarks.policies.runs import case_values, run_modes  # noqa: E402
from benchmarks.policies.verdicts import peer_modes, rivals  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: The cases where a TensorRT-LLM setting is the strongest peer or where
#: its TPOT leads (benchmarks/results/policies.md).
CASES = ["builtin-dp4", "builtin-dp16", "builtin-dp64", "azure-dp16", "on-off-dp16"]
OURS = ["off", "on+queued-leader+max-held:64", "on+throttled+max-held:64"]
ADP = ["--routing", "trtllm-adp"]
SHARED = ["--peer-router", "shared"]
PEER = "(strongest peer; its router)"
COLUMNS = (("ttft_p50", "TTFT p50 ms"), ("tpot_p50", "TPOT p50 ms"),
           ("tpot_p99", "TPOT p99 ms"), ("tok_s", "output tok/s"))  # fmt: skip
HEAD = " | ".join(c for _, c in COLUMNS)


def score(row: dict[str, list[float]], off: dict[str, list[float]]) -> float:
    """The tuning score of ``row`` against ``off`` (lower is better)."""
    return sum(
        math.log(row["ttft_p50"][i] / off["ttft_p50"][i])
        + math.log(row["tpot_p99"][i] / off["tpot_p99"][i])
        for i in range(len(off["ttft_p50"]))
    ) / len(off["ttft_p50"])


def case_rows(record: dict[str, Any], seeds: list[int], work: Path) -> dict[str, Any]:
    """``{label: {metric: [value per seed]}}``: ours and ``off`` behind each
    router, and the case's strongest peer (behind its own router and, if
    that is TensorRT-LLM's, behind vLLM's too)."""
    record = dict(record, runs=[r for r in record["runs"] if r["seed"] in seeds])
    values = case_values(record)
    peer = strongest(values, peer_modes(rivals(values)), settings.BASELINE)
    rows: dict[str, Any] = {f"{m} (vLLM router)": values[m] for m in OURS}
    case = next(c for c in cases.select(None, False) if c.key == record["case"])
    runs = [run_modes(case, seed, OURS, work, 1, None, ADP) for seed in seeds]
    for m in OURS:
        rows[f"{m} (TensorRT-LLM router)"] = {
            k: [run["values"][m][k] for run in runs] for k in values[m]
        }
    if peer is not None and peer.startswith("trtllm-adp"):
        runs_v = [
            run_modes(case, seed, [peer], work, 1, None, SHARED) for seed in seeds
        ]
        rows[f"{peer} (vLLM router)"] = {
            k: [run["values"][peer][k] for run in runs_v] for k in values[peer]
        }
    if peer is not None:
        rows[f"{peer} {PEER}"] = values[peer]
    return {"case": case.key, "seeds": seeds, "commands": [r["command"] for r in runs],
            "rows": rows}  # fmt: skip


def markdown(results: list[dict[str, Any]]) -> str:
    out = [
        "<!-- written by benchmarks/compare_placement.py -->",
        __doc__.split("\n\n")[0],
        "",
    ]
    for res in results:
        off = res["rows"][f"{settings.BASELINE} (vLLM router)"]
        out += [f"**{res['case']}** (seeds {', '.join(map(str, res['seeds']))}; "
                f"the runs behind TensorRT-LLM's router: `{res['commands'][0]}`, "
                "other seeds alike)", "",
                f"| mode (router) | {HEAD} | score | held |",
                "|---|" + "---|" * (len(COLUMNS) + 2)]  # fmt: skip
        rows = res["rows"]
        peer = next((k for k in rows if k.endswith(PEER)), None)
        for label, row in rows.items():
            cells = " | ".join(_cell(row[k]) for k, _ in COLUMNS)
            held = "-"
            if peer is not None and label != peer:
                n = sum(h.held for h in held_cells(rows, label, [peer]))
                held = f"{n} of {len(SCORED)}"
            out.append(f"| `{label}` | {cells} | {score(row, off):+.2f} | {held} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", help=f"case key (default: {CASES})")
    ap.add_argument("--seeds", default="0,1,2", help="workload seeds (default 0,1,2)")
    ap.add_argument("--out", type=Path, default=RESULTS / "placement")
    ap.add_argument(
        "--render", action="store_true", help="rewrite the .md from the .json"
    )
    args = ap.parse_args(argv)
    if args.render:
        results = json.loads(args.out.with_suffix(".json").read_text())
        args.out.with_suffix(".md").write_text(markdown(results) + "\n")
        return 0
    stored = {r["case"]: r for r in json.loads((RESULTS / "policies.json").read_text())}
    keys = args.case or CASES
    unknown = [k for k in keys if k not in stored]
    if unknown:
        ap.error(f"--case {unknown[0]}: not in benchmarks/results/policies.json "
                 f"(one of {', '.join(stored)})")  # fmt: skip
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        results = [case_rows(stored[k], seeds, Path(tmp)) for k in keys]
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
