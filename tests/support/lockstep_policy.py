# SPDX-License-Identifier: Apache-2.0
"""The lock-step property harness of the windowed gate policies
(``tests/test_{aligned,cohort,batched}_properties.py``).

Real ``Scheduler``/``AsyncScheduler`` objects, one per DP rank, step in lock
step in one process through generated workloads (the lock-step scenarios of
``test_gate_properties.py``), each running the package's real
``admission_gather()`` over the simulated engine's ``BoardGroup`` (torch's
own ``dist.all_gather`` on a duck-typed group; only the transport is stood
in for) before every step. The test posts each rank's payload, read from the
scheduler's queues by its own code (:func:`payload`), so the board also
checks that the mixin sends exactly that. :func:`policy_trace` checks, each
assertion naming its property:

a. every rank takes the same decision and keeps the same run state
   ("decision differs across ranks");
b. the decision equals :func:`expected`, an oracle written from the
   policy's docstring independently of the package: the policy's own freeze
   rule under the deadline the three share ("wrong decision");
c. the deadline bounds every hold: no run of frozen steps on which some
   rank held a request is longer than the deadline D ("held past the
   deadline");
d. on a frozen step no rank admits a request from WAITING ("left WAITING");
e. for a policy that holds chunks (``throttled``): on a frozen step no rank
   with a decode to run schedules a prefill chunk already in flight ("chunk
   ran while frozen"); each step runs ``schedule(throttle_prefills)`` as the
   engine hook asks (``balance_throttles()``).

A policy's test brings a :class:`Policy` (its payload columns, freeze rule,
settings, examples, coverage labels) and its known-bad gates, built by
:func:`with_gate` from :func:`local_view`, :func:`rule_gate` or
:class:`LeakyGate`, or by :func:`off_by_one` (re-exported here from
:mod:`tests.support.known_bad_gates`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

# The known-bad gates, re-exported: the policies' tests build theirs here.
from tests.support.known_bad_gates import LeakyGate as LeakyGate
from tests.support.known_bad_gates import Make
from tests.support.known_bad_gates import local_view as local_view
from tests.support.known_bad_gates import off_by_one as off_by_one
from tests.support.known_bad_gates import rule_gate as rule_gate
from tests.support.known_bad_gates import with_gate as with_gate
from tests.test_gate_properties import (
    LockstepScenario,
    Rig,
    Scenario,
    hypothesis_settings,
    lockstep_scenarios,
)
from vllm_ascend_balance.gate.scheduler import admission_cap
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard

#: One rank's payload: ``len(running)``, then the policy's flags (0 or 1).
Row = tuple[int, ...]
#: ``(row, since, cap, setting) -> frozen``: a policy's freeze rule, with
#: ``since`` the gathers since the last opening that had a request to admit.
Rule = Callable[[list[Row], float, int, Any], bool]
#: ``(row, decision) -> the coverage labels the policy wants``.
Classify = Callable[[list[Row], str], Iterable[str]]

#: A per-step token budget small enough that the generated prompts (1-24
#: tokens) are chunked, so "riding" is exercised.
CHUNKED = 16
#: A budget no generated prompt reaches: nothing is chunked.
UNCHUNKED = 512


@dataclasses.dataclass(frozen=True)
class Setting:
    window: int
    deadline: int


SETTINGS = st.builds(Setting, window=st.integers(1, 6), deadline=st.integers(1, 4))


@dataclasses.dataclass(frozen=True)
class Policy:
    """What a windowed policy's property test brings to the harness."""

    #: Its payload after ``len(running)``: names known to :func:`payload`.
    columns: tuple[str, ...]
    #: Its freeze rule, from its docstring; :func:`expected` adds the deadline.
    rule: Rule
    #: Its generated knobs: anything with ``.deadline`` that ``make`` reads.
    settings: st.SearchStrategy[Any]
    #: What the generated traces must reach, so the properties are not
    #: checked on easy traces only.
    reached: frozenset[str]
    #: Its own coverage labels of a gather.
    classify: Classify
    #: ``(scenario, setting)`` pairs run before the generated ones.
    examples: tuple[tuple[LockstepScenario, Any], ...] = ()
    budget: int = UNCHUNKED
    #: The class sends ``len(running)`` alone (the contract without a
    #: bound): the board is posted that, the columns are still computed.
    flagless: bool = False
    #: The columns whose flag makes a frozen gather count toward the
    #: deadline (``throttled``: a chunk in flight counts as a held request).
    counts: tuple[str, ...] = ("held",)
    #: Property (e) is checked (the policy holds chunks in flight).
    holds_chunks: bool = False


def payload(scheduler: Any, columns: tuple[str, ...], budget: int) -> Row:
    """``(len(running), *columns)`` from the scheduler's queues: held =
    waiting below the cap, queued = waiting at it, idle = below the cap with
    nothing waiting, starved = waiting with nothing running, riding = a
    running prompt with at least half the budget left to compute, chunk =
    below the cap with a running prompt not fully computed."""
    running = len(scheduler.running)
    below = running < admission_cap(scheduler)
    waiting = len(scheduler.waiting) > 0
    flags = {
        "held": waiting and below,
        "queued": waiting and not below,
        "idle": below and not waiting,
        "starved": waiting and running == 0,
        "riding": any(
            r.num_prompt_tokens - r.num_computed_tokens >= budget // 2
            for r in scheduler.running
        ),
        "chunk": below
        and any(r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.running),
    }
    return (running, *(int(flags[name]) for name in columns))


