# SPDX-License-Identifier: Apache-2.0
"""Held wait (issue 30): how long each request admitted from WAITING waited
while the balance gate held admission frozen, on real vLLM schedulers.

The schedulers are real ``Scheduler``/``AsyncScheduler`` objects with the
package's mixin, driven through generated traces as in
``tests/test_gate_properties.py`` (its rig and scripted gather are reused),
on a modeled clock: each step draws how long after the previous gather the
step's requests arrive, when ``schedule()`` runs and when the gather runs,
in integer ticks (exact sums), and whether another rank is at the cap.

Property, against an oracle written from the trace alone: for every request
admitted from WAITING, observed exactly once at its first admission,

- held seconds == the overlap of ``[arrival, admission]`` with the frozen
  intervals (a frozen decision holds from its gather to the next gather);
- held steps == the ``schedule()`` calls made under a frozen decision
  between its arrival and its admission;
- held seconds <= its total wait (the part never exceeds the whole).

Negative controls, which must fail the property: a tracker that measures
the total wait (vLLM's queue time) instead of the held part; one that
ignores the frozen decision in progress when a request arrives or is
admitted; one that counts frozen *gathers* rather than held ``schedule()``
calls (off by one for a request arriving under a frozen decision).

Transport: the observations reach Prometheus histograms both ways the
package exports them (engine files read by ``MultiProcessCollector``, and
the stats carrier into the front-end's stat logger), bucketed as defined
in ``metrics.HISTOGRAMS``. The real ``vllm serve``: tests/test_serve_metrics.py.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from tests.support.vllm_objects import make_scheduler, make_vllm_config
from tests.test_gate_properties import (
    Rig,
    Scenario,
    counts_near,
    gather,
    hypothesis_settings,
    scenarios,
)
from vllm_ascend_balance import activation, metrics, stats_carrier
from vllm_ascend_balance.held_wait import HeldWait

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


class Clock:
    """The modeled monotonic clock (integer ticks, as floats)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------
# Wrong trackers (negative controls)


class TotalWait(HeldWait):
    """Measures the whole wait (what vLLM's queue time already shows)."""

    def frozen_clock(self) -> float:
        return self.clock()


class IgnoresDecisionInProgress(HeldWait):
    """Reads the frozen total only as of the last gather."""

    def frozen_clock(self) -> float:
        return self.frozen_s


class CountsFrozenGathers(HeldWait):
    """Counts frozen gathers instead of held ``schedule()`` calls."""

    def decided(self, frozen: bool) -> None:
        super().decided(frozen)
        self.held_steps += frozen

    def scheduled(self, requests: Any, scheduler_output: Any, frozen: bool) -> None:
        super().scheduled(requests, scheduler_output, False)


Tracker = Callable[[Clock], HeldWait]


# --------------------------------------------------------------------------
# The trace and its oracle


@dataclass
class Trace:
    """Events in order: ``arrivals[req] = (time, seq)``; ``schedules`` are
    ``(seq, frozen)``; ``gathers`` are ``(time, frozen)``."""

    seq: int = 0
    arrivals: dict[str, tuple[float, int]] = field(default_factory=dict)
    admissions: dict[str, tuple[float, int]] = field(default_factory=dict)
    schedules: list[tuple[int, bool]] = field(default_factory=list)
    gathers: list[tuple[float, bool]] = field(default_factory=list)
    observed: dict[str, tuple[float, int]] = field(default_factory=dict)

    def next(self) -> int:
        self.seq += 1
        return self.seq

    def frozen_intervals(self, end: float) -> list[tuple[float, float]]:
        bounds = [t for t, _ in self.gathers[1:]] + [end]
        return [
            (start, stop)
            for (start, frozen), stop in zip(self.gathers, bounds, strict=True)
            if frozen
        ]

    def expected(self, req_id: str, end: float) -> tuple[float, int]:
        (t0, s0), (t1, s1) = self.arrivals[req_id], self.admissions[req_id]
        seconds = sum(
            max(0.0, min(stop, t1) - max(start, t0))
            for start, stop in self.frozen_intervals(end)
        )
        steps = sum(1 for seq, frozen in self.schedules if s0 < seq < s1 and frozen)
        return seconds, steps


