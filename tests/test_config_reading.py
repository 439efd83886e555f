# SPDX-License-Identifier: Apache-2.0
"""Every balance setting is read where it is written, and nothing is ignored.

Property, for every key (the switch, each option, an unknown ``balance_*``
key, a key one typo away from an option), every position (nested
``scheduler_config``, top level), every enabling form (nested, legacy,
environment variable, off) and valid or invalid values: where balance is
requested, the setting either takes effect (the value is in the plan and in
``doctor``'s output) or is refused in one line naming the key and an example
of the key's own; where it is not requested, an option never makes anything
fail (it does nothing, and a warning says so). Negative control: a reader
that only looks for options in the nested section (what the package did
before) fails the property for options written next to the legacy switch.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from tests.support.vllm_objects import make_vllm_config
from vllm_ascend_balance.gate import policies
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.tools.doctor import cli as doctor
from vllm_ascend_balance.wiring import (
    activation_plan,
    ascend_steering,
    composition,
    config,
    config_read,
)
from vllm_ascend_balance.wiring.config import (
    ENV_SETTING,
    OPTIONS,
    SWITCH,
    BalanceConfigError,
)
from vllm_ascend_balance.wiring.config_read import read_user_setting

pytestmark = pytest.mark.lane_scope("release")

FIELDS = {
    "balance_max_frozen_steps": "max_frozen_steps",
    "balance_max_held_steps": "max_held_steps",
    "balance_policy": "policy",
    "balance_stall_warning_s": "stall_warning_s",
    "balance_collective": "collective",
}
VALID = {
    "balance_max_frozen_steps": st.sampled_from([1, 7, 64]),
    "balance_max_held_steps": st.sampled_from([1, 16, 65536]),
    "balance_policy": st.sampled_from(sorted(policies.POLICIES)),
    "balance_stall_warning_s": st.sampled_from([0.5, 60]),
    "balance_collective": st.sampled_from(["all_gather", "all_reduce_max"]),
    "balance_align_window": st.sampled_from([1, 8, 32]),
    "balance_timeout_iters": st.sampled_from([0, 50, 200]),
    "balance_batching_wait_iters": st.sampled_from([0, 10]),
}
INVALID = {
    "balance_max_frozen_steps": st.sampled_from([0, -3, True, "64", 2.5, 65537]),
    "balance_max_held_steps": st.sampled_from([0, True, "16", 10**23]),
    "balance_policy": st.sampled_from(["fair", 1, True, "aligned", "batched"]),
    "balance_stall_warning_s": st.sampled_from([-1, True, "60", float("inf")]),
    "balance_collective": st.sampled_from(["ring", 3, True]),
    "balance_align_window": st.sampled_from([0, True, "8", 2.5]),
    "balance_timeout_iters": st.sampled_from([-1, True, "50", 2.5, 65537]),
    "balance_batching_wait_iters": st.sampled_from([-1, True, "10", 0.5]),
    # A retired policy's key: read only to be refused, whatever its value.
    "balance_align_min_load": st.sampled_from([0, 0.5, True, "0.5"]),
}
STRANGERS = ["balance_foo", "balance_max_frozen_step", "balance_colective"]


@st.composite
def cases(draw: Any) -> tuple[str, str, str, Any, bool]:
    """(form, key, position, value, valid)."""
    form = draw(st.sampled_from(["nested", "legacy", "env", "off"]))
    key = draw(st.sampled_from([*OPTIONS, *STRANGERS]))
    position = draw(st.sampled_from(["nested", "top"]))
    if key in OPTIONS:
        valid = key in VALID and draw(st.booleans())
        value = draw(VALID[key] if valid else INVALID[key])
    else:
        valid, value = False, 5
    return form, key, position, value, valid


def build(
    form: str, key: str, position: str, value: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    additional: dict[str, Any] = {}
    sched: dict[str, Any] = {}
    environ: dict[str, str] = {}
    if form == "nested":
        sched[SWITCH] = True
    elif form == "legacy":
        additional[SWITCH] = True
    elif form == "env":
        environ[ENV_SETTING] = "1"
    section = sched if position == "nested" else additional
    section[key] = value
    owners = policies.knob_owners(key)
    if owners:
        section["balance_policy"] = owners[0]  # a knob comes with its policy
    if sched:
        additional["scheduler_config"] = sched
    return additional, environ


def outcome(reader: Any, case: tuple[str, str, str, Any, bool]) -> str:
    """ "" when the case behaves as the module docstring says, else why not."""
    form, key, position, value, valid = case
    additional, environ = build(form, key, position, value)
    try:
        setting = reader(additional, environ, quiet=True)
    except BalanceConfigError as exc:
        message = str(exc)
        if form == "off":
            return f"refused with balance off: {message}"
        if valid:
            return f"a valid value refused: {message}"
        if "\n" in message or key not in message:
            return f"refusal not one line naming {key}: {message}"
        suggested = next((k for k in OPTIONS if f"mean {k}?" in message), None)
        if suggested and suggested not in message.split("e.g.")[-1]:
            return f"the example is not the suggested key's own: {message}"
        return ""
    if form == "off":
        return "" if not setting.enabled else "enabled with the switch off"
    if not valid:
        return f"{key}={value!r} accepted silently"
    got = (
        getattr(setting, FIELDS[key])
        if key in FIELDS
        else setting.gate.knob(key, "unset")
    )
    want = float(value) if key == "balance_stall_warning_s" else value
    return "" if got == want else f"{key}={value!r} ignored (read {got!r})"


@settings(max_examples=300, deadline=None)
@given(cases())
def test_every_setting_takes_effect_or_is_refused_in_one_line(
    case: tuple[str, str, str, Any, bool],
) -> None:
    assert outcome(read_user_setting, case) == ""


def nested_options_only(
    additional: dict[str, Any], environ: dict[str, str], quiet: bool = False
) -> Any:
    """Known-bad: options read only in the nested section (top-level ones
    dropped before reading, as the package once did)."""
    kept = {k: v for k, v in additional.items() if k not in OPTIONS}
    return read_user_setting(kept, environ, quiet)


def test_negative_control_nested_only_reader_fails_the_property() -> None:
    from hypothesis import find

    try:
        find(
            cases(),
            lambda case: outcome(nested_options_only, case) != "",
            settings=settings(max_examples=2000, database=None),
        )
    except NoSuchExample:
        pytest.fail("the property did not catch options ignored at the top level")


@pytest.mark.parametrize("position", ["nested", "top"])
@pytest.mark.parametrize("form", ["nested", "legacy"])
def test_the_bound_shows_in_the_plan_and_in_doctor(
    form: str, position: str, capsys: pytest.CaptureFixture[str]
) -> None:
    additional, _ = build(form, "balance_max_frozen_steps", position, 64)
    plan = activation_plan.plan_activation(
        make_vllm_config(data_parallel_size=2, additional_config=additional)
    )
    assert plan.max_frozen_steps == 64
    args = doctor.parse_args(
        ["--data-parallel-size", "2", "--additional-config", json.dumps(additional)]
    )
    assert doctor.run(args) == 0
    assert "freeze bound:          freeze bounded: after 64" in capsys.readouterr().out


def test_written_twice_is_refused() -> None:
    additional = {
        SWITCH: True,
        "balance_max_frozen_steps": 8,
        "scheduler_config": {"balance_max_frozen_steps": 64},
    }
    with pytest.raises(BalanceConfigError, match="both in") as info:
        read_user_setting(additional, {})
    assert "\n" not in str(info.value)


def test_switch_off_with_a_bad_bound_warns_instead_of_refusing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The logger itself, not caplog: another test's vLLM logging config can
    # leave the package's records off caplog's handler.
    warned: list[str] = []
    monkeypatch.setattr(
        config_read.logger, "warning", lambda msg, *args: warned.append(msg % args)
    )
    additional = {"scheduler_config": {SWITCH: False, "balance_max_frozen_steps": 0}}
    setting = read_user_setting(additional, {})
    assert not setting.enabled
    assert any("balance_max_frozen_steps does nothing" in w for w in warned), warned


def test_a_typo_of_the_switch_is_refused_even_when_off() -> None:
    """The switch itself is not a companion: a near-miss of its name would
    leave balance off while the user asked for it."""
    with pytest.raises(BalanceConfigError, match="did you mean enable_balance"):
        read_user_setting({"scheduler_config": {"enable_balance_schedulng": True}}, {})


def test_each_example_sets_its_own_key() -> None:
    """Each key's example, in the preferred nested form (docs/install.md)
    wherever the key was written: a fix never suggests the deprecated
    top-level switch."""
    for key in OPTIONS:
        text = config.example(key)
        body = json.loads(text.split("'")[1])
        assert set(body) == {"scheduler_config"}, text
        section = body["scheduler_config"]
        if key in policies.RETIRED_KEYS:
            # Read only to be refused: no example sets it.
            with pytest.raises(BalanceConfigError, match="retired") as err:
                read_user_setting(body, {})
            assert "\n" not in str(err.value)
            continue
        # A policy's knobs come with the policy that reads them.
        owners = policies.knob_owners(key)
        needs = {"balance_policy": owners[0]} if owners else {}
        assert section == {SWITCH: True, key: OPTIONS[key], **needs}
        read_user_setting(body, {})  # and the example itself is accepted


@pytest.mark.parametrize("where", ["nested", "top", "carried"])
def test_both_bounds_are_refused_in_one_line(where: str) -> None:
    both = {"balance_max_frozen_steps": 64, "balance_max_held_steps": 16}
    with pytest.raises(BalanceConfigError) as err:
        if where == "carried":
            config_read.read_balance_setting(
                make_vllm_config(
                    additional_config={
                        config.CARRIED_KEY: {
                            "enabled": True,
                            "gate": {"max_frozen_steps": 64, "max_held_steps": 16},
                        }
                    }
                )
            )
        elif where == "nested":
            read_user_setting({"scheduler_config": {SWITCH: True, **both}}, {})
        else:
            read_user_setting({SWITCH: True, **both}, {})
    message = str(err.value)
    assert "\n" not in message
    assert "balance_max_frozen_steps" in message and "balance_max_held_steps" in message


def test_the_held_bound_reaches_the_composed_class() -> None:
    additional = {"scheduler_config": {SWITCH: True, "balance_max_held_steps": 16}}
    plan = activation_plan.plan_activation(
        make_vllm_config(data_parallel_size=2, additional_config=additional)
    )
    assert (plan.max_held_steps, plan.max_frozen_steps) == (16, None)
    assert any("balance_max_held_steps" in note for note in plan.notes)
    assert plan.scheduler_cls is not None
    cls = composition.planned_scheduler_cls(plan)
    resolved = cls.balance_plan()
    assert (resolved.max_held_steps, resolved.max_frozen_steps) == (16, None)
    # The control: the contract's class with no bound set bounds nothing.
    bare = composition.compose_scheduler(plan.scheduler_cls, GateSettings())
    assert (
        bare.balance_plan().max_held_steps,
        bare.balance_plan().max_frozen_steps,
    ) == (
        None,
        None,
    )


def test_doctor_shows_the_policy_and_the_held_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    section = {
        SWITCH: True,
        "balance_policy": "queued_leader",
        "balance_max_held_steps": 64,
    }
    args = doctor.parse_args(
        [
            "--data-parallel-size",
            "2",
            "--additional-config",
            json.dumps({"scheduler_config": section}),
        ]
    )
    doctor.run(args)
    out = capsys.readouterr().out
    assert (
        "freeze bound:          holds bounded: no request is held more than 64" in out
    )
    assert "(additional_config.scheduler_config.balance_max_held_steps)" in out
    assert "freeze policy:         queued_leader" in out


def test_an_option_at_the_top_level_is_named_where_it_was_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Next to the nested switch an option may sit at the top level: the
    plan, doctor and the engines (the carried setting) name it there, and a
    bad value there is refused naming it there, with the fix in the nested
    form (the preferred one, docs/install.md), not the deprecated top-level
    switch. Negative controls (by hand): ``setting_of`` naming the nested
    section whatever ``written`` says fails the doctor line; ``example``
    building the top-level form for a top-level key fails the fix."""
    top = {
        "scheduler_config": {SWITCH: True},
        "balance_max_frozen_steps": 64,
        "balance_collective": "all_gather",
    }
    setting = read_user_setting(top, {})
    named = f"{config.TOP}.balance_max_frozen_steps"
    assert setting.setting_of("balance_max_frozen_steps") == named
    # Not written: where it would go.
    assert setting.setting_of("balance_policy") == f"{config.NESTED}.balance_policy"
    steered = ascend_steering.steer(top, {})
    assert steered is not None
    engine = config_read.read_balance_setting(
        make_vllm_config(
            data_parallel_size=2, additional_config=steered.additional_config
        )
    )
    assert engine.written == setting.written
    args = doctor.parse_args(
        ["--data-parallel-size", "2", "--additional-config", json.dumps(top)]
    )
    assert doctor.run(args) == 0
    out = capsys.readouterr().out
    assert f"opens for one step ({named})" in out, out
    assert f"all_gather ({config.TOP}.balance_collective)" in out, out
    for key in ("balance_max_frozen_steps", "balance_collective"):
        assert f"{config.NESTED}.{key}" not in out, out
    for key, bad, policy in (
        ("balance_max_frozen_steps", "x", None),
        ("balance_align_window", 0, "throttled"),  # a knob: checked across options
    ):
        sched = {SWITCH: True, **({"balance_policy": policy} if policy else {})}
        with pytest.raises(BalanceConfigError) as err:
            read_user_setting({"scheduler_config": sched, key: bad}, {})
        message = str(err.value)
        assert message.startswith(f"{config.TOP}.{key} must be"), message
        fix = message.split("e.g. ", 1)[1]
        assert fix.startswith(config.example(key)), message
        assert fix.startswith("""--additional-config '{"scheduler_config": """)
    # A carried setting naming a section that is none is hand-written: refused.
    forged = {"enabled": True, "written": {"balance_max_frozen_steps": "elsewhere"}}
    with pytest.raises(BalanceConfigError, match="must not be set by hand"):
        config_read.read_balance_setting(
            make_vllm_config(additional_config={config.CARRIED_KEY: forged})
        )


