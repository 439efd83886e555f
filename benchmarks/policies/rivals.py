# SPDX-License-Identifier: Apache-2.0
"""Who a case judges ours against: the baseline and each peer family at its
defaults and at its tuned point (:func:`rivals`), tuned on the design seeds
and kept fixed on the held-out seeds (:func:`record_rivals`), and what the
held-out run runs (:func:`held_out_plan`). :mod:`.verdicts` writes the
judgments."""

from __future__ import annotations

from typing import Any

from . import settings
from .judging import Values, tuned
from .runs import case_values


def rivals(values: Values, frozen: bool = False) -> dict[str, str]:
    """``{label: mode}`` of what ours is judged against in a case: the
    baseline, each peer at its defaults and at its tuned point.

    The tuned point is the family's grid point with the lowest tuning score
    on ``values`` (:func:`.judging.tuned`) on the design seeds; on the
    held-out seeds (``frozen``) it was fixed on the design seeds before
    they ran (the held-out run judges a family's default and that one
    point), so it is the family's point other than its default, never
    re-picked on the held-out values. A run on the held-out seeds with
    more points of a family than that (a partial run with ``--modes``) is
    no held-out plan, and its tuned point is picked as on the design seeds.
    """
    out = {settings.BASELINE: settings.BASELINE}
    for f in settings.PEERS:
        has_default = bool(f.default) and f.default in values
        if has_default:
            out[f"{f.name} default"] = f.default
        grid = settings.grid(f)
        rest = [m for m in grid if m in values and m != f.default]
        if frozen and len(rest) <= 1:
            best = rest[0] if rest else (f.default if has_default else None)
        else:
            best = tuned(values, grid, settings.BASELINE)
        if best is not None:
            out[f"{f.name} tuned"] = best
    return out


def record_rivals(record: dict[str, Any]) -> dict[str, str]:
    """:func:`rivals` of a stored case ``record``, frozen when its seeds
    are the held-out draw (:func:`.settings.is_held_out`)."""
    seeds = [r["seed"] for r in record["runs"]]
    return rivals(case_values(record), settings.is_held_out(seeds))


def peer_modes(rv: dict[str, str]) -> list[str]:
    """The peer settings among a case's rivals (the baseline left out)."""
    return [m for label, m in rv.items() if label != settings.BASELINE]


def held_out_modes(design: dict[str, Any]) -> list[str]:
    """What a case runs on the held-out seeds, from its design ``record``:
    the baseline, ours that ran, each peer family's default and the point
    tuned on the design seeds (:func:`rivals`)."""
    values = case_values(design)
    ours = [m for m in settings.OURS if m in values]
    return [settings.BASELINE, *ours, *peer_modes(rivals(values))]


def held_out_plan(
    case: str, design: dict[str, Any], frozen: dict[str, Any] | None
) -> list[str]:
    """The modes the held-out run judges in ``case``: those its stored run
    judged (``frozen``, the case's record of ``policies_heldout.json``,
    chosen at the freeze from the design table of that time, seeds 0-2),
    so that a later design table (more seeds, a fixed peer model, other
    tuned points) does not change what the held-out seeds judge. A case
    the stored run lacks, or a stored run of other seeds (another freeze,
    a partial run), takes :func:`held_out_modes` of ``design``.

    Raises:
        SystemExit: neither record has the case.
    """
    if frozen and settings.is_held_out([r["seed"] for r in frozen["runs"]]):
        return list(frozen["runs"][0]["values"])
    if case not in design:
        raise SystemExit(f"--held-out: {case} has no design row")
    return held_out_modes(design[case])
