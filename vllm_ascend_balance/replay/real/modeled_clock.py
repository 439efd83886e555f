# SPDX-License-Identifier: Apache-2.0
"""The real deployment's modeled clock, shared by the executors and the
replay front-end, so that arrivals are fed on modeled time, not wall time.

Why: the executors pace each step to ``step_ms * time_scale`` wall seconds,
but when the host is loaded the engine loop's own overhead (scheduling,
outputs, IPC) exceeds that budget and the steps overrun. Arrivals sent on
the wall clock then land on fewer steps than the schedule has (more
requests per step: a higher frozen share), by an amount that follows the
host's load. Sending each request when the *engines'* modeled clock reaches
its ``arrival_s`` keeps "which step first sees a request" to the schedule,
however long the steps took in wall time.

The board is a small file in the run directory, memory-mapped by both
sides: the front-end writes the workload's wall origin when it starts
sending; rank 0's executor (the ranks step in lock step, so one rank's
clock is every rank's) publishes, as each step starts, the modeled time at
which the step ends and the wall deadline its pacing sleeps to. A sequence
counter (odd while writing) keeps a reader from seeing half an update.

The executor's modeled clock (:class:`ClockKeeper`) advances by each step's
``step_ms``; across an idle gap (no request on the rank, see
:data:`~.lockstep.IDLE_GAP_S`) it follows wall time, as the front-end's
does while nothing is in flight (:func:`modeled_now`).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

#: seq (even: stable), origin wall s (0: not sending), modeled end s, wall deadline s
_LAYOUT = struct.Struct("<qddd")
CLOCK_FILE = "modeled_clock.bin"


def clock_path(run_dir: str | Path) -> Path:
    """The board's file in ``run_dir``."""
    return Path(run_dir) / CLOCK_FILE


@dataclass(frozen=True)
class Snapshot:
    """One consistent read of the board (wall times: ``time.monotonic``)."""

    origin: float  # wall time of modeled 0; 0.0 before sending starts
    modeled_end: float | None  # modeled s at which the last step ends
    deadline: float  # wall s the last step's pacing sleeps to


class ClockBoard:
    """The memory-mapped board (see the module docstring)."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        if create:
            path.write_bytes(_LAYOUT.pack(0, 0.0, float("nan"), 0.0))
        self._file = path.open("r+b")
        self._map = mmap.mmap(self._file.fileno(), _LAYOUT.size)

    def _read(self) -> tuple[int, float, float, float]:
        # Bounded: a writer killed mid-update must not hang its readers.
        for _ in range(10_000):
            seq, origin, end, deadline = _LAYOUT.unpack_from(self._map, 0)
            if seq % 2 == 0 and _LAYOUT.unpack_from(self._map, 0)[0] == seq:
                break
        return seq, origin, end, deadline

    def _write(self, origin: float, end: float, deadline: float) -> None:
        seq = _LAYOUT.unpack_from(self._map, 0)[0]
        struct.pack_into("<q", self._map, 0, seq + 1)
        _LAYOUT.pack_into(self._map, 0, seq + 1, origin, end, deadline)
        struct.pack_into("<q", self._map, 0, seq + 2)

    def start(self, origin: float) -> None:
        """Front-end: modeled 0 is wall ``origin``; no step published yet."""
        self._write(origin, float("nan"), 0.0)

    def publish(self, modeled_end: float, deadline: float) -> None:
        """Executor (rank 0): the starting step ends at ``modeled_end``."""
        _, origin, _, _ = self._read()
        self._write(origin, modeled_end, deadline)

    def snapshot(self) -> Snapshot:
        _, origin, end, deadline = self._read()
        return Snapshot(origin, None if end != end else end, deadline)  # nan: none

    def close(self) -> None:
        self._map.close()
        self._file.close()


class ClockKeeper:
    """Rank 0's modeled clock: one :meth:`step` per paced forward pass.

    Args:
        board: where to publish (None: keep time, publish nothing).
        time_scale: wall seconds per modeled second.
    """

    def __init__(self, board: ClockBoard | None, time_scale: float) -> None:
        self.board = board
        self.time_scale = time_scale
        self._origin = 0.0
        self._end: float | None = None  # modeled end of the previous step
        self._wall_end = 0.0

    def step(
        self, t0: float, step_ms: float, deadline: float, back_to_back: bool,
        idle_before: bool, origin: float,
    ) -> float | None:  # fmt: skip
        """The modeled end of the step entered at wall ``t0`` (pacing to
        ``deadline``; ``back_to_back``: paced from the previous step's end;
        ``idle_before``: the rank held no request after the previous step),
        or None before the front-end set the origin. Publishes it."""
        if origin <= 0.0:
            return None
        if origin != self._origin:  # a new run on the same engines
            self._origin, self._end = origin, None
        if self._end is None:
            start = (t0 - origin) / self.time_scale
        elif back_to_back or not idle_before:
            # Loop overhead past the budget is not modeled time: the step
            # starts where the previous one ended, however late in wall time.
            start = self._end
        else:  # the deployment idled: modeled time follows wall time
            start = self._end + max(0.0, t0 - self._wall_end) / self.time_scale
        self._end = start + step_ms / 1000.0
        self._wall_end = deadline
        if self.board is not None:
            self.board.publish(self._end, deadline)
        return self._end


def modeled_now(snap: Snapshot, now: float, busy: bool, time_scale: float) -> float:
    """The front-end's reading of the engines' modeled clock at wall ``now``.

    Within a step (before its pacing deadline) modeled time runs with wall
    time towards the step's end; past it, while a request is in flight
    (``busy``), the engines are in loop overhead and the clock waits for
    the next step; with nothing in flight the deployment is idle and
    modeled time follows wall time.
    """
    if snap.modeled_end is None:
        return (now - snap.origin) / time_scale
    if now <= snap.deadline:
        return snap.modeled_end - (snap.deadline - now) / time_scale
    if busy:
        return snap.modeled_end
    return snap.modeled_end + (now - snap.deadline) / time_scale
