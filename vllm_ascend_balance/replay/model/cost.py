# SPDX-License-Identifier: Apache-2.0
"""The step-time model of the replay, and the settings the engines receive.

One forward pass of a DP rank of a large MoE model (DeepSeek-V3 class, EP
across the DP ranks) costs, in modeled milliseconds::

    cost = step_ms                                  # fixed per forward pass
         + prefill_token_ms * prefill_tokens        # compute-bound prefill
         + decode_req_ms * decode_requests          # per-sequence decode work
         + decode_kv_ms_per_1k * decode_context / 1000   # KV cache reads

and, because every forward pass ends in the MoE dispatch/combine collective
across the DP ranks, a step of the whole deployment costs the slowest rank's
``cost`` (dummy batches cost ``step_ms``: they still run the collective).

Default coefficients and why:

- ``step_ms = 25``: the fixed latency of one decode forward pass of a
  61-layer MoE with expert parallelism (launch, all-to-all dispatch and
  combine per layer), paid even by a one-token dummy batch.
- ``decode_req_ms = 0.5`` and ``decode_kv_ms_per_1k = 0.15``: with 64
  decoding sequences of ~2k context a step costs 25 + 32 + 19 = 76 ms,
  inside the 70-87 ms TPOT vllm-ascend reports for DeepSeek-V3.1 at
  3.5k in / 1.5k out with and without balance scheduling.
- ``prefill_token_ms = 0.12``: ~8k prefill tokens/s per DP rank, so a
  2k-token chunk costs ~270 ms: a rank mixing a prefill chunk into its
  decode batch stalls every other rank's decode for that long, which is the
  imbalance balance scheduling targets.

These are modeling choices, not measurements of any one cluster; every one is
a ``replay`` option.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.fields import check_bounds, option

logger = init_logger(__name__)

#: ``additional_config`` key (our own namespace) that carries
#: :class:`ReplaySettings` from the replay front-end to the engine processes.
REPLAY_CONFIG_KEY = "vllm_ascend_balance_replay"


_GROUP = "cost model (modeled milliseconds per forward pass)"


@dataclass(frozen=True)
class CostModel:
    """Modeled time of one forward pass of one DP rank (milliseconds).

    Each field is also a ``replay`` option (``--step-ms`` ...). The one
    implementation both replay engines use.

    Raises:
        ValueError: a coefficient that is negative or not finite.
    """

    step_ms: float = option(
        25.0,
        "fixed cost of any forward pass, dummy batches included",
        metavar="MS",
        ge=0.0,
        group=_GROUP,
    )
    prefill_token_ms: float = option(
        0.12, "per prefill token", metavar="MS", ge=0.0, group=_GROUP
    )
    decode_req_ms: float = option(
        0.5, "per decoding request", metavar="MS", ge=0.0, group=_GROUP
    )
    decode_kv_ms_per_1k: float = option(
        0.15,
        "per 1000 context tokens read by decoding requests",
        metavar="MS",
        ge=0.0,
        group=_GROUP,
    )

    def __post_init__(self) -> None:
        check_bounds(self)

    def rank_cost_ms(
        self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int
    ) -> float:
        """Cost of one rank's batch: ``prefill_tokens`` prompt tokens (any
        number of requests), ``decode_requests`` sequences producing one token
        each, whose KV caches hold ``decode_context_tokens`` tokens in all.
        An empty batch (a dummy batch) costs :attr:`step_ms`."""
        return (
            self.step_ms
            + self.prefill_token_ms * prefill_tokens
            + self.decode_req_ms * decode_requests
            + self.decode_kv_ms_per_1k * decode_context_tokens / 1000.0
        )


def lockstep_ms(rank_costs_ms: Sequence[float]) -> float:
    """Modeled time of one lock-step forward pass of the whole deployment:
    the slowest rank's cost (every rank waits in the MoE collective)."""
    return max(rank_costs_ms)


@dataclass(frozen=True)
class ReplaySettings:
    """What the engine processes need from the replay front-end.

    Travels as ``additional_config[REPLAY_CONFIG_KEY]`` (a JSON-able dict),
    so it reaches every spawned engine process inside the ``VllmConfig``.

    Attributes:
        run_dir: directory for the per-rank JSONL records (``rank{r}.jsonl``).
        lockstep_port: loopback TCP port of the executors' own gloo group.
        time_scale: wall seconds per modeled second (sleep ``cost * scale``).
        cost: the cost model.
        kv_cache_tokens: KV cache capacity of each rank, in tokens.
        lockstep_timeout_s: how long a rank waits for the others in the
            lock-step collective before failing (engine failure, not a hang).
        peer: a peer policy's ``--mode`` entry run in place of balance
            (:mod:`~vllm_ascend_balance.replay.real.peer_gate`), or "".
    """

    run_dir: str
    lockstep_port: int
    time_scale: float = 1.0
    cost: CostModel = field(default_factory=CostModel)
    kv_cache_tokens: int = 1 << 20
    lockstep_timeout_s: float = 600.0
    peer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplaySettings:
        data = dict(data)
        data["cost"] = CostModel(**data.get("cost", {}))
        return cls(**data)

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> ReplaySettings:
        """Read the settings from a ``VllmConfig``.

        Raises:
            ValueError: ``additional_config`` carries no replay settings (the
                executor was used outside ``vllm-ascend-balance replay``).
        """
        additional = getattr(vllm_config, "additional_config", None) or {}
        data = additional.get(REPLAY_CONFIG_KEY)
        if not isinstance(data, dict):
            raise ValueError(
                f"CostModelExecutor needs additional_config[{REPLAY_CONFIG_KEY!r}] "
                f"(set by `vllm-ascend-balance replay`)"
            )
        return cls.from_dict(data)
