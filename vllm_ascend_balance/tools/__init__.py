# SPDX-License-Identifier: Apache-2.0
"""Operator tools: commands that run outside vLLM's engines.

:mod:`.cli` is the ``vllm-ascend-balance`` command (``python -m
vllm_ascend_balance`` too); each of its own subcommands is a room here:
:mod:`.doctor` (what is installed and what a command line activates),
:mod:`.patch` (``patch-vllm``: the upstream patch series applied to the
installed vLLM) and :mod:`.demo` (a balance-enabled DP server on CPU).
``replay`` and ``validate-sim`` are the replay's
(:mod:`vllm_ascend_balance.replay`).
"""
