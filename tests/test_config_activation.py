# SPDX-License-Identifier: Apache-2.0
"""Configuration and conditional activation, on real ``VllmConfig`` objects.

- :mod:`vllm_ascend_balance.wiring.config`: three forms enable balance (nested key,
  legacy key, ``VLLM_ASCEND_BALANCE_SCHEDULING``) with vllm-ascend's
  precedence; a JSON value that is not a boolean or an env value that is not
  0/1/true/false is a one-line ``BalanceConfigError`` naming the setting and
  the fix; a disagreeing lower form is ignored with a warning;
  PD-disaggregated ``kv_role`` is refused.
- :func:`~vllm_ascend_balance.wiring.activation_plan.plan_activation`: refuses a vLLM
  without the seam and a ``scheduler_cls`` that is not a ``Scheduler``; DP
  size 1 and dense models get a note and nothing is activated.
- :func:`~vllm_ascend_balance.wiring.activation.run_engine_core` (this package's
  link): with balance off it leaves the engine class and scheduler class as
  they are; with balance on it hooks vLLM's ``DPEngineCoreProc`` and composes
  the mixin onto ``Scheduler``, ``AsyncScheduler`` or a custom
  ``scheduler_cls``. The link below it is replaced by a recorder
  (``engine_chain._next``) so no engine starts.
- :func:`~vllm_ascend_balance.wiring.activation.register`: idempotent, reachable
  through vLLM's own plugin loader, and touches neither ``run_engine_core``
  nor ``DPEngineCoreProc``; the link is installed when a config requesting
  balance is created, and the target pickles by name to it in a spawned
  child. Coexistence with other plugins' wrappers: ``test_coexistence.py``;
  schedulers the gate cannot reach (the reach rule, the tripwire):
  ``test_scheduler_reach.py``.
"""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from typing import Any

import pytest
import vllm.v1.core.sched.scheduler as sched_mod
import vllm.v1.engine.core as engine_core_mod
from vllm.config import KVTransferConfig, ModelConfig
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.interface import SchedulerInterface
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.balance_configs import (
    OFF,
    ON,
    assert_one_line_error,
    vllm_config,
)
from tests.support.processes import run_processes
from vllm_ascend_balance.gate.policies import POLICIES
from vllm_ascend_balance.gate.scheduler import SEAM, BalanceSchedulerMixin
from vllm_ascend_balance.gate.settings import MAX_BOUND_STEPS
from vllm_ascend_balance.wiring import (
    activation,
    activation_plan,
    composition,
    config,
    config_read,
    engine_chain,
    reach,
)
from vllm_ascend_balance.wiring.config import (
    ENABLE_EXAMPLE,
    ENV_SETTING,
    LEGACY_SETTING,
    SETTING,
    BalanceConfigError,
)
from vllm_ascend_balance.wiring.config_read import read_balance_setting
from vllm_ascend_balance.wiring.engine_hook import (
    gather_hook_installed,
    remove_gather_hook,
    upstream_dp_engine,
)

# why: VllmConfig, plugin loader, run_engine_core, DPEngineCoreProc, spawn
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

UPSTREAM_ENGINE = upstream_dp_engine(engine_core_mod.DPEngineCoreProc)
UPSTREAM_RUN = engine_chain.current_target()
# Where vllm-ascend is installed its balance patch replaces the module-level
# ``Scheduler`` once imported, so the class a sync config resolves to is read
# as ``sched_mod.Scheduler`` when a test asserts, not bound at import.


class CustomScheduler(Scheduler):
    """A ``scheduler_cls`` of the kind vllm-ascend ships."""


class InterfaceOnlyScheduler(SchedulerInterface):  # type: ignore[misc]
    """Implements the interface, not a ``Scheduler``: no seam to override."""


