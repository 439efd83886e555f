# SPDX-License-Identifier: Apache-2.0
"""The replay end to end on real ``AsyncLLM`` DP 2 deployments: balance off
and on, two runs each in ABBA order, on a workload that brings one rank to
the cap while the other keeps receiving requests.

The known effect must be reported as an effect (balance freezes admission:
a frozen share above 0 against exactly 0 with balance off, and requests on
the other rank starve behind the full one), and the report carries the
bands, per-rank rows and the starvation line. The verdict statistics
themselves (A/A comparisons report no effect) are checked on a noise model
in ``test_replay_compare.py``; the modeled-time property in
``test_replay_metrics.py``.

The two ``off`` runs are also the control of ``test_replay_real_peers.py``
(a peer policy on this workload; its deployment runs the peer alone): with
no gate, no step of this workload is held.
"""

from __future__ import annotations

import stat

import pytest

from tests.support.replay_variants import one_rank_at_cap, run_replay, write_jsonl

# The replay's real deployment on the main lane's vLLM is exercised by
# tests/test_replay_sim_validate.py there; this file is the release lane's.
pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.e2e,
    pytest.mark.multiproc,
    pytest.mark.slow,
    # The replay's own 900 s bound (below) is the hang guard; the suite's
    # 600 s default would end the fixture first on a loaded machine.
    pytest.mark.timeout(1000),
]

CAP = 4


@pytest.fixture(scope="module")
def replay_tmpdir(tmp_path_factory):
    """The replay's ``TMPDIR``, as a new shell's."""
    return tmp_path_factory.mktemp("e2e-tmpdir")


@pytest.fixture(scope="module")
def replay(tmp_path_factory, replay_tmpdir):
    tmp = tmp_path_factory.mktemp("e2e")
    trace = write_jsonl(tmp / "cap.jsonl", one_rank_at_cap(CAP))
    args = [
        "--trace", str(trace), "--dp", "2", "--mode", "off,on", "--repeat", "2",
        "--max-num-seqs", str(CAP), "--max-num-batched-tokens", "256",
        "--max-model-len", "1024", "--time-scale", "0.2",
        "--starvation-steps", "10",
    ]  # fmt: skip
    result = run_replay(
        args, timeout=900, json_path=tmp / "out.json", tmpdir=replay_tmpdir
    )
    assert not result.timed_out and result.returncode == 0, result.stderr[-3000:]
    return result


def test_runs_alternate_and_all_complete(replay):
    runs = replay.json["runs"]
    assert [(r["mode"], r["repeat"]) for r in runs] == [
        ("off", 0), ("on", 0), ("on", 1), ("off", 1)
    ]  # fmt: skip
    for run in runs:
        assert run["status"] == "ok"
        assert run["metrics"]["completed"] == run["metrics"]["requests"] == CAP + 10
        # Per-rank results for every request.
        assert {q["rank"] for q in run["requests"]} == {0, 1}


def test_known_effect_is_reported_with_bands(replay):
    frozen = replay.json["comparison"]["metrics"]["steps frozen"]
    # No gate, no held step (test_replay_real_peers' control too).
    assert frozen["off"]["values"] == [0.0, 0.0]
    assert frozen["on"]["effect"] is True, frozen
    lines = replay.stdout.splitlines()
    (row,) = [x for x in lines if x.startswith("steps frozen")]
    assert "0.0% ±0.0%" in row and "~" not in row
    assert any(x.startswith("rank 1 TTFT p99 (ms)") for x in lines)
    assert any(x.startswith("TTFT p99 worst rank (ms)") for x in lines)
    assert any("99% confidence" in x for x in lines)
    (done,) = [x for x in lines if x.startswith("completed requests")]
    assert done.split()[2:] == [f"{CAP + 10}/{CAP + 10}"] * 2
    (starved,) = [x for x in lines if x.startswith("starvation (on)")]
    assert "most on rank 1" in starved


def test_nothing_is_left_in_the_temp_dir(replay, replay_tmpdir):
    """No work directory and no socket file: each run's engines end without
    unlinking vLLM's ZeroMQ IPC sockets, which went to the temp dir (6 per
    run here) before the replay gave them a directory of its own
    (vllm_ascend_balance/ipc_sockets.py). Negative control: without its
    ``own_ipc_dir()`` call this fails. Caches other libraries keep there
    (torch's ``torchinductor_*``) are theirs."""
    left = [
        p.name
        for p in replay_tmpdir.iterdir()
        if p.name.startswith("vab-") or stat.S_ISSOCK(p.lstat().st_mode)
    ]
    assert left == []
