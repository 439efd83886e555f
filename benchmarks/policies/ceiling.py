# SPDX-License-Identifier: Apache-2.0
"""How far any one setting gets: the headline's bar (the best peer setting
per cell, the 5 % margin on the paired interval's worse end) applied to
every setting judged, each peer's included (:func:`bar_for_every_setting`),
and to every mode that ran in every case, each grid point included
(:func:`grid_ceiling`), and to the best mode chosen case by case
(:func:`per_case_ceiling`). :mod:`.verdicts` puts them in the tables."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import settings
from .judging import FRONT, MARGIN, SCORED, Held, Values, held_cells, mean_within
from .rivals import peer_modes, record_rivals
from .runs import case_values


def _judge(values: Values, mode: str, peers: list[str]) -> list[Held] | None:
    """``mode``'s scored cells against the best of the peer settings other
    than itself (None: no other peer setting in the case)."""
    others = [p for p in peers if p != mode]
    return held_cells(values, mode, others, SCORED, MARGIN) if others else None


def _tally(total: list[int], values: Values, mode: str, verdict: list[Held]) -> None:
    """Adds to ``total`` (held on the interval, held on the mean, cells)."""
    total[0] += sum(h.held for h in verdict)
    total[1] += sum(mean_within(values, mode, h.best, h.metric) for h in verdict)
    total[2] += len(SCORED)


def bar_for_every_setting(records: list[dict[str, Any]]) -> list[str]:
    """The headline's bar applied to every setting, peers' included: per
    setting (ours by mode, a peer by its label, ``sglang-delayer tuned``),
    the scored cells within the margin of the best of the *other* peer
    settings per cell (interval's worse end; then the mean alone), and the
    cells some setting holds (the best per cell, an oracle). A peer setting
    is not judged against itself: where it leads a cell it is judged
    against the runner-up, and the paired interval's worse end can still
    be more than 5 % worse (wide intervals), so a leader does not always
    hold its own cell. A case with one peer setting judges no peer."""
    totals: dict[str, list[int]] = {}
    some = cells = 0
    for record in records:
        values = case_values(record)
        rv = record_rivals(record)
        peers = peer_modes(rv)
        subjects = {lb: m for lb, m in rv.items() if lb != settings.BASELINE}
        subjects.update({m: m for m in settings.OURS if m in values})
        held_by_metric = dict.fromkeys(SCORED, False)
        for label, mode in subjects.items():
            verdict = _judge(values, mode, peers)
            if verdict is None:
                continue
            _tally(totals.setdefault(label, [0, 0, 0]), values, mode, verdict)
            for h in verdict:
                held_by_metric[h.metric] |= h.held
        if len(peers) > 1:
            some += sum(held_by_metric.values())
            cells += len(SCORED)
    ranked = sorted(
        totals.items(), key=lambda kv: (-kv[1][0] / kv[1][2], -kv[1][1], kv[0])
    )
    ours = set(settings.OURS)
    pct = f"{100 * MARGIN:g} %"
    return [
        "**The bar, applied to every setting** (ours and each peer's): cells "
        f"within {pct} of the best of the *other* peer settings per cell "
        "(the interval's worse end; then the mean alone). A peer setting is "
        "judged without itself; ours against every peer setting. Each cell "
        "has its own leader, and a leader judged against the runner-up holds "
        "its cell only if the interval's worse end is within the margin: "
        f"some setting holds {some} of {cells} cells (the best setting per "
        "cell, an oracle no deployment has).",
        "",
        f"| setting | within {pct} of the best other peer (interval) | on the mean |",
        "|---|---|---|",
        *[
            f"| {'`' + lb + '` (ours)' if lb in ours else lb} | {h} of {n} | "
            f"{m} of {n} |"
            for lb, (h, m, n) in ranked
        ],
        "",
    ]


class _CaseReading(NamedTuple):
    """One case judged, read by :func:`grid_ceiling` and :func:`per_case_ceiling`."""

    #: Per mode that ran: (cells held on the interval, on the mean).
    scores: dict[str, tuple[int, int]]
    #: Scored cells no mode holds.
    unheld: int
    #: Whether some one mode holds both :data:`~.judging.FRONT` cells.
    front: bool


def _read_case(record: dict[str, Any]) -> _CaseReading:
    """Every mode that ran in the case against the best other peer setting
    per cell."""
    values = case_values(record)
    peers = peer_modes(record_rivals(record))
    scores = {}
    held_by_metric = dict.fromkeys(SCORED, False)
    front = False
    for mode in values:
        verdict = _judge(values, mode, peers)
        if verdict is not None:
            t = [0, 0, 0]
            _tally(t, values, mode, verdict)
            scores[mode] = (t[0], t[1])
            for h in verdict:
                held_by_metric[h.metric] |= h.held
            front |= set(FRONT) <= {h.metric for h in verdict if h.held}
    unheld = sum(not held for held in held_by_metric.values())
    return _CaseReading(scores, unheld, front)


#: How many of the best modes :func:`grid_ceiling` lists.
CEILING_ROWS = 5


def grid_ceiling(records: list[dict[str, Any]]) -> list[str]:
    """The bar applied to every mode that ran in every case (every point of
    every grid on the design table): per mode, the scored cells within the
    margin of the best *other* peer setting per cell (interval's worse
    end; then the mean alone), as :func:`bar_for_every_setting` judges.
    The best :data:`CEILING_ROWS` modes, then the baseline and the
    recommended setting if not among them, and how many were judged: how far
    any one setting of the whole search gets. On the design seeds the
    best mode and the peers' tuned points are both picked on the values
    they are judged on: a reading, not a held-out claim."""
    common: set[str] | None = None
    for record in records:
        here = set(case_values(record))
        common = here if common is None else common & here
    if not common:
        return []
    totals: dict[str, list[int]] = {m: [0, 0, 0] for m in common}
    for record in records:
        scores = _read_case(record).scores
        for mode, t in totals.items():
            if mode in scores:  # a case's only peer setting: judged by none
                held, on_mean = scores[mode]
                t[0], t[1], t[2] = t[0] + held, t[1] + on_mean, t[2] + len(SCORED)
    totals = {m: t for m, t in totals.items() if t[2]}
    if not totals:
        return []
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
    shown = ranked[:CEILING_ROWS]
    shown += [
        (m, totals[m])
        for m in (settings.BASELINE, settings.RECOMMENDED)
        if m in totals and all(m != k for k, _ in shown)
    ]
    pct = f"{100 * MARGIN:g} %"
    return [
        f"**Every mode that ran in every case** ({len(ranked)} modes: `off`, "
        "ours and every point of every peer grid that all cases ran), judged "
        f"as the bar above judges: cells within {pct} of the best of the "
        "other peer settings per cell. The best "
        f"{min(CEILING_ROWS, len(ranked))}, then `{settings.BASELINE}` and the "
        "recommended setting for reference: no one setting of this search "
        f"holds more than {ranked[0][1][0]} of {ranked[0][1][2]} (interval) "
        f"or {max(t[1] for t in totals.values())} (mean).",
        "",
        f"| mode | within {pct} of the best other peer (interval) | on the mean |",
        "|---|---|---|",
        *[f"| `{m}` | {h} of {n} | {mn} of {n} |" for m, (h, mn, n) in shown],
        "",
    ]


def _best(scores: dict[str, tuple[int, int]], modes: list[str]) -> str | None:
    """The mode holding the most cells (then the most on the mean, then by
    name, so a tie reads the same on every run)."""
    ranked = sorted(
        (m for m in modes if m in scores),
        key=lambda m: (-scores[m][0], -scores[m][1], m),
    )
    return ranked[0] if ranked else None


def per_case_ceiling(records: list[dict[str, Any]]) -> list[str]:
    """The bar with the setting chosen per case: in each case, the mode that
    ran there (any grid point, ``off`` or ours) holding the most scored cells
    against the best *other* peer setting per cell, as :func:`grid_ceiling`
    judges, and the best of our settings there. Summed over the cases, the
    most a policy that switched among this search's modes by workload could
    hold if it always knew the case: an oracle of the case (picked on the
    values it is judged on), an upper bound for a policy that runs one of
    these modes per case, not a setting. Also counted: the cases where one
    mode holds every cell, the cells no mode holds (the leader judged
    against the runner-up with the interval's worse end over the margin),
    and the cases where one mode holds both sides of the trade-off
    (:data:`~.judging.FRONT`: TTFT p50 and TPOT p99)."""
    rows = []
    best_n = ours_n = cells = full = unheld = fronts = 0
    for record in records:
        scores, none_holds, front = _read_case(record)
        best = _best(scores, sorted(scores))
        if best is None:
            continue
        ours = _best(scores, list(settings.OURS))
        h, mn = scores[best]
        oh = scores[ours][0] if ours else 0
        best_n, ours_n, cells = best_n + h, ours_n + oh, cells + len(SCORED)
        full, unheld = full + (h == len(SCORED)), unheld + none_holds
        fronts += front
        mine = f"`{ours}` | {oh}" if ours else "- | -"
        rows.append(f"| {record['case']} | `{best}` | {h} | {mn} | {mine} |")
    if not rows:
        return []
    pct = f"{100 * MARGIN:g} %"
    return [
        "**The best mode chosen per case** (an oracle of the workload: in each "
        "case the mode that ran there holding the most cells, judged as the "
        f"bar above judges, within {pct} of the best other peer setting per "
        f"cell): **{best_n} of {cells}**; the best of our settings per case: "
        f"{ours_n} of {cells}. No policy that runs one of these modes per "
        "case, knowing each case in advance, holds more. One mode holds every "
        f"cell of its case in {full} of {len(rows)} cases; {unheld} of the "
        f"{cells} cells no mode holds; one mode holds both TTFT p50 and "
        f"TPOT p99 (the trade-off's two sides) in {fronts} of {len(rows)} "
        "cases.",
        "",
        "| case | best mode | held (interval) | on the mean | best of ours | held |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]
