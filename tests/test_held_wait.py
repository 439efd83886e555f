# SPDX-License-Identifier: Apache-2.0
"""The held-wait tracker (``vllm_ascend_balance.observability.held_wait``) on real vLLM
schedulers, stepped by hand as the engine does: ``schedule()``, the fake
model's output, ``update_from_output()``, then the gather position, where
the test sets the gate's decision (``balance_frozen``, as a gather would
from its peers' counts) and the tracker advances. The clock is modeled.

- a scripted scenario: requests held by a freeze while slots are free,
  one arriving during a frozen step, never-held requests observed 0;
- seeded random runs (arrivals, lengths, decisions) against the truth
  taken from the ``SchedulerOutput``s: each admitted request (its
  ``scheduled_new_reqs`` entry) observed once, with the frozen gathers it
  was waiting at and the seconds those decisions held;
- a request that reaches RUNNING without ever being in ``waiting`` at a
  frozen gather (the KV-holding path, releases with ``kv_holding_waiting``)
  observes 0;
- negative controls: two plausible wrong trackers (the interval credited
  by the decision taken at its end, not at its start; never-held
  admissions left out) fail the same checks;
- the front-end and file ends: the observations reach a histogram on an
  isolated registry through the stats carrier, and the engine's files
  through ``MultiProcessCollector``;
- the cost per gather: ``benchmarks/bench_held_wait.py`` (smoke-run by
  ``tests/test_bench_held_wait_smoke.py``).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler
from vllm_ascend_balance.observability import metrics, stats_carrier
from vllm_ascend_balance.observability.held_wait import HeldWait
from vllm_ascend_balance.wiring import composition

# why: real schedulers' queues and SchedulerOutput; vLLM's stat loggers
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


class Clock:
    """A modeled monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    """What a run observed and what the ``SchedulerOutput``s say."""

    observed: Counter[tuple[int, float]] = field(default_factory=Counter)
    truth: Counter[tuple[int, float]] = field(default_factory=Counter)
    admitted_while_frozen: set[str] = field(default_factory=set)


def _gated(**config: Any) -> Any:
    return make_scheduler(composition.compose_scheduler(Scheduler), **config)


def run_steps(
    tracker: Any,
    scheduler: Any,
    clock: Clock,
    decisions: list[bool],
    arrivals: dict[int, list[Any]],
    step_s: list[float],
) -> Run:
    """Step ``scheduler`` ``len(decisions)`` times; gather ``i`` decides
    ``decisions[i]``. ``arrivals[i]``: requests added before step ``i``.
    The truth per admitted request: (frozen gathers it was in ``waiting``
    at before its admission, the seconds from each to the next gather)."""
    run = Run()
    held: dict[str, list[float]] = {}
    open_held: list[list[float]] = []  # truth entries the last decision held
    frozen = False
    for step, decision in enumerate(decisions):
        for request in arrivals.get(step, ()):
            scheduler.add_request(request)
        output = scheduler.schedule()
        for new in output.scheduled_new_reqs:
            entry = held.pop(new.req_id, [0, 0.0])
            run.truth[(int(entry[0]), round(entry[1], 9))] += 1
            if frozen:
                run.admitted_while_frozen.add(new.req_id)
        scheduler.update_from_output(output, fake_model_output(scheduler, output, step))
        clock.now += step_s[step]
        for entry in open_held:
            entry[1] += step_s[step]
        open_held = []
        # The gather position: the decision, then the tracker.
        scheduler.balance_frozen = frozen = decision
        tracker.after_gather(scheduler)
        if decision:
            for request in scheduler.waiting:
                entry = held.setdefault(request.request_id, [0, 0.0])
                entry[0] += 1
                open_held.append(entry)
    seconds, steps = tracker.take()
    assert len(seconds) == len(steps)
    run.observed.update((s, round(t, 9)) for s, t in zip(steps, seconds, strict=True))
    return run


