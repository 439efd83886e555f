# SPDX-License-Identifier: Apache-2.0
"""The lock-step harness of every gate policy's property test, checked
against the reference model :mod:`tests.support.gate_oracle`.

N real ``Scheduler``/``AsyncScheduler`` objects, one per DP rank, composed
with the gate, step in lock step in one process through a generated
:class:`Trace`. Each active step, as the engine runs it:

1. every rank's ``admission_payload()`` is posted on the simulated engine's
   :class:`~vllm_ascend_balance.replay.sim.dp_group.GatherBoard`, then each
   rank's ``admission_gather()`` runs over its
   :class:`~vllm_ascend_balance.replay.sim.dp_group.BoardGroup` (torch's own
   ``dist.all_gather`` on a duck-typed group; only the transport is stood
   in for); the oracle decides from each rank's queues as the harness reads
   them (:func:`observe`);
2. the step's requests arrive (the engine adds requests after the DP sync,
   so they meet the decision already taken);
3. every rank runs ``schedule(throttle_prefills=...)`` as the engine hook
   asks (``balance_throttles()``), then ``update_from_output`` with the
   suite's fake model; the oracle counts the holds from the
   ``SchedulerOutput`` (never from the gate's ledger).

At a trace's ``regroup`` step every rank gets a new group object (and a new
rank may join), as elastic EP replaces the DP group.

Properties, each failure message starting with its letter:

a. every rank takes the same decision and keeps the same frozen run;
b. the decision (hold admission, hold chunks, fail-open) equals the
   oracle's;
c. with the hold bound N no request is held more than N steps before its
   prefill completes; with the frozen-run bound N no run of steps holding
   admission is longer than N;
d. on a step that holds admission no rank admits a request from WAITING;
e. on a step that holds chunks no rank with a decode runs a prefill chunk
   in flight;
f. chunks are never held on a step where no rank is *held*;
g. each rank's ``balance_frozen_gathers`` is the number of its gathers
   whose decision held admission.

A trace runs to its end; every property violated is reported (its first
step), so a negative control shows the property it breaks whatever else
breaks with it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from tests.support.gate_oracle import GateOracle, RankState, StepRun
from tests.support.scheduler_rig import (
    BASES,
    Req,
    Rig,
    Scenario,
    hypothesis_settings,
)
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.wiring.composition import compose_scheduler

#: The queues whose requests the gate holds (docs/gate-contract.md).
HELD_QUEUES = ("waiting", "skipped_waiting", "async_kv_waiting")
#: KV blocks per rank: enough for any generated workload (none preempted).
BLOCKS = 400


@dataclass(frozen=True)
class Gate:
    """The gate under test as configured: what the oracle models and what
    :func:`compose` builds."""

    policy: str
    max_held_steps: int | None = None
    max_frozen_steps: int | None = None
    align_window: int | None = None
    timeout_iters: int | None = None
    batching_wait_iters: int | None = None

    def settings(self) -> GateSettings:
        knobs = tuple(
            (key, value)
            for key, value in (
                ("balance_align_window", self.align_window),
                ("balance_timeout_iters", self.timeout_iters),
                ("balance_batching_wait_iters", self.batching_wait_iters),
            )
            if value is not None
        )
        # The simulated group serves all_gather only; both exchanges give
        # the same view (tests/test_collectives.py).
        return GateSettings(
            policy=self.policy,
            knobs=knobs,
            max_frozen_steps=self.max_frozen_steps,
            max_held_steps=self.max_held_steps,
            collective="all_gather",
        )

    def oracle(self) -> GateOracle:
        return GateOracle(
            self.policy,
            max_held_steps=self.max_held_steps,
            max_frozen_steps=self.max_frozen_steps,
            align_window=self.align_window,
            timeout_iters=self.timeout_iters,
            batching_wait_iters=self.batching_wait_iters,
        )


#: A rank's decision: ``(hold admission, hold chunks, fail-open)``.
Taken = tuple[bool, bool, bool]
#: ``(base scheduler class, gate) -> the class under test``.
Make = Callable[[type, Gate], type]
#: ``(board, rank) -> the rank's DP group object``.
Group = Callable[[GatherBoard, int], Any]


def compose(base: type, gate: Gate) -> type:
    """The package's composition of ``gate`` onto ``base``."""
    return compose_scheduler(base, gate.settings())


@dataclass(frozen=True)
class Trace:
    """A lock-step workload: ``ranks[r]`` are rank r's requests; at step
    ``regroup`` the DP group object is replaced and ``joiner`` (if any)
    joins as a new rank."""

    base: type
    cap: int
    budget: int
    horizon: int
    ranks: tuple[tuple[Req, ...], ...]
    regroup: int | None = None
    joiner: tuple[Req, ...] | None = None
    blocks: int = BLOCKS


