# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus for the tests: Debian's ``prometheus`` package, run by hand.

:func:`tools` returns the ``prometheus`` and ``promtool`` binaries,
installing the package with apt when they are missing (the way the lanes
install vLLM: once per machine, then found on ``PATH``). The install:

- says so in one line on stderr;
- is idempotent (a second call finds the binaries and does nothing) and
  quiet (``-qq``, no recommends, noninteractive), waits on apt's lock
  instead of failing when another apt runs;
- never leaves a system service behind: the package's maintainer scripts
  ask ``invoke-rc.d`` to start ``prometheus.service``; a ``policy-rc.d``
  that answers 101 ("action forbidden") is put in place for the install
  when the machine has none (container images ship one), and removed after.

:class:`Prometheus` runs the binary the tests' way: a temp config, the
TSDB in a temp directory, the web UI on a loopback port, its own session
so the finalizer can kill it and everything it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = "prometheus"
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
APT_LOCK_TIMEOUT_S = 300
INSTALL_LIMIT_S = 900  # hang guard for apt (download + unpack)
READY_LIMIT_S = 60


class PrometheusUnavailable(RuntimeError):
    """Prometheus is missing and cannot be installed here (one-line cause)."""


def _found() -> tuple[str, str] | None:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    return (prometheus, promtool) if prometheus and promtool else None


def _as_root() -> list[str] | None:
    """The prefix that runs a command as root: none when root, ``sudo -n``
    where passwordless sudo works (GitHub's runners), else None."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") is None:
        return None
    probe = subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=30)
    return ["sudo", "-n"] if probe.returncode == 0 else None


def _run(root: list[str], *cmd: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    full = [*root, *(["env", "DEBIAN_FRONTEND=noninteractive"] if root else []), *cmd]
    result = subprocess.run(
        full, env=env, capture_output=True, text=True, timeout=INSTALL_LIMIT_S
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise PrometheusUnavailable(
            f"`{' '.join(full)}` failed ({result.returncode}): {' / '.join(tail)}"
        )


def _apt(root: list[str], *args: str) -> None:
    lock = f"DPkg::Lock::Timeout={APT_LOCK_TIMEOUT_S}"
    _run(root, "apt-get", "-qq", "-o", lock, *args)


def tools(say: Callable[[str], None] | None = None) -> tuple[str, str]:
    """``(prometheus, promtool)`` paths; installs Debian's package first
    when either is missing (as root, or through passwordless ``sudo``),
    saying so in one line through ``say`` (default: stderr).

    Raises:
        PrometheusUnavailable: neither root nor passwordless sudo, no apt,
            or apt failed (the message says which, and what to run by hand).
    """
    found = _found()
    if found:
        return found
    root = _as_root()
    if shutil.which("apt-get") is None or root is None:
        raise PrometheusUnavailable(
            "prometheus/promtool not on PATH and this process cannot install "
            "them (needs apt, and root or passwordless sudo): run "
            "`apt-get install -y prometheus` as root"
        )
    line = (
        "tests: installing Debian's prometheus package (apt-get update, "
        "apt-get install prometheus; no service is started)"
    )
    if say is None:
        print(line, file=sys.stderr)
    else:
        say(line)
    # Where systemd runs, the package's postinst would start a service on
    # :9090 that outlives the tests; policy-rc.d answering 101 forbids it.
    added_policy = not POLICY_RC_D.exists()
    if added_policy:
        _run(root, "sh", "-c", f"printf '#!/bin/sh\\nexit 101\\n' > {POLICY_RC_D}"
             f" && chmod 755 {POLICY_RC_D}")  # fmt: skip
    try:
        _apt(root, "update")
        _apt(root, "install", "-y", "--no-install-recommends", PACKAGE)
    finally:
        if added_policy:
            _run(root, "rm", "-f", str(POLICY_RC_D))
    found = _found()
    if not found:
        raise PrometheusUnavailable(
            f"installed {PACKAGE} but prometheus/promtool are still not on PATH"
        )
    return found


@dataclass
class Prometheus:
    """One running Prometheus server (see :func:`start`)."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, **params: str) -> Any:
        """``data`` of an HTTP API answer (``/api/v1/...``); raises on an
        error status."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(self.url(f"{path}?{query}"), timeout=30) as resp:
            answer = json.loads(resp.read())
        if answer.get("status") != "success":
            raise AssertionError(f"{path} {params}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (``[]``: no series)."""
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def stop(self) -> None:
        """Kill the server's process group and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def start(
    binary: str,
    workdir: Path,
    port: int,
    targets: list[str],
    rule_files: Sequence[Path] = (),
    interval_s: int = 1,
) -> Prometheus:
    """Start ``binary`` scraping ``targets`` (``host:port`` serving
    ``/metrics``) every ``interval_s`` seconds, evaluating ``rule_files`` at
    the same interval; config, TSDB and log under ``workdir``; returns once
    ``/-/ready`` answers 200.

    Raises:
        AssertionError: exited early, or not ready within READY_LIMIT_S
            (hang guard), with the log.
    """
    config = {
        "global": {
            "scrape_interval": f"{interval_s}s",
            "evaluation_interval": f"{interval_s}s",
        },
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": "vllm", "static_configs": [{"targets": targets}]}
        ],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(json.dumps(config))  # JSON is YAML
    log = workdir / "prometheus.log"
    cmd = [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Prometheus(proc, port, log)
    deadline = time.monotonic() + READY_LIMIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log_text = log.read_text()
            raise AssertionError(f"prometheus exited {proc.returncode}:\n{log_text}")
        try:
            with urllib.request.urlopen(server.url("/-/ready"), timeout=5) as resp:
                if resp.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    server.stop()
    log_text = log.read_text()
    raise AssertionError(f"prometheus not ready in {READY_LIMIT_S} s:\n{log_text}")


def tools_for(config: Any) -> tuple[str, str]:
    """:func:`tools` from a test, its install line on stderr with pytest's
    output capture suspended for it (else capture hides it on a pass).

    Raises:
        PrometheusUnavailable: as :func:`tools`.
    """
    capture = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        if capture is None:
            print(line, file=sys.stderr)
            return
        with capture.global_and_fixture_disabled():
            print(f"\n{line}", file=sys.stderr, flush=True)

    return tools(say)
