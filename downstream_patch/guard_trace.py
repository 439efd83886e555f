# SPDX-License-Identifier: Apache-2.0
"""Trace of vllm-ascend's PD prefill-node preemption guard on a real
scheduler, printed as JSON: run once with the release's ``vllm_ascend`` and
once with the patched tree first on ``PYTHONPATH`` (``apply.py`` does both),
the traces must be equal (the guard was moved, not changed).

A small KV pool (8 blocks of 16 tokens) and four 30-token prompts of 40
output tokens: without the guard the scheduler preempts; with it, it never
does. Balance is off: the guard is active without it (vLLM 0.23.0,
``kv_role == "kv_producer"``; the decision function is patched, since a
real producer needs a KV connector).
"""

from __future__ import annotations

import importlib
import json
from typing import Any
from unittest import mock

from vllm.platforms import current_platform

# vLLM's order: the platform's global patches before the scheduler is built.
current_platform.pre_register_and_update()

from vllm_ascend.patch.platform import patch_balance_schedule  # noqa: E402

from tests.support.model_outputs import fake_model_output  # noqa: E402
from tests.support.vllm_objects import (  # noqa: E402
    make_request,
    make_scheduler,
    make_vllm_config,
)


def _decider_home() -> Any:
    """Where ``_disable_preemption_on_prefill_node`` is looked up from."""
    try:
        return importlib.import_module("vllm_ascend.core.prefill_preemption_guard")
    except ImportError:  # the release: it lives in the balance patch
        return patch_balance_schedule


def trace(guarded: bool, steps: int = 60) -> list[Any]:
    with mock.patch.object(
        _decider_home(), "_disable_preemption_on_prefill_node", return_value=guarded
    ):
        config = make_vllm_config(
            max_num_seqs=4, num_blocks=8, max_num_batched_tokens=64
        )
        sched = make_scheduler(
            patch_balance_schedule.BalanceScheduler, vllm_config=config
        )
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 30, 40, prompt_token_ids=[10 + i] * 30))
    out: list[Any] = []
    for step in range(steps):
        so = sched.schedule()
        out.append(
            [sorted(so.num_scheduled_tokens.items()), sorted(so.preempted_req_ids)]
        )
        sched.update_from_output(so, fake_model_output(sched, so, step))
    return out


if __name__ == "__main__":
    print(
        json.dumps(
            {
                "module": patch_balance_schedule.__file__,
                "guarded": trace(True),
                "unguarded": trace(False),
            }
        )
    )