@pytest.fixture(autouse=True)
def _clean_engine(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every test starts with upstream's engine class unhooked, no link
    remembered and no balance environment variable; hooks are removed after."""
    monkeypatch.setattr(engine_core_mod, "DPEngineCoreProc", UPSTREAM_ENGINE)
    monkeypatch.setattr(engine_chain, "_next", None)
    monkeypatch.setattr(engine_chain, "_next_attr", None)
    monkeypatch.delenv(ENV_SETTING, raising=False)
    monkeypatch.delenv(engine_chain.NEXT_ENV, raising=False)
    remove_gather_hook(UPSTREAM_ENGINE)
    yield
    remove_gather_hook(UPSTREAM_ENGINE)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Replace upstream's ``run_engine_core`` (the call at the end of ours)
    by a recorder of what an engine would be built from."""
    calls: list[dict[str, Any]] = []

    def record(*args: Any, **kwargs: Any) -> str:
        calls.append(
            {
                "args": args,
                "kwargs": kwargs,
                "engine_cls": engine_core_mod.DPEngineCoreProc,
                "hooked": gather_hook_installed(engine_core_mod.DPEngineCoreProc),
                "scheduler_cls": kwargs[
                    "vllm_config"
                ].scheduler_config.get_scheduler_cls(),
            }
        )
        return "upstream ran"

    monkeypatch.setattr(engine_chain, "_next", record)
    return calls


# --------------------------------------------------------------------------
# config


def test_default_is_off() -> None:
    setting = read_balance_setting(vllm_config())
    assert (setting.enabled, setting.source) == (False, "default")


@pytest.mark.parametrize("value", [True, False])
def test_new_key(value: bool) -> None:
    additional = {"scheduler_config": {"enable_balance_scheduling": value}}
    setting = read_balance_setting(vllm_config(additional))
    assert (setting.enabled, setting.source) == (value, SETTING)


@pytest.mark.parametrize("value", ["true", "yes", 1, 0, 1.0, [], {}, None])
@pytest.mark.parametrize("key", [SETTING, LEGACY_SETTING])
def test_non_boolean_is_a_one_line_error(value: Any, key: str) -> None:
    """null too (docs/operating.md: any value that is not a JSON boolean);
    read as absent it left balance off without a word. Negative control (by
    hand): ``_read_enabled`` skipping a null switch accepts it, off."""
    if key == SETTING:
        additional = {"scheduler_config": {"enable_balance_scheduling": value}}
    else:
        additional = {"enable_balance_scheduling": value}
    cfg = vllm_config(additional)
    with pytest.raises(BalanceConfigError) as info:
        read_balance_setting(cfg)
    assert_one_line_error(info.value, key, "true or false", ENABLE_EXAMPLE)
    with pytest.raises(BalanceConfigError):
        activation_plan.plan_activation(cfg)


def test_legacy_key_accepted_with_deprecation_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=config_read.logger.name):
        setting = read_balance_setting(vllm_config({"enable_balance_scheduling": True}))
    assert (setting.enabled, setting.source) == (True, LEGACY_SETTING)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "deprecated" in m and LEGACY_SETTING in m and SETTING in m for m in warnings
    ), warnings
    assert activation_plan.plan_activation(
        vllm_config({"enable_balance_scheduling": True})
    ).active


