# SPDX-License-Identifier: Apache-2.0
"""Compare modes over repeated runs, each metric against its noise.

Every mode runs ``--repeat`` R times. For each metric, a mode's value is the
mean over its runs, shown with half the range of its runs (runs of one
mode are A/A runs: their scatter is the noise). A mode is compared with the
baseline (the first mode) by the difference of the means, judged against the *band*: the
half-width of the 99 % confidence interval of that difference (pooled
variance, ``R_base + R_mode - 2`` degrees of freedom):

- ``|difference| <= band``: "~ no effect" (inside the noise);
- beyond it: an effect, printed with its sign and relative size;
- one run per mode: no band, "?", never an effect.

When every run of both modes gave the same value (a deterministic metric,
e.g. the frozen share with balance off), the band is 0 and any difference
is an effect. Why a t interval and not the range of the runs: with two runs
per mode the range is a poor estimate of the noise, and pure noise lands
outside it about one time in five (``tests/test_replay_compare.py`` checks
both rates).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.metrics import RunMetrics
from vllm_ascend_balance.replay.pipeline.modes import Mode

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


#: Two-sided 99 % quantiles of Student's t by degrees of freedom (larger
#: df: the nearest smaller entry, conservative; beyond 30: the normal's).
_T99 = {1: 63.657, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499,
        8: 3.355, 9: 3.250, 10: 3.169, 12: 3.055, 15: 2.947, 20: 2.845,
        30: 2.750}  # fmt: skip


def t99(df: int) -> float:
    """The two-sided 99 % quantile of Student's t with ``df`` >= 1."""
    if df > 30:
        return 2.576
    return _T99[max(k for k in _T99 if k <= df)]


@dataclass(frozen=True)
class Cell:
    """One metric of one mode over its runs."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None

    @property
    def variance(self) -> float | None:
        """Sample variance (n-1); None with fewer than two runs."""
        n, mean = len(self.values), self.mean
        if n < 2 or mean is None:
            return None
        return sum((x - mean) ** 2 for x in self.values) / (n - 1)

    @property
    def half_range(self) -> float | None:
        """Half the range of the runs (every run is within ``mean ±`` twice
        this); None with fewer than two runs."""
        if len(self.values) < 2:
            return None
        return (max(self.values) - min(self.values)) / 2

    @property
    def ci99(self) -> float | None:
        """Half-width of the 99 % confidence interval of the mean."""
        n, var = len(self.values), self.variance
        if var is None:
            return None
        return t99(n - 1) * math.sqrt(var / n)


@dataclass(frozen=True)
class Verdict:
    """A mode against the baseline on one metric.

    Attributes:
        diff: mean(mode) - mean(baseline), or None when either is missing.
        band: the 99 % confidence half-width of ``diff``, or None (no band).
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
    banded: bool  # every mode has two runs or more


def cell(spec: MetricSpec, runs: list[RunMetrics]) -> Cell:
    values = [spec.get(m) for m in runs]
    return Cell(tuple(float(v) for v in values if v is not None))


def difference_band(base: Cell, other: Cell) -> float | None:
    """Half-width of the 99 % confidence interval of ``mean(other) -
    mean(base)`` (pooled variance); None unless both have two runs or more."""
    n1, n2 = len(base.values), len(other.values)
    v1, v2 = base.variance, other.variance
    if v1 is None or v2 is None:
        return None
    df = n1 + n2 - 2
    pooled = ((n1 - 1) * v1 + (n2 - 1) * v2) / df
    return t99(df) * math.sqrt(pooled * (1 / n1 + 1 / n2))


def judge(base: Cell, other: Cell) -> Verdict:
    """The verdict of ``other`` against ``base`` (see the module docstring)."""
    band = difference_band(base, other)
    if base.mean is None or other.mean is None:
        return Verdict(None, band, None)
    diff = other.mean - base.mean
    if band is None:
        return Verdict(diff, None, None)
    # Float noise of identical deterministic values is not an effect.
    tiny = 1e-9 * max(abs(base.mean), abs(other.mean), 1.0)
    return Verdict(diff, band, abs(diff) > max(band, tiny))


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
    base = modes[0].label
    verdicts = {
        spec.label: {
            m.label: judge(cells[spec.label][base], cells[spec.label][m.label])
            for m in modes[1:]
        }
        for spec in specs
    }
    repeated = all(len(runs.get(m.label, [])) > 1 for m in modes)
    return Comparison(tuple(modes), cells, verdicts, repeated)
