# SPDX-License-Identifier: Apache-2.0
"""Gather cadence on real gloo groups across real processes.

N spawned processes (N = 2 and 3) each play one DP rank of an engine core:

- the DP group is vLLM's own: ``ParallelConfig.stateless_init_dp_group()``,
  as ``DPEngineCoreProc._init_data_parallel`` creates it (the parent builds
  the ``ParallelConfig`` and hands a copy to every rank, as vLLM's engine
  launcher does, so all ranks agree on the port);
- the scheduler is a real ``Scheduler`` / ``AsyncScheduler`` with the balance
  mixin composed on (``composition.compose_scheduler``), driven with skewed
  per-rank load so the running counts differ between ranks and over time;
- the engine is vLLM's ``DPEngineCoreProc`` with the hook activation
  installs on it (``engine.install_gather_hook``), allocated without its
  ``__init__`` (no executor, no ZMQ) and given exactly what upstream's
  ``_has_global_unfinished_reqs`` reads (``dp_group``, ``step_counter``,
  ``pending_pause``, ``dp_sync_interval`` where the release has it). Calling
  its ``_has_global_unfinished_reqs`` once per step, as upstream's
  ``run_busy_loop`` does, runs upstream's cross-rank sync (a real
  ``all_reduce`` every sync interval) and then our gather.

Each rank counts every collective (wrappers around
``torch.distributed.all_gather_into_tensor``, ``all_gather`` and
``all_reduce``, and the gate's log-depth exchange, whose point-to-point
messages go through the group itself). The parent asserts: exactly one
gather per step per rank, after the upstream all-reduce when there is one,
on the injected group, with payload ``len(running)`` (the contract's; an
opt-in policy's quantities start with it); every rank received the same
vector and took the same decision, equal to the contract's ``max == cap``;
a frozen step admits nothing anywhere.

Elastic EP: in the 3-rank run, ranks 0 and 1 switch mid-run to a new 2-rank
group (as ``reinitialize_distributed`` replaces ``dp_group``) while rank 2
leaves; the receive buffer follows the new group's size. The 2-rank run then
removes the hook and uses upstream's scheduler (balance off) and checks that
no gather happens while upstream's own sync still does.

Spawning ranks (each imports torch and vLLM) is the slow part, so the
scenarios of one world size share one set of processes: each scenario gets
its own DP group (its own ``ParallelConfig`` and port), a fresh scheduler
and a fresh engine object, and writes its own records; the tests read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.support.processes import run_processes
from tests.support.scratch import exit_without_teardown

pytestmark = [
    # why: DPEngineCoreProc's sync (_has_global_unfinished_reqs), DP group, schedulers
    pytest.mark.lane_scope("release", "main", "fork", "ascend"),
    pytest.mark.multiproc,
]

STEPS = 40  # > 32: upstream's sync all-reduce runs at least once on every lane
SHRINK_AT = 24  # elastic case: the step from which the smaller group is used
DISABLED_STEPS = 34
CAP = 3
# Hang guard only (nothing asserts on durations), for one set of processes
# running every scenario of its world size.
JOIN_TIMEOUT_S = 600


def _requests_for(rank: int) -> list[tuple[int, int, int]]:
    """Skewed load: ``(arrival_step, prompt_len, max_tokens)``. Rank 0 gets
    more than its cap at once (it reaches the cap and freezes everyone),
    rank 1 a trickle, rank 2 a late burst; outputs of varied lengths make
    the running counts move."""
    if rank == 0:
        return [(0, 8 + 5 * i, 3 + 2 * i) for i in range(5)] + [
            (12, 12, 6) for _ in range(4)
        ]
    if rank == 1:
        return [(2 * i, 6 + i, 2 + i % 4) for i in range(10)]
    return [(9, 5 + i, 4 + i) for i in range(6)]


class _CollectiveLog:
    """Wraps the torch.distributed collectives of this process."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        for name in ("all_gather_into_tensor", "all_gather", "all_reduce"):
            setattr(dist, name, self._wrap(name, getattr(dist, name)))
        # Newer releases run the DP sync as vLLM's own point-to-point
        # all-reduce (``cpu_all_reduce_``, imported by name into
        # vllm.config.parallel): log it as the all_reduce it is.
        import vllm.config.parallel as parallel_module

        real = getattr(parallel_module, "cpu_all_reduce_", None)
        if real is not None:
            parallel_module.cpu_all_reduce_ = self._wrap("all_reduce", real, 1)
        # The gate's log-depth exchange: the group's own send/recv, one
        # call per step (its rounds are test_collectives.py's).
        from vllm_ascend_balance.gate import collectives

        exchange = collectives.EXCHANGES["all_reduce_max"]

        def log_depth(scheduler: Any, group: Any, *rest: Any) -> Any:
            local = list(rest[1])
            self.calls.append({"name": "log_depth", "group": group, "payload": local})
            return exchange(scheduler, group, *rest)

        collectives.EXCHANGES["all_reduce_max"] = log_depth

    def _wrap(self, name: str, real: Any, group_arg: int | None = None) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            group = kwargs.get("group")
            if group is None and group_arg is not None and len(args) > group_arg:
                group = args[group_arg]  # cpu_all_reduce_(tensor, group, ...)
            payload = None
            if name == "all_gather_into_tensor" or name == "all_gather":
                payload = args[1].tolist()
            self.calls.append({"name": name, "group": group, "payload": payload})
            return real(*args, **kwargs)

        return wrapper

    def take(self) -> list[dict[str, Any]]:
        calls, self.calls = self.calls, []
        return calls


