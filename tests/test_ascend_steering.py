# SPDX-License-Identifier: Apache-2.0
"""Handing vllm-ascend balance off (vllm_ascend_balance/wiring/ascend_steering.py).

- Property (pure, every lane's result is the same: release lane): for every
  combination of the three enabling forms and the options, in either
  section, ``steer()`` keeps this package's reading of the setting exactly
  (nothing lost), is idempotent and pure, and leaves the switches reading off
  by both precedences vllm-ascend has documented (main: nested, legacy,
  environment; 0.23.0.post1: legacy, environment). Negative control: a
  steering that only turns the nested key off is caught by the same check.
- With vllm-ascend's real readers (ascend and ascend-main lanes): its own
  decision function and ``AscendConfig`` read every steered config as off,
  and read the unsteered one as on for the forms they know (the negative
  control: the steering is what turns them off).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import os
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from tests.support.engine_entry import ASCEND_PATCH_MODULE
from vllm_ascend_balance.wiring import ascend_steering
from vllm_ascend_balance.wiring.config import (
    CARRIED_KEY,
    ENV_SETTING,
    OPTIONS,
    SWITCH,
    BalanceConfigError,
)
from vllm_ascend_balance.wiring.config_read import (
    read_balance_setting,
    read_user_setting,
)

SWITCH_VALUES = st.sampled_from(["absent", True, False])
ENV_VALUES = st.sampled_from(["absent", "1", "0"])
OPTION_VALUES = {
    "balance_max_frozen_steps": st.sampled_from([1, 64, None]),
    "balance_stall_warning_s": st.sampled_from([0, 0.5, 60, None]),
    "balance_collective": st.sampled_from(["all_gather", "all_reduce_max", None]),
}


@st.composite
def user_configs(draw: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """An ``additional_config`` and environment as a user may write them."""
    additional: dict[str, Any] = {}
    sched: dict[str, Any] = {}
    if draw(st.booleans()):
        additional["scheduler_config"] = sched
    nested, legacy, env = draw(SWITCH_VALUES), draw(SWITCH_VALUES), draw(ENV_VALUES)
    if nested != "absent":
        sched[SWITCH] = nested
        additional["scheduler_config"] = sched
    if legacy != "absent":
        additional[SWITCH] = legacy
    for key, values in OPTION_VALUES.items():
        where = draw(st.sampled_from(["absent", "nested", "top"]))
        if where == "nested":
            sched[key] = draw(values)
            additional["scheduler_config"] = sched
        elif where == "top":
            additional[key] = draw(values)
    if draw(st.booleans()):
        additional["enable_cpu_binding"] = True  # a vllm-ascend key, kept
    environ = {} if env == "absent" else {ENV_SETTING: env}
    return additional, environ


def main_precedence(additional: dict[str, Any], environ: dict[str, str]) -> bool:
    """vllm-ascend main's documented reading (its additional_config guide):
    the nested key, then the legacy key, then the environment variable."""
    sched = additional.get("scheduler_config") or {}
    if SWITCH in sched:
        return bool(sched[SWITCH])
    if SWITCH in additional:
        return bool(additional[SWITCH])
    return environ.get(ENV_SETTING, "0") == "1"


def release_023_precedence(additional: dict[str, Any], environ: dict[str, str]) -> bool:
    """vllm-ascend 0.23.0.post1's reading: the legacy key, then the
    environment variable (no nested key)."""
    if SWITCH in additional:
        return bool(additional[SWITCH])
    return environ.get(ENV_SETTING, "0") == "1"


def violation(steer: Any, additional: dict[str, Any], environ: dict[str, str]) -> str:
    """What ``steer`` gets wrong for this config ("" if nothing)."""
    original = copy.deepcopy(additional)
    setting = read_user_setting(additional, environ, quiet=True)
    steered = steer(additional, environ)
    if additional != original:
        return "steer changed its argument"
    if not setting.enabled:
        return "" if steered is None else "steered a config that asks for nothing"
    if steered is None:
        return "did not steer a requested setting"
    env = {**environ, **steered.env}
    if steered.setting != setting:
        return "the setting changed"
    again = read_balance_setting(
        SimpleNamespace(additional_config=steered.additional_config), env, quiet=True
    )
    carried = steered.additional_config[CARRIED_KEY]
    if not again.enabled or carried != setting.carried():
        return "the steered config does not carry the setting"
    if main_precedence(steered.additional_config, env):
        return "vllm-ascend main would read balance on"
    if release_023_precedence(steered.additional_config, env):
        return "vllm-ascend 0.23.0.post1 would read balance on"
    twice = steer(steered.additional_config, env)
    if twice is None or twice.additional_config != steered.additional_config:
        return "not idempotent"
    lost = {
        k: v
        for k, v in additional.items()
        if k not in (SWITCH, "scheduler_config", *OPTIONS)
        and steered.additional_config.get(k) != v
    }
    return f"lost {lost}" if lost else ""


def _valid(config: tuple[dict[str, Any], dict[str, str]]) -> bool:
    try:
        read_user_setting(*config, quiet=True)
    except BalanceConfigError:
        return False  # written twice: refused (tests/test_config_reading.py)
    return True


pytestmark = pytest.mark.lane_scope("release")


@settings(max_examples=400, deadline=None)
@given(user_configs().filter(_valid))
def test_steering_keeps_the_setting_and_turns_vllm_ascend_off(
    config: tuple[dict[str, Any], dict[str, str]],
) -> None:
    assert violation(ascend_steering.steer, *config) == ""


def nested_only(
    additional: dict[str, Any], environ: dict[str, str]
) -> ascend_steering.Steered | None:
    """Known-bad: turns only the nested key off (what main reads first)."""
    steered = ascend_steering.steer(additional, environ)
    if steered is None:
        return None
    out = copy.deepcopy(steered.additional_config)
    if SWITCH in additional:
        out[SWITCH] = additional[SWITCH]
    return ascend_steering.Steered(steered.setting, out, {})


def test_negative_control_nested_only_steering_is_caught() -> None:
    from hypothesis import find

    try:
        find(
            user_configs().filter(_valid),
            lambda config: violation(nested_only, *config) != "",
            settings=settings(max_examples=2000, database=None),
        )
    except NoSuchExample:
        pytest.fail("the property did not catch a steering that misses 0.23's keys")


def test_balance_off_is_not_steered() -> None:
    off = {"scheduler_config": {SWITCH: False}, SWITCH: True}
    assert ascend_steering.steer(off, {ENV_SETTING: "1"}) is None
    assert ascend_steering.steer({}, {}) is None


# --------------------------------------------------------------------------
# vllm-ascend's real readers


needs_vllm_ascend = pytest.mark.skipif(
    importlib.util.find_spec("vllm_ascend") is None,
    reason="needs vllm-ascend's Python code: the ascend lane installs "
    "0.23.0.post1; for vllm-ascend main, VAB_VLLM_ASCEND_SRC=<checkout> "
    "scripts/test --lane ascend-main",
)
ASCEND_LANES = pytest.mark.lane_scope("ascend", "ascend-main")


@contextlib.contextmanager
def _environment(environ: dict[str, str]) -> Any:
    """``VLLM_ASCEND_BALANCE_SCHEDULING`` as ``environ`` has it, then back."""
    before = os.environ.get(ENV_SETTING)
    os.environ.pop(ENV_SETTING, None)
    os.environ.update(environ)
    try:
        yield
    finally:
        os.environ.pop(ENV_SETTING, None)
        if before is not None:
            os.environ[ENV_SETTING] = before


def their_readings(
    additional: dict[str, Any], environ: dict[str, str]
) -> tuple[bool, bool]:
    """(vllm-ascend's decision function, its ``AscendConfig``) for a config,
    the ``AscendConfig`` initialised from it as vllm-ascend's platform does
    when vLLM creates a config."""
    from vllm.platforms import current_platform

    from tests.support.vllm_objects import make_vllm_config

    current_platform.pre_register_and_update()
    patch = importlib.import_module(ASCEND_PATCH_MODULE)
    ascend_config = importlib.import_module("vllm_ascend.ascend_config")
    with _environment(environ):
        cfg = make_vllm_config(data_parallel_size=2, additional_config=additional)
        theirs = ascend_config.init_ascend_config(cfg)
        reads = getattr(theirs, "scheduler_config", theirs).enable_balance_scheduling
        return bool(patch._balance_scheduling_enabled(cfg)), bool(reads)


@needs_vllm_ascend
@ASCEND_LANES
@settings(max_examples=40, deadline=None)
@given(user_configs().filter(_valid).filter(lambda c: ascend_steering.steer(*c)))
def test_vllm_ascend_reads_every_steered_config_as_off(
    case: tuple[dict[str, Any], dict[str, str]],
) -> None:
    additional, environ = case
    steered = ascend_steering.steer(additional, environ)
    assert steered is not None
    env = {**environ, **steered.env}
    assert their_readings(steered.additional_config, env) == (False, False)


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("form", ["nested", "legacy", "env"])
def test_negative_control_vllm_ascend_reads_unsteered_as_on(form: str) -> None:
    additional: dict[str, Any] = {
        "nested": {"scheduler_config": {SWITCH: True}},
        "legacy": {SWITCH: True},
        "env": {},
    }[form]
    environ = {ENV_SETTING: "1"} if form == "env" else {}
    decides, reads = their_readings(additional, environ)
    if form == "nested" and not decides:
        pytest.skip("this vllm-ascend does not read the nested key itself")
    assert decides and reads
