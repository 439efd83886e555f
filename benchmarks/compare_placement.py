# SPDX-License-Identifier: Apache-2.0
"""Placement against admission: what part of the gap to the best peer is
the router, which a gate on one rank's scheduler cannot reach.

A gate on vLLM's scheduler decides when a rank admits, never where a
request goes. This runs our frozen settings (``off``, the recommended
``throttled`` and ``adp_balance`` at bound 256, ``settings.OURS``) behind
three routers on the held-out seeds of ``benchmarks/results/policies_heldout.json``
and judges each, per cell, against the best peer setting of that table
(each peer behind its own router, as stored), with the headline's 5 %
margin (``judging.MARGIN``):

- vLLM's front-end load balancer (``--routing vllm``, the replay's
  default: ``DPLBAsyncMPClient``'s score, read from the installed vLLM):
  the stored rows, not re-run;
- vLLM's external-LB mode (each DP rank its own API server, an outside
  router in front; ``--data-parallel-external-lb``) with the simplest
  outside router, round robin (``--routing round-robin``);
- TensorRT-LLM's attention-DP router (``--routing trtllm-adp``, simulated
  engine only: one global queue, a rank handed a request only while below
  the expected active count), which no vLLM deployment has.

Each held count: the five scored cells (TTFT p50/p99, TPOT p50/p99,
output tok/s) where the 95 % interval of the paired relative difference
against the best peer's mean is within the margin. Written to
``benchmarks/results/placement.{json,md}``::

    python benchmarks/compare_placement.py            # 13 cases x the 5 held-out seeds
    python benchmarks/compare_placement.py --case builtin-dp16
    python benchmarks/compare_placement.py --render   # the .md from the .json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from benchmarks.policies import cases, settings  # noqa: E402
from benchmarks.policies.judging import MARGIN, SCORED, held_cells  # noqa: E402
from benchmarks.policies.rivals import peer_modes, record_rivals  # noqa: E402
from benchmarks.policies.runs import case_values, run_modes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STORED = RESULTS / "policies_heldout.json"
OURS = [settings.BASELINE, settings.RECOMMENDED, "on+adp-balance+max-held:256"]
#: label -> the replay options of the runs behind it (None: the stored rows).
ROUTERS: dict[str, list[str] | None] = {
    "vLLM front-end LB": None,
    "external LB, round robin": ["--routing", "round-robin"],
    "TensorRT-LLM router": ["--routing", "trtllm-adp"],
}
COMMAND = "python benchmarks/compare_placement.py"


def case_rows(record: dict[str, Any], work: Path) -> dict[str, Any]:
    """``{"case", "seeds", "commands", "peers", "rows"}``: ``rows`` maps
    ``"<mode> (<router>)"`` and each peer setting to ``{metric: [value per
    seed]}``; ``peers``: the peer settings judged against (each family's
    default and tuned point, :func:`.rivals.record_rivals`)."""
    values = case_values(record)
    seeds = [r["seed"] for r in record["runs"]]
    peers = peer_modes(record_rivals(record))
    case = next(c for c in cases.select([record["case"]], False))
    rows: dict[str, Any] = {}
    commands = []
    for router, extra in ROUTERS.items():
        if extra is None:
            for m in OURS:
                rows[f"{m} ({router})"] = values[m]
            continue
        runs = [run_modes(case, seed, OURS, work, 1, None, extra) for seed in seeds]
        commands.append(runs[0]["command"])
        for m in OURS:
            rows[f"{m} ({router})"] = {
                k: [run["values"][m][k] for run in runs] for k in values[m]
            }
    for p in peers:
        rows[p] = values[p]
    return {"case": case.key, "seeds": seeds, "commands": commands,
            "peers": peers, "rows": rows}  # fmt: skip


def with_peers(result: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its peer settings and their rows taken again from the
    stored held-out ``record`` (:func:`.rivals.record_rivals`), its own
    rows (ours behind each router) kept: the judging set follows the
    verdicts' rule without running ours again."""
    values = case_values(record)
    peers = peer_modes(record_rivals(record))
    rows = {k: v for k, v in result["rows"].items() if k not in result["peers"]}
    rows.update({p: values[p] for p in peers})
    return {**result, "peers": peers, "rows": rows}


def held(res: dict[str, Any], mode: str, router: str) -> list[str]:
    """The scored metrics where ``mode`` behind ``router`` is within the
    margin of the best peer setting per cell."""
    label = f"{mode} ({router})"
    cells = held_cells(res["rows"], label, res["peers"], SCORED, MARGIN)
    return [h.metric for h in cells if h.held]


def markdown(results: list[dict[str, Any]]) -> str:
    seeds = sorted({s for r in results for s in r["seeds"]})
    pct = f"{100 * MARGIN:g} %"
    out = [
        "<!-- written by benchmarks/compare_placement.py -->",
        f"Written by `{COMMAND}` (the main lane's venv); `--render` rewrites "
        "this file from the JSON next to it.",
        "",
        __doc__.split("\n\n")[0].replace("\n", " "),
        "",
        f"Held-out seeds {seeds} (those of `benchmarks/results/policies_heldout.md`); "
        f"per cell against the best peer setting there, {pct} margin on the "
        f"interval's worse end. The runs behind the outside routers: "
        f"`{results[0]['commands'][0]}` and `{results[0]['commands'][1]}`, other "
        "cases and seeds alike.",
        "",
        "| setting | " + " | ".join(ROUTERS) + " |",
        "|---|" + "---|" * len(ROUTERS),
    ]
    total = len(results) * len(SCORED)
    for m in OURS:
        counts = [sum(len(held(r, m, rt)) for r in results) for rt in ROUTERS]
        out.append(f"| `{m}` | " + " | ".join(f"{n} of {total}" for n in counts) + " |")
    out += ["", "Per case, the cells held (of 5; T TTFT, P TPOT, p50/p99, "
            "k tok/s):", "",
            "| case | " + " | ".join(f"`{m}`, {rt}" for m in OURS[1:]
                                     for rt in ROUTERS) + " |",
            "|---|" + "---|" * (len(OURS) - 1) * len(ROUTERS)]  # fmt: skip
    short = {"ttft_p50": "T50", "ttft_p99": "T99", "tpot_p50": "P50",
             "tpot_p99": "P99", "tok_s": "k"}  # fmt: skip
    for r in results:
        cells = [" ".join(short[k] for k in held(r, m, rt)) or "-"
                 for m in OURS[1:] for rt in ROUTERS]  # fmt: skip
        out.append(f"| {r['case']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", help="case key (default: all)")
    ap.add_argument("--out", type=Path, default=RESULTS / "placement")
    ap.add_argument(
        "--render",
        action="store_true",
        help="rewrite the .md from the .json (its peer settings and their rows "
        "taken again from the held-out table's)",
    )
    args = ap.parse_args(argv)
    stored = {r["case"]: r for r in json.loads(STORED.read_text())}
    if args.render:
        results = json.loads(args.out.with_suffix(".json").read_text())
        results = [with_peers(r, stored[r["case"]]) for r in results]
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(results) + "\n")
        return 0
    keys = args.case or list(stored)
    unknown = [k for k in keys if k not in stored]
    if unknown:
        ap.error(f"--case {unknown[0]}: not in {STORED.name} "
                 f"(one of {', '.join(stored)})")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for k in keys:
            results.append(case_rows(stored[k], Path(tmp)))
            print(f"{k}: done", file=sys.stderr, flush=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
