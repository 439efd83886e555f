# SPDX-License-Identifier: Apache-2.0
"""Which DP rank a request goes to, in the simulated engine
(:mod:`vllm_ascend_balance.replay.sim`).

Three rules, chosen by the replay's ``--routing`` (:data:`ROUTINGS`), and a pin:

- ``vllm``: vLLM's own DP load balancer, as the ``AsyncLLM`` front-end applies
  it: ``DPLBAsyncMPClient.get_core_engine_for_request``
  (``vllm/v1/engine/core_client.py``) of the *installed* vLLM is called
  unbound on :class:`_LBClientState`, a stand-in holding the attributes it
  reads and updates (``lb_engines``, ``engine_inflight``, ``core_engines``,
  ``eng_start_index``, ``client_count``, ``reqs_in_flight``), so the score
  (in 0.27.1 and 0.32.0: ``max(client_count * in-flight, waiting +
  running)`` plus a waiting penalty under KV pressure, with a rotating scan
  start and a local ``waiting += 1`` per routed request) is upstream's, not
  a copy. Its inputs are stale like upstream's: ``lb_engines`` is replaced
  by a snapshot of every scheduler's ``get_request_counts()`` and KV usage
  only every ``stats_interval_s`` of modeled time (the DP coordinator
  publishes engine stats to the front-end every 100 ms of wall time,
  ``DPCoordinatorProc`` ``min_stats_update_interval_ms``), and in between only
  the front-end's own increments move it. A finished request leaves
  ``engine_inflight`` as ``DPLBAsyncMPClient.process_engine_outputs`` does.
- ``round-robin``: request ``i`` goes to rank ``i % N`` (an external router).
- ``trtllm-adp``: TensorRT-LLM's attention-DP router
  (:mod:`.adp_routing`, one global queue) for every mode, not only the
  ``trtllm-adp`` peer's rows: the fleet hands requests to it instead of
  this class. It answers "how much of a rule's result is its placement":
  the same admission rule behind either router.
- a request with a ``rank`` (JSONL) is pinned to it under every rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.options import ROUTINGS

logger = init_logger(__name__)

__all__ = ["ROUTINGS", "Router"]


class _LBClientState:
    """The attributes of a ``DPLBAsyncMPClient`` that its
    ``get_core_engine_for_request`` reads and writes (one front-end client:
    ``client_count = 1``, ``client_index = 0``). Engine identities are the
    DP ranks themselves (upstream uses the engines' ZMQ identities, in rank
    order)."""

    def __init__(self, dp_size: int) -> None:
        self.client_count = 1
        self.client_index = 0
        self.core_engines: list[int] = list(range(dp_size))
        fields = _lb_fields()
        self.lb_engines: list[list[int | float]] = [
            [0, 0, 0.0][:fields] for _ in range(dp_size)
        ]
        self.engine_inflight: Counter[int] = Counter()
        self.streaming_reqs: set[str] = set()  # newer releases track sessions
        self.reqs_in_flight: dict[str, int] = {}
        self.eng_start_index = 0


def _lb_fields() -> int:
    """Fields per engine in the coordinator's stats: releases whose
    scheduler reports ``get_kv_cache_usage()`` publish it as a third field
    next to waiting and running (their balancer unpacks three)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    return 3 if hasattr(Scheduler, "get_kv_cache_usage") else 2


class _RequestStub:
    """The fields of an ``EngineCoreRequest`` the balancer reads."""

    __slots__ = ("request_id", "data_parallel_rank", "pooling_params", "resumable")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.data_parallel_rank: int | None = None
        self.pooling_params = None
        self.resumable = False  # read by newer releases (streaming sessions)


class Router:
    """Routes requests to DP ranks (see the module docstring).

    Args:
        routing: ``"vllm"`` or ``"round-robin"``.
        dp_size: number of DP ranks.
        stats_interval_s: modeled seconds between two stats snapshots that
            reach the ``vllm`` balancer.
    """

    def __init__(self, routing: str, dp_size: int, stats_interval_s: float) -> None:
        if routing not in ROUTINGS:
            raise ValueError(
                f"routing {routing!r} is not one of {', '.join(ROUTINGS)}: "
                f"pass --routing vllm, round-robin or trtllm-adp"
            )
        self.routing = routing
        self.dp_size = dp_size
        self.stats_interval_s = stats_interval_s
        self._next_publish = 0.0
        self._state = _LBClientState(dp_size)
        self._choose: Any = None
        if routing == "vllm":
            from vllm.v1.engine.core_client import DPLBAsyncMPClient

            self._choose = DPLBAsyncMPClient.get_core_engine_for_request

    def publish(self, now_s: float, schedulers: Sequence[Any]) -> None:
        """The coordinator's periodic stats snapshot, if one is due at
        ``now_s`` (modeled seconds); ``lb_engines[r] = [waiting, running,
        kv_cache_usage]`` as the coordinator publishes them."""
        if self._choose is None or now_s < self._next_publish:
            return
        self._next_publish = now_s + self.stats_interval_s
        counts = self._state.lb_engines
        for rank, sched in enumerate(schedulers):
            running, waiting = sched.get_request_counts()
            if len(counts[rank]) == 2:
                counts[rank] = [waiting, running]
            else:
                counts[rank] = [waiting, running, sched.get_kv_cache_usage()]

    def route(self, request_id: str, index: int, pinned: int | None) -> int:
        """The DP rank for request ``index`` (``pinned``: the JSONL rank)."""
        if self._choose is None:
            return index % self.dp_size if pinned is None else pinned
        # A pinned request still goes through the balancer's bookkeeping
        # (upstream passes ``data_parallel_rank`` through it).
        stub = _RequestStub(request_id)
        stub.data_parallel_rank = pinned
        return int(self._choose(self._state, stub))

    def finished(self, request_id: str) -> None:
        """A request finished (mirrors ``process_engine_outputs``)."""
        state = self._state
        engine = state.reqs_in_flight.pop(request_id, None)
        if engine is not None:
            state.engine_inflight[engine] -= 1
