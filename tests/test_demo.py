# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance demo``: the one command that serves, as a new
operator runs it.

One real start of the command (``python -m vllm_ascend_balance demo --dp 2
--port 0``; ``scripts/serve`` runs the same module in the release lane's
venv): vLLM's own OpenAI server with DP 2 on CPU, the tiny MoE model, the
cost-model executor, balance on. Nothing is mocked. The test reads what the
command prints and checks, in the order an operator would:

- right after ``/health``, before any request, every balance series is on
  ``/metrics`` for both DP ranks, at zero;
- the printed ``curl`` completes its 8 tokens;
- the series move (gathers > 0, equal on both ranks);
- the printed doctor command, run as printed, accepts every argument of the
  server and names the scheduler class the server's engines really built
  (vLLM's "Using custom scheduler class" line of each engine);
- SIGINT to the command's process group (a terminal's Ctrl-C) with
  requests in flight lets them finish, every token (the demo's
  ``--shutdown-timeout``), stops it with status 0 and leaves no process of
  the server's session.

Negative controls: the start-up check reports a missing rank and a non-zero
value; the process census sees the server's processes while they run; the
engines' own log line says the requests were in flight at the stop (the
demo without its drain, by hand: vLLM aborts them, the replies are cut). The
async-scheduling rule doctor follows is checked in-process on both sides
(an executor with and without async support, CPU platform or not).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_ascend_balance.ipc_sockets import BASE_PATH_ENV
from vllm_ascend_balance.observability import exported_series
from vllm_ascend_balance.tools.demo import server as demo
from vllm_ascend_balance.tools.doctor.async_decision import async_scheduling

# why: vLLM's OpenAI server, stat loggers, executors (package-only tests: release)
pytestmark = pytest.mark.lane_scope("release", "main")

SCRIPT = Path(sys.executable).parent / "vllm-ascend-balance"
STARTUP_LIMIT_S = 480  # hang guard only; nothing asserts on durations
ENGINES = ("0", "1")
BUILT = re.compile(r"Using custom scheduler class <class '[\w.]+\.(\w+)'>")
#: Requests in flight at Ctrl-C: as many as DP 2 admits at the demo's cap of
#: 4, each a few seconds long, far inside the demo's drain bound.
IN_FLIGHT = 4
IN_FLIGHT_TOKENS = 300
#: vLLM's engine core, stopping with a drain bound (``--shutdown-timeout``).
DRAINING = re.compile(
    r"\[shutdown\] EngineCore: draining in-flight requests count=(\d+)"
)


# --------------------------------------------------------------------------
# checks (pure; each with its negative control below)
# --------------------------------------------------------------------------


def balance_samples(text: str) -> dict[tuple[str, str], float]:
    """``{(sample name, engine): value}`` of every ``vllm:balance_*`` sample
    (histogram buckets keep their ``le`` in the name; ``_created`` dropped)."""
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:balance_"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            name = sample.name
            if "le" in labels:
                name = f'{name}{{le="{labels.pop("le")}"}}'
            found[(name, labels["engine"])] = sample.value
    return found


def startup_problems(text: str, engines: tuple[str, ...]) -> list[str]:
    """What is wrong with a start-up scrape: a sample name this package
    exports (:func:`exported_series.exported_names`) missing for an engine, or a
    value other than zero."""
    samples = balance_samples(text)
    problems = []
    for name in sorted(exported_series.exported_names()):
        for engine in engines:
            if name.endswith("_bucket"):
                present = any(
                    n.startswith(name + "{") and e == engine for n, e in samples
                )
            else:
                present = (name, engine) in samples
            if not present:
                problems.append(f"{name} missing for engine {engine}")
    problems += [
        f"{name} = {value} on engine {engine}, not 0"
        for (name, engine), value in samples.items()
        if value != 0
    ]
    return problems


