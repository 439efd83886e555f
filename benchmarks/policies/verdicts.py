# SPDX-License-Identifier: Apache-2.0
"""The comparison's verdicts over all cases, as markdown: dominance, the
recommended setting's held cells against the best peer per cell with the
non-inferiority margin (the headline), one peer setting per case picked by
each rule in turn (secondary), each setting of ours alone, the bar for
every setting and every mode (:mod:`.ceiling`), pairwise wins.
:mod:`.render` puts them above the per-case tables."""

from __future__ import annotations

from typing import Any

from . import settings
from .ceiling import bar_for_every_setting, grid_ceiling, per_case_ceiling
from .judging import (
    FRONT,
    MARGIN,
    METRICS,
    SCORED,
    Values,
    covering,
    dominates,
    held_cells,
    mean_within,
    pairwise_wins,
    strongest,
)
from .rivals import peer_modes, record_rivals
from .runs import case_values

NAMES = {key: column for key, column, _ in METRICS}


def _pct(lo: float, hi: float) -> str:
    return f"[{100 * lo:+.0f}, {100 * hi:+.0f}] %"


def _held(values: Values, mode: str, rivals_: list[str], margin: float | None) -> int:
    return sum(h.held for h in held_cells(values, mode, rivals_, SCORED, margin))


def _mean_held(values: Values, mode: str, peers: list[str]) -> int:
    return sum(
        mean_within(values, mode, h.best, h.metric)
        for h in held_cells(values, mode, peers, SCORED, MARGIN)
    )


def held_per_setting(records: list[dict[str, Any]]) -> list[str]:
    """Per setting of ours, over the cases where it ran: the scored cells it
    holds against the best peer per cell with the margin (interval, then
    mean alone), against the best rival per cell with no margin (``off``
    included; the interval reaches zero: the earlier, weaker measure), and
    the cases where some peer setting dominates it."""
    rows = []
    for mode in settings.OURS:
        ni = mean_n = zero = cells = ran = beaten = 0
        for record in records:
            values = case_values(record)
            if mode not in values:
                continue
            ran += 1
            rv = record_rivals(record)
            peers = peer_modes(rv)
            cells += len(SCORED)
            ni += _held(values, mode, peers, MARGIN)
            mean_n += _mean_held(values, mode, peers)
            zero += _held(values, mode, list(rv.values()), None)
            beaten += any(dominates(values, m, [mode]) for m in peers)
        if ran:
            rows.append(
                f"| `{mode}` | {ni} of {cells} | {mean_n} of {cells} | {zero} of "
                f"{cells} | {ran} | {beaten} |"
            )
    pct = f"{100 * MARGIN:g} %"
    return [
        "**Each setting of ours alone**, judged as the recommended one is, over "
        f"the cases where it ran: cells within {pct} of the best peer per cell "
        "(the interval's worse end; then the mean alone), cells where the "
        "interval against the best rival per cell (`off` included) reaches "
        "zero (no margin: the earlier measure, wide intervals pass), and the "
        "cases where some peer setting beats it on both TTFT p50 and TPOT p99 "
        "across the whole interval.",
        "",
        f"| setting | within {pct} of the best peer (interval) | within {pct} "
        "(mean) | reaches zero vs best rival | cases run | cases a peer "
        "dominates it |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


#: The secondary view's rules for picking one peer setting per case.
PICKS = (
    ("tuning score", None),
    *((NAMES[k], k) for k in ("tpot_p99", "goodput", "tok_s")),
)


def strongest_rows(records: list[dict[str, Any]]) -> list[str]:
    """Secondary view: the recommended setting against one peer setting per
    case (one system a user could deploy instead), picked by each rule of
    :data:`PICKS` in turn; cells within the margin, as in the headline."""
    rec = settings.RECOMMENDED
    lines = []
    for label, metric in PICKS:
        held_n = cells = 0
        for record in records:
            values = case_values(record)
            peers = peer_modes(record_rivals(record))
            best = strongest(values, peers, settings.BASELINE, metric)
            if rec not in values or best is None:
                continue
            cells += len(SCORED)
            held_n += _held(values, rec, [best], MARGIN)
        lines.append(f"| {label} | {held_n} of {cells} |")
    return [
        f"**Secondary view: `{rec}` against one peer setting per case**, "
        "picked by each rule in turn (the lowest tuning score, or the best "
        f"mean on one metric); cells within {100 * MARGIN:g} % (the "
        "interval's worse end).",
        "",
        "| peer picked by | cells held |",
        "|---|---|",
        *lines,
        "",
    ]


def judgments(records: list[dict[str, Any]]) -> list[str]:
    rec = settings.RECOMMENDED
    dom_rows, held_rows, wins = [], [], {}
    pairs = covered = free = held_n = cells = good_n = mean_n = 0
    for record in records:
        values = case_values(record)
        if rec not in values:
            continue
        rv = record_rivals(record)
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
        cells_here = held_cells(
            values, rec, peer_modes(rv), (*SCORED, "goodput"), MARGIN
        )
        texts = []
        for h in cells_here:
            if h.metric == "goodput":
                good_n += h.held
            else:
                cells += 1
                held_n += h.held
                mean_n += mean_within(values, rec, h.best, h.metric)
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
    head = [label for label in record_rivals(records[0]) if label != settings.BASELINE]
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
        f"**Recommended setting `{rec}` against the best peer per cell** (the "
        "best mean among the peers, each at its defaults and at its tuned "
        "point; a different peer setting may lead each cell), the paired "
        "relative difference's 95 % interval: `ok` when its worse end is "
        f"within the non-inferiority margin of {100 * MARGIN:g} %. "
        f"**{held_n} of {cells} cells held** ({mean_n} of {cells} on the mean "
        f"alone; goodput, not in those counts: held in {good_n} of "
        f"{len(held_rows)} cases).",
        "",
        "| case | " + " | ".join(NAMES[k] for k in (*SCORED, "goodput")) + " |",
        "|---" * (len(SCORED) + 2) + "|",
        *held_rows,
        "",
        *strongest_rows(records),
        *held_per_setting(records),
        *bar_for_every_setting(records),
        *grid_ceiling(records),
        *per_case_ceiling(records),
        f"**Pairwise wins of `{rec}`** (cells of {', '.join(NAMES[k] for k in SCORED)} "
        "over all cases where the paired interval lies wholly on one side): "
        "won / lost.",
        "",
        "| rival | won | lost |",
        "|---|---|---|",
        *[f"| {label} | {w} | {lost} |" for label, (w, lost) in wins.items()],
        "",
    ]