def test_an_unknown_policy_is_refused_in_one_line() -> None:
    with pytest.raises(BalanceConfigError, match="balance_policy must be one of") as e:
        read_user_setting(
            {"scheduler_config": {SWITCH: True, "balance_policy": "fair"}}, {}
        )
    # The control of the hint below: nothing close, no guess.
    assert "did you mean" not in str(e.value)
    with pytest.raises(BalanceConfigError) as err:
        read_user_setting(
            {"scheduler_config": {SWITCH: True, "balance_policy": "throtled"}}, {}
        )
    assert 'did you mean "throttled"?' in str(err.value)
    assert "\n" not in str(err.value)


def test_the_fix_for_a_near_miss_policy_sets_the_suggested_policy() -> None:
    """An operator's trial: "Throttled" got 'did you mean "throttled"?'
    beside an example setting another policy."""
    for wrong, right in (("Throttled", "throttled"), ("adp-balance", "adp_balance")):
        with pytest.raises(BalanceConfigError) as err:
            read_user_setting(
                {"scheduler_config": {SWITCH: True, "balance_policy": wrong}}, {}
            )
        message = str(err.value)
        assert f'did you mean "{right}"?' in message, message
        assert f'"balance_policy": "{right}"' in message, message
        assert message.count('"balance_policy": ') == 1, message


