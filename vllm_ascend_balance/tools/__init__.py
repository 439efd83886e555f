# SPDX-License-Identifier: Apache-2.0
"""Operator tools: commands that run outside vLLM's engines.

The ``vllm-ascend-balance`` CLI and its subcommands (``doctor``, ``patch-vllm``,
``demo``), the upstream patch series, and install checks of the local vLLM.
"""
