# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance demo``: a real vLLM OpenAI server with data
parallelism and balance on, on CPU (the tiny MoE model, the replay's
cost-model executor), for operators trying it and for the end-to-end tests.

:mod:`.server` (the API the tests and tools build on: the command line,
a running server), :mod:`.command` (its ``vllm serve`` arguments, program,
model directory and environment), :mod:`.process` (start, readiness,
stop), :mod:`.drain` (Ctrl-C lets the requests in flight finish),
:mod:`.checks` (the arguments, checked before anything starts),
:mod:`.cli` (the subcommand), :mod:`.report` and :mod:`.log` (what it
prints, and the server's log). Importing any of them imports neither vLLM
nor torch.
"""