def _reqs(draw: st.DrawFn, horizon: int, start: int, n: int, longest: int) -> list[Req]:
    return [
        (
            draw(st.integers(start, horizon - 1)),
            draw(st.integers(1, longest)),
            draw(st.integers(1, 30)),
        )
        for _ in range(n)
    ]


@st.composite
def workloads(draw: st.DrawFn, cap: int, horizon: int, start: int = 0) -> list[Req]:
    """One rank's requests: a leader (more long decodes than the cap, one
    of them maybe a long prompt), one long prompt at light load, a stream
    of short requests, a generated mix, or nothing."""
    kind = draw(st.sampled_from(["leader", "long", "stream", "mix", "mix", "idle"]))
    if kind == "leader":
        prompts = st.one_of(st.integers(4, 40), st.integers(64, 160))
        return [
            (start, draw(prompts), draw(st.integers(12, 60)))
            for _ in range(cap + draw(st.integers(1, 2)))
        ] + _reqs(draw, horizon, start, draw(st.integers(0, 2)), 24)
    if kind == "long":
        decodes = [(start, 4, 40) for _ in range(draw(st.integers(0, cap - 1)))]
        at = draw(st.integers(start, max(start, horizon // 2)))
        return decodes + [(at, draw(st.integers(64, 160)), 4)]
    if kind == "stream":
        every = draw(st.integers(2, 4))
        decode = [(start, 4, 60)] if cap > 1 else []
        return decode + [(at, 4, 4) for at in range(start + 1, horizon, every)]
    if kind == "mix":
        return _reqs(draw, horizon, start, draw(st.integers(1, 6)), 48)
    return []


@st.composite
def traces(draw: st.DrawFn, max_horizon: int = 28) -> Trace:
    """Generated lock-step traces: small token budgets (prompts chunked,
    ranks at the cap with chunks in flight), leaders that stay at the cap,
    long prompts at light load, idle ranks starved by their first arrival,
    arrivals on every step, the DP group replaced mid-trace, and sometimes
    KV pressure (preemptions)."""
    cap = draw(st.integers(1, 4))
    horizon = draw(st.integers(6, max_horizon))
    ranks = [draw(workloads(cap, horizon)) for _ in range(draw(st.integers(2, 3)))]
    regroup = draw(st.one_of(st.none(), st.integers(1, horizon - 1)))
    # One trace in four with few KV blocks: upstream preempts (and then
    # asks no seam on that step).
    pressure = draw(st.integers(0, 3)) == 0
    blocks = draw(st.integers(16, 40)) if pressure else BLOCKS
    joiner = None
    if regroup is not None and draw(st.booleans()):
        joiner = tuple(draw(workloads(cap, horizon, regroup)))
    return Trace(
        base=draw(st.sampled_from(BASES)),
        cap=cap,
        budget=draw(st.sampled_from([16, 24])),
        horizon=horizon,
        ranks=tuple(tuple(r) for r in ranks),
        regroup=regroup,
        joiner=joiner,
        blocks=blocks,
    )


def observe(sched: Any) -> RankState:
    """A rank's state as the contract page defines it, read off its
    scheduler's queues."""
    running = list(sched.running)
    return RankState(
        running=len(running),
        # The admission cap: max_num_active_reqs where the release has it.
        cap=getattr(sched, "max_num_active_reqs", None) or sched.max_num_running_reqs,
        waiting=tuple(
            r.request_id
            for name in HELD_QUEUES
            for r in (getattr(sched, name, None) or ())
        ),
        chunks=tuple(r.request_id for r in running if r.is_prefill_chunk),
        decode=any(not r.is_prefill_chunk for r in running),
        paused=getattr(sched, "num_waiting_for_streaming_input", 0),
    )


class Lockstep:
    """One trace run on real schedulers, checked step by step."""

    def __init__(self, trace: Trace, gate: Gate, make: Make, group: Group) -> None:
        self.trace, self.gate, self.group = trace, gate, group
        self.cls = make(trace.base, gate)
        self.ranks: list[Rig] = []
        self.frozen_gathers: list[int] = []
        for requests in trace.ranks:
            self._join(requests)
        self.oracle = gate.oracle()
        self.groups = self._groups()
        self.violations: dict[str, str] = {}
        self.seen: set[str] = set()
        self.frozen_run = 0
        self.unrestarted: GateOracle | None = None

    def _join(self, requests: tuple[Req, ...]) -> None:
        t = self.trace
        scenario = Scenario(t.base, t.cap, t.blocks, t.budget, t.horizon, requests)
        self.ranks.append(Rig(self.cls, scenario, prefix=f"r{len(self.ranks)}-"))
        self.frozen_gathers.append(0)

    def _groups(self) -> list[Any]:
        board = GatherBoard(len(self.ranks))
        self.board = board
        return [self.group(board, rank) for rank in range(len(self.ranks))]

    def fail(self, prop: str, message: str) -> None:
        self.violations.setdefault(prop, f"{prop} {message}")

    def run(self) -> None:
        for step in range(self.trace.horizon):
            self.step(step)
        for rank, rig in enumerate(self.ranks):
            got = rig.scheduler.balance_frozen_gathers
            if got != self.frozen_gathers[rank]:
                self.fail(
                    "(g)",
                    f"frozen gathers miscounted on rank {rank}: "
                    f"{got} != {self.frozen_gathers[rank]} gathers that held",
                )

    def regroup(self, step: int) -> None:
        """At the trace's regroup step: a new group object for every rank
        (and the joiner). A copy of the oracle that does not restart runs
        beside it from then on, for coverage: the traces must reach a
        restart that changes a decision."""
        if step != self.trace.regroup:
            return
        if self.trace.joiner is not None:
            self._join(self.trace.joiner)
            self.seen.add("rank joined")
        self.groups = self._groups()
        self.frozen_run = 0  # the frozen-run bound restarts with the group
        self.unrestarted = copy.deepcopy(self.oracle)
        self.oracle.restart()

    def exchange(self, step: int) -> tuple[list[RankState], list[Taken]]:
        """Post, gather, decide; checks (a) and (b). Each rank's decision,
        as ``(hold admission, hold chunks, fail-open)``."""
        self.regroup(step)
        states = [observe(rig.scheduler) for rig in self.ranks]
        self.board.post([rig.scheduler.admission_payload() for rig in self.ranks])
        taken: list[Taken] = []
        runs = []
        for rig, group in zip(self.ranks, self.groups, strict=True):
            sched = rig.scheduler
            opened = sched.balance_fail_opens
            sched.dp_group = group
            sched.admission_gather()
            taken.append(
                (
                    bool(sched.balance_frozen),
                    bool(sched.balance_decision.hold_chunks),
                    sched.balance_fail_opens > opened,
                )
            )
            runs.append(sched.balance_frozen_run)
        holds = self.oracle.holds
        if any(s.decode and any(holds.get(c) for c in s.chunks) for s in states):
            self.seen.add("a held request is a chunk in flight")
        expected = self.oracle.decide(states)
        unrestarted = self.unrestarted
        if unrestarted is not None:
            unrestarted.holds = dict(holds)  # holds are observed, not run state
            if unrestarted.decide(states).parts() != expected.parts():
                self.seen.add("regroup changed the decision")
        if len(set(taken)) != 1 or len(set(runs)) != 1:
            self.fail(
                "(a)",
                f"ranks disagree at step {step}: decisions {taken}, frozen runs {runs}",
            )
        if taken[0] != expected.parts():
            self.fail(
                "(b)",
                f"differs from the oracle at step {step}: gate "
                f"(hold admission, hold chunks, fail-open) = {taken[0]}, oracle "
                f"{expected.parts()} by {expected.rule!r}; states {states}",
            )
        for rank, (frozen, _, _) in enumerate(taken):
            self.frozen_gathers[rank] += frozen
        return states, taken

    def step(self, step: int) -> None:
        states, taken = self.exchange(step)
        frozen, chunks, opened = taken[0]
        self.frozen_run = self.frozen_run + 1 if frozen else 0
        labels = self.seen
        labels.add("held" if frozen else ("fail-open" if opened else "open"))
        if any(s.starved for s in states):
            labels.add("starved rank")
        if not any(s.waiting for s in states) and any(
            s.chunks and s.decode for s in states
        ):
            labels.add("chunk in flight, nothing waiting")
        anyone_held = any(s.held for s in states)
        if chunks and not anyone_held:
            self.fail("(f)", f"chunks held with no rank held at step {step}")
        for rank, rig in enumerate(self.ranks):
            if rig.arrive(step) and frozen:
                labels.add("arrival on a held step")
            # (d), (e) and the holds: by the decision this rank took.
            self.schedule(step, rank, rig, *taken[rank][:2], anyone_held)
        self.bound(step)

    def schedule(
        self, step: int, rank: int, rig: Rig, frozen: bool, chunks: bool, held: bool
    ) -> None:
        sched = rig.scheduler
        before = observe(sched)
        throttle = rig.throttles()
        if throttle and not held:
            self.fail("(f)", f"rank {rank} throttled with no rank held at step {step}")
        out = rig.run(step, throttle)
        if out.preempted_req_ids:
            self.seen.add("preempted")
        scheduled = frozenset(out.num_scheduled_tokens)
        run = StepRun(
            before=before,
            seam_asked=not out.preempted_req_ids,
            throttled=throttle,
            scheduled=scheduled,
            prefilled=frozenset(
                rid
                for rid in scheduled
                if rid not in sched.requests or not sched.requests[rid].is_prefill_chunk
            ),
        )
        held_now = self.oracle.account(frozen, run)
        admitted = scheduled & set(before.waiting)
        if frozen and (admitted or out.scheduled_new_reqs):
            self.fail(
                "(d)",
                f"admitted from WAITING on a held step {step}, rank {rank}: "
                f"{sorted(admitted)}",
            )
        ran = scheduled & set(before.chunks)
        if chunks and before.decode and ran:
            self.fail(
                "(e)",
                f"chunk ran on a chunk-holding step {step}, rank {rank} "
                f"(with a decode): {sorted(ran)}",
            )
        if set(held_now) & set(before.chunks):
            self.seen.add("chunk held")
            if before.running >= before.cap:
                self.seen.add("chunk held at the cap")

    def bound(self, step: int) -> None:
        held_bound = self.oracle.held_bound
        if held_bound is not None:
            over = {r: n for r, n in self.oracle.holds.items() if n > held_bound}
            if over:
                self.fail(
                    "(c)",
                    f"held more than N={held_bound} steps by step {step}: {over}",
                )
            if held_bound in self.oracle.holds.values():
                self.seen.add("held N times")
        frozen_bound = self.gate.max_frozen_steps
        if frozen_bound is not None:
            if self.frozen_run > frozen_bound:
                self.fail(
                    "(c)",
                    f"frozen run longer than N={frozen_bound} at step {step}",
                )
            if self.frozen_run == frozen_bound:
                self.seen.add("frozen run of N")

    def verdict(self) -> None:
        assert not self.violations, "; ".join(sorted(self.violations.values()))


def run_trace(
    trace: Trace, gate: Gate, make: Make = compose, group: Group = BoardGroup
) -> set[str]:
    """Run one trace and check every property; the coverage labels."""
    lockstep = Lockstep(trace, gate, make, group)
    lockstep.run()
    lockstep.verdict()
    return lockstep.seen


def check(
    gates: st.SearchStrategy[Gate],
    make: Make = compose,
    group: Group = BoardGroup,
    examples: Iterable[tuple[Trace, Gate]] = (),
    negative: bool = False,
    max_examples: int = 60,
) -> set[str]:
    """The properties over ``examples`` then generated traces and gates
    (derandomized for a negative control); the coverage labels reached."""
    covered: set[str] = set()

    @given(trace=traces(), gate=gates)
    def run(trace: Trace, gate: Gate) -> None:
        for what in run_trace(trace, gate, make, group):
            covered.add(what)
            event(what)

    for trace, gate in examples:
        run = example(trace=trace, gate=gate)(run)
    hypothesis_settings(max_examples, negative)(run)()
    return covered


def check_reached(
    gates: st.SearchStrategy[Gate],
    reached: set[str],
    examples: Iterable[tuple[Trace, Gate]] = (),
    max_examples: int = 60,
) -> None:
    """The properties hold on the package's gate, and the traces reached
    every coverage label in ``reached``."""
    missing = reached - check(gates, examples=examples, max_examples=max_examples)
    assert not missing, f"the generated traces never reached {sorted(missing)}"


def check_fails(
    gates: st.SearchStrategy[Gate],
    prop: str,
    make: Make = compose,
    group: Group = BoardGroup,
    examples: Iterable[tuple[Trace, Gate]] = (),
    oracle_gate: Callable[[Gate], Gate] | None = None,
) -> None:
    """A negative control: the known-bad ``make``/``group`` (or a gate built
    with other settings than the oracle's, ``oracle_gate``) fails property
    ``prop`` (its letter, e.g. ``"(c)"``): on one of the hand-made
    ``examples`` (each run on its own, every failure kept), else on the
    generated traces (derandomized)."""
    if oracle_gate is not None:
        bad, real = oracle_gate, make
        make = lambda base, gate: real(base, bad(gate))  # noqa: E731
    errors: list[AssertionError] = []
    for trace, gate in examples:
        try:
            run_trace(trace, gate, make, group)
        except AssertionError as error:
            errors.append(error)
    if not any(prop in str(e) for e in errors):
        with pytest.raises(AssertionError) as info:
            check(gates, make, group, negative=True)
        errors.append(info.value)
    assert any(prop in str(e) for e in errors), (
        f"the control fails, but not property {prop}: {errors}"
    )


def one_more(field_name: str) -> Callable[[Gate], Gate]:
    """The gate's bound ``field_name`` one step late (off by one)."""
    return lambda gate: replace(gate, **{field_name: getattr(gate, field_name) + 1})
