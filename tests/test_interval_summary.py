# SPDX-License-Identifier: Apache-2.0
"""The engine's INFO summary line (``observability/interval_summary.py``):
docs/operating.md promises one line per stats interval. An operator's trial
saw a burst's line only when the next request came, about 45 s later: the
gathers wrote it, and an idle engine gathers nothing. The last interval of a
wave is now written when it ends. The scheduler here is a plain namespace
with the gate's counters (the summary reads nothing else of it)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from vllm_ascend_balance.observability import interval_summary
from vllm_ascend_balance.observability.interval_summary import IntervalSummary

pytestmark = pytest.mark.lane_scope("release")  # no vLLM code involved

HANG_GUARD_S = 60.0


def _scheduler(gathers: int, frozen: int) -> SimpleNamespace:
    return SimpleNamespace(
        balance_gathers=gathers,
        balance_frozen_gathers=frozen,
        balance_fail_opens=0,
        balance_last_gather_s=0.001,
        balance_spread=0,
        balance_reasons={"leader_at_cap": frozen, "open": gathers - frozen},
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The summary's clock, set by the test: which gather ends an interval
    does not depend on the machine's speed (the timers run in real time)."""
    now = [0.0]
    monkeypatch.setattr(
        interval_summary, "time", SimpleNamespace(monotonic=lambda: now[0])
    )
    return now


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(
        interval_summary.logger,
        "info",
        lambda msg, *args: seen.append(msg % args),
    )
    return seen


def _wait_for(lines: list[str], count: int) -> None:
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard, not a speed check
    while len(lines) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_waves_last_interval_is_written_without_another_gather(
    lines: list[str], clock: list[float]
) -> None:
    """Negative control (by hand): ``record`` without the wave-end timer
    (the code before) writes no line here."""
    summary = IntervalSummary(dp_rank=3, interval_s=0.05)
    for n in range(1, 5):
        summary.record(_scheduler(n, n // 2), wave_end=n == 4)
    _wait_for(lines, 1)
    assert len(lines) == 1, lines
    assert lines[0].startswith("balance scheduling, DP rank 3: 4 gathers, 50.0% frozen")
    assert lines[0].endswith("decisions leader_at_cap=2 open=2")


def test_a_gather_before_the_timer_writes_no_second_line(
    lines: list[str], clock: list[float]
) -> None:
    """The next wave's first gather takes over the interval: the timer of
    the wave before writes nothing, and the interval's one line comes from
    the gathers."""
    summary = IntervalSummary(dp_rank=0, interval_s=1000.0)
    summary.record(_scheduler(1, 0), wave_end=True)  # a timer for 1000 s
    summary.record(_scheduler(2, 0))  # the next wave, same interval
    clock[0] = 1000.0
    summary.record(_scheduler(3, 1), wave_end=True)  # the interval's end
    assert len(lines) == 1 and "3 gathers" in lines[0], lines
    time.sleep(0.2)
    assert len(lines) == 1, lines


def test_no_line_for_an_interval_without_gathers(
    lines: list[str], clock: list[float]
) -> None:
    summary = IntervalSummary(dp_rank=0, interval_s=0.05)
    summary.record(_scheduler(1, 0), wave_end=True)
    _wait_for(lines, 1)
    time.sleep(0.2)
    assert len(lines) == 1, lines
