# SPDX-License-Identifier: Apache-2.0
"""Balance metrics: engine cores write them, the front-end's ``/metrics`` serves them.

Engine cores are separate processes from the API server, and vLLM carries
engine-side numbers to the front-end only as ``SchedulerStats`` fields (a
fixed dataclass, decoded by type: an extra attribute is dropped on the way).
So each engine core writes its counters in ``prometheus_client``'s own
multi-process file format (the mmap files ``MultiProcessCollector`` reads),
one set of files per engine process:

- with one API server (``vllm serve`` default) the front-end serves
  ``prometheus_client.REGISTRY``;
  :func:`~vllm_ascend_balance.observability.metrics_dirs.serve_from_front_end`
  (called when a config activates balance, before engines start) creates a private
  directory, exports it to the engines as
  :data:`~vllm_ascend_balance.observability.metrics_dirs.METRICS_DIR_ENV` and
  registers a ``MultiProcessCollector`` for that directory only on
  ``REGISTRY``;
- with several API servers vLLM itself sets ``PROMETHEUS_MULTIPROC_DIR`` and
  serves a ``MultiProcessCollector`` of it; the engines write there and the
  series appear with no further step.

Writing costs a few ``struct.pack_into`` on an mmap per gather; reading
happens only on a scrape. The series
(:mod:`~vllm_ascend_balance.observability.exported_series`) use vLLM's
``vllm:`` prefix and its per-engine labels ``model_name`` and ``engine``
(the DP rank), so they sit next to vLLM's own per-engine series in
dashboards; the ``balance_`` sub-prefix keeps them apart from upstream names.

Where stats are on, the series travel in the engines' stats instead
(:mod:`~vllm_ascend_balance.observability.stats_carrier`, every node's engines); the
files then hold only the stall watchdog's wait gauge.

Two histograms per engine,
:data:`~vllm_ascend_balance.observability.exported_series.HISTOGRAMS`, tell
how long each request admitted to RUNNING waited while the gate held admission
(:mod:`~vllm_ascend_balance.observability.held_wait`); in the files they are written by
:class:`~vllm_ascend_balance.observability.histogram_file.HistogramFile`.

Each engine core also logs one INFO line per vLLM stats interval
(:mod:`~vllm_ascend_balance.observability.interval_summary`, only when
stats logging is on).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.observability.exported_series import (
    HISTOGRAMS,
    LABELS,
    SERIES,
    Series,
)
from vllm_ascend_balance.observability.held_wait import HeldWait
from vllm_ascend_balance.observability.histogram_file import HistogramFile
from vllm_ascend_balance.observability.interval_summary import IntervalSummary
from vllm_ascend_balance.observability.metrics_dirs import engine_metrics_dir

logger = init_logger(__name__)


def open_gauge(
    directory: str, series: Series, labelvalues: list[str], tag: str
) -> Callable[[float], None]:
    """A writer of one gauge in the multi-process file format, in a file of
    its own (``gauge_mostrecent_<tag>-<pid>.db``): a thread other than the
    engine's main thread writes it, and two writers on one mmap file could
    corrupt it. Returns ``write(value)``."""
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    path = os.path.join(directory, f"gauge_mostrecent_{tag}-{os.getpid()}.db")
    target = MmapedDict(path)
    key = mmap_key(series.name, series.name, list(LABELS), labelvalues, series.help)
    target.write_value(key, 0.0, time.time())

    def write(value: float) -> None:
        target.write_value(key, value, time.time())

    return write


def engine_labels(engine: Any) -> tuple[int, str]:
    """``(dp_rank, served model name)`` of a ``DPEngineCoreProc`` (tolerates
    a partly built one)."""
    config = getattr(engine, "vllm_config", None)
    model_config = getattr(config, "model_config", None)
    model_name = getattr(model_config, "served_model_name", None) or ""
    return int(getattr(engine, "dp_rank", 0)), str(model_name)


class EngineBalanceMetrics:
    """One engine core's balance series and interval summary.

    Args:
        dp_rank: the engine's DP rank (the ``engine`` label, as vLLM's).
        model_name: the served model name (the ``model_name`` label).
        directory: where to write the multi-process files, or None.
        log_interval_s: INFO summary interval in seconds, or None for no
            summary (stats logging off).

    Attributes:
        held_wait: the engine's held-wait tracker, advanced by the gather
            hook after each gather; :meth:`record` exports what it observed
            unless the stats carry it (:attr:`carried`).
    """

    def __init__(
        self,
        dp_rank: int,
        model_name: str,
        directory: str | None,
        log_interval_s: float | None,
    ) -> None:
        self.dp_rank = dp_rank
        self.log_interval_s = log_interval_s
        #: Whether the series travel in the engine's stats instead of files.
        self.carried = False
        self.summary = (
            None if log_interval_s is None else IntervalSummary(dp_rank, log_interval_s)
        )
        self._files: list[tuple[Any, str, str]] = []
        self._histograms: list[HistogramFile] = []
        self.held_wait = HeldWait()
        if directory is not None:
            self._open(directory, [model_name, str(dp_rank)])

    def _open(self, directory: str, labelvalues: list[str]) -> None:
        from prometheus_client.mmap_dict import MmapedDict, mmap_key

        pid = os.getpid()
        # "balance-" keeps the files apart from any prometheus_client metric
        # of this same process (two writers on one file would corrupt it).
        counters = MmapedDict(os.path.join(directory, f"counter_balance-{pid}.db"))
        gauges = MmapedDict(
            os.path.join(directory, f"gauge_mostrecent_balance-{pid}.db")
        )
        for series in SERIES:
            sample = series.name + ("_total" if series.kind == "counter" else "")
            key = mmap_key(series.name, sample, list(LABELS), labelvalues, series.help)
            target = counters if series.kind == "counter" else gauges
            target.write_value(key, 0.0, time.time())
            self._files.append((target, key, series.attr))
        histograms = MmapedDict(os.path.join(directory, f"histogram_balance-{pid}.db"))
        for series in HISTOGRAMS:
            self._histograms.append(
                HistogramFile(
                    histograms, series.name, series.help, series.buckets,
                    list(LABELS), labelvalues,
                )
            )  # fmt: skip

    @classmethod
    def for_engine(cls, engine: Any) -> EngineBalanceMetrics:
        """Build from a ``DPEngineCoreProc`` (tolerates a partly built one)."""
        dp_rank, model_name = engine_labels(engine)
        interval = None
        carried = bool(getattr(engine, "log_stats", False))
        if carried:
            import vllm.envs as envs

            interval = float(envs.VLLM_LOG_STATS_INTERVAL)
        # With stats on, the series travel in the engine's stats
        # (stats_carrier) and files would duplicate them on /metrics.
        directory = None if carried else engine_metrics_dir()
        built = cls(dp_rank, model_name, directory, interval)
        built.carried = carried
        return built

    def record(self, scheduler: Any, wave_end: bool = False) -> None:
        """After one gather (and :attr:`held_wait`'s update): update the
        files and the interval summary (``wave_end``: the engines go idle
        after this gather). Takes the held-wait observations unless the
        stats carry them (also without files, so they never pile up)."""
        if self._files:
            now = time.time()
            for target, key, attr in self._files:
                target.write_value(key, float(getattr(scheduler, attr)), now)
        if not self.carried:
            seconds, steps = self.held_wait.take()
            if seconds and self._histograms:
                taken: dict[str, list[float] | list[int]] = {
                    "seconds": seconds,
                    "steps": steps,
                }
                for histogram, series in zip(self._histograms, HISTOGRAMS, strict=True):
                    histogram.observe(taken[series.attr])
        if self.summary is not None:
            self.summary.record(scheduler, wave_end)
