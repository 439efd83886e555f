# SPDX-License-Identifier: Apache-2.0
"""The engine-core hook that drives the gather: one per active step.

Composed onto vLLM's ``DPEngineCoreProc`` at activation time. It overrides
only ``_has_global_unfinished_reqs()``: upstream's ``run_busy_loop`` calls it
exactly once per iteration that did not take the all-idle ``continue``
(dummy-batch iterations included), right after the step, and it is the
loop's cross-rank sync point. Gathering immediately after it means

- every rank gathers on every active step, including a drained rank that
  runs a dummy batch and never enters ``schedule()`` (deadlock lesson A:
  a gather inside ``schedule()`` is skipped by such a rank);
- ranks enter the gather having just agreed on ``engines_running``, and all
  ranks skip it together when all are idle (deadlock lesson B: a gather
  before the sync, e.g. in ``_process_engine_step``, can meet a rank still
  blocked on the next wave's input).

See ``balance_schedule_refactor.md`` ("Step 1") for the two deadlocks.
"""

from __future__ import annotations

from typing import Any


class BalanceEngineHookMixin:
    """Mixin for ``DPEngineCoreProc``: gather after the upstream DP sync."""

    def _has_global_unfinished_reqs(self, local_unfinished: bool) -> bool:
        result = super()._has_global_unfinished_reqs(local_unfinished)  # type: ignore[misc]
        scheduler: Any = self.scheduler  # type: ignore[attr-defined]
        scheduler.dp_group = self.dp_group  # type: ignore[attr-defined]
        scheduler.balance_gather()
        return result
