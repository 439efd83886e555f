# SPDX-License-Identifier: Apache-2.0
"""The balance admission gate, as a mixin over any vLLM ``Scheduler``.

Composed at activation time onto the class the configuration would use
(``Scheduler``, ``AsyncScheduler`` or a ``scheduler_cls`` subclass), e.g.
``type("BalanceAsyncScheduler", (BalanceSchedulerMixin, AsyncScheduler), {})``.
It overrides only ``Scheduler._should_stop_admitting_waiting()``, the seam
added by ``upstream_patch/``; ``schedule()`` itself is upstream's. The seam
is asked only after upstream's own admission-cap check, which stays inline in
the WAITING loop, and its default returns False: the gate can close
admission, never admit past the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

SEAM = "_should_stop_admitting_waiting"


def admission_cap(scheduler: Any) -> int:
    """The cap the installed release admits WAITING requests by:
    ``max_num_active_reqs`` where the release has it, else
    ``max_num_running_reqs`` (mirrors the stop condition in upstream's
    ``Scheduler.schedule()``)."""
    cap = getattr(scheduler, "max_num_active_reqs", None)
    return scheduler.max_num_running_reqs if cap is None else cap


class BalanceSchedulerMixin:
    """Leader-at-cap => global freeze of admission from WAITING.

    The engine core injects ``dp_group`` and calls :meth:`balance_gather` once
    per active step (:class:`~vllm_ascend_balance.engine.BalanceEngineHookMixin`).
    The gather sets :attr:`balance_frozen` for the next ``schedule()``:
    ``max(gathered len(running)) == admission_cap(self)`` (``==`` by contract,
    not ``>=`` and not "catch up to the leader"). Every rank sees the same
    gathered vector, so every rank takes the same decision.

    Two consequences of the contract, kept on purpose (vllm-ascend's gate
    behaves the same): the payload is ``len(running)``, so paused streaming
    sessions, which upstream's own stop condition also counts, do not make a
    rank the leader; and a frozen step admits nothing that the WAITING loop
    would admit, including (where the release has them) requests already
    holding KV blocks from an async KV load.

    Attributes:
        dp_group: the DP ``ProcessGroup`` (gloo/HCCL), injected by the engine.
        balance_gathered: last gathered running counts, int64 tensor of shape
            ``(dp_size,)``, index = DP rank; None before the first gather.
        balance_frozen: whether admission from WAITING is frozen this step.
        balance_gathers: number of gathers done (one per active step).
        balance_frozen_gathers: number of gathers that decided to freeze.
    """

    dp_group: ProcessGroup | None = None
    balance_gathered: torch.Tensor | None = None
    balance_frozen: bool = False
    balance_gathers: int = 0
    balance_frozen_gathers: int = 0
    _balance_slots: list[torch.Tensor]
    _balance_local: torch.Tensor
    _balance_next_seam: ClassVar[Callable[[Any], bool]]

    def balance_gather(self) -> None:
        """All-gather ``len(self.running)`` over ``dp_group`` (one collective)
        and recompute :attr:`balance_frozen`. No-op without a group.

        The receive buffer is sized from the group itself, so a group replaced
        at run time (elastic EP ``reinitialize_distributed``) keeps working.
        """
        group = self.dp_group
        if group is None:
            return
        size = group.size()
        gathered = self.balance_gathered
        if gathered is None or gathered.numel() != size:
            gathered = self.balance_gathered = torch.zeros(size, dtype=torch.int64)
            self._balance_slots = list(gathered.split(1))
            self._balance_local = torch.zeros(1, dtype=torch.int64)
        self._balance_local[0] = len(self.running)  # type: ignore[attr-defined]
        # The list form (as vllm-ascend uses) works on gloo and HCCL alike and
        # is not deprecated; the slots are views, so one max() reads them all.
        dist.all_gather(self._balance_slots, self._balance_local, group=group)
        self.balance_frozen = int(gathered.max()) == admission_cap(self)
        self.balance_gathers += 1
        self.balance_frozen_gathers += self.balance_frozen

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The seam runs once per admission attempt: resolve the next override
        # in the MRO once per class rather than through super() on every call.
        later = cls.__mro__[cls.__mro__.index(BalanceSchedulerMixin) + 1 :]
        cls._balance_next_seam = next(
            (k.__dict__[SEAM] for k in later if SEAM in k.__dict__), _missing_seam
        )

    def _should_stop_admitting_waiting(self) -> bool:
        """True while frozen; otherwise whatever the next class in the MRO
        says (upstream's default: False, a ``scheduler_cls`` may add its own
        policy)."""
        return self.balance_frozen or self._balance_next_seam()


def _missing_seam(self: Any) -> bool:
    raise TypeError(
        f"{type(self).__name__} has no Scheduler.{SEAM}() to extend: the "
        f"installed vLLM lacks the seam; install a vLLM carrying "
        f"upstream_patch/ (a fork branch with the series, or series.py apply)"
    )
