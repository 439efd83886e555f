# SPDX-License-Identifier: Apache-2.0
"""The balance admission gate, as a mixin over any vLLM ``Scheduler``.

Composed at activation time onto the class the configuration would use
(``Scheduler``, ``AsyncScheduler`` or a ``scheduler_cls`` subclass), e.g.
``type("BalanceAsyncScheduler", (BalanceSchedulerMixin, AsyncScheduler), {})``.
It overrides ``Scheduler._should_stop_admitting_waiting()``, the seam added
by ``upstream_patch/``; ``schedule()`` itself is upstream's, untouched. The
seam is asked after upstream's own admission-cap check, which stays inline
in the WAITING loop: the gate can hold admission, never admit past the cap.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from vllm_ascend_balance.gate import bound
from vllm_ascend_balance.gate.collectives import EXCHANGES, natural_collective
from vllm_ascend_balance.gate.holds import HoldLedger
from vllm_ascend_balance.gate.policies import OPEN, Decision
from vllm_ascend_balance.gate.seam import SEAM
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.gate.signals import admission_cap, has_held_waiting
from vllm_ascend_balance.logger import init_logger

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

logger = init_logger(__name__)

__all__ = [
    "SEAM",
    "BalanceSchedulerMixin",
    "admission_cap",
    "gated_class",
    "has_held_waiting",
]


class BalanceSchedulerMixin:
    """The gate on one rank: one exchange per active step, one decision.

    The engine core injects ``dp_group`` and calls :meth:`admission_gather`
    once per active step, right after the DP sync
    (:func:`~vllm_ascend_balance.wiring.engine_hook.install_gather_hook`).
    The gather exchanges this rank's signals, decides for the next
    ``schedule()`` (:func:`~vllm_ascend_balance.gate.bound.step`: the
    policy's decision, then the gate's bounds) and caches it: the seam then
    reads one attribute. Every rank receives the same view and keeps the
    same run state (restarted on every member when the DP group object is
    replaced, e.g. by elastic EP ``reinitialize_distributed``), so every
    rank decides the same.

    With the contract (``balance_policy`` ``leader_at_cap``, the default)
    the decision is ``max(gathered len(running)) == admission_cap(self)``:
    ``==``, not ``>=`` and not "catch up to the leader". A held step admits
    no *new* request; requests that already hold KV blocks
    (``kv_holding_waiting``) drain, as under ``PauseState.PAUSED_NEW``, and
    paused streaming sessions do not make a rank the leader (vllm-ascend's
    gate behaves the same).

    Attributes:
        balance_settings: the gate's settings (a class attribute set by
            activation, :class:`~vllm_ascend_balance.gate.settings.GateSettings`).
        dp_group: the DP ``ProcessGroup`` (gloo/HCCL), injected by the engine.
        balance_gathered: the last all-gathered payload, int64, shape
            ``(dp_size,)`` for the contract (``len(running)`` per DP rank),
            else ``(dp_size, quantities)``; None before the first gather and
            with ``all_reduce_max``.
        balance_decision: the decision for the next ``schedule()``.
        balance_frozen: ``balance_decision.hold_waiting``.
        balance_frozen_run: consecutive steps that held admission so far
            (counted by the frozen-run bound, where set).
        balance_gathers: gathers done (one per active step).
        balance_frozen_gathers: gathers whose decision held admission.
        balance_fail_opens: gathers a bound opened (the policy would hold).
        balance_reasons: gathers per decision reason.
        balance_gather_seconds: wall time spent in the exchange, s.
        balance_last_gather_s: duration of the last exchange, s.
        balance_spread: ``max - min`` of the last gathered running counts.
    """

    balance_settings: ClassVar[GateSettings] = GateSettings()
    dp_group: ProcessGroup | None = None
    balance_gathered: torch.Tensor | None = None
    balance_decision: Decision = OPEN
    balance_frozen: bool = False
    balance_frozen_run: int = 0
    balance_gathers: int = 0
    balance_frozen_gathers: int = 0
    balance_fail_opens: int = 0
    balance_gather_seconds: float = 0.0
    balance_last_gather_s: float = 0.0
    balance_spread: int = 0
    _balance_plan: ClassVar[bound.Plan | None] = None
    _balance_state: bound.GateState | None = None
    _balance_group: Any = None
    _balance_payload: tuple[int, ...] | None = None
    _balance_ledger: HoldLedger | None = None
    _balance_tripped: bool = False
    _balance_held: set[str] | None = None
    _balance_reasons: dict[str, int] | None = None

    @classmethod
    def balance_plan(cls) -> bound.Plan:
        """The class's settings resolved against its policy (made once)."""
        plan = cls.__dict__.get("_balance_plan")
        if plan is None:
            plan = bound.plan(cls.balance_settings)
            cls._balance_plan = plan
        return plan

    @property
    def balance_reasons(self) -> dict[str, int]:
        if self._balance_reasons is None:
            self._balance_reasons = {}
        return self._balance_reasons

    def _ledger(self) -> HoldLedger:
        ledger = self._balance_ledger
        if ledger is None:
            ledger = self._balance_ledger = HoldLedger()
        return ledger

    def admission_payload(self) -> tuple[int, ...]:
        """This rank's quantities for the next exchange, in the plan's
        layout order (:class:`~vllm_ascend_balance.gate.signals.Layout`),
        after the step just run is added to the hold ledger. Computed once
        per gather (the simulated engine posts it before gathering)."""
        payload = self._balance_payload
        if payload is None:
            self._ledger().close_step(self)
            cap = admission_cap(self)
            payload = self._balance_payload = self.balance_plan().layout.read(self, cap)
        return payload

    def balance_hold_age(self) -> int:
        """The ``hold_age`` quantity: the most steps any request this rank
        could hold next step was held
        (:meth:`~vllm_ascend_balance.gate.holds.HoldLedger.oldest`)."""
        return self._ledger().oldest(self)

    def admission_gather(self) -> None:
        """Exchange this rank's signals over ``dp_group`` and decide for the
        next ``schedule()``. No-op without a group."""
        group = self.dp_group
        if group is None:
            self._balance_payload = None
            return
        plan = self.balance_plan()
        state = self._balance_state
        if state is None or group is not self._balance_group:
            self._balance_group = group
            state = plan.initial
        local = self.admission_payload()
        self._balance_payload = None
        cap = admission_cap(self)
        collective = self.balance_settings.collective or natural_collective(
            plan.policy.collective
        )
        start = time.perf_counter()
        view = EXCHANGES[collective](self, group, plan.layout, local, cap)
        elapsed = time.perf_counter() - start
        self._balance_check_frozen_step()
        state, decision, failed_open = bound.step(plan, state, view)
        self._balance_state = state
        self.balance_decision = decision
        self.balance_frozen = frozen = decision.hold_waiting
        self.balance_frozen_run = state.frozen_run
        self._balance_held = self._running_ids() if frozen else None
        self.balance_gathers += 1
        self.balance_frozen_gathers += frozen
        self.balance_fail_opens += failed_open
        reasons = self.balance_reasons
        reasons[decision.reason] = reasons.get(decision.reason, 0) + 1
        self.balance_last_gather_s = elapsed
        self.balance_gather_seconds += elapsed
        self.balance_spread = view.leader - view.lowest

    def balance_throttles(self) -> bool:
        """Run this step's ``schedule()`` with ``throttle_prefills=True``?
        Yes when the decision defers chunks and this rank has a chunk to
        defer and a decode to run. Asked right before ``schedule()``
        (:mod:`~vllm_ascend_balance.wiring.throttle_hook`)."""
        if not self.balance_decision.hold_chunks:
            return False
        return self._ledger().note_deferred(self)

    def _running_ids(self) -> set[str]:
        return {
            r.request_id
            for queue in (
                self.running,  # type: ignore[attr-defined]
                getattr(self, "kv_holding_waiting", ()),
            )
            for r in queue
        }

    def _balance_check_frozen_step(self) -> None:
        """The run-time tripwire, run at each gather (off the ``schedule()``
        path): after a step the gate held, every request running now must
        have been running (or holding KV blocks) then. A request new to
        ``running`` means the scheduler class does not reach the seam: one
        error per process, naming the class."""
        held = self._balance_held
        if held is None or self._balance_tripped:
            return
        running = self.running  # type: ignore[attr-defined]
        admitted = [r.request_id for r in running if r.request_id not in held]
        if admitted:
            self._balance_tripped = True
            logger.error(
                "balance scheduling: %s admitted %d request(s) from WAITING "
                "on a step the gate had frozen: its schedule() does not "
                "consult Scheduler.%s(); the gate has no effect on this "
                "rank (use a scheduler_cls whose schedule() calls "
                "super().schedule() or the seam)",
                gated_class(type(self)).__qualname__,
                len(admitted),
                SEAM,
            )

    def _should_stop_admitting_waiting(self) -> bool:
        """True while the gate holds admission (the ledger notes the hold);
        otherwise whatever the next class in the MRO says (a
        ``scheduler_cls`` may add its own rule)."""
        if self.balance_frozen:
            self._ledger().note_waiting_held(self)
            return True
        return super()._should_stop_admitting_waiting()  # type: ignore[misc]


def gated_class(cls: type) -> type:
    """The scheduler class the mixin was composed onto (the class after
    :class:`BalanceSchedulerMixin` in ``cls``'s MRO)."""
    mro = cls.__mro__
    return mro[mro.index(BalanceSchedulerMixin) + 1]