def _switch_forms(
    forms: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The ``additional_config`` holding ``forms``' nested (``new``) and
    legacy switches; its ``env`` value set as the environment variable (or
    the variable removed)."""
    additional: dict[str, Any] = {}
    if "new" in forms:
        additional["scheduler_config"] = {"enable_balance_scheduling": forms["new"]}
    if "legacy" in forms:
        additional["enable_balance_scheduling"] = forms["legacy"]
    if "env" in forms:
        monkeypatch.setenv(ENV_SETTING, forms["env"])
    else:
        monkeypatch.delenv(ENV_SETTING, raising=False)
    return additional


@pytest.mark.parametrize(
    ("forms", "expected"),
    [
        ({"new": True, "legacy": False, "env": "0"}, (True, SETTING)),
        ({"new": False, "legacy": True, "env": "1"}, (False, SETTING)),
        ({"legacy": True, "env": "0"}, (True, LEGACY_SETTING)),
        ({"legacy": False, "env": "1"}, (False, LEGACY_SETTING)),
        ({"env": "1"}, (True, ENV_SETTING)),
        ({"env": " TRUE "}, (True, ENV_SETTING)),
        ({"env": "false"}, (False, ENV_SETTING)),
        ({"env": "0"}, (False, ENV_SETTING)),
    ],
)
def test_vllm_ascend_precedence(
    forms: dict[str, Any],
    expected: tuple[bool, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nested key, then legacy key, then the environment variable (vllm-ascend's
    ``AscendConfig`` order); a lower form that disagrees is ignored with a
    warning naming both, and a deprecated form in use warns."""
    additional = _switch_forms(forms, monkeypatch)
    with caplog.at_level(logging.WARNING, logger=config_read.logger.name):
        setting = read_balance_setting(vllm_config(additional))
    assert (setting.enabled, setting.source) == expected
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if len(forms) > 1:
        assert any("is ignored" in w and expected[1] in w for w in warnings), warnings
    if len(forms) > 1 and forms.get("env") == ("0" if expected[0] else "1"):
        # The ignored env var as the user set it ("1", not "true").
        shown = f"{ENV_SETTING}={forms['env']} is ignored"
        assert any(shown in w for w in warnings), warnings
    if expected[1] != SETTING:
        assert any("deprecated" in w and expected[1] in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("forms", "note"),
    [
        ({}, f"{SETTING} is not set (off by default): vLLM runs untouched"),
        ({"env": "0"}, f"{ENV_SETTING} is off: vLLM runs untouched"),
        ({"legacy": False}, f"{LEGACY_SETTING} is off: vLLM runs untouched"),
        ({"new": False}, f"{SETTING} is off: vLLM runs untouched"),
    ],
)
def test_the_off_note_names_the_form_that_said_off(
    forms: dict[str, Any], note: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor's note names the switch to change: the one the user set (the
    code before named the nested key whatever the form, set or not)."""
    additional = _switch_forms(forms, monkeypatch)
    plan = activation_plan.plan_activation(vllm_config(additional), quiet=True)
    assert not plan.active and plan.notes == [note], plan.notes


@pytest.mark.parametrize("value", ["yes", "2", "", "on"])
def test_bad_env_value_is_a_one_line_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SETTING, value)
    with pytest.raises(BalanceConfigError) as info:
        read_balance_setting(vllm_config())
    assert_one_line_error(info.value, ENV_SETTING, ENABLE_EXAMPLE)


def test_env_read_in_a_process_without_ascend_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spawned engine process reads the environment variable itself."""
    monkeypatch.setenv(ENV_SETTING, "1")
    assert activation_plan.plan_activation(vllm_config()).active


def test_scheduler_config_must_be_an_object() -> None:
    with pytest.raises(BalanceConfigError) as info:
        read_balance_setting(vllm_config({"scheduler_config": True}))
    assert_one_line_error(info.value, "additional_config.scheduler_config")


@pytest.mark.parametrize("role", ["kv_producer", "kv_consumer"])
def test_pd_disaggregated_kv_role_refused(role: str) -> None:
    cfg = vllm_config(ON)
    cfg.kv_transfer_config = KVTransferConfig(
        kv_connector="ExampleConnector", kv_role=role
    )
    with pytest.raises(BalanceConfigError) as info:
        activation_plan.plan_activation(cfg)
    assert_one_line_error(info.value, SETTING, "kv_role", role, "kv_both")

    cfg.additional_config = OFF  # balance off: PD-disaggregated is not our business
    assert not activation_plan.plan_activation(cfg).requested


def test_pd_mixed_kv_role_accepted() -> None:
    cfg = vllm_config(ON)
    cfg.kv_transfer_config = KVTransferConfig(
        kv_connector="ExampleConnector", kv_role="kv_both"
    )
    assert activation_plan.plan_activation(cfg).active


# --------------------------------------------------------------------------
# plan_activation


def test_enabled_dp_moe_activates() -> None:
    plan = activation_plan.plan_activation(vllm_config(ON))
    assert plan.requested and plan.active
    assert plan.scheduler_cls is sched_mod.Scheduler


def test_seam_missing_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(Scheduler, SEAM)
    assert not reach.has_seam()
    with pytest.raises(BalanceConfigError) as info:
        activation_plan.plan_activation(vllm_config(ON))
    assert_one_line_error(info.value, SETTING, SEAM, "upstream_patch/")
    # Balance off needs no seam.
    assert not activation_plan.plan_activation(vllm_config(OFF)).active


def test_non_scheduler_scheduler_cls_refused() -> None:
    cfg = vllm_config(ON)
    cfg.scheduler_config.scheduler_cls = InterfaceOnlyScheduler
    with pytest.raises(BalanceConfigError) as info:
        activation_plan.plan_activation(cfg)
    assert_one_line_error(info.value, SETTING, "scheduler_cls", "Scheduler subclass")


def _dense_model_config(tmp_path: Path) -> ModelConfig:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "vocab_size": 32000,
                "max_position_embeddings": 4096,
                "rms_norm_eps": 1e-5,
                "torch_dtype": "float32",
            }
        )
    )
    return ModelConfig(
        model=str(tmp_path),
        skip_tokenizer_init=True,
        max_model_len=4096,
        dtype="float32",
    )