def session_members(sid: int) -> list[int]:
    """Pids of the live processes of session ``sid`` (from ``/proc``)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # After "pid (comm)": state, ppid, pgrp, session.
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry))
    return members


@pytest.mark.lane_scope("release")  # the check on text
def test_startup_check_reports_a_missing_rank_and_a_non_zero_value() -> None:
    """Negative controls of :func:`startup_problems`."""
    lines = []
    for series in (
        *exported_series.SERIES,
        exported_series.WAIT_SERIES,
        *exported_series.HISTOGRAMS,
    ):
        kind = "untyped" if series.kind == "histogram" else series.kind
        lines.append(f"# TYPE {series.name} {kind}")
        for engine in ENGINES:
            for suffix in exported_series.SUFFIXES[series.kind]:
                le = ',le="+Inf"' if suffix == "_bucket" else ""
                name = series.name + suffix
                lines.append(f'{name}{{engine="{engine}",model_name="m"{le}}} 0.0')
    complete = "\n".join(lines) + "\n"
    assert startup_problems(complete, ENGINES) == []
    one_rank = "\n".join(line for line in lines if 'engine="1"' not in line) + "\n"
    missing = startup_problems(one_rank, ENGINES)
    assert missing and all("engine 1" in p for p in missing), missing
    moved = complete.replace(
        'vllm:balance_gathers_total{engine="0",model_name="m"} 0.0',
        'vllm:balance_gathers_total{engine="0",model_name="m"} 3.0',
    )
    assert startup_problems(moved, ENGINES) == [
        "vllm:balance_gathers_total = 3.0 on engine 0, not 0"
    ]


@pytest.mark.lane_scope("release")  # /proc, not vLLM
def test_session_census_sees_a_live_session_and_not_a_gone_one() -> None:
    """Negative control of :func:`session_members`: a process in its own
    session is counted while it lives, not after."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert session_members(proc.pid) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert session_members(proc.pid) == []


def test_front_end_shows_every_engine_at_zero_once_engines_are_up() -> None:
    """The front-end stat logger, built as ``AsyncLLM`` builds it (vLLM's
    ``StatLoggerManager``: real ``PrometheusStatLogger`` next to it), on an
    isolated registry: nothing before ``log_engine_initialized()`` (the
    control: the series come from that call, not from building the
    logger), then every series of both engines at zero."""
    from prometheus_client import CollectorRegistry, generate_latest

    from tests.support.vllm_objects import make_vllm_config
    from vllm_ascend_balance.observability import stats_carrier

    registry = CollectorRegistry()
    front = stats_carrier.stat_logger_class()(make_vllm_config(), [0, 1])
    front.registry = registry
    assert balance_samples(generate_latest(registry).decode()) == {}
    front.log_engine_initialized()
    text = generate_latest(registry).decode()
    names = exported_series.exported_names() - {"vllm:balance_gather_wait_seconds"}
    samples = balance_samples(text)
    assert {n.split("{")[0] for n, _ in samples} == names, "the files' gauge aside"
    assert {e for _, e in samples} == set(ENGINES)
    assert set(samples.values()) == {0.0}


# --------------------------------------------------------------------------
# doctor's async-scheduling rule (in-process, real vLLM executor classes)
# --------------------------------------------------------------------------


def _serve_ns(**values: object) -> argparse.Namespace:
    return argparse.Namespace(
        **{"async_scheduling": None, "distributed_executor_backend": None, **values}
    )


@pytest.mark.parametrize(
    ("backend", "asked", "on_cpu", "expected"),
    [
        (None, None, False, True),  # vLLM's default: on
        ("mp", None, False, True),  # MultiprocExecutor supports it
        (demo.EXECUTOR, None, False, False),  # the cost-model executor does not
        (None, False, False, False),  # --no-async-scheduling
        (None, None, True, False),  # the CPU platform turns it off
        ("mp", True, True, False),  # ... even when asked for
    ],
)
def test_async_scheduling_as_vllm_settles_it(
    backend: str | None, asked: bool | None, on_cpu: bool, expected: bool
) -> None:
    ns = _serve_ns(distributed_executor_backend=backend, async_scheduling=asked)
    on, why = async_scheduling(ns, on_cpu=on_cpu)
    assert on is expected, why


def test_async_scheduling_refused_with_an_executor_without_it() -> None:
    """vLLM refuses ``--async-scheduling`` with such an executor; so does
    doctor, in one line naming the flag; an executor that cannot be
    imported is named too."""
    ns = _serve_ns(distributed_executor_backend=demo.EXECUTOR, async_scheduling=True)
    with pytest.raises(ValueError, match="--async-scheduling") as caught:
        async_scheduling(ns, on_cpu=False)
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="no.such.Executor"):
        async_scheduling(
            _serve_ns(distributed_executor_backend="no.such.Executor"), on_cpu=True
        )


