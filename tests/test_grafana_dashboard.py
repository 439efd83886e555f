# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard (``docs/observability/grafana.json``) queries only
series the package exports, and has the panels operators need (issue 30).

- Every PromQL expression of a panel target and every template-variable
  query names only sample names the package puts on ``/metrics``, derived
  at test time from the definitions in ``vllm_ascend_balance.metrics``
  (:func:`~vllm_ascend_balance.metrics.exported_samples`), not a list kept
  here;
- every series the package defines appears in some panel (a new series
  needs a panel);
- the required panels exist (gathers, frozen share, fail-opens, gather
  wait, held wait) and the held-wait panel takes histogram quantiles of the
  held-seconds buckets.

Negative controls: a query naming an unknown series, one naming a package
series without vLLM's ``vllm:`` prefix, and a dashboard without a required
panel must all be caught. The series names are matched by a small PromQL
reader (:func:`series_names`): label matchers, ranges, ``by``/``without``/
``on``/``ignoring`` groupings, strings and Grafana variables are removed;
what is left that is not a function call or a keyword is a series name.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from tests.support.lanes import REPO_ROOT
from vllm_ascend_balance import metrics

pytestmark = pytest.mark.lane_scope("release")

DASHBOARD = REPO_ROOT / "docs" / "observability" / "grafana.json"
REQUIRED = {  # title prefix -> a series its queries must name
    "Gathers per second": "vllm:balance_gathers_total",
    "Frozen share": "vllm:balance_frozen_gathers_total",
    "Fail-open steps": "vllm:balance_fail_open_steps_total",
    "Gather wait": "vllm:balance_gather_wait_seconds",
    "Held wait (quantiles)": "vllm:balance_held_wait_seconds_bucket",
}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def series_names(expr: str) -> set[str]:
    """Series names a PromQL expression (or ``label_values(series, label)``)
    names."""
    expr = re.sub(r"\blabel_values\s*\(\s*([^,)]+)(?:,[^)]*)?\)", r"\1", expr)
    expr = _STRING.sub('""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = _GROUPING.sub(" ", expr)
    expr = re.sub(r"\$\{?\w+\}?", " ", expr)
    expr = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+|ms|[smhdwy])?\b", " ", expr)
    names = set()
    for match in _IDENT.finditer(expr):
        if expr[match.end() :].lstrip().startswith("("):
            continue  # a function call
        if match.group() not in KEYWORDS:
            names.add(match.group())
    return names


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(where, expression)`` of every panel target and template query."""
    found = [
        (f"panel {panel.get('title')!r}", target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable.get("type") == "query" and query:
            found.append((f"variable {variable['name']!r}", query))
    return found


def check(dashboard: dict[str, Any]) -> None:
    exported = metrics.exported_samples()
    named: set[str] = set()
    for where, expr in queries(dashboard):
        names = series_names(expr)
        assert names, f"{where}: names no series: {expr}"
        unknown = names - exported
        assert not unknown, f"{where}: not exported by the package: {sorted(unknown)}"
        named |= names
    defined = (*metrics.SERIES, metrics.WAIT_SERIES, *metrics.HISTOGRAMS)
    unshown = [s.name for s in defined if not any(n.startswith(s.name) for n in named)]
    assert not unshown, f"series without a panel: {unshown}"
    titles = {panel["title"]: panel for panel in dashboard["panels"]}
    for prefix, series in REQUIRED.items():
        panels = [p for title, p in titles.items() if title.startswith(prefix)]
        assert panels, f"no panel {prefix!r}"
        exprs = [t["expr"] for p in panels for t in p["targets"]]
        assert any(series in series_names(e) for e in exprs), f"{prefix}: no {series}"
    held = [t["expr"] for t in titles["Held wait (quantiles)"]["targets"]]
    assert all(e.startswith("histogram_quantile(") for e in held), held


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def test_dashboard_queries_only_exported_series() -> None:
    dashboard = load()
    assert dashboard["uid"] and dashboard["title"]
    assert "vllm:balance_gathers_total" in metrics.exported_samples()
    assert "vllm:balance_held_wait_seconds_bucket" in metrics.exported_samples()
    check(dashboard)


def test_the_reader_finds_the_series() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, engine) (rate(vllm:a_bucket{le="1", '
        'model_name="$model_name"}[$__rate_interval]))) - ignoring (le) '
        "rate(b_total[5m]) / on (engine) group_left vllm:c offset 5m"
    )
    assert series_names(expr) == {"vllm:a_bucket", "b_total", "vllm:c"}
    assert series_names("label_values(vllm:x_total, model_name)") == {"vllm:x_total"}


def _with_expr(expr: str) -> dict[str, Any]:
    dashboard = copy.deepcopy(load())
    dashboard["panels"][0]["targets"][0]["expr"] = expr
    return dashboard


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        pytest.param(
            lambda: _with_expr("rate(vllm:balance_unknown_total[5m])"),
            "not exported",
            id="unknown-series",
        ),
        pytest.param(
            lambda: _with_expr(
                "rate(balance_gathers_total[5m]) + rate(vllm:balance_gathers_total[5m])"
            ),
            "not exported",
            id="no-vllm-prefix",
        ),
        pytest.param(
            lambda: {
                **load(),
                "panels": [
                    p for p in load()["panels"] if not p["title"].startswith("Held")
                ],
            },
            "series without a panel|no panel",
            id="held-wait-panel-gone",
        ),
    ],
)
def test_negative_control_fails(broken: Any, reason: str) -> None:
    with pytest.raises(AssertionError, match=reason):
        check(broken())