def test_an_unknown_key_lists_the_current_options_only() -> None:
    """The list is what the user may write: a retired key is refused when
    written (test_a_retired_key_is_refused...), so it is not offered."""
    with pytest.raises(BalanceConfigError) as err:
        read_user_setting({"scheduler_config": {SWITCH: True, "balance_foo": 1}}, {})
    listed = str(err.value).split("the known ones are ", 1)[1].split(" (e.g.", 1)[0]
    names = set(listed.split(", "))
    assert names == {SWITCH, *config.options()} - set(policies.RETIRED_KEYS)
    assert policies.RETIRED_KEYS, "no retired key left: this check checks nothing"


@pytest.mark.parametrize(
    "key", sorted(k for k in config.options() if k not in policies.RETIRED_KEYS)
)
def test_an_option_without_its_prefix_is_refused_where_the_options_live(
    key: str,
) -> None:
    """docs/operating.md: near-misses of known options are refused (an
    operator's trial: ``max_frozen_steps`` was taken silently, leaving the
    freeze unbounded). Control: at the top level, where any plugin keeps
    its keys, the bare name is left alone."""
    bare = key.removeprefix("balance_")
    with pytest.raises(BalanceConfigError) as err:
        read_user_setting({"scheduler_config": {SWITCH: True, bare: 1}}, {})
    assert f"{config.NESTED}.{bare} is not a balance scheduling setting" in str(
        err.value
    )
    assert f"did you mean {key}?" in str(err.value)
    read_user_setting({"scheduler_config": {SWITCH: True}, bare: 1}, {})


