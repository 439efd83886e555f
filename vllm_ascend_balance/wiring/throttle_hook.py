# SPDX-License-Identifier: Apache-2.0
"""The engine-core hook that holds prefill chunks in flight on frozen steps
(only for a policy that holds chunks).

vLLM's DP engine already asks, right before each ``schedule()``, whether to
defer prefill work this step: ``DPEngineCoreProc._should_throttle_prefills()``
(its ``prefill_schedule_interval`` cadence), whose answer becomes
``Scheduler.schedule(throttle_prefills)``; a throttled ``schedule()`` defers
every prefill, chunks in flight included, while the rank has decodes to run.
The hook answers yes as well on a step the gate froze under a policy that
holds chunks
(:meth:`~vllm_ascend_balance.gate.scheduler.BalanceSchedulerMixin.balance_throttles`),
so the gate needs no second seam in ``schedule()``. Installed on vLLM's own
``DPEngineCoreProc`` (found in the MRO, as the gather hook is), only where
such a policy is active: elsewhere vLLM's answer is untouched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.wiring.engine_hook import upstream_dp_engine

THROTTLE = "_should_throttle_prefills"
_ORIGINAL = "__vab_original__"


def _hooked(original: Callable[[Any], bool]) -> Callable[[Any], bool]:
    @functools.wraps(original)
    def _should_throttle_prefills(self: Any) -> bool:
        scheduler = getattr(self, "scheduler", None)
        # The gate first: it also clears prefill_capacity_bound when it
        # throttles, which vLLM's own answer must not short-circuit.
        held = isinstance(scheduler, BalanceSchedulerMixin) and (
            scheduler.balance_throttles()
        )
        return original(self) or held

    setattr(_should_throttle_prefills, _ORIGINAL, original)
    return _should_throttle_prefills


def install_throttle_hook(cls: type) -> None:
    """Hook ``_should_throttle_prefills`` of vLLM's ``DPEngineCoreProc``
    (found in ``cls``'s MRO). Idempotent.

    Raises:
        TypeError: the installed vLLM's ``DPEngineCoreProc`` has no
            ``_should_throttle_prefills`` (activation refuses such a release
            first, :func:`~vllm_ascend_balance.wiring.reach.can_throttle`).
    """
    base = upstream_dp_engine(cls)
    current = base.__dict__.get(THROTTLE)
    if current is None:
        raise TypeError(f"{base.__qualname__} has no {THROTTLE}()")
    if not hasattr(current, _ORIGINAL):
        setattr(base, THROTTLE, _hooked(current))


def remove_throttle_hook(cls: type) -> None:
    """Undo :func:`install_throttle_hook` (tests). Idempotent."""
    base = upstream_dp_engine(cls)
    original = getattr(base.__dict__.get(THROTTLE), _ORIGINAL, None)
    if original is not None:
        setattr(base, THROTTLE, original)


def throttle_hook_installed(cls: type) -> bool:
    """Whether vLLM's ``DPEngineCoreProc`` under ``cls`` carries the hook."""
    return hasattr(upstream_dp_engine(cls).__dict__.get(THROTTLE), _ORIGINAL)