def scripted(tracker_cls: type = HeldWait) -> tuple[Run, Any]:
    """Two slots. r0, r1 (2 tokens) run while r2, r3 wait; the gate freezes
    at gathers 1-3 (r0, r1 done at gather 1: two slots free, held), opens
    at gather 4; r4 arrives during the frozen step after gather 2."""
    clock = Clock()
    tracker = tracker_cls(clock=clock)
    scheduler = _gated(max_num_seqs=2)
    requests = [
        make_request(f"r{i}", 24, max_tokens=2 if i < 2 else 3) for i in range(5)
    ]
    decisions = [False, True, True, True, False, False, False, False, False, False]
    step_s = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12]
    arrivals = {0: requests[:4], 3: requests[4:]}
    run = run_steps(tracker, scheduler, clock, decisions, arrivals, step_s)
    return run, tracker


def check(run: Run, admissions: int) -> None:
    """The tracker agrees with the ``SchedulerOutput``s."""
    assert run.admitted_while_frozen == set(), "the gate did not hold"
    assert sum(run.truth.values()) == admissions, run.truth
    assert run.observed == run.truth


def test_scripted_freeze_is_observed_per_admission() -> None:
    run, tracker = scripted()
    check(run, admissions=5)
    # Frozen gathers 1, 2, 3 each held r2 and r3 for the step after them
    # (0.04 + 0.08 + 0.16 s); r4, arriving after gather 2, only gather 3's.
    assert run.observed == Counter({(0, 0.0): 2, (3, 0.28): 2, (1, 0.16): 1})
    assert tracker.pending == 0


def test_random_runs_match_the_scheduler_outputs() -> None:
    for seed in range(6):
        rng = random.Random(seed)
        clock = Clock()
        tracker = HeldWait(clock=clock)
        scheduler = _gated(max_num_seqs=rng.choice((2, 3, 4)))
        steps = 150  # random decisions for 40, then open: all admitted
        arrivals: dict[int, list[Any]] = {}
        for index in range(24):
            arrivals.setdefault(rng.randrange(30), []).append(
                make_request(
                    f"s{seed}-{index}",
                    rng.randrange(8, 40),
                    max_tokens=rng.randrange(2, 8),
                )
            )
        decisions = [rng.random() < 0.5 for _ in range(40)]
        decisions += [False] * (steps - 40)
        step_s = [rng.choice((0.01, 0.03, 0.1)) for _ in range(steps)]
        run = run_steps(tracker, scheduler, clock, decisions, arrivals, step_s)
        check(run, admissions=24)
        assert any(held for held, _ in run.observed), f"seed {seed}: nothing held"
        assert tracker.pending == 0


class CreditAtClosingGather(HeldWait):
    """Wrong: a step is credited when the gather that *ends* it is frozen
    (the decision it takes governs the next step, not the one ended)."""

    def after_gather(self, scheduler: Any) -> None:
        decision = scheduler.balance_frozen
        scheduler.balance_frozen = getattr(self, "_previous", False)
        super().after_gather(scheduler)
        scheduler.balance_frozen = self._previous = decision


class EntriesOnly(HeldWait):
    """Wrong: only requests that were held are observed, so ``_count`` is
    not the admissions."""

    def take(self) -> tuple[list[float], list[int]]:
        seconds, steps = super().take()
        kept = [(s, n) for s, n in zip(seconds, steps, strict=True) if n]
        return [s for s, _ in kept], [n for _, n in kept]


@pytest.mark.parametrize("wrong", [CreditAtClosingGather, EntriesOnly])
def test_negative_control_wrong_trackers_fail_the_check(wrong: type) -> None:
    run, _ = scripted(wrong)
    with pytest.raises(AssertionError):
        check(run, admissions=5)


def test_aborted_while_held_leaves_no_entry() -> None:
    clock = Clock()
    tracker = HeldWait(clock=clock)
    scheduler = _gated(max_num_seqs=1)
    for i in range(3):
        scheduler.add_request(make_request(f"a{i}", 16, max_tokens=4))
    scheduler.schedule()
    scheduler.balance_frozen = True
    tracker.after_gather(scheduler)
    assert tracker.pending == 2
    from vllm.v1.request import RequestStatus

    scheduler.finish_requests(["a1", "a2"], RequestStatus.FINISHED_ABORTED)
    clock.now += 1.0
    tracker.after_gather(scheduler)
    assert tracker.pending == 0
    assert tracker.take() == ([0.0], [0])  # a0, admitted at the first step


