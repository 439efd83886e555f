# SPDX-License-Identifier: Apache-2.0
"""Differential: vllm-ascend main's ``DyntraLBScheduler`` (its copied
``schedule()``, the checkout in ``$VAB_VLLM_ASCEND_SRC`` unmodified) vs the
same scheduler rebuilt by patch 0003 of ``downstream_patch/vllm-ascend/main/``
as an override of vLLM's ``_waiting_admission()`` seam (the schedule-seams
series on the release lane's vLLM 0.27.1), stepped through the same random
traces (:mod:`tests.support.copy_sides` builds both sides).

Traces: bursts of requests (shared prefixes for prefix caching), chunked
prefill under a small token budget, a KV pool small enough to force
preemption, natural finishes, aborts; before every step both sides prepare
the DyntraLB step (the candidates the cross-rank exchange would see) and get
the same plan, as the DP engine core hands it over: none, or running
requests moved out and waiting ones admitted by block count, sometimes
frozen. The candidates, every field of both ``SchedulerOutput``s and
``EngineCoreOutputs`` and the scheduler state (with DyntraLB's paused set)
must agree on every step, except the paths in :data:`DRIFT`.

Negative control: an override that admits every request (``ADMIT`` where
the plan says ``SKIP``) must make the same machine fail.

Runs on the release lane with ``$VAB_VLLM_ASCEND_SRC`` set (skipped without,
with the reason); by hand: ``VAB_VLLM_ASCEND_SRC=/path/to/vllm-ascend
$venv/bin/python -m pytest tests/test_dyntra_override_differential.py``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tests.support import vllm_ascend_src

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # two hypothesis state machines per side pair
]

SRC = vllm_ascend_src.activate_or_skip()

from hypothesis import Phase, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

from tests.support import copy_sides  # noqa: E402
from tests.support.differential import (  # noqa: E402
    DIFFERENTIAL_SETTINGS,
    Divergence,
)
from tests.support.dyntra_machine import REACHED, DyntraMachine, machine  # noqa: E402

REL = "vllm_ascend/core/dyntra_lb_scheduler.py"
PATCH = copy_sides.downstream_patch("0003")
COPY = copy_sides.copy_module(SRC, REL)
OVERRIDE = copy_sides.override_module(SRC, REL, PATCH)
# docs/schedule-copies.md: the copy is 0.27.1's schedule() plus DyntraLB's two
# deltas and seven compat hunks, no drift; so nothing is left out here.
DRIFT: frozenset[str] = frozenset()


def _admits_everything() -> Any:
    """The known-bad override: the plan's SKIP turned into ADMIT."""
    return copy_sides.variant_module(
        SRC,
        REL,
        PATCH,
        "return vllm_scheduler.Admission.SKIP",
        "return vllm_scheduler.Admission.ADMIT",
    )


def test_sides_are_what_they_claim() -> None:
    """The copy has its own ``schedule()`` over the installed vLLM; the
    override has none of its own but a wrapper and answers the seam."""
    assert "_waiting_admission" not in vars(COPY.DyntraLBScheduler)
    lines, _ = inspect.getsourcelines(vars(COPY.DyntraLBScheduler)["schedule"])
    assert len(lines) > 700, len(lines)
    lines, _ = inspect.getsourcelines(vars(OVERRIDE.DyntraLBScheduler)["schedule"])
    assert len(lines) < 15, len(lines)
    assert "_waiting_admission" in vars(OVERRIDE.DyntraLBScheduler)
    assert OVERRIDE.Scheduler is not COPY.Scheduler
    assert hasattr(OVERRIDE.Scheduler, "_waiting_admission")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_override_matches_the_copy_on_random_traces(asynchronous: bool) -> None:
    name = "AsyncDyntraLBScheduler" if asynchronous else "DyntraLBScheduler"
    cls = machine(COPY, getattr(OVERRIDE, name), asynchronous, DRIFT)
    run_state_machine_as_test(cls, settings=DIFFERENTIAL_SETTINGS)
    print(f"{cls.__name__} coverage: {dict(cls.coverage)}")
    for reached in REACHED:
        assert cls.coverage[reached] > 0, (reached, dict(cls.coverage))


def test_an_override_that_admits_everything_is_caught() -> None:
    bad: type[DyntraMachine] = machine(
        COPY, _admits_everything().DyntraLBScheduler, False, DRIFT
    )
    strict = settings(DIFFERENTIAL_SETTINGS, phases=[Phase.generate])
    with pytest.raises(Divergence):
        run_state_machine_as_test(bad, settings=strict)