def run_trace(
    data: st.DataObject, scenario: Scenario, tracker: Tracker
) -> tuple[Trace, float]:
    """Step a gated real scheduler through ``scenario`` on a modeled clock;
    returns the trace (observations included) and the end time."""
    clock = Clock()
    rig = Rig(activation.compose_scheduler(scenario.base), scenario)
    scheduler = rig.scheduler
    scheduler.__dict__["balance_held_wait"] = tracker(clock)  # the cached property
    cap = scenario.cap
    dp_size = data.draw(st.integers(2, 4), "dp_size")
    rank = data.draw(st.integers(0, dp_size - 1), "rank")
    ticks = st.integers(0, 5)
    trace = Trace()
    for step in range(scenario.horizon + 8):  # a few more steps to drain
        clock.now += data.draw(ticks, "until arrivals")
        for i, (arrival, prompt_len, max_tokens) in enumerate(scenario.requests):
            if arrival == step:
                rig.add(f"req-{i}", prompt_len, max_tokens)
                trace.arrivals[f"req-{i}"] = (clock.now, trace.next())
        clock.now += data.draw(ticks, "until schedule")
        frozen = bool(scheduler.balance_frozen)
        seq = trace.next()
        out = rig.schedule(step)
        trace.schedules.append((seq, frozen))
        seconds, steps = scheduler.balance_held_wait.take()
        admitted = [req_id for req_id, _, _ in out["new"]]
        assert len(seconds) == len(steps) == len(admitted), "one value per admission"
        for req_id, held_s, held_steps in zip(admitted, seconds, steps, strict=True):
            assert req_id not in trace.observed, f"{req_id} observed twice"
            trace.admissions[req_id] = (clock.now, seq)
            trace.observed[req_id] = (held_s, held_steps)
        clock.now += data.draw(ticks, "until gather")
        others = data.draw(counts_near(cap, dp_size, cap), "counts")
        gather(scheduler, rank, others)
        trace.gathers.append((clock.now, bool(scheduler.balance_frozen)))
    return trace, clock.now


def check_held_wait(tracker: Tracker, negative: bool = False) -> None:
    @hypothesis_settings(120, negative)
    @given(data=st.data(), scenario=scenarios(min_horizon=2))
    def run(data: st.DataObject, scenario: Scenario) -> None:
        trace, end = run_trace(data, scenario, tracker)
        for req_id, (held_s, held_steps) in trace.observed.items():
            want_s, want_steps = trace.expected(req_id, end)
            total = trace.admissions[req_id][0] - trace.arrivals[req_id][0]
            assert held_s <= total, f"{req_id}: held {held_s} > its wait {total}"
            assert held_s == want_s, f"{req_id}: held seconds {held_s}, want {want_s}"
            assert held_steps == want_steps, (
                f"{req_id}: held steps {held_steps}, want {want_steps}"
            )
            if want_steps and want_s < total:
                event("held part of a longer wait")
            elif want_steps:
                event("held its whole wait")

    run()


def test_held_wait_matches_the_frozen_part_of_each_wait() -> None:
    check_held_wait(HeldWait)


@pytest.mark.parametrize(
    ("tracker", "reason"),
    [
        pytest.param(TotalWait, "held .* > its wait|held seconds", id="total-wait"),
        pytest.param(
            IgnoresDecisionInProgress, "> its wait|held seconds", id="in-progress"
        ),
        pytest.param(CountsFrozenGathers, "held steps", id="frozen-gathers"),
    ],
)
def test_negative_control_fails(tracker: Tracker, reason: str) -> None:
    with pytest.raises(AssertionError, match=reason):
        check_held_wait(tracker, negative=True)


# --------------------------------------------------------------------------
# Transport: engine files and the stats carrier


def _gated() -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler

    return make_scheduler(activation.compose_scheduler(Scheduler))


SECONDS = [0.0, 0.0, 0.004, 0.3, 2.0, 700.0]
STEPS = [0, 1, 2, 63, 64, 5000]


