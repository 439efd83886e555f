# SPDX-License-Identifier: Apache-2.0
"""The simulated engine: N real vLLM schedulers in one process, in lock step.

A second engine for the replay (``--engine sim``), for DP sizes the real
deployment cannot reach on a small machine (one engine process per rank).
Its room: :mod:`.engine` (the ``ReplayEngine``: options, mode checks,
records), :mod:`.fleet` (the lock-step loop), :mod:`.build` (each rank's
``VllmConfig`` and scheduler class, the release's DP sync rule),
:mod:`.peer_step` (a peer policy's share of a step), :mod:`.dp_group` (the
in-process DP group) and :mod:`.routing` (which rank a request goes to).
What is real and what is modeled:

- **Schedulers: real.** Each rank is the scheduler class a real engine core
  would build: :func:`~vllm_ascend_balance.wiring.activation_plan.plan_activation` reads
  the same ``VllmConfig`` (tiny MoE model directory, DP size N, the balance
  setting) and, where balance applies,
  :func:`~vllm_ascend_balance.wiring.composition.compose_scheduler` composes
  ``BalanceSchedulerMixin`` onto ``Scheduler`` (or ``AsyncScheduler`` with
  ``async_scheduling``), exactly as ``run_engine_core`` does. The KV cache is
  one ``FullAttentionSpec`` group with room for every running request at the
  workload's longest (nothing is
  preempted); ``log_stats`` is off (it only feeds metrics).
- **The engine loop: mirrored.** One iteration of
  ``DPEngineCoreProc.run_busy_loop`` per rank per step: requests that arrived
  are added (``scheduler.add_request``); a rank with requests runs
  ``schedule()`` (with ``throttle_prefills`` from
  :func:`.fleet.should_throttle_prefills` under ``interval:N``, as
  ``EngineCore.step`` passes ``_should_throttle_prefills()``), the model
  (below) and ``update_from_output()``; a rank that ran no tokens runs a dummy
  batch while any rank is busy; then ``_has_global_unfinished_reqs``
  (all-reduce only every ``dp_sync_interval`` steps, 32 in releases without
  that setting, and at a wave's first step where the release syncs it) and,
  with balance on, the gather on every rank; under a peer policy
  (:mod:`vllm_ascend_balance.replay.peers`) each rank's state is gathered after
  arrivals, before ``schedule()`` (where those sources negotiate), and the
  policy's decision is applied through the seam (plus ``throttle_prefills`` for
  a policy that also holds in-flight chunks, where ``schedule()`` has it). When
  every rank is idle the deployment waits for the next arrival: no step, no
  gather (the all-idle ``continue``).
- **The gather: real decision code.** Every scheduler's ``admission_gather()``
  runs as in the engine hook; its ``dist.all_gather`` goes to an in-process
  stand-in for the DP group (:mod:`.dp_group`) that returns the vector of
  every rank's ``len(running)``.
- **The model: the replay's.**
  :class:`~vllm_ascend_balance.replay.model.outputs.OutputModel` produces the
  model outputs as the real executor does; a step costs the slowest rank's
  :class:`~vllm_ascend_balance.replay.pipeline.cost.CostModel` cost (the MoE
  collective keeps ranks in lock step), dummy batches ``step_ms``.
- **Routing:** :mod:`.routing` (vLLM's DP load balancer with stale stats,
  round-robin, or the JSONL ``rank``).
"""
