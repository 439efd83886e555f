# SPDX-License-Identifier: Apache-2.0
"""A partly applied seam patch is refused, not served with a gate that has
no effect (docs/install.md, "Check"): a ``scheduler.py`` that defines
``Scheduler._should_stop_admitting_waiting()`` but whose ``schedule()``
never calls it (the patch's first hunk applied alone).

The stand-in is vLLM's own ``Scheduler.schedule()``, its source recompiled
with the seam's name replaced in it: the installed code, less the call.
Negative control (by hand): the rule before (``has_seam`` alone) activates
balance on it, and doctor says ``seam present: True``.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import textwrap
from collections.abc import Callable

import pytest
import vllm.v1.core.sched.scheduler as sched_mod
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.balance_configs import ON, assert_one_line_error, vllm_config
from tests.support.vllm_objects import tiny_moe_model_dir
from vllm_ascend_balance.gate.scheduler import SEAM
from vllm_ascend_balance.tools import cli
from vllm_ascend_balance.wiring import activation_plan, reach
from vllm_ascend_balance.wiring.config import SETTING, BalanceConfigError

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


def schedule_calling(name: str) -> Callable[..., object]:
    """vLLM's ``Scheduler.schedule``, recompiled calling ``name`` where it
    calls the seam."""
    source = textwrap.dedent(inspect.getsource(Scheduler.schedule))
    assert SEAM in source, "this vLLM's schedule() calls the seam itself"
    namespace: dict[str, object] = {}
    exec(  # noqa: S102 - vLLM's own source, one name changed
        compile(source.replace(SEAM, name), sched_mod.__file__, "exec"),
        vars(sched_mod),
        namespace,
    )
    return namespace["schedule"]  # type: ignore[return-value]


def test_vllms_own_schedule_calls_the_seam() -> None:
    assert reach.has_seam() and reach.vllm_consults_seam()


def test_a_schedule_that_never_calls_the_seam_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Scheduler, "schedule", schedule_calling("_no_such_seam"))
    assert reach.has_seam() and not reach.vllm_consults_seam()
    with pytest.raises(BalanceConfigError) as info:
        activation_plan.plan_activation(vllm_config(ON))
    assert_one_line_error(info.value, SETTING, SEAM, "partly applied", "patch-vllm")


def test_the_seam_called_through_a_scheduler_method_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A later vLLM may move the waiting loop out of ``schedule()``."""

    def admission_closed(self: Scheduler) -> bool:
        return self._should_stop_admitting_waiting()

    monkeypatch.setattr(Scheduler, "_admission_closed", admission_closed, raising=False)
    monkeypatch.setattr(Scheduler, "schedule", schedule_calling("_admission_closed"))
    assert reach.vllm_consults_seam()
    assert activation_plan.plan_activation(vllm_config(ON)).active


def test_doctor_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Scheduler, "schedule", schedule_calling("_no_such_seam"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(
            ["doctor", tiny_moe_model_dir(), "--data-parallel-size", "2",
             "--skip-tokenizer-init", "--additional-config", json.dumps(ON)]
        )  # fmt: skip
    lines = out.getvalue().splitlines()
    (seam,) = [x for x in lines if x.startswith("seam present:")]
    assert "False" in seam and "partly patched" in seam, seam
    (verdict,) = [x for x in lines if x.startswith("verdict:")]
    assert "cannot work" in verdict and "partly applied" in verdict, verdict
    assert status != 0
