# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus scrapes a real balance-on ``vllm serve`` DP 2 and
answers every query of the Grafana dashboard.

- Prometheus: Debian's ``prometheus`` package (installed by the setup when
  missing, one line on stderr: tests/support/prometheus.py), run with a
  temp config and TSDB on a loopback port, scraping ``/metrics`` every
  second and loading ``docs/observability/alerts.yml``;
- the server: the session's shared one (tests/support/shared_server.py:
  the demo's, vLLM's OpenAI API server, DP 2 on CPU, the tiny MoE model
  served as ``tiny-moe``, the cost-model executor), balance on with
  ``balance_max_frozen_steps`` 2 (so every series moves: frozen and
  fail-open gathers, held admissions), 16 concurrent requests on
  ``--max-num-seqs`` 4 (another test may have loaded it before: the
  admissions waited for are the server's count before the load plus
  these);
- every ``expr`` of ``docs/observability/grafana.json``, with Grafana's
  ``$model_name`` set to the served model and ``$__rate_interval`` to a
  window covering the run, is evaluated through ``/api/v1/query``: each
  returns at least one series, and a series that keeps the ``model_name``
  label has the model's; with another model's name every query returns none
  (the filter is applied);
- the alert rules load and evaluate on the scraped data without error, and
  none fires on this healthy run;
- negative control: the dashboard's queries with one metric name misspelt:
  the check reports that query, and only it.

Timeouts are hang guards; nothing asserts on durations.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import prometheus
from tests.support.lanes import REPO_ROOT
from tests.test_grafana_dashboard import exprs, load
from vllm_ascend_balance.tools.demo import server as demo

pytestmark = [pytest.mark.lane_scope("release"), pytest.mark.e2e, pytest.mark.slow]

RULES = REPO_ROOT / "docs" / "observability" / "alerts.yml"
REQUESTS = 16
TOKENS = 96
RATE_WINDOW = "10m"  # $__rate_interval: longer than the whole run
SCRAPED_LIMIT_S = 120  # hang guard: the last scrape reaches the TSDB
MODEL = demo.SERVED_MODEL_NAME
MISSPELT = ("vllm:balance_frozen_gathers_total", "vllm:balance_frozen_gather_total")


@pytest.fixture
def deployment(
    tmp_path: Path,
    pytestconfig: pytest.Config,
    bounded_balance_server: demo.DemoServer,
) -> Iterator[tuple[demo.DemoServer, prometheus.Prometheus]]:
    """Prometheus scraping the session's shared bounded server."""
    try:
        binary = prometheus.tools_for(pytestconfig)[0]
    except prometheus.PrometheusUnavailable as error:
        pytest.fail(str(error))
    server = bounded_balance_server
    (tmp_path / "prometheus").mkdir()
    prom = prometheus.start(
        binary,
        tmp_path / "prometheus",
        demo.free_port(),
        [f"{demo.HOST}:{server.port}"],
        rule_files=[RULES],
    )
    try:
        yield server, prom
    finally:
        prom.stop()


def held_admissions(server: demo.DemoServer) -> float:
    """The server's held-wait observations so far, over both engines."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(server.metrics_text())
        for sample in family.samples
        if sample.name == "vllm:balance_held_wait_seconds_count"
    )


def queries(dashboard: dict[str, Any], model: str) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every dashboard query, Grafana's
    variables set as Grafana would for ``model``."""
    return [
        (title, expr.replace("$model_name", model).replace(
            "$__rate_interval", RATE_WINDOW))
        for title, expr in exprs(dashboard)
    ]  # fmt: skip


def empty_queries(
    prom: prometheus.Prometheus, model: str, dashboard: dict[str, Any]
) -> list[str]:
    """The dashboard's queries that return no series (or a series of
    another model) for ``model``."""
    found = []
    for title, expr in queries(dashboard, model):
        result = prom.query(expr)
        names = {s["metric"].get("model_name", model) for s in result}
        if not result or names != {model}:
            found.append(f"{title!r}: {expr} -> {result}")
    return found


def wait_samples(prom: prometheus.Prometheus, series: str, samples: int) -> None:
    """Until Prometheus holds at least ``samples`` samples of every series
    ``series`` selects (a rate needs two in its window; a histogram's first
    sample may come with its first observation)."""
    expr = f"min(count_over_time({series}[{RATE_WINDOW}]))"
    deadline = time.monotonic() + SCRAPED_LIMIT_S
    last: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        last = prom.query(expr)
        if last and float(last[0]["value"][1]) >= samples:
            return
        time.sleep(1)
    pytest.fail(f"prometheus holds too few samples of {series}: {last}")


def wait_scraped(prom: prometheus.Prometheus, model: str, admissions: int) -> None:
    """Until Prometheus holds the final held-wait counts (every admission
    observed on some engine), then two more samples of every histogram
    series."""
    expr = f'sum(vllm:balance_held_wait_seconds_count{{model_name="{model}"}})'
    deadline = time.monotonic() + SCRAPED_LIMIT_S
    last: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        last = prom.query(expr)
        if last and float(last[0]["value"][1]) >= admissions:
            break
        time.sleep(1)
    else:
        pytest.fail(f"prometheus never saw {admissions} admissions: {last}")
    for name in ("vllm:balance_held_wait_seconds", "vllm:balance_held_wait_steps"):
        for suffix in ("_bucket", "_sum", "_count"):
            wait_samples(prom, f'{name}{suffix}{{model_name="{model}"}}', 3)


def test_prometheus_evaluates_every_dashboard_query(
    deployment: tuple[demo.DemoServer, prometheus.Prometheus],
) -> None:
    server, prom = deployment

    def tokens(i: int) -> int:
        prompt = [10 + (i * 7 + j) % 900 for j in range(8 + i % 5)]
        return int(server.complete(prompt, TOKENS)["usage"]["completion_tokens"])

    # Counters from before the load, so the rates see it.
    wait_samples(prom, f'vllm:balance_gathers_total{{model_name="{MODEL}"}}', 2)
    before = held_admissions(server)  # another test's load on the shared server
    with ThreadPoolExecutor(REQUESTS) as pool:
        assert list(pool.map(tokens, range(REQUESTS))) == [TOKENS] * REQUESTS
    wait_scraped(prom, MODEL, int(before) + REQUESTS)
    targets = prom.get("/api/v1/targets")["activeTargets"]
    assert [t["health"] for t in targets] == ["up"], targets

    dashboard = load()
    assert queries(dashboard, MODEL), "no queries in the dashboard"
    assert empty_queries(prom, MODEL, dashboard) == []
    # The model_name filter is applied: another model's name finds nothing.
    for title, expr in queries(dashboard, "no-such-model"):
        assert prom.query(expr) == [], (title, expr)

    # Negative control: a misspelt name in one query is reported, only it.
    misspelt = json.loads(json.dumps(dashboard).replace(*MISSPELT))
    reported = empty_queries(prom, MODEL, misspelt)
    assert len(reported) == 1 and MISSPELT[1] in reported[0], reported

    # The alert rules load, evaluate on the real series, and stay quiet.
    groups = prom.get("/api/v1/rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) == 3, groups
    deadline = time.monotonic() + SCRAPED_LIMIT_S
    while any(r["health"] != "ok" for r in rules) and time.monotonic() < deadline:
        time.sleep(1)
        rules = [r for g in prom.get("/api/v1/rules")["groups"] for r in g["rules"]]
    assert all(r["health"] == "ok" for r in rules), rules
    assert prom.get("/api/v1/alerts")["alerts"] == []