def _kv_consumer_scheduler() -> Any:
    from vllm.config import KVTransferConfig

    from tests.support.vllm_objects import make_vllm_config

    config = make_vllm_config(max_num_seqs=4, block_size=16, num_blocks=200)
    config.kv_transfer_config = KVTransferConfig(
        kv_connector="NixlConnector", kv_role="kv_consumer"
    )
    config.cache_config.kv_cache_layout = "LBNHC"  # as upstream's connector tests
    scheduler = make_scheduler(
        composition.compose_scheduler(Scheduler), vllm_config=config
    )
    if not hasattr(scheduler, "kv_holding_waiting"):
        pytest.skip("this release has no kv_holding_waiting queue")
    return scheduler


class Stepper:
    """Steps a scheduler as the engine does and gathers with ``decision``."""

    def __init__(self, scheduler: Any, tracker: HeldWait, clock: Clock) -> None:
        self.scheduler, self.tracker, self.clock = scheduler, tracker, clock
        self.step = 0
        self.admitted: set[str] = set()

    def advance(self, decision: bool, **kv: set[str]) -> None:
        from vllm.v1.outputs import KVConnectorOutput

        output = self.scheduler.schedule()
        self.admitted |= {r.req_id for r in output.scheduled_new_reqs}
        result = fake_model_output(self.scheduler, output, self.step)
        if kv:
            result.kv_connector_output = KVConnectorOutput(**kv)
        self.scheduler.update_from_output(output, result)
        self.step += 1
        self.clock.now += 0.5
        self.scheduler.balance_frozen = decision
        self.tracker.after_gather(self.scheduler)


def test_kv_holding_path_observes_zero() -> None:
    """A request whose KV arrives by an async load waits in
    ``kv_holding_waiting``, which the gate does not hold: admitted while
    frozen, never held in ``waiting``, it has no mark and observes 0
    (skips where the release has no such queue)."""
    from tests.test_gate_scope import _remote_prefill

    scheduler = _kv_consumer_scheduler()
    clock = Clock()
    tracker = HeldWait(clock=clock)
    stepper = Stepper(scheduler, tracker, clock)
    loading = _remote_prefill("kv0", 64)
    scheduler.add_request(loading)
    stepper.advance(True)  # its KV load starts: kv_holding_waiting
    assert loading in scheduler.kv_holding_waiting
    scheduler.add_request(make_request("new0", 16))
    stepper.advance(True, finished_recving={"kv0"})
    stepper.advance(True)
    stepper.advance(True)
    assert loading.request_id in {r.request_id for r in scheduler.running}
    assert tracker.take() == ([0.0], [0])
    assert tracker.pending == 1  # new0, held by the freeze
    assert "new0" not in stepper.admitted


class NoSettling(HeldWait):
    """Wrong: the KV-holding queue is unknown, so the mark of a held request
    that left ``waiting`` for it is dropped as stale and its held wait lost."""

    kept_queues = ()


@pytest.mark.parametrize("tracker_cls", [HeldWait, NoSettling])
def test_held_then_kv_holding_observes_the_waiting_part(tracker_cls: type) -> None:
    """Held in ``waiting`` through two frozen gathers (1 s), then its KV load
    starts in an open step and it waits in ``kv_holding_waiting`` through
    two more frozen gathers: it observes 2 steps and 1 s, what it waited in
    ``waiting``. The negative control (:class:`NoSettling`) does not."""
    from tests.test_gate_scope import _remote_prefill

    scheduler = _kv_consumer_scheduler()
    clock = Clock()
    tracker = tracker_cls(clock=clock)
    stepper = Stepper(scheduler, tracker, clock)
    loading = _remote_prefill("kv0", 64)
    scheduler.add_request(loading)
    scheduler.balance_frozen = True  # a gather before the first step
    tracker.after_gather(scheduler)
    stepper.advance(True)
    assert loading in scheduler.waiting
    stepper.advance(False)  # held through the step before: still waiting
    assert loading in scheduler.waiting
    stepper.advance(True)  # open step: its KV load starts
    assert loading in scheduler.kv_holding_waiting
    stepper.advance(True, finished_recving={"kv0"})
    stepper.advance(True)
    assert loading.request_id in {r.request_id for r in scheduler.running}
    observed = tracker.take()
    if tracker_cls is NoSettling:
        assert observed != ([1.0], [2]), "the negative control passed"
    else:
        assert observed == ([1.0], [2])


