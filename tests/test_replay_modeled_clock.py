# SPDX-License-Identifier: Apache-2.0
"""The real deployment's arrivals are fed on the engines' modeled clock
(``vllm_ascend_balance/replay/real/modeled_clock.py``), so which step first sees
a request does not depend on how fast the host ran the steps.

The engine loop is modeled here in wall time (no processes): each step
enters ``overhead`` wall seconds after the previous one ended (the engine
loop's own work, which grows with the host's load), is paced by the
executors' real ``LockStep.pace`` rule and published by the real
``ClockKeeper``; the sender polls the real ``modeled_now`` and sends each
request once it reaches its arrival. A request sent before a step enters
is seen by that step.

- Property: for any overheads (from none to three times the step's budget,
  i.e. a host far too slow for the pacing), every request is first seen by
  the first step that starts, in modeled time, at or after its arrival:
  the simulated engine's rule (``replay/sim/fleet.py``), whatever the load.
- Negative control: sending on the wall clock (``arrival_s * time_scale``
  after the start, what the replay did before) gives a different mapping
  once the steps overrun.
- The board itself across processes' view: a consistent snapshot, and the
  idle and in-flight readings of ``modeled_now``.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vllm_ascend_balance.replay.real.lockstep import IDLE_GAP_S
from vllm_ascend_balance.replay.real.modeled_clock import (
    ClockBoard,
    ClockKeeper,
    Snapshot,
    clock_path,
    modeled_now,
)

pytestmark = pytest.mark.lane_scope("release")

SCALE = 0.5
ORIGIN = 10.0
#: Wall time a step takes past its entry at least (its collective, records).
MIN_STEP_S = 1e-4


class MemoryBoard:
    """The board's two operations, in memory."""

    def __init__(self) -> None:
        self.snap = Snapshot(ORIGIN, None, 0.0)

    def publish(self, modeled_end: float, deadline: float) -> None:
        self.snap = Snapshot(ORIGIN, modeled_end, deadline)

    def snapshot(self) -> Snapshot:
        return self.snap


def _engine(step_ms: list[float], overheads: list[float]) -> list[tuple]:
    """(wall enter, deadline, board snapshot after publishing, modeled
    start) of each step, the first entering at ``ORIGIN`` + overheads[0]."""
    board = MemoryBoard()
    keeper = ClockKeeper(board, SCALE)  # type: ignore[arg-type]
    prev_end: float | None = None
    out = []
    for k, (ms, over) in enumerate(zip(step_ms, overheads, strict=True)):
        t0 = (ORIGIN if prev_end is None else prev_end) + over
        budget = ms / 1000.0 * SCALE
        # LockStep.pace's rule (vllm_ascend_balance/replay/real/lockstep.py)
        back_to_back = prev_end is not None and t0 - prev_end <= budget + IDLE_GAP_S
        deadline = prev_end + budget if back_to_back else t0 + budget
        end = keeper.step(t0, ms, deadline, back_to_back, k == 0, ORIGIN)
        assert end is not None
        out.append((t0, deadline, board.snapshot(), end - ms / 1000.0))
        prev_end = max(deadline, t0 + MIN_STEP_S)
    return out


def _seen_by(steps: list[tuple], send_at: list[float]) -> list[int]:
    enters = [s[0] for s in steps]
    return [bisect.bisect_right(enters, t) for t in send_at]


def _modeled_sends(steps: list[tuple], arrivals: list[float]) -> list[float]:
    """Wall send time of each arrival: the earliest wall time at which the
    real ``modeled_now`` (requests in flight) reaches it, step by step."""
    sends = []
    for due in sorted(arrivals):
        send = ORIGIN + due * SCALE  # before the first step: wall extrapolation
        if send >= steps[0][0]:
            for k, (t0, deadline, snap, _) in enumerate(steps):
                if modeled_now(snap, t0, True, SCALE) >= due:
                    send = t0
                    break
                assert snap.modeled_end is not None
                if due <= snap.modeled_end:  # reached while the step runs
                    send = deadline - (snap.modeled_end - due) * SCALE
                    assert modeled_now(snap, send, True, SCALE) >= due - 1e-9
                    assert k + 1 == len(steps) or send <= steps[k + 1][0]
                    break
            else:
                raise AssertionError(f"arrival {due} past the last step")
        sends.append(send)
    return sends


