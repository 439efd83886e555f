# SPDX-License-Identifier: Apache-2.0
"""``benchmarks/sweep_max_frozen_steps.py`` fails in one line, no traceback.

docs/operating.md quoted it as ``python benchmarks/...``: with a Python
that has no vLLM, each replay it starts said so and the sweep then died
with a ``CalledProcessError`` traceback. Now it checks first, and names
the lane venv's Python (as README.md runs benchmarks); a replay that fails
for another reason is one line too (its own error stays above).

Controls: the environment that hides vLLM hides it (and only there), and
the failing replay is the fake's (the sweep reached it).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

# why: the script and its replay child, on the release lane's vLLM
pytestmark = pytest.mark.lane_scope("release")

SCRIPT = REPO_ROOT / "benchmarks" / "sweep_max_frozen_steps.py"
PROG = "benchmarks/sweep_max_frozen_steps.py"
#: Imported first by every Python started with it on PYTHONPATH (the
#: replays the sweep starts too): vLLM is then not installed, as for find_spec.
HIDE_VLLM = "import sys\nsys.modules['vllm'] = None\n"
FIND = "import importlib.util; print(importlib.util.find_spec('vllm') is None)"


def _without_vllm(tmp_path: Path) -> dict[str, str]:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_VLLM)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(hide), str(REPO_ROOT), env.get("PYTHONPATH")])
    )
    return env


def _missing(env: dict[str, str] | None) -> str:
    return subprocess.run(
        [sys.executable, "-c", FIND], capture_output=True, text=True, env=env
    ).stdout.strip()


def test_without_vllm_it_says_so_in_one_line(tmp_path: Path) -> None:
    env = _without_vllm(tmp_path)
    assert _missing(env) == "True" and _missing(None) == "False", "the control"
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--bounds", "4"]
        + ["--markdown", f"{out}.md", "--json", f"{out}.json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=300,  # hang guard only
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{PROG}: error: vLLM is not installed"), lines[0]
    assert lines[0].endswith(f"$(scripts/lane.sh release)/bin/python {PROG}")
    assert not Path(f"{out}.md").exists() and result.stdout == ""


def test_a_failing_replay_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sweep = importlib.import_module("benchmarks.sweep_max_frozen_steps")
    started: list[list[str]] = []

    def failing(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        started.append(cmd)
        return subprocess.CompletedProcess(cmd, 3)

    monkeypatch.setattr(subprocess, "run", failing)
    out = tmp_path / "out"
    monkeypatch.setattr(
        sys,
        "argv",
        [PROG, "--bounds", "4", "--markdown", f"{out}.md", "--json", f"{out}.json"],
    )
    assert sweep.main() == 1
    assert len(started) == 1 and "replay" in started[0], "the fake replay ran"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{PROG}: error: `vllm-ascend-balance replay ")
    assert "exited with status 3" in lines[0], lines[0]