def _fake_model_output(scheduler: Any, output: Any) -> Any:
    # Imported here, like vLLM: the module stays importable without it.
    from tests.support.model_outputs import fake_model_output

    return fake_model_output(scheduler, output)


class PerRankCounterGate:
    """Negative control for the bounded freeze (mixed in front of the
    package's mixin in the child): a per-rank counter that counts a frozen
    gather only while this rank has requests waiting, so ranks open on
    different steps."""

    local_bound = 2
    _local_run = 0

    def admission_gather(self) -> None:
        super().admission_gather()  # type: ignore[misc]
        if not self.balance_frozen:  # type: ignore[has-type]
            self._local_run = 0
        elif self._local_run >= self.local_bound:
            self.balance_frozen = False
            self.balance_fail_opens += 1  # type: ignore[attr-defined]
            self._local_run = 0
        elif self.waiting:  # type: ignore[attr-defined]
            self._local_run += 1


@dataclass(frozen=True)
class Scenario:
    """One run of the ranks: see :func:`_scenario`."""

    shrink_to: int | None = None
    run_disabled: bool = False
    max_frozen: int | None = None
    per_rank_counter: bool = False
    policy: str = "leader_at_cap"
    collective: str | None = None


# Per world size, what the tests below read. The balance-off part removes
# the hook; it comes last only for readability (every scenario installs it).
SCENARIOS = {
    2: {
        # Every opt-in policy on both exchanges (the contract's are below).
        **{
            f"{policy}-{collective}": Scenario(policy=policy, collective=collective)
            for policy in ("queued_leader", "throttled")
            for collective in ("all_gather", "all_reduce_max")
        },
        "bounded": Scenario(max_frozen=2),
        "per-rank-counter": Scenario(per_rank_counter=True),
        "cadence": Scenario(run_disabled=True),
    },
    3: {
        "cadence": Scenario(shrink_to=2),
        "bounded": Scenario(shrink_to=2, max_frozen=2),
    },
}


def _rank_main(rank: int, runs: list[tuple[Scenario, Any, Any, str]]) -> None:
    """One DP rank, one process: every ``(scenario, parallel_config,
    shrunk_config, out_path)`` in turn."""
    log = _CollectiveLog()
    for scenario, parallel_config, shrunk_config, out_path in runs:
        _scenario(rank, log, scenario, parallel_config, shrunk_config, out_path)
    exit_without_teardown()


