# SPDX-License-Identifier: Apache-2.0
"""The seam's shape keeps the release's admission cap whatever an override
returns.

The series keeps upstream's cap check inline in ``Scheduler.schedule()``'s
WAITING loop and asks ``_should_stop_admitting_waiting()`` only after it,
with a default of False: an override can close admission, never admit past
the cap. Checked here on the installed (patched) ``Scheduler`` and
``AsyncScheduler`` with the most permissive override possible (always
False), over random bursts of requests against random caps.

Negative control: the old shape (the cap check inside the overridable method,
built at run time from the installed source by
``tests/support/seam_shapes.py``) with the same override admits past the cap,
and vLLM's own ``assert len(self.running) <= self.max_num_running_reqs``
fires. Control of the control: the old shape *without* the override keeps
the cap, so that failure is the override's doing, not the rewrite's.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import vllm.v1.core.sched.scheduler as installed_scheduler
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.model_outputs import fake_model_output
from tests.support.original_scheduler import classes_from_source
from tests.support.seam_shapes import (
    old_shape_source,
    pause_cap_mutant_source,
    pause_loop,
    stop_condition,
)
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.scheduler import admission_cap

# why: the installed schedule()'s seam call and its cap check
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    database=None,  # keep the tree clean; failures print their reproduction
    derandomize=True,  # the negative control must fail the same way every run
)


class CapBroken(AssertionError):
    """More requests running than the admission cap allows."""


class AdmitsAlways:
    """The most permissive override: never asks to stop admitting."""

    def _should_stop_admitting_waiting(self) -> bool:
        return False


def _installed_source() -> str:
    return Path(installed_scheduler.__file__).read_text()


# 0.34 on, the seam replaces the loop's PauseState tests and the cap is an
# assignment the seam never reads: there is no old shape to rebuild; the
# negative control is then a cap assignment that says ``>`` (one past).
PAUSE_SHAPE = pause_loop(_installed_source()) is not None
OLD_SHAPE_ONLY = pytest.mark.skipif(
    PAUSE_SHAPE, reason="0.34 on: no old shape (the cap is not the seam's)"
)


def _old_shape_classes() -> tuple[type, type]:
    return classes_from_source(
        "vab_old_shape_scheduler", old_shape_source(_installed_source())
    )


def _schedule(scheduler: Any) -> Any:
    """``schedule()``, with vLLM's own running-count assertion reported as
    :class:`CapBroken` (any other failure propagates as is)."""
    try:
        return scheduler.schedule()
    except AssertionError as exc:
        line = traceback.extract_tb(exc.__traceback__)[-1].line or ""
        if "len(self.running) <=" in line:
            raise CapBroken(f"schedule() tripped vLLM's `{line}`") from exc
        raise


def _assert_admission_cap_holds(
    scheduler_cls: type, async_scheduling: bool, **overrides: Any
) -> None:
    """Bursts of requests, one engine step after each (output fed back):
    after every ``schedule()`` at most ``admission_cap()`` requests run."""

    @settings(SETTINGS, **overrides)
    @given(
        max_num_seqs=st.integers(1, 4),
        bursts=st.lists(st.integers(0, 5), min_size=1, max_size=6),
    )
    def run(max_num_seqs: int, bursts: list[int]) -> None:
        config = make_vllm_config(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=256,
            num_blocks=1_000,  # roomy: only the cap can stop admission
            async_scheduling=async_scheduling,
        )
        scheduler = make_scheduler(scheduler_cls, vllm_config=config)
        cap = admission_cap(scheduler)
        next_id = 0
        for step, burst in enumerate(bursts):
            for _ in range(burst):
                scheduler.add_request(make_request(f"r{next_id}", 20, max_tokens=8))
                next_id += 1
            output = _schedule(scheduler)
            running = len(scheduler.running) + getattr(
                scheduler, "num_waiting_for_streaming_input", 0
            )
            if running > cap:
                raise CapBroken(f"{running} running requests, cap {cap}")
            scheduler.update_from_output(
                output, fake_model_output(scheduler, output, step)
            )

    run()


def _with_override(base: type) -> type:
    return type(f"AdmitsAlways{base.__name__}", (AdmitsAlways, base), {})


def test_installed_schedule_has_the_new_shape():
    """Guard for the tests below: the installed loop checks the cap inline
    and asks the seam right after (so they test the shape they claim to)."""
    if PAUSE_SHAPE:
        loop = pause_loop(_installed_source())
        assert loop is not None and loop.seam_ask is not None
        assert (len(loop.pause), len(loop.flag)) == (0, 2)
        assert loop.cap == "max_num_active_reqs"
        return
    found = stop_condition(_installed_source())
    assert found.seam_check is not None
    assert found.cap in {"max_num_active_reqs", "max_num_running_reqs"}


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_override_returning_false_cannot_admit_past_the_cap(async_scheduling):
    base = AsyncScheduler if async_scheduling else Scheduler
    _assert_admission_cap_holds(_with_override(base), async_scheduling)


@OLD_SHAPE_ONLY
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_old_shape_with_the_same_override_breaks_the_cap(async_scheduling):
    """Negative control: with the cap inside the overridable method, the same
    override admits past the cap (found within the same example budget)."""
    sched, async_sched = _old_shape_classes()
    base = async_sched if async_scheduling else sched
    with pytest.raises(CapBroken):
        _assert_admission_cap_holds(
            _with_override(base), async_scheduling, phases=[Phase.generate]
        )


@pytest.mark.skipif(not PAUSE_SHAPE, reason="the 0.34 loop's negative control")
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_cap_assignment_mutant_with_the_same_override_breaks_the_cap(
    async_scheduling,
):
    """Negative control on 0.34: the cap assignment with ``>`` instead of
    ``>=`` admits past the cap under the same override (so the check above
    can fail)."""
    sched, async_sched = classes_from_source(
        "vab_cap_mutant_scheduler", pause_cap_mutant_source(_installed_source())
    )
    base = async_sched if async_scheduling else sched
    with pytest.raises(CapBroken):
        _assert_admission_cap_holds(
            _with_override(base), async_scheduling, phases=[Phase.generate]
        )


@OLD_SHAPE_ONLY
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_old_shape_default_keeps_the_cap(async_scheduling):
    """Control of the control: the rewritten old-shape scheduler itself
    (no override) keeps the cap, so the failure above is the override's."""
    sched, async_sched = _old_shape_classes()
    _assert_admission_cap_holds(
        async_sched if async_scheduling else sched, async_scheduling
    )