def _expected(steps: list[tuple], arrivals: list[float]) -> list[int]:
    """The simulated engine's rule: the first step starting (modeled) at or
    after the arrival."""
    starts = [s[3] for s in steps]
    return [bisect.bisect_left(starts, a) for a in sorted(arrivals)]


STEP_MS = st.lists(st.floats(10.0, 60.0), min_size=8, max_size=25)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), step_ms=STEP_MS)
def test_arrivals_meet_the_same_steps_whatever_the_load(
    data: st.DataObject, step_ms: list[float]
) -> None:
    n = len(step_ms)
    quiet = [0.0] * n
    loaded = data.draw(
        st.lists(
            st.floats(0.0, 3 * 60.0 / 1000 * SCALE), min_size=n - 1, max_size=n - 1
        )
    )
    loaded = [0.0, *loaded]
    steps_quiet, steps_loaded = _engine(step_ms, quiet), _engine(step_ms, loaded)
    # Modeled starts are the schedule's alone (no idle gap here).
    assert [s[3] for s in steps_quiet] == pytest.approx([s[3] for s in steps_loaded])
    starts = [s[3] for s in steps_quiet]
    arrivals = data.draw(
        st.lists(
            st.floats(0.001, starts[-2], exclude_max=True),
            min_size=1,
            max_size=30,
            unique=True,
        )
    )
    # An arrival exactly at a step's start is a tie of measure zero.
    assume(all(min(abs(a - x) for x in starts) > 1e-9 for a in arrivals))
    expected = _expected(steps_quiet, arrivals)
    for steps in (steps_quiet, steps_loaded):
        assert _seen_by(steps, _modeled_sends(steps, arrivals)) == expected


def test_negative_control_wall_clock_sends_follow_the_load() -> None:
    step_ms = [40.0] * 20
    budget = 40.0 / 1000 * SCALE
    steps = _engine(step_ms, [0.0] + [2 * budget] * 19)  # every step overruns
    arrivals = [0.1 + 0.04 * i for i in range(15)]
    wall = [ORIGIN + a * SCALE for a in arrivals]
    assert _seen_by(steps, wall) != _expected(steps, arrivals)
    assert _seen_by(steps, _modeled_sends(steps, arrivals)) == _expected(
        steps, arrivals
    )


def test_idle_gap_follows_wall_time_and_overhead_does_not() -> None:
    keeper = ClockKeeper(None, SCALE)
    end = keeper.step(ORIGIN + 1.0, 20.0, ORIGIN + 1.01, False, True, ORIGIN)
    assert end == pytest.approx(2.0 + 0.02)
    # A long gap with requests carried over is loop overhead: no modeled time.
    end2 = keeper.step(ORIGIN + 2.0, 20.0, ORIGIN + 2.01, False, False, ORIGIN)
    assert end2 == pytest.approx(end + 0.02)
    # A gap after which nothing was carried over: the deployment idled.
    end3 = keeper.step(ORIGIN + 3.01, 20.0, ORIGIN + 3.02, False, True, ORIGIN)
    assert end3 == pytest.approx(end2 + 1.0 / SCALE + 0.02)
    # Before the front-end sets the origin (warm-up), no clock.
    assert ClockKeeper(None, SCALE).step(1.0, 20.0, 1.01, False, True, 0.0) is None


def test_modeled_now_readings() -> None:
    snap = Snapshot(ORIGIN, 5.0, ORIGIN + 2.5)
    assert modeled_now(Snapshot(ORIGIN, None, 0.0), ORIGIN + 1.0, True, SCALE) == 2.0
    assert modeled_now(snap, ORIGIN + 2.45, True, SCALE) == pytest.approx(4.9)
    assert modeled_now(snap, ORIGIN + 3.0, True, SCALE) == 5.0  # overhead: waits
    assert modeled_now(snap, ORIGIN + 3.0, False, SCALE) == pytest.approx(6.0)


def test_board_round_trip(tmp_path: Path) -> None:
    writer = ClockBoard(clock_path(tmp_path), create=True)
    reader = ClockBoard(clock_path(tmp_path))
    assert reader.snapshot() == Snapshot(0.0, None, 0.0)
    writer.start(123.0)
    assert reader.snapshot() == Snapshot(123.0, None, 0.0)
    reader.publish(4.5, 125.0)  # the executor's side keeps the origin
    assert writer.snapshot() == Snapshot(123.0, 4.5, 125.0)
    writer.close()
    reader.close()