def _scenario(
    rank: int,
    log: _CollectiveLog,
    scenario: Scenario,
    parallel_config: Any,
    shrunk_config: Any | None,
    out_path: str,
) -> None:
    """One scenario on one rank: see the module docstring."""
    from vllm.distributed.utils import (
        stateless_destroy_torch_distributed_process_group,
    )
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.core import DPEngineCoreProc

    from tests.support.vllm_objects import make_request, make_scheduler
    from vllm_ascend_balance.gate.scheduler import admission_cap
    from vllm_ascend_balance.gate.settings import GateSettings
    from vllm_ascend_balance.wiring import composition
    from vllm_ascend_balance.wiring.engine_hook import (
        install_gather_hook,
        remove_gather_hook,
    )

    max_frozen, policy = scenario.max_frozen, scenario.policy
    parallel_config.data_parallel_rank = rank
    parallel_config.data_parallel_rank_local = rank
    group = parallel_config.stateless_init_dp_group()
    groups = [group]

    base = AsyncScheduler if rank == 1 else Scheduler
    settings = (
        GateSettings(max_frozen_steps=max_frozen)
        if policy == "leader_at_cap"
        else GateSettings(
            policy,
            (("balance_align_window", 4),) if policy == "throttled" else (),
            max_held_steps=4,
            collective=scenario.collective,
        )
    )
    scheduler_cls = composition.compose_scheduler(base, settings)
    if scenario.per_rank_counter:
        scheduler_cls = type("PerRankCounter", (PerRankCounterGate, scheduler_cls), {})
    scheduler: Any = make_scheduler(scheduler_cls, max_num_seqs=CAP, num_blocks=400)
    install_gather_hook(DPEngineCoreProc)
    engine: Any = DPEngineCoreProc.__new__(DPEngineCoreProc)  # no __init__: no executor
    engine.scheduler = scheduler
    engine.dp_group = group
    engine.step_counter = 0
    engine.pending_pause = False
    engine.ignore_start_dp_wave = False
    # 0.34 reads it after its all-reduce (fault tolerance off here).
    engine.enable_fault_tolerance = False
    engine.dp_sync_interval = getattr(parallel_config, "dp_sync_interval", None)
    # Newer releases read the DP sync timeout via self.vllm_config.parallel_config.
    engine.vllm_config = SimpleNamespace(parallel_config=parallel_config)
    log.take()  # group setup traffic is not part of a step

    requests = _requests_for(rank)
    records: list[dict[str, Any]] = []

    def step(index: int) -> dict[str, Any]:
        for i, (arrival, prompt_len, max_tokens) in enumerate(requests):
            if arrival == index:
                scheduler.add_request(
                    make_request(f"r{rank}-{i}", prompt_len, max_tokens)
                )
        output = scheduler.schedule()
        admitted = len(output.scheduled_new_reqs)
        scheduler.update_from_output(output, _fake_model_output(scheduler, output))
        payload = len(scheduler.running)
        log.take()
        unfinished = engine._has_global_unfinished_reqs(scheduler.has_requests())
        calls = log.take()
        gathers = [c for c in calls if c["name"] != "all_reduce"]
        gathered = getattr(scheduler, "balance_gathered", None)
        return {
            "step": index,
            "admitted": admitted,
            "payload": payload,
            "unfinished": unfinished,
            "calls": [c["name"] for c in calls],
            "gather_payloads": [c["payload"] for c in gathers],
            "on_dp_group": all(c["group"] is engine.dp_group for c in calls),
            "scheduler_group_is_engine_group": scheduler.dp_group is engine.dp_group,
            "vector": None if gathered is None else gathered.tolist(),
            "buffer_size": None if gathered is None else gathered.numel(),
            "group_size": engine.dp_group.size(),
            "frozen": bool(scheduler.balance_frozen),
            "fail_opens": scheduler.balance_fail_opens,
            "cap": admission_cap(scheduler),
            "width": len(scheduler.balance_plan().layout.quantities),
        }

    last = STEPS
    if shrunk_config is not None and rank >= shrunk_config.data_parallel_size:
        last = SHRINK_AT  # this rank leaves the DP group at the shrink
    for index in range(last):
        if shrunk_config is not None and index == SHRINK_AT:
            shrunk_config.data_parallel_rank = rank
            shrunk_config.data_parallel_rank_local = rank
            engine.dp_group = shrunk_config.stateless_init_dp_group()
            groups.append(engine.dp_group)
            log.take()
        records.append(step(index))

    disabled: list[dict[str, Any]] = []
    if scenario.run_disabled:
        # Balance off: upstream's engine class unhooked, its scheduler, same group.
        remove_gather_hook(DPEngineCoreProc)
        plain_engine: Any = DPEngineCoreProc.__new__(DPEngineCoreProc)
        plain_engine.__dict__.update(engine.__dict__)
        plain_engine.step_counter = 0
        plain_engine.scheduler = make_scheduler(base, max_num_seqs=CAP, num_blocks=400)
        for index in range(DISABLED_STEPS):
            sched = plain_engine.scheduler
            if index < 3:
                sched.add_request(make_request(f"d{rank}-{index}", 8, 20))
            output = sched.schedule()
            sched.update_from_output(output, _fake_model_output(sched, output))
            log.take()
            plain_engine._has_global_unfinished_reqs(sched.has_requests())
            disabled.append(
                {
                    "calls": [c["name"] for c in log.take()],
                    "has_buffer": hasattr(sched, "balance_gathered"),
                }
            )
    Path(out_path).write_text(json.dumps({"steps": records, "disabled": disabled}))
    # As DPEngineCoreProc.shutdown() does; without it teardown lingers.
    for dp_group in groups:
        stateless_destroy_torch_distributed_process_group(dp_group)


