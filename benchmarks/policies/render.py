# SPDX-License-Identifier: Apache-2.0
"""The markdown of the comparison: the verdicts over all cases
(:mod:`.verdicts`), then per case every mode's mean and 95 % interval
across seeds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import settings, stats
from .judging import METRICS, Values, tuned
from .rivals import record_rivals
from .runs import case_values
from .stats import t_interval
from .verdicts import NAMES, judgments


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _cell(xs: Sequence[float]) -> str:
    iv = t_interval(xs)
    return _num(iv.mean) if iv.n == 1 else f"{_num(iv.mean)} ± {_num(iv.half)}"


def case_table(record: dict[str, Any], values: Values) -> list[str]:
    runs = record["runs"]
    seeds = ", ".join(str(r["seed"]) for r in runs)
    sizes = ", ".join(f"{r['requests']} req / {r['span_s']:g} s" for r in runs)
    wall = sum(r["wall_s"] for r in runs)
    tuned_modes = {
        m: label for label, m in record_rivals(record).items() if "tuned" in label
    }
    ours = tuned(values, settings.OURS, settings.BASELINE)
    lines = [
        f"**{record['case']}** (seeds {seeds}: {sizes}; {wall:.0f} s wall)",
        "",
        f"`{runs[0]['command']}` (seed {runs[0]['seed']}; the other seeds "
        f"differ only in the seed's workload)",
        "",
        "| mode | " + " | ".join(NAMES[k] for k, _, _ in METRICS) + " |",
        "|---" * (len(METRICS) + 1) + "|",
    ]
    for mode, by_metric in values.items():
        tags = [
            t
            for t in (tuned_modes.get(mode), "ours tuned" if mode == ours else None)
            if t
        ]
        name = f"`{mode}`" + (f" ({', '.join(tags)})" if tags else "")
        lines.append(
            f"| {name} | "
            + " | ".join(_cell(by_metric[k]) for k, _, _ in METRICS)
            + " |"
        )
    return [*lines, ""]


def grids_ran(records: list[dict[str, Any]]) -> list[str]:
    """One line per group of cases that ran the same grid: how many of our
    settings and of each peer family's points ran on every seed."""
    groups: dict[str, list[str]] = {}
    for record in records:
        values = case_values(record)
        ours = sum(m in values for m in settings.OURS)
        fams = sorted(
            {sum(m in values for m in settings.grid(f)) for f in settings.PEERS}
        )
        what = (
            f"{len(values)} modes: `{settings.BASELINE}`, {ours} of ours, "
            f"{' or '.join(map(str, fams))} point(s) per peer family"
        )
        groups.setdefault(what, []).append(record["case"])
    return [f"- {', '.join(keys)}: {what}" for what, keys in groups.items()]


def _t_text(n: int) -> str:
    if n < 2:
        return "no interval from one seed"
    return f"{stats.t_quantile(n - 1):.2f} at {n} seeds"


def held_out(seeds: list[int]) -> bool:
    """Whether ``seeds`` are the held-out seeds drawn from ``FROZEN_AT``."""
    return settings.is_held_out(seeds)


def seed_provenance(seeds: list[int]) -> str:
    """Which seeds these are: seen during the design, or held out (drawn
    from the commit that fixed our settings, :func:`settings.held_out_seeds`),
    with the commit order."""
    seen = [s for s in seeds if s in settings.SEEN_SEEDS]
    if held_out(seeds):
        return (
            f"**Held-out seeds** {seeds}: drawn by `settings.held_out_seeds` from "
            f"commit `{settings.FROZEN_AT[:10]}`, which fixed our settings "
            "(`OURS`, `RECOMMENDED`) before any of these seeds ran; this table "
            "was committed after it. The peers' tuned points are those picked "
            "on the design seeds."
        )
    if seen == seeds:
        return (
            f"**Design seeds** {seeds}: seen while our settings were designed "
            "(`settings.SEEN_SEEDS` says when each was read); the held-out "
            "table (`policies_heldout.md`) is the one no setting was tuned on."
        )
    return f"Seeds {seeds}: neither the design set nor the drawn held-out set."


def recorded_vllm(records: list[dict[str, Any]]) -> str | None:
    """The vLLM version(s) the records' runs were made on (each run's
    ``vllm``: ``"<version> package <digest>"``), joined by " and " when they
    differ; None if no run says. ``--render`` heads the table with it, not
    with the rendering interpreter's vLLM."""
    runs = [r for rec in records for r in rec["runs"]]
    found = {r["vllm"].split(" ")[0] for r in runs if r.get("vllm")}
    return " and ".join(sorted(found)) or None


def markdown(
    records: list[dict[str, Any]], vllm_version: str, command: str | None = None
) -> str:
    """The tables of ``records``, headed by ``command``, the one that wrote
    them (None: the command of the committed table for these seeds)."""
    seeds = sorted({r["seed"] for rec in records for r in rec["runs"]})
    default = settings.HELD_OUT_COMMAND if held_out(seeds) else settings.COMMAND
    by = command or default
    lines = [
        "<!-- written by benchmarks/compare_policies.py -->",
        f"Written by `{by}` (the main lane's venv) in one "
        "invocation; `--render` rewrites this file from the JSON next to it.",
        "",
        f"Simulated engine on vLLM {vllm_version} (real vLLM schedulers in lock "
        f"step, modeled step cost), cap 16/rank, workload seeds {seeds} per "
        "case (each seed its own sample of the case's workload), one run "
        "per mode and seed (the engine is deterministic: the spread is the "
        "workload's). Each cell: mean ± half-width of the 95 % Student-t "
        "interval over the seeds' values (t with n-1 degrees of freedom: "
        f"{_t_text(len(seeds))}). "
        "Comparisons use the t-interval of "
        "the per-seed paired relative differences. Goodput (the SLO pair): "
        f"requests meeting TTFT <= {settings.SLO_TTFT_MS:g} ms and TPOT <= "
        f"{settings.SLO_TPOT_MS:g} ms, per modeled second. A family's tuned "
        "point (peers and ours alike): per case, the point of its grid "
        "(defaults included) with the lowest mean over seeds of "
        "log(TTFT p50/off) + log(TPOT p99/off). No oracle: each peer is "
        "judged as one setting (its default, or its tuned point), never the "
        "best of several per cell.",
        "",
        seed_provenance(seeds),
        "",
        "What ran (ours and each peer family's grid, `benchmarks/policies/"
        "settings.py` and `peer_grids.py`; a case that cuts them keeps the "
        "first points of each list, ours and every family alike):",
        "",
        *grids_ran(records),
        "",
    ]
    lines += judgments(records)
    for record in records:
        lines += case_table(record, case_values(record))
    return "\n".join(lines) + "\n"
