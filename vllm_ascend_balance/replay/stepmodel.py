# SPDX-License-Identifier: Apache-2.0
"""What a weightless model runner does with a ``SchedulerOutput``.

Shared by both replay engines, so that the real deployment's executor
(:class:`~vllm_ascend_balance.replay.executor.CostModelExecutor`) and the
in-process simulation (:mod:`.sim`) classify a batch and sample tokens the
same way: :class:`OutputModel` tracks each scheduled request's progress and
turns a ``SchedulerOutput`` into a :class:`StepBatch` (what the cost model
prices) plus the ``ModelRunnerOutput`` vLLM's ``update_from_output`` expects
(cf. ``GPUModelRunner.execute_model``/``sample_tokens``: one token per request
whose prompt, or recompute, completes this step; none while a prefill is in
progress).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.v1.outputs import ModelRunnerOutput

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

#: The token every request "generates" (any id below the vocabulary size
#: that is not EOS; requests also set ``ignore_eos``).
SAMPLED_TOKEN_ID = 1000


@dataclass
class RequestProgress:
    """What the runner knows of a scheduled request: its prompt length and
    how many tokens it has sampled for it (both in tokens)."""

    prompt_len: int
    sampled: int = 0


@dataclass
class StepBatch:
    """One rank's scheduled work this step, as the cost model sees it.

    Attributes:
        prefill_tokens: prompt (or recompute) tokens, any number of requests.
        decode_requests: requests producing one token from a complete prompt.
        decode_context_tokens: tokens in the KV caches the decodes read.
        new_requests: requests admitted from WAITING this step.
    """

    prefill_tokens: int = 0
    decode_requests: int = 0
    decode_context_tokens: int = 0
    new_requests: int = 0

    @property
    def mixed(self) -> bool:
        """Prefill and decode in the same forward pass."""
        return self.prefill_tokens > 0 and self.decode_requests > 0


class OutputModel:
    """Per-rank request progress and the outputs of each step."""

    def __init__(self) -> None:
        self.requests: dict[str, RequestProgress] = {}

    def account(self, so: Any) -> tuple[StepBatch, list[str], list[list[int]]]:
        """Update request progress from the ``SchedulerOutput`` ``so``; return
        the batch, the scheduled request ids and the tokens sampled for each.

        A request decodes when it was scheduled exactly the one token after
        everything it knows (prompt + sampled), with at least one sampled;
        anything else is prefill (first prefill, a chunk, or a recompute after
        preemption). It samples when the step completes all its known tokens.
        """
        requests = self.requests
        for req_id in so.finished_req_ids:
            requests.pop(req_id, None)
        computed: dict[str, int] = {}
        batch = StepBatch(new_requests=len(so.scheduled_new_reqs))
        for new in so.scheduled_new_reqs:
            prompt = new.prompt_token_ids
            requests[new.req_id] = RequestProgress(
                len(prompt) if prompt is not None else 0
            )
            computed[new.req_id] = new.num_computed_tokens
        cached = so.scheduled_cached_reqs
        computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        for req_id, num_tokens in so.num_scheduled_tokens.items():
            progress = requests.get(req_id)
            if progress is None:
                progress = requests[req_id] = RequestProgress(0)
            done_before = computed.get(req_id, 0)
            known = progress.prompt_len + progress.sampled
            if num_tokens == 1 and progress.sampled > 0 and done_before == known - 1:
                batch.decode_requests += 1
                batch.decode_context_tokens += done_before + 1
            else:
                batch.prefill_tokens += num_tokens
            req_ids.append(req_id)
            if done_before + num_tokens >= known:
                progress.sampled += 1
                sampled.append([SAMPLED_TOKEN_ID])
            else:
                sampled.append([])  # prefill still in progress: sample nothing
        return batch, req_ids, sampled


def runner_output(req_ids: list[str], sampled: list[list[int]]) -> ModelRunnerOutput:
    """The ``ModelRunnerOutput`` of one step (what ``sample_tokens`` returns)."""
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
    )
