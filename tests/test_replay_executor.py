# SPDX-License-Identifier: Apache-2.0
"""The cost-model executor against a real vLLM scheduler, in one process
(DP size 1: no lock-step group), and the cost model itself."""

from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path

import pytest
from vllm.v1.worker.worker_base import CompilationTimes

from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.replay.costmodel import (
    REPLAY_CONFIG_KEY,
    CostModel,
    ReplaySettings,
)
from vllm_ascend_balance.replay.executor import SAMPLED_TOKEN_ID, CostModelExecutor
from vllm_ascend_balance.replay.recorder import rank_file, read_records

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
    steps = [r for r in read_records(run_dir, 1)[0] if r["k"] == "step"]
    cost = CostModel()
    assert steps[0]["pf"] == BUDGET and steps[0]["new"] == 1
    assert steps[0]["cost_ms"] == pytest.approx(
        cost.rank_cost_ms(BUDGET, 0, 0), abs=1e-3
    )
    decode = [s for s in steps if s["dec"] and not s["pf"]]
    assert decode and decode[0]["cost_ms"] > cost.step_ms
    for s in steps:  # one rank: the step costs its own cost
        assert s["step_ms"] == pytest.approx(s["cost_ms"], abs=2e-3)


def test_empty_schedule_is_not_a_forward_pass(setup):
    executor, scheduler, run_dir = setup
    so = scheduler.schedule()
    assert so.total_num_scheduled_tokens == 0
    executor.execute_model(so)
    assert executor.sample_tokens(None).req_ids == []
    executor.execute_dummy_batch()  # the engine's dummy batch is one
    steps = [r for r in read_records(run_dir, 1)[0] if r["k"] == "step"]
    assert [s["dummy"] for s in steps] == [True]
    assert steps[0]["cost_ms"] == CostModel().step_ms


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


def test_shutdown_writes_final_record(setup):
    executor, _, run_dir = setup
    executor.shutdown()
    executor.shutdown()  # idempotent
    lines = rank_file(run_dir, 0).read_text().splitlines()
    finals = [json.loads(x) for x in lines if '"final"' in x]
    assert len(finals) == 1 and finals[0]["gathers"] == 0


def test_cost_model_rejects_negative_coefficients():
    with pytest.raises(ValueError, match="decode_req_ms must be >= 0"):
        CostModel(decode_req_ms=-1)
    assert CostModel().rank_cost_ms(0, 64, 128_000) == pytest.approx(25 + 32 + 19.2)


def test_settings_round_trip_through_additional_config():
    settings = ReplaySettings(run_dir="/x", lockstep_port=5, cost=CostModel(step_ms=3))
    assert (
        ReplaySettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    )
    with pytest.raises(ValueError, match="balance_replay"):
        ReplaySettings.from_vllm_config(make_vllm_config())
