# SPDX-License-Identifier: Apache-2.0
"""Balance off is upstream: the scheduler class an engine core gets when the
setting is off is upstream's own (``Scheduler`` or ``AsyncScheduler``), with
no gather buffer, zero collectives over generated traces and outputs equal
to the plain upstream scheduler's (real schedulers, the rig of
:mod:`tests.support.scheduler_rig`).

Negative control: a disabled path that composes the gate anyway.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
import torch.distributed as dist
import vllm.v1.engine.core as engine_core_mod
from hypothesis import given
from vllm.v1.core.sched.async_scheduler import AsyncScheduler

from tests.support.scheduler_rig import Rig, Scenario, hypothesis_settings, scenarios
from tests.support.vllm_objects import make_vllm_config
from vllm_ascend_balance.wiring import activation, composition, engine_chain
from vllm_ascend_balance.wiring.config import SETTING
from vllm_ascend_balance.wiring.engine_hook import gather_hook_installed

# why: balance off must equal each release's Scheduler/AsyncScheduler
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

#: ``base -> the class under test``.
Provider = Callable[[type], type]


@contextlib.contextmanager
def counting_collectives() -> Iterator[list[str]]:
    """Count (and pass through) every collective the code under test makes."""
    calls: list[str] = []

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(dist, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return wrapper

    names = ("all_gather_into_tensor", "all_gather", "all_reduce", "broadcast")
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(mock.patch.object(dist, name, counted(name)))
        yield calls


def _recording_upstream(seen: dict[str, Any]) -> Callable[..., None]:
    def record(*args: Any, **kwargs: Any) -> None:
        seen["engine_cls"] = engine_core_mod.DPEngineCoreProc
        seen["scheduler_cls"] = kwargs[
            "vllm_config"
        ].scheduler_config.get_scheduler_cls()

    return record


@functools.cache
def disabled_scheduler_cls(base: type) -> type:
    """The scheduler class an engine core gets when balance is off: run the
    package's ``run_engine_core`` on a DP 2 MoE config with the setting off,
    the link below it replaced by a recorder (no engine starts)."""
    config = make_vllm_config(
        data_parallel_size=2,
        additional_config={"scheduler_config": {"enable_balance_scheduling": False}},
    )
    # vLLM's CPU platform turns async scheduling off; on accelerators it is
    # on by default, which makes AsyncScheduler the class to keep.
    config.scheduler_config.async_scheduling = base is AsyncScheduler
    seen: dict[str, Any] = {}
    previous = engine_core_mod.DPEngineCoreProc
    try:
        with mock.patch.object(engine_chain, "_next", _recording_upstream(seen)):
            activation.run_engine_core(vllm_config=config, dp_rank=0, local_dp_rank=0)
    finally:
        engine_core_mod.DPEngineCoreProc = previous
    assert seen["engine_cls"] is previous, SETTING
    assert not gather_hook_installed(previous), SETTING
    return seen["scheduler_cls"]


def check_disabled(provider: Provider, negative: bool = False) -> None:
    """Disabled: the upstream class itself, no buffer, no collective,
    outputs equal to upstream."""

    @hypothesis_settings(40, negative)
    @given(scenario=scenarios())
    def run(scenario: Scenario) -> None:
        cls = provider(scenario.base)
        assert cls is scenario.base, f"{cls} is not upstream's {scenario.base}"
        disabled = Rig(cls, scenario)
        plain = Rig(scenario.base, scenario)
        assert not hasattr(disabled.scheduler, "balance_gathered"), "buffer present"
        assert not hasattr(disabled.scheduler, "admission_gather"), "gather present"
        with counting_collectives() as calls:
            for step in range(scenario.horizon):
                assert disabled.step(step) == plain.step(step), "output differs"
        assert calls == [], f"collectives made while disabled: {calls}"

    run()


def test_disabled_is_upstream() -> None:
    check_disabled(disabled_scheduler_cls)


def _always_compose(base: type) -> type:
    """A disabled path that composes the gate anyway."""
    return composition.compose_scheduler(base)


def test_negative_control_fails() -> None:
    with pytest.raises(AssertionError, match="not upstream's"):
        check_disabled(_always_compose, negative=True)
