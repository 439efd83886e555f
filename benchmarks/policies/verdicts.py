# SPDX-License-Identifier: Apache-2.0
"""The comparison's verdicts over all cases, as markdown: dominance, the
recommended setting's held cells (against the best rival per cell and
against each case's strongest peer), each setting of ours alone, pairwise
wins. :mod:`.render` puts them above the per-case tables."""

from __future__ import annotations

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
    strongest,
    tuned,
)
from .runs import case_values

NAMES = {key: column for key, column, _ in METRICS}


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


def peer_modes(rv: dict[str, str]) -> list[str]:
    """The peer settings among a case's rivals (the baseline left out)."""
    return [m for label, m in rv.items() if label != settings.BASELINE]


def held_per_setting(records: list[dict[str, Any]]) -> list[str]:
    """Per setting of ours: the scored cells it holds against the best rival
    per cell and against the case's strongest peer
    (:func:`.judging.strongest`), over the cases where it ran, and the
    cases where some peer setting dominates it."""
    rows = []
    for mode in settings.OURS:
        held = cells = ran = beaten = held_sp = 0
        for record in records:
            values = case_values(record)
            if mode not in values:
                continue
            ran += 1
            rv = rivals(values)
            hs = held_cells(values, mode, rv.values())
            cells += len(hs)
            held += sum(h.held for h in hs)
            best = strongest(values, peer_modes(rv), settings.BASELINE)
            if best is not None:
                held_sp += sum(h.held for h in held_cells(values, mode, [best]))
            beaten += any(dominates(values, m, [mode]) for m in peer_modes(rv))
        if ran:
            rows.append(
                f"| `{mode}` | {held} of {cells} | {held_sp} of {cells} | {ran} "
                f"| {beaten} |"
            )
    return [
        "**Each setting of ours alone**, judged as the recommended one is: "
        "cells held against the best rival per cell, and against the case's "
        "strongest peer (one peer setting per case, the lowest tuning score), "
        "over the cases where it ran; the last column: cases where some peer "
        "setting beats it on both TTFT p50 and TPOT p99 across the whole "
        "interval.",
        "",
        "| setting | cells held (best rival per cell) | cells held (strongest "
        "peer) | cases run | cases a peer dominates it |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def strongest_rows(records: list[dict[str, Any]]) -> list[str]:
    """The recommended setting against each case's strongest peer: one row
    per case (the peer named), its cells as in the per-cell table."""
    rec = settings.RECOMMENDED
    rows, held_n, cells = [], 0, 0
    for record in records:
        values = case_values(record)
        best = strongest(values, peer_modes(rivals(values)), settings.BASELINE)
        if rec not in values or best is None:
            continue
        texts = []
        for h in held_cells(values, rec, [best], (*SCORED, "goodput")):
            if h.metric != "goodput":
                cells += 1
                held_n += h.held
            texts.append(
                f"{'ok' if h.held else '**gives up**'} {_pct(h.diff.lo, h.diff.hi)}"
            )
        rows.append(f"| {record['case']} | `{best}` | " + " | ".join(texts) + " |")
    if not rows:
        return []
    return [
        f"**Recommended setting `{rec}` against the case's strongest peer** "
        "(per case the one peer setting, defaults or tuned, with the lowest "
        "tuning score: what a user would deploy instead), the paired relative "
        f"difference's 95 % interval. {held_n} of {cells} cells held.",
        "",
        "| case | strongest peer | "
        + " | ".join(NAMES[k] for k in (*SCORED, "goodput"))
        + " |",
        "|---" * (len(SCORED) + 3) + "|",
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
        *strongest_rows(records),
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
