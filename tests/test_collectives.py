# SPDX-License-Identifier: Apache-2.0
"""The opt-in log-depth collective decides exactly as the contract's gather.

``balance_collective: "all_reduce_max"`` replaces the all-gather of
``len(running)`` by a MAX reduction of ``[len, -len]`` over ceil(log2 N)
point-to-point rounds. The gate only reads max (frozen, and through the
frozen sequence the bounded run and its fail-open steps) and min (spread),
so every decision must be identical:

- in process, DP 2-256: the mixin's own ``admission_gather`` on the
  simulated engine's ``BoardGroup`` (all-gather) against the same mixin on
  threads exchanging through a ``MeshGroup`` (log-depth), over random
  vectors and bounds;
- on real gloo, DP 2-8: spawned ranks on vLLM's
  ``ParallelConfig.stateless_init_dp_group()``, both paths on the same group
  at every step, every rank and path identical and equal to the contract;
- negative controls: a SUM or a MIN in place of MAX (and a schedule missing
  its last round) must make the comparison fail.

No timed assertions; joins and queue waits are hang guards only.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.support.meshgroup import Mesh, MeshGroup
from tests.support.processes import run_processes
from vllm_ascend_balance.gate import collectives
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.wiring import activation_plan, composition, config
from vllm_ascend_balance.wiring.config import BalanceConfigError
from vllm_ascend_balance.wiring.config_read import read_balance_setting

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

SIZES = [2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 100, 128, 255, 256]
STEPS = 12
JOIN_TIMEOUT_S = 300  # hang guard only


class _Running:
    """Just what the mixin reads from a scheduler: ``running`` and the cap."""

    def __init__(self, cap: int) -> None:
        self.running: list[Any] = []
        self.max_num_running_reqs = cap
        self._balance_tripped = True  # the tripwire is not under test here

    def set_running(self, count: int) -> None:
        self.running = [SimpleNamespace(request_id=str(i)) for i in range(count)]


def _gate(cap: int, bound: int | None, collective: str) -> Any:
    namespace = {"balance_max_frozen_steps": bound, "balance_collective": collective}
    cls = type("Gate", (BalanceSchedulerMixin, _Running), namespace)
    return cls(cap)


def _decision(gate: Any) -> tuple[bool, int, int, int]:
    return (
        bool(gate.balance_frozen),
        gate.balance_fail_opens,
        gate.balance_frozen_run,
        gate.balance_spread,
    )


def _scenario(seed: int, size: int) -> tuple[int, int | None, list[list[int]]]:
    """A cap, a bound and per-step vectors that often reach the cap."""
    rng = random.Random(seed * 1000 + size)
    cap = rng.randint(1, 8)
    bound = rng.choice([None, 1, 2, 3])
    vectors = [
        [cap if rng.random() < 0.2 else rng.randint(0, cap) for _ in range(size)]
        for _ in range(STEPS)
    ]
    return cap, bound, vectors


def _gathered_decisions(cap: int, bound: int | None, vectors: list[list[int]]) -> Any:
    """The contract: every rank's mixin on the simulated all-gather board."""
    size = len(vectors[0])
    board = GatherBoard(size)
    gates = [_gate(cap, bound, "all_gather") for _ in range(size)]
    for rank, gate in enumerate(gates):
        gate.dp_group = BoardGroup(board, rank)
    out: list[list[tuple]] = [[] for _ in range(size)]
    for vector in vectors:
        board.post(vector)
        for rank, gate in enumerate(gates):
            gate.set_running(vector[rank])
            gate.admission_gather()
            out[rank].append(_decision(gate))
    return out


