# SPDX-License-Identifier: Apache-2.0
"""Balance metrics: engine cores write them, the front-end's ``/metrics`` serves them.

Engine cores are separate processes from the API server, and vLLM carries
engine-side numbers to the front-end only as ``SchedulerStats`` fields (a
fixed dataclass, decoded by type: an extra attribute is dropped on the way).
So each engine core writes its counters in ``prometheus_client``'s own
multi-process file format (the mmap files ``MultiProcessCollector`` reads),
one set of files per engine process:

- with one API server (``vllm serve`` default) the front-end serves
  ``prometheus_client.REGISTRY``; :func:`serve_from_front_end` (called when a
  config activates balance, before engines start) creates a private
  directory, exports it to the engines as :data:`METRICS_DIR_ENV` and
  registers a ``MultiProcessCollector`` for that directory only on
  ``REGISTRY``;
- with several API servers vLLM itself sets ``PROMETHEUS_MULTIPROC_DIR`` and
  serves a ``MultiProcessCollector`` of it; the engines write there and the
  series appear with no further step.

Writing costs a few ``struct.pack_into`` on an mmap per gather; reading
happens only on a scrape. The series (see :data:`SERIES`) use vLLM's
``vllm:`` prefix and its per-engine labels ``model_name`` and ``engine``
(the DP rank), so they sit next to vLLM's own per-engine series in
dashboards; the ``balance_`` sub-prefix keeps them apart from upstream names.

Where stats are on, the series travel in the engines' stats instead
(:mod:`~vllm_ascend_balance.observability.stats_carrier`, every node's engines); the
files then hold only the stall watchdog's wait gauge.

Two histograms per engine, :data:`HISTOGRAMS`, tell how long each request
admitted to RUNNING waited while the gate held admission
(:mod:`~vllm_ascend_balance.observability.held_wait`); in the files they are written by
:class:`~vllm_ascend_balance.observability.histogram_file.HistogramFile`.

Each engine core also logs one INFO line per vLLM stats interval
(``VLLM_LOG_STATS_INTERVAL``, only when stats logging is on): freeze share,
fail-open steps and the gather's p50/p99 over the interval.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.observability.held_wait import HeldWait
from vllm_ascend_balance.observability.histogram_file import HistogramFile

logger = init_logger(__name__)

METRICS_DIR_ENV = "VAB_METRICS_DIR"
#: Front-end metrics directories: ``<temp dir>/vllm-ascend-balance-<pid>-*``.
DIR_PREFIX = "vllm-ascend-balance-"
PROMETHEUS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
LABELS = ("model_name", "engine")


@dataclass(frozen=True)
class Series:
    """One exported series: ``name`` without the ``_total`` suffix of a
    counter (or the ``_bucket``/``_sum``/``_count`` of a histogram);
    ``attr`` is the scheduler attribute it reads (a histogram's: the
    :class:`~vllm_ascend_balance.observability.held_wait.HeldWait` list it takes);
    ``buckets``: a histogram's upper bounds, ``+Inf`` implied."""

    name: str
    kind: str
    attr: str
    help: str
    buckets: tuple[float, ...] = ()


SERIES = (
    Series(
        "vllm:balance_gathers",
        "counter",
        "balance_gathers",
        "Balance scheduling gathers of len(running) across DP ranks "
        "(one per active engine step).",
    ),
    Series(
        "vllm:balance_frozen_gathers",
        "counter",
        "balance_frozen_gathers",
        "Gathers that froze admission from WAITING on every DP rank "
        "(largest running count equal to the admission cap).",
    ),
    Series(
        "vllm:balance_fail_open_steps",
        "counter",
        "balance_fail_opens",
        "Gathers that found the leader at the cap but opened the gate because "
        "balance_max_frozen_steps consecutive gathers had frozen.",
    ),
    Series(
        "vllm:balance_gather_seconds",
        "counter",
        "balance_gather_seconds",
        "Wall time spent in the balance gather collective, in seconds.",
    ),
    Series(
        "vllm:balance_running_spread",
        "gauge",
        "balance_spread",
        "Largest minus smallest len(running) across DP ranks at the last gather.",
    ),
)

#: Written by the stall watchdog (:mod:`~vllm_ascend_balance.observability.stall`), from
#: its own thread, into its own file (:func:`open_gauge`).
WAIT_SERIES = Series(
    "vllm:balance_gather_wait_seconds",
    "gauge",
    "",
    "Seconds the balance gather in progress has waited for its DP peers "
    "(0 when none is waiting); sampled by the stall watchdog.",
)

#: Held seconds: 0 (never held: ``le="0.0"`` over ``_count`` is the share
#: of admissions the gate never held), then 50 ms (a few steps) to 2 min
#: (a long starvation; ``balance_max_frozen_steps`` bounds it when set).
HELD_SECONDS_BUCKETS = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        10.0, 20.0, 30.0, 60.0, 120.0)  # fmt: skip
#: Held steps: 0 (never held), then powers of two up to 256 frozen gathers.
HELD_STEPS_BUCKETS = (0.0, *(float(2**k) for k in range(9)))

