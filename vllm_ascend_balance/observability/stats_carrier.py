# SPDX-License-Identifier: Apache-2.0
"""Balance series from every rank, wherever it runs, to the front-end's ``/metrics``.

vLLM's own per-engine series reach the front-end from every node (a headless
node's engines included) inside the ``SchedulerStats`` each engine sends
with its outputs. ``SchedulerStats`` is decoded by type (an extra attribute
is dropped), but its ``kv_connector_stats`` field is a free-form
``dict[str, Any]``: the engine adds one key, :data:`KEY`, holding this
step's balance deltas, and the front-end takes the key out again before
vLLM's own stat loggers read the field:

- engine (:func:`attach`): ``Scheduler.make_stats`` of the gated scheduler
  is wrapped on the instance; each call carries the counter increments since
  the previous call, the last spread and the held-wait observations since
  the previous call (:mod:`~vllm_ascend_balance.observability.held_wait`: one value per
  request admitted, O(admitted) per step). Increments, not totals: with
  several API servers each step's stats go to one of them and vLLM sums
  counters over the API servers' files. At a wave's end the hook flushes a
  stats-only output (:func:`flush`), as vLLM does for dummy batches, so
  gathers done in dummy batches are not left unreported while idle.
- front-end (:func:`install_front_end`): :class:`BalanceStatLogger` is added
  to the stat loggers ``AsyncLLM`` builds (custom loggers are recorded
  before vLLM's, so it pops :data:`KEY` first, and sets the field back to
  None when nothing else is in it). Its counters, gauge and histograms are
  ``prometheus_client`` metrics of the front-end: the default registry with
  one API server, vLLM's multi-process directory with several.

Used only where stats are on (``vllm serve`` without
``--disable-log-stats``); otherwise the engines write their series to files
(:mod:`~vllm_ascend_balance.observability.metrics`), which reach the ``/metrics`` of the
node's own front-end only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.observability import exported_series
from vllm_ascend_balance.observability.held_wait import HeldWait

logger = init_logger(__name__)

KEY = "vllm_ascend_balance"
_COUNTERS = tuple(s for s in exported_series.SERIES if s.kind == "counter")
_GAUGES = tuple(s for s in exported_series.SERIES if s.kind == "gauge")
_WRAPPED = "__vab_carrier__"


def _payload(
    scheduler: Any, last: dict[str, float], held_wait: HeldWait | None
) -> dict[str, Any]:
    """Counter increments since ``last`` (updated in place), gauges, and the
    held-wait observations taken from ``held_wait`` (lists under the
    histograms' ``attr``; absent without a tracker)."""
    out: dict[str, Any] = {}
    for series in _COUNTERS:
        total = float(getattr(scheduler, series.attr))
        out[series.attr] = total - last.get(series.attr, 0.0)
        last[series.attr] = total
    for series in _GAUGES:
        out[series.attr] = float(getattr(scheduler, series.attr))
    if held_wait is not None:
        out["seconds"], out["steps"] = held_wait.take()
    return out


def attach(scheduler: Any, held_wait: HeldWait | None = None) -> None:
    """Make ``scheduler.make_stats()`` carry the balance payload (engine
    process; idempotent; a scheduler without stats, ``log_stats`` off,
    returns None and carries nothing). ``held_wait``: the engine's tracker
    whose observations each call takes (the engine's
    ``EngineBalanceMetrics.held_wait``)."""
    original = scheduler.make_stats
    if getattr(original, _WRAPPED, False):
        return
    last: dict[str, float] = {}

    @functools.wraps(original)
    def make_stats(*args: Any, **kwargs: Any) -> Any:
        stats = original(*args, **kwargs)
        if stats is not None:
            carried = dict(stats.kv_connector_stats or {})
            carried[KEY] = _payload(scheduler, last, held_wait)
            stats.kv_connector_stats = carried
        return stats

    setattr(make_stats, _WRAPPED, True)
    scheduler.make_stats = make_stats


def flush(engine: Any) -> None:
    """Send a stats-only output to the first front-end (wave end), carrying
    what the wave's last gathers added."""
    stats = engine.scheduler.make_stats()
    if stats is None:
        return
    from vllm.v1.engine import EngineCoreOutputs

    engine.output_queue.put_nowait((0, EngineCoreOutputs(scheduler_stats=stats)))


def pop_payload(scheduler_stats: Any) -> dict[str, Any] | None:
    """Take :data:`KEY` out of ``scheduler_stats.kv_connector_stats`` (None
    when the field is left empty, as vLLM's loggers expect without a KV
    connector)."""
    carried = getattr(scheduler_stats, "kv_connector_stats", None)
    if not carried or KEY not in carried:
        return None
    payload = carried.pop(KEY)
    if not carried:
        scheduler_stats.kv_connector_stats = None
    return payload


def _stat_logger_class() -> type:
    from vllm.v1.metrics.loggers import AggregateStatLoggerBase

    class BalanceStatLogger(AggregateStatLoggerBase):
        """Front-end end of the carrier: one set of series per engine index.

        The metrics are created when the engines are up
        (:meth:`log_engine_initialized`, every engine index at zero) or at
        the first record, whichever comes first: after vLLM's
        ``PrometheusStatLogger.__init__`` ran ``unregister_vllm_metrics()``
        (which drops every ``vllm:*`` collector registered before it).

        Attributes:
            registry: where the metrics are registered; None (vLLM's use)
                is ``prometheus_client.REGISTRY``. Tests set their own, so
                no collector outlives them on the default registry.
        """

        registry: Any = None

        def __init__(self, vllm_config: Any, engine_indexes: list[int]) -> None:
            self.model_name = str(vllm_config.model_config.served_model_name)
            self.engine_indexes = list(engine_indexes)
            self._metrics: dict[str, Any] | None = None

        def _present(self, engine_idx: int) -> dict[str, Any]:
            """The metrics, with every series of ``engine_idx`` on
            ``/metrics`` (a new child starts at zero; an existing one is
            left as it is)."""
            if self._metrics is None:
                self._metrics = self._create()
            labels = (self.model_name, str(engine_idx))
            for series in (*_COUNTERS, *_GAUGES, *exported_series.HISTOGRAMS):
                self._metrics[series.attr].labels(*labels)
            return self._metrics

        def _create(self) -> dict[str, Any]:
            from prometheus_client import Counter, Gauge, Histogram

            where = {} if self.registry is None else {"registry": self.registry}
            created: dict[str, Any] = {}
            for series in _COUNTERS:
                created[series.attr] = Counter(
                    series.name, series.help, list(exported_series.LABELS), **where
                )
            for series in _GAUGES:
                created[series.attr] = Gauge(
                    series.name,
                    series.help,
                    list(exported_series.LABELS),
                    multiprocess_mode="mostrecent",
                    **where,
                )
            for series in exported_series.HISTOGRAMS:
                created[series.attr] = Histogram(
                    series.name,
                    series.help,
                    list(exported_series.LABELS),
                    buckets=series.buckets,
                    **where,
                )
            return created

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            payload = pop_payload(scheduler_stats) if scheduler_stats else None
            if payload is None:
                return
            created = self._present(engine_idx)
            labels = (self.model_name, str(engine_idx))
            for series in _COUNTERS:
                delta = payload.get(series.attr, 0.0)
                if delta > 0:
                    created[series.attr].labels(*labels).inc(delta)
            for series in _GAUGES:
                created[series.attr].labels(*labels).set(payload.get(series.attr, 0.0))
            for series in exported_series.HISTOGRAMS:
                histogram = created[series.attr].labels(*labels)
                for value in payload.get(series.attr, ()):
                    histogram.observe(value)

        def log_engine_initialized(self) -> None:
            """Every engine's series at zero from start-up, before any step
            (``AsyncLLM`` calls this once its engines are up, after every
            stat logger's ``__init__``, so after vLLM's
            ``unregister_vllm_metrics()``): an operator who scrapes right
            after ``/health`` sees balance is on, on every rank."""
            for engine_idx in self.engine_indexes:
                self._present(engine_idx)

    return BalanceStatLogger


@functools.cache
def stat_logger_class() -> type:
    """:class:`BalanceStatLogger` (built on first use: vLLM's logger base
    class is imported only where a front-end runs)."""
    return _stat_logger_class()


def install_front_end() -> None:
    """Add :class:`BalanceStatLogger` to the stat loggers of every
    ``AsyncLLM`` this process builds from now on (front-end, where balance
    is active and stats are on). Idempotent."""
    import vllm.v1.engine.async_llm as async_llm

    load: Callable[[], list[Any]] = async_llm.load_stat_logger_plugin_factories
    if getattr(load, _WRAPPED, False):
        return

    @functools.wraps(load)
    def with_balance() -> list[Any]:
        return [stat_logger_class(), *load()]

    setattr(with_balance, _WRAPPED, True)
    async_llm.load_stat_logger_plugin_factories = with_balance
