# SPDX-License-Identifier: Apache-2.0
"""The replay's verdicts: an A/A comparison reports no effect, a known
effect is reported, and a difference is never an effect without a band.

Runs are drawn from a seeded noise model (each run's metric = true value +
Gaussian noise), many comparisons at once, so the rates below are
deterministic counts. Negative control: judging against the range of the
runs (the band an earlier design used) reports pure noise as an effect in
about one A/A comparison in five, and this test's threshold catches it.
"""

from __future__ import annotations

import random

import pytest

from vllm_ascend_balance.replay.pipeline.compare import Cell, Verdict, compare, judge
from vllm_ascend_balance.replay.pipeline.metrics import RunMetrics, Starvation
from vllm_ascend_balance.replay.pipeline.modes import parse_modes

pytestmark = pytest.mark.lane_scope("release")

TRIALS = 2000


def _cells(rng: random.Random, mean: float, runs: int, sd: float = 1.0) -> Cell:
    return Cell(tuple(rng.gauss(mean, sd) for _ in range(runs)))


def _range_judge(base: Cell, other: Cell) -> Verdict:
    """Known-bad: the larger range of the runs as the band."""
    band = max(max(c.values) - min(c.values) for c in (base, other))
    diff = (other.mean or 0.0) - (base.mean or 0.0)
    return Verdict(diff, band, abs(diff) > band)


def _false_effects(judge_fn, runs: int) -> float:
    rng = random.Random(7)
    hits = sum(
        bool(judge_fn(_cells(rng, 100, runs), _cells(rng, 100, runs)).effect)
        for _ in range(TRIALS)
    )
    return hits / TRIALS


def test_aa_comparisons_report_no_effect():
    for runs in (2, 3, 5):
        assert _false_effects(judge, runs) <= 0.02  # 99 % bands: ~1 %


def test_negative_control_range_band_reports_noise_as_effect():
    assert _false_effects(_range_judge, 2) > 0.1


def test_a_known_effect_is_reported():
    rng = random.Random(3)
    found = sum(
        bool(judge(_cells(rng, 100, 2), _cells(rng, 130, 2)).effect)
        for _ in range(TRIALS)
    )
    assert found / TRIALS > 0.8  # a shift of 30 run-to-run sd
    # A deterministic metric (no noise in either mode): any change is real.
    assert judge(Cell((0.0, 0.0)), Cell((0.2, 0.2))).effect is True
    assert judge(Cell((0.0, 0.0)), Cell((0.0, 0.0))).effect is False


def test_one_run_per_mode_is_never_an_effect():
    verdict = judge(Cell((100.0,)), Cell((1000.0,)))
    assert verdict.effect is None and verdict.band is None and verdict.diff == 900.0


def _metrics(**values: float) -> RunMetrics:
    base = {f: None for f in RunMetrics.__dataclass_fields__}
    base.update(
        requests=10, completed=10, output_tokens=100, makespan_s=1.0, per_rank=(),
        steps=10, idle_steps=0, gathers_per_rank=(), starvation=Starvation(64),
        wall_send_late_s=0.0,
    )  # fmt: skip
    base.update(values)
    return RunMetrics(**base)  # type: ignore[arg-type]


def test_compare_reads_modes_and_marks_the_band():
    off, on = parse_modes("off,on")
    runs = {
        "off": [_metrics(frozen_share=0.0, tpot_p50_ms=50.0),
                _metrics(frozen_share=0.0, tpot_p50_ms=52.0)],
        "on": [_metrics(frozen_share=0.3, tpot_p50_ms=51.0),
               _metrics(frozen_share=0.32, tpot_p50_ms=50.5)],
    }  # fmt: skip
    result = compare([off, on], runs)
    assert result.banded
    assert result.verdicts["steps frozen"]["on"].effect is True
    assert result.verdicts["TPOT p50 (ms)"]["on"].effect is False
    single = compare([off, on], {k: v[:1] for k, v in runs.items()})
    assert not single.banded
    assert single.verdicts["steps frozen"]["on"].effect is None
