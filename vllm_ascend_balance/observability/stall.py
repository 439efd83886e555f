# SPDX-License-Identifier: Apache-2.0
"""The stall watchdog: report a balance gather that waits too long for its peers.

A DP rank that stops stepping without dying (a stopped process, a node
swapping, a peer stuck in another collective) holds every other rank inside
the balance gather: no rank steps, ``/health`` stays 200, nothing is
logged. The gather is the one place this package can see that.

The gather itself is not changed: no timeout (a rank that gave up on a
collective its peers later join would desynchronise the group). Instead the
engine's gather hook writes :attr:`StallWatchdog.started` before the gather
and clears it after (two attribute writes per gather), and a daemon thread
of the engine process samples it:

- while a gather has waited at least the threshold
  (``balance_stall_warning_s``), it logs a WARNING naming the DP rank and
  the wait so far, then again every threshold seconds while the wait lasts;
  when that gather returns, one INFO line says so;
- at every sample it writes the current wait (0 when no gather is in
  progress) to the gauge ``vllm:balance_gather_wait_seconds`` where the
  engine writes its balance series.

The main thread blocks in the collective with the GIL released (torch's
process-group calls release it), so the thread keeps running while the rank
waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.observability import exported_series, metrics, metrics_dirs

logger = init_logger(__name__)

#: Longest sleep between two samples, seconds (the gauge's refresh period).
MAX_POLL_S = 1.0
#: The setting that sets the threshold, named in the warning.
THRESHOLD_KEY = "balance_stall_warning_s"


class StallWatchdog:
    """Watch one engine's gathers.

    Args:
        dp_rank: the engine's DP rank (named in the warning).
        threshold_s: seconds a gather may wait before the first warning, and
            the interval between repeats; None = no thread, nothing reported.
        write_gauge: writer of ``vllm:balance_gather_wait_seconds`` (seconds),
            or None (metrics not served).

    Attributes:
        started: ``time.monotonic()`` at which the gather in progress began,
            or None; written by the gather hook only.
        warnings: warnings logged so far (tests, diagnostics).
    """

    def __init__(
        self,
        dp_rank: int,
        threshold_s: float | None,
        write_gauge: Callable[[float], None] | None = None,
    ) -> None:
        self.dp_rank = dp_rank
        self.threshold_s = threshold_s
        self.started: float | None = None
        self.warnings = 0
        self._write_gauge = write_gauge
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if threshold_s is not None:
            self._thread = threading.Thread(
                target=self._run,
                name=f"balance-stall-watchdog-dp{dp_rank}",
                daemon=True,
            )
            self._thread.start()

    @classmethod
    def for_engine(cls, engine: Any, threshold_s: float | None) -> StallWatchdog:
        """Build for a ``DPEngineCoreProc`` (tolerates a partly built one),
        with ``threshold_s`` (as in the constructor; the engine's setting),
        the gauge in the engine's metrics directory."""
        dp_rank, model_name = metrics.engine_labels(engine)
        directory = metrics_dirs.engine_metrics_dir()
        gauge = None
        if directory is not None and threshold_s is not None:
            gauge = metrics.open_gauge(
                directory,
                exported_series.WAIT_SERIES,
                [model_name, str(dp_rank)],
                "balancewait",
            )
        return cls(dp_rank, threshold_s, gauge)

    def stop(self) -> None:
        """End the thread (tests; an engine process simply exits)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        assert self.threshold_s is not None
        threshold = self.threshold_s
        # Sample several times per threshold, so a warning comes at most a
        # quarter threshold late, but never busier than 20 Hz.
        poll = min(max(threshold / 4, 0.05), MAX_POLL_S)
        watched: float | None = None  # start of the gather being timed
        next_warning = threshold
        warned_wait = 0.0
        written = 0.0
        while not self._stop.wait(poll):
            started = self.started
            now = time.monotonic()
            wait = 0.0 if started is None else max(now - started, 0.0)
            if self._write_gauge is not None and (wait or written):
                self._write_gauge(wait)
                written = wait
            if started != watched:
                if warned_wait:
                    logger.info(
                        "balance scheduling: DP rank %d: the stalled gather "
                        "completed (it waited more than %.1f s for its DP peers)",
                        self.dp_rank,
                        warned_wait,
                    )
                watched, next_warning, warned_wait = started, threshold, 0.0
            if started is None or wait < next_warning:
                continue
            self.warnings += 1
            warned_wait = wait
            next_warning += threshold
            logger.warning(
                "balance scheduling: DP rank %d has waited %.1f s in the balance "
                "gather for its DP peers (warning every %.1f s, %s): a peer rank "
                "is stalled or far slower (stopped process, swapping node, stuck "
                "collective); no rank steps until it arrives",
                self.dp_rank,
                wait,
                threshold,
                THRESHOLD_KEY,
            )
