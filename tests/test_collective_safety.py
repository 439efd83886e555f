# SPDX-License-Identifier: Apache-2.0
"""Collective safety on a real vLLM DP deployment (issues 2 and 3).

Upstream ``DPEngineCoreProc.run_busy_loop`` runs unmodified in spawned
engine processes started by ``AsyncLLM`` with the DP coordinator; balance
scheduling is activated through the installed entry point; the replay's
cost-model executor makes every forward pass (dummy batches included) a
collective across the ranks, as MoE does. The workload is a few waves with
idle gaps between them (every wave ends, engines pause, the next request
starts a new wave) and skewed per-rank load (one rank heavy, one light, the
others idle: they only run dummy batches).

- With the package's gather (after ``_has_global_unfinished_reqs``): every
  request completes before the timeout, every rank gathers the same number
  of times, all ranks receive the same vectors, and the gate freezes
  exactly when some rank's gathered running count equals the cap.
- Negative control: the gather inside ``schedule()`` (deadlock lesson A)
  must not complete: it hangs and the timeout catches it; Ctrl-C then stops
  every process of the run.

The workload is as large as the checks need, not larger (issue 58): each
rank is the heavy one at least once, and every check needs one freeze and
one idle gap; the waves (:func:`waves`) give each rank a heavy wave and two
or more pauses and restarts (at DP 2 rank 0 is heavy twice). The opt-in
policies ride the DP 2 replay as further modes (one driver start-up; each
mode is still its own deployment: the gate is chosen at engine start).

No timed assertions: timeouts only detect hangs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.replay_variants import (
    GATHER_IN_SCHEDULE_EXECUTOR,
    ReplayProcess,
    load_run_records,
    run_replay,
    skewed_waves,
    write_jsonl,
)

pytestmark = [
    pytest.mark.lane_scope("release", "main", "fork", "ascend"),
    pytest.mark.e2e,
    pytest.mark.multiproc,
    pytest.mark.slow,
]

CAP = 4


def waves(dp: int) -> int:
    """Waves of the workload at ``dp``: each rank heavy once (rank 0 twice
    at DP 2), so at least two idle gaps (a pause, then a new wave)."""
    return max(dp, 3)


# Modeled seconds between waves; at TIME_SCALE 0.1 that is 2.5 s of wall time,
# far longer than a wave takes, so every wave ends before the next begins.
GAP_S = 25.0
TIME_SCALE = 0.1
# Hang detection only, per mode (a healthy run of this size takes a fraction
# of it).
TIMEOUT_S = {2: 240.0, 4: 300.0}
# The negative control's workload and hang clock. The known-bad variant hangs
# in the first step on which one rank schedules while another runs a dummy
# batch (its warm-up or its first wave), so two waves are enough; a healthy
# run of two waves ends a few seconds after its engines are up, and the clock
# is counted from then (start-up follows the host's load, a hang does not).
# A hang in the very first gather leaves no gather recorded: such an
# interrupted run is reported as interrupted, not as a failed recording
# (replay/real/checks.py; once under load it read "recording failed").
NEGATIVE_WAVES = 2
NEGATIVE_TIMEOUT_S = 30.0


def _args(trace: Path, dp: int, run_dir: Path, *extra: str) -> list[str]:
    return [
        "--trace", str(trace),
        "--dp", str(dp),
        "--mode", "on",
        "--repeat", "1",
        "--max-num-seqs", str(CAP),
        "--max-num-batched-tokens", "256",
        "--max-model-len", "2048",
        "--time-scale", str(TIME_SCALE),
        "--run-dir", str(run_dir),
        *extra,
    ]  # fmt: skip


def _run(
    tmp: Path, dp: int, n_waves: int | None = None, **kwargs: Any
) -> tuple[ReplayProcess, Path]:
    n_waves = waves(dp) if n_waves is None else n_waves
    trace = write_jsonl(
        tmp / "waves.jsonl",
        skewed_waves(dp, waves=n_waves, gap_s=GAP_S, heavy=CAP + 3),
    )
    run_dir = tmp / "run"
    extra = kwargs.pop("extra", ())
    result = run_replay(
        _args(trace, dp, run_dir, *extra), json_path=tmp / "out.json", **kwargs
    )
    return result, run_dir


# The opt-in policies on the DP 2 deployment, on their own exchange (the
# log-depth one: no per-rank rows; each rank records what it sent, so the
# rows are rebuilt from every rank's record of the same gather) through the
# same hook. What can differ by vLLM version is the scheduler's queues,
# covered on every lane by the policies' property tests; the hook and
# transport are the contract's, so the release lane runs them.
QUEUED_MODE = "on+queued-leader+max-held:4"
# ``throttled`` (aligned, its predecessor here, was retired into it).
THROTTLED_MODE = "on+throttled:4+max-held:4"
HELD_BOUND = 4
WINDOW = 4
#: The tests that read the policy modes' runs (release lane only).
POLICY_TESTS = (
    "test_queued_leader_completes_and_ranks_agree",
    "test_throttled_completes_and_ranks_agree",
)


def _policies_selected(request: pytest.FixtureRequest) -> bool:
    """Whether this session runs a test of the policy modes (their lane,
    ``-k``): only then does the DP 2 replay run them too."""
    return any(
        getattr(getattr(item, "module", None), "__name__", None) == __name__
        and getattr(item, "originalname", item.name) in POLICY_TESTS
        for item in request.session.items
    )


@pytest.fixture(scope="module")
def dp2_runs(request, tmp_path_factory):
    """The DP 2 replay: mode ``on`` and, where their tests run, both opt-in
    modes after it, one deployment each, started and stopped in turn
    (records per mode), one driver start-up."""
    modes = (
        ["on", QUEUED_MODE, THROTTLED_MODE] if _policies_selected(request) else ["on"]
    )
    return _run(
        tmp_path_factory.mktemp("dp2"),
        2,
        timeout=len(modes) * TIMEOUT_S[2],
        extra=("--mode", ",".join(modes)),
    )


# DP 4 adds ranks, not a vLLM-version difference: the release lane runs it.
@pytest.fixture(
    scope="module",
    params=[2, pytest.param(4, marks=pytest.mark.lane_scope("release"))],
    ids=["dp2", "dp4"],
)
def balanced_run(request, tmp_path_factory):
    """Mode ``on`` at the parameter's DP size: (dp, replay, run directory)."""
    dp = request.param
    if dp == 2:
        result, run_dir = request.getfixturevalue("dp2_runs")
    else:
        result, run_dir = _run(
            tmp_path_factory.mktemp(f"dp{dp}"), dp, timeout=TIMEOUT_S[dp]
        )
    return dp, result, run_dir


