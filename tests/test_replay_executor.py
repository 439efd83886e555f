# SPDX-License-Identifier: Apache-2.0
"""The cost-model executor against a real vLLM scheduler, in one process
(DP size 1: no lock-step group), the cost model itself, and the replay
front-end's signal handling, failure reporting and log routing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path
from subprocess import PIPE

import pytest
from vllm.v1.worker.worker_base import CompilationTimes

from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.replay.model.cost import (
    REPLAY_CONFIG_KEY,
    ReplaySettings,
)
from vllm_ascend_balance.replay.pipeline.cost import CostModel
from vllm_ascend_balance.replay.pipeline.environment import (
    vllm_logs_to_stderr,
    work_dir,
)
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus
from vllm_ascend_balance.replay.pipeline.report import status_lines
from vllm_ascend_balance.replay.real.deployment import one_line
from vllm_ascend_balance.replay.real.executor import SAMPLED_TOKEN_ID, CostModelExecutor
from vllm_ascend_balance.replay.real.interrupts import Interrupts, StartupInterrupted
from vllm_ascend_balance.replay.real.recorder import rank_file, read_rank_file

# why: vLLM's scheduler, executor interface and logging
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

BUDGET = 64


@pytest.fixture
def setup(tmp_path: Path):
    settings = ReplaySettings(run_dir=str(tmp_path), lockstep_port=0, time_scale=1e-6)
    config = make_vllm_config(
        max_num_seqs=4,
        max_num_batched_tokens=BUDGET,
        additional_config={REPLAY_CONFIG_KEY: settings.to_dict()},
    )
    executor = CostModelExecutor(config)
    scheduler = make_scheduler(
        config.scheduler_config.get_scheduler_cls(), vllm_config=config
    )
    yield executor, scheduler, tmp_path
    executor.shutdown()


def _step(executor, scheduler):
    so = scheduler.schedule()
    assert executor.execute_model(so) is None  # two-phase: sample next
    out = executor.sample_tokens(None)
    scheduler.update_from_output(so, out)
    return so, out


def test_samples_nothing_while_prefill_is_in_progress(setup):
    executor, scheduler, run_dir = setup
    assert executor.scheduler is scheduler  # the recording scheduler attached
    scheduler.add_request(make_request("long", prompt_len=150, max_tokens=3))
    scheduler.add_request(make_request("short", prompt_len=10, max_tokens=2))
    sampled: dict[str, list[list[int]]] = {"long": [], "short": []}
    for _ in range(20):
        if not scheduler.has_requests():
            break
        so, out = _step(executor, scheduler)
        for rid, tokens in zip(out.req_ids, out.sampled_token_ids, strict=True):
            sampled[rid].append(tokens)
    assert not scheduler.has_requests()
    # 150 prompt tokens in chunks of 64, 64, 22: the two chunks before the
    # last sample nothing.
    long_tokens = sampled["long"]
    first = next(i for i, t in enumerate(long_tokens) if t)
    assert first == 2 and all(t == [] for t in long_tokens[:first])
    assert [t for t in long_tokens if t] == [[SAMPLED_TOKEN_ID]] * 3
    assert [t for t in sampled["short"] if t] == [[SAMPLED_TOKEN_ID]] * 2
    records = read_rank_file(rank_file(run_dir, 0))
    steps = records.steps
    cost = CostModel()
    assert steps[0].prefill_tokens == BUDGET and steps[0].new_requests == 1
    assert steps[0].cost_ms == pytest.approx(cost.rank_cost_ms(BUDGET, 0, 0), abs=1e-3)
    decode = [s for s in steps if s.decode_requests and not s.prefill_tokens]
    assert decode and decode[0].cost_ms > cost.step_ms
    for s in steps:  # one rank: the step costs its own cost
        assert s.step_ms == pytest.approx(s.cost_ms, abs=2e-3)
    # Per-request records: admitted, first token and finish steps.
    by_id = {r.request_id: r for r in records.requests}
    assert by_id["long"].admitted_step == 0
    assert by_id["long"].first_token_step == 2
    assert by_id["long"].finish_step == 4 and by_id["long"].output_tokens == 3
    assert by_id["short"].output_tokens == 2
    (start,) = records.starts
    assert start.scheduler == "RecordingScheduler"
    assert start.scheduler_module == "vllm_ascend_balance.replay.real.recorder"


def test_empty_schedule_is_not_a_forward_pass(setup):
    executor, scheduler, run_dir = setup
    so = scheduler.schedule()
    assert so.total_num_scheduled_tokens == 0
    executor.execute_model(so)
    assert executor.sample_tokens(None).req_ids == []
    executor.execute_dummy_batch()  # the engine's dummy batch is one
    steps = read_rank_file(rank_file(run_dir, 0)).steps
    assert [s.dummy for s in steps] == [True]
    assert steps[0].cost_ms == CostModel().step_ms


def test_forward_pass_without_attached_scheduler_fails_loudly(setup):
    """If vLLM ever built the scheduler before the executor, the recording
    hook would not attach: the first forward pass must fail, not record 0."""
    executor, _, _ = setup
    executor.scheduler = None
    with pytest.raises(RuntimeError, match="recording hook did not attach"):
        executor.execute_dummy_batch()


def test_rpc_surface(setup):
    executor, _, _ = setup
    (specs,) = executor.collective_rpc("get_kv_cache_spec")
    assert list(specs) == ["model.layers.0.self_attn.attn"]
    (memory,) = executor.collective_rpc("determine_available_memory")
    assert memory > 0
    assert executor.collective_rpc("compile_or_warm_up_model") == [
        CompilationTimes(0.0, 0.0)
    ]
    assert executor.collective_rpc("reset_mm_cache") == [None]  # unknown: harmless
    future = executor.collective_rpc("get_supported_tasks", non_block=True)
    assert isinstance(future, Future) and future.result() == [("generate",)]
    assert executor.supported_tasks == ("generate",)


def test_shutdown_records_unfinished_requests_once(setup):
    executor, scheduler, run_dir = setup
    scheduler.add_request(make_request("cut", prompt_len=150, max_tokens=3))
    _step(executor, scheduler)  # first chunk only
    executor.shutdown()
    executor.shutdown()  # idempotent
    (cut,) = read_rank_file(rank_file(run_dir, 0)).requests
    assert cut.request_id == "cut" and cut.finish_step is None
    assert cut.first_token_step is None and cut.output_tokens == 0


def test_cost_model_rejects_negative_coefficients():
    with pytest.raises(ValueError, match="--decode-req-ms must be >= 0"):
        CostModel(decode_req_ms=-1)
    assert CostModel().rank_cost_ms(0, 64, 128_000) == pytest.approx(25 + 32 + 19.2)


def test_settings_round_trip_through_additional_config():
    settings = ReplaySettings(run_dir="/x", lockstep_port=5, cost=CostModel(step_ms=3))
    assert (
        ReplaySettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    )
    with pytest.raises(ValueError, match="vllm_ascend_balance_replay"):
        ReplaySettings.from_vllm_config(make_vllm_config())


# ------------------------------------------------------------ front-end
def _sigblk(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("SigBlk:")[1].split()[0], 16)


def test_ctrl_c_during_engine_startup_is_an_interrupt_and_spares_children():
    """A Ctrl-C while the engines start raises StartupInterrupted in the
    front-end (run_mode reports "interrupted"); processes spawned meanwhile
    have SIGINT blocked, so the terminal's Ctrl-C does not kill them with a
    traceback; afterwards the mask and the handlers are as before."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    async def scenario() -> tuple[bool, int]:
        interrupts = Interrupts()
        interrupts.install()
        child = None
        raised = False
        try:
            with interrupts.engine_startup():
                child = subprocess.Popen([sys.executable, "-c", "input()"], stdin=PIPE)
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(60_000):  # until the handler runs (a busy
                    time.sleep(0.001)  # host may take a while to deliver)
        except StartupInterrupted:
            raised = True
        finally:
            interrupts.uninstall()
        assert child is not None
        child_mask = _sigblk(child.pid)
        child.kill()
        child.wait()
        assert interrupts.interrupted
        return raised, child_mask

    raised, child_mask = asyncio.run(scenario())
    assert raised
    assert child_mask & (1 << (signal.SIGINT - 1))
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_ctrl_c_while_running_cancels_the_main_task():
    async def scenario() -> Interrupts:
        interrupts = Interrupts()
        interrupts.install()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            with pytest.raises(asyncio.CancelledError):
                await asyncio.Event().wait()  # cancelled by the handler
        finally:
            interrupts.uninstall()
        return interrupts

    assert asyncio.run(scenario()).interrupted