#: Observed once per admission to RUNNING (0 when the gate never held the
#: request), per engine: ``_count`` is the admissions.
HISTOGRAMS = (
    Series(
        "vllm:balance_held_wait_seconds",
        "histogram",
        "seconds",
        "Seconds a request admitted to RUNNING spent in WAITING while the "
        "balance gate held admission frozen (0 when never held).",
        HELD_SECONDS_BUCKETS,
    ),
    Series(
        "vllm:balance_held_wait_steps",
        "histogram",
        "steps",
        "Frozen balance gathers a request admitted to RUNNING waited through "
        "in WAITING (0 when never held).",
        HELD_STEPS_BUCKETS,
    ),
)

#: The sample-name suffixes each kind puts on ``/metrics``.
SUFFIXES = {"counter": ("_total",), "gauge": ("",),
            "histogram": ("_bucket", "_sum", "_count")}  # fmt: skip


def exported_names() -> frozenset[str]:
    """Every sample name this package can put on ``/metrics`` (e.g.
    ``vllm:balance_gathers_total``, ``vllm:balance_held_wait_seconds_bucket``),
    from :data:`SERIES`, :data:`WAIT_SERIES` and :data:`HISTOGRAMS`."""
    return frozenset(
        series.name + suffix
        for series in (*SERIES, WAIT_SERIES, *HISTOGRAMS)
        for suffix in SUFFIXES[series.kind]
    )


_front_end_dir: tempfile.TemporaryDirectory[str] | None = None


def serve_from_front_end() -> None:
    """Make the engines' balance series reach this process's ``/metrics``
    (idempotent; front-end process, before engines start). First removes
    the directories of killed runs (:func:`remove_stale_dirs`).

    Does nothing when ``PROMETHEUS_MULTIPROC_DIR`` is set (vLLM's own
    multi-process collector serves the engines' files then)."""
    global _front_end_dir
    if os.environ.get(PROMETHEUS_DIR_ENV) or _front_end_dir is not None:
        return
    from prometheus_client import REGISTRY
    from prometheus_client.multiprocess import MultiProcessCollector

    remove_stale_dirs()
    # The owner's pid in the name lets the next start tell a killed run's
    # directory (its owner gone) from a live server's.
    _front_end_dir = tempfile.TemporaryDirectory(prefix=f"{DIR_PREFIX}{os.getpid()}-")
    os.environ[METRICS_DIR_ENV] = _front_end_dir.name
    # Registered on the default registry, which vLLM's /metrics serves with
    # one API server; it has no ``_name``, so vLLM's unregister_vllm_metrics()
    # (which drops collectors named "vllm:*") leaves it in place.
    MultiProcessCollector(REGISTRY, path=_front_end_dir.name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def remove_stale_dirs(parent: str | None = None) -> list[str]:
    """Remove the metrics directories of front-ends that are gone (a run
    killed with SIGKILL never cleans up its ``TemporaryDirectory``).

    Looks in ``parent`` (default: the temp dir) for
    ``vllm-ascend-balance-<pid>-*`` directories and removes those whose
    ``<pid>`` is not a running process; a live owner's directory, and one
    whose name carries no pid, are left alone. Errors (a directory removed
    concurrently, no permission) are ignored. Returns the removed paths.
    """
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(DIR_PREFIX):
            continue
        owner = name[len(DIR_PREFIX) :].split("-", 1)[0]
        path = os.path.join(parent, name)
        if not owner.isdigit() or _pid_alive(int(owner)) or not os.path.isdir(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    if removed:
        logger.info(
            "balance scheduling: removed %d metrics directories of runs that "
            "are gone: %s",
            len(removed),
            ", ".join(removed),
        )
    return removed


def engine_metrics_dir() -> str | None:
    """Where this engine process writes its series, or None (not served)."""
    path = os.environ.get(PROMETHEUS_DIR_ENV) or os.environ.get(METRICS_DIR_ENV)
    return path if path and os.path.isdir(path) else None


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


def _quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of a sorted, non-empty list."""
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[index]


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
        self._next_log = time.monotonic() + (log_interval_s or 0.0)
        self._interval_gather_s: list[float] = []
        self._interval_start: tuple[int, int, int] = (0, 0, 0)
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

    def record(self, scheduler: Any) -> None:
        """After one gather (and :attr:`held_wait`'s update): update the
        files and, once per interval, log. Takes the held-wait observations
        unless the stats carry them (also without files, so they never pile
        up)."""
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
        if self.log_interval_s is None:
            return
        self._interval_gather_s.append(scheduler.balance_last_gather_s)
        if time.monotonic() >= self._next_log:
            self._log(scheduler)

    def _log(self, scheduler: Any) -> None:
        gathers0, frozen0, fail0 = self._interval_start
        gathers = scheduler.balance_gathers - gathers0
        frozen = scheduler.balance_frozen_gathers - frozen0
        fail_opens = scheduler.balance_fail_opens - fail0
        samples = sorted(self._interval_gather_s)
        logger.info(
            "balance scheduling, DP rank %d: %d gathers, %.1f%% frozen, "
            "%d fail-open steps, gather p50 %.3f ms, p99 %.3f ms, "
            "running spread %d",
            self.dp_rank,
            gathers,
            100.0 * frozen / gathers if gathers else 0.0,
            fail_opens,
            1e3 * _quantile(samples, 0.5),
            1e3 * _quantile(samples, 0.99),
            scheduler.balance_spread,
        )
        self._interval_start = (
            scheduler.balance_gathers,
            scheduler.balance_frozen_gathers,
            scheduler.balance_fail_opens,
        )
        self._interval_gather_s.clear()
        assert self.log_interval_s is not None
        self._next_log = time.monotonic() + self.log_interval_s
