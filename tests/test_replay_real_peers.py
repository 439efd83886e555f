# SPDX-License-Identifier: Apache-2.0
"""A peer policy end to end on a real ``AsyncLLM`` DP 2 deployment: the
replay's executor composes the peer's scheduler and hooks vLLM's
``DPEngineCoreProc`` in each engine process
(:mod:`vllm_ascend_balance.replay.real.peer_gate`), behind vLLM's router.

TensorRT-LLM's attention-DP balance (no batching wait) on the workload of
``test_replay_e2e.py``: rank 0 sits at the cap, rank 1 keeps receiving
short requests, so context is held (rank 0 has none to run) until the
timeout. Checked: every request completes; the peer holds on some steps;
no held step of any rank admits a new request (read from the per-rank step
records); the engines built the peer's scheduler. The control, ``off``
holding on no step of this workload, is ``test_replay_e2e.py``'s (its two
``off`` runs, same workload and options; ``--peer-router`` concerns peers
only): this file's deployment runs the peer alone (issue 58: one
deployment, not a second ``off`` one). The
hold's decision itself (every rank alike, equal to the simulated engine's
policy, a negative control) is checked on real schedulers and gloo in
``test_replay_real_peer_gate.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.replay_variants import one_rank_at_cap, run_replay, write_jsonl
from vllm_ascend_balance.replay.real.recorder import rank_file, read_rank_file

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.e2e,
    pytest.mark.multiproc,
    pytest.mark.slow,
]

CAP = 4
PEER = "trtllm-adp:50:0"


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("peers")
    trace = write_jsonl(tmp / "cap.jsonl", one_rank_at_cap(CAP))
    args = [
        "--trace", str(trace), "--dp", "2", "--mode", PEER,
        "--peer-router", "shared", "--repeat", "1",
        "--max-num-seqs", str(CAP), "--max-num-batched-tokens", "256",
        "--max-model-len", "1024", "--time-scale", "0.2",
        "--run-dir", str(tmp / "runs"),
    ]  # fmt: skip
    result = run_replay(args, timeout=900, json_path=tmp / "out.json")
    assert not result.timed_out and result.returncode == 0, result.stderr[-3000:]
    return result, tmp / "runs"


def test_every_request_completes_and_the_peer_holds(replay):
    result, _ = replay
    (run,) = result.json["runs"]
    assert run["mode"] == PEER
    assert run["status"] == "ok"
    assert run["metrics"]["completed"] == run["metrics"]["requests"] == CAP + 10
    frozen = result.json["comparison"]["metrics"]["steps frozen"]
    assert frozen[PEER]["values"][0] > 0.0, frozen


def test_no_held_step_admits_and_the_engines_built_the_peer_scheduler(replay):
    _, runs = replay
    (run_dir,) = [p for p in Path(runs).iterdir() if p.name.startswith("trtllm")]
    files = [read_rank_file(rank_file(str(run_dir), r)) for r in range(2)]
    held = [s for f in files for s in f.steps if s.frozen]
    assert held, "no held step recorded"
    assert [s for s in held if s.new_requests] == []
    for f in files:
        assert f.starts[0].scheduler == "RecordingPeerScheduler"
