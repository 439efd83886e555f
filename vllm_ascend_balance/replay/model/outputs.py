# SPDX-License-Identifier: Apache-2.0
"""Model outputs of the replay's weightless engines: one rule, one place.

Both replay engines (the executor of the real deployment, a simulated
engine stepping vLLM schedulers in one process) turn a ``SchedulerOutput``
into a ``ModelRunnerOutput`` here, as vLLM's ``GPUModelRunner``
(``execute_model`` + ``sample_tokens``) would for a real model:

- a request samples one token when the step computes all the tokens it
  knows of (prompt + tokens sampled so far); a request whose prefill (or
  recompute after preemption) is still in progress samples nothing;
- a request *decodes* when it is scheduled exactly the one token after
  everything it knows, with at least one sampled; anything else is prefill.

It also keeps each request's step indices (admitted, first token, finished)
for the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.v1.outputs import ModelRunnerOutput

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.records import RankRequest

# vLLM 0.34 dropped ModelRunnerOutput.req_id_to_index (the index is the
# position in req_ids); older releases require it.
_HAS_INDEX = "req_id_to_index" in getattr(ModelRunnerOutput, "__dataclass_fields__", {})


def model_runner_output(
    req_ids: list[str], sampled: list[list[int]]
) -> ModelRunnerOutput:
    """A ``ModelRunnerOutput`` of ``sampled`` token ids per request (same
    order as ``req_ids``), in the installed release's fields."""
    extra: dict[str, Any] = {}
    if _HAS_INDEX:
        extra["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, **extra)


logger = init_logger(__name__)

#: The token every request "generates" (any id below the vocabulary size
#: that is not EOS; requests also set ``ignore_eos``).
SAMPLED_TOKEN_ID = 1000


@dataclass
class Batch:
    """One rank's scheduled work in one step, as the cost model sees it
    (tokens and requests)."""

    prefill_tokens: int = 0
    decode_requests: int = 0
    decode_context_tokens: int = 0
    new_requests: int = 0


@dataclass
class _Progress:
    prompt_len: int
    max_tokens: int | None
    admitted_step: int
    sampled: int = 0
    first_token_step: int | None = None


class OutputModel:
    """One rank's view of its requests across steps.

    Args:
        rank: the DP rank (for the records).
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._requests: dict[str, _Progress] = {}

    def step(
        self, so: Any, step: int
    ) -> tuple[Batch, ModelRunnerOutput, list[RankRequest]]:
        """Account one ``SchedulerOutput`` ``so`` run as global step ``step``.

        Returns:
            the batch, the model output (one token or none per scheduled
            request, in ``num_scheduled_tokens`` order) and the records of
            requests that finished (reached ``max_tokens``) or were aborted.
        """
        done: list[RankRequest] = []
        for req_id in so.finished_req_ids:
            progress = self._requests.pop(req_id, None)
            if progress is not None:  # aborted before its last token
                done.append(self._record(req_id, progress, None))
        computed: dict[str, int] = {}
        batch = Batch(new_requests=len(so.scheduled_new_reqs))
        for new in so.scheduled_new_reqs:
            prompt = new.prompt_token_ids
            params = new.sampling_params
            self._requests[new.req_id] = _Progress(
                len(prompt) if prompt is not None else 0,
                params.max_tokens if params is not None else None,
                step,
            )
            computed[new.req_id] = new.num_computed_tokens
        cached = so.scheduled_cached_reqs
        for req_id, num_computed in zip(
            cached.req_ids, cached.num_computed_tokens, strict=True
        ):
            computed[req_id] = num_computed
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        for req_id, num_tokens in so.num_scheduled_tokens.items():
            progress = self._requests.setdefault(req_id, _Progress(0, None, step))
            done_before = computed.get(req_id, 0)
            known = progress.prompt_len + progress.sampled
            if num_tokens == 1 and progress.sampled > 0 and done_before == known - 1:
                batch.decode_requests += 1
                batch.decode_context_tokens += done_before + 1
            else:
                batch.prefill_tokens += num_tokens
            req_ids.append(req_id)
            if done_before + num_tokens < known:
                sampled.append([])  # prefill still in progress: sample nothing
                continue
            progress.sampled += 1
            sampled.append([SAMPLED_TOKEN_ID])
            if progress.first_token_step is None:
                progress.first_token_step = step
            if (
                progress.max_tokens is not None
                and progress.sampled >= progress.max_tokens
            ):
                done.append(self._record(req_id, self._requests.pop(req_id), step))
        return batch, model_runner_output(req_ids, sampled), done

    def unfinished(self) -> list[RankRequest]:
        """Records of the requests still in progress (at shutdown)."""
        out = [self._record(r, p, None) for r, p in self._requests.items()]
        self._requests.clear()
        return out

    def _record(self, req_id: str, p: _Progress, finish: int | None) -> RankRequest:
        return RankRequest(
            req_id, self.rank, p.admitted_step, p.first_token_step, finish, p.sampled
        )
