# SPDX-License-Identifier: Apache-2.0
"""The checks of ``validate-sim``: one case and mode of the simulated engine
against the real deployment's runs, and the table they print.

Pure comparison of :class:`~vllm_ascend_balance.replay.pipeline.metrics.RunMetrics` (no
engine, no vLLM), so the tolerances can be tested on made-up metrics;
:mod:`.cli` runs the engines and calls :func:`compare_runs`. What is compared,
and why a median of several real runs: :mod:`.cli`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vllm_ascend_balance.replay.pipeline.metrics import RunMetrics

#: Largest difference of the frozen share of steps, sim vs real median (points).
FROZEN_POINTS = 0.03
#: Largest difference of the slowest-rank mixed prefill+decode share (points).
MIXED_POINTS = 0.02
#: Largest relative difference of TPOT p50 and p99, against the real median.
TPOT_RELATIVE = 0.10


@dataclass(frozen=True)
class Check:
    """One compared quantity of one case and mode."""

    case: str
    mode: str
    what: str
    real: str
    sim: str
    ok: bool


def _gathers_ok(m: RunMetrics, balance: bool) -> bool:
    if not balance:
        return not any(m.gathers_per_rank)
    return len(set(m.gathers_per_rank)) == 1 and m.gathers_per_step == 1.0


def _median(
    runs: Sequence[RunMetrics], value: Callable[[RunMetrics], float | None]
) -> float | None:
    values = [v for v in map(value, runs) if v is not None]
    return statistics.median(values) if values else None


def _shown(
    runs: Sequence[RunMetrics],
    value: Callable[[RunMetrics], float | None],
    fmt: Callable[[float | None], str],
) -> str:
    """The real side of a check: the median, and the runs' range when there
    is more than one run (their noise)."""
    median = fmt(_median(runs, value))
    values = [v for v in map(value, runs) if v is not None]
    if len(runs) < 2 or not values:
        return median
    return f"{median} [{fmt(min(values))}..{fmt(max(values))}]"


def compare_runs(
    case: str,
    mode: str,
    balance: bool,
    real: RunMetrics | Sequence[RunMetrics],
    sim: RunMetrics,
) -> list[Check]:
    """The checks of one case and mode (see the module docstring).

    Args:
        real: the real deployment's run(s); quantities are compared at their
            median over the runs, completion and gathers on every run.
        sim: the simulated engine's run.
    """
    runs = [real] if isinstance(real, RunMetrics) else list(real)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    def rel_ok(a: float | None, b: float | None) -> bool:
        return a is not None and b is not None and abs(b - a) <= TPOT_RELATIVE * a

    def abs_ok(a: float | None, b: float | None, tol: float) -> bool:
        return abs((a or 0.0) - (b or 0.0)) <= tol

    def frozen(m: RunMetrics) -> float | None:
        return m.frozen_share

    def mixed(m: RunMetrics) -> float | None:
        return m.mixed_share

    def tpot50(m: RunMetrics) -> float | None:
        return m.tpot_p50_ms

    def tpot99(m: RunMetrics) -> float | None:
        return m.tpot_p99_ms

    completed = {f"{m.completed}/{m.requests}" for m in runs}
    out = [
        Check(
            case,
            mode,
            "completed" + (f" ({len(runs)} real runs)" if len(runs) > 1 else ""),
            " ".join(sorted(completed)),
            f"{sim.completed}/{sim.requests}",
            all(m.completed == m.requests for m in runs)
            and sim.completed == sim.requests,
        ),
        Check(
            case,
            mode,
            f"steps frozen (±{100 * FROZEN_POINTS:g} pts)",
            _shown(runs, frozen, pct),
            pct(sim.frozen_share),
            abs_ok(_median(runs, frozen), sim.frozen_share, FROZEN_POINTS),
        ),
        Check(
            case,
            mode,
            f"slowest rank mixed P+D (±{100 * MIXED_POINTS:g} pts)",
            _shown(runs, mixed, pct),
            pct(sim.mixed_share),
            abs_ok(_median(runs, mixed), sim.mixed_share, MIXED_POINTS),
        ),
    ]
    for label, value, b in (
        ("TPOT p50 ms", tpot50, sim.tpot_p50_ms),
        ("TPOT p99 ms", tpot99, sim.tpot_p99_ms),
    ):
        out.append(
            Check(
                case,
                mode,
                f"{label} (±{100 * TPOT_RELATIVE:g}%)",
                _shown(runs, value, ms),
                ms(b),
                rel_ok(_median(runs, value), b),
            )
        )
    first = runs[0]
    out.append(
        Check(
            case,
            mode,
            "gathers/step, per rank" + (" (1, equal)" if balance else " (none)"),
            f"{first.gathers_per_step or 0:.2f} {list(first.gathers_per_rank)}"
            + (" (run 1)" if len(runs) > 1 else ""),
            f"{sim.gathers_per_step or 0:.2f} {list(sim.gathers_per_rank)}",
            all(_gathers_ok(m, balance) for m in runs) and _gathers_ok(sim, balance),
        )
    )
    return out


def format_checks(checks: list[Check]) -> str:
    rows = [("case", "mode", "check", "real", "sim", "")] + [
        (c.case, c.mode, c.what, c.real, c.sim, "ok" if c.ok else "FAIL")
        for c in checks
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
