# SPDX-License-Identifier: Apache-2.0
"""Balance metrics on the ``/metrics`` endpoint of a real ``vllm serve``.

The command users type: vLLM's OpenAI-compatible server
(``python -m vllm.entrypoints.openai.api_server``; the ``vllm`` console
script needs the distribution to be named ``vllm``) with
``--data-parallel-size 2`` on CPU, the tiny MoE model directory, and the
replay's weightless cost-model executor named by
``--distributed-executor-backend``. Everything else is vLLM's own: API
server, DP coordinator, one ``DPEngineCoreProc`` per rank with its gloo DP
group, the plugin activated through its entry point. Requests are
completions over HTTP on 127.0.0.1 with token-id prompts; ``/metrics`` is
parsed with ``prometheus_client``'s parser.

Three servers per lane (startup is the slow part):

- balance on, bounded (``balance_max_frozen_steps`` = 2), ``--max-num-seqs 4``
  and 16 concurrent long requests (both ranks reach the cap and stay there):
  the session's shared server (tests/support/shared_server.py: the demo's
  launcher, the same arguments), so what is checked is the difference this
  test's load made (another test may have loaded it before): per rank,
  gathers equal and > 0, frozen > 0, fail-open steps > 0, the spread gauge
  present, time in the gather > 0; the held-wait histograms
  (:func:`check_held_wait`) on both ranks, one observation per request,
  some held through frozen gathers, never more held seconds than vLLM's
  own queue time; the periodic INFO summary is in the log for both ranks;
- balance off: no balance series (or all zero);
- a bad setting (``balance_max_frozen_steps`` = 0): the server exits non-zero
  before any engine starts, with the one-line cause.

Each server runs in its own session; a finalizer kills the whole process
group (API server, coordinator, engine cores) and checks nothing is left,
also when the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_ascend_balance.loopback_ports import free_loopback_port
from vllm_ascend_balance.replay.model.cost import ReplaySettings
from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model
from vllm_ascend_balance.tools.demo import server as demo

pytestmark = [
    # why: vLLM's OpenAI server, DP coordinator and stat loggers make /metrics
    pytest.mark.lane_scope("release", "main", "fork", "ascend"),
    pytest.mark.e2e,
    pytest.mark.slow,
]

EXECUTOR = "vllm_ascend_balance.replay.real.executor.CostModelExecutor"
MAX_NUM_SEQS = 4
MAX_FROZEN_STEPS = 2
STARTUP_LIMIT_S = 420  # hang guard only; nothing asserts on durations
COUNTERS = (
    "vllm:balance_gathers",
    "vllm:balance_frozen_gathers",
    "vllm:balance_fail_open_steps",
    "vllm:balance_gather_seconds",
)
SPREAD = "vllm:balance_running_spread"
WAIT = "vllm:balance_gather_wait_seconds"  # the stall watchdog's gauge
GAUGES = (SPREAD, WAIT)
HELD_S = "vllm:balance_held_wait_seconds"  # histograms: one value per admission
HELD_STEPS = "vllm:balance_held_wait_steps"
HISTOGRAMS = (HELD_S, HELD_STEPS)
QUEUE_TIME = "vllm:request_queue_time_seconds"  # vLLM's own: the whole wait


def free_port() -> int:
    return free_loopback_port()


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    model: str

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def serve_args(
    tmp: Path, scheduler_config: dict[str, Any], max_num_seqs: int
) -> tuple[str, list[str]]:
    """(model directory, the ``vllm serve`` arguments every balance
    deployment of the suite shares: DP 2 on 127.0.0.1, the cost-model
    executor, the given balance ``scheduler_config``)."""
    model = str(write_tiny_moe_model(tmp / "model", 1024))
    settings = ReplaySettings(
        run_dir=str(tmp / "run"),
        lockstep_port=free_port(),
        time_scale=0.2,
        kv_cache_tokens=64 * 1024,
    )
    additional = {
        "scheduler_config": scheduler_config,
        "vllm_ascend_balance_replay": settings.to_dict(),
    }
    args = [
        "--skip-tokenizer-init",
        "--data-parallel-size", "2",
        "--data-parallel-address", "127.0.0.1",
        "--distributed-executor-backend", EXECUTOR,
        "--max-num-seqs", str(max_num_seqs),
        "--max-model-len", "1024",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--dtype", "float32",
        "--additional-config", json.dumps(additional),
    ]  # fmt: skip
    return model, args


def start_server(tmp: Path, scheduler_config: dict[str, Any]) -> Server:
    model, args = serve_args(tmp, scheduler_config, MAX_NUM_SEQS)
    port = free_port()
    log = tmp / "server.log"
    # INFO explicitly: the summary is an INFO line, whatever the caller's env.
    env = dict(
        os.environ,
        VLLM_LOG_STATS_INTERVAL="1",
        VLLM_LOGGING_LEVEL="INFO",
        HF_HUB_OFFLINE="1",
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model, *args,
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp,
            start_new_session=True,  # one process group: server + engines
        )
    return Server(proc, port, log, model)


def stop_server(server: Server) -> None:
    """Kill the server's whole process group; fail if anything survives."""
    pgid = server.proc.pid  # session leader: pgid == pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            server.proc.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
    server.proc.wait(timeout=30)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # no process of the group is left


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def start(scheduler_config: dict[str, Any]) -> Server:
        directory = tmp_path / f"server{len(servers)}"
        directory.mkdir()
        server = start_server(directory, scheduler_config)
        servers.append(server)
        return server

    yield start
    for server in servers:
        stop_server(server)


def wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"server exited {server.proc.returncode}:\n{server.log_text()}")
        try:
            with urllib.request.urlopen(server.url("/health"), timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    pytest.fail(f"server not healthy in {STARTUP_LIMIT_S} s:\n{server.log_text()}")


def complete(server: Server, index: int, max_tokens: int) -> int:
    body = {
        "model": server.model,
        "prompt": [10 + (index * 7 + i) % 900 for i in range(8 + index % 5)],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    request = urllib.request.Request(
        server.url("/v1/completions"),
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as resp:
        reply = json.loads(resp.read())
    return int(reply["usage"]["completion_tokens"])


def scrape(server: Server) -> dict[str, dict[str, float]]:
    """``{sample name: {engine label: value}}`` of the balance series (a
    histogram bucket as ``name{le="bound"}``), and the ``_sum`` of vLLM's
    queue time (:data:`QUEUE_TIME`)."""
    with urllib.request.urlopen(server.url("/metrics"), timeout=30) as resp:
        text = resp.read().decode()
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name == QUEUE_TIME:
            for sample in family.samples:
                if sample.name.endswith("_sum") and "engine" in sample.labels:
                    engine = sample.labels["engine"]
                    found.setdefault(sample.name, {})[engine] = sample.value
            continue
        if not family.name.startswith("vllm:balance_"):
            continue
        if family.name.endswith("_created"):
            # prometheus_client's text format: a counter's creation time,
            # as a gauge family of its own (vLLM's counters have them too).
            continue
        kind = "histogram" if family.name in HISTOGRAMS else "counter"
        assert family.type == ("gauge" if family.name in GAUGES else kind)
        assert family.documentation, f"{family.name} has no help text"
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            name = sample.name
            if family.type == "histogram" and "le" in labels:
                name = f'{name}{{le="{labels.pop("le")}"}}'
            assert set(labels) == {"model_name", "engine"}, sample
            found.setdefault(name, {})[labels["engine"]] = sample.value
    return found


def settled_scrape(server: Server) -> dict[str, dict[str, float]]:
    """Scrape until two scrapes agree (the engines finish their last steps
    after the last response)."""
    previous = scrape(server)
    for _ in range(60):
        time.sleep(0.5)
        current = scrape(server)
        if current == previous:
            return current
        previous = current
    return previous


def test_balance_series_on_vllm_serve(
    serve: Any, request: pytest.FixtureRequest
) -> None:
    # Its own balance-off server first, so that it starts while the shared
    # bounded one does (when this test is the first to ask for it).
    off = serve({"enable_balance_scheduling": False})
    shared = request.getfixturevalue("bounded_balance_server")
    bounded = Server(shared.proc, shared.port, shared.log, demo.SERVED_MODEL_NAME)
    # The shared server may have served another test's load: what this
    # test's load did is the difference from here.
    before = settled_scrape(bounded)
    with ThreadPoolExecutor(16) as pool:
        tokens = list(pool.map(lambda i: complete(bounded, i, 96), range(16)))
    assert tokens == [96] * 16
    series = settled_scrape(bounded)
    moved = difference(series, before)
    gathers = series["vllm:balance_gathers_total"]
    assert set(gathers) == {"0", "1"}, series
    assert gathers["0"] == gathers["1"] > 0, "gathers differ between DP ranks"
    assert moved["vllm:balance_gathers_total"]["0"] > 0, "no gather for this load"
    frozen = series["vllm:balance_frozen_gathers_total"]
    fail_opens = series["vllm:balance_fail_open_steps_total"]
    for rank in ("0", "1"):
        assert moved["vllm:balance_frozen_gathers_total"][rank] > 0, (
            "the load reached the cap but nothing froze"
        )
        assert moved["vllm:balance_fail_open_steps_total"][rank] > 0, (
            "bounded freeze never opened the gate"
        )
        assert moved["vllm:balance_gather_seconds_total"][rank] > 0
        assert series[SPREAD][rank] >= 0
        # Every rank decides from the same vectors: the same counts.
        assert frozen[rank] == frozen["0"] and fail_opens[rank] == fail_opens["0"]
    check_held_wait(moved, len(tokens))
    log = shared.log_text()
    for rank in (0, 1):
        assert f"balance scheduling, DP rank {rank}:" in log, "no INFO summary"
    assert "% frozen" in log and "fail-open steps, gather p50" in log

    wait_healthy(off)
    assert complete(off, 0, 8) == 8
    off_series = {
        name: values
        for name, values in scrape(off).items()
        if name.startswith("vllm:balance_")
    }
    assert all(v == 0 for s in off_series.values() for v in s.values()), off_series


def difference(
    after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """``after - before`` per sample and engine (a sample absent before
    counts from 0): what happened between two scrapes of the counters and
    histograms (for a gauge the number means nothing)."""
    return {
        name: {
            engine: value - before.get(name, {}).get(engine, 0.0)
            for engine, value in values.items()
        }
        for name, values in after.items()
    }


def check_held_wait(series: dict[str, dict[str, float]], requests: int) -> None:
    """Held wait on the bounded server, per engine: both histograms on both
    ranks with one observation per admission (the KV cache is large enough
    that nothing is preempted, so one per request); some requests held
    through frozen gathers (both ranks sit at the cap while half the
    requests wait); held seconds never more than vLLM's own queue time of
    the same requests, where vLLM reports it per engine."""
    counts = series[f"{HELD_S}_count"]
    assert set(counts) == {"0", "1"}, series
    assert all(counts[rank] > 0 for rank in counts), counts
    assert sum(counts.values()) == requests, "not one observation per request"
    assert series[f"{HELD_STEPS}_count"] == counts
    never_held = series[f'{HELD_STEPS}_bucket{{le="0.0"}}']
    assert sum(counts[r] - never_held[r] for r in counts) > 0, "nothing held"
    assert sum(series[f"{HELD_S}_sum"].values()) > 0, "no held seconds"
    assert sum(series[f"{HELD_STEPS}_sum"].values()) > 0
    queue = series.get(f"{QUEUE_TIME}_sum", {})
    for rank in counts:
        if rank in queue:
            assert series[f"{HELD_S}_sum"][rank] <= queue[rank], (
                "held wait exceeds the whole queue time"
            )


def test_bad_setting_exits_before_engines_start(tmp_path: Path) -> None:
    server = start_server(
        tmp_path, {"enable_balance_scheduling": True, "balance_max_frozen_steps": 0}
    )
    try:
        code = server.proc.wait(timeout=STARTUP_LIMIT_S)
    finally:
        if server.proc.poll() is None:
            stop_server(server)
    log = server.log_text()
    assert code != 0
    assert "EngineCore" not in log, "an engine started"
    errors = [
        line
        for line in log.splitlines()
        if "balance_max_frozen_steps" in line and "ERROR" in line
    ]
    assert len(errors) == 1, log
    assert "must be a positive JSON integer" in errors[0]
    assert "Traceback" not in log, "stack trace instead of a one-line error"
