# SPDX-License-Identifier: Apache-2.0
"""The balance admission gate, as a mixin over any vLLM ``Scheduler``.

Composed at activation time onto the class the configuration would use
(``Scheduler``, ``AsyncScheduler`` or a ``scheduler_cls`` subclass), e.g.
``type("BalanceAsyncScheduler", (BalanceSchedulerMixin, AsyncScheduler), {})``.
It overrides ``Scheduler._should_stop_admitting_waiting()``, the seam added
by ``upstream_patch/``; ``schedule()`` itself is upstream's, untouched (the
run-time tripwire runs at the gather, not in ``schedule()``). The seam is
asked only after upstream's own admission-cap check, which stays inline in
the WAITING loop, and its default returns False: the gate can close
admission, never admit past the cap.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from vllm_ascend_balance.gate.collectives import EXCHANGES
from vllm_ascend_balance.gate.policies import (
    DEFAULT_ALIGN_MIN_LOAD,
    GatePolicy,
    Gathered,
    Knobs,
    make_policy,
)
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.observability.held_wait import HELD_QUEUES
from vllm_ascend_balance.wiring.config import DEFAULT_COLLECTIVE, DEFAULT_POLICY

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

logger = init_logger(__name__)

SEAM = "_should_stop_admitting_waiting"


def has_held_waiting(scheduler: Any) -> bool:
    """Whether any queue the gate holds (:data:`HELD_QUEUES`) is non-empty:
    the waiting count every rule of this package reads."""
    return any(getattr(scheduler, name, None) for name in HELD_QUEUES)


def admission_cap(scheduler: Any) -> int:
    """The cap the installed release admits WAITING requests by:
    ``max_num_active_reqs`` where the release has it, else
    ``max_num_running_reqs`` (mirrors the stop condition in upstream's
    ``Scheduler.schedule()``)."""
    cap = getattr(scheduler, "max_num_active_reqs", None)
    return scheduler.max_num_running_reqs if cap is None else cap


class BalanceSchedulerMixin:
    """Leader-at-cap => global freeze of admission from WAITING.

    The engine core injects ``dp_group`` and calls :meth:`admission_gather` once
    per active step
    (:func:`~vllm_ascend_balance.wiring.engine_hook.install_gather_hook`).
    The gather sets :attr:`balance_frozen` for the next ``schedule()``:
    ``max(gathered len(running)) == admission_cap(self)`` (``==`` by contract,
    not ``>=`` and not "catch up to the leader"). Every rank sees the same
    gathered vector, so every rank takes the same decision.

    Two consequences of the contract, kept on purpose (vllm-ascend's gate
    behaves the same): the payload is ``len(running)``, so paused streaming
    sessions, which upstream's own stop condition also counts, do not make a
    rank the leader; and a frozen step admits no *new* request. Where the
    release keeps requests that already hold KV blocks (e.g. after an async
    KV load) in their own queue (``kv_holding_waiting``), the seam lets
    those drain, as ``PauseState.PAUSED_NEW`` does: holding them admits no
    new work but keeps their blocks allocated on the frozen rank
    (``tests/test_gate_scope.py``).

    The freeze condition and its bounds are the :attr:`balance_policy`'s
    (:mod:`~vllm_ascend_balance.gate.policies`, one class per policy, chosen by
    name): what a rank adds to the payload and the decision from the
    gathered summary, with its run state (a function of the gathered values
    alone, restarted on every member when the DP group object is replaced,
    e.g. by elastic EP ``reinitialize_distributed``). With an opt-in rule
    the payload grows to ``[len(running), *flags]`` (0/1 flags,
    :mod:`~vllm_ascend_balance.gate.collectives`).

    Attributes:
        dp_group: the DP ``ProcessGroup`` (gloo/HCCL), injected by the engine.
        balance_gathered: last gathered running counts, int64 tensor of shape
            ``(dp_size,)``, index = DP rank (with the opt-in rules:
            ``(dp_size, 1 + flags)``, the flags after column 0); None before
            the first gather (and always with ``"all_reduce_max"``, which
            gathers no vector).
        balance_frozen: whether admission from WAITING is frozen this step.
        balance_max_frozen_steps: the bound N, or None (unbounded contract);
            a class attribute set by activation.
        balance_max_held_steps: the held-step bound N, or None; a class
            attribute set by activation (never together with the frozen
            bound).
        balance_policy: a name of :data:`~vllm_ascend_balance.gate.policies.POLICIES`
            (``"leader_at_cap"``, the contract, by default); a class attribute
            set by activation, as are ``balance_align_window`` (read by
            ``"aligned"`` and ``"cohort"``; None: the policy's default) and
            ``balance_align_min_load`` (read by ``"aligned"`` only).
        balance_collective: how the group's max/min running count is
            learnt (:mod:`~vllm_ascend_balance.gate.collectives`): ``"all_gather"``
            (the contract) or the opt-in log-depth ``"all_reduce_max"``; a
            class attribute set by activation.
        balance_frozen_run: consecutive frozen gathers the policy's bound
            counts so far (reset by an open or fail-open gather and by a new
            DP group).
        balance_gathers: number of gathers done (one per active step).
        balance_frozen_gathers: number of gathers that decided to freeze.
        balance_fail_opens: number of gathers the bound opened (leader at
            the cap, gate open anyway).
        balance_gather_seconds: wall time spent in the gather collective, s.
        balance_last_gather_s: duration of the last gather collective, s.
        balance_spread: ``max - min`` of the last gathered running counts.
    """

    dp_group: ProcessGroup | None = None
    balance_gathered: torch.Tensor | None = None
    balance_frozen: bool = False
    balance_max_frozen_steps: ClassVar[int | None] = None
    balance_max_held_steps: ClassVar[int | None] = None
    balance_policy: ClassVar[str] = DEFAULT_POLICY
    balance_align_window: ClassVar[int | None] = None
    balance_align_min_load: ClassVar[float] = DEFAULT_ALIGN_MIN_LOAD
    balance_collective: ClassVar[str] = DEFAULT_COLLECTIVE
    balance_frozen_run: int = 0
    balance_gathers: int = 0
    balance_frozen_gathers: int = 0
    balance_fail_opens: int = 0
    balance_gather_seconds: float = 0.0
    balance_last_gather_s: float = 0.0
    balance_spread: int = 0
    _balance_group: Any = None
    _balance_tripped: bool = False
    _balance_held: set[str] | None = None
    _balance_rule: GatePolicy | None = None
    _balance_slots: list[torch.Tensor]
    _balance_local: torch.Tensor

    def admission_gather(self) -> None:
        """All-gather ``len(self.running)`` over ``dp_group`` (one collective;
        or the :attr:`balance_collective` chosen) and recompute
        :attr:`balance_frozen`. No-op without a group.

        Buffers are sized from the group itself, so a group replaced at run
        time (elastic EP ``reinitialize_distributed``) keeps working; a
        replaced group also restarts the bounded-freeze run (class
        docstring).
        """
        group = self.dp_group
        if group is None:
            return
        rule = self._balance_policy()
        if group is not self._balance_group:
            self._balance_group = group
            rule.restart()
        exchange = EXCHANGES[self.balance_collective]
        cap = admission_cap(self)
        running, flags = self.admission_payload()
        start = time.perf_counter()
        leader, lowest, anyone = exchange(self, group, running, flags)
        elapsed = time.perf_counter() - start
        self._balance_check_frozen_step()
        seen = Gathered.of(leader, lowest, cap, anyone, rule.columns)
        frozen = self._balance_decide(seen)
        self.balance_frozen = frozen
        self.balance_frozen_run = rule.run
        self._balance_held = (
            {
                r.request_id
                for queue in (
                    self.running,  # type: ignore[attr-defined]
                    getattr(self, "kv_holding_waiting", ()),
                )
                for r in queue
            }
            if frozen
            else None
        )
        self.balance_gathers += 1
        self.balance_frozen_gathers += frozen
        self.balance_fail_opens += rule.failed_open
        self.balance_last_gather_s = elapsed
        self.balance_gather_seconds += elapsed
        self.balance_spread = leader - lowest

    def admission_payload(self) -> tuple[int, tuple[int, ...]]:
        """What this rank contributes to the gather: ``len(running)`` and
        the policy's flags
        (:meth:`~vllm_ascend_balance.gate.policies.leader_at_cap.GatePolicy.flags`;
        none for the contract), where "waiting" means a queue the gate holds
        (:data:`HELD_QUEUES`: ``waiting``, and ``skipped_waiting`` /
        ``async_kv_waiting`` where the release has them) is non-empty, and,
        for a policy that reads chunks, whether a long prefill chunk runs
        here next step (:meth:`_balance_riding`) and any is in flight."""
        running = len(self.running)  # type: ignore[attr-defined]
        rule = self._balance_policy()
        if not rule.sends_flags:
            return running, ()
        waiting = has_held_waiting(self)
        cap = admission_cap(self)
        if rule.reads_chunks:
            return running, rule.flags(
                running, waiting, cap, self._balance_riding(), self._balance_pending()
            )
        return running, rule.flags(running, waiting, cap)

    def _balance_pending(self) -> bool:
        """A running request here has prompt left to prefill (``throttled``)."""
        running = self.running  # type: ignore[attr-defined]
        return any(r.num_computed_tokens < r.num_prompt_tokens for r in running)

    def balance_throttles(self) -> bool:
        """Run this step's ``schedule()`` with ``throttle_prefills=True``?
        Yes when frozen under a policy that holds chunks (``throttled``);
        then ``prefill_capacity_bound`` is cleared too: vLLM sets it after a
        step the seam held, and while set defers nothing. Asked right before
        ``schedule()`` (:mod:`~vllm_ascend_balance.wiring.throttle_hook`)."""
        if not (self.balance_frozen and self._balance_policy().holds_chunks):
            return False
        self.prefill_capacity_bound = False
        return True

    def _balance_riding(self) -> bool:
        """Whether this rank's next step runs a long prefill chunk anyway:
        a running request with at least half the per-step token budget
        (``max_num_scheduled_tokens``, upstream's chunked-prefill budget) of
        its prompt still to compute. Read by ``"cohort"`` only."""
        half = self.max_num_scheduled_tokens // 2  # type: ignore[attr-defined]
        return any(
            r.num_prompt_tokens - r.num_computed_tokens >= half
            for r in self.running  # type: ignore[attr-defined]
        )

    def _balance_policy(self) -> GatePolicy:
        """This scheduler's policy object (it holds the run state), made on
        first use from the class's settings."""
        rule = self._balance_rule
        if rule is None:
            rule = self._balance_rule = make_policy(
                self.balance_policy,
                Knobs(
                    self.balance_max_frozen_steps,
                    self.balance_max_held_steps,
                    self.balance_align_window,
                    self.balance_align_min_load,
                ),
            )
        return rule

    def _balance_decide(self, seen: Gathered) -> bool:
        """The policy's decision on the gathered summary (the same on every
        rank, so every rank decides the same)."""
        return self._balance_policy().decide(seen)

    def _balance_check_frozen_step(self) -> None:
        """The run-time tripwire, run at each gather (off the ``schedule()``
        path): if the previous gather froze the gate, every request running
        now must have been running (or holding KV blocks in
        ``kv_holding_waiting``) then, since a frozen step admits no new
        request. A request that is new to ``running``
        means the scheduler class does not reach the seam: one error per
        process, naming the class."""
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
        """True while frozen; otherwise whatever the next class in the MRO
        says (upstream's default: False; a ``scheduler_cls`` may add its own
        policy). Asked once per ``schedule()`` call, so plain ``super()``
        costs nothing worth caching."""
        return self.balance_frozen or super()._should_stop_admitting_waiting()  # type: ignore[misc]


def gated_class(cls: type) -> type:
    """The scheduler class the mixin was composed onto (the class after
    :class:`BalanceSchedulerMixin` in ``cls``'s MRO)."""
    mro = cls.__mro__
    return mro[mro.index(BalanceSchedulerMixin) + 1]