@pytest.mark.lane_scope("release")  # the demo's own check
def test_demo_refuses_a_bad_dp_in_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vllm_ascend_balance", "demo", "--dp", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "vllm-ascend-balance demo: --dp must be >= 1, got 0: use e.g. --dp 2"
    )


@pytest.mark.lane_scope("release")  # the launcher's check
def test_a_port_in_use_is_refused_before_anything_starts() -> None:
    """A busy port would let another server's ``/health`` pass for the
    demo's own. Negative control: the same port, once released, passes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((demo.HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(demo.DemoError, match=f"port {port} .* is in use") as e:
            demo.start_server(["true"], port, [])
        assert "\n" not in str(e.value) and "--port 0" in str(e.value)
    demo.check_port_free(port)


# --------------------------------------------------------------------------
# the command itself
# --------------------------------------------------------------------------


class Demo:
    """The running command: its process, and its stdout lines as they come."""

    def __init__(self, tmp: Path) -> None:
        env = dict(os.environ)
        env.pop(demo_cli_doctor_env(), None)
        # A new shell's: its own temp dir, no IPC base from the suite.
        self.tmpdir = tmp / "tmpdir"
        self.tmpdir.mkdir()
        env["TMPDIR"] = str(self.tmpdir)
        env.pop(BASE_PATH_ENV, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_ascend_balance", "demo",
             "--dp", "2", "--port", "0", "--dir", str(tmp / "demo")],
            stdout=subprocess.PIPE,
            stderr=(tmp / "demo.stderr").open("wb"),
            text=True,
            env=env,
            start_new_session=True,  # its own group: a terminal's Ctrl-C target
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        #: The server's session (its leader's pid), once printed.
        self.server_pid: int | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, prefix: str, limit_s: float) -> str:
        """The first stdout line starting with ``prefix`` (hang guard)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            if line.startswith(prefix):
                return line
        pytest.fail(f"no line {prefix!r} in the demo's output: {self.seen}")

    def field(self, label: str) -> str:
        return next(
            line.split(":", 1)[1].strip()
            for line in self.seen
            if line.strip().startswith(f"{label}:")
        )


def demo_cli_doctor_env() -> str:
    from vllm_ascend_balance.tools.demo.cli import DOCTOR_ENV

    return DOCTOR_ENV


@pytest.fixture
def running_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    # A short path: vLLM's socket paths under its TMPDIR must fit in 103 bytes.
    started = Demo(tmp_path_factory.mktemp("demo"))
    yield started
    # Whatever happened: nothing of the demo or its server may stay.
    for pgid in (started.proc.pid, started.server_pid):
        if pgid is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    started.proc.wait(timeout=60)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return str(resp.read().decode())