@pytest.mark.usefixtures("clean_engine_core")
@pytest.mark.parametrize("case", ["dp1", "dense"])
def test_no_effect_warns_and_activates_nothing(
    case: str,
    tmp_path: Path,
    recorder: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    if case == "dp1":
        cfg = vllm_config(ON, data_parallel_size=1)
        expected = "data_parallel_size=1"
    else:
        cfg = vllm_config(ON)
        cfg.model_config = _dense_model_config(tmp_path)
        assert not cfg.model_config.is_moe
        expected = "non-MoE"
    plan = activation_plan.plan_activation(cfg)
    assert plan.requested and not plan.active
    assert any(expected in note for note in plan.notes), plan.notes

    # docs/operating.md: "a warning, and nothing is activated". The
    # front-end says it: no engine runs this package's link then (an
    # operator's trial found a server at DP 1 silent when only the link
    # warned).
    with caplog.at_level(logging.WARNING, logger=activation.logger.name):
        _create(cfg)
    assert engine_chain.current_target() is UPSTREAM_RUN
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == activation.logger.name
    ]
    assert len(warned) == 1 and expected in warned[0], warned
    activation.run_engine_core(vllm_config=cfg, dp_rank=0, local_dp_rank=0)
    (call,) = recorder
    assert call["engine_cls"] is UPSTREAM_ENGINE and not call["hooked"]
    assert call["scheduler_cls"] is sched_mod.Scheduler
    assert cfg.scheduler_config.scheduler_cls in (None, Scheduler)


# --------------------------------------------------------------------------
# run_engine_core


def test_disabled_leaves_vllm_untouched(
    monkeypatch: pytest.MonkeyPatch, recorder: list[dict[str, Any]]
) -> None:
    # Another plugin's engine class is left in place, not reset to upstream's.
    other = type("OtherDPEngineCoreProc", (UPSTREAM_ENGINE,), {})
    monkeypatch.setattr(engine_core_mod, "DPEngineCoreProc", other)
    cfg = vllm_config(OFF)
    before = cfg.scheduler_config.scheduler_cls
    result = activation.run_engine_core(
        "positional", vllm_config=cfg, dp_rank=1, local_dp_rank=1, extra="x"
    )
    assert result == "upstream ran"
    (call,) = recorder
    assert call["engine_cls"] is other and not call["hooked"]
    assert engine_core_mod.DPEngineCoreProc is other
    assert cfg.scheduler_config.scheduler_cls is before
    assert call["scheduler_cls"] is sched_mod.Scheduler
    assert call["args"] == ("positional",)
    assert call["kwargs"] == {
        "vllm_config": cfg,
        "dp_rank": 1,
        "local_dp_rank": 1,
        "extra": "x",
    }


