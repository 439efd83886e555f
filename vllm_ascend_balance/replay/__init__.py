# SPDX-License-Identifier: Apache-2.0
"""Replay a workload on a vLLM DP deployment on CPU, balance off vs on.

Map: one pipeline, two engines behind the
:class:`~vllm_ascend_balance.replay.pipeline.engine.ReplayEngine` seam, each
in a room of its own:

- :mod:`.pipeline`: the pipeline, in the order a replay runs it (options,
  workload, the engine seam, records, metrics, the comparison, the summary).
- :mod:`.model`: the weightless model both engines run (the lock step, outputs,
  the tiny MoE directory).
- :mod:`.real`: the real engine, a vLLM ``AsyncLLM`` DP deployment
  (``--engine asyncllm``).
- :mod:`.sim`: the simulated engine, N real schedulers stepped in one
  process (``--engine sim``).
- :mod:`.peers`: other projects' admission policies, as modes of the
  simulated engine.
- :mod:`.validation`: ``vllm-ascend-balance validate-sim``, the simulated
  engine checked against the real one.

The two engine rooms never import each other, nor does the pipeline
import either: :mod:`.pipeline.engine` loads the one ``--engine`` names
(by :mod:`.pipeline.registry`'s ``module:Class``), and the rooms build on
the pipeline's types (options, workload, records) and on :mod:`.model`.
"""
