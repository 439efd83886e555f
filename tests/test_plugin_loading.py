# SPDX-License-Identifier: Apache-2.0
"""``tools/plugin_loading.load_problem`` against vLLM's own loader: for each
``VLLM_PLUGINS`` value, the package reports a problem exactly when
``vllm.plugins.load_plugins_by_group`` leaves this package's plugin out."""

from __future__ import annotations

import pytest

from vllm_ascend_balance.tools.plugin_loading import (
    ENTRY_POINT_GROUP,
    entry_point_name,
    load_problem,
)

# why: the allowlist is read by each release's own loader and envs.py
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

VALUES = [
    None,
    "",
    "other",
    "ascend_balance",
    "other,ascend_balance",
    "other, ascend_balance",
    "ascend_balance ",
    "ASCEND_BALANCE",
    ",,ascend_balance,",
]


@pytest.mark.parametrize("value", VALUES)
def test_a_problem_exactly_when_vllms_loader_skips_the_plugin(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    from vllm.plugins import load_plugins_by_group

    name = entry_point_name()
    assert name == "ascend_balance", "the package is not installed in this venv"
    if value is None:
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("VLLM_PLUGINS", value)
    loaded = name in load_plugins_by_group(ENTRY_POINT_GROUP)
    problem = load_problem()
    assert (problem is None) == loaded, (value, problem)
    if problem:
        assert "VLLM_PLUGINS=" in problem and "unset" in problem


def test_the_fix_it_names_makes_vllm_load_the_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.plugins import load_plugins_by_group

    monkeypatch.setenv("VLLM_PLUGINS", "other, ascend_balance")
    problem = load_problem()
    assert problem is not None
    fix = problem.split(": set VLLM_PLUGINS=", 1)[1].split(" ", 1)[0]
    monkeypatch.setenv("VLLM_PLUGINS", fix)
    assert load_problem() is None
    assert "ascend_balance" in load_plugins_by_group(ENTRY_POINT_GROUP)
