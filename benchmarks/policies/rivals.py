# SPDX-License-Identifier: Apache-2.0
"""Who a case judges ours against: the baseline and each peer family at its
defaults and at its tuned point (:func:`rivals`), tuned on the design seeds
and kept fixed on the held-out seeds (:func:`design_tuned`,
:func:`record_rivals`), and what the held-out run runs
(:func:`held_out_plan`). :mod:`.verdicts` writes the judgments."""

from __future__ import annotations

from typing import Any

from . import settings
from .judging import Values, tuned
from .runs import case_values


def rivals(
    values: Values, frozen: bool = False, tuned_on: dict[str, str] | None = None
) -> dict[str, str]:
    """``{label: mode}`` of what ours is judged against in a case: the
    baseline, each peer at its defaults and at its tuned point.

    The tuned point is the family's grid point with the lowest tuning score
    on ``values`` (:func:`.judging.tuned`) on the design seeds. On the
    held-out seeds it is never re-picked on the held-out values: it is
    ``tuned_on[family]``, the point picked on the design table the run
    was planned from (:func:`design_tuned`, stored in the held-out
    record); a held-out record without that map (``frozen``, run before
    it existed) ran each family's default and one point, which is the
    tuned one. A run on the held-out seeds with more points of a family
    than that and no map (a partial run with ``--modes``) is no held-out
    plan, and its tuned point is picked as on the design seeds.

    Raises:
        ValueError: ``tuned_on`` names a point that is not in ``values``.
    """
    out = {settings.BASELINE: settings.BASELINE}
    for f in settings.PEERS:
        has_default = bool(f.default) and f.default in values
        if has_default:
            out[f"{f.name} default"] = f.default
        grid = settings.grid(f)
        rest = [m for m in grid if m in values and m != f.default]
        if tuned_on is not None:
            best = tuned_on.get(f.name)
            if best is not None and best not in values:
                # Judging without it would drop the peer's tuned point and
                # flatter ours: the record is not what the plan ran.
                raise ValueError(
                    f"{f.name}: the design-tuned point {best} did not run on "
                    "these seeds (run --held-out again without --modes)"
                )
        elif frozen and len(rest) <= 1:
            best = rest[0] if rest else (f.default if has_default else None)
        else:
            best = tuned(values, grid, settings.BASELINE)
        if best is not None:
            out[f"{f.name} tuned"] = best
    return out


def design_tuned(design: dict[str, Any]) -> dict[str, str]:
    """``{family: mode}``: each peer family's tuned point on the design
    ``record`` (:func:`rivals`), what the held-out run judges."""
    rv = rivals(case_values(design))
    return {
        f.name: rv[f"{f.name} tuned"] for f in settings.PEERS if f"{f.name} tuned" in rv
    }


def record_rivals(record: dict[str, Any]) -> dict[str, str]:
    """:func:`rivals` of a stored case ``record``: a held-out record takes
    its stored ``tuned_on_design`` map, or is ``frozen`` when its seeds are
    the held-out draw (:func:`.settings.is_held_out`)."""
    seeds = [r["seed"] for r in record["runs"]]
    return rivals(
        case_values(record), settings.is_held_out(seeds), record.get("tuned_on_design")
    )


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
    """The modes the held-out run runs in ``case``: those its stored run
    judged (``frozen``, the case's record of ``policies_heldout.json``),
    so that its rows stay, then what the current design table picks
    (:func:`held_out_modes`: a larger peer grid or more design seeds may
    tune a family to another point, which must run on the held-out seeds
    too). A stored run of other seeds (another freeze, a partial run)
    keeps nothing.

    Raises:
        SystemExit: the design table lacks the case.
    """
    if case not in design:
        raise SystemExit(f"--held-out: {case} has no design row")
    kept: list[str] = []
    if frozen and settings.is_held_out([r["seed"] for r in frozen["runs"]]):
        kept = list(frozen["runs"][0]["values"])
    return list(dict.fromkeys([*kept, *held_out_modes(design[case])]))
