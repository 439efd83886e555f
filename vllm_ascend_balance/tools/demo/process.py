# SPDX-License-Identifier: Apache-2.0
"""Starting, waiting for and stopping the demo server (its command line:
:mod:`~vllm_ascend_balance.tools.demo.command`).

The server runs in its own session, so that one process group holds the
API server, the DP coordinator and the engine cores, and stopping the
group stops them all (:func:`stop_server`). Importing this module imports
neither vLLM nor torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_ascend_balance.tools.demo import log as demo_log
from vllm_ascend_balance.tools.demo.command import (
    BALANCE_ON,
    HOST,
    MAX_PORT,
    complete,
    doctor_command,
    free_port,
    serve_command,
    server_env,
    write_model,
)
from vllm_ascend_balance.tools.demo.drain import drain_seconds

STARTUP_LIMIT_S = 420.0
STOP_GRACE_S = 20.0


class DemoError(RuntimeError):
    """The server did not come up (exited, or no ``/health`` in time), its
    port cannot be used, or a process it started survived
    :func:`stop_server`.

    Attributes:
        headline: what happened, one line.
        log: the server's log, or None (none written).
    """

    def __init__(self, headline: str, log: Path | None = None) -> None:
        self.headline = headline
        self.log = log
        text = log.read_text(errors="replace") if log and log.exists() else ""
        end = "\n".join(demo_log.tail(text))
        super().__init__(headline + (f"; the end of {log}:\n{end}" if end else ""))


@dataclass
class DemoServer:
    """A started demo server.

    Attributes:
        proc: the API server process, leader of its own session (its
            process group holds the coordinator and the engine cores).
        port: the HTTP port on :data:`HOST`.
        args: ``vllm serve``'s arguments it runs with (``serve_args``).
        log: the file holding its stdout and stderr, or None (inherited).
    """

    proc: subprocess.Popen[bytes]
    port: int
    args: list[str]
    log: Path | None = None
    stopped: bool = field(default=False, init=False)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, path: str = "") -> str:
        return f"{self.base_url}{path}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""

    def doctor_command(self) -> list[str]:
        """``vllm-ascend-balance doctor`` with the server's arguments."""
        return doctor_command(self.args)

    def complete(self, prompt: Sequence[int], max_tokens: int) -> dict[str, Any]:
        """One ``/v1/completions`` request; the decoded JSON reply."""
        return complete(self.base_url, prompt, max_tokens)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.url("/metrics"), timeout=30) as resp:
            return str(resp.read().decode())


def start_server(
    command: Sequence[str],
    port: int,
    args: Sequence[str],
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> DemoServer:
    """Start ``command`` in its own session (one process group: API server,
    coordinator, engines), output to ``log`` (None: inherited).

    Raises:
        DemoError: ``port`` is out of range or taken (:func:`check_port_free`).
    """
    check_port_free(port)
    out = log.open("wb") if log is not None else None
    try:
        proc = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            env=server_env(env),
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        if out is not None:
            out.close()
    return DemoServer(proc, port, list(args), log)


def check_port_free(port: int) -> None:
    """Refuse a port out of range, or one something already listens on: its
    ``/health`` would answer for another server, and the demo would call
    that one ready.

    Raises:
        DemoError: one line naming the port and the fix.
    """
    if not 0 < port <= MAX_PORT:
        raise DemoError(
            f"--port must be 1..{MAX_PORT}, got {port}: choose a port in range "
            f"(--port 0: a free one)"
        )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port left in TIME_WAIT by a stopped server is
        # free to it, a listening one is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            raise DemoError(
                f"port {port} on {HOST} is in use ({exc.strerror}): stop what "
                f"listens there, or choose another port with --port "
                f"(--port 0: a free one)"
            ) from None


def wait_healthy(server: DemoServer, limit_s: float = STARTUP_LIMIT_S) -> None:
    """Return once ``/health`` answers 200.

    Raises:
        DemoError: the server exited, or was not healthy within ``limit_s``
            (a hang guard, not a performance bound).
    """
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise DemoError(
                f"the server exited with status {server.proc.returncode} before "
                f"/health answered",
                server.log,
            )
        try:
            with urllib.request.urlopen(server.url("/health"), timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise DemoError(f"the server was not healthy in {limit_s:.0f} s", server.log)


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_server(server: DemoServer, grace_s: float = STOP_GRACE_S) -> None:
    """Stop every process of the server's process group: SIGTERM (vLLM's
    graceful shutdown), then SIGKILL after ``grace_s`` plus the server's
    ``--shutdown-timeout`` (the drain of its requests in flight,
    :func:`~vllm_ascend_balance.tools.demo.drain.drain_seconds`); reap the
    leader.

    Raises:
        DemoError: a process of the group survived SIGKILL.
    """
    pgid = server.proc.pid  # session leader: pgid == pid
    # A SIGKILL before the drain's bound would cut the requests it lets finish.
    drain_s = drain_seconds(server.args)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = (
            time.monotonic() + grace_s + (drain_s if sig == signal.SIGTERM else 0)
        )
        while time.monotonic() < deadline:
            server.proc.poll()  # reap the leader, else it stays a zombie
            if not group_alive(pgid):
                break
            time.sleep(0.2)
        if not group_alive(pgid):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(timeout=30)
    server.stopped = True
    if group_alive(pgid):
        raise DemoError(f"processes of group {pgid} survived SIGKILL", server.log)


@contextlib.contextmanager
def running_server(
    workdir: Path,
    dp: int = 2,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    *,
    scheduler_config: Mapping[str, Any] = BALANCE_ON,
    max_num_seqs: int = 4,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    python: str = sys.executable,
    startup_limit_s: float = STARTUP_LIMIT_S,
) -> Iterator[DemoServer]:
    """The demo server, healthy, for the ``with`` body; every process it
    started is stopped on exit (also on an exception or Ctrl-C).

    ``workdir`` gets ``model/`` (the tiny MoE ``config.json``), ``run/``
    (the executor's records) and, unless ``log`` is given,
    ``server.log``. ``port`` None: a free port. Other arguments: as in
    :func:`~vllm_ascend_balance.tools.demo.command.serve_args`.

    Raises:
        ValueError: as ``serve_args`` (before anything starts).
        DemoError: the server did not come up (:func:`wait_healthy`; its
            processes are stopped first), or a process survived the stop.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    model = write_model(workdir / "model")
    port = port or free_port()
    command = serve_command(
        dp,
        port,
        model,
        extra_args,
        run_dir=workdir / "run",
        scheduler_config=scheduler_config,
        max_num_seqs=max_num_seqs,
        python=python,
    )
    args = command[3:]  # after ``python -m SERVER_MODULE``
    server = start_server(
        command, port, args, log=log or workdir / "server.log", env=env, cwd=workdir
    )
    try:
        wait_healthy(server, startup_limit_s)
        yield server
    finally:
        stop_server(server)