def test_a_run_that_measured_nothing_says_so_with_its_whole_cause():
    cause = "BalanceConfigError: " + "balance scheduling needs the seam; " * 12
    failed = RunRecords(Mode("on", True), 0, 2, RunStatus.FAILED, cause.strip())
    interrupted = RunRecords(Mode("off"), 1, 2, RunStatus.INTERRUPTED)
    ok = RunRecords(Mode("off"), 0, 2)
    assert status_lines([ok, failed, interrupted]) == [
        f"on run 1: failed: {cause.strip()} (nothing measured)",
        "off run 2: interrupted (nothing measured)",
    ]


def test_failure_cause_is_one_whole_line():
    long = RuntimeError("install a vLLM branch that carries the seam\n" * 20)
    text = one_line(long)
    assert "\n" not in text and text.endswith("carries the seam")
    assert text.startswith("RuntimeError: install")


def test_vllm_logs_go_to_stderr_for_the_run(monkeypatch):
    monkeypatch.delenv("VLLM_LOGGING_STREAM", raising=False)
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    handler = logging.StreamHandler(sys.stdout)
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(handler)
    try:
        with vllm_logs_to_stderr():
            assert handler.stream is sys.stderr
            assert os.environ["VLLM_LOGGING_STREAM"] == "ext://sys.stderr"
        assert handler.stream is sys.stdout
        assert "VLLM_LOGGING_STREAM" not in os.environ
        monkeypatch.setenv("VLLM_LOGGING_STREAM", "ext://sys.stdout")  # user's
        with vllm_logs_to_stderr():
            assert handler.stream is sys.stdout
    finally:
        vllm_logger.removeHandler(handler)


def test_temporary_work_dir_is_removed_on_error():
    with pytest.raises(KeyboardInterrupt), work_dir(None) as work:
        (Path(work) / "x").write_text("x")
        raise KeyboardInterrupt
    assert not Path(work).exists()