def anyone(row: list[Row]) -> tuple[bool, ...]:
    """Each flag column: whether some rank set it."""
    return tuple(any(r[i] for r in row) for i in range(1, len(row[0])))


def expected(
    rows: list[list[Row]],
    cap: int,
    s: Any,
    rule: Rule,
    counted: Callable[[list[Row]], bool] | None = None,
) -> list[str]:
    """The oracle: per gather ``"frozen"``, ``"open"`` or ``"fail-open"``.
    ``rule`` freezes or not; after D consecutive frozen gathers on which some
    rank held a request (``counted``: another test of a row) the gate opens,
    whichever rule froze it (a frozen gather with nothing held does not
    count)."""
    decisions: list[str] = []
    held_run = 0
    last_open = None  # step of the last opening that had a request to admit
    for step, row in enumerate(rows):
        held = counted(row) if counted else any(r[1] for r in row)
        since = math.inf if last_open is None else step - last_open
        freeze = rule(row, since, cap, s)
        if freeze and held and held_run >= s.deadline:
            decisions.append("fail-open")
            held_run = 0
        elif freeze:
            decisions.append("frozen")
            held_run += held
        else:
            decisions.append("open")
            held_run = 0
        if held and decisions[-1] != "frozen":
            last_open = step
    return decisions


def _gather(ranks: list[Rig], groups: list[BoardGroup], step: int, row: Any) -> str:
    """Every rank's ``admission_gather()``; (a) they agree. The decision."""
    states, runs = [], set()
    for rig, group in zip(ranks, groups, strict=True):
        sched = rig.scheduler
        before = sched.balance_fail_opens
        sched.dp_group = group
        sched.admission_gather()
        state = "frozen" if sched.balance_frozen else "open"
        if sched.balance_fail_opens > before:
            state = "fail-open"
        states.append(state)
        # ``since``: the windowed policies' run state; the others have none.
        runs.add((sched.balance_frozen_run, getattr(sched._balance_rule, "since", 0)))
    assert len(set(states)) == 1 and len(runs) == 1, (
        f"decision differs across ranks at step {step}: {states} {runs} for {row}"
    )
    return states[0]


def policy_trace(
    policy: Policy, make: Make, scenario: LockstepScenario, s: Any
) -> set[str]:
    """Run every rank in lock step, a gather before each step, and check the
    properties; the coverage labels reached."""
    cap = scenario.cap
    ranks = [
        Rig(
            make(scenario.base, s),
            Scenario(scenario.base, cap, 400, policy.budget, scenario.horizon, reqs),
        )
        for reqs in scenario.requests
    ]
    board = GatherBoard(len(ranks))
    groups = [BoardGroup(board, rank) for rank in range(len(ranks))]
    rows: list[list[Row]] = []
    decided: list[str] = []
    seen: set[str] = set()
    held_run = 0
    counted = counter(policy)
    for step in range(scenario.horizon):
        for rig in ranks:
            rig.arrive(step)
        row = [payload(rig.scheduler, policy.columns, policy.budget) for rig in ranks]
        rows.append(row)
        board.post([(r[0], () if policy.flagless else r[1:]) for r in row])
        state = _gather(ranks, groups, step, row)
        decided.append(state)
        if state == "frozen" and counted(row):
            held_run += 1
            seen.add("held while frozen")
        elif state != "frozen":
            held_run = 0
        assert held_run <= s.deadline, (
            f"held past the deadline D={s.deadline} at step {step}"
        )
        if held_run == s.deadline:
            seen.add("held up to the deadline")
        seen.add(state)
        seen.update(policy.classify(row, state))
        for rig in ranks:
            running = rig.scheduler.running if policy.holds_chunks else []
            chunks = {r.request_id for r in running if r.is_prefill_chunk}
            decoding = len(chunks) < len(running)
            out = rig.schedule(step)
            if state == "frozen":
                assert out["new"] == [] and out["resumed"] == [], "left WAITING"
            if state == "frozen" and decoding and chunks:
                seen.add("chunk held")
                ran = chunks & set(out["num_scheduled_tokens"])
                assert not ran, f"chunk ran while frozen at step {step}: {ran}"
    assert decided == expected(rows, cap, s, policy.rule, counted), "wrong decision"
    return seen


def counter(policy: Policy) -> Callable[[list[Row]], bool]:
    """Whether a gather counts toward the deadline: some rank sets one of
    the policy's :attr:`Policy.counts` columns."""
    at = [1 + policy.columns.index(name) for name in policy.counts]
    return lambda row: any(r[i] for r in row for i in at)


def check(policy: Policy, make: Make, negative: bool = False) -> set[str]:
    """The properties over the policy's examples and generated traces
    (derandomized for a negative control); the coverage labels reached."""
    covered: set[str] = set()

    @given(scenario=lockstep_scenarios(), s=policy.settings)
    def run(scenario: LockstepScenario, s: Any) -> None:
        for what in policy_trace(policy, make, scenario, s):
            covered.add(what)
            event(what)

    for scenario, s in policy.examples:
        run = example(scenario=scenario, s=s)(run)
    hypothesis_settings(80, negative)(run)()
    return covered


def check_reached(policy: Policy, make: Make) -> None:
    """The properties hold and the traces reached every label required."""
    missing = policy.reached - check(policy, make)
    assert not missing, f"the generated traces never reached {missing}"


def check_fails(policy: Policy, make: Make, reason: str) -> None:
    """A negative control: the known-bad ``make`` fails the property named
    by ``reason``."""
    with pytest.raises(AssertionError, match=reason):
        check(policy, make, negative=True)
