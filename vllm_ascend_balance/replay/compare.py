# SPDX-License-Identifier: Apache-2.0
"""Compare modes over repeated runs, each metric against its noise band.

Every mode runs ``--repeat`` times. For each metric, a mode's value is the
mean over its runs and its *spread* the largest minus the smallest run
(A/A runs: the same configuration, so the spread is pure noise). A mode is
compared with the baseline (the first mode) by the difference of means,
judged against the *band* ``max(spread(baseline), spread(mode))``:

- ``|difference| <= band``: "~ no effect" (inside the noise);
- beyond it: an effect, printed with its sign and relative size;
- no band (one run per mode and no A/A pair): "?", never an effect.

With one run per mode but an A/A pair among the modes (``--mode aa``, or the
same mode twice), the band is the A/A pair's difference.

The band is the observed range, not a confidence interval: with two runs per
mode the chance that pure noise lands outside it is small but not zero (a
few percent per metric); more repeats tighten the means, not the band.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.metrics import RunMetrics
from vllm_ascend_balance.replay.modes import Mode

logger = init_logger(__name__)


@dataclass(frozen=True)
class MetricSpec:
    """A compared metric: its label, how to read it, how to print it."""

    label: str
    get: Callable[[RunMetrics], float | int | None]
    digits: int = 1
    share: bool = False  # a fraction of steps, printed in %


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("output tokens/s", lambda m: m.output_tokens_per_s),
    MetricSpec("requests/s", lambda m: m.requests_per_s, 2),
    MetricSpec("TTFT p50 (ms)", lambda m: m.ttft_p50_ms, 0),
    MetricSpec("TTFT p99 (ms)", lambda m: m.ttft_p99_ms, 0),
    MetricSpec("TTFT p50 worst rank (ms)", lambda m: m.worst_rank_ttft_p50_ms, 0),
    MetricSpec("TTFT p99 worst rank (ms)", lambda m: m.worst_rank_ttft_p99_ms, 0),
    MetricSpec("TPOT p50 (ms)", lambda m: m.tpot_p50_ms),
    MetricSpec("TPOT p99 (ms)", lambda m: m.tpot_p99_ms),
    MetricSpec("makespan (s)", lambda m: m.makespan_s),
    MetricSpec("mean step (ms)", lambda m: m.step_ms_mean),
    MetricSpec("steps frozen", lambda m: m.frozen_share, 1, share=True),
    MetricSpec("steps slowest rank mixed P+D", lambda m: m.mixed_share, 1, True),
    MetricSpec("running/rank mean", lambda m: m.running_mean, 2),
    MetricSpec("running spread mean (max-min)", lambda m: m.spread_mean, 2),
    MetricSpec("balance ratio mean/max", lambda m: m.balance_ratio_mean, 3),
    MetricSpec("active steps", lambda m: m.steps, 0),
    MetricSpec("all-idle steps (not in shares)", lambda m: m.idle_steps, 0),
    MetricSpec("starved requests", lambda m: m.starvation.requests, 0),
)


@dataclass(frozen=True)
class Cell:
    """One metric of one mode over its runs."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None

    @property
    def spread(self) -> float | None:
        """Largest minus smallest run; None with fewer than two runs."""
        return max(self.values) - min(self.values) if len(self.values) > 1 else None


@dataclass(frozen=True)
class Verdict:
    """A mode against the baseline on one metric.

    Attributes:
        diff: mean(mode) - mean(baseline), or None when either is missing.
        band: the noise band it is judged against, or None (no band).
        effect: True beyond the band, False inside it, None without a band.
    """

    diff: float | None
    band: float | None
    effect: bool | None


@dataclass(frozen=True)
class Comparison:
    """Modes (baseline first), their cells and verdicts, per metric label."""

    modes: tuple[Mode, ...]
    cells: dict[str, dict[str, Cell]]
    verdicts: dict[str, dict[str, Verdict]]
    band_source: str  # "repeats", "A/A pair" or "none"


def cell(spec: MetricSpec, runs: list[RunMetrics]) -> Cell:
    values = [spec.get(m) for m in runs]
    return Cell(tuple(float(v) for v in values if v is not None))


def judge(base: Cell, other: Cell, band: float | None) -> Verdict:
    """The verdict of ``other`` against ``base`` for noise band ``band``."""
    if base.mean is None or other.mean is None:
        return Verdict(None, band, None)
    diff = other.mean - base.mean
    return Verdict(diff, band, None if band is None else abs(diff) > band)


def rank_metrics(dp_size: int) -> tuple[MetricSpec, ...]:
    """Per-rank TTFT p50/p99 rows (rank r's requests, wherever routed)."""

    def get(rank: int, p99: bool) -> Callable[[RunMetrics], float | None]:
        def read(m: RunMetrics) -> float | None:
            r = m.per_rank[rank]
            return r.ttft_p99_ms if p99 else r.ttft_p50_ms

        return read

    return tuple(
        MetricSpec(f"rank {r} TTFT {'p99' if p99 else 'p50'} (ms)", get(r, p99), 0)
        for r in range(dp_size)
        for p99 in (False, True)
    )


def compare(
    modes: list[Mode],
    runs: dict[str, list[RunMetrics]],
    specs: tuple[MetricSpec, ...] = METRICS,
) -> Comparison:
    """Compare every mode with ``modes[0]`` (``runs``: metrics by mode label,
    one per measured run) on every metric of ``specs``."""
    cells = {
        spec.label: {m.label: cell(spec, runs.get(m.label, [])) for m in modes}
        for spec in specs
    }
    repeated = all(len(runs.get(m.label, [])) > 1 for m in modes)
    pairs = [
        (a.label, b.label)
        for i, a in enumerate(modes)
        for b in modes[i + 1 :]
        if a.config == b.config
    ]
    source = "repeats" if repeated else "A/A pair" if pairs else "none"
    base = modes[0].label
    verdicts: dict[str, dict[str, Verdict]] = {}
    for spec in specs:
        row = cells[spec.label]
        out: dict[str, Verdict] = {}
        for mode in modes[1:]:
            band: float | None = None
            if source == "repeats":
                spreads = [row[base].spread, row[mode.label].spread]
                band = max(s for s in spreads if s is not None)
            elif source == "A/A pair":
                diffs = [_abs_diff(row[a], row[b]) for a, b in pairs]
                known = [d for d in diffs if d is not None]
                band = max(known) if known else None
            out[mode.label] = judge(row[base], row[mode.label], band)
        verdicts[spec.label] = out
    return Comparison(tuple(modes), cells, verdicts, source)


def _abs_diff(a: Cell, b: Cell) -> float | None:
    if a.mean is None or b.mean is None:
        return None
    return abs(a.mean - b.mean)
