# SPDX-License-Identifier: Apache-2.0
"""A policy is its module and its registry line (issue 54, "Done when").

A small example policy, declared here only and added with
:func:`vllm_ascend_balance.gate.policies.register` (removed after each
test), reaches everything that reads the registry with no other edit to the
package:

- ``doctor`` prints it (its summary, its knob at its default, its own hold
  bound, its exchange);
- the configuration accepts its name as ``balance_policy`` and its knob
  with it, refuses its knob under another policy and a bad value of its knob
  in one line each, and carries it to the engines;
- the replay's ``--mode`` grammar parses ``on+<its name>[:knob]``, refuses
  a bad knob in one line, and lists it among the modes;
- the simulated engine runs it on vLLM's real schedulers.

Negative control: the same checks with the policy not registered (before
it is, after it is removed) refuse its name and its knob everywhere, so the
registry line is what makes them pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from vllm_ascend_balance.gate.policies import (
    OPEN,
    POLICIES,
    Decision,
    Knob,
    Policy,
    register,
)
from vllm_ascend_balance.gate.signals import View
from vllm_ascend_balance.replay.pipeline.modes import ModeError, parse_modes
from vllm_ascend_balance.tools.doctor import cli as doctor
from vllm_ascend_balance.wiring import config_read
from vllm_ascend_balance.wiring.config import CARRIED_KEY, SWITCH, BalanceConfigError
from vllm_ascend_balance.wiring.config_read import read_user_setting

pytestmark = pytest.mark.lane_scope("release")

NAME = "every_nth"
MODE = "every-nth"
PERIOD = Knob(
    "balance_every_nth_period",
    int,
    2,
    1,
    64,
    "admission opens on one step in this many",
)
_WAIT = Decision(True, False, "every_nth_wait")


def decide(step: int, view: View, knobs: Mapping[str, Any]) -> tuple[int, Decision]:
    """Admit on one step in every ``balance_every_nth_period`` while some
    rank below its cap has requests waiting; otherwise hold nothing."""
    step += 1
    if view.held and step % knobs[PERIOD.key]:
        return step, _WAIT
    return step, OPEN


EXAMPLE = Policy(
    name=NAME,
    summary="admission opens on one step in every N (this test's example)",
    signals=("held",),
    decide=decide,
    initial=0,
    knobs=(PERIOD,),
    default_max_held_steps=8,
    source="tests/test_gate_registry.py",
)


@pytest.fixture
def registered() -> Iterator[Policy]:
    register(EXAMPLE)
    try:
        yield EXAMPLE
    finally:
        del POLICIES[NAME]


def _section(**options: Any) -> dict[str, Any]:
    return {"scheduler_config": {SWITCH: True, **options}}


def _doctor(capsys: pytest.CaptureFixture[str], **options: Any) -> tuple[int, str]:
    args = doctor.parse_args(
        [
            "--data-parallel-size",
            "2",
            "--additional-config",
            json.dumps(_section(**options)),
        ]
    )
    code = doctor.run(args)
    return code, capsys.readouterr().out


def _refusal(additional: dict[str, Any]) -> str:
    with pytest.raises(BalanceConfigError) as err:
        read_user_setting(additional, {})
    message = str(err.value)
    assert "\n" not in message
    return message


def test_doctor_shows_a_registered_policy(
    registered: Policy, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _doctor(capsys, balance_policy=NAME)
    assert code == 0, out
    lines = {line.split(":", 1)[0]: line for line in out.splitlines()}
    assert f"{NAME}: {EXAMPLE.summary}" in lines["freeze policy"]
    assert f"({PERIOD.key}=2)" in lines["freeze policy"]
    assert "no request is held more than 8 steps" in lines["freeze bound"]
    assert f"(the {NAME} default)" in lines["freeze bound"]
    assert lines["exchange"].endswith("all_reduce_max")
    assert "would activate:        True" in out
    code, out = _doctor(capsys, balance_policy=NAME, **{PERIOD.key: 5})
    assert code == 0 and f"({PERIOD.key}=5)" in out


def test_doctor_refuses_an_unregistered_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The control: without the registry line, the same setting cannot
    work, in one line."""
    code, out = _doctor(capsys, balance_policy=NAME)
    assert code == 1
    (line,) = [line for line in out.splitlines() if line.startswith("verdict")]
    assert "cannot work" in line and "balance_policy must be one of" in line


