# SPDX-License-Identifier: Apache-2.0
"""The log-depth exchange decides exactly as the all-gather, for every policy.

``all_reduce_max`` (the default of every policy but the contract since the
gate picks the exchange from the policy's signals; the contract keeps
vllm-ascend's all-gather unless ``balance_collective`` says otherwise)
packs each signal in one slot MAX combines (``min`` negated, ``any`` as a
0/1 flag) over ceil(log2 N) point-to-point rounds. Every signal combines
by an idempotent operation, so the view, and every decision (with the
frozen run, the hold bound's fail-opens and the spread), must be identical:

- in process, DP 2-256: the mixin's own ``admission_gather`` on the
  simulated engine's ``BoardGroup`` (all-gather) against the same mixin on
  threads exchanging through a ``MeshGroup`` (log-depth), over random
  loads (running and waiting), every registered policy and random bounds;
- on real gloo, DP 3 and 5: spawned ranks on vLLM's
  ``ParallelConfig.stateless_init_dp_group()``, both paths on the same group
  at every step, every rank and path identical (and the contract's freeze
  where it runs);
- negative controls: a SUM or a MIN in place of MAX (and a schedule missing
  its last round) must make the comparison fail.

No timed assertions; joins and queue waits are hang guards only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.support.meshgroup import Mesh, MeshGroup
from tests.support.processes import run_processes
from tests.support.scratch import exit_without_teardown
from vllm_ascend_balance.gate import collectives
from vllm_ascend_balance.gate.policies import POLICIES
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.gate.settings import DEFAULT_POLICY, GateSettings
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.wiring import activation_plan, composition, config
from vllm_ascend_balance.wiring.config import BalanceConfigError
from vllm_ascend_balance.wiring.config_read import read_balance_setting

# why: the setting tests read real VllmConfig objects (additional_config) and
# plan activation on the installed vLLM; the exchange itself is release-only.
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

SIZES = [2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 100, 128, 255, 256]
STEPS = 12
JOIN_TIMEOUT_S = 300  # hang guard only


class _Running:
    """Just what the mixin reads from a scheduler: ``running``, ``waiting``
    and the cap; its own seam admits (the gate's answer comes first)."""

    def __init__(self, cap: int) -> None:
        self.running: list[Any] = []
        self.waiting: list[Any] = []
        self.max_num_running_reqs = cap
        self._balance_tripped = True  # the tripwire is not under test here

    def set_load(self, running: int, waiting: int) -> None:
        # Stable ids: a request held on several steps adds up its holds.
        self.running = [SimpleNamespace(request_id=f"r{i}") for i in range(running)]
        self.waiting = [SimpleNamespace(request_id=f"w{i}") for i in range(waiting)]

    def _should_stop_admitting_waiting(self) -> bool:
        return False


#: ``(len(running), len(waiting))`` per rank, per step.
Loads = list[list[tuple[int, int]]]


def _gate(cap: int, settings: GateSettings, collective: str) -> Any:
    settings = dataclasses.replace(settings, collective=collective)
    cls = type(
        "Gate", (BalanceSchedulerMixin, _Running), {"balance_settings": settings}
    )
    return cls(cap)


def _step(gate: Any, load: tuple[int, int]) -> None:
    """One step of one rank: its load, the exchange, then the seam as
    ``schedule()`` asks it (where the gate holds, the ledger notes it)."""
    gate.set_load(*load)
    gate.admission_gather()
    gate._should_stop_admitting_waiting()


def _decision(gate: Any) -> tuple[bool, bool, str, int, int, int]:
    decision = gate.balance_decision
    return (
        bool(gate.balance_frozen),
        decision.hold_chunks,
        decision.reason,
        gate.balance_fail_opens,
        gate.balance_frozen_run,
        gate.balance_spread,
    )


def _scenario(seed: int, size: int) -> tuple[int, GateSettings, Loads]:
    """A cap, a policy with a bound, and per-step loads that often reach
    the cap with requests waiting."""
    rng = random.Random(seed * 1000 + size)
    cap = rng.randint(1, 8)
    policy = sorted(POLICIES)[seed % len(POLICIES)]
    bound = rng.choice([None, 1, 2, 3])
    settings = (
        GateSettings(policy, max_frozen_steps=bound)
        if policy == DEFAULT_POLICY or rng.random() < 0.3
        else GateSettings(policy, max_held_steps=bound)
    )
    loads = [
        [
            (
                cap if rng.random() < 0.2 else rng.randint(0, cap),
                rng.choice([0, 0, 1, 2]),
            )
            for _ in range(size)
        ]
        for _ in range(STEPS)
    ]
    return cap, settings, loads


def _gathered_decisions(cap: int, settings: GateSettings, loads: Loads) -> Any:
    """Every rank's mixin on the simulated all-gather board."""
    size = len(loads[0])
    board = GatherBoard(size)
    gates = [_gate(cap, settings, "all_gather") for _ in range(size)]
    for rank, gate in enumerate(gates):
        gate.dp_group = BoardGroup(board, rank)
    out: list[list[tuple]] = [[] for _ in range(size)]
    for load in loads:
        for rank, gate in enumerate(gates):
            gate.set_load(*load[rank])
        board.post([gate.admission_payload() for gate in gates])
        for rank, gate in enumerate(gates):
            _step(gate, load[rank])
            out[rank].append(_decision(gate))
    return out


def _reduced_decisions(cap: int, settings: GateSettings, loads: Loads) -> Any:
    """Every rank's mixin in its own thread on a MeshGroup (log-depth)."""
    size = len(loads[0])
    mesh = Mesh(size)
    out: list[list[tuple]] = [[] for _ in range(size)]
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            gate = _gate(cap, settings, "all_reduce_max")
            gate.dp_group = MeshGroup(mesh, rank)
            for load in loads:
                _step(gate, load[rank])
                out[rank].append(_decision(gate))
        except BaseException as exc:  # surfaced below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not errors, errors[0]
    assert all(sent == len(loads) * math.ceil(math.log2(size)) for sent in mesh.sent)
    return out


def _check_same(cap: int, settings: GateSettings, loads: Loads) -> int:
    """Both paths decide identically on every rank and step; returns the
    number of steps that held admission."""
    gathered = _gathered_decisions(cap, settings, loads)
    reduced = _reduced_decisions(cap, settings, loads)
    for rank, (a, b) in enumerate(zip(gathered, reduced, strict=True)):
        assert a == b, f"rank {rank}: all_gather {a} != all_reduce_max {b}"
    frozen = 0
    for step, load in enumerate(loads):
        running = [r for r, _ in load]
        assert gathered[0][step][5] == max(running) - min(running)
        if settings.policy == DEFAULT_POLICY and gathered[0][step][0]:
            # The contract's freeze, independently (a bound only opens).
            assert max(running) == cap
        frozen += gathered[0][step][0]
    return frozen


@pytest.mark.lane_scope("release")  # the mixin on stand-ins: no vLLM code
@pytest.mark.parametrize("size", SIZES)
def test_log_depth_decides_as_the_gather_in_process(size: int) -> None:
    frozen = 0
    for seed in range(len(POLICIES)):
        frozen += _check_same(*_scenario(seed, size))
    assert frozen > 0  # the scenarios exercised the freeze


@pytest.mark.lane_scope("release")  # the check's power, on stand-ins: no vLLM code
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
        functools.partial(collectives.reduce_signals, combine_=bad),
    )
    with pytest.raises(AssertionError, match="all_gather .* != all_reduce_max"):
        for size in (3, 8, 17):
            for seed in range(len(POLICIES)):
                _check_same(*_scenario(seed, size))


