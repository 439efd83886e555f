# SPDX-License-Identifier: Apache-2.0
"""The reach rule: whether the gate's decision can act through a scheduler
class (docs/design.md, "Which ``scheduler_cls`` the gate can reach").

Static, from the classes' code: each ``schedule()`` on the MRO down to
vLLM's ``Scheduler`` must consult the seam or hand on to
``super().schedule()``. The run-time tripwire
(:meth:`~vllm_ascend_balance.gate.scheduler.BalanceSchedulerMixin._balance_check_frozen_step`)
catches what this cannot see.
"""

from __future__ import annotations

import inspect
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

from vllm_ascend_balance.gate.seam import SEAM


def has_seam(scheduler_cls: type = Scheduler) -> bool:
    """Whether ``scheduler_cls`` offers ``Scheduler._should_stop_admitting_waiting``."""
    return callable(getattr(scheduler_cls, SEAM, None))


def vllm_consults_seam() -> bool:
    """Whether vLLM's own ``Scheduler.schedule()`` calls the seam: in its
    code, or in a ``Scheduler`` method it calls (transitively).

    False on a partly applied patch: a ``scheduler.py`` that defines
    ``Scheduler._should_stop_admitting_waiting()`` but whose ``schedule()``
    never calls it (a hunk applied alone), where the gate would have no
    effect. Static, from the code objects, as :func:`unreachable_gate`.
    """
    # The class that defines the seam: vLLM's own, even where another
    # package swapped the module's ``Scheduler`` for a copy of its own.
    owner = next((k for k in Scheduler.__mro__ if SEAM in vars(k)), None)
    if owner is None:
        return False
    seen: set[str] = set()
    todo = ["schedule"]
    while todo:
        name = todo.pop()
        seen.add(name)
        method = inspect.unwrap(getattr(owner, name))
        code = getattr(method, "__code__", None)
        if code is None:
            continue
        names = _code_names(code)
        if SEAM in names:
            return True
        todo += [
            n
            for n in names - seen
            if n not in todo and inspect.isfunction(getattr(owner, n, None))
        ]
    return False


def can_throttle(scheduler_cls: type) -> bool:
    """Whether ``scheduler_cls.schedule`` takes ``throttle_prefills`` (vLLM
    0.27 and later): what a chunk-holding policy needs."""
    schedule = getattr(scheduler_cls, "schedule", None)
    if schedule is None:
        return False
    return "throttle_prefills" in inspect.signature(schedule).parameters


def _code_names(code: Any) -> set[str]:
    """Names a code object loads (globals, attributes), nested code included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


def unreachable_gate(scheduler_cls: type) -> tuple[type, str] | None:
    """Whether the balance gate can act through ``scheduler_cls``'s
    ``schedule()``; None if it can, else ``(class, why)``.

    Rule (docs/design.md): walk the MRO down to ``Scheduler``; every class on
    the way that defines its own ``schedule()`` must either name the seam
    (``Scheduler._should_stop_admitting_waiting``) in its code, which ends
    the walk, or call ``super().schedule()``, which hands on to the next
    class; upstream's ``Scheduler.schedule()`` consults the seam (checked
    apart, by :func:`vllm_consults_seam`). Code that
    cannot be inspected (not a Python function) is refused.
    """
    for klass in scheduler_cls.__mro__:
        if klass is Scheduler:
            return None
        method = klass.__dict__.get("schedule")
        if method is None:
            continue
        code = getattr(inspect.unwrap(method), "__code__", None)
        if code is None:
            return klass, "its schedule() is not Python code, so it cannot be checked"
        names = _code_names(code)
        if SEAM in names:
            return None
        if not {"super", "schedule"} <= names:
            return klass, (
                f"its own schedule() neither calls super().schedule() nor "
                f"Scheduler.{SEAM}(), so the gate's decision would never apply"
            )
    return None
