# SPDX-License-Identifier: Apache-2.0
"""The replay's step-time model: :class:`CostModel`, whose coefficients are
``replay`` options. One forward pass of a DP rank costs, in modeled
milliseconds::

    cost = step_ms                                  # fixed per forward pass
         + prefill_token_ms * prefill_tokens        # compute-bound prefill
         + decode_req_ms * decode_requests          # per-sequence decode work
         + decode_kv_ms_per_1k * decode_context / 1000   # KV cache reads

Dummy batches cost ``step_ms``: they still run the MoE collective. How the
whole deployment's step follows (the slowest rank's cost):
:func:`~vllm_ascend_balance.replay.model.cost.lockstep_ms`. The defaults
and why: docs/replay.md, "What the cost model does".
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.fields import check_bounds, option

logger = init_logger(__name__)

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