def test_the_configuration_reads_and_refuses_by_the_declaration(
    registered: Policy,
) -> None:
    # Its name is a balance_policy, its knob is read with it.
    setting = read_user_setting(_section(balance_policy=NAME, **{PERIOD.key: 3}), {})
    assert setting.policy == NAME and setting.gate.knob(PERIOD.key) == 3
    # ... and carried to the engines unchanged.
    again = config_read.read_balance_setting(
        type("Config", (), {"additional_config": {CARRIED_KEY: setting.carried()}})()
    )
    assert again == setting
    # Its knob under another policy: refused, naming the policy that reads it.
    message = _refusal(_section(balance_policy="queued_leader", **{PERIOD.key: 3}))
    assert f'{PERIOD.key} is read by balance_policy "{NAME}" only' in message
    # Its knob's bad values: refused with its declared type and range.
    for bad in (0, 65, 2.5, True, "3"):
        message = _refusal(_section(balance_policy=NAME, **{PERIOD.key: bad}))
        assert f"{PERIOD.key} must be a JSON integer from 1 to 64" in message
        assert PERIOD.doc in message and "e.g. --additional-config" in message
    # A near-miss of its name is answered with it.
    message = _refusal(_section(balance_policy="every_nht"))
    assert f'did you mean "{NAME}"?' in message


def test_the_configuration_refuses_an_unregistered_policy() -> None:
    """The control: the same name and knob, not registered, are refused."""
    assert "must be one of" in _refusal(_section(balance_policy=NAME))
    message = _refusal(_section(**{PERIOD.key: 3}))
    assert "is not a balance scheduling setting" in message


def test_the_mode_grammar_follows_the_registry(registered: Policy) -> None:
    plain, tuned = parse_modes(f"on+{MODE},on+{MODE}:3+max-held:4")
    assert plain.bounds(8) == {"balance_policy": NAME}  # its own hold bound
    assert tuned.bounds(None) == {
        "balance_policy": NAME,
        PERIOD.key: 3,
        "balance_max_held_steps": 4,
    }
    for bad, words in [
        (f"on+{MODE}:0", f"{PERIOD.key} must be an integer from 1 to 64"),
        (f"on+{MODE}:x", f"{PERIOD.key} must be an integer"),
        (f"on+{MODE}:3:3", f"expected on\\+{MODE}\\[:EVERY_NTH_PERIOD\\]"),
        (MODE, "needs balance on"),
    ]:
        with pytest.raises(ModeError, match=words) as err:
            parse_modes(f"off,{bad}")
        assert "\n" not in str(err.value)
    # An unknown mode's refusal lists it with the built-in policies.
    with pytest.raises(ModeError, match=f"on\\+{MODE}"):
        parse_modes("off,on+sideways")


def test_the_mode_grammar_refuses_an_unregistered_policy() -> None:
    with pytest.raises(ModeError, match="unknown mode"):
        parse_modes(f"off,on+{MODE}")


def test_the_simulated_engine_runs_a_registered_policy(registered: Policy) -> None:
    """On vLLM's real schedulers, DP 2: the example's wait holds admission
    on some steps, every rank takes the same decision, every request
    completes."""
    from tests.test_replay_sim import OPTS
    from vllm_ascend_balance.replay.pipeline.workload import builtin_requests
    from vllm_ascend_balance.replay.sim.fleet import simulate

    requests = builtin_requests(seed=3, num_bursts=1, burst=(12, 12))
    bounds = {"balance_policy": NAME, PERIOD.key: 4}
    result = simulate(True, requests, OPTS, bounds=bounds)
    ranks = result.rank_steps
    frozen = [[s.frozen for s in steps] for steps in ranks]
    assert frozen[0] == frozen[1] and any(frozen[0]) and not all(frozen[0])
    for steps in ranks:
        assert not any(s.frozen and s.new_requests for s in steps)
    done = [r for rs in result.rank_requests for r in rs if r.finish_step is not None]
    assert len(done) == len(requests)
