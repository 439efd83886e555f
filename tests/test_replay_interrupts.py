# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C (SIGINT) and SIGTERM stop a replay at any point, in real processes.

- While the real engine's engines start, the front-end's main thread waits
  in C (zmq polls) with SIGINT blocked, so the signal lands on another
  thread, and its first wait is inside vLLM's ``zmq_socket_ctx``, which
  swallows a ``KeyboardInterrupt``; the next wait (for the engines' READY)
  lasts up to 10 min. The stand-in here runs the same two waits, the first
  in vLLM's own ``zmq_socket_ctx``, inside
  :meth:`Interrupts.engine_startup`: it must stop within ``LIMIT_S`` of the
  signal, where each wait would otherwise last ``BLOCK_MS`` (far longer, so
  the verdict does not depend on the machine's speed).
- SIGTERM to the simulated-engine replay: like Ctrl-C, the runs that
  finished are reported, the work directory is removed, exit status 1; a
  signal between runs reads as the next run interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import PIPE
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_ascend_balance.replay.pipeline import cli
from vllm_ascend_balance.replay.pipeline.environment import Terminated
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus
from vllm_ascend_balance.replay.pipeline.report import status_lines
from vllm_ascend_balance.replay.real.interrupts import Interrupts

pytestmark = pytest.mark.lane_scope("release")

REPO_ROOT = Path(__file__).resolve().parent.parent
#: How long each stand-in wait lasts if nothing ends it (vLLM's
#: VLLM_ENGINE_READY_TIMEOUT_S default).
BLOCK_MS = 600_000
#: How long a signalled process gets to stop (a hang guard, not a timing).
LIMIT_S = 60.0

STARTUP = f"""
import asyncio, signal, sys, threading
import zmq
from vllm.utils.network_utils import zmq_socket_ctx
from vllm_ascend_balance.replay.real.interrupts import Interrupts, StartupInterrupted

def bystander():
    # A thread that does not block SIGTERM: the kernel may hand a
    # process-directed SIGTERM to it rather than to the main thread.
    if sys.stdin.readline() == "term\\n":
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

async def main(phase):
    interrupts = Interrupts()
    interrupts.install()
    ctx = zmq.Context()
    ready = ctx.socket(zmq.PULL)
    ready.bind("inproc://ready")
    try:
        with interrupts.engine_startup():
            threading.Thread(target=bystander, daemon=True).start()
            # As vLLM's launch_core_engines: the handshake wait ...
            with zmq_socket_ctx("inproc://hs", zmq.ROUTER, bind=True) as handshake:
                print("handshake", flush=True)
                handshake.poll(timeout={BLOCK_MS} if phase == "handshake" else 0)
            # ... then, as MPClient, the wait for the engines' READY.
            print("ready wait", flush=True)
            ready.poll(timeout={BLOCK_MS})
        print("not interrupted", flush=True)
    except StartupInterrupted as exc:
        print("StartupInterrupted", *exc.args, flush=True)
    finally:
        interrupts.uninstall()
        ready.close(linger=0)
        ctx.term()

asyncio.run(main(sys.argv[1]))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def _outcome(proc: subprocess.Popen, state: str) -> tuple[str, str]:
    """``proc``'s (stdout, stderr) once it exits; a failure naming ``state``
    if it is still alive ``LIMIT_S`` after the signal."""
    try:
        return proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{state} {LIMIT_S:g} s after the signal")


def _reap(proc: subprocess.Popen) -> None:
    """Kill ``proc`` if a failed test left it running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _wait_in_poll(pid: int) -> None:
    """Until the main thread of ``pid`` sleeps in poll(2): a signal that
    came before would find it running Python, where the handler runs at
    once whatever the code under test does."""
    deadline = time.monotonic() + LIMIT_S
    while True:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        if "poll" in wchan:
            return
        if wchan == "0":  # a kernel that hides it: give the child time
            time.sleep(2.0)
            return
        assert time.monotonic() < deadline, f"main thread in {wchan!r}, not poll"
        time.sleep(0.01)


def _ctrl_c(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group


def _kill_term(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGTERM)


def _term_on_another_thread(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("term\n")
    proc.stdin.flush()


@pytest.mark.lane_scope("release", "main", "fork", "ascend")  # why: vLLM's
# zmq_socket_ctx, which swallows a KeyboardInterrupt
@pytest.mark.parametrize(
    ("phase", "send", "cause"),
    [
        ("handshake", _ctrl_c, "Ctrl-C"),
        ("handshake", _kill_term, "SIGTERM"),
        ("handshake", _term_on_another_thread, "SIGTERM"),
        ("ready wait", _ctrl_c, "Ctrl-C"),
    ],
    ids=[
        "handshake-sigint-to-group",
        "handshake-sigterm-to-process",
        "handshake-sigterm-on-another-thread",
        "ready-wait-sigint-to-group",
    ],
)
def test_a_signal_during_engine_startup_stops_it(
    phase: str,
    send: Callable[[subprocess.Popen[str]], None],
    cause: str,
) -> None:
    """The first signal while the engines start raises StartupInterrupted
    in the main thread, out of the C-level wait and out of vLLM's
    ``zmq_socket_ctx``. Negative controls (checked by hand): the code before
    (a receiver thread, no wakeup fd, KeyboardInterrupt) still waits after
    ``LIMIT_S`` in every case; KeyboardInterrupt with the relay still waits
    in every handshake case (swallowed; the READY wait follows); the relay
    without its nudge still waits on SIGINT and on SIGTERM taken by another
    thread (on SIGTERM to the process too when the kernel picks another
    thread for it, as it may)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STARTUP, phase],
        stdin=PIPE,
        stdout=PIPE,
        stderr=PIPE,
        text=True,
        env=_env(),
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line == f"{phase}\n":
                break
        else:
            pytest.fail(f"never reached the {phase}: {proc.communicate()[1]}")
        _wait_in_poll(proc.pid)
        send(proc)
        out, err = _outcome(proc, "still waiting")
    finally:
        _reap(proc)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == f"StartupInterrupted {cause}", out + err


def test_startup_without_a_signal_leaves_nothing_behind_and_loses_nothing() -> None:
    """A normal start-up: the relay thread ends, the mask, the nudge's
    handler and the wakeup fd are as before, and a signal that arrived
    meanwhile reached the wakeup fd that was set before (as asyncio's)."""
    import asyncio
    import threading

    got: list[int] = []
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    os.set_blocking(read_fd, False)  # a lost byte fails the test, not hangs it
    usr1 = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    urg = signal.getsignal(signal.SIGURG)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    previous_fd = signal.set_wakeup_fd(write_fd)

    async def scenario() -> None:
        interrupts = Interrupts()
        interrupts.install()
        try:
            with interrupts.engine_startup():
                os.kill(os.getpid(), signal.SIGUSR1)
            assert not interrupts.interrupted
        finally:
            interrupts.uninstall()

    try:
        asyncio.run(scenario())
        assert signal.set_wakeup_fd(previous_fd) == write_fd
        assert got == [signal.SIGUSR1]
        forwarded = b""
        with contextlib.suppress(BlockingIOError):
            forwarded = os.read(read_fd, 64)
        assert forwarded == bytes([signal.SIGUSR1])
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask
        assert signal.getsignal(signal.SIGURG) == urg
        relays = [t for t in threading.enumerate() if t.name == "replay-signal-relay"]
        assert relays == []
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGUSR1, usr1)
        os.close(read_fd)
        os.close(write_fd)


def test_sigterm_to_the_simulated_replay_reports_what_finished(tmp_path: Path) -> None:
    """SIGTERM once the first run finished: exit 1, that run's numbers on
    stdout, the second run reported interrupted by SIGTERM, no work
    directory left in TMPDIR. Negative control: without
    ``sigterm_as_ctrl_c`` the process dies of the signal (-15), prints
    nothing on stdout and leaves ``vab-replay-*`` behind. The second run
    (balance on, DP 32) takes seconds; the signal follows the line at once,
    and lands in it or just before it (both read alike: the next test)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "vllm_ascend_balance", "replay", "--engine", "sim"]
    cmd += ["--dp", "32", "--repeat", "1", "--mode", "off,on"]
    proc = subprocess.Popen(
        cmd,
        stdout=PIPE,
        stderr=PIPE,
        text=True,
        env={**_env(), "TMPDIR": str(tmp)},
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("replay: run 1/2: mode off") and "finished" in line:
                proc.send_signal(signal.SIGTERM)
                break
        else:
            pytest.fail("no first run finished:\n" + "".join(seen[-20:]))
        out, err = _outcome(proc, "still running")
    finally:
        _reap(proc)
    assert proc.returncode == 1, err[-3000:]
    assert "completed requests" in out, err[-3000:]
    assert "on run 1: interrupted by SIGTERM (nothing measured)" in out, out
    assert sorted(p.name for p in tmp.glob("vab-*")) == []


class _Engine:
    """Every run completes at once (no records needed by the loop)."""

    def run(self, workload: Any, mode: Mode, options: Any, repeat: int) -> RunRecords:
        return RunRecords(mode, repeat, options.dp)


@pytest.mark.parametrize("when", ["announcing run 2", "ending run 1"])
def test_a_signal_between_runs_reads_as_the_next_run_interrupted(
    when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM (or Ctrl-C) outside the engine, as the replay announces a
    run's start or end, keeps every finished run and reports the next as
    interrupted by it. Negative control: a loop that lets it out (as before)
    fails here."""
    real = cli.announced

    @contextlib.contextmanager
    def announced(what: str) -> Iterator[dict[str, str]]:
        if when == "announcing run 2" and what.startswith("run 2/"):
            raise Terminated
        with real(what) as state:
            yield state
        if when == "ending run 1" and what.startswith("run 1/"):
            raise Terminated

    monkeypatch.setattr(cli, "announced", announced)
    order = [(Mode("off"), 0), (Mode("on", True), 0), (Mode("off"), 1)]
    options = SimpleNamespace(dp=2)
    try:
        runs = cli._run_in_order(_Engine(), None, options, order)  # type: ignore[arg-type]
    except KeyboardInterrupt:  # not to pytest, which would end the session
        pytest.fail("the signal left the run loop: no report")
    assert runs is not None
    assert [(r.mode.label, r.status, r.cause) for r in runs] == [
        ("off", RunStatus.OK, None),
        ("on", RunStatus.INTERRUPTED, "SIGTERM"),
    ]
    assert status_lines(runs) == ["on run 1: interrupted by SIGTERM (nothing measured)"]
