# SPDX-License-Identifier: Apache-2.0
"""docs/gather-cost.md's rounds-per-policy table is what
``benchmarks/gather_cost_by_policy.py --markdown`` prints from the policy
registry (issue 54: counted rounds per policy at DP 8-256), so a policy
added, retired or given another exchange changes the page or fails here.
Negative control: a policy registered in the test changes the script's
table, and the comparison then fails."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from benchmarks import gather_cost_by_policy
from vllm_ascend_balance.gate import policies
from vllm_ascend_balance.gate.policies import OPEN, Policy

pytestmark = pytest.mark.lane_scope("release")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "gather-cost.md"


def _documented() -> str:
    text = PAGE.read_text()
    found = re.search(
        r"\[start:rounds\] -->\n(.*?)<!-- --8<-- \[end:rounds\]", text, re.S
    )
    assert found, "docs/gather-cost.md lost its rounds table"
    return found.group(1).strip()


def _printed() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        gather_cost_by_policy.main(["--markdown"])
    return out.getvalue().strip()


def test_rounds_table_matches_the_registry() -> None:
    assert _documented() == _printed(), (
        "docs/gather-cost.md's rounds table is not what the registry gives: "
        "paste the output of `python benchmarks/gather_cost_by_policy.py "
        "--markdown` between its [start:rounds] and [end:rounds] marks"
    )


def test_negative_control_a_new_policy_changes_the_table() -> None:
    extra = Policy("example_extra", "an example", (), lambda s, v, k: (s, OPEN))
    policies.register(extra)
    try:
        assert _documented() != _printed()
        assert "`example_extra` | `all_reduce_max`" in _printed()
    finally:
        del policies.POLICIES[extra.name]
