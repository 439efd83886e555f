# SPDX-License-Identifier: Apache-2.0
"""The wiring: how the gate gets into a vLLM deployment.

Reading and validating the settings, the plugin's ``register()`` and activation
plan, the gather hook on ``DPEngineCoreProc``, the ``run_engine_core`` chain link,
and the hand-off with vllm-ascend's own balance switches.
"""
