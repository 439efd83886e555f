# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance doctor``: what is installed and what a ``vllm
serve`` command line would activate, before a server starts.

:mod:`.cli` (the subcommand: its report), :mod:`.args` (``vllm serve``'s
arguments, parsed by vLLM's own parser), :mod:`.checks` (what it checks, as
values), :mod:`.async_decision` (whether the engines run async scheduling)
and :mod:`.vllm_install` (the install kind and its torch, read from files).
"""
