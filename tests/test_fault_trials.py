# SPDX-License-Identifier: Apache-2.0
"""Fault trials on a real ``vllm serve`` DP 2: a rank slowed, stopped and
resumed, then killed, under load, with balance on and with balance off.

The server is the demo's (:func:`vllm_ascend_balance.tools.demo.server.running_server`:
vLLM's OpenAI API server, DP 2 on CPU, the tiny MoE model, the cost-model
executor (paced at :data:`TIME_SCALE`) whose forward passes begin with a
lock-step collective across the ranks, as MoE dispatch does), balance on
with ``balance_stall_warning_s`` = :data:`STALL_S`, or off. The faults hit
the engine core process of DP rank 1 (``VLLM::EngineCore_DP1``, found among
the server's children), one phase after the other on one server (a server
start costs more than the three phases together). Each phase sends its own
batch of concurrent completions and waits for every one to end
(:data:`REQUEST_LIMIT_S` per request, a hang guard: a request still open
then is a ``hang`` and fails the test):

1. slowed: rank 1 runs :data:`SLOW_RUN_S` of every few seconds (SIGSTOP /
   SIGCONT); every request completes with all its tokens; stall warnings
   only with balance on;
2. stopped, then resumed: SIGSTOP for :data:`STOP_S`, then SIGCONT. While
   rank 1 is stopped no token is generated anywhere (``vllm:generation_
   tokens_total`` does not move). Where rank 0 waits depends on where the
   stop caught rank 1: in the balance gather (then the gauge and the
   warning report it) or in the forward pass's collective (then they
   cannot: the same blind spot as a real MoE model's dispatch). With
   balance on the stop is repeated, up to :data:`STOP_ATTEMPTS` times, until
   one is seen in the gather (a stop not seen once it settled is ended at
   once, the next comes at a random phase of the step): engine 0's
   ``vllm:balance_gather_wait_seconds`` reaches the threshold on
   ``/metrics``, the warnings logged while rank 1 is stopped name DP rank 0
   only, the "stalled gather completed" line follows the resume; the gauge
   drops back (after the resume rank 1's own watchdog may count the time it
   was stopped as a wait: allowed, and documented); every request completes
   with all its tokens;
3. killed: SIGKILL mid-load. vLLM cannot recover a dead DP rank: every
   request of the batch, and one sent after, ends at the client with its
   tokens or an error (HTTP status or closed connection), none hangs, the
   API server exits within :data:`EXIT_LIMIT_S`.

Balance off is the control: no balance series and no stall warning in
phases 1 and 2 (the warning is this package's), and the client sees the
same outcome classes in every phase as with balance on (:func:`classes`).
Negative control of the client's classes: a server that never answers is
a ``hang``, one that drops the connection a ``connection error``.

Timeouts are hang guards only; nothing asserts on durations.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_ascend_balance.tools.demo import server as demo

pytestmark = [pytest.mark.lane_scope("release"), pytest.mark.e2e, pytest.mark.slow]

STALL_S = 2.0  # balance_stall_warning_s of the balance-on server
BATCH = 8  # concurrent requests per phase (cap 4 per rank: both ranks busy)
TOKENS = 500
#: Wall seconds per modeled second of the trials' servers (the demo's is
#: 0.2): a decode step's paced budget (27 ms modeled) then outlasts the
#: engine loop's own overhead even on a loaded machine, so most of rank 1's
#: step is spent where a stop leaves rank 0 waiting in the balance gather
#: (after the forward pass's collective, before the next gather); at 0.2 the
#: overhead ate the budget and a loaded CI run saw five stops in a row land
#: before the forward collective. Steps are never shorter than the budget:
#: a batch runs at least TOKENS * 27 ms = 13.5 s, longer than the stop
#: attempts' runs between them.
TIME_SCALE = 1.0
IN_FLIGHT_S = 1.5  # the fault hits this long after a batch is sent
REQUEST_LIMIT_S = 180  # hang guard per request: the stated bound
EXIT_LIMIT_S = 120  # hang guard: the API server exits after a rank is killed
SLOW_CYCLES = 3
SLOW_STOP_S, SLOW_RUN_S = 3.0, 0.5
STOP_S = 4 * STALL_S
#: Stops tried (balance on) until one leaves rank 0 in the gather; one that
#: does not is ended after SETTLE_S (the gauge is still 0 then), so a miss
#: costs about 1.5 s.
STOP_ATTEMPTS = 10
SETTLE_S = 1.0  # outputs of steps done before a stop still reach the front-end
WARNING = re.compile(r"DP rank (\d+) has waited ([0-9.]+) s in the balance gather")
COMPLETED = "the stalled gather completed"
WAIT = "vllm:balance_gather_wait_seconds"
TOKENS_SERIES = "vllm:generation_tokens"


def request(server: demo.DemoServer, index: int) -> str:
    """One completion; its outcome class: ``ok`` (all tokens), ``short``,
    ``http <status>``, ``connection error``, or ``hang`` (open past
    :data:`REQUEST_LIMIT_S`)."""
    prompt = [10 + (index * 7 + i) % 900 for i in range(8 + index % 5)]
    try:
        reply = demo.complete(server.base_url, prompt, TOKENS, REQUEST_LIMIT_S)
    except urllib.error.HTTPError as error:
        return f"http {error.code}"
    except TimeoutError:
        return "hang"
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError):
            return "hang"
        return "connection error"
    except (ConnectionError, http.client.HTTPException):
        return "connection error"
    tokens = int(reply["usage"]["completion_tokens"])
    return "ok" if tokens == TOKENS else "short"


def rank_process(server: demo.DemoServer, rank: int) -> psutil.Process:
    name = f"EngineCore_DP{rank}"
    found = [
        p
        for p in psutil.Process(server.proc.pid).children(recursive=True)
        if name in p.name() or name in " ".join(p.cmdline())
    ]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def batch(
    pool: ThreadPoolExecutor, server: demo.DemoServer, phase: int
) -> list[Future[str]]:
    return [pool.submit(request, server, phase * 100 + i) for i in range(BATCH)]


def warnings_since(server: demo.DemoServer, offset: int) -> list[int]:
    """DP ranks named by the stall warnings logged after ``offset``."""
    return [int(rank) for rank, _ in WARNING.findall(server.log_text()[offset:])]


def sample(server: demo.DemoServer) -> tuple[float, float]:
    """(engine 0's wait gauge, 0 when absent; generated tokens, all engines)."""
    wait = tokens = 0.0
    for family in text_string_to_metric_families(server.metrics_text()):
        for s in family.samples:
            if s.name == WAIT and s.labels.get("engine") == "0":
                wait = s.value
            elif s.name == f"{TOKENS_SERIES}_total":
                tokens += s.value
    return wait, tokens


def stop_once(
    server: demo.DemoServer, victim: psutil.Process, give_up_unseen: bool = False
) -> tuple[float, int]:
    """SIGSTOP ``victim`` for :data:`STOP_S`, then SIGCONT; (the largest wait
    gauge of engine 0 seen meanwhile, the log's length at the resume). Fails
    if a token was generated after the stop settled (a stopped rank must
    hold every rank). ``give_up_unseen``: resume at once when the gauge is
    still 0 once the stop settled (rank 0 waits in the forward pass's
    collective, where nothing of this package can see it: a miss)."""
    victim.send_signal(signal.SIGSTOP)
    try:
        time.sleep(SETTLE_S)
        wait, tokens = sample(server)
        if give_up_unseen and wait == 0.0:
            return 0.0, len(server.log_text())
        waits = []
        deadline = time.monotonic() + STOP_S - SETTLE_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
            wait, now = sample(server)
            waits.append(wait)
        resumed_at = len(server.log_text())
        assert now == tokens, "tokens generated while a DP rank was stopped"
    finally:
        victim.send_signal(signal.SIGCONT)
    return max(waits), resumed_at


def trials(server: demo.DemoServer, on: bool) -> dict[str, list[str]]:
    """The three phases on ``server`` (balance ``on`` or off); per phase the
    outcome classes of its requests (``stop attempts``: how many stops the
    second phase took)."""
    victim = rank_process(server, 1)
    results: dict[str, list[str]] = {}
    with ThreadPoolExecutor(BATCH + 1) as pool:
        # 1. Slowed.
        offset = len(server.log_text())
        futures = batch(pool, server, 1)
        time.sleep(IN_FLIGHT_S)
        for _ in range(SLOW_CYCLES):
            victim.send_signal(signal.SIGSTOP)
            time.sleep(SLOW_STOP_S)
            victim.send_signal(signal.SIGCONT)
            time.sleep(SLOW_RUN_S)
        results["slowed"] = [f.result() for f in futures]
        assert results["slowed"] == ["ok"] * BATCH
        # Whether a stop found rank 0 in the gather is the race phase 2
        # repeats until seen; rank 1 may report its own stops (phase 2).
        warned = warnings_since(server, offset)
        assert set(warned) <= ({0, 1} if on else set()), warned
        results["slow warnings"] = [str(len(warned))]

        # 2. Stopped, then resumed (again, until seen in the gather).
        futures = batch(pool, server, 2)
        time.sleep(IN_FLIGHT_S)
        waits: list[float] = []
        while not waits or (on and waits[-1] < STALL_S and len(waits) < STOP_ATTEMPTS):
            if waits:
                # A random phase against the step, so a miss is not repeated
                # in lock step with it; the batch must still be running.
                before = sample(server)[1]
                time.sleep(SLOW_RUN_S + random.uniform(0.0, 0.1))
                assert sample(server)[1] > before, f"batch ended before a stop: {waits}"
            offset = len(server.log_text())
            wait, resumed_at = stop_once(server, victim, give_up_unseen=on)
            waits.append(wait)
        results["stopped"] = [f.result() for f in futures]
        results["stop attempts"] = [str(len(waits))]
        assert results["stopped"] == ["ok"] * BATCH
        log = server.log_text()
        # While rank 1 was stopped only rank 0 can have warned; after the
        # resume rank 1's own watchdog may report the time it was stopped
        # itself (docs/operating.md, faults).
        during = [int(r) for r, _ in WARNING.findall(log[offset:resumed_at])]
        after = warnings_since(server, resumed_at)
        if on:
            assert waits[-1] >= STALL_S, f"never seen in the gather: {waits}"
            assert during and set(during) == {0}, during
            assert set(after) <= {0, 1}, after
            assert COMPLETED in log[offset:]
            assert sample(server)[0] < STALL_S, "the gauge stayed up after resume"
        else:
            assert waits == [0.0] and during == after == [], (waits, during, after)

        # 3. Killed.
        futures = batch(pool, server, 3)
        time.sleep(IN_FLIGHT_S)
        victim.send_signal(signal.SIGKILL)
        results["killed"] = sorted(f.result() for f in futures)
        results["after kill"] = [request(server, 399)]
    assert "hang" not in results["killed"] + results["after kill"], results
    assert results["after kill"] != ["ok"], "a dead DP rank, and the server serves?"
    server.proc.wait(timeout=EXIT_LIMIT_S)
    return results


#: After a rank is killed, which error a request meets depends on how far
#: the API server's own shutdown got (an HTTP 500 while it is closing, a
#: refused connection once it has exited): a race with the clock, not a
#: balance effect. Both are an ``error``; ``ok`` and ``hang`` stay apart.
KILL_PHASES = ("killed", "after kill")


def classes(results: dict[str, list[str]]) -> dict[str, set[str]]:
    """Per phase, the outcome classes the client saw (after the kill, any
    HTTP 5xx or closed connection is one class, ``error``)."""

    def kind(phase: str, outcome: str) -> str:
        failed = outcome == "connection error" or outcome.startswith("http 5")
        return "error" if phase in KILL_PHASES and failed else outcome

    return {
        phase: {kind(phase, o) for o in outcomes}
        for phase, outcomes in results.items()
        if phase not in ("stop attempts", "slow warnings")
    }


def test_classes_after_a_kill_do_not_depend_on_the_shutdown_race() -> None:
    """A 500 on one server and a refused connection on the other, after the
    kill, are the same class (a fresh-clone CI run saw exactly that); a
    request served, or a hang, still differs from an error (negative
    control: the comparison can fail)."""
    on = {"killed": ["http 500"], "after kill": ["connection error"]}
    off = {"killed": ["http 500"], "after kill": ["http 500"]}
    assert classes(on) == classes(off)
    for wrong in ("ok", "hang"):
        assert classes({**on, "after kill": [wrong]}) != classes(off)
    assert classes({"slowed": ["http 500"]}) != classes({"slowed": ["ok"]})


@pytest.mark.timeout(1500)  # two servers in one test; a hang guard
def test_faults_balance_on_as_off(tmp_path: Path) -> None:
    on_config = {"enable_balance_scheduling": True, "balance_stall_warning_s": STALL_S}
    paced = {demo.REPLAY_KEY: {"time_scale": TIME_SCALE}}
    extra = ["--additional-config", json.dumps(paced)]
    with demo.running_server(
        tmp_path / "on", scheduler_config=on_config, extra_args=extra
    ) as on:
        on_results = trials(on, True)
    off_config = {"enable_balance_scheduling": False}
    with demo.running_server(
        tmp_path / "off", scheduler_config=off_config, extra_args=extra
    ) as off:
        off_results = trials(off, False)
    print(f"balance on: {on_results}\nbalance off: {off_results}")
    assert classes(on_results) == classes(off_results)


def test_negative_control_a_hang_and_a_drop_are_classed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client's classes are not all ``ok``: a server that accepts and
    never answers is a ``hang`` (past the bound, here 1 s), one that closes
    the connection is a ``connection error``."""
    monkeypatch.setitem(globals(), "REQUEST_LIMIT_S", 1)
    for close, expected in ((False, "hang"), (True, "connection error")):
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            port = listener.getsockname()[1]

            def serve_once(
                close: bool = close, listener: socket.socket = listener
            ) -> None:
                conn, _ = listener.accept()
                conn.recv(65536)
                if close:
                    conn.close()
                else:
                    time.sleep(3)
                    conn.close()

            thread = threading.Thread(target=serve_once, daemon=True)
            thread.start()
            server = SimpleNamespace(base_url=f"http://127.0.0.1:{port}")
            assert request(server, 0) == expected  # type: ignore[arg-type]
            thread.join(timeout=10)
