# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard (``docs/observability/grafana.json``) queries only
series this package exports, and shows every one of them.

- every ``vllm:...`` name in a panel's PromQL ``expr`` is an exported sample
  name
  (:func:`vllm_ascend_balance.observability.exported_series.exported_names`:
  ``_total`` of counters, ``_bucket``/``_sum``/``_count`` of histograms, gauges as is);
- every exported series appears in some panel, every query is filtered by
  the ``model_name`` templating variable, which the dashboard defines;
- negative controls: a dashboard with a typo'd name, one without the held
  wait panel and one query without the ``model_name`` filter are found.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.lanes import REPO_ROOT
from vllm_ascend_balance.observability import exported_series

pytestmark = pytest.mark.lane_scope("release")

DASHBOARD = REPO_ROOT / "docs" / "observability" / "grafana.json"
NAME = re.compile(r"vllm:[a-z_]+")
MODEL_FILTER = 'model_name="$model_name"'


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def exprs(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(panel title, expr)`` of every query, rows' nested panels included."""
    stack = list(dashboard.get("panels", []))
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield panel.get("title", ""), target["expr"]


def problems(dashboard: dict[str, Any]) -> list[str]:
    """What is wrong with ``dashboard`` (empty: nothing)."""
    exported = exported_series.exported_names()
    found: list[str] = []
    used: set[str] = set()
    queries = list(exprs(dashboard))
    if not queries:
        found.append("no queries")
    for title, expr in queries:
        for name in NAME.findall(expr):
            used.add(name)
            if name not in exported:
                found.append(f"{title!r}: {name} is not an exported series")
        if expr.count(MODEL_FILTER) != len(NAME.findall(expr)):
            found.append(f"{title!r}: a series without {MODEL_FILTER}: {expr}")
    series = {
        *exported_series.SERIES,
        exported_series.WAIT_SERIES,
        *exported_series.HISTOGRAMS,
    }
    for one in series:
        if not any(name.startswith(one.name) for name in used):
            found.append(f"{one.name} is on no panel")
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    if "model_name" not in variables:
        found.append("no model_name templating variable")
    return found


def test_dashboard_queries_exported_series_only() -> None:
    dashboard = load()
    assert problems(dashboard) == []
    assert dashboard["schemaVersion"] >= 38  # Grafana 10
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_exported_names_cover_every_kind() -> None:
    names = exported_series.exported_names()
    assert "vllm:balance_gathers_total" in names
    assert "vllm:balance_gathers" not in names  # a counter is read as _total
    assert "vllm:balance_running_spread" in names
    for suffix in ("_bucket", "_sum", "_count"):
        assert f"vllm:balance_held_wait_seconds{suffix}" in names
        assert f"vllm:balance_held_wait_steps{suffix}" in names


def _edit_exprs(dashboard: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    edited = copy.deepcopy(dashboard)
    for panel in edited["panels"]:
        for target in panel.get("targets", []):
            target["expr"] = target["expr"].replace(old, new)
    return edited


def test_negative_control_a_typod_name_is_found() -> None:
    typo = _edit_exprs(
        load(), "vllm:balance_frozen_gathers_total", "vllm:balance_frozen_gather_total"
    )
    found = problems(typo)
    assert any("vllm:balance_frozen_gather_total is not" in p for p in found), found


def test_negative_control_a_missing_panel_and_filter_are_found() -> None:
    dashboard = load()
    without = copy.deepcopy(dashboard)
    without["panels"] = [
        p
        for p in without["panels"]
        if not any("held_wait_seconds" in t["expr"] for t in p["targets"])
    ]
    assert any("held_wait_seconds is on no panel" in p for p in problems(without))
    unfiltered = _edit_exprs(dashboard, "{" + MODEL_FILTER + "}", "")
    assert any("without" in p for p in problems(unfiltered))