@pytest.mark.parametrize("base", ["Scheduler", "AsyncScheduler", "custom"])
def test_enabled_composes_hook_and_mixin(
    base: str, recorder: list[dict[str, Any]]
) -> None:
    cfg = vllm_config(ON)
    if base == "AsyncScheduler":
        # vLLM's CPU platform turns async scheduling off; accelerators default
        # to it, so the scheduler to compose onto is AsyncScheduler.
        cfg.scheduler_config.async_scheduling = True
        expected_base: type = AsyncScheduler
    elif base == "custom":
        cfg.scheduler_config.scheduler_cls = f"{__name__}.CustomScheduler"
        expected_base = CustomScheduler
    else:
        expected_base = sched_mod.Scheduler

    activation.run_engine_core(vllm_config=cfg, dp_rank=0, local_dp_rank=0)
    (call,) = recorder
    engine_cls = call["engine_cls"]
    assert engine_cls is UPSTREAM_ENGINE and call["hooked"]
    composed = call["scheduler_cls"]
    assert composed.__mro__[1:3] == (BalanceSchedulerMixin, expected_base)
    assert composed is composition.compose_scheduler(expected_base)  # cached
    assert SEAM not in composed.__dict__  # the seam comes from the mixin only

    # A second engine core in this process gets the very same classes.
    cfg2 = vllm_config(ON)
    cfg2.scheduler_config.async_scheduling = cfg.scheduler_config.async_scheduling
    if base == "custom":
        cfg2.scheduler_config.scheduler_cls = CustomScheduler
    activation.run_engine_core(vllm_config=cfg2, dp_rank=1, local_dp_rank=1)
    assert recorder[1]["engine_cls"] is engine_cls
    assert recorder[1]["scheduler_cls"] is composed


