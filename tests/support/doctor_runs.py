# SPDX-License-Identifier: Apache-2.0
"""Many ``vllm-ascend-balance doctor`` command lines for the price of one
vLLM import.

Each doctor run spends nearly all its time importing vLLM and torch (10-20 s
of CPU each); ten at once on 2 shared cores took 50-110 s of set-up per lane.
:func:`run_doctor_cases` starts ONE process (``python -m
tests.support.doctor_runs``) that imports what the doctor imports, then
forks one child per case: each child is a process of its own (its own
environment, ``sys.modules``, vLLM logging state and exit status, as a fresh
command would have) that calls the console script's function
(``vllm_ascend_balance.tools.cli:main``) with the case's arguments, stdout and
stderr to files. A fork copies the imported modules, so the import is paid
once. What it does not cover (the console script's wrapper itself, vLLM
imported after the CLI configured its streams) tests/test_doctor.py checks
by running one case through the real console script too and comparing.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.forked import fork_run

#: What the doctor imports on its way (vLLM's serve parser, its config and
#: engine arguments): imported before the forks. A module that cannot be
#: imported here is left to the child, which meets it as the command would.
PRELOAD = (
    "vllm_ascend_balance.tools.cli",
    "vllm_ascend_balance.tools.doctor.cli",
    "vllm.logger",
    "vllm.config",
    "vllm.engine.arg_utils",
    "vllm.entrypoints.openai.cli_args",
)


def run_doctor_cases(
    cases: dict[str, list[str]],
    timeout: float = 600.0,
    env: dict[str, dict[str, str]] | None = None,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """``{case: the doctor's outcome}`` for ``{case: doctor arguments}``
    (what follows ``vllm-ascend-balance doctor`` on a command line);
    ``env``: ``{case: variables}`` set in that case's process only.

    Raises:
        subprocess.TimeoutExpired: the runner did not finish within
            ``timeout`` seconds (a hang guard).
        AssertionError: the runner itself failed (its stderr in the message).
    """
    with tempfile.TemporaryDirectory(prefix="vab-doctor-") as tmp:
        spec = Path(tmp) / "cases.json"
        spec.write_text(json.dumps({"cases": cases, "env": env or {}}))
        proc = subprocess.run(
            [sys.executable, "-m", "tests.support.doctor_runs", str(spec), tmp],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        codes = json.loads((Path(tmp) / "codes.json").read_text())
        return {
            name: subprocess.CompletedProcess(
                ["vllm-ascend-balance", "doctor", *args],
                codes[name],
                (Path(tmp) / f"{name}.out").read_text(errors="replace"),
                (Path(tmp) / f"{name}.err").read_text(errors="replace"),
            )
            for name, args in cases.items()
        }


def _doctor(argv: list[str], env: dict[str, str]) -> int | None:
    """In the forked child: the console script's function."""
    os.environ.update(env)
    sys.argv = ["vllm-ascend-balance", *argv]
    from vllm_ascend_balance.tools.cli import main

    return main(argv)


def _main(spec: Path, out_dir: Path) -> None:
    loaded = json.loads(spec.read_text())
    cases: dict[str, list[str]] = loaded["cases"]
    env: dict[str, dict[str, str]] = loaded["env"]
    for name in PRELOAD:
        # A failed import is left to the child, which meets it as the
        # command would.
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    children: dict[int, str] = {}
    for name, args in cases.items():
        pid = fork_run(
            lambda args=args, name=name: _doctor(["doctor", *args], env.get(name, {})),
            out_dir / f"{name}.out",
            out_dir / f"{name}.err",
        )
        children[pid] = name
    codes: dict[str, int] = {}
    while children:
        pid, status = os.wait()
        codes[children.pop(pid)] = os.waitstatus_to_exitcode(status)
    (out_dir / "codes.json").write_text(json.dumps(codes))


if __name__ == "__main__":
    _main(Path(sys.argv[1]), Path(sys.argv[2]))