def _run_ranks(tmp_path: Path, world: int) -> dict[str, list[dict[str, Any]]]:
    """Every scenario of ``world`` on one set of ``world`` processes; per
    scenario name, each rank's records."""
    from vllm.config import ParallelConfig

    def config(size: int) -> Any:
        return ParallelConfig(
            data_parallel_size=size, data_parallel_master_ip="127.0.0.1"
        )

    scenarios = SCENARIOS[world]
    # One group (one port) per scenario, as a fresh run would have.
    configs = {
        name: (config(world), config(s.shrink_to) if s.shrink_to else None)
        for name, s in scenarios.items()
    }

    def path(name: str, rank: int) -> Path:
        return tmp_path / f"{name}-rank{rank}.json"

    runs = [
        [(s, *configs[name], str(path(name, rank))) for name, s in scenarios.items()]
        for rank in range(world)
    ]
    joined = run_processes(
        _rank_main, [(rank, runs[rank]) for rank in range(world)], JOIN_TIMEOUT_S
    )
    assert not joined.hung, f"ranks {joined.hung} hung (collective mismatch?)"
    assert joined.exitcodes == [0] * world
    return {
        name: [json.loads(path(name, rank).read_text()) for rank in range(world)]
        for name in scenarios
    }


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_ranks(tmp_path_factory.mktemp("two-ranks"), 2)


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_ranks(tmp_path_factory.mktemp("three-ranks"), 3)


def _check_cadence(results: list[dict[str, Any]], shrink_to: int | None) -> None:
    world = len(results)
    steps = {rank: result["steps"] for rank, result in enumerate(results)}
    saw = {"frozen": 0, "open-admitting": 0, "all_reduce": 0}
    for index in range(STEPS):
        ranks = [r for r in range(world) if index < len(steps[r])]
        if shrink_to is not None and index >= SHRINK_AT:
            assert ranks == list(range(shrink_to))
        else:
            assert ranks == list(range(world))
        recs = [steps[r][index] for r in ranks]
        for rank, rec in zip(ranks, recs, strict=True):
            gathers = [c for c in rec["calls"] if c != "all_reduce"]
            assert len(gathers) == 1, f"rank {rank} step {index}: {rec['calls']}"
            # The gather comes after upstream's sync (deadlock lesson B).
            assert rec["calls"][-1] == gathers[0], rec["calls"]
            assert rec["gather_payloads"] == [[rec["payload"]]]
            assert rec["on_dp_group"] and rec["scheduler_group_is_engine_group"]
            assert rec["buffer_size"] == rec["group_size"] == len(ranks)
            saw["all_reduce"] += rec["calls"].count("all_reduce")
        vector = recs[0]["vector"]
        assert all(rec["vector"] == vector for rec in recs), f"step {index}"
        assert all(rec["cap"] == CAP for rec in recs)
        assert vector == [rec["payload"] for rec in recs]
        frozen = max(vector) == CAP  # the contract's decision, independently
        assert [rec["frozen"] for rec in recs] == [frozen] * len(ranks)
        assert len({rec["unfinished"] for rec in recs}) == 1
        if index + 1 < STEPS:
            nxt = [steps[r][index + 1] for r in ranks if index + 1 < len(steps[r])]
            if frozen:
                saw["frozen"] += 1
                assert all(rec["admitted"] == 0 for rec in nxt), f"step {index + 1}"
            elif any(rec["admitted"] for rec in nxt):
                saw["open-admitting"] += 1
    # The run exercised both sides of the gate and upstream's real sync.
    assert saw["frozen"] > 0 and saw["open-admitting"] > 0, saw
    assert saw["all_reduce"] > 0, saw


