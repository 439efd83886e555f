# SPDX-License-Identifier: Apache-2.0
"""Building the simulated engine's ranks: options, the ``VllmConfig`` each
rank's real scheduler is built from, the scheduler class activation composes,
the release's DP sync rule, and the simulated requests (:mod:`.fleet` steps
them)."""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_ascend_balance.replay.pipeline.cost import CostModel
from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest

KV_BLOCK_SIZE = 16
#: The sync interval of ``_has_global_unfinished_reqs`` in releases without
#: ``ParallelConfig.dp_sync_interval`` (0.27.1: every 32 steps).
LEGACY_DP_SYNC_INTERVAL = 32
#: Modeled seconds between two DP coordinator stats publications: 100 ms of
#: wall time at the real replay's default time scale of 0.5.
DEFAULT_STATS_INTERVAL_S = 0.2


@dataclass(frozen=True)
class SimOptions:
    """Options of one simulated run.

    Attributes:
        dp_size: data-parallel ranks (schedulers).
        max_num_seqs: per-rank running cap (the balance gate's cap).
        max_num_batched_tokens: per-rank token budget per step.
        max_model_len: model length in tokens.
        cost: the cost model.
        routing: ``"vllm"``, ``"round-robin"`` or ``"trtllm-adp"``
            (:mod:`.routing`).
        stats_interval_s: modeled seconds between the coordinator's stats
            snapshots that reach the ``vllm`` balancer.
        async_scheduling: build ``AsyncScheduler`` (the CPU deployment runs
            ``Scheduler``: keep False to compare with it).
        longest_request_tokens: prompt + output tokens of the workload's
            longest request (sizes the KV cache); None: ``max_model_len``.
        prefill_schedule_interval: vLLM's ``--prefill-schedule-interval``
            (:func:`should_throttle_prefills`); None: vLLM's default.
        kv_cache_tokens: per-rank KV cache in tokens (KV-bound runs; vLLM's
            scheduler preempts when it fills); None: room for every running
            request at its longest.
        peer_timing: ``"source"``: a peer decides on what its source's
            collective sees (:mod:`.peer_step`); ``"gate"``: on the previous
            step's end state, where the gate gathers (the real engine's
            timing for peers, :mod:`~vllm_ascend_balance.replay.real.peer_gate`).
        peer_router: ``"own"``: a peer that ships its own router
            (``PeerPolicy.routing``, TensorRT-LLM's) runs behind it;
            ``"shared"``: behind :attr:`routing`, like every other mode.
        sglang_passes, sglang_defer: how an SGLang peer's rank runs prefill
            next to decodes, and which chunks its interval holds
            (:mod:`.sglang_rounds`; the defaults keep vLLM's behaviour).
    """

    dp_size: int = 2
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    max_model_len: int = 16384
    cost: CostModel = field(default_factory=CostModel)
    routing: str = "vllm"
    stats_interval_s: float = DEFAULT_STATS_INTERVAL_S
    async_scheduling: bool = False
    longest_request_tokens: int | None = None
    prefill_schedule_interval: int | None = None
    kv_cache_tokens: int | None = None
    peer_router: str = "own"
    peer_timing: str = "source"
    sglang_passes: str = "mixed"
    sglang_defer: str = "throttle"


def _vllm_config(
    opts: SimOptions, balance: bool, model_dir: Path, extra: dict[str, Any]
) -> Any:
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        VllmConfig,
    )

    model_config = ModelConfig(
        model=str(model_dir),
        skip_tokenizer_init=True,
        max_model_len=opts.max_model_len,
        dtype="float32",
        seed=0,
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=opts.max_num_seqs,
        max_num_batched_tokens=opts.max_num_batched_tokens,
        max_model_len=opts.max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=opts.async_scheduling,
        is_encoder_decoder=False,
    )
    cache_config = CacheConfig(
        block_size=KV_BLOCK_SIZE,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=False,
    )
    # Room for every running request at its longest, so nothing is ever
    # preempted (as the real replay sizes it, but from the longest request
    # of the workload rather than max_model_len: building N block pools is
    # most of the start-up time at large DP).
    longest = min(opts.max_model_len, opts.longest_request_tokens or opts.max_model_len)
    kv_tokens = opts.kv_cache_tokens or (opts.max_num_seqs + 1) * longest
    cache_config.num_gpu_blocks = kv_tokens // KV_BLOCK_SIZE + 1
    return VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        parallel_config=ParallelConfig(data_parallel_size=opts.dp_size),
        # The schedulers run on the host: an explicit CPU device, so that an
        # install without a platform (VLLM_TARGET_DEVICE=empty) builds them.
        device_config=DeviceConfig(device="cpu"),
        additional_config={
            "scheduler_config": {"enable_balance_scheduling": balance, **extra}
        },
    )


