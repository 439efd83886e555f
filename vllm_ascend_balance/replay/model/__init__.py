# SPDX-License-Identifier: Apache-2.0
"""The weightless model both replay engines run: what a step costs, what it
outputs, and the model directory vLLM's ``ModelConfig`` reads.

:mod:`.cost` (the DP lock step's rule over each rank's
:class:`~vllm_ascend_balance.replay.pipeline.cost.CostModel` cost, and the
settings the engines receive), :mod:`.outputs` (``SchedulerOutput`` ->
``ModelRunnerOutput``, one rule for both engines) and :mod:`.tiny_moe` (a
tiny MoE config without weights). The real deployment's executor
(:mod:`vllm_ascend_balance.replay.real`) and the simulated fleet
(:mod:`vllm_ascend_balance.replay.sim`) both build on these, so the two
engines differ only where one runs vLLM's processes and the other mirrors
their loop. It builds on the pipeline's types (its options and records);
the pipeline never imports it.
"""