def test_gather_cadence_two_ranks_then_disabled(two_ranks: dict[str, Any]) -> None:
    results = two_ranks["cadence"]
    _check_cadence(results, None)
    for rank, result in enumerate(results):
        disabled = result["disabled"]
        assert len(disabled) == DISABLED_STEPS
        calls = [name for rec in disabled for name in rec["calls"]]
        assert calls and set(calls) == {"all_reduce"}, (rank, calls)
        assert not any(rec["has_buffer"] for rec in disabled)


def test_gather_cadence_three_ranks_elastic_shrink(
    three_ranks: dict[str, Any],
) -> None:
    results = three_ranks["cadence"]
    _check_cadence(results, 2)
    assert len(results[2]["steps"]) == SHRINK_AT
    for rank in (0, 1):
        sizes = [rec["buffer_size"] for rec in results[rank]["steps"]]
        assert sizes == [3] * SHRINK_AT + [2] * (STEPS - SHRINK_AT)


POLICY_SCENARIOS = [
    name for name, s in SCENARIOS[2].items() if s.policy != "leader_at_cap"
]


@pytest.mark.parametrize("name", POLICY_SCENARIOS)
def test_opt_in_policies_stay_one_exchange_per_step(
    two_ranks: dict[str, Any], name: str
) -> None:
    """Every opt-in policy, on the all-gather and on the log-depth exchange
    (its default): still exactly one exchange per step per rank, after
    upstream's sync, carrying the policy's quantities (``len(running)``
    first); every rank receives the same rows (all-gather) and decides the
    same; a frozen step admits nothing anywhere."""
    scenario = SCENARIOS[2][name]
    results = two_ranks[name]
    steps = [result["steps"] for result in results]
    kind = "all_gather" if scenario.collective == "all_gather" else "log_depth"
    frozen_steps = 0
    for index in range(STEPS):
        recs = [ranked[index] for ranked in steps]
        for rec in recs:
            gathers = [c for c in rec["calls"] if c != "all_reduce"]
            assert gathers == [kind], f"step {index}: {rec['calls']}"
            assert rec["calls"][-1] == gathers[0], rec["calls"]
            (sent,) = rec["gather_payloads"]
            assert len(sent) == rec["width"] > 1 and sent[0] == rec["payload"], sent
        if kind == "all_gather":
            assert recs[0]["vector"] == recs[1]["vector"], f"step {index}"
            running = [row[0] for row in recs[0]["vector"]]
            assert running == [r["payload"] for r in recs]
        else:
            assert all(rec["vector"] is None for rec in recs)  # no per-rank rows
        assert len({rec["frozen"] for rec in recs}) == 1, f"step {index}"
        if recs[0]["frozen"] and index + 1 < STEPS:
            frozen_steps += 1
            assert all(ranked[index + 1]["admitted"] == 0 for ranked in steps)
    assert frozen_steps > 0, f"the skewed load never froze {name}"


@pytest.mark.parametrize("policy", ["queued_leader", "throttled"])
def test_both_exchanges_decide_the_same_on_real_gloo(
    two_ranks: dict[str, Any], policy: str
) -> None:
    """The same load on both exchanges: the same decision on every step
    (every signal combines by an idempotent operation)."""

    def decisions(collective: str) -> list[list[tuple[bool, int]]]:
        return [
            [(rec["frozen"], rec["fail_opens"]) for rec in result["steps"]]
            for result in two_ranks[f"{policy}-{collective}"]
        ]

    assert decisions("all_gather") == decisions("all_reduce_max")


