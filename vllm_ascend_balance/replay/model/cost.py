# SPDX-License-Identifier: Apache-2.0
"""The DP lock step's rule and the settings the engines receive.

Every forward pass ends in the MoE dispatch/combine collective across the
DP ranks, so a step of the whole deployment costs the slowest rank's
:class:`~vllm_ascend_balance.replay.pipeline.cost.CostModel` cost
(:func:`lockstep_ms`). :class:`ReplaySettings` carries the cost model and
the run's paths from the replay front-end to the engine processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.cost import CostModel

logger = init_logger(__name__)

#: ``additional_config`` key (our own namespace) that carries
#: :class:`ReplaySettings` from the replay front-end to the engine processes.
REPLAY_CONFIG_KEY = "vllm_ascend_balance_replay"


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
