# SPDX-License-Identifier: Apache-2.0
"""Balance scheduling for vLLM data parallelism with MoE models.

A global admission gate across data-parallel (DP) ranks: every active engine
step each rank all-gathers ``len(scheduler.running)`` over the DP group, and
when the largest equals the admission cap, no rank admits a new WAITING
request that step ("leader-at-cap => global freeze").

The package touches vLLM at exactly two points:

- ``Scheduler._should_stop_admitting_waiting()``, the seam added by
  ``upstream_patch/`` (see :mod:`vllm_ascend_balance.gate.scheduler`);
- ``DPEngineCoreProc._has_global_unfinished_reqs()``, the per-step cross-rank
  sync, right after which the gather runs
  (see :mod:`vllm_ascend_balance.wiring.engine_hook`).

Both are activated only when ``enable_balance_scheduling`` is set
(see :mod:`vllm_ascend_balance.wiring.activation`). Importing this package imports
neither vLLM nor torch.
"""

__version__ = "0.1.0"
