# SPDX-License-Identifier: Apache-2.0
"""What one run of the real deployment is made of: vLLM's engine arguments
for a mode, the prompts, the replay's routing."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.loopback_ports import free_loopback_port
from vllm_ascend_balance.replay.model.cost import REPLAY_CONFIG_KEY, ReplaySettings
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest

logger = init_logger(__name__)


def prompt_ids(index: int, length: int, vocab: int = 30000) -> list[int]:
    """Deterministic token ids (prefix caching is off anyway)."""
    rng = random.Random(index)
    return [rng.randrange(10, vocab) for _ in range(length)]


def route(request: ReplayRequest, options: ReplayOptions) -> int | None:
    """The rank the replay pins ``request`` to, or None (vLLM's router)."""
    if request.rank is not None:
        return request.rank
    if options.routing == "round-robin":
        return request.index % options.dp
    return None


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, in full."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def engine_args(options: ReplayOptions, mode: Mode, run_dir: Path, model: Path) -> Any:
    """``AsyncEngineArgs`` of one run.

    Raises:
        ValueError: ``mode`` needs an engine argument this vLLM lacks.
    """
    from vllm.engine.arg_utils import AsyncEngineArgs

    extra: dict[str, Any] = {}
    if mode.prefill_schedule_interval is not None:
        names = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        if "prefill_schedule_interval" not in names:
            raise ValueError(
                f"--mode {mode.label}: this vLLM has no engine argument "
                f"prefill_schedule_interval; use a vLLM that has it"
            )
        extra["prefill_schedule_interval"] = mode.prefill_schedule_interval
    scheduler_config: dict[str, Any] = {
        "enable_balance_scheduling": mode.balance,
        **mode.bounds(options.balance_max_frozen_steps),
    }
    # KV cache: room for every running request at full length, so the
    # replay never preempts (preemption is not what is being compared),
    # unless --kv-cache-tokens asks for a KV-bound run.
    settings = ReplaySettings(
        run_dir=str(run_dir),
        lockstep_port=free_loopback_port(),
        time_scale=options.time_scale,
        cost=options.cost,
        kv_cache_tokens=options.kv_cache_tokens
        or (options.max_num_seqs + 1) * options.max_model_len,
        peer=mode.peer or "",
    )
    return AsyncEngineArgs(
        model=str(model),
        skip_tokenizer_init=True,
        data_parallel_size=options.dp,
        data_parallel_address="127.0.0.1",
        distributed_executor_backend=options.executor,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        max_model_len=options.max_model_len,
        enable_prefix_caching=False,
        enforce_eager=True,
        dtype="float32",
        seed=0,
        additional_config={
            "scheduler_config": scheduler_config,
            REPLAY_CONFIG_KEY: settings.to_dict(),
        },
        **extra,
    )
