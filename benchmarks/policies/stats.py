# SPDX-License-Identifier: Apache-2.0
"""Intervals across workload seeds.

The simulated engine is deterministic for one workload: the spread that
matters is the workload's, so every interval here is across seeds.

- A cell's interval (one mode, one metric): Student's t-interval over the
  per-seed values, 95 % two-sided (:func:`t_interval`).
- A comparison of two modes: the t-interval of the per-seed *paired*
  relative differences ``(a - b) / b`` (:func:`paired_interval`): both modes
  ran the same seed's workload, so the workload's own variation cancels.

With n seeds the t quantile has n - 1 degrees of freedom (4.30 at n = 3):
intervals are wide on purpose, three seeds say little. With one seed there
is no interval (half-width 0, :attr:`Interval.n` says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Two-sided 95 % quantiles of Student's t, by degrees of freedom (1..30);
#: beyond 30 the normal 1.96 is used (t_30 = 2.042: within 4 %).
T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """A mean and its 95 % interval ``[lo, hi]`` over ``n`` values."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def half(self) -> float:
        return (self.hi - self.lo) / 2


def t_quantile(df: int) -> float:
    """The two-sided 95 % Student-t quantile for ``df`` >= 1."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return T95[df - 1] if df <= len(T95) else 1.96


def t_interval(values: Sequence[float]) -> Interval:
    """Student's t-interval (95 %) of the mean of ``values``.

    Raises:
        ValueError: no values, or a value that is not finite.
    """
    if not values:
        raise ValueError("an interval needs at least one value")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"values must be finite, got {list(values)}")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_quantile(n - 1) * math.sqrt(var / n)
    return Interval(mean, mean - half, mean + half, n)


def paired_interval(a: Sequence[float], b: Sequence[float]) -> Interval:
    """The t-interval of the per-seed relative differences ``(a_i - b_i) /
    b_i`` (0.1 = ``a`` 10 % above ``b``).

    Raises:
        ValueError: different lengths (not the same seeds), or a ``b_i`` of 0.
    """
    if len(a) != len(b):
        raise ValueError(f"paired values need the same seeds: {len(a)} vs {len(b)}")
    if any(y == 0 for y in b):
        raise ValueError("a relative difference against 0 is undefined")
    return t_interval([(x - y) / y for x, y in zip(a, b, strict=True)])
