# SPDX-License-Identifier: Apache-2.0
"""The engine-core hook that drives the gather: one per active step.

Composed onto vLLM's ``DPEngineCoreProc`` at activation time. It overrides
only ``_has_global_unfinished_reqs()``. Upstream's ``run_busy_loop`` calls it
exactly once per iteration that did not take the all-idle ``continue``
(dummy-batch iterations included), right after the step; it is where the
ranks re-synchronise on wave state (it all-reduces every few steps and at
wave boundaries, and returns the cached answer in between). Gathering
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
by ``benchmarks/bench_gather.py``. CONTRIBUTING.md tells both deadlocks.

After the gather the step's numbers go to the engine's balance metrics
(:mod:`vllm_ascend_balance.metrics`), created at the first gather.
"""

from __future__ import annotations

from typing import Any

from vllm_ascend_balance.metrics import EngineBalanceMetrics


class BalanceEngineHookMixin:
    """Mixin for ``DPEngineCoreProc``: gather after the upstream DP sync."""

    _balance_metrics: EngineBalanceMetrics | None = None

    def _has_global_unfinished_reqs(self, local_unfinished: bool) -> bool:
        result = super()._has_global_unfinished_reqs(local_unfinished)  # type: ignore[misc]
        scheduler: Any = self.scheduler  # type: ignore[attr-defined]
        scheduler.dp_group = self.dp_group  # type: ignore[attr-defined]
        scheduler.balance_gather()
        metrics = self._balance_metrics
        if metrics is None:
            metrics = self._balance_metrics = EngineBalanceMetrics.for_engine(self)
        metrics.record(scheduler)
        return result
