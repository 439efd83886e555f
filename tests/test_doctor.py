# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance doctor``, run as users run it: the console script
installed next to this interpreter, in a subprocess.

The cases run concurrently (each process imports vLLM, a few seconds); the
report lines are picked out by their labels because vLLM's own log lines go
to stdout too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ascend_balance.config import SETTING

SCRIPT = Path(sys.executable).parent / "vllm-ascend-balance"
ON = json.dumps({"scheduler_config": {"enable_balance_scheduling": True}})
CASES = {
    "enabled": ["--additional-config", ON],
    "off": [],
    "non-boolean": [
        "--additional-config",
        json.dumps({"scheduler_config": {"enable_balance_scheduling": "yes"}}),
    ],
    "kv-producer": ["--additional-config", ON, "--kv-role", "kv_producer"],
    "dp1": ["--additional-config", ON, "--data-parallel-size", "1"],
    "dense": ["--additional-config", ON, "--dense"],
    "bad-json": ["--additional-config", '{"scheduler_config": '],
    "no-such-scheduler": ["--additional-config", ON, "--scheduler-cls", "no.such.Mod"],
}


class Report:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    def field(self, label: str) -> str:
        """The value after ``label:`` on the (single) line starting with it."""
        values = [
            line.split(":", 1)[1].strip()
            for line in self.stdout.splitlines()
            if line.startswith(f"{label}:")
        ]
        assert len(values) == 1, (label, self.stdout)
        return values[0]

    def notes(self) -> list[str]:
        return [
            line.strip()[2:]
            for line in self.stdout.splitlines()
            if line.startswith("  - ")
        ]


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    assert SCRIPT.exists(), f"console script not installed next to {sys.executable}"
    procs = {
        name: subprocess.Popen(
            [str(SCRIPT), "doctor", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in CASES.items()
    }
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)  # hang guard only
        out[name] = Report(
            subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        )
    return out


def test_enabled_config_would_activate(reports: dict[str, Report]) -> None:
    report = reports["enabled"]
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.field("vLLM installed") not in ("", "no")
    assert report.field("seam present").startswith("True")
    assert report.field("plugin registered").startswith("True")
    assert report.field("setting").startswith("True")
    assert report.field("would activate") == "True"
    assert "Traceback" not in report.stderr


def test_off_would_not_activate(reports: dict[str, Report]) -> None:
    report = reports["off"]
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.field("setting").startswith("False")
    assert report.field("would activate") == "False"


@pytest.mark.parametrize(
    ("case", "needles"),
    [
        ("non-boolean", [SETTING, "true or false"]),
        ("kv-producer", [SETTING, "kv_role", "kv_producer", "kv_both"]),
    ],
)
def test_unworkable_config_exits_1_with_one_line_cause(
    reports: dict[str, Report], case: str, needles: list[str]
) -> None:
    report = reports[case]
    assert report.returncode == 1, report.stdout + report.stderr
    verdict = report.field("verdict")  # exactly one line
    assert verdict.startswith("cannot work: ")
    for needle in needles:
        assert needle in verdict, (needle, verdict)
    assert "would activate:" not in report.stdout
    assert "Traceback" not in report.stderr


@pytest.mark.parametrize(
    ("case", "note"), [("dp1", "data_parallel_size=1"), ("dense", "non-MoE")]
)
def test_no_effect_is_a_note_not_an_error(
    reports: dict[str, Report], case: str, note: str
) -> None:
    report = reports[case]
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.field("would activate") == "False"
    assert any(note in line and "no effect" in line for line in report.notes()), (
        report.stdout
    )


@pytest.mark.parametrize(
    "case, words",
    [
        ("bad-json", ["--additional-config", "not valid JSON"]),
        ("no-such-scheduler", ["no.such.Mod", "--scheduler-cls"]),
    ],
)
def test_unusable_flags_get_one_line_naming_the_flag(reports, case, words):
    report = reports[case]
    assert report.returncode == 1
    verdict = report.field("verdict")
    assert verdict.startswith("cannot work:")
    for word in words:
        assert word in verdict
    assert "Traceback" not in report.stdout + report.stderr