@pytest.mark.lane_scope("release")  # the exchange's schedule: no vLLM code
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
    given = None if value in ("absent", None) else value
    assert read_balance_setting(_setting(value)).collective == given
    plan = activation_plan.plan_activation(_setting(value))
    assert plan.active and plan.collective == given
    # Unset, the contract keeps vllm-ascend's all-gather.
    exchange = given or "all_gather"
    assert any(note.startswith(f"exchange {exchange}") for note in plan.notes)
    from vllm.v1.core.sched.scheduler import Scheduler

    cls = composition.compose_scheduler(Scheduler, GateSettings(collective=given))
    assert cls.balance_settings.collective == given


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_each_policy_runs_on_the_exchange_its_signals_allow(policy: str) -> None:
    """Changed on purpose (issue 54): where ``balance_collective`` is unset,
    the contract runs on the all-gather (vllm-ascend's), every other policy
    on the log-depth exchange; a set value wins (the control)."""
    from tests.support.vllm_objects import make_vllm_config

    def exchange(**extra: Any) -> str:
        sched = {"enable_balance_scheduling": True, "balance_policy": policy, **extra}
        plan = activation_plan.plan_activation(
            make_vllm_config(
                additional_config={"scheduler_config": sched}, data_parallel_size=2
            )
        )
        (line,) = [n for n in plan.notes if n.startswith("exchange ")]
        return line.split()[1]

    natural = "all_gather" if policy == DEFAULT_POLICY else "all_reduce_max"
    assert exchange() == natural
    assert collectives.natural_collective(POLICIES[policy].collective) == natural
    other = "all_reduce_max" if natural == "all_gather" else "all_gather"
    assert exchange(balance_collective=other) == other


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
    for seed in range(len(POLICIES)):
        cap, settings, loads = _scenario(seed, size)
        gates = {
            name: _gate(cap, settings, name)
            for name in ("all_gather", "all_reduce_max")
        }
        for gate in gates.values():
            gate.dp_group = group
        for load in loads:
            row: dict[str, Any] = {
                "seed": seed,
                "running": [r for r, _ in load],
                "cap": cap,
                "policy": settings.policy,
            }
            for name, gate in gates.items():
                _step(gate, load[rank])
                row[name] = list(_decision(gate))
            gathered = gates["all_gather"].balance_gathered
            row["gathered"] = gathered.reshape(size, -1)[:, 0].tolist()
            records.append(row)
    Path(out_path).write_text(json.dumps(records))
    stateless_destroy_torch_distributed_process_group(group)
    exit_without_teardown()


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
        running = rows[0]["running"]
        for row in rows:
            assert row["gathered"] == running  # the gather really crossed ranks
            assert row["all_reduce_max"] == row["all_gather"], (step, row)
            assert row["all_gather"] == rows[0]["all_gather"], (step, row)
            assert row["all_gather"][5] == max(running) - min(running)
        frozen += rows[0]["all_gather"][0]
        if rows[0]["policy"] == DEFAULT_POLICY and rows[0]["all_gather"][0]:
            assert max(running) == rows[0]["cap"]
    assert frozen > 0
