# SPDX-License-Identifier: Apache-2.0
"""Known-bad gates for the lock-step harness (:mod:`tests.support.lockstep`):
each breaks one property, so its negative control shows that the property
is checked. A gate variant is a mixin put in front of the package's class
(:func:`with_gate`); a transport variant is a DP group object
(:class:`StaleGroup`, :func:`local_column_group`); a settings variant
(a bound one step late) is :func:`tests.support.lockstep.one_more`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import torch

from tests.support.lockstep import Gate, Group, Make, compose
from vllm_ascend_balance.gate.holds import HoldLedger
from vllm_ascend_balance.gate.policies import Decision, adp_balance
from vllm_ascend_balance.gate.policies.base import Decide
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.gate.signals import View
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard


def with_gate(gate: type, make: Make = compose) -> Make:
    """``gate`` in front of the class ``make`` builds (the same settings)."""

    @functools.cache
    def made(base: type, settings: Gate) -> type:
        return type(f"{gate.__name__}{base.__name__}", (gate, make(base, settings)), {})

    return made


def with_decide(decide: Decide, make: Make = compose) -> Make:
    """The class ``make`` builds with its policy's decision replaced by
    ``decide`` (the same name, knobs, signals and bounds): a known-bad
    rule."""

    @functools.cache
    def made(base: type, settings: Gate) -> type:
        cls = make(base, settings)
        plan = cls.balance_plan()
        policy = dataclasses.replace(plan.policy, decide=decide)
        bad = dataclasses.replace(plan, policy=policy)
        return type(f"Bad{cls.__name__}", (cls,), {"_balance_plan": bad})

    return made


_T, _W = adp_balance.TIMEOUT.key, adp_balance.BATCHING_WAIT.key
_HOLD = Decision(True, True, "bad")
_OPEN = Decision(False, False, "bad")


def adp_batching_never_reset(
    state: tuple[int, int], view: View, knobs: Mapping[str, Any]
) -> tuple[tuple[int, int], Decision]:
    """``adp_balance`` whose batching counter stays at W after its first
    batching wait: synchronised ranks never wait to batch again."""
    waiting, batching = state
    if view.all_context and view.all_decoding:
        if batching < knobs[_W]:
            return (0, batching + 1), _HOLD
        return (0, batching), _OPEN
    return adp_balance.decide(state, view, knobs)


def adp_timeout_late(
    state: tuple[int, int], view: View, knobs: Mapping[str, Any]
) -> tuple[tuple[int, int], Decision]:
    """``adp_balance`` opening on its timeout one step late (``>`` for
    ``>=``)."""
    waiting, batching = state
    if not view.all_context and view.all_decoding and waiting + 1 == knobs[_T]:
        return (waiting + 1, batching), _HOLD
    return adp_balance.decide(state, view, knobs)


def adp_holds_without_decodes(
    state: tuple[int, int], view: View, knobs: Mapping[str, Any]
) -> tuple[tuple[int, int], Decision]:
    """``adp_balance`` that ignores "some rank has no generation work"
    while unsynchronised: it holds a rank that then has nothing to run."""
    waiting, batching = state
    if not view.all_context and not view.all_decoding:
        waiting += 1
        if waiting >= knobs[_T]:
            return (0, batching), _OPEN
        return (waiting, batching), _HOLD
    return adp_balance.decide(state, view, knobs)


class LeakyGate(BalanceSchedulerMixin):
    """The seam ignores the decision (admits while held)."""

    def _should_stop_admitting_waiting(self) -> bool:
        return False


class ChunkAtCapUncountedLedger(HoldLedger):
    """The old ``throttled``: a chunk deferred on a rank at its cap is not
    counted (only chunks below the cap were)."""

    def note_deferred(self, scheduler: Any) -> bool:
        deferring = super().note_deferred(scheduler)
        if len(scheduler.running) >= scheduler.max_num_running_reqs:
            self.deferred = ()
        return deferring


class ChunkAtCapUncounted(BalanceSchedulerMixin):
    """The gate keeping its holds in :class:`ChunkAtCapUncountedLedger`."""

    def _ledger(self) -> HoldLedger:
        if self._balance_ledger is None:
            self._balance_ledger = ChunkAtCapUncountedLedger()
        return self._balance_ledger


class KeepsCapacityBoundLedger(HoldLedger):
    """Throttles without clearing vLLM's ``prefill_capacity_bound``: after a
    step that held admission with requests waiting, vLLM defers nothing."""

    def note_deferred(self, scheduler: Any) -> bool:
        bound = getattr(scheduler, "prefill_capacity_bound", False)
        deferring = super().note_deferred(scheduler)
        scheduler.prefill_capacity_bound = bound
        self.saved_capacity_bound = None
        return deferring


class KeepsCapacityBound(BalanceSchedulerMixin):
    def _ledger(self) -> HoldLedger:
        if self._balance_ledger is None:
            self._balance_ledger = KeepsCapacityBoundLedger()
        return self._balance_ledger


class ChunksWhenHeld(BalanceSchedulerMixin):
    """Holds chunks on every step that holds admission (``throttled``'s
    old "closed by default": a chunk waits although no rank is held)."""

    def balance_throttles(self) -> bool:
        if not self.balance_frozen:
            return False
        return self._ledger().note_deferred(self)


class NoRestart(BalanceSchedulerMixin):
    """Keeps its run state when the DP group object is replaced."""

    def admission_gather(self) -> None:
        self._balance_group = self.dp_group
        super().admission_gather()


class CountsEveryGather(BalanceSchedulerMixin):
    """``balance_frozen_gathers`` counted on every gather."""

    def admission_gather(self) -> None:
        super().admission_gather()
        self.balance_frozen_gathers += not self.balance_frozen


class PerRankCounter(BalanceSchedulerMixin):
    """The frozen-run bound kept per rank: a held gather counts only while
    this rank has requests waiting, so ranks open on different steps. Put
    in front of an unbounded gate; ``local_bound`` is N."""

    local_bound: int = 1
    _local_run: int = 0

    def admission_gather(self) -> None:
        super().admission_gather()
        if not self.balance_frozen:
            self._local_run = 0
        elif self._local_run >= self.local_bound:
            self.balance_frozen = False
            self.balance_fail_opens += 1
            self._local_run = 0
        elif self.waiting:  # type: ignore[attr-defined]
            self._local_run += 1


def per_rank_counter(base: type, gate: Gate) -> type:
    """:class:`PerRankCounter` with N = the gate's ``max_frozen_steps``,
    over the same policy unbounded."""
    assert gate.max_frozen_steps is not None
    unbounded = dataclasses.replace(gate, max_frozen_steps=None)
    return _per_rank(base, unbounded, gate.max_frozen_steps)


@functools.cache
def _per_rank(base: type, unbounded: Gate, bound: int) -> type:
    return type(
        f"PerRankCounter{base.__name__}",
        (PerRankCounter, compose(base, unbounded)),
        {"local_bound": bound},
    )


class StaleGroup(BoardGroup):
    """Rank 1 receives the previous exchange's vector (it decides on a
    stale view); the first exchange on a group is served as posted."""

    previous: torch.Tensor | None = None

    def allgather(
        self, output_tensor_lists: Any, input_tensor_list: Any, opts: Any = None
    ) -> None:
        current = self.board.vector.clone()
        super().allgather(output_tensor_lists, input_tensor_list, opts)
        (slots,) = output_tensor_lists
        previous = self.previous
        if previous is not None and previous.shape == current.shape:
            for slot, row in zip(slots, previous.unbind(0), strict=True):
                slot.copy_(row.reshape(slot.shape))
        self.previous = current


def stale_rank_one(board: GatherBoard, rank: int) -> Any:
    return StaleGroup(board, rank) if rank == 1 else BoardGroup(board, rank)


def local_column_group(column: int) -> Group:
    """Every rank sees the other ranks' ``column`` as 0: it decides on its
    own value of that quantity (e.g. a per-rank hold age)."""

    class LocalColumn(BoardGroup):
        def allgather(
            self, output_tensor_lists: Any, input_tensor_list: Any, opts: Any = None
        ) -> None:
            super().allgather(output_tensor_lists, input_tensor_list, opts)
            (slots,) = output_tensor_lists
            for rank, slot in enumerate(slots):
                if rank != self.dp_rank:
                    slot.view(-1)[column] = 0

    return LocalColumn
