# SPDX-License-Identifier: Apache-2.0
"""The markdown of the comparison: per case, every mode's mean and 95 %
interval across seeds; then the judgments (dominance, the recommended
setting's held cells, pairwise wins) over all cases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import settings
from .judging import (
    FRONT,
    METRICS,
    SCORED,
    Values,
    covering,
    dominates,
    held_cells,
    pairwise_wins,
    tuned,
)
from .runs import case_values
from .stats import t_interval

NAMES = {key: column for key, column, _ in METRICS}


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _cell(xs: Sequence[float]) -> str:
    iv = t_interval(xs)
    return _num(iv.mean) if iv.n == 1 else f"{_num(iv.mean)} ± {_num(iv.half)}"


def _pct(lo: float, hi: float) -> str:
    return f"[{100 * lo:+.0f}, {100 * hi:+.0f}] %"


def rivals(values: Values) -> dict[str, str]:
    """``{label: mode}`` of what ours is judged against in a case: the
    baseline, each peer at its defaults and at its tuned point."""
    out = {settings.BASELINE: settings.BASELINE}
    for f in settings.PEERS:
        if f.default and f.default in values:
            out[f"{f.name} default"] = f.default
        grid = settings.grid(f)
        best = tuned(values, grid, settings.BASELINE)
        if best is not None:
            out[f"{f.name} tuned"] = best
    return out


def case_table(record: dict[str, Any], values: Values) -> list[str]:
    runs = record["runs"]
    seeds = ", ".join(str(r["seed"]) for r in runs)
    sizes = ", ".join(f"{r['requests']} req / {r['span_s']:g} s" for r in runs)
    wall = sum(r["wall_s"] for r in runs)
    tuned_modes = {m: label for label, m in rivals(values).items() if "tuned" in label}
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


def held_per_setting(records: list[dict[str, Any]]) -> list[str]:
    """Per setting of ours: the scored cells it holds against the best rival
    (the count the recommended setting is judged by), over the cases where
    it ran, and the cases where some peer setting dominates it."""
    rows = []
    for mode in settings.OURS:
        held = cells = ran = beaten = 0
        for record in records:
            values = case_values(record)
            if mode not in values:
                continue
            ran += 1
            rv = rivals(values)
            hs = held_cells(values, mode, rv.values())
            cells += len(hs)
            held += sum(h.held for h in hs)
            beaten += any(
                dominates(values, m, [mode])
                for label, m in rv.items()
                if label != settings.BASELINE
            )
        if ran:
            rows.append(f"| `{mode}` | {held} of {cells} | {ran} | {beaten} |")
    return [
        "**Each setting of ours alone**, judged as the recommended one is "
        "(cells held against the best rival per cell), over the cases where "
        "it ran; the last column: cases where some peer setting beats it on "
        "both TTFT p50 and TPOT p99 across the whole interval.",
        "",
        "| setting | cells held | cases run | cases a peer dominates it |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def judgments(records: list[dict[str, Any]]) -> list[str]:
    rec = settings.RECOMMENDED
    dom_rows, held_rows, wins = [], [], {}
    pairs = covered = free = held_n = cells = good_n = 0
    for record in records:
        values = case_values(record)
        if rec not in values:
            continue
        rv = rivals(values)
        peer_labels = [label for label in rv if label != settings.BASELINE]
        verdicts = []
        for label in peer_labels:
            cov = covering(values, settings.OURS, rv[label])
            over = dominates(values, rv[label], settings.OURS)
            pairs += 1
            covered += bool(cov)
            free += not over
            verdicts.append(
                f"`{cov[0]}`"
                if cov
                else f"**`{rv[label]}` dominates all**"
                if over
                else "trade-off"
            )
        dom_rows.append(f"| {record['case']} | " + " | ".join(verdicts) + " |")
        cells_here = held_cells(values, rec, rv.values(), (*SCORED, "goodput"))
        texts = []
        for h in cells_here:
            if h.metric == "goodput":
                good_n += h.held
            else:
                cells += 1
                held_n += h.held
            tag = "ok" if h.held else "**gives up**"
            texts.append(f"{tag} vs `{h.best}` {_pct(h.diff.lo, h.diff.hi)}")
        held_rows.append(f"| {record['case']} | " + " | ".join(texts) + " |")
        for (a, b), n in pairwise_wins(values, [rec, *rv.values()]).items():
            if rec in (a, b):
                other = b if a == rec else a
                label = next(k for k, v in rv.items() if v == other)
                w, lost = wins.get(label, (0, 0))
                wins[label] = (w + n, lost) if a == rec else (w, lost + n)
    if not dom_rows:
        return []
    head = [
        label for label in rivals(case_values(records[0])) if label != settings.BASELINE
    ]
    return [
        f"**Dominance** ({NAMES[FRONT[0]]}, {NAMES[FRONT[1]]}): per case and "
        "peer setting, the first setting of ours "
        f"({', '.join(f'`{m}`' for m in settings.OURS)}) at least as good on "
        "both within the paired interval; else `trade-off` (none is, but the "
        "peer does not beat all of ours on both) or the peer that beats every "
        f"setting of ours on both. {free} of {pairs} (case, peer setting) pairs "
        f"have no peer dominating all of ours; in {covered} of {pairs} a "
        "setting of ours is at least as good on both.",
        "",
        "| case | " + " | ".join(head) + " |",
        "|---" * (len(head) + 1) + "|",
        *dom_rows,
        "",
        f"**Recommended setting `{rec}` against the best rival per cell** (the "
        "best mean among `off` and each peer at defaults and tuned), the "
        "paired relative difference's 95 % interval: `ok` when it reaches "
        f"zero or better. {held_n} of {cells} cells held (goodput, not in "
        f"that count: held in {good_n} of {len(held_rows)} cases).",
        "",
        "| case | " + " | ".join(NAMES[k] for k in (*SCORED, "goodput")) + " |",
        "|---" * (len(SCORED) + 2) + "|",
        *held_rows,
        "",
        *held_per_setting(records),
        f"**Pairwise wins of `{rec}`** (cells of {', '.join(NAMES[k] for k in SCORED)} "
        "over all cases where the paired interval lies wholly on one side): "
        "won / lost.",
        "",
        "| rival | won | lost |",
        "|---|---|---|",
        *[f"| {label} | {w} | {lost} |" for label, (w, lost) in wins.items()],
        "",
    ]


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


def markdown(records: list[dict[str, Any]], vllm_version: str) -> str:
    seeds = sorted({r["seed"] for rec in records for r in rec["runs"]})
    lines = [
        "<!-- written by benchmarks/compare_policies.py -->",
        f"Written by `{settings.COMMAND}` (the main lane's venv) in one "
        "invocation; `--render` rewrites this file from the JSON next to it.",
        "",
        f"Simulated engine on vLLM {vllm_version} (real vLLM schedulers in lock "
        f"step, modeled step cost), cap 16/rank, workload seeds {seeds} per "
        "case (each seed its own sample of the case's workload), one run "
        "per mode and seed (the engine is deterministic: the spread is the "
        "workload's). Each cell: mean ± half-width of the 95 % Student-t "
        "interval over the seeds' values (t with n-1 degrees of freedom: "
        "4.30 at 3 seeds). Comparisons use the t-interval of "
        "the per-seed paired relative differences. Goodput (the SLO pair): "
        f"requests meeting TTFT <= {settings.SLO_TTFT_MS:g} ms and TPOT <= "
        f"{settings.SLO_TPOT_MS:g} ms, per modeled second. A family's tuned "
        "point (peers and ours alike): per case, the point of its grid "
        "(defaults included) with the lowest mean over seeds of "
        "log(TTFT p50/off) + log(TPOT p99/off). No oracle: each peer is "
        "judged as one setting (its default, or its tuned point), never the "
        "best of several per cell.",
        "",
        "What ran (ours and each peer family cut to the same grid per case; "
        "the first points of each list in `benchmarks/policies/settings.py`):",
        "",
        *grids_ran(records),
        "",
    ]
    lines += judgments(records)
    for record in records:
        lines += case_table(record, case_values(record))
    return "\n".join(lines) + "\n"