def scheduler_class(vllm_config: Any) -> type:
    """The class a DP engine core builds for ``vllm_config``: activation's own
    plan and composition (the balance mixin only where balance applies)."""
    from vllm_ascend_balance.wiring.activation_plan import plan_activation
    from vllm_ascend_balance.wiring.ascend_steering import hide_env, steer_vllm_config
    from vllm_ascend_balance.wiring.composition import compose_scheduler

    # What the front-end hands the engines, and what each engine process
    # does with its environment (all "engines" share this process).
    if steer_vllm_config(vllm_config, os.environ) is not None:
        hide_env(os.environ)
    plan = plan_activation(vllm_config)
    base = vllm_config.scheduler_config.get_scheduler_cls()
    if not plan.active:
        return base
    # The ranks share one process: the stand-in group serves the all-gather
    # (every exchange gives the same view, tests/test_collectives.py).
    return compose_scheduler(
        base, dataclasses.replace(plan.setting.gate, collective="all_gather")
    )


def build_schedulers(
    opts: SimOptions,
    balance: bool,
    model_dir: Path,
    extra: dict[str, Any] | None = None,
    *,
    peer_gate: bool = False,
) -> list[Any]:
    """N real schedulers of the class activation composes, one per DP rank
    (``extra``: more keys of the balance ``scheduler_config``; ``peer_gate``:
    with :class:`~vllm_ascend_balance.replay.peers.PeerGateMixin` in front, for
    a peer policy)."""
    import torch
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = _vllm_config(opts, balance, model_dir, extra or {})
    cls = scheduler_class(vllm_config)
    if peer_gate:
        from vllm_ascend_balance.replay.peers import compose_peer_gate

        cls = compose_peer_gate(cls)
    spec = FullAttentionSpec(
        block_size=KV_BLOCK_SIZE, num_kv_heads=1, head_size=8, dtype=torch.float32
    )
    out = []
    for _ in range(opts.dp_size):
        kv_cache_config = KVCacheConfig(
            num_blocks=vllm_config.cache_config.num_gpu_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
        )
        out.append(
            cls(
                vllm_config=vllm_config,
                kv_cache_config=kv_cache_config,
                block_size=KV_BLOCK_SIZE,
                log_stats=False,
                structured_output_manager=StructuredOutputManager(vllm_config),
            )
        )
    return out


def dp_sync_rule(vllm_config: Any) -> tuple[int, bool]:
    """``(interval, sync_first_step)`` of ``_has_global_unfinished_reqs`` in
    the installed release: every ``dp_sync_interval`` steps and at a wave's
    first step where ``ParallelConfig`` has ``dp_sync_interval`` (0.32.0),
    else every 32 steps (0.27.1)."""
    interval = getattr(vllm_config.parallel_config, "dp_sync_interval", None)
    if interval is None:
        return LEGACY_DP_SYNC_INTERVAL, False
    return int(interval), True


class PromptPool:
    """Prompt token ids for simulated requests: slices of one fixed list of
    ids (prefix caching is off, so only the length matters; slicing keeps
    request creation cheap at 100k requests)."""

    def __init__(self, max_len: int) -> None:
        rng = random.Random(0)
        self.ids: list[int] = [rng.randrange(10, 30000) for _ in range(max_len)]

    def prompt(self, n: int) -> list[int]:
        return self.ids[:n]


def make_request(rid: str, req: ReplayRequest, prompts: PromptPool) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(
        max_tokens=req.output_tokens, ignore_eos=True, detokenize=False
    )
    return Request(
        request_id=rid,
        prompt_token_ids=prompts.prompt(req.prompt_tokens),
        sampling_params=params,
        pooling_params=None,
        arrival_time=req.arrival_s,
    )