def test_bad_setting_ends_the_engine_process(
    recorder: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    cfg = vllm_config({"scheduler_config": {"enable_balance_scheduling": "true"}})
    with (
        caplog.at_level(logging.ERROR, logger=activation.logger.name),
        pytest.raises(SystemExit) as info,
    ):
        activation.run_engine_core(vllm_config=cfg, dp_rank=0, local_dp_rank=0)
    assert info.value.code == 1
    assert recorder == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and SETTING in errors[0] and "\n" not in errors[0]


# --------------------------------------------------------------------------
# register, the plugin entry point, spawn


@pytest.fixture
def clean_engine_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's ``run_engine_core`` and ``create_engine_config`` in place
    (restored after the test, whatever register() does)."""
    from vllm.engine.arg_utils import EngineArgs

    monkeypatch.setattr(
        engine_core_mod.EngineCoreProc, "run_engine_core", staticmethod(UPSTREAM_RUN)
    )
    original = EngineArgs.create_engine_config
    while getattr(original, "__vab_checked__", False):
        original = original.__wrapped__
    monkeypatch.setattr(EngineArgs, "create_engine_config", original)


def _loads(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj))


def _create(cfg: Any) -> Any:
    """``EngineArgs.create_engine_config`` as wrapped by register(), for a
    prepared config (the wrapper steers ``EngineArgs.additional_config``,
    then plans what the call returns)."""
    from types import SimpleNamespace

    engine_args = SimpleNamespace(additional_config=cfg.additional_config)
    return activation._check_early(lambda self: cfg)(engine_args)


@pytest.mark.usefixtures("clean_engine_core")
def test_register_is_idempotent_and_leaves_the_engine_alone() -> None:
    from vllm.engine.arg_utils import EngineArgs

    activation.register()
    first = EngineArgs.create_engine_config
    activation.register()
    assert EngineArgs.create_engine_config is first  # not wrapped twice
    assert not getattr(first.__wrapped__, "__vab_checked__", False)
    assert engine_chain.current_target() is UPSTREAM_RUN
    assert engine_core_mod.DPEngineCoreProc is UPSTREAM_ENGINE


@pytest.mark.usefixtures("clean_engine_core")
def test_vllm_plugin_loader_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    import vllm.plugins
    from vllm.engine.arg_utils import EngineArgs

    entry_points = importlib.metadata.entry_points(group="vllm.general_plugins")
    ours = [ep for ep in entry_points if ep.value.startswith("vllm_ascend_balance")]
    assert [ep.load() for ep in ours] == [activation.register]

    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    # Only this package's plugin: loading vllm-ascend's a second time in one
    # process fails (its connectors register once).
    monkeypatch.setenv("VLLM_PLUGINS", "ascend_balance")
    vllm.plugins.load_general_plugins()
    assert getattr(EngineArgs.create_engine_config, "__vab_checked__", False)
    assert engine_chain.current_target() is UPSTREAM_RUN


@pytest.mark.usefixtures("clean_engine_core")
def test_link_installed_only_where_balance_is_requested() -> None:
    _create(vllm_config(OFF))
    assert engine_chain.current_target() is UPSTREAM_RUN
    _create(vllm_config(ON))
    assert engine_chain.current_target() is activation.run_engine_core
    assert isinstance(
        engine_core_mod.EngineCoreProc.__dict__["run_engine_core"], staticmethod
    )
    _create(vllm_config(ON))  # not wrapped twice
    assert engine_chain.resolve_next(activation.run_engine_core) is UPSTREAM_RUN
    # A later config with balance off in this process puts the chain back.
    _create(vllm_config(OFF))
    assert engine_chain.current_target() is UPSTREAM_RUN


@pytest.mark.usefixtures("clean_engine_core")
@pytest.mark.parametrize(
    "additional",
    [
        {"scheduler_config": {"enable_balance_scheduling": False, "balance_policy": 1}},
        {"enable_balance_scheduling": False},  # the deprecated form
    ],
)
def test_the_front_end_logs_each_warning_once(
    additional: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The front-end reads the user's config twice (steering, then the plan
    of the config created): each warning is logged once (doctor's:
    test_doctor.py). Negative control (by hand): ``_check_early`` planning
    without ``quiet=True`` logs each twice."""
    warned: list[str] = []
    monkeypatch.setattr(
        config_read.logger, "warning", lambda msg, *args: warned.append(msg % args)
    )
    _create(vllm_config(additional))
    assert warned and len(warned) == len(set(warned)), warned


@pytest.mark.usefixtures("clean_engine_core")
@pytest.mark.parametrize("additional", [ON, OFF], ids=["on-dp2", "off"])
def test_the_front_end_warns_nothing_where_balance_works_or_is_off(
    additional: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Controls of the no-effect warning
    (``test_no_effect_warns_and_activates_nothing``)."""
    warned: list[str] = []
    monkeypatch.setattr(
        activation.logger, "warning", lambda msg, *args: warned.append(msg % args)
    )
    _create(vllm_config(additional))
    assert warned == []


@pytest.mark.usefixtures("clean_engine_core")
def test_pickled_target_is_ours() -> None:
    """vLLM starts engines with ``target=EngineCoreProc.run_engine_core``;
    under spawn the target is pickled by qualified name."""
    _create(vllm_config(ON))
    data = pickle.dumps(engine_core_mod.EngineCoreProc.run_engine_core)
    assert b"vllm_ascend_balance.wiring.activation" in data
    assert _loads(engine_core_mod.EngineCoreProc.run_engine_core) is (
        activation.run_engine_core
    )


def _report_target(target: Any, out_path: str) -> None:
    Path(out_path).write_text(f"{target.__module__}.{target.__qualname__}")


@pytest.mark.usefixtures("clean_engine_core")
def test_spawned_child_resolves_our_target(tmp_path: Path) -> None:
    _create(vllm_config(ON))
    out = tmp_path / "target.txt"
    joined = run_processes(
        _report_target,
        [(engine_core_mod.EngineCoreProc.run_engine_core, str(out))],
        300,  # hang guard only
    )
    assert joined.exitcodes == [0]
    assert out.read_text() == "vllm_ascend_balance.wiring.activation.run_engine_core"


# --------------------------------------------------------------------------
# Bounded freeze setting


def _bounded(value: Any) -> dict[str, Any]:
    return {
        "scheduler_config": {
            "enable_balance_scheduling": True,
            "balance_max_frozen_steps": value,
        }
    }


@pytest.mark.parametrize("value", [1, 2, 64, 10_000, MAX_BOUND_STEPS])
def test_max_frozen_steps_accepted(value: int) -> None:
    setting = read_balance_setting(vllm_config(_bounded(value)))
    assert setting.max_frozen_steps == value
    plan = activation_plan.plan_activation(vllm_config(_bounded(value)))
    assert plan.active and plan.max_frozen_steps == value
    assert any(f"after {value} consecutive frozen steps" in n for n in plan.notes)


@pytest.mark.parametrize("value", [None, "absent"])
def test_max_frozen_steps_default_is_unbounded(value: Any) -> None:
    additional = _bounded(value)
    if value == "absent":
        del additional["scheduler_config"]["balance_max_frozen_steps"]
    assert read_balance_setting(vllm_config(additional)).max_frozen_steps is None
    assert read_balance_setting(vllm_config(ON)).max_frozen_steps is None


@pytest.mark.parametrize(
    "value", [0, -1, -64, 1.5, 2.0, "3", True, False, [], {}, 65537, 10**23]
)
def test_max_frozen_steps_bad_value_is_a_one_line_error(value: Any) -> None:
    cfg = vllm_config(_bounded(value))
    with pytest.raises(BalanceConfigError) as info:
        read_balance_setting(cfg)
    assert_one_line_error(
        info.value,
        config.MAX_FROZEN_SETTING,
        "positive JSON integer",
        config.MAX_FROZEN_EXAMPLE,
        json.dumps(value),
    )
    with pytest.raises(BalanceConfigError):
        activation_plan.plan_activation(cfg)


@pytest.mark.parametrize("key", ["balance_max_frozen_steps", "balance_max_held_steps"])
def test_a_bound_beyond_its_range_is_a_one_line_error(key: str) -> None:
    """Both bounds take 1 to ``MAX_BOUND_STEPS`` (docs/operating.md): a
    larger N is no bound in practice, and ``99999999999999999999999`` was
    accepted and printed. Negative control (by hand): ``config._steps``
    without its upper limit accepts both values below."""
    edge = {"scheduler_config": {config.SWITCH: True, key: MAX_BOUND_STEPS}}
    assert activation_plan.plan_activation(vllm_config(edge)).active
    for value in (MAX_BOUND_STEPS + 1, 10**23):
        edge["scheduler_config"][key] = value
        with pytest.raises(BalanceConfigError) as info:
            read_balance_setting(vllm_config(edge))
        assert_one_line_error(
            info.value, f"{config.NESTED}.{key}", f"up to {MAX_BOUND_STEPS}", str(value)
        )
    # The longest wait a policy's knob may ask stays reachable under the bound.
    assert all(k.high <= MAX_BOUND_STEPS for p in POLICIES.values() for k in p.knobs)


@pytest.mark.parametrize(
    ("section", "key", "meant"),
    [
        ("scheduler_config", "balance_max_frozen_stepz", "balance_max_frozen_steps"),
        ("scheduler_config", "balance_max_frozen", "balance_max_frozen_steps"),
        ("scheduler_config", "enable_balance_schedulling", "enable_balance_scheduling"),
        (None, "enable_balance_schedulng", "enable_balance_scheduling"),
    ],
)
def test_a_misspelled_key_is_refused_not_ignored(
    section: str | None, key: str, meant: str
) -> None:
    """A typo in the bound's key would silently leave the gate unbounded."""
    additional = _bounded(4)
    (additional["scheduler_config"] if section else additional)[key] = 4
    with pytest.raises(BalanceConfigError) as info:
        read_balance_setting(vllm_config(additional))
    assert_one_line_error(info.value, key, f"did you mean {meant}?")
    # Keys that are not near a balance setting are other components' business.
    additional = _bounded(4)
    additional["scheduler_config"]["enable_chunked_prefill"] = True
    additional["max_frozen_steps"] = 1
    assert read_balance_setting(vllm_config(additional)).max_frozen_steps == 4


def test_bounded_setting_composes_the_bound(recorder: list[dict[str, Any]]) -> None:
    activation.run_engine_core(
        vllm_config=vllm_config(_bounded(5)), dp_rank=0, local_dp_rank=0
    )
    activation.run_engine_core(vllm_config=vllm_config(ON), dp_rank=0, local_dp_rank=0)
    bounded, unbounded = (call["scheduler_cls"] for call in recorder)
    assert bounded.balance_plan().max_frozen_steps == 5
    assert unbounded.balance_plan().max_frozen_steps is None
    assert unbounded is composition.compose_scheduler(sched_mod.Scheduler)


# --------------------------------------------------------------------------
# doctor shows the bound and the reach verdict


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from vllm_ascend_balance.tools.doctor import cli as doctor

    # vLLM's default DP size is 1, where balance has no effect.
    code = doctor.run(doctor.parse_args(["--data-parallel-size", "2", *argv]))
    return code, capsys.readouterr().out


def test_doctor_shows_bound_and_reach(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _doctor(capsys, "--additional-config", json.dumps(_bounded(8)))
    assert code == 0
    assert "freeze bound:          freeze bounded: after 8 consecutive" in out
    assert f"gate reaches seam:     yes (Scheduler.{SEAM})" in out
    code, out = _doctor(capsys, "--additional-config", json.dumps(ON))
    assert code == 0 and "freeze bound:          freeze unbounded" in out
    code, out = _doctor(
        capsys,
        "--additional-config",
        json.dumps(ON),
        "--scheduler-cls",
        # the reach rule's own unreachable scheduler (its tests' module)
        "tests.test_scheduler_reach.NoSeamScheduler",
    )
    assert code == 1
    assert "cannot work:" in out and "neither calls super().schedule()" in out
    code, out = _doctor(capsys, "--additional-config", json.dumps(_bounded(0)))
    assert code == 1 and config.MAX_FROZEN_SETTING in out


def test_doctor_names_the_gate_and_the_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = _doctor(capsys, "--additional-config", json.dumps(ON))
    assert code == 0
    assert f"from {SETTING}" in out
    assert "gate that will run:    vllm-ascend-balance's" in out
    monkeypatch.setenv(ENV_SETTING, "1")
    code, out = _doctor(capsys)
    assert code == 0 and f"from {ENV_SETTING}" in out
    code, out = _doctor(capsys, "--data-parallel-size", "1")
    assert code == 0 and "gate that will run:    none" in out
    assert "data_parallel_size=1" in out


@pytest.mark.parametrize(
    ("flag", "example"),
    [
        ("--additional-config", '--additional-config \'{"scheduler_config"'),
        ("--kv-transfer-config", '--kv-transfer-config \'{"kv_connector"'),
    ],
)
@pytest.mark.parametrize("text", ['{"a": 1', "[1, 2]"])
def test_a_json_flag_s_fix_is_an_example_of_that_flag(
    flag: str, example: str, text: str
) -> None:
    """The hint's example is the flag's own (the code before gave
    ``--additional-config``'s for ``--kv-transfer-config`` too)."""
    from vllm_ascend_balance.wiring.json_flag import json_object

    with pytest.raises(ValueError) as info:
        json_object(text, flag)
    message = str(info.value)
    assert message.startswith(flag) and "\n" not in message, message
    assert f"e.g. {example}" in message, message
