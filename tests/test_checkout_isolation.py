# SPDX-License-Identifier: Apache-2.0
"""Two checkouts sharing one lane cache each run their own code.

The shared lane venv's editable install names one checkout (whichever last
installed it). ``scripts/`` put their own checkout first on ``PYTHONPATH``;
the benchmarks, run as ``$venv/bin/python benchmarks/x.py`` with no
``PYTHONPATH``, put the checkout they live in first themselves, in their own
process and in the processes they start (one prologue,
``benchmarks/_checkout.py``, imported first by each). Here a second checkout (the
package and ``benchmarks/`` copied to a temporary directory, its package
marked) runs a benchmark's module level with ``PYTHONPATH`` unset: the
package it imports, and the one a child process imports, must be the copy's.
Negative control: the same script without its prologue imports another
checkout's package.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

BENCHMARKS = sorted(
    p for p in (REPO_ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")
)
# Cheap at module level (no vLLM or torch import before main()).
PROBED = ["sweep_max_frozen_steps.py", "compare_prefill_interval.py"]
PROBE = """\
import os, runpy, subprocess, sys
runpy.run_path(sys.argv[1], run_name="probe")  # the module level, not main()
import vllm_ascend_balance
print(vllm_ascend_balance.__file__)
code = "import vllm_ascend_balance as p; print(p.__file__)"
child = subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, check=True
)
print(child.stdout.strip())
"""


@pytest.fixture(scope="module")
def other_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("other-checkout")
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("vllm_ascend_balance", "benchmarks"):
        shutil.copytree(REPO_ROOT / name, root / name, ignore=ignore)
    return root


def _probe(script: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=script.parent,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return [str(Path(line).resolve()) for line in result.stdout.split()[-2:]]


@pytest.mark.parametrize("name", PROBED)
def test_a_benchmark_imports_the_checkout_it_lives_in(other_checkout, name) -> None:
    own = str((other_checkout / "vllm_ascend_balance" / "__init__.py").resolve())
    assert _probe(other_checkout / "benchmarks" / name) == [own, own]


def test_negative_control_without_the_prologue(other_checkout: Path) -> None:
    """Without the prologue, the import falls to whatever the venv provides
    (the editable install's checkout, or none): never the copy."""
    script = other_checkout / "benchmarks" / "no_prologue.py"
    script.write_text("import sys\n")
    own = str((other_checkout / "vllm_ascend_balance" / "__init__.py").resolve())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=script.parent,
    )
    assert own not in result.stdout


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_sets_its_checkout_first_before_importing_it(path) -> None:
    """Statically, for the scripts not probed above: the module-level
    ``import _checkout`` (the prologue, run as a script) comes before any
    module-level import of this project's code (``vllm_ascend_balance``,
    ``tests``, ``benchmarks``)."""
    tree = ast.parse(path.read_text())
    first_insert = next(
        (
            node.lineno
            for node in tree.body
            if isinstance(node, ast.If)
            and ast.unparse(node.test) == "not __package__"
            and any(
                isinstance(inner, ast.Import)
                and [a.name for a in inner.names] == ["_checkout"]
                for inner in node.body
            )
        ),
        None,
    )
    assert first_insert is not None, f"{path.name}: no checkout prologue"
    project = ("vllm_ascend_balance", "tests", "benchmarks")
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(project):
            assert node.lineno > first_insert, (path.name, node.lineno)
        if isinstance(node, ast.Import) and any(
            a.name.startswith(project) for a in node.names
        ):
            assert node.lineno > first_insert, (path.name, node.lineno)
