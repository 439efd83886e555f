# SPDX-License-Identifier: Apache-2.0
"""The alert rules shipped next to the dashboard (``docs/observability/alerts.yml``)
are valid Prometheus rules and fire when, and only when, they should.

Real ``promtool`` (Debian's ``prometheus`` package, installed by the test's
setup when missing: tests/support/prometheus.py):

- ``promtool check rules`` accepts the file: three alerts, each over series
  this package exports
  (:func:`vllm_ascend_balance.observability.exported_series.exported_names`);
- ``promtool test rules docs/observability/alerts_test.yml`` passes: each
  alert fires on a synthetic faulty series and stays quiet on the healthy
  series next to it (and, for the freeze, on a bounded freeze);
- negative controls, on edited copies: a syntax error fails the check; a
  stall threshold no series reaches (the alert never fires) and one every
  healthy series passes (it fires on the healthy rank too) each fail the
  unit tests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import prometheus
from tests.support.lanes import REPO_ROOT
from vllm_ascend_balance.observability import exported_series

pytestmark = pytest.mark.lane_scope("release")

FOLDER = REPO_ROOT / "docs" / "observability"
RULES = FOLDER / "alerts.yml"
UNIT_TESTS = FOLDER / "alerts_test.yml"
ALERTS = {"BalanceRankStalled", "BalanceFreezeHeld", "BalanceHeldWaitP99High"}
STALL_EXPR = "(vllm:balance_gather_wait_seconds) > 30"
PROMTOOL_LIMIT_S = 120  # hang guard


@pytest.fixture(scope="module")
def promtool(pytestconfig: pytest.Config) -> str:
    try:
        return prometheus.tools_for(pytestconfig)[1]
    except prometheus.PrometheusUnavailable as error:
        pytest.fail(str(error))


def run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_LIMIT_S,
    )


def edited(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the rules and their unit tests in ``tmp_path``, with
    ``old`` replaced by ``new`` once in the rules."""
    text = RULES.read_text()
    assert text.count(old) == 1, old
    (tmp_path / RULES.name).write_text(text.replace(old, new))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


def test_rules_check(promtool: str) -> None:
    result = run(promtool, "check", "rules", RULES.name, cwd=FOLDER)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 3 rules found" in result.stdout


def test_rules_name_exported_series_only() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert {rule["alert"] for rule in rules} == ALERTS
    exported = exported_series.exported_names()
    for rule in rules:
        names = re.findall(r"vllm:[a-z_]+", rule["expr"])
        assert names and set(names) <= exported, rule["expr"]


def test_rules_unit_tests_pass(promtool: str) -> None:
    result = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=FOLDER)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    tested = set(re.findall(r"alertname: (\w+)", UNIT_TESTS.read_text()))
    assert tested == ALERTS, "an alert without a unit test"


def test_negative_control_a_broken_rule_fails_the_check(
    promtool: str, tmp_path: Path
) -> None:
    folder = edited(tmp_path, STALL_EXPR, "(vllm:balance_gather_wait_seconds) > > 30")
    result = run(promtool, "check", "rules", RULES.name, cwd=folder)
    assert result.returncode != 0, result.stdout
    assert "parse error" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "threshold", ["3000", "0"], ids=["never-fires", "fires-on-healthy"]
)
def test_negative_control_a_wrong_threshold_fails_the_unit_tests(
    promtool: str, tmp_path: Path, threshold: str
) -> None:
    folder = edited(
        tmp_path, STALL_EXPR, f"(vllm:balance_gather_wait_seconds) > {threshold}"
    )
    result = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=folder)
    assert result.returncode != 0, result.stdout
    assert "BalanceRankStalled" in result.stdout + result.stderr