def test_single_process_buffer_follows_group_size() -> None:
    """The buffer is sized from ``group.size()`` at every gather; a fake
    group (the only way to change size without more processes) exercises a
    grow as well as the shrink covered above."""
    from unittest import mock

    from vllm.v1.core.sched.scheduler import Scheduler

    from tests.support.vllm_objects import make_scheduler
    from vllm_ascend_balance.wiring import composition

    class SizedGroup:
        def __init__(self, size: int) -> None:
            self._size = size

        def size(self) -> int:
            return self._size

    def fake_gather(
        tensor_list: list[torch.Tensor], tensor: torch.Tensor, group=None, **_: Any
    ):
        for slot in tensor_list:
            slot.fill_(int(tensor.item()))

    scheduler: Any = make_scheduler(
        composition.compose_scheduler(Scheduler), max_num_seqs=CAP
    )
    with mock.patch.object(dist, "all_gather", fake_gather):
        for size in (2, 2, 5, 3):
            scheduler.dp_group = SizedGroup(size)
            scheduler.admission_gather()
            assert scheduler.balance_gathered.numel() == size
    assert scheduler.balance_gathers == 4


# --------------------------------------------------------------------------
# Bounded freeze across real processes


def _check_bounded(
    results: list[dict[str, Any]], bound: int, shrink_to: int | None
) -> dict[str, int]:
    """Every rank takes the same decision at every step (frozen, open or
    fail-open) from the same vectors; no frozen run is longer than ``bound``;
    the decisions are the bounded contract's, with the run restarted when the
    group is replaced. Returns what happened."""
    world = len(results)
    steps = {rank: result["steps"] for rank, result in enumerate(results)}
    saw = {"frozen": 0, "fail-open": 0}
    run = 0
    previous = dict.fromkeys(range(world), 0)
    for index in range(STEPS):
        ranks = [r for r in range(world) if index < len(steps[r])]
        if shrink_to is not None and index == SHRINK_AT:
            run = 0  # the replaced group restarts the run on every member
        states = []
        for rank in ranks:
            rec = steps[rank][index]
            state = "frozen" if rec["frozen"] else "open"
            if rec["fail_opens"] > previous[rank]:
                state = "fail-open"
            previous[rank] = rec["fail_opens"]
            states.append(state)
        assert len(set(states)) == 1, (
            f"decision differs across ranks at step {index}: {states}"
        )
        vector = steps[ranks[0]][index]["vector"]
        at_cap = max(vector) == CAP
        if not at_cap:
            expected = "open"
        elif run < bound:
            expected = "frozen"
        else:
            expected = "fail-open"
        assert states[0] == expected, f"wrong decision at step {index}: {vector}"
        run = run + 1 if expected == "frozen" else 0
        assert run <= bound
        saw[expected] = saw.get(expected, 0) + 1
    return saw


@pytest.mark.parametrize(
    ("world", "shrink_to"),
    # The shrink is covered per version by the cadence test above.
    [(2, None), pytest.param(3, 2, marks=pytest.mark.lane_scope("release"))],
)
def test_bounded_freeze_same_decision_on_every_rank(
    request: pytest.FixtureRequest, world: int, shrink_to: int | None
) -> None:
    ranks = "two_ranks" if world == 2 else "three_ranks"
    results = request.getfixturevalue(ranks)["bounded"]
    saw = _check_bounded(results, 2, shrink_to)
    assert saw["frozen"] > 0 and saw["fail-open"] > 0, saw


@pytest.mark.lane_scope("release")  # the check's power, not vLLM's behaviour
def test_bounded_negative_control_per_rank_counter(
    two_ranks: dict[str, Any],
) -> None:
    """A per-rank counter makes ranks open on different steps; the check
    must catch it."""
    results = two_ranks["per-rank-counter"]
    with pytest.raises(AssertionError, match="decision differs across ranks"):
        _check_bounded(results, 2, None)
