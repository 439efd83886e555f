# SPDX-License-Identifier: Apache-2.0
"""A peer admission policy on the real deployment (replay only).

The peers' rules (:mod:`vllm_ascend_balance.replay.peers`) are models of
other projects' schedulers; on the real engine they run through the same
two places the balance gate uses, so that a real vLLM ``AsyncLLM`` DP
deployment can replay them beside ``off`` and balance:

- each rank's scheduler is composed with :class:`RealPeerSchedulerMixin`
  (:class:`~vllm_ascend_balance.replay.peers.base.PeerGateMixin` plus the
  rank's :class:`~vllm_ascend_balance.replay.peers.state.PassHistory`), so a
  hold answers True from the upstream seam
  ``Scheduler._should_stop_admitting_waiting()`` and ``schedule()`` itself
  is vLLM's, untouched; each pass is noted where vLLM asks
  ``DPEngineCoreProc._should_throttle_prefills()``, right before
  ``schedule()``, and recorded where the replay's executor receives its
  ``SchedulerOutput`` (``execute_model``), right after;
- right after ``DPEngineCoreProc._has_global_unfinished_reqs()`` (where
  the gate gathers, for the deadlock reasons in
  :mod:`vllm_ascend_balance.wiring.engine_hook`) every rank all-gathers its
  :class:`~vllm_ascend_balance.replay.peers.state.RankState` as 12 int64
  over vLLM's DP group (gloo), and its own policy instance decides; every
  instance decides the same from the same vector (the lock-step property
  ``tests/test_peer_policies.py`` checks). A policy whose hold covers
  chunks in flight also answers yes from ``_should_throttle_prefills()``
  (hence vLLM 0.27 or later, where the DP engine has it).

**What differs from the simulated engine** (docs/peer-policies.md): a peer
decides on the state at the end of the previous step (as the gate and
vLLM #51199 do), not after this step's arrivals as SGLang's and
TensorRT-LLM's in-pass collectives do; requests reach the ranks through
vLLM's front-end router (``--peer-router shared``); a policy's wall-clock
bounds read the modeled clock (the sum of the lock-stepped steps' modeled
milliseconds, the same on every rank).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from vllm_ascend_balance.replay.peers import (
    PassHistory,
    PeerGateMixin,
    PeerPolicy,
    RankState,
    make_policy,
    rank_state,
)
from vllm_ascend_balance.wiring.engine_hook import upstream_dp_engine
from vllm_ascend_balance.wiring.reach import can_throttle

HOOKS = ("_has_global_unfinished_reqs", "_should_throttle_prefills")
_ORIGINAL = "__vab_peer_original__"
#: ``RankState.fits`` None travels as this.
_UNKNOWN = -1


class RealPeerSchedulerMixin(PeerGateMixin):
    """One rank's peer policy instance and pass history, in front of vLLM's
    ``Scheduler`` (composed by :func:`peer_scheduler_class`)."""

    peer_spec: str = ""
    #: The last gathered vector (index = DP rank).
    peer_gathered: list[RankState] = []
    peer_clock: Callable[[], float] = staticmethod(lambda: 0.0)

    def _peer(self) -> tuple[PeerPolicy, PassHistory]:
        state = self.__dict__.get("_peer_state")
        if state is None:
            policy = make_policy(self.peer_spec)
            state = self._peer_state = (policy, PassHistory(policy.prefill_bs_window))
        return state

    def peer_throttles(self) -> bool:
        """This step's hold also covers chunks in flight."""
        policy, _ = self._peer()
        return self.peer_hold and policy.holds_chunks()

    def peer_before_pass(self) -> None:
        """Note the pass about to run (from the engine's
        ``_should_throttle_prefills()``, which vLLM asks right before each
        ``schedule()``): what the simulated engine's
        ``PeerStep.before_schedule`` notes."""
        policy, history = self._peer()
        had_work = history.before(self, self.peer_throttles())
        attempted = None if policy.holds_chunks() else self.peer_state()
        self._peer_pass = (had_work, attempted)

    def peer_after_pass(self, output: Any) -> None:
        """Record the pass that produced ``output`` (a ``SchedulerOutput``;
        from the replay executor's ``execute_model``, right after
        ``schedule()``): ``PeerStep.after_schedule``'s record."""
        _, history = self._peer()
        had_work, attempted = self.__dict__.pop("_peer_pass", (False, None))
        # schedule() has already advanced num_computed_tokens.
        extended = any(
            (req := self.requests.get(rid)) is not None  # type: ignore[attr-defined]
            and req.num_computed_tokens - n < req.num_prompt_tokens
            for rid, n in output.num_scheduled_tokens.items()
        )
        history.observe(
            self.peer_hold,
            had_work,
            len(output.scheduled_new_reqs),
            len(self.waiting),  # type: ignore[attr-defined]
            attempted=attempted,
            extended=extended,
        )

    def peer_state(self) -> RankState:
        """The rank's :class:`RankState` now."""
        return rank_state(self, self._peer()[1], self.peer_clock())

    def peer_decide(self, group: Any) -> None:
        """All-gather every rank's state over ``group`` and set this rank's
        :attr:`peer_hold` for the next step.

        Args:
            group: vLLM's DP group (``DPEngineCoreProc.dp_group``, gloo;
                read through ``size()``/``rank()``, so a stateless group
                works). One collective per call: each rank's
                :class:`RankState` as one int64 row of 12 fields (``fits``
                None as -1), gathered into ``(dp_size, 12)``.
        """
        policy, history = self._peer()
        mine = dataclasses.astuple(self.peer_state())
        row = torch.tensor(
            [_UNKNOWN if v is None else int(v) for v in mine], dtype=torch.int64
        )
        rows = [torch.empty_like(row) for _ in range(group.size())]
        dist.all_gather(rows, row, group=group)
        gathered = [_decode(r.tolist()) for r in rows]
        self.peer_gathered = gathered
        self.peer_hold = policy.decide(gathered)[group.rank()]
        # A rank that does not schedule next step reports no pass of its own.
        history.deferred = history.extended = False


