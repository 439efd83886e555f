# SPDX-License-Identifier: Apache-2.0
"""Differential: vllm-ascend main's ``ProfilingChunkScheduler`` (its copied
``schedule()``, a vLLM 0.21/0.22 one, the checkout in ``$VAB_VLLM_ASCEND_SRC``
unmodified) vs the same scheduler rebuilt by patch 0004 of
``downstream_patch/vllm-ascend/main/`` as an override of vLLM's
``_cap_num_new_tokens()`` and ``_waiting_admission()`` seams (the
schedule-seams series on the release lane's vLLM 0.27.1), stepped through
the same random traces (:mod:`tests.support.copy_sides` builds both sides,
:mod:`tests.support.profiling_machine` steps them).

Traces: bursts of short and long requests (shared prefixes), chunked
prefill under a token budget of 128 to 2048 and a per-request chunk limit,
a KV pool small enough to force preemption, natural finishes, aborts, one
forced prefix-cache reset; two steps in flight (profiling chunk requires
pipeline parallelism, whose engine keeps a batch queue); both predictors
fitted by the schedulers' own ``run_profiling_chunk_init()`` from the same
synthetic timings (convex, steep, nearly linear and concave latency models,
smoothing on or off, online calibration on or off), then refitted online,
and retargeted, from the same samples. Every field of both
``SchedulerOutput``s and ``EngineCoreOutputs`` and the scheduler state
(with the predictor's) must agree on every step, except the paths in
:data:`DRIFT`. Drift P11 is taken out of the copy's side instead: its
requests keep the prefill stats of their first admission, as vLLM's do
(:class:`~tests.support.profiling_machine.FirstAdmissionStats`), so the
override's are compared field by field; without that the run diverges
there (the P11 control).

Left out: the scheduler has no async variant (vllm-ascend uses this class
with or without async scheduling; the two steps in flight here are the PP
batch queue); multimodal, speculative decoding, KV/EC connectors, LoRA,
structured output and streaming input (the copy misses vLLM's code for
them: findings P5-P8 of ``docs/schedule-copies.md``, so those traces would
only measure drift; with a connector the override also predicts a waiting
request's chunk from its local prefix-cache hit only, see
``_chunk_start()``); throttled steps (the copy ignores
``throttle_prefills``: P1). Prefix-cache hits are in the traces: the
override repeats the local lookup the copy predicted from.

Negative controls: an override whose cap ignores the prediction, and one
whose admission never stops (``STOP`` turned into ``ADMIT``), must each make
the same machine fail.

Runs on the release lane with ``$VAB_VLLM_ASCEND_SRC`` set (skipped without,
with the reason); by hand: ``VAB_VLLM_ASCEND_SRC=/path/to/vllm-ascend
$venv/bin/python -m pytest tests/test_profiling_override_differential.py``.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import pytest

from tests.support import vllm_ascend_src

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # hypothesis state machines over two schedulers
]

SRC = vllm_ascend_src.activate_or_skip()

from hypothesis import Phase, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

from tests.support import copy_sides  # noqa: E402
from tests.support.differential import (  # noqa: E402
    DIFFERENTIAL_SETTINGS,
    Divergence,
)
from tests.support.profiling_machine import REACHED, machine  # noqa: E402

REL = "vllm_ascend/core/scheduler_profiling_chunk.py"
PATCH = copy_sides.downstream_patch("0004")
COPY = copy_sides.copy_module(SRC, REL)
OVERRIDE = copy_sides.override_module(SRC, REL, PATCH)
# The copy's drift (docs/schedule-copies.md, findings P1-P10) that shows on
# these traces, by the output path it shows at; every other path must match.
DRIFT: dict[str, str] = {
    # P10: since 0.27.0 the scheduler records the prefix-cache lookups
    # (upstream 1017-1020); the copy never does, so its stats stay empty.
    "EngineCoreOutputs.scheduler_stats.prefix_cache_stats": "P10",
    # P9: 0.27.1's output reports the requests a prefix-cache reset
    # preempted between steps (reset_preempted_req_ids, upstream 1217); the
    # copy reports only its own step's preemptions. The requests' preemption
    # counters (in the compared state) still agree.
    "SchedulerOutput.preempted_req_ids": "P9",
    # P11 (the copy resets a resumed request's prefill stats) is taken out of
    # the copy's side: profiling_machine.FirstAdmissionStats.
}


# Longer traces than the shared settings: a long prompt needs several steps
# to be chunked through, and the machine's refit rules take their share.
SETTINGS = settings(DIFFERENTIAL_SETTINGS, max_examples=200, stateful_step_count=50)


# Known-bad overrides, each a one-line change of patch 0004's module: the
# predicted chunk never caps; admission never stops when the budget is spent.
BAD = {
    "cap ignored": (
        "num_new_tokens = min(predicted_chunk, num_new_tokens)",
        "pass",
    ),
    "STOP turned into ADMIT": (
        "return vllm_scheduler.Admission.STOP",
        "return vllm_scheduler.Admission.ADMIT",
    ),
}


def _bad_override(name: str) -> Any:
    return copy_sides.variant_module(SRC, REL, PATCH, *BAD[name])


def test_sides_are_what_they_claim() -> None:
    """The copy has its own ``schedule()`` over the installed vLLM; the
    override has a wrapper and answers the two seams."""
    cls = COPY.ProfilingChunkScheduler
    assert "_cap_num_new_tokens" not in vars(cls)
    lines, _ = inspect.getsourcelines(vars(cls)["schedule"])
    assert len(lines) > 500, len(lines)
    cls = OVERRIDE.ProfilingChunkScheduler
    lines, _ = inspect.getsourcelines(vars(cls)["schedule"])
    assert len(lines) < 10, len(lines)
    assert {"_cap_num_new_tokens", "_waiting_admission"} <= set(vars(cls))
    assert OVERRIDE.Scheduler is not COPY.Scheduler


def test_override_matches_the_copy_on_random_traces() -> None:
    cls = machine(COPY, OVERRIDE.ProfilingChunkScheduler, frozenset(DRIFT))
    run_state_machine_as_test(cls, settings=SETTINGS)
    print(f"{cls.__name__} coverage: {dict(cls.coverage)}")
    for reached in REACHED:
        assert cls.coverage[reached] > 0, (reached, dict(cls.coverage))


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_override_is_caught(name: str) -> None:
    bad = _bad_override(name).ProfilingChunkScheduler
    strict = settings(SETTINGS, phases=[Phase.generate])
    with pytest.raises(Divergence):
        run_state_machine_as_test(machine(COPY, bad, frozenset(DRIFT)), settings=strict)


def test_p11_is_the_copy_s_only_prefill_stats_difference() -> None:
    """Without :class:`~tests.support.profiling_machine.FirstAdmissionStats`
    the copy's own prefill stats diverge, and only there (drift P11)."""
    base = machine(COPY, OVERRIDE.ProfilingChunkScheduler, frozenset(DRIFT))
    own_stats = type(
        base.__name__, (base,), {"upstream_prefill_stats": False, "coverage": Counter()}
    )
    # The first trace that resumes a request with a different prefix-cache
    # hit before its first output comes after the 200 traces above (at 800
    # the guarded run still passes: 16,997 steps, every field compared).
    strict = settings(SETTINGS, max_examples=800, phases=[Phase.generate])
    with pytest.raises(Divergence, match=r"\.prefill_stats\."):
        run_state_machine_as_test(own_stats, settings=strict)
