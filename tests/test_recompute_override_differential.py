# SPDX-License-Identifier: Apache-2.0
"""Differential: vllm-ascend main's ``RecomputeScheduler`` (its copied
``schedule()`` and ``update_from_output()``, the checkout in
``$VAB_VLLM_ASCEND_SRC`` unmodified, over the release lane's vLLM 0.27.1)
vs the same scheduler rebuilt by patch 0005 of
``downstream_patch/vllm-ascend/main/`` as overrides of vLLM's schedule
seams C (``_evict_running_request``), B (``_cap_num_new_tokens``) and A
(``_waiting_admission``, for the DyntraLB variant) plus a ``schedule()``
and an ``update_from_output()`` wrapper (the schedule-seams series over the
same vLLM), stepped through the same random traces
(:mod:`tests.support.copy_sides` builds both sides).

Traces (:mod:`tests.support.recompute_machine`): bursts of requests (shared
prefixes, prefix caching on or off), chunked prefill under a small token
budget, a KV pool small enough to force preemption, natural finishes,
aborts, one forced reset; mostly as a decode node whose KV connector is a
test double (a real connector moves KV over the network or off the NPU)
answering the preemption offload with success or failure as the trace
draws it, so that victims are both offloaded-and-preempted and finished as
recomputed; some without a connector (vLLM's own preemption); some with a
``max_model_len`` the requests reach. Every field of both
``SchedulerOutput``s (the ``RecomputeSchedulerOutput`` lists included),
``EngineCoreOutputs`` (the ``stop_reason="recomputed"`` outputs included),
the scheduler state and the connector's preemption calls must agree on
every step, except the paths in :data:`DRIFT`.

Left out, with the reason (``docs/schedule-copies.md``, findings R1-R10):
speculative decoding (the copy's ``update_from_output`` raises
``AttributeError`` on 0.27.1, R6), structured output (R7, R10), a connector
that requires KV delivery or finds external KV (R1, R2: the double does
neither), and the priority policy (vLLM picks the victim before seam C is
asked; the copy takes the last running request whatever the policy).

Negative controls: an override that always preempts (never finishes a
victim as recomputed, though the connector's offload failed), and one that
drops the ``stop_reason="recomputed"`` outputs, must each make the same
machine fail, sync and async.

Runs on the release lane with ``$VAB_VLLM_ASCEND_SRC`` set (skipped without,
with the reason); by hand: ``VAB_VLLM_ASCEND_SRC=/path/to/vllm-ascend
$venv/bin/python -m pytest tests/test_recompute_override_differential.py``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tests.support import vllm_ascend_src

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # four hypothesis state machines per side pair
]

SRC = vllm_ascend_src.activate_or_skip()

from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402
from vllm_ascend.core import dyntra_lb_scheduler  # noqa: E402

from tests.support import copy_sides  # noqa: E402
from tests.support.differential import (  # noqa: E402
    DIFFERENTIAL_SETTINGS,
    Divergence,
)
from tests.support.recompute_machine import (  # noqa: E402
    DYNTRA_REACHED,
    REACHED,
    RecomputeMachine,
    machine,
)

REL = "vllm_ascend/core/recompute_scheduler.py"
PATCH = copy_sides.downstream_patch("0005")
COPY = copy_sides.copy_module(SRC, REL)
OVERRIDE = copy_sides.override_module(SRC, REL, PATCH)
BLOCK_NUM = dyntra_lb_scheduler.get_dyntra_lb_request_block_num
# The copy's drift (docs/schedule-copies.md) that these traces reach: each
# path left out of the comparison, with its finding and why it shows.
DRIFT: dict[str, str] = {
    # R9: the copy's 0.25 update_from_output never calls the prefill stats'
    # finalize(), which 0.27.1's does (the tokens the prefill wrote to the
    # cache); R3: the copy's schedule() sets a resumed request's prefill
    # stats again, 0.27.1's only before its first preemption.
    "EngineCoreOutputs.outputs.prefill_stats": "R3, R9",
}
# More traces than DyntraLB's differential: a victim needs a KV pool that its
# running requests outgrow, and each trace draws one offload answer per step.
SETTINGS = settings(
    DIFFERENTIAL_SETTINGS,
    max_examples=200,
    # Async traces end (as invalid) where drift R1 starts (recompute_machine).
    suppress_health_check=[
        *DIFFERENTIAL_SETTINGS.suppress_health_check,
        HealthCheck.filter_too_much,
    ],
)
NAMES = [
    "RecomputeScheduler",
    "AsyncRecomputeScheduler",
    "DyntraLBRecomputeScheduler",
    "AsyncDyntraLBRecomputeScheduler",
]


# Known-bad overrides, each one text edit of the patched module: a victim
# whose offload failed preempted anyway instead of finished as recomputed;
# the recomputed requests' outputs dropped from update_from_output().
KNOWN_BAD = {
    "always preempts": (
        "preempt_hook(victim, block_ids, num_computed_tokens)",
        "(preempt_hook(victim, block_ids, num_computed_tokens) or True)",
    ),
    "drops recomputed outputs": (
        "self._add_recomputed_outputs(scheduler_output, recomputed_outputs)",
        "pass",
    ),
}


def _known_bad(name: str) -> Any:
    return copy_sides.variant_module(SRC, REL, PATCH, *KNOWN_BAD[name])


def test_sides_are_what_they_claim() -> None:
    """The copy has its own ``schedule()`` and ``update_from_output()`` over
    the installed vLLM; the override has short wrappers and answers the
    seams."""
    copied = vars(COPY.RecomputeScheduler)
    overridden = vars(OVERRIDE.RecomputeScheduler)
    for method, longer_than in (("schedule", 700), ("update_from_output", 300)):
        lines, _ = inspect.getsourcelines(copied[method])
        assert len(lines) > longer_than, (method, len(lines))
        lines, _ = inspect.getsourcelines(overridden[method])
        assert len(lines) < 20, (method, len(lines))
    for seam in ("_evict_running_request", "_cap_num_new_tokens", "_waiting_admission"):
        assert seam not in copied
        assert seam in overridden
        assert hasattr(OVERRIDE.Scheduler, seam)
    assert OVERRIDE.Scheduler is not COPY.Scheduler


@pytest.mark.parametrize("name", NAMES)
def test_override_matches_the_copy_on_random_traces(name: str) -> None:
    cls = machine(COPY, OVERRIDE, name, DRIFT, BLOCK_NUM)
    # The DyntraLB plan pauses requests half the time, which relieves the KV
    # pool: twice the traces to reach its preemptions as often; async, three
    # times that again, since a trace ends at its first victim with output in
    # flight (R1) (offloaded preemptions reached at 400, 800, 1,200 traces:
    # 0, 11, 29).
    examples = SETTINGS.max_examples
    if cls.dyntra:
        examples *= 6 if name.startswith("Async") else 2
    run_state_machine_as_test(cls, settings=settings(SETTINGS, max_examples=examples))
    print(f"{cls.__name__} coverage: {dict(cls.coverage)}")
    for reached in REACHED + (DYNTRA_REACHED if cls.dyntra else ()):
        assert cls.coverage[reached] > 0, (reached, str(dict(cls.coverage)))


@pytest.mark.parametrize("cls_name", ["RecomputeScheduler", "AsyncRecomputeScheduler"])
@pytest.mark.parametrize("name", sorted(KNOWN_BAD))
def test_a_known_bad_override_is_caught(name: str, cls_name: str) -> None:
    bad: type[RecomputeMachine] = machine(
        COPY, _known_bad(name), cls_name, DRIFT, BLOCK_NUM
    )
    strict = settings(SETTINGS, phases=[Phase.generate])
    with pytest.raises(Divergence):
        run_state_machine_as_test(bad, settings=strict)
