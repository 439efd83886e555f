# SPDX-License-Identifier: Apache-2.0
"""A stand-in model runner's output for driving a real scheduler step by step
(no model: the tests only exercise scheduling)."""

from __future__ import annotations

from typing import Any

from vllm.v1.outputs import ModelRunnerOutput


def fake_model_output(sched: Any, out: Any, step: int) -> ModelRunnerOutput:
    """One sampled token per scheduled request whose prefill completed in this
    step (nothing for a partial prefill chunk), like a real model runner.
    Token ids vary with ``step`` so that outputs differ between steps."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = [
        [] if sched.requests[rid].is_prefill_chunk else [100 + (step + i) % 50]
        for i, rid in enumerate(req_ids)
    ]
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )
