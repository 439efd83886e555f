# SPDX-License-Identifier: Apache-2.0
"""Replay options that do not go together, refused in one line naming the
option and the fix (before any engine starts: vLLM would refuse some of
them deep inside engine start-up, or the run could never finish)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm_ascend_balance.replay.peers import POLICIES
from vllm_ascend_balance.replay.pipeline.modes import Mode


def check_combination(options: Any, modes: Sequence[Mode]) -> None:
    """Refuse a combination of :class:`.options.ReplayOptions` values.

    Raises:
        ValueError: the first combination that does not go together.
    """
    if options.max_num_batched_tokens < options.max_num_seqs:
        # vLLM's SchedulerConfig refuses this deep inside engine start-up.
        raise ValueError(
            f"--max-num-batched-tokens ({options.max_num_batched_tokens}) must "
            f"be >= --max-num-seqs ({options.max_num_seqs}), as vLLM's "
            "SchedulerConfig requires: raise the budget or lower the cap"
        )
    kv = options.kv_cache_tokens
    if kv is not None and kv < options.max_model_len:
        # vLLM refuses a cache that cannot hold one request of the model
        # length; in the simulation such a request would wait forever.
        raise ValueError(
            f"--kv-cache-tokens ({kv}) must be >= "
            f"--max-model-len ({options.max_model_len}), as vLLM requires: "
            "raise the cache or lower the model length"
        )
    if options.dp == 1 and any(mode.balance for mode in modes):
        raise ValueError(
            "--dp 1: balance gathers over the DP group and cannot change "
            "anything with one rank; use --dp 2 or more (or --mode off)"
        )
    frozen = options.balance_max_frozen_steps
    if frozen is not None and all(m.bounds(frozen) == m.bounds(None) for m in modes):
        # Passed on only where a mode sets no bound of its own: else ignored,
        # while the run's options would still record it.
        raise ValueError(
            f"--balance-max-frozen-steps {frozen}: no mode of --mode "
            f"{options.mode} takes it (balance off, or a bound of the mode's "
            "own: max-held, max-frozen, or its policy's default); drop it, or "
            f"write the bound into the mode, e.g. on+max-frozen:{frozen}"
        )
    peer = next((mode.label for mode in modes if mode.peer), None)
    if peer is not None and options.dp == 1:
        raise ValueError(
            f"--mode {peer}: a peer policy coordinates DP ranks and changes "
            f"nothing with one; use --dp 2 or more"
        )
    if options.routing == "trtllm-adp" and options.engine != "sim":
        raise ValueError(
            "--routing trtllm-adp: TensorRT-LLM's router runs in the "
            "simulated engine only (the real deployment's front end "
            "routes with vLLM's balancer); add --engine sim or use "
            "--routing vllm"
        )
    for name, value, default in (
        ("--sglang-passes", options.sglang_passes, "mixed"),
        ("--sglang-defer", options.sglang_defer, "throttle"),
    ):
        if value != default and options.engine != "sim":
            raise ValueError(
                f"{name} {value}: the SGLang variants run in the simulated "
                f"engine only; add --engine sim or drop {name}"
            )
    own = next(
        (
            m.label
            for m in modes
            if m.peer
            and getattr(POLICIES.get(m.peer.partition(":")[0]), "routing", None)
        ),
        None,
    )
    if own is not None and options.engine != "sim" and options.peer_router == "own":
        raise ValueError(
            f"--mode {own}: this peer ships its own router, which runs in "
            f"the simulated engine only (the real deployment's front end "
            f"routes with vLLM's balancer); add --peer-router shared or "
            f"--engine sim"
        )
