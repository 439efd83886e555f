# SPDX-License-Identifier: Apache-2.0
"""The engine core's INFO summary line, one per vLLM stats interval.

``balance scheduling, DP rank R: N gathers, F% frozen, ...`` over the
interval (``VLLM_LOG_STATS_INTERVAL``, as vLLM's own ``LoggingStatLogger``;
only where stats logging is on): freeze share, fail-open steps, the
gather's p50/p99 and the decisions by reason (``balance_reasons``: the
policy's, or the gate's ``deadline`` and ``frozen_bound``).

The gathers drive it: the first gather past an interval's end writes that
interval's line. A gather runs only while engines are busy, so the last
interval of a wave of work would wait for the next request; at a wave's
end (upstream's ``_has_global_unfinished_reqs()`` answered False) a timer
writes it when its interval ends instead, unless a gather of the next wave
does first.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of a sorted, non-empty list."""
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[index]


class IntervalSummary:
    """One engine's summary line.

    Args:
        dp_rank: the engine's DP rank, named in the line.
        interval_s: seconds per line (> 0).
    """

    def __init__(self, dp_rank: int, interval_s: float) -> None:
        self.dp_rank = dp_rank
        self.interval_s = interval_s
        self._next_log = time.monotonic() + interval_s
        self._gather_s: list[float] = []
        self._start: tuple[int, int, int] = (0, 0, 0)
        self._reasons: dict[str, int] = {}
        # The wave-end timer's thread and the engine's both write the line;
        # a timer whose token was replaced (a gather came first) writes none.
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._token: object | None = None

    def record(self, scheduler: Any, wave_end: bool = False) -> None:
        """After one gather of ``scheduler`` (a balance scheduler): count it,
        and write the line where its interval ended; ``wave_end``: the
        engines go idle after this gather, so arm the timer."""
        with self._lock:
            self._cancel()
            self._gather_s.append(scheduler.balance_last_gather_s)
            if time.monotonic() >= self._next_log:
                self._log(scheduler)
            if wave_end and self._gather_s:
                delay = max(0.0, self._next_log - time.monotonic())
                self._token = token = object()
                self._timer = threading.Timer(delay, self._on_timer, (scheduler, token))
                self._timer.daemon = True
                self._timer.start()

    def _on_timer(self, scheduler: Any, token: object) -> None:
        with self._lock:
            if token is self._token and self._gather_s:
                self._timer = self._token = None
                self._log(scheduler)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._token = None

    def _log(self, scheduler: Any) -> None:
        gathers0, frozen0, fail0 = self._start
        gathers = scheduler.balance_gathers - gathers0
        frozen = scheduler.balance_frozen_gathers - frozen0
        fail_opens = scheduler.balance_fail_opens - fail0
        samples = sorted(self._gather_s)
        reasons = dict(getattr(scheduler, "balance_reasons", {}))
        counted = {
            reason: n - self._reasons.get(reason, 0)
            for reason, n in sorted(reasons.items())
        }
        logger.info(
            "balance scheduling, DP rank %d: %d gathers, %.1f%% frozen, "
            "%d fail-open steps, gather p50 %.3f ms, p99 %.3f ms, "
            "running spread %d, decisions %s",
            self.dp_rank,
            gathers,
            100.0 * frozen / gathers if gathers else 0.0,
            fail_opens,
            1e3 * _quantile(samples, 0.5),
            1e3 * _quantile(samples, 0.99),
            scheduler.balance_spread,
            " ".join(f"{r}={n}" for r, n in counted.items() if n) or "none",
        )
        self._reasons = reasons
        self._start = (
            scheduler.balance_gathers,
            scheduler.balance_frozen_gathers,
            scheduler.balance_fail_opens,
        )
        self._gather_s.clear()
        self._next_log = time.monotonic() + self.interval_s