def test_every_request_completes_without_hang(balanced_run):
    dp, result, _ = balanced_run
    assert not result.timed_out, f"DP {dp} replay hung:\n{result.stderr[-3000:]}"
    assert result.returncode == 0, result.stderr[-3000:]
    run = _mode_run(result, "on")
    assert run["status"] == "ok"
    metrics = run["metrics"]
    assert metrics["completed"] == metrics["requests"] == waves(dp) * (CAP + 4)
    for req in run["requests"]:
        assert req["output_tokens"] == req["expected_tokens"], req
    assert result.leftover_pids == [], "engine processes outlived the replay"


def test_every_rank_gathers_equally(balanced_run):
    dp, result, run_dir = balanced_run
    run = _mode_run(result, "on")
    gathers = run["metrics"]["gathers_per_rank"]
    assert len(gathers) == dp
    assert gathers[0] > 0, "balance did not activate through the entry point"
    assert len(set(gathers)) == 1, gathers
    classes = [c.rsplit(".", 1)[-1] for c in run["scheduler_classes"]]
    assert all(c.startswith("Recording") for c in classes)
    assert any("Balance" in c for c in classes)
    records = load_run_records(run_dir, "on", dp)
    by_rank = {rank: recs.gathers for rank, recs in records.items()}
    # Same number of gathers, and gather n delivered the same vector to every
    # rank, whose entry r is what rank r sent.
    assert len({len(g) for g in by_rank.values()}) == 1
    for n, same in enumerate(zip(*by_rank.values(), strict=True)):
        vectors = {tuple(g.gathered) for g in same}
        assert len(vectors) == 1, (n, same)
        (vector,) = vectors
        assert list(vector) == [g.local for g in same], (n, same)


def test_waves_idle_gaps_and_dummy_batches_happened(balanced_run):
    dp, result, run_dir = balanced_run
    steps = load_run_records(run_dir, "on", dp)[0].steps
    gaps = sum(
        1
        for a, b in zip(steps, steps[1:], strict=False)
        if b.wall_start - a.wall_end > 0.3
    )
    assert gaps >= waves(dp) - 1, f"only {gaps} idle gaps: waves did not end"
    assert any(r.dummy for r in steps), "no rank ever ran a dummy batch"


def test_freeze_exactly_when_a_rank_is_at_cap(balanced_run):
    dp, result, run_dir = balanced_run
    records = load_run_records(run_dir, "on", dp)
    freezes = 0
    for rank, recs in records.items():
        for gather in recs.gathers:
            assert gather.cap == CAP
            assert gather.frozen == (max(gather.gathered) == CAP), gather
            freezes += gather.frozen
        # Step k's schedule() used the decision of the gather after step k-1
        # (gather n follows the step that recorded gathers == n - 1) ...
        decision = {g.n: g.frozen for g in recs.gathers}
        for step in recs.steps:
            assert step.frozen == decision.get(step.gathers, False), (rank, step)
            # ... and a frozen step admits nothing from WAITING.
            if step.frozen:
                assert step.new_requests == 0, (rank, step)
    assert freezes > 0, "the skewed load never brought a rank to the cap"


def _engines_started(run_dir: Path, dp: int) -> bool:
    """Every rank's recording scheduler attached (the run's first record)."""
    files = list(run_dir.glob("*/rank*.jsonl"))
    return len({f.name for f in files if f.stat().st_size > 0}) >= dp


