# SPDX-License-Identifier: Apache-2.0
"""Real vLLM objects built offline: configs, schedulers and requests.

Only the model weights do not exist: the model is a local directory holding a
tiny MoE ``config.json`` (no hub access), and the KV cache is one
``FullAttentionSpec`` group of ``num_blocks`` blocks, as a real engine would
hand the scheduler after profiling.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from tests.support.scratch import process_tempdir
from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model

EOS_TOKEN_ID = 2


@functools.cache
def tiny_moe_model_dir() -> str:
    return str(write_tiny_moe_model(process_tempdir("vab-model-")))


@functools.cache
def _model_config(max_model_len: int) -> ModelConfig:
    return ModelConfig(
        model=tiny_moe_model_dir(),
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        dtype="float32",
        seed=0,
    )


def make_vllm_config(
    *,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 512,
    max_model_len: int = 4096,
    block_size: int = 16,
    num_blocks: int = 10_000,
    enable_prefix_caching: bool = False,
    async_scheduling: bool = False,
    data_parallel_size: int = 1,
    additional_config: dict[str, Any] | None = None,
) -> VllmConfig:
    model_config = _model_config(max_model_len)
    # The KV watermark (0.0 = off, the default where it exists) is pinned so
    # a future default cannot change admission; releases before it (the
    # ascend lane's) have no such field and reject the keyword.
    no_watermark = (
        {"watermark": 0.0}
        if "watermark" in SchedulerConfig.__dataclass_fields__
        else {}
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=False,
        **no_watermark,
    )
    cache_config = CacheConfig(
        block_size=block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=enable_prefix_caching,
    )
    cache_config.num_gpu_blocks = num_blocks
    return VllmConfig(
        # Explicit, not "auto": a VLLM_TARGET_DEVICE=empty install (the fork
        # lane) has no platform to infer a device from, and these objects
        # never touch a device.
        device_config=DeviceConfig(device="cpu"),
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        parallel_config=ParallelConfig(data_parallel_size=data_parallel_size),
        additional_config=additional_config or {},
    )


def make_scheduler(
    scheduler_cls: type[Scheduler] | None = None,
    *,
    vllm_config: VllmConfig | None = None,
    **config_kwargs: Any,
) -> Scheduler:
    """A real scheduler of ``scheduler_cls`` (default: ``AsyncScheduler`` when
    ``async_scheduling=True`` else ``Scheduler``)."""
    vllm_config = vllm_config or make_vllm_config(**config_kwargs)
    if scheduler_cls is None:
        scheduler_cls = (
            AsyncScheduler
            if vllm_config.scheduler_config.async_scheduling
            else Scheduler
        )
    block_size = vllm_config.cache_config.block_size
    kv_cache_config = KVCacheConfig(
        num_blocks=vllm_config.cache_config.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                ),
            )
        ],
    )
    return scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )


_hash_ready = False


def make_request(
    request_id: str,
    prompt_len: int,
    max_tokens: int = 16,
    block_size: int = 16,
    prompt_token_ids: list[int] | None = None,
) -> Request:
    """A real ``Request`` with a deterministic prompt of ``prompt_len`` tokens
    (or exactly ``prompt_token_ids``, e.g. prompts sharing a prefix so that
    prefix caching hits)."""
    global _hash_ready
    if not _hash_ready:
        init_none_hash(sha256)
        _hash_ready = True
    params = SamplingParams(ignore_eos=True, max_tokens=max_tokens)
    params.update_from_generation_config({}, EOS_TOKEN_ID)
    return Request(
        request_id=request_id,
        prompt_token_ids=list(prompt_token_ids)
        if prompt_token_ids is not None
        else [(hash(request_id) + i) % 1000 + 10 for i in range(prompt_len)],
        sampling_params=params,
        pooling_params=None,
        block_hasher=get_request_block_hasher(block_size, sha256),
    )


def create_through_front_end(
    additional_config: dict[str, Any] | None, **kwargs: Any
) -> Any:
    """``EngineArgs.create_engine_config`` as this package's register() wraps
    it, for an ``EngineArgs`` whose only field that matters is
    ``additional_config``: the wrapper steers it first (what vllm-ascend is
    handed), then the config is created from what the wrapper left there
    (with :func:`make_vllm_config` and ``kwargs``), then planned."""
    from types import SimpleNamespace

    from vllm_ascend_balance.wiring import activation

    engine_args = SimpleNamespace(additional_config=additional_config)

    def create(self: Any) -> Any:
        return make_vllm_config(additional_config=self.additional_config, **kwargs)

    return activation._check_early(create)(engine_args)
