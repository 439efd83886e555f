# SPDX-License-Identifier: Apache-2.0
"""The one fake model of the suite: what a model runner returns for a
``SchedulerOutput``, for tests that step real vLLM schedulers by hand.

Rule (vLLM's own, ``Request.is_prefill_chunk``, which ``schedule()`` sets
for every scheduled request): one sampled token for each scheduled request
whose prompt (or recompute after preemption) is complete after this step,
nothing for a prefill still in progress. The replay's engines apply the same
rule from the ``SchedulerOutput`` alone
(``vllm_ascend_balance.replay.model.outputs.OutputModel``), where the scheduler's
requests are out of reach.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.outputs import ModelRunnerOutput

from vllm_ascend_balance.replay.model.outputs import model_runner_output


def fake_model_output(scheduler: Any, output: Any, step: int = 0) -> ModelRunnerOutput:
    """The model output for ``output``, scheduled by ``scheduler`` at step
    ``step`` (token ids vary with the step and position, below 600)."""
    req_ids = list(output.num_scheduled_tokens)
    sampled = [
        []
        if scheduler.requests[rid].is_prefill_chunk
        else [100 + (step * 31 + i) % 500]
        for i, rid in enumerate(req_ids)
    ]
    return model_runner_output(req_ids, sampled)
