# SPDX-License-Identifier: Apache-2.0
"""Upstream's scheduler tests against many ``scheduler.py`` variants for the
price of one vLLM import (tests/test_upstream_unit.py's negative controls).

Each negative control runs upstream's own test file in a fresh interpreter
whose ``vllm.v1.core.sched.scheduler`` is a variant (``_vab_offline_plugin``
loads it under the real name before any test module). Nearly all of such a
run is importing what ``scheduler.py`` imports (torch, vLLM's config and KV
cache modules: 7-13 s per run on 2 cores, 3 to 8 runs per lane).

:class:`ForkServer` starts ONE process in the upstream tree with the runs'
common environment. It imports pytest and its plugins, then every module
``scheduler.py`` imports at its top level (read from the installed file),
in that order, as a fresh run does (none of them imports the scheduler,
which is checked), then forks one child per run: the child takes the run's own
environment variables, sends stdout and stderr to files and calls
``pytest.main`` with the run's arguments, as ``python -m pytest`` in the
upstream tree would (the tree first on ``sys.path``). The variant is still
loaded by the plugin, in the child, under its real name; no module that
holds the installed scheduler exists in the parent. Runs are one at a time.

Shapes: a request is one JSON line ``{"argv": [...], "env": {...}, "out":
path, "err": path, "timeout": s}`` on the server's stdin; the answer one
JSON line ``{"code": exit status}`` on the descriptor it was started with
as stdout (the server's own stdout goes to stderr: vLLM logs to stdout).
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCHEDULER = "vllm.v1.core.sched.scheduler"


class ForkServer:
    """One preloaded process in ``root`` with ``env``; :meth:`run` forks a
    pytest run from it."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(root)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._count = 0

    def run(
        self, argv: list[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``python -m pytest *argv`` in the tree, with ``env`` on top of the
        server's environment; stdout and stderr as text.

        Raises:
            RuntimeError: the server exited (its stderr went to this
                process's stderr).
        """
        self._count += 1
        out = self.root / f"fork-{self._count}.out"
        err = self.root / f"fork-{self._count}.err"
        assert self._proc.stdin is not None and self._proc.stdout is not None
        request = {
            "argv": argv, "env": env, "out": str(out), "err": str(err),
            "timeout": timeout,
        }  # fmt: skip
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server exited ({self._proc.wait()})")
        code = json.loads(line)["code"]
        return subprocess.CompletedProcess(
            ["pytest", *argv],
            code,
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
        )

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def top_level_imports(source: str) -> list[str]:
    """The modules a file imports at its top level (absolute imports only)."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def _preload() -> None:
    import importlib
    import importlib.metadata
    import importlib.util

    # As a fresh run: pytest and its installed plugins (entry points:
    # hypothesis, ...) at start-up, then the variant's imports (the plugin
    # loads the variant before any test module).
    import pytest  # noqa: F401

    for entry in importlib.metadata.entry_points(group="pytest11"):
        importlib.import_module(entry.module)
    spec = importlib.util.find_spec(SCHEDULER)
    assert spec is not None and spec.origin is not None
    for name in top_level_imports(Path(spec.origin).read_text()):
        importlib.import_module(name)
    # The plugin refuses to load a variant once either is imported.
    loaded = {SCHEDULER, "vllm.v1.core.sched.async_scheduler"} & set(sys.modules)
    assert not loaded, f"preloading imported {loaded}"


def _child(request: dict) -> int:
    os.environ.update(request["env"])
    import pytest

    sys.argv = ["pytest", *request["argv"]]
    return int(pytest.main(request["argv"]))


def _wait(pid: int, timeout: float) -> int:
    """The child's exit status; killed (SIGKILL) past ``timeout``, a hang
    guard."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _serve(root: Path) -> None:
    # This file's directory is still sys.path[0]; the tree has a `tests`
    # package of its own, so the helper is imported by its bare name.
    from forked import fork_run

    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # vLLM's log lines must not reach the answers
    # As `python -m pytest` run in the tree: the tree first on sys.path
    # (not this file's directory, whose modules would shadow others).
    sys.path[0] = str(root)
    _preload()
    for line in sys.stdin:
        request = json.loads(line)
        pid = fork_run(
            lambda request=request: _child(request),
            Path(request["out"]),
            Path(request["err"]),
        )
        answers.write(json.dumps({"code": _wait(pid, request["timeout"])}) + "\n")
        answers.flush()


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))
