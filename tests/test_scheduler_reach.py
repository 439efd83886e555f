# SPDX-License-Identifier: Apache-2.0
"""Schedulers the gate cannot reach, on real ``VllmConfig`` objects and real
schedulers.

- The reach rule (:mod:`vllm_ascend_balance.wiring.reach`): a
  ``scheduler_cls`` whose ``schedule()`` neither calls ``super().schedule()``
  nor consults the seam, at any level of its bases, is the offender; a
  negative control (a checker that reads only the top class, one that
  accepts everything) must fail the rule's cases.
- :func:`~vllm_ascend_balance.wiring.activation_plan.plan_activation`
  refuses such a ``scheduler_cls`` in one line naming the class and accepts
  the ones that reach the seam (with balance off, nothing is refused).
- The run-time tripwire: a frozen step on which a scheduler admitted from
  WAITING anyway is logged as an error; its negative control (a gate
  without the tripwire) stays silent on the same steps.

Split from ``tests/test_config_activation.py`` (configuration and
activation) by concern.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.balance_configs import (
    OFF,
    ON,
    assert_one_line_error,
    vllm_config,
)
from vllm_ascend_balance.gate.scheduler import SEAM, BalanceSchedulerMixin
from vllm_ascend_balance.wiring import activation_plan, composition, reach
from vllm_ascend_balance.wiring.config import SETTING, BalanceConfigError

# why: real Scheduler/AsyncScheduler classes and their schedule() of each
# release decide what reaches the seam; VllmConfig's scheduler_cls
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


class CustomScheduler(Scheduler):
    """A ``scheduler_cls`` of the kind vllm-ascend ships."""


# --------------------------------------------------------------------------
# Schedulers the gate cannot reach: refused at startup, tripwire at run time


class NoSeamScheduler(Scheduler):
    """Overrides ``schedule()`` without the seam or ``super().schedule()``
    (as vllm-ascend's ``RecomputeScheduler`` carries its own copy). It
    reaches upstream's body by an explicit base call with the decision
    cleared, so it really admits while the gate is frozen."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        frozen = self.__dict__.get("balance_frozen", False)
        self.__dict__["balance_frozen"] = False
        try:
            return Scheduler.schedule(self, *args, **kwargs)
        finally:
            self.__dict__["balance_frozen"] = frozen


class WrappingScheduler(Scheduler):
    """Wraps ``super().schedule()``: the seam is reached."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        output = super().schedule(*args, **kwargs)
        return output


class SeamCallingScheduler(Scheduler):
    """Consults the seam itself (a schedule() of its own that asks it)."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        if self._should_stop_admitting_waiting():
            pass
        return super().schedule(*args, **kwargs)


class WrapsANoSeamScheduler(NoSeamScheduler):
    """Calls ``super().schedule()``, but the class below it does not reach
    the seam: refused, naming ``NoSeamScheduler``."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        return super().schedule(*args, **kwargs)


class NoOverrideScheduler(WrappingScheduler):
    """Inherits ``schedule()``: what its bases do decides."""


REACH_CASES: dict[type, type | None] = {
    Scheduler: None,
    AsyncScheduler: None,
    CustomScheduler: None,
    WrappingScheduler: None,
    SeamCallingScheduler: None,
    NoOverrideScheduler: None,
    NoSeamScheduler: NoSeamScheduler,
    WrapsANoSeamScheduler: NoSeamScheduler,
}


def check_reach_rule(unreachable: Any) -> None:
    """The rule on every case: None when the seam is reached, else the
    offending class."""
    for cls, offender in REACH_CASES.items():
        verdict = unreachable(cls)
        got = None if verdict is None else verdict[0]
        assert got is offender, f"wrong verdict for {cls.__name__}: {verdict}"


def test_reach_rule() -> None:
    check_reach_rule(reach.unreachable_gate)


def _top_class_only(cls: type) -> tuple[type, str] | None:
    """Known-bad: inspects only the first ``schedule()`` in the MRO."""
    for klass in cls.__mro__:
        if "schedule" in klass.__dict__ and klass is not Scheduler:
            names = klass.__dict__["schedule"].__code__.co_names
            ok = SEAM in names or "super" in names
            return None if ok else (klass, "top only")
    return None


def _accept_all(cls: type) -> tuple[type, str] | None:
    """Known-bad: what activation did before (every subclass composes)."""
    return None


@pytest.mark.parametrize("checker", [_top_class_only, _accept_all])
def test_reach_rule_negative_control_fails(checker: Any) -> None:
    with pytest.raises(AssertionError, match="wrong verdict"):
        check_reach_rule(checker)


@pytest.mark.parametrize(
    ("cls", "offender"),
    [(NoSeamScheduler, "NoSeamScheduler"), (WrapsANoSeamScheduler, "NoSeamScheduler")],
)
def test_unreachable_scheduler_cls_refused(cls: type, offender: str) -> None:
    cfg = vllm_config(ON)
    cfg.scheduler_config.scheduler_cls = cls
    with pytest.raises(BalanceConfigError) as info:
        activation_plan.plan_activation(cfg)
    assert_one_line_error(
        info.value,
        SETTING,
        cls.__qualname__,
        offender,
        "neither calls super().schedule() nor",
        "--scheduler-cls",
    )
    # Balance off: nothing is checked, vLLM runs the class untouched.
    cfg_off = vllm_config(OFF)
    cfg_off.scheduler_config.scheduler_cls = cls
    assert not activation_plan.plan_activation(cfg_off).active


@pytest.mark.parametrize("cls", [WrappingScheduler, SeamCallingScheduler])
def test_wrapping_scheduler_cls_accepted(cls: type) -> None:
    cfg = vllm_config(ON)
    cfg.scheduler_config.scheduler_cls = cls
    plan = activation_plan.plan_activation(cfg)
    assert plan.active and plan.scheduler_cls is cls
    assert any(f"reaches Scheduler.{SEAM}" in note for note in plan.notes)


def _frozen_step_admissions(cls: type, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Freeze the gate on a real scheduler of ``cls`` (the other rank at the
    cap), give it waiting requests, gather and schedule twice, then gather
    once more (the tripwire checks at the gather); return the error lines."""
    from unittest import mock

    import torch.distributed as dist

    from tests.support.vllm_objects import make_request, make_scheduler

    class Group:
        def size(self) -> int:
            return 2

    def gather_other_at_cap(slots: Any, local: Any, group: Any = None) -> None:
        slots[0].copy_(local)
        slots[1].fill_(2)  # the other rank is at the cap (2)

    scheduler: Any = make_scheduler(cls, max_num_seqs=2)
    scheduler.dp_group = Group()
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="vllm"):
        for step in range(2):
            scheduler.add_request(make_request(f"w{step}", 8, 4))
            with mock.patch.object(dist, "all_gather", gather_other_at_cap):
                scheduler.admission_gather()
            assert scheduler.balance_frozen
            scheduler.schedule()
        with mock.patch.object(dist, "all_gather", gather_other_at_cap):
            scheduler.admission_gather()
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def check_tripwire(compose: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A class that admits on a frozen step is reported once, by name; a
    class that honours the gate is never reported."""
    errors = _frozen_step_admissions(compose(NoSeamScheduler), caplog)
    assert len(errors) == 1, f"tripwire did not report exactly once: {errors}"
    assert "NoSeamScheduler" in errors[0] and "frozen" in errors[0], errors
    for base in (Scheduler, AsyncScheduler, WrappingScheduler):
        assert _frozen_step_admissions(compose(base), caplog) == []


def test_tripwire(caplog: pytest.LogCaptureFixture) -> None:
    check_tripwire(composition.compose_scheduler, caplog)


class NoTripwireGate(BalanceSchedulerMixin):
    """Known-bad: the mixin without its run-time check."""

    def _balance_check_frozen_step(self) -> None:
        return None


def test_tripwire_negative_control_fails(caplog: pytest.LogCaptureFixture) -> None:
    def compose(base: type) -> type:
        return type(f"NoTripwire{base.__name__}", (NoTripwireGate, base), {})

    with pytest.raises(AssertionError, match="tripwire did not report"):
        check_tripwire(compose, caplog)