def _decode(values: list[int]) -> RankState:
    fields = [f.name for f in dataclasses.fields(RankState)]
    data: dict[str, Any] = dict(zip(fields, values, strict=True))
    for name in ("deferred", "capacity_bound", "extended"):
        data[name] = bool(data[name])
    if data["fits"] == _UNKNOWN:
        data["fits"] = None
    return RankState(**data)


def peer_scheduler_class(base: type, spec: str, clock: Callable[[], float]) -> type:
    """:class:`RealPeerSchedulerMixin` over ``base`` for the ``--mode`` entry
    ``spec``; ``clock``: the rank's modeled clock, in seconds.

    Raises:
        PolicyError: ``spec`` does not parse, ``base`` has no seam, or its
            ``schedule()`` takes no ``throttle_prefills`` (before vLLM 0.27:
            no ``_should_throttle_prefills()`` to note a pass at).
    """
    make_policy(spec)  # malformed: fail at build time, on every rank alike
    from vllm_ascend_balance.replay.peers.base import PolicyError, compose_peer_gate

    compose_peer_gate(base)  # the seam check
    if not can_throttle(base):
        raise PolicyError(
            f"--mode {spec}: peer modes on the real engine need vLLM 0.27 or "
            f"later (DPEngineCoreProc._should_throttle_prefills); use "
            f"--engine sim with this vLLM"
        )
    name = f"Peer{base.__name__}"
    return type(
        name,
        (RealPeerSchedulerMixin, base),
        {"peer_spec": spec, "peer_clock": staticmethod(clock), "__qualname__": name},
    )


def _after_sync(original: Callable[..., bool]) -> Callable[..., bool]:
    @functools.wraps(original)
    def _has_global_unfinished_reqs(self: Any, local_unfinished: bool) -> bool:
        result = original(self, local_unfinished)
        self.scheduler.peer_decide(self.dp_group)
        return result

    setattr(_has_global_unfinished_reqs, _ORIGINAL, original)
    return _has_global_unfinished_reqs


def _throttle(original: Callable[[Any], bool]) -> Callable[[Any], bool]:
    @functools.wraps(original)
    def _should_throttle_prefills(self: Any) -> bool:
        self.scheduler.peer_before_pass()  # schedule() comes next
        return original(self) or self.scheduler.peer_throttles()

    setattr(_should_throttle_prefills, _ORIGINAL, original)
    return _should_throttle_prefills


def install_peer_scheduler(
    vllm_config: Any, spec: str, clock: Callable[[], float]
) -> None:
    """Compose the peer's scheduler over the class ``vllm_config`` resolves to
    and hook the engine (in the engine process, from the replay's executor,
    before vLLM builds the scheduler)."""
    sched_config = vllm_config.scheduler_config
    current = sched_config.scheduler_cls
    base = current if isinstance(current, type) else sched_config.get_scheduler_cls()
    sched_config.scheduler_cls = peer_scheduler_class(base, spec, clock)
    install_peer_hooks()


def install_peer_hooks() -> None:
    """Hook vLLM's ``DPEngineCoreProc`` in this engine process (idempotent):
    the peer's gather after the cross-rank sync; the pass noted and the
    chunk hold in ``_should_throttle_prefills``.

    Raises:
        TypeError: the DP engine has no such method (before vLLM 0.27;
            :func:`peer_scheduler_class` refuses such a release first).
    """
    from vllm.v1.engine.core import DPEngineCoreProc

    base = upstream_dp_engine(DPEngineCoreProc)
    for name, wrap in zip(HOOKS, (_after_sync, _throttle), strict=True):
        current = base.__dict__.get(name)
        if current is None:
            raise TypeError(f"{base.__qualname__} has no {name}()")
        if not hasattr(current, _ORIGINAL):
            setattr(base, name, wrap(current))