def running_requests(text: str) -> float:
    """The requests the engines are running, all ranks together."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "vllm:num_requests_running"
        for sample in family.samples
    )


def _complete_into(url: str, replies: queue.Queue[object]) -> None:
    """One completion of :data:`IN_FLIGHT_TOKENS`; its reply, or what it
    raised, into ``replies``."""
    try:
        replies.put(demo.complete(url, [11, 12, 13, 14], IN_FLIGHT_TOKENS))
    except Exception as exc:  # an aborted request: the test shows it
        replies.put(repr(exc))


def settled(url: str) -> dict[tuple[str, str], float]:
    """Scrape until two scrapes agree (engines finish their last steps)."""
    previous = balance_samples(scrape(url))
    for _ in range(60):
        time.sleep(0.5)
        current = balance_samples(scrape(url))
        if current == previous:
            break
        previous = current
    return previous


@pytest.mark.e2e
@pytest.mark.slow
def test_demo_serves_and_stops_on_ctrl_c(running_demo: Demo) -> None:
    running = running_demo
    running.until("Ctrl-C stops", STARTUP_LIMIT_S)
    url = next(
        line for line in running.seen if line.startswith("vLLM OpenAI server")
    ).rsplit(": ", 1)[1]
    assert url.startswith("http://127.0.0.1:"), running.seen
    server_pid = int(running.field("server").split()[1])
    running.server_pid = server_pid

    # Start-up: every series, both ranks, at zero, before any request.
    metrics_url = running.field("metrics").split()[0]
    assert metrics_url == f"{url}/metrics"
    assert startup_problems(scrape(metrics_url), ENGINES) == []

    # The printed curl, as printed.
    curl = subprocess.run(
        shlex.split(running.field("try")), capture_output=True, text=True, timeout=300
    )
    assert curl.returncode == 0, curl.stderr
    assert json.loads(curl.stdout)["usage"]["completion_tokens"] == 8

    # The series move, on both ranks alike.
    moved = settled(metrics_url)
    gathers = {e: moved[("vllm:balance_gathers_total", e)] for e in ENGINES}
    assert gathers["0"] == gathers["1"] > 0, gathers

    # The printed doctor command, as printed (its program: the console script
    # of this venv), names the class the engines built.
    doctor = shlex.split(running.field("doctor"))
    assert doctor[:2] == ["vllm-ascend-balance", "doctor"], doctor
    report = subprocess.run(
        [str(SCRIPT), *doctor[1:]], capture_output=True, text=True, timeout=600
    )
    assert report.returncode == 0, report.stdout + report.stderr
    assert "would activate:        True" in report.stdout, report.stdout
    doctor_class = next(
        line.split(":", 1)[1].split()[0]
        for line in report.stdout.splitlines()
        if line.startswith("scheduler class:")
    )
    # vLLM's own warning names the class each engine built: the replay's
    # Recording<class> over balance's Balance<class> over vLLM's class.
    log = Path(running.field("log")).read_text(errors="replace")
    built = BUILT.findall(log)
    assert len(built) == 2, "one line per engine"
    assert set(built) == {doctor_class} == {"RecordingBalanceScheduler"}, (
        built,
        report.stdout,
    )

    # Ctrl-C: SIGINT to the command's process group, as a terminal sends it,
    # with requests in flight (the engines' running count says so first).
    before = session_members(server_pid)
    assert len(before) >= 4, before  # API server, coordinator, 2 engine cores
    replies: queue.Queue[object] = queue.Queue()
    clients = [
        threading.Thread(target=_complete_into, args=(url, replies), daemon=True)
        for _ in range(IN_FLIGHT)
    ]
    for client in clients:
        client.start()
    deadline = time.monotonic() + STARTUP_LIMIT_S  # hang guard
    while running_requests(scrape(metrics_url)) == 0:
        assert time.monotonic() < deadline, "the requests never ran"
        time.sleep(0.1)
    os.killpg(running.proc.pid, signal.SIGINT)
    assert running.proc.wait(timeout=180) == 0
    stopping = running.until("stopping the server", 30)
    running.until("stopped: no process of the server is left", 30)
    # They finished, every token (vLLM's default aborted them: an error, or
    # a cut reply), and the engines had them in flight when told to stop.
    got = [replies.get(timeout=60) for _ in clients]
    tokens = [
        r["usage"]["completion_tokens"] if isinstance(r, dict) else r for r in got
    ]
    assert tokens == [IN_FLIGHT_TOKENS] * IN_FLIGHT, tokens
    drained = DRAINING.findall(Path(running.field("log")).read_text(errors="replace"))
    assert drained and sum(map(int, drained)) > 0, "requests in flight at the stop"
    assert "--shutdown-timeout" in stopping, stopping
    assert session_members(server_pid) == []
    assert session_members(running.proc.pid) == []
    # Nothing left in its temp dir: no scratch dir, and no socket file (the
    # server's engines do not unlink vLLM's ZeroMQ IPC sockets, 6 of which
    # stayed there before the command gave them a directory of its own).
    # Caches other libraries keep there (torch's) are theirs.
    left = [
        p.name
        for p in running.tmpdir.iterdir()
        if p.name.startswith("vab-") or stat.S_ISSOCK(p.lstat().st_mode)
    ]
    assert left == []


@pytest.mark.e2e
@pytest.mark.slow
def test_series_at_startup_without_stats(tmp_path: Path) -> None:
    """With ``--disable-log-stats`` the engines write their series to files
    (no stats carry them): there too, every series of both ranks is on
    ``/metrics`` at zero before any request, then moves. Started through the
    launcher API (:func:`demo.running_server`), which also stops it."""
    with demo.running_server(tmp_path, 2, extra_args=["--disable-log-stats"]) as server:
        assert startup_problems(server.metrics_text(), ENGINES) == []
        reply = server.complete([11, 12, 13, 14], 8)
        assert reply["usage"]["completion_tokens"] == 8
        moved = settled(server.url("/metrics"))
        gathers = {e: moved[("vllm:balance_gathers_total", e)] for e in ENGINES}
        assert gathers["0"] == gathers["1"] > 0, gathers
        pgid = server.proc.pid
        assert session_members(pgid)
    assert session_members(pgid) == []
