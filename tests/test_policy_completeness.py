# SPDX-License-Identifier: Apache-2.0
"""Every registered policy is complete: CONTRIBUTING.md ("Where does X go")
names the places a new policy goes besides its module and its registry
line, and this test fails, naming each place, when one is missing.

Negative control: a policy registered in the test (a copy of the contract
under a new name, with a knob of its own) is missing from every place, and
each is named.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.support import gate_oracle
from tests.support.lanes import REPO_ROOT
from vllm_ascend_balance.gate import policies
from vllm_ascend_balance.gate.policies import Knob, Policy

pytestmark = pytest.mark.lane_scope("release")

#: The contract's property test predates the one-file-per-policy names.
PROPERTY_TESTS = {"leader_at_cap": "tests/test_gate_properties.py"}


def _text(rel: str) -> str:
    return (REPO_ROOT / rel).read_text()


def missing_places(policy: Policy, root: Path = REPO_ROOT) -> list[str]:
    """Where ``policy`` should appear and does not, each with what to add."""
    name = policy.name
    missing = []
    prop = PROPERTY_TESTS.get(name, f"tests/test_{name}_properties.py")
    if not (root / prop).is_file():
        missing.append(f"{prop}: its property test on tests/support/lockstep.py")
    if name not in gate_oracle.POLICIES:
        missing.append("tests/support/gate_oracle.py: its rule (POLICIES, propose)")
    if policy.holds_chunks != (name in gate_oracle.CHUNK_POLICIES):
        missing.append(
            "tests/support/gate_oracle.py: CHUNK_POLICIES must list it exactly "
            "when it holds chunks"
        )
    lockstep = _text("tests/support/lockstep.py")
    for knob in policy.knobs:
        if f'"{knob.key}"' not in lockstep:
            missing.append(
                f"tests/support/lockstep.py: its knob {knob.key} (Gate.settings)"
            )
    for page in ("docs/gate-contract.md", "docs/operating.md"):
        if f"`{name}`" not in _text(page):
            missing.append(f"{page}: its rows (`{name}`)")
    module = f"vllm_ascend_balance.gate.policies.{name}"
    if not re.search(rf"^::: {re.escape(module)}$", _text("docs/api.md"), re.M):
        missing.append(f"docs/api.md: `::: {module}`")
    return missing


@pytest.mark.parametrize("name", list(policies.POLICIES))
def test_every_registered_policy_is_in_every_place(name: str) -> None:
    missing = missing_places(policies.POLICIES[name])
    assert not missing, f"balance_policy {name} is missing from:\n" + "\n".join(missing)


def test_negative_control_a_new_policy_is_missing_everywhere() -> None:
    contract = policies.POLICIES["leader_at_cap"]
    knob = Knob("balance_example_window", int, 4, 1, 64, "an example knob")
    new = dataclasses.replace(
        contract, name="example_never", holds_chunks=True, knobs=(knob,)
    )
    missing = missing_places(new)
    assert [m.split(":", 1)[0] for m in missing] == [
        "tests/test_example_never_properties.py",
        "tests/support/gate_oracle.py",
        "tests/support/gate_oracle.py",
        "tests/support/lockstep.py",
        "docs/gate-contract.md",
        "docs/operating.md",
        "docs/api.md",
    ], missing
