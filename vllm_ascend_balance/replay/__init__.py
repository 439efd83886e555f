# SPDX-License-Identifier: Apache-2.0
"""Replay a workload on a vLLM DP deployment on CPU, balance off vs on.

Map: one pipeline, two engines behind the
:class:`~vllm_ascend_balance.replay.pipeline.engine.ReplayEngine` seam.

- This folder is the pipeline, in the order a replay runs it:
  :mod:`.cli` (``vllm-ascend-balance replay``) ->
  :mod:`.options` (every option; :mod:`.fields` turns dataclass fields into
  argparse; :mod:`.modes` the ``--mode`` grammar; :mod:`.registry` the
  ``--engine`` names) -> :mod:`.workload` (:mod:`.traces` the trace readers,
  :mod:`.workload_types` the input types) -> :mod:`.engine` (the seam) ->
  :mod:`.records` + :mod:`.join` (per-rank records joined on the modeled
  clock) -> :mod:`.metrics` -> :mod:`.compare` (each metric against its
  noise) -> :mod:`.summary` (:mod:`.report` the table and JSON,
  :mod:`.heatmap` the large-DP plot); :mod:`.environment`, :mod:`.paths`
  and :mod:`.progress` serve every stage.
- :mod:`.model`: the weightless model both engines run (step cost, outputs,
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
import either: :mod:`.engine` loads the one ``--engine`` names (by
:mod:`.registry`'s ``module:Class``), and the rooms build on the pipeline's
types (options, workload, records) and on :mod:`.model`.
"""
