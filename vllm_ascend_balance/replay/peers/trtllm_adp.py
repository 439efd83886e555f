# SPDX-License-Identifier: Apache-2.0
"""TensorRT-LLM's attention-DP balance (``AttentionDpConfig.enable_balance``).

Rule, from ``tensorrt_llm/_torch/pyexecutor/py_executor.py``
(``PyExecutor._balance_adp_requests``, NVIDIA/TensorRT-LLM#6061; defaults in
``tensorrt_llm/llmapi/llm_args.py``, ``AttentionDpConfig``): every iteration
each rank all-gathers how many context and generation requests it
scheduled (a rank with nothing active counts one dummy generation request).
Then, with one pair of counters that every rank advances alike:

- every rank has context and none is full: the ranks are synchronised and
  the waiting counter resets; if every rank also has generation requests,
  context is held ``batching_wait_iters`` iterations to batch more, then
  released once (the batching counter is not reset otherwise);
- otherwise context is held, until ``timeout_iters`` iterations passed or a
  rank has no generation request (a hold never leaves a rank with an empty
  batch); with the low-occupancy path of NVIDIA/TensorRT-LLM#17700
  (``TLLM_ADP_BALANCE_MIN_GENERATION_REQUESTS`` M > 0) the timeout is
  ``TLLM_ADP_BALANCE_LOW_OCCUPANCY_TIMEOUT_ITERS`` instead while the least
  busy rank has fewer than M real generation requests (the pad dummy not
  counted).

The context counts are what the rank's scheduler fitted this iteration (the
balance runs after the capacity and micro-batch schedulers): in-flight
chunks plus the new requests that pass the slot, token-budget and KV checks
(:attr:`RankState.admissible`). Requests reach the ranks through
TensorRT-LLM's own attention-DP router (``DefaultADPRouter``, one global
queue: :mod:`~vllm_ascend_balance.replay.sim.adp_routing`), not vLLM's
front-end balancer.

A hold drops the context requests of every rank for the iteration, in-flight
chunked context included (``holds_in_flight_chunks``); generation requests
always run.

``--mode trtllm-adp[:T[:W[:M[:L]]]]``: T = ``timeout_iters`` (default 50), W =
``batching_wait_iters`` (default 10), M =
``TLLM_ADP_BALANCE_MIN_GENERATION_REQUESTS`` (default 0: off), L =
``TLLM_ADP_BALANCE_LOW_OCCUPANCY_TIMEOUT_ITERS`` (default 0, at most T).
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_ascend_balance.replay.peers.base import (
    UNBOUNDED,
    PeerPolicy,
    PolicyError,
    RankState,
    parse_ints,
)

DEFAULT_TIMEOUT_ITERS = 50
DEFAULT_BATCHING_WAIT_ITERS = 10


def context_requests(state: RankState) -> int:
    """Context requests the rank's scheduler fitted: in-flight chunks plus
    the new requests that pass its admission checks."""
    return state.prefilling + state.admissible


def generation_requests(state: RankState) -> int:
    """Decoding requests, or TensorRT-LLM's one dummy on an idle rank."""
    if state.running == 0 and state.waiting == 0:
        return 1
    return state.running - state.prefilling


class TrtllmAttentionDpBalance(PeerPolicy):
    name = "trtllm-adp"
    source = (
        "NVIDIA/TensorRT-LLM py_executor.py _balance_adp_requests (#6061, #17700), "
        "scheduler/adp_router.py DefaultADPRouter"
    )
    usage = (
        "trtllm-adp[:TIMEOUT_ITERS[:BATCHING_WAIT_ITERS"
        "[:MIN_GEN_REQUESTS[:LOW_OCCUPANCY_TIMEOUT_ITERS]]]]"
    )
    holds_in_flight_chunks = True
    routing = "trtllm-adp"

    def __init__(self, params: str = "") -> None:
        # The source's validator accepts 0 for both (0 = no hold of that kind).
        (
            self.timeout_iters,
            self.batching_wait_iters,
            self.min_gen_requests,
            self.low_occupancy_timeout_iters,
        ) = parse_ints(
            params,
            type(self),
            [
                ("TIMEOUT_ITERS", 0, UNBOUNDED, DEFAULT_TIMEOUT_ITERS),
                ("BATCHING_WAIT_ITERS", 0, UNBOUNDED, DEFAULT_BATCHING_WAIT_ITERS),
                ("MIN_GEN_REQUESTS", 0, UNBOUNDED, 0),
                ("LOW_OCCUPANCY_TIMEOUT_ITERS", 0, UNBOUNDED, 0),
            ],
        )
        if self.low_occupancy_timeout_iters > self.timeout_iters:
            # The source refuses it: a longer wait when less occupied
            # inverts the feature.
            raise PolicyError(
                f"--mode {self.name}:{params}: LOW_OCCUPANCY_TIMEOUT_ITERS must be "
                f"in [0, TIMEOUT_ITERS={self.timeout_iters}], got "
                f"{self.low_occupancy_timeout_iters}"
            )
        self.waiting_iters = 0
        self.batching_iters = 0

    def _hold(self, gathered: Sequence[RankState]) -> bool:
        ctx = [context_requests(s) for s in gathered]
        gen = [generation_requests(s) for s in gathered]
        all_gen = all(g > 0 for g in gen)
        free = all(g < s.cap for g, s in zip(gen, gathered, strict=True))
        if free and all(c > 0 for c in ctx):
            self.waiting_iters = 0
            if not all_gen:
                return False
            if self.batching_iters < self.batching_wait_iters:
                self.batching_iters += 1
                return True
            self.batching_iters = 0
            return False
        self.waiting_iters += 1
        timeout = self.timeout_iters
        if self.min_gen_requests and (
            min(s.running - s.prefilling for s in gathered) < self.min_gen_requests
        ):
            timeout = self.low_occupancy_timeout_iters
        if self.waiting_iters >= timeout or not all_gen:
            self.waiting_iters = 0
            return False
        return True

    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        return (self._hold(gathered),) * len(gathered)
