# SPDX-License-Identifier: Apache-2.0
"""The ``throttled`` policy's engine hook and refusal
(:mod:`~vllm_ascend_balance.wiring.throttle_hook`,
:func:`~vllm_ascend_balance.wiring.reach.can_throttle`).

On vLLM's real ``DPEngineCoreProc``: activation installs the hook on
``_should_throttle_prefills`` only where the active policy holds chunks;
the hooked method says yes on a frozen step of that policy (and clears the
scheduler's ``prefill_capacity_bound``), keeps vLLM's own answer otherwise,
and a release whose ``Scheduler.schedule`` takes no ``throttle_prefills``
is refused in one line. Real schedulers; the engine object handed to the
hooked method is a stand-in carrying the fields that method reads (an
engine process cannot start here without a model run).

Negative controls: ``batched`` (a policy that does not hold chunks) gets no
hook and no throttle while frozen; without the hook vLLM's own answer stays
no on a frozen step.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import vllm.v1.engine.core as engine_core_mod
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.vllm_objects import make_scheduler, make_vllm_config
from vllm_ascend_balance.wiring import (
    activation,
    activation_plan,
    composition,
    engine_chain,
)
from vllm_ascend_balance.wiring.config import BalanceConfigError
from vllm_ascend_balance.wiring.engine_hook import (
    remove_gather_hook,
    upstream_dp_engine,
)
from vllm_ascend_balance.wiring.reach import can_throttle
from vllm_ascend_balance.wiring.throttle_hook import (
    THROTTLE,
    remove_throttle_hook,
    throttle_hook_installed,
)

pytestmark = pytest.mark.lane_scope("release", "main", "fork")

UPSTREAM_ENGINE = upstream_dp_engine(engine_core_mod.DPEngineCoreProc)


def config(policy: str, **kwargs: Any) -> Any:
    kwargs.setdefault("data_parallel_size", 2)
    switch = {"enable_balance_scheduling": True, "balance_policy": policy}
    return make_vllm_config(additional_config={"scheduler_config": switch}, **kwargs)


@pytest.fixture(autouse=True)
def _clean_engine(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(engine_core_mod, "DPEngineCoreProc", UPSTREAM_ENGINE)
    monkeypatch.setattr(engine_chain, "_next", lambda *a, **k: None)
    for remove in (remove_gather_hook, remove_throttle_hook):
        remove(UPSTREAM_ENGINE)
    yield
    for remove in (remove_gather_hook, remove_throttle_hook):
        remove(UPSTREAM_ENGINE)


@pytest.mark.parametrize(
    ("policy", "hooked"), [("throttled", True), ("batched", False)]
)
def test_activation_hooks_only_a_chunk_holding_policy(
    policy: str, hooked: bool
) -> None:
    activation.run_engine_core(vllm_config=config(policy), dp_rank=0, local_dp_rank=0)
    assert throttle_hook_installed(UPSTREAM_ENGINE) is hooked


def _engine(policy: str, frozen: bool, interval: int = 1, step: int = 0) -> Any:
    """A stand-in engine: a real gated scheduler and the two fields vLLM's
    own ``_should_throttle_prefills`` reads."""
    cls = composition.compose_scheduler(Scheduler, max_held_steps=64, policy=policy)
    scheduler = make_scheduler(cls, vllm_config=config(policy))
    scheduler.balance_frozen = frozen
    scheduler.prefill_capacity_bound = True  # as after a step the seam held
    return SimpleNamespace(
        scheduler=scheduler, prefill_schedule_interval=interval, step_counter=step
    )


def test_hook_throttles_a_frozen_step_and_clears_the_capacity_bound() -> None:
    activation.run_engine_core(
        vllm_config=config("throttled"), dp_rank=0, local_dp_rank=0
    )
    ask = getattr(UPSTREAM_ENGINE, THROTTLE)
    frozen = _engine("throttled", frozen=True)
    assert ask(frozen) is True
    assert frozen.scheduler.prefill_capacity_bound is False
    opened = _engine("throttled", frozen=False)
    assert ask(opened) is False and opened.scheduler.prefill_capacity_bound is True
    # vLLM's own cadence still throttles an open step.
    assert ask(_engine("throttled", frozen=False, interval=2, step=1)) is True
    # Negative control: a policy that does not hold chunks never throttles.
    assert ask(_engine("batched", frozen=True)) is False


def test_without_the_hook_a_frozen_step_is_not_throttled() -> None:
    """Negative control of the hook: vLLM's own answer on the same frozen
    step is no, so the hook is what holds the chunks."""
    ask = getattr(UPSTREAM_ENGINE, THROTTLE)
    assert not throttle_hook_installed(UPSTREAM_ENGINE)
    assert ask(_engine("throttled", frozen=True)) is False


class NoThrottleScheduler(Scheduler):
    """A ``schedule()`` without ``throttle_prefills`` (vLLM before 0.27;
    it reaches the seam through ``super()``)."""

    def schedule(self) -> Any:  # type: ignore[override]
        return super().schedule()


def test_release_without_throttle_prefills_is_refused() -> None:
    assert can_throttle(Scheduler) and not can_throttle(NoThrottleScheduler)
    cfg = config("throttled")
    cfg.scheduler_config.scheduler_cls = NoThrottleScheduler
    with pytest.raises(BalanceConfigError) as info:
        activation_plan.plan_activation(cfg)
    message = str(info.value)
    assert "\n" not in message
    for needle in ("balance_policy", "throttled", "throttle_prefills", '"batched"'):
        assert needle in message, (needle, message)
    # Control: the same scheduler_cls with a policy that holds no chunks.
    cfg = config("batched")
    cfg.scheduler_config.scheduler_cls = NoThrottleScheduler
    assert activation_plan.plan_activation(cfg).active


@pytest.mark.lane_scope("ascend")
def test_the_ascend_lanes_vllm_refuses_throttled() -> None:
    """vLLM 0.23 (the ascend lane's pin) has no ``throttle_prefills``: the
    stock ``Scheduler`` is refused for ``throttled``, accepted for
    ``batched``."""
    assert not can_throttle(Scheduler)
    with pytest.raises(BalanceConfigError, match="throttle_prefills"):
        activation_plan.plan_activation(config("throttled"))
    assert activation_plan.plan_activation(config("batched")).active
