# SPDX-License-Identifier: Apache-2.0
"""Judging one case's modes: dominance, pairwise wins, tuned settings, held
cells, and goodput under an SLO pair. Pure functions of per-seed values.

A case's values: ``{mode: {metric: [value per seed]}}``, seeds in the same
order for every mode. "Not worse within the interval": the 95 % interval of
the per-seed paired relative differences (:func:`.stats.paired_interval`)
reaches a point where ours is at least as good (``lo <= 0`` for a
lower-is-better metric). "Better": the whole interval is on ours' side.
"Non-inferior with margin m" (the headline, :data:`MARGIN`): the
interval's worse end is within m (``hi <= m`` for a lower-is-better
metric), so a wide interval does not pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .stats import Interval, paired_interval

Values = Mapping[str, Mapping[str, Sequence[float]]]

#: (key, column, lower is better): the per-seed metrics of a run.
METRICS = (
    ("tpot_p50", "TPOT p50 ms", True),
    ("tpot_p99", "TPOT p99 ms", True),
    ("ttft_p50", "TTFT p50 ms", True),
    ("ttft_p99", "TTFT p99 ms", True),
    ("tok_s", "output tok/s", False),
    ("goodput", "goodput req/s", False),
)
LOWER = {key: lower for key, _, lower in METRICS}
#: The cells of the "recommended setting held" count (the issue's five).
SCORED = ("tpot_p50", "tpot_p99", "ttft_p50", "ttft_p99", "tok_s")
#: The headline's non-inferiority margin on the paired relative difference.
MARGIN = 0.05
#: The two axes of dominance: what a user trades (first token vs tail pace).
FRONT = ("ttft_p50", "tpot_p99")


def compare(values: Values, a: str, b: str, metric: str) -> Interval:
    """Paired relative difference of ``a`` against ``b`` on ``metric``."""
    return paired_interval(values[a][metric], values[b][metric])


def not_worse(values: Values, a: str, b: str, metric: str) -> bool:
    """``a`` is at least as good as ``b`` somewhere in the interval."""
    iv = compare(values, a, b, metric)
    return iv.lo <= 0 if LOWER[metric] else iv.hi >= 0


def non_inferior(
    values: Values, a: str, b: str, metric: str, margin: float = MARGIN
) -> bool:
    """``a`` is worse than ``b`` by at most ``margin`` across the whole
    interval (0.05: 5 %)."""
    iv = compare(values, a, b, metric)
    return iv.hi <= margin if LOWER[metric] else iv.lo >= -margin


def mean_within(
    values: Values, a: str, b: str, metric: str, margin: float = MARGIN
) -> bool:
    """The mean paired difference alone is within ``margin`` (no interval:
    the weaker reading, printed beside the headline)."""
    iv = compare(values, a, b, metric)
    return iv.mean <= margin if LOWER[metric] else iv.mean >= -margin


def better(values: Values, a: str, b: str, metric: str) -> bool:
    """``a`` beats ``b`` across the whole interval (a win)."""
    iv = compare(values, a, b, metric)
    return iv.hi < 0 if LOWER[metric] else iv.lo > 0


def covering(values: Values, ours: Iterable[str], peer: str) -> list[str]:
    """Our settings at least as good as ``peer`` on both :data:`FRONT`
    metrics within the interval: empty means ``peer`` dominates every
    setting of ours."""
    return [
        m
        for m in ours
        if m in values and all(not_worse(values, m, peer, k) for k in FRONT)
    ]


def dominates(values: Values, peer: str, ours: Iterable[str]) -> bool:
    """``peer`` beats every setting of ours that ran on both :data:`FRONT`
    metrics across the whole interval (the issue's "dominates every setting
    of ours"); False when none of ours ran."""
    ran = [m for m in ours if m in values]
    return bool(ran) and all(
        all(better(values, peer, m, k) for k in FRONT) for m in ran
    )


def pairwise_wins(
    values: Values, modes: Sequence[str], metrics: Sequence[str] = SCORED
) -> dict[tuple[str, str], int]:
    """``(a, b)`` -> on how many of ``metrics`` ``a`` beats ``b``."""
    return {
        (a, b): sum(better(values, a, b, k) for k in metrics)
        for a in modes
        for b in modes
        if a != b
    }


def tuning_score(values: Values, mode: str, baseline: str) -> float:
    """The tuning rule's score (lower is better), the same for every
    family: the mean over seeds of ``log(TTFT p50 / baseline's) + log(TPOT
    p99 / baseline's)``, i.e. the geometric mean of the two ratios, so a
    setting cannot buy one axis at any price on the other."""
    total = 0.0
    seeds = len(values[mode][FRONT[0]])
    for k in FRONT:
        for x, base in zip(values[mode][k], values[baseline][k], strict=True):
            total += math.log(x / base)
    return total / seeds


def tuned(values: Values, grid: Iterable[str], baseline: str) -> str | None:
    """The point of ``grid`` (present in ``values``) with the lowest
    :func:`tuning_score`; ties to the earlier point; None if none ran."""
    ran = [m for m in grid if m in values]
    if not ran:
        return None
    return min(ran, key=lambda m: tuning_score(values, m, baseline))


def strongest(
    values: Values, peers: Iterable[str], baseline: str, metric: str | None = None
) -> str | None:
    """The one peer setting of a case judged strongest, as one system a
    user could deploy: by ``metric``'s best mean, or with None the lowest
    :func:`tuning_score`; among ``peers`` (each family's default and tuned
    point), ties to the earlier; None if none ran."""
    if metric is None:
        return tuned(values, peers, baseline)
    ran = [m for m in peers if m in values]
    if not ran:
        return None
    means = {m: sum(values[m][metric]) / len(values[m][metric]) for m in ran}
    return (min if LOWER[metric] else max)(ran, key=means.__getitem__)


@dataclass(frozen=True)
class Held:
    """One scored cell: the best rival's mode and ours against it."""

    metric: str
    best: str
    diff: Interval  # ours vs best, relative
    held: bool


def held_cells(
    values: Values,
    ours: str,
    rivals: Iterable[str],
    metrics: Sequence[str] = SCORED,
    margin: float | None = None,
) -> list[Held]:
    """Per metric: the rival with the best mean, and whether ``ours`` holds
    against it: :func:`non_inferior` with ``margin``, or with None
    :func:`not_worse` (the interval reaches zero)."""
    out = []
    present = [r for r in rivals if r in values]
    for k in metrics:
        means = {m: sum(values[m][k]) / len(values[m][k]) for m in present}
        best = (min if LOWER[k] else max)(present, key=means.__getitem__)
        out.append(
            Held(
                k,
                best,
                compare(values, ours, best, k),
                not_worse(values, ours, best, k)
                if margin is None
                else non_inferior(values, ours, best, k, margin),
            )
        )
    return out


def slo_goodput(
    requests: Iterable[Mapping[str, Any]],
    step_end_s: Mapping[int, float],
    makespan_s: float,
    ttft_ms: float,
    tpot_ms: float,
) -> tuple[int, float]:
    """``(requests meeting both SLOs, those per modeled second)``.

    ``requests``: the replay's per-request records (``arrival_s``,
    ``first_token_step``, ``finish_step``, ``output_tokens``); ``step_end_s``:
    global step index -> its modeled end (the replay's ``timeline.step`` and
    ``timeline.t_s``). TTFT and TPOT as
    :func:`vllm_ascend_balance.replay.pipeline.metrics._latencies` defines them; a
    one-token output has no TPOT and meets it. A request unfinished, or whose
    steps are not in ``step_end_s``, meets nothing.
    """
    met = 0
    for r in requests:
        first, finish = r.get("first_token_step"), r.get("finish_step")
        if first not in step_end_s or finish not in step_end_s:
            continue
        ttft = (step_end_s[first] - r["arrival_s"]) * 1e3
        tokens = r["output_tokens"]
        tpot = (
            (step_end_s[finish] - step_end_s[first]) * 1e3 / (tokens - 1)
            if tokens > 1
            else 0.0
        )
        met += ttft <= ttft_ms and tpot <= tpot_ms
    return met, (met / makespan_s if makespan_s > 0 else 0.0)