def _expected_buckets(series: metrics.Series, values: list[float]) -> list[float]:
    """Cumulative counts per bound (``+Inf`` last), from the definition."""
    bounds = sorted(series.buckets)
    return [float(sum(1 for v in values if v <= b)) for b in bounds] + [
        float(len(values))
    ]


def _histograms(families: Any, engine: str) -> dict[str, tuple[list[float], float]]:
    """``{name: (cumulative buckets in le order, sum)}`` for ``engine``."""
    found: dict[str, tuple[list[float], float]] = {}
    for family in families:
        if family.name not in {s.name for s in metrics.HISTOGRAMS}:
            continue
        assert family.type == "histogram" and family.documentation
        samples = [s for s in family.samples if s.labels.get("engine") == engine]
        buckets = sorted(
            (float(s.labels["le"]), s.value)
            for s in samples
            if s.name.endswith("_bucket")
        )
        (total,) = [s.value for s in samples if s.name.endswith("_sum")]
        (count,) = [s.value for s in samples if s.name.endswith("_count")]
        assert count == buckets[-1][1], "_count is the +Inf bucket"
        found[family.name] = ([v for _, v in buckets], total)
    return found


def _check(found: dict[str, tuple[list[float], float]]) -> None:
    observed = {"seconds": SECONDS, "steps": STEPS}
    assert set(found) == {s.name for s in metrics.HISTOGRAMS}
    for series in metrics.HISTOGRAMS:
        values = observed[series.attr]
        buckets, total = found[series.name]
        assert buckets == _expected_buckets(series, values), series.name
        assert total == pytest.approx(sum(values))


def test_engine_files_serve_the_histograms(tmp_path: Path) -> None:
    scheduler = _gated()
    engine_metrics = metrics.EngineBalanceMetrics(1, "m", str(tmp_path), None)
    # Two gathers' worth of observations: counts accumulate in the file.
    for half in (slice(0, 3), slice(3, None)):
        scheduler.balance_held_wait.seconds.extend(SECONDS[half])
        scheduler.balance_held_wait.steps.extend(STEPS[half])
        engine_metrics.record(scheduler)
        assert scheduler.balance_held_wait.take() == ([], []), "not taken"
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    _check(_histograms(registry.collect(), "1"))


def test_without_files_the_observations_are_still_taken() -> None:
    scheduler = _gated()
    engine_metrics = metrics.EngineBalanceMetrics(0, "m", None, None)
    scheduler.balance_held_wait.seconds.append(1.0)
    scheduler.balance_held_wait.steps.append(3)
    engine_metrics.record(scheduler)
    assert scheduler.balance_held_wait.take() == ([], [])


def test_stats_carrier_serves_the_histograms() -> None:
    from vllm.v1.metrics.loggers import StatLoggerManager
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    manager = StatLoggerManager(
        make_vllm_config(data_parallel_size=2),
        engine_idxs=[0, 1],
        custom_stat_loggers=[stats_carrier.stat_logger_class()],
    )
    try:
        scheduler = _gated()
        stats_carrier.attach(scheduler)
        for half in (slice(0, 3), slice(3, None)):
            scheduler.balance_held_wait.seconds.extend(SECONDS[half])
            scheduler.balance_held_wait.steps.extend(STEPS[half])
            manager.record(scheduler.make_stats(), None, engine_idx=1)
        assert scheduler.balance_held_wait.take() == ([], []), "not carried"
        _check(_histograms(REGISTRY.collect(), "1"))
    finally:
        unregister_vllm_metrics()


def test_buckets_make_held_through_n_steps_a_subtraction() -> None:
    """``_count - bucket{le=N-1}`` counts requests held through >= N frozen
    steps, for N a power of two (the replay's default threshold 64 too)."""
    (steps,) = [s for s in metrics.HISTOGRAMS if s.attr == "steps"]
    for k in range(1, len(steps.buckets)):
        n = 2**k
        assert float(n - 1) in steps.buckets
        index = bisect.bisect_left(steps.buckets, n - 1)
        assert (
            sum(1 for v in STEPS if v >= n)
            == len(STEPS) - (_expected_buckets(steps, [float(v) for v in STEPS])[index])
        )