@pytest.mark.parametrize("name", sorted(policies.RETIRED))
def test_a_retired_policy_is_refused_naming_its_replacement(name: str) -> None:
    """``aligned``, ``cohort`` and ``batched`` were folded into
    ``throttled``: each is refused in one line that names it."""
    with pytest.raises(BalanceConfigError, match="retired") as err:
        read_user_setting(
            {"scheduler_config": {SWITCH: True, "balance_policy": name}}, {}
        )
    message = str(err.value)
    assert "\n" not in message
    assert f'use "{policies.RETIRED[name]}"' in message


def test_a_knob_needs_its_policy_and_a_retired_key_is_refused() -> None:
    """A policy's knob with another policy, and a retired policy's key with
    any, are refused in one line naming the key (the control: the same knob
    with its own policy is read)."""
    refused = [
        ({"balance_align_window": 8}, "balance_align_window is read by"),
        (
            {"balance_policy": "queued_leader", "balance_align_window": 8},
            "balance_align_window is read by",
        ),
        (
            {"balance_policy": "throttled", "balance_align_min_load": 0.5},
            "balance_align_min_load went with the retired",
        ),
    ]
    for options, message in refused:
        with pytest.raises(BalanceConfigError, match=message) as caught:
            read_user_setting({"scheduler_config": {SWITCH: True, **options}}, {})
        assert "\n" not in str(caught.value)
    accepted = read_user_setting(
        {
            "scheduler_config": {
                SWITCH: True,
                "balance_policy": "throttled",
                "balance_align_window": 8,
            }
        },
        {},
    )
    assert accepted.gate.knob("balance_align_window") == 8