def _families(registry: Any) -> dict[str, dict[str, float]]:
    """``{sample name (+le): value}`` of families with samples only (a
    family registered without a child yields none)."""
    found: dict[str, dict[str, float]] = {}
    for family in registry.collect():
        if not family.samples or not family.name.startswith("vllm:balance_held"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            le = sample.labels.get("le")
            name = sample.name + (f'{{le="{le}"}}' if le else "")
            found.setdefault(name, {})[sample.labels["engine"]] = sample.value
    return found


def test_stats_carrier_reaches_a_histogram_per_engine() -> None:
    """Observations travel in ``SchedulerStats`` to the front-end logger,
    built on an isolated registry (never ``REGISTRY``: a collector left
    there is found empty by a later test)."""
    from prometheus_client import CollectorRegistry

    from tests.support.vllm_objects import make_vllm_config

    registry = CollectorRegistry()
    front = stats_carrier.stat_logger_class()(make_vllm_config(), [0, 1])
    front.registry = registry
    for engine, values in ((0, [0.0, 0.3]), (1, [2.0])):
        scheduler = _gated()
        tracker = HeldWait()
        tracker.seconds, tracker.steps = list(values), [int(v * 10) for v in values]
        stats_carrier.attach(scheduler, tracker)
        front.record(scheduler.make_stats(), None, engine_idx=engine)
        assert tracker.take() == ([], [])
    found = _families(registry)
    assert found["vllm:balance_held_wait_seconds_count"] == {"0": 2, "1": 1}
    assert found["vllm:balance_held_wait_seconds_sum"] == {"0": 0.3, "1": 2.0}
    assert found['vllm:balance_held_wait_seconds_bucket{le="0.0"}'] == {"0": 1, "1": 0}
    assert found["vllm:balance_held_wait_steps_count"] == {"0": 2, "1": 1}


def test_engine_files_reach_the_multiprocess_collector(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    engine_metrics = metrics.EngineBalanceMetrics(3, "m", str(tmp_path), None)
    engine_metrics.held_wait.seconds = [0.0, 0.07, 500.0]
    engine_metrics.held_wait.steps = [0, 1, 300]
    scheduler = _gated()
    engine_metrics.record(scheduler)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    found = _families(registry)
    seconds = "vllm:balance_held_wait_seconds"
    assert found[f"{seconds}_count"] == {"3": 3}
    assert found[f'{seconds}_bucket{{le="0.0"}}'] == {"3": 1}
    assert found[f'{seconds}_bucket{{le="0.1"}}'] == {"3": 2}
    assert found[f'{seconds}_bucket{{le="120.0"}}'] == {"3": 2}
    assert found[f'{seconds}_bucket{{le="+Inf"}}'] == {"3": 3}
    assert found[f"{seconds}_sum"] == {"3": pytest.approx(500.07)}
    steps = "vllm:balance_held_wait_steps"
    assert found[f'{steps}_bucket{{le="1.0"}}'] == {"3": 2}
    assert found[f'{steps}_bucket{{le="256.0"}}'] == {"3": 2}
    assert found[f"{steps}_count"] == {"3": 3}
    assert engine_metrics.held_wait.take() == ([], [])


def test_without_files_the_observations_are_dropped() -> None:
    """Stats off and no metrics directory (e.g. an offline ``LLM``): the
    engine still takes the observations at each record, so none pile up."""
    engine_metrics = metrics.EngineBalanceMetrics(0, "m", None, None)
    engine_metrics.held_wait.seconds, engine_metrics.held_wait.steps = [1.0], [2]
    engine_metrics.record(_gated())
    assert engine_metrics.held_wait.take() == ([], [])
