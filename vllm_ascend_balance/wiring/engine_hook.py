# SPDX-License-Identifier: Apache-2.0
"""The engine-core hook that drives the gather: one per active step.

Installed (in an engine process where balance activates) on vLLM's own
``DPEngineCoreProc._has_global_unfinished_reqs()``, so every subclass other
plugins build in its place (vllm-ascend's DyntraLB, a test plugin) inherits
it: the hook composes with their swaps of ``DPEngineCoreProc`` instead of
replacing them. Upstream's ``run_busy_loop`` calls the method exactly once
per iteration that did not take the all-idle ``continue`` (dummy-batch
iterations included), right after the step; it is where the ranks
re-synchronise on wave state (it all-reduces every few steps and at wave
boundaries, and returns the cached answer in between). Gathering
immediately after it means

- every rank gathers on every active step, including a drained rank that
  runs a dummy batch and never enters ``schedule()``; a gather inside
  ``schedule()`` is skipped by such a rank while a busy rank waits in it:
  deadlock;
- ranks reach the gather in the same iteration in which they agree on
  ``engines_running``, and all ranks skip it together when all are idle; a
  gather placed before that point (e.g. in ``_process_engine_step``) can meet
  a rank still blocked on the next wave's input at a wave boundary: deadlock.

Unlike upstream's throttled all-reduce, the gather runs every active step
(the gate needs the previous step's counts); its cost per step is measured
by ``benchmarks/bench_gather.py``. docs/design.md tells both deadlocks.

After the gather the held-wait tracker closes the step
(:mod:`vllm_ascend_balance.observability.held_wait`) and the step's numbers go to the
engine's balance metrics (:mod:`vllm_ascend_balance.observability.metrics`), created
when its busy loop starts (``run_busy_loop``, wrapped to do only that), so
that the series are on ``/metrics`` at zero from start-up; where
stats are on they travel to the front-end in the engine's stats
(:mod:`vllm_ascend_balance.observability.stats_carrier`). Around
it the hook stamps the gather's start for the stall watchdog
(:mod:`vllm_ascend_balance.observability.stall`), created with the metrics (the first
gather can stall too: a peer that never starts).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.observability import stats_carrier
from vllm_ascend_balance.observability.metrics import EngineBalanceMetrics
from vllm_ascend_balance.observability.stall import StallWatchdog
from vllm_ascend_balance.wiring.config_read import read_stall_warning_s

logger = init_logger(__name__)

HOOKED = "_has_global_unfinished_reqs"
#: Where the engine's metrics are created before its first step.
BUSY_LOOP = "run_busy_loop"
_ORIGINAL = "__vab_original__"


def upstream_dp_engine(cls: type) -> type:
    """vLLM's own ``DPEngineCoreProc`` in ``cls``'s MRO (``cls`` may be a
    subclass another plugin swapped in under that name)."""
    for klass in cls.__mro__:
        if klass.__module__ == "vllm.v1.engine.core" and HOOKED in klass.__dict__:
            return klass
    raise TypeError(f"{cls.__qualname__} is not a vLLM DPEngineCoreProc")


def gather_after_sync(engine: Any, engines_running: bool = True) -> None:
    """The hook's body: hand the DP group to the scheduler, gather once,
    advance the held-wait tracker, record metrics (``engines_running``:
    upstream's answer; False at a wave's end, when the stats carrier
    flushes). Every rank runs the same scheduler class, so a class without
    the gate fails on every rank alike (no collective mismatch)."""
    scheduler = engine.scheduler
    if not isinstance(scheduler, BalanceSchedulerMixin):
        raise RuntimeError(
            f"balance scheduling: the engine built {type(scheduler).__qualname__}, "
            f"which does not carry the balance gate: something replaced "
            f"scheduler_config.scheduler_cls after balance activation"
        )
    scheduler.dp_group = engine.dp_group
    watchdog, metrics = prepare_engine(engine)
    watchdog.started = time.monotonic()
    try:
        scheduler.admission_gather()
    finally:
        watchdog.started = None
    metrics.held_wait.after_gather(scheduler)
    metrics.record(scheduler, wave_end=not engines_running)
    if metrics.carried and not engines_running:
        stats_carrier.flush(engine)


def prepare_engine(engine: Any) -> tuple[StallWatchdog, EngineBalanceMetrics]:
    """The engine's stall watchdog and balance metrics, created on the
    first call (idempotent): at the start of its busy loop
    (:func:`_busy_loop_hooked`), so that its series are on ``/metrics`` at
    zero from start-up, or at the first gather where that hook is absent."""
    watchdog = engine.__dict__.get("_balance_watchdog")
    if watchdog is None:
        # Raises BalanceConfigError only where the front-end was bypassed.
        threshold = read_stall_warning_s(getattr(engine, "vllm_config", None))
        watchdog = StallWatchdog.for_engine(engine, threshold)
        engine._balance_watchdog = watchdog
    metrics = engine.__dict__.get("_balance_metrics")
    if metrics is None:
        metrics = engine._balance_metrics = EngineBalanceMetrics.for_engine(engine)
        if metrics.carried:
            stats_carrier.attach(engine.scheduler, metrics.held_wait)
    return watchdog, metrics


def _busy_loop_hooked(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run_busy_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Only a scheduler carrying the gate gathers (gather_after_sync
        # refuses any other); nothing to show for one without it.
        if isinstance(getattr(self, "scheduler", None), BalanceSchedulerMixin):
            prepare_engine(self)
        return original(self, *args, **kwargs)

    setattr(run_busy_loop, _ORIGINAL, original)
    return run_busy_loop


def _hooked(original: Callable[..., bool]) -> Callable[..., bool]:
    @functools.wraps(original)
    def _has_global_unfinished_reqs(self: Any, local_unfinished: bool) -> bool:
        result = original(self, local_unfinished)
        gather_after_sync(self, bool(result))
        return result

    setattr(_has_global_unfinished_reqs, _ORIGINAL, original)
    return _has_global_unfinished_reqs


def install_gather_hook(cls: type) -> None:
    """Hook ``_has_global_unfinished_reqs`` of vLLM's ``DPEngineCoreProc``
    (found in ``cls``'s MRO). Idempotent."""
    base = upstream_dp_engine(cls)
    current = base.__dict__[HOOKED]
    if not hasattr(current, _ORIGINAL):
        setattr(base, HOOKED, _hooked(current))
    loop = base.__dict__.get(BUSY_LOOP)
    if loop is not None and not hasattr(loop, _ORIGINAL):
        setattr(base, BUSY_LOOP, _busy_loop_hooked(loop))


def remove_gather_hook(cls: type) -> None:
    """Undo :func:`install_gather_hook` (tests, and a process that runs a
    balance-off engine after a balance-on one). Idempotent."""
    base = upstream_dp_engine(cls)
    for name in (HOOKED, BUSY_LOOP):
        original = getattr(base.__dict__.get(name), _ORIGINAL, None)
        if original is not None:
            setattr(base, name, original)


def gather_hook_installed(cls: type) -> bool:
    """Whether vLLM's ``DPEngineCoreProc`` under ``cls`` carries the hook."""
    return hasattr(upstream_dp_engine(cls).__dict__[HOOKED], _ORIGINAL)