def _reduced_decisions(cap: int, bound: int | None, vectors: list[list[int]]) -> Any:
    """The opt-in: every rank's mixin in its own thread on a MeshGroup."""
    size = len(vectors[0])
    mesh = Mesh(size)
    out: list[list[tuple]] = [[] for _ in range(size)]
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            gate = _gate(cap, bound, "all_reduce_max")
            gate.dp_group = MeshGroup(mesh, rank)
            for vector in vectors:
                gate.set_running(vector[rank])
                gate.admission_gather()
                out[rank].append(_decision(gate))
        except BaseException as exc:  # surfaced below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not errors, errors[0]
    assert all(sent == len(vectors) * math.ceil(math.log2(size)) for sent in mesh.sent)
    return out


def _check_same(cap: int, bound: int | None, vectors: list[list[int]]) -> int:
    """Both paths decide identically on every rank and step, and as the
    contract says; returns the number of frozen steps seen."""
    gathered = _gathered_decisions(cap, bound, vectors)
    reduced = _reduced_decisions(cap, bound, vectors)
    for rank, (a, b) in enumerate(zip(gathered, reduced, strict=True)):
        assert a == b, f"rank {rank}: all_gather {a} != all_reduce_max {b}"
    frozen = 0
    for step, vector in enumerate(vectors):
        assert gathered[0][step][3] == max(vector) - min(vector)
        frozen += gathered[0][step][0]
    return frozen


@pytest.mark.parametrize("size", SIZES)
def test_log_depth_decides_as_the_gather_in_process(size: int) -> None:
    frozen = 0
    for seed in range(3):
        frozen += _check_same(*_scenario(seed, size))
    assert frozen > 0  # the scenarios exercised the freeze


@pytest.mark.parametrize(
    "bad",
    [
        lambda mine, got: torch.add(mine, got, out=mine),  # SUM: counts ranks
        lambda mine, got: torch.minimum(mine, got, out=mine),  # MIN: not max
    ],
    ids=["sum", "min"],
)
def test_negative_control_wrong_reduction_is_caught(
    monkeypatch: pytest.MonkeyPatch, bad: Any
) -> None:
    monkeypatch.setitem(
        collectives.EXCHANGES,
        "all_reduce_max",
        functools.partial(collectives.reduce_extremes, combine=bad),
    )
    with pytest.raises(AssertionError, match="all_gather .* != all_reduce_max"):
        for size in (3, 8, 17):
            for seed in range(3):
                _check_same(*_scenario(seed, size))


def test_dissemination_reaches_every_rank_in_log_rounds() -> None:
    """Who each rank has heard from, round by round: everyone, after exactly
    ceil(log2 N) rounds; with the last round dropped, someone is missing
    (negative control)."""

    def heard(size: int, rounds: int | None = None) -> list[set[int]]:
        known = [{r} for r in range(size)]
        peers = [collectives.dissemination_peers(r, size) for r in range(size)]
        for k in range(len(peers[0]) if rounds is None else rounds):
            known = [known[r] | known[peers[r][k][1]] for r in range(size)]
        return known

    for size in range(2, 257):
        assert collectives.rounds("all_reduce_max", size) == math.ceil(math.log2(size))
        assert collectives.rounds("all_gather", size) == size - 1
        assert all(k == set(range(size)) for k in heard(size))
        short = heard(size, collectives.rounds("all_reduce_max", size) - 1)
        assert any(k != set(range(size)) for k in short), size


# --------------------------------------------------------------------------
# The setting


def _setting(value: Any) -> Any:
    from tests.support.vllm_objects import make_vllm_config

    sched: dict[str, Any] = {"enable_balance_scheduling": True}
    if value != "absent":
        sched["balance_collective"] = value
    return make_vllm_config(
        additional_config={"scheduler_config": sched}, data_parallel_size=2
    )


@pytest.mark.parametrize("value", ["absent", None, "all_gather", "all_reduce_max"])
def test_collective_setting_accepted(value: Any) -> None:
    expected = "all_gather" if value in ("absent", None) else value
    assert read_balance_setting(_setting(value)).collective == expected
    plan = activation_plan.plan_activation(_setting(value))
    assert plan.active and plan.collective == expected
    from vllm.v1.core.sched.scheduler import Scheduler

    cls = composition.compose_scheduler(Scheduler, None, expected)
    assert cls.balance_collective == expected