class CountsAsks:
    """Counts how often ``schedule()`` asks the seam."""

    asks = 0

    def _should_stop_admitting_waiting(self) -> bool:
        self.asks += 1
        return False


def test_installed_schedule_asks_the_seam_once_before_the_loop():
    """Guard: the once-per-call ask sits right before the WAITING loop."""
    if PAUSE_SHAPE:
        loop = pause_loop(_installed_source())
        assert loop is not None and loop.seam_ask is not None
        return
    found = stop_condition(_installed_source())
    assert found.seam_ask is not None


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_seam_is_asked_at_most_once_per_schedule_call(async_scheduling):
    """With many waiting requests admitted in one step, the seam is asked
    once per ``schedule()`` call, not once per admission attempt (its only
    user, the balance gate, decides once per step)."""
    base = AsyncScheduler if async_scheduling else Scheduler
    counting = type(f"Counts{base.__name__}", (CountsAsks, base), {})
    scheduler = make_scheduler(
        counting,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        async_scheduling=async_scheduling,
    )
    for index in range(50):
        scheduler.add_request(make_request(f"r{index}", 20, max_tokens=4))
    for step in range(3):
        before = scheduler.asks
        output = scheduler.schedule()
        assert scheduler.asks - before <= 1
        scheduler.update_from_output(output, fake_model_output(scheduler, output, step))
    assert len(output.num_scheduled_tokens) == 50
    assert scheduler.asks >= 1