@pytest.mark.lane_scope("release")  # the hang check's power
def test_negative_control_gather_in_schedule_hangs(tmp_path):
    """Deadlock lesson A, reproduced: must hang (or fail), never complete."""
    run_dir = tmp_path / "run"
    result, _ = _run(
        tmp_path,
        2,
        n_waves=NEGATIVE_WAVES,
        timeout=NEGATIVE_TIMEOUT_S,
        started=lambda: _engines_started(run_dir, 2),
        extra=("--executor", GATHER_IN_SCHEDULE_EXECUTOR),
    )
    completed = (
        not result.timed_out
        and result.returncode == 0
        and result.json is not None
        and result.json["runs"][0]["status"] == "ok"
    )
    assert not completed, "gathering inside schedule() did not deadlock"
    records = load_run_records(run_dir, "on", 2)
    starts = [s for recs in records.values() for s in recs.starts]
    assert starts and all(s.scheduler.startswith("GatherInSchedule") for s in starts)
    if result.timed_out:
        # Ctrl-C on the hung deployment stops it and reports partial results.
        assert result.interrupted_rc == 1, result.stderr[-3000:]
        assert "interrupted" in result.stdout
    assert result.leftover_pids == [], "processes of the hung run survived"


def _mode_run(result: ReplayProcess, mode: str) -> dict[str, Any]:
    assert not result.timed_out, f"replay hung:\n{result.stderr[-3000:]}"
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = [r for r in result.json["runs"] if r["mode"] == mode]
    return run


def _views(run_dir: Path, mode: str, policy: str) -> list[tuple[dict[str, Any], bool]]:
    """Per gather: the group's view rebuilt from what every rank sent
    (leader, lowest, each flag's "any", the oldest hold), and the decision
    every rank took (asserted the same)."""
    from vllm_ascend_balance.gate import bound
    from vllm_ascend_balance.gate.settings import GateSettings

    quantities = bound.plan(
        GateSettings(policy, max_held_steps=HELD_BOUND)
    ).layout.quantities
    records = load_run_records(run_dir, mode, 2)
    by_rank = [recs.gathers for _, recs in sorted(records.items())]
    assert by_rank[0] and len({len(g) for g in by_rank}) == 1
    out = []
    for same in zip(*by_rank, strict=True):
        assert len({g.frozen for g in same}) == 1, same
        assert all(g.sent is not None and g.sent[0] == g.local for g in same), same
        rows = [dict(zip(quantities, g.sent, strict=True)) for g in same]
        running = [row["running"] for row in rows]
        view = {
            "leader": max(running),
            "lowest": min(running),
            "hold_age": max(row["hold_age"] for row in rows),
            **{
                flag: any(row[flag] for row in rows)
                for flag in ("held", "queued", "starved")
                if flag in quantities
            },
        }
        out.append((view, same[0].frozen))
    return out


@pytest.mark.lane_scope("release")
def test_queued_leader_completes_and_ranks_agree(dp2_runs):
    result, run_dir = dp2_runs
    run = _mode_run(result, QUEUED_MODE)
    assert run["status"] == "ok"
    assert run["metrics"]["completed"] == waves(2) * (CAP + 4)
    assert result.leftover_pids == [], "engine processes outlived the replay"
    freezes = 0
    for view, frozen in _views(run_dir, QUEUED_MODE, "queued_leader"):
        # The rule, independently: freeze only while a rank at the cap has a
        # queue, and open whenever a hold reached the bound.
        expected = view["queued"] and view["hold_age"] < HELD_BOUND
        assert frozen == expected, view
        freezes += frozen
    assert freezes > 0, "the skewed load never queued a rank at the cap"


def _throttled(views: list[dict[str, Any]]) -> list[bool]:
    """``throttled``'s admission decisions as docs/gate-contract.md states
    them, with the hold bound: the oracle of this deployment's gathers (a
    replaced group would restart it; this deployment keeps one)."""
    since = 1 << 30  # before the first opening
    decided = []
    for view in views:
        since += 1
        if not view["held"]:
            hold = True
        elif view["starved"]:
            hold, since = False, 0
        elif view["queued"] or since < -(-WINDOW * view["lowest"] ** 2 // CAP**2):
            hold = True  # a rank at the cap waits, or the batching wait
        else:
            hold, since = False, 0
        decided.append(hold and view["hold_age"] < HELD_BOUND)
    return decided


@pytest.mark.lane_scope("release")
def test_throttled_completes_and_ranks_agree(dp2_runs):
    result, run_dir = dp2_runs
    run = _mode_run(result, THROTTLED_MODE)
    assert run["status"] == "ok"
    assert run["metrics"]["completed"] == waves(2) * (CAP + 4)
    assert result.leftover_pids == [], "engine processes outlived the replay"
    views = _views(run_dir, THROTTLED_MODE, "throttled")
    decided = [frozen for _, frozen in views]
    assert decided == _throttled([view for view, _ in views])
    assert any(decided), "the skewed load never froze the throttled gate"
