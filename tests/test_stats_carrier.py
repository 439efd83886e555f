# SPDX-License-Identifier: Apache-2.0
"""The stats carrier (issue 19): balance series in the engine's
``SchedulerStats.kv_connector_stats`` to the front-end, in process.

- engine end: a real scheduler's ``make_stats()`` carries the counter
  increments since the previous call and the spread, next to whatever a KV
  connector put in the field;
- front-end end: vLLM's own ``StatLoggerManager`` with the package's stat
  logger (as ``install_front_end`` adds it to ``AsyncLLM``) records those
  stats through vLLM's logging and Prometheus loggers, and the balance
  series appear per engine label with the summed increments;
- negative control: the same stats without the package's logger break
  vLLM's own loggers (a ``kv_connector_stats`` they cannot read), which is
  why the key must be taken out before they run.

Multi-process and multi-node: tests/test_deployments.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.support.vllm_objects import make_scheduler, make_vllm_config
from vllm_ascend_balance.observability import stats_carrier
from vllm_ascend_balance.wiring import composition

# why: SchedulerStats, make_stats() and vLLM's StatLoggerManager
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


def _gated(**totals: float) -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler

    scheduler: Any = make_scheduler(composition.compose_scheduler(Scheduler))
    for attr, value in totals.items():
        setattr(scheduler, attr, value)
    return scheduler


def test_make_stats_carries_increments_and_keeps_other_keys() -> None:
    scheduler = _gated(balance_gathers=5, balance_frozen_gathers=2, balance_spread=3)
    stats_carrier.attach(scheduler)
    stats_carrier.attach(scheduler)  # idempotent
    first = scheduler.make_stats()
    payload = first.kv_connector_stats[stats_carrier.KEY]
    assert payload["balance_gathers"] == 5 and payload["balance_frozen_gathers"] == 2
    assert payload["balance_spread"] == 3
    scheduler.balance_gathers = 9
    second = scheduler.make_stats()
    assert second.kv_connector_stats[stats_carrier.KEY]["balance_gathers"] == 4
    assert second.kv_connector_stats[stats_carrier.KEY]["balance_frozen_gathers"] == 0

    second.kv_connector_stats["SomeConnector"] = {"bytes": [1]}
    assert stats_carrier.pop_payload(second) is not None
    assert second.kv_connector_stats == {"SomeConnector": {"bytes": [1]}}
    assert stats_carrier.pop_payload(first) is not None
    assert first.kv_connector_stats is None  # as vLLM expects without a connector
    assert stats_carrier.pop_payload(first) is None


def _manager(with_balance: bool) -> Any:
    from vllm.v1.metrics.loggers import StatLoggerManager

    custom = [stats_carrier.stat_logger_class()] if with_balance else []
    return StatLoggerManager(
        make_vllm_config(data_parallel_size=2),
        engine_idxs=[0, 1],
        custom_stat_loggers=custom,
    )


def _balance_samples() -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["engine"]): sample.value
        for family in REGISTRY.collect()
        if family.name.startswith("vllm:balance_")
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def test_front_end_logger_records_every_engine_before_vllms_loggers() -> None:
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    manager = _manager(with_balance=True)
    try:
        for engine, gathers in ((0, 3), (1, 3), (0, 4), (1, 4)):
            scheduler = _gated(balance_gathers=gathers, balance_spread=engine)
            stats_carrier.attach(scheduler)
            stats = scheduler.make_stats()
            manager.record(stats, None, engine_idx=engine)
            assert stats.kv_connector_stats is None  # taken out first
        samples = _balance_samples()
        assert samples[("vllm:balance_gathers_total", "0")] == 7
        assert samples[("vllm:balance_gathers_total", "1")] == 7
        assert samples[("vllm:balance_running_spread", "1")] == 1
        assert samples[("vllm:balance_frozen_gathers_total", "0")] == 0
    finally:
        unregister_vllm_metrics()


def _keys_vllms_loggers_see(
    monkeypatch: pytest.MonkeyPatch, with_balance: bool
) -> list[set[str]]:
    """Record the ``kv_connector_stats`` keys each of vLLM's own stat
    loggers is handed (their ``record`` replaced by a spy: whether a
    logger then crashes on a foreign key depends on its KV-connector
    state, what it is handed does not)."""
    import vllm.v1.metrics.loggers as loggers

    seen: list[set[str]] = []

    def spy(self: Any, scheduler_stats: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(set(getattr(scheduler_stats, "kv_connector_stats", None) or {}))

    for name in ("LoggingStatLogger", "PrometheusStatLogger"):
        monkeypatch.setattr(getattr(loggers, name), "record", spy)
    manager = _manager(with_balance=with_balance)
    scheduler = _gated(balance_gathers=1)
    stats_carrier.attach(scheduler)
    manager.record(scheduler.make_stats(), None, engine_idx=0)
    return seen


def test_vllms_loggers_never_see_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    try:
        seen = _keys_vllms_loggers_see(monkeypatch, with_balance=True)
        assert seen and all(stats_carrier.KEY not in keys for keys in seen), seen
    finally:
        unregister_vllm_metrics()


def test_negative_control_without_the_logger_vllms_loggers_see_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    try:
        seen = _keys_vllms_loggers_see(monkeypatch, with_balance=False)
        assert any(stats_carrier.KEY in keys for keys in seen), seen
    finally:
        unregister_vllm_metrics()


def test_install_front_end_adds_the_logger_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import vllm.v1.engine.async_llm as async_llm

    monkeypatch.setattr(async_llm, "load_stat_logger_plugin_factories", lambda: [])
    stats_carrier.install_front_end()
    stats_carrier.install_front_end()
    assert async_llm.load_stat_logger_plugin_factories() == [
        stats_carrier.stat_logger_class()
    ]