def test_throttled_setting_travels_to_the_engines_and_composes() -> None:
    section = {
        SWITCH: True,
        "balance_policy": "throttled",
        "balance_align_window": 12,
        "balance_max_held_steps": 32,
    }
    setting = read_user_setting({"scheduler_config": section}, {})
    again = config_read.read_balance_setting(
        make_vllm_config(additional_config={config.CARRIED_KEY: setting.carried()})
    )
    assert again == setting
    from vllm.v1.core.sched.scheduler import Scheduler

    cls = composition.compose_scheduler(Scheduler, setting.gate)
    resolved = cls.balance_plan()
    assert resolved.policy.name == "throttled"
    assert dict(resolved.knobs) == {"balance_align_window": 12}
    assert resolved.max_held_steps == 32


def test_doctor_shows_the_throttled_policy(capsys: pytest.CaptureFixture[str]) -> None:
    section = {SWITCH: True, "balance_policy": "throttled", "balance_align_window": 6}
    args = doctor.parse_args(
        [
            "--data-parallel-size",
            "2",
            "--additional-config",
            json.dumps({"scheduler_config": section}),
        ]
    )
    doctor.run(args)
    out = capsys.readouterr().out
    assert "freeze policy:         throttled: " in out
    assert "(balance_align_window=6)" in out
    # Its default hold bound, unset in the configuration.
    assert "no request is held more than 64 steps" in out
    assert "(the throttled default)" in out


def test_off_refuses_only_the_switch_as_operating_md_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/operating.md: with balance off the options are not refused (a
    warning), the switch is: a non-boolean value, a near-miss of its name.
    Each side is the other's control: the same reader refuses one and
    accepts the other."""
    warned: list[str] = []
    monkeypatch.setattr(
        config_read.logger, "warning", lambda msg, *args: warned.append(msg % args)
    )
    off = {"scheduler_config": {SWITCH: False, "balance_max_frozen_stepz": 3}}
    assert not read_user_setting(off, {}).enabled
    assert any("balance_max_frozen_stepz" in w for w in warned), warned
    for switch in ({SWITCH: "no"}, {"enable_balance_schedulng": False}):
        with pytest.raises(BalanceConfigError) as err:
            read_user_setting({"scheduler_config": switch}, {})
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "section", [{SWITCH: True}, {"balance_max_frozen_steps": 64}, {SWITCH: False}]
)
def test_balance_keys_under_a_misspelled_section_are_refused(section: Any) -> None:
    """``scheduler_confg`` holding balance keys would leave balance off by
    default, silently: refused in one line naming the key and the fix."""
    with pytest.raises(BalanceConfigError) as err:
        read_user_setting({"scheduler_confg": section}, {})
    text = str(err.value)
    assert "\n" not in text
    assert "additional_config.scheduler_confg" in text
    assert "move them there" in text and '"scheduler_config"' in text


def test_other_plugins_top_level_objects_are_left_alone() -> None:
    """The control: an object of another plugin's (no balance key), next to
    a correct section, is not refused and balance turns on."""
    additional = {
        "ascend_scheduler_config": {"enabled": True},
        "torchair_graph_config": {"enabled": False},
        "scheduler_config": {SWITCH: True},
    }
    assert read_user_setting(additional, {}).enabled


def test_doctor_refuses_a_misspelled_section_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    additional = {"scheduler_confg": {SWITCH: True}}
    args = doctor.parse_args(
        ["--data-parallel-size", "2", "--additional-config", json.dumps(additional)]
    )
    assert doctor.run(args) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "scheduler_confg" in line]
    assert len(lines) == 1 and "cannot work" in lines[0], out
    assert "(from default)" not in out
