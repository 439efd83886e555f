# SPDX-License-Identifier: Apache-2.0
"""The seam's name: the ``Scheduler`` method ``upstream_patch/`` adds
(``vllm/v1/core/sched/scheduler.py``) and the gate overrides.

Its own module, free of torch and vLLM, so that the commands can name it
where neither imports: ``patch-vllm`` before vLLM is patched, and every
``--help`` in an environment that has neither yet.
"""

SEAM = "_should_stop_admitting_waiting"