@pytest.mark.parametrize("value", ["all_reduce", "ALL_GATHER", "", 1, True, [], {}])
def test_collective_bad_value_is_a_one_line_error(value: Any) -> None:
    with pytest.raises(BalanceConfigError) as info:
        read_balance_setting(_setting(value))
    message = str(info.value)
    assert "\n" not in message
    for needle in (
        config.COLLECTIVE_SETTING,
        '"all_gather", "all_reduce_max"',
        config.COLLECTIVE_EXAMPLE,
        json.dumps(value),
    ):
        assert needle in message, (needle, message)


def test_collective_misspelled_key_is_refused() -> None:
    from tests.support.vllm_objects import make_vllm_config

    cfg = make_vllm_config(
        additional_config={
            "scheduler_config": {
                "enable_balance_scheduling": True,
                "balance_colective": "all_reduce_max",
            }
        },
        data_parallel_size=2,
    )
    with pytest.raises(BalanceConfigError, match="did you mean balance_collective"):
        read_balance_setting(cfg)


# --------------------------------------------------------------------------
# Real gloo, spawned ranks


def _rank_main(rank: int, parallel_config: Any, size: int, out_path: str) -> None:
    from vllm.distributed.utils import (
        stateless_destroy_torch_distributed_process_group,
    )

    parallel_config.data_parallel_rank = rank
    parallel_config.data_parallel_rank_local = rank
    group = parallel_config.stateless_init_dp_group()
    records = []
    for seed in range(2):
        cap, bound, vectors = _scenario(seed, size)
        gates = {
            name: _gate(cap, bound, name) for name in ("all_gather", "all_reduce_max")
        }
        for gate in gates.values():
            gate.dp_group = group
        for vector in vectors:
            row: dict[str, Any] = {"seed": seed, "vector": vector, "cap": cap}
            for name, gate in gates.items():
                gate.set_running(vector[rank])
                gate.admission_gather()
                row[name] = list(_decision(gate))
            row["gathered"] = gates["all_gather"].balance_gathered.tolist()
            records.append(row)
    Path(out_path).write_text(json.dumps(records))
    stateless_destroy_torch_distributed_process_group(group)
    os._exit(0)  # skip torch's store/gloo teardown (see test_gather_cadence)


@pytest.mark.multiproc
@pytest.mark.lane_scope("release")  # torch's gloo p2p, not vLLM: once
@pytest.mark.parametrize("size", [3, 5])
def test_log_depth_decides_as_the_gather_on_gloo(tmp_path: Path, size: int) -> None:
    from vllm.config import ParallelConfig

    parallel_config = ParallelConfig(
        data_parallel_size=size, data_parallel_master_ip="127.0.0.1"
    )
    paths = [tmp_path / f"rank{rank}.json" for rank in range(size)]
    joined = run_processes(
        _rank_main,
        [(rank, parallel_config, size, str(paths[rank])) for rank in range(size)],
        JOIN_TIMEOUT_S,
    )
    assert not joined.hung, f"ranks {joined.hung} hung"
    assert joined.exitcodes == [0] * size
    results = [json.loads(path.read_text()) for path in paths]
    frozen = 0
    for step, rows in enumerate(zip(*results, strict=True)):
        vector = rows[0]["vector"]
        for row in rows:
            assert row["gathered"] == vector  # the gather really crossed ranks
            assert row["all_reduce_max"] == row["all_gather"], (step, row)
            assert row["all_gather"] == rows[0]["all_gather"], (step, row)
            assert row["all_gather"][3] == max(vector) - min(vector)
        frozen += rows[0]["all_gather"][0]
        if rows[0]["all_gather"][0]:
            assert max(vector) == rows[0]["cap"]
    assert frozen > 0
