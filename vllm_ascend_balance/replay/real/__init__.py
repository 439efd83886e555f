# SPDX-License-Identifier: Apache-2.0
"""The real engine (``--engine asyncllm``): a vLLM ``AsyncLLM`` DP deployment
on CPU, one engine process per rank, stepping a weightless executor.

:mod:`.engine` (the ``ReplayEngine``: start, feed on the modeled clock,
stop, join the records), :mod:`.deployment` (vLLM's engine arguments for a
mode), :mod:`.executor` (the cost-model executor in each engine process),
:mod:`.lockstep` (every step lasts the slowest rank's), :mod:`.modeled_clock`
(the clock shared by the executors and the front-end), :mod:`.recorder`
(per-rank record files, the recording scheduler) and :mod:`.interrupts`
(Ctrl-C, SIGTERM and the child-process safety net).
"""
