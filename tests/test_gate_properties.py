# SPDX-License-Identifier: Apache-2.0
"""Property tests of the contract's decision, one gather at a time, on real
vLLM schedulers (the bounds and the policies in lock step:
``test_gate_bounds.py``, ``test_queued_leader_properties.py``,
``test_throttled_properties.py``).

Every scheduler here is a real ``Scheduler`` or ``AsyncScheduler`` of the
installed (patched) vLLM, driven through generated traces: requests of varied
prompt lengths arriving over several steps, KV pressure from a small number
of blocks (so upstream preempts), caps from ``max_num_seqs``, token budgets,
and model outputs fed back through ``update_from_output`` by a deterministic
fake model (:class:`~tests.support.scheduler_rig.Rig`).

The gathered running counts are set by the package's real
``admission_gather()``; only its transport is scripted: the DP group is a
:class:`ScriptedGroup` whose other ranks' counts are generated, and
``torch.distributed.all_gather`` is replaced for the duration of one
gather by a function that writes them (the local entry is the real
payload). The decision therefore comes from the package's own code and is
checked against an independent oracle, :func:`expected_frozen`. The real
transport, on real gloo groups across processes, is covered by
``test_gather_cadence.py``.

Properties (the behaviour-preservation contract, docs/design.md):

a. frozen iff ``max(gathered) == cap`` (a leader at ``cap - 1`` never
   freezes; a new gather recomputes the decision);
b. while frozen no request leaves WAITING, and RUNNING requests get exactly
   the tokens the plain upstream scheduler gives them on the same state;
c. when no other rank is at the cap, every ``SchedulerOutput`` over a
   multi-step trace equals the plain upstream scheduler's;
d. one gathered vector gives the same decision on every rank, whatever each
   rank's local state.

(Balance off is upstream's class itself: ``test_gate_disabled.py``.)

Each property is a function of the gate under test. Negative controls run the
same functions against deliberately wrong gates (``>= cap - 1``, a gate that
never freezes, "catch up to the leader", a rank-local decision) and require
them to fail, so a green run shows the properties can fail.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from hypothesis import event, given
from hypothesis import strategies as st
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.scheduler_rig import (
    BASES,
    BLOCK_SIZE,
    Rig,
    Scenario,
    counts_near,
    hypothesis_settings,
    scenarios,
)
from tests.support.vllm_objects import make_request
from vllm_ascend_balance.gate.scheduler import (
    SEAM,
    BalanceSchedulerMixin,
    admission_cap,
)
from vllm_ascend_balance.wiring import composition

# why: real Scheduler/AsyncScheduler queues, preemption, update_from_output
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


def expected_frozen(gathered: list[int], cap: int) -> bool:
    """The contract's decision, written independently of the package:
    leader-at-cap (``==``, not ``>=``) freezes admission everywhere."""
    return max(gathered) == cap


# --------------------------------------------------------------------------
# Scripted transport for admission_gather() in a single process


class ScriptedGroup:
    """Stands in for the DP ``ProcessGroup``: ``counts[i]`` is what DP rank
    ``i`` contributes; this process is rank ``rank`` and contributes its
    real payload instead of ``counts[rank]``."""

    def __init__(self, rank: int, counts: list[int]) -> None:
        assert 0 <= rank < len(counts)
        self.rank = rank
        self.counts = list(counts)

    def size(self) -> int:
        return len(self.counts)


@contextlib.contextmanager
def scripted_transport() -> Iterator[list[int]]:
    """Replace the collectives ``admission_gather`` may use by scripted ones
    that serve a :class:`ScriptedGroup`; yields the payloads sent."""
    payloads: list[int] = []

    def vector(tensor: torch.Tensor, group: Any) -> list[int]:
        assert isinstance(group, ScriptedGroup), f"gather on {group!r}"
        assert tensor.numel() == 1, "payload must be one count"
        payloads.append(int(tensor.item()))
        counts = list(group.counts)
        counts[group.rank] = payloads[-1]
        return counts

    def all_gather_into_tensor(output, input, group=None, async_op=False):
        counts = vector(input, group)
        assert output.numel() == group.size(), "receive buffer not sized from group"
        output.copy_(torch.tensor(counts, dtype=output.dtype))

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        counts = vector(tensor, group)
        assert len(tensor_list) == group.size(), "receive list not sized from group"
        for slot, count in zip(tensor_list, counts, strict=True):
            slot.fill_(count)

    with (
        mock.patch.object(dist, "all_gather_into_tensor", all_gather_into_tensor),
        mock.patch.object(dist, "all_gather", all_gather),
    ):
        yield payloads


def gather(scheduler: Any, rank: int, counts: list[int]) -> list[int]:
    """Run the real ``admission_gather()`` of ``scheduler`` as DP rank ``rank``
    of a group whose other ranks report ``counts``; return the vector."""
    scheduler.dp_group = ScriptedGroup(rank, counts)
    with scripted_transport() as payloads:
        scheduler.admission_gather()
    assert payloads == [len(scheduler.running)], "one gather of len(running)"
    vector = list(counts)
    vector[rank] = len(scheduler.running)
    assert scheduler.balance_gathered.tolist() == vector
    return vector


# --------------------------------------------------------------------------
# The properties, as functions of the gate under test


Compose = Callable[[type], type]


def compose_with(mixin: type) -> Compose:
    @functools.cache
    def compose(base: type) -> type:
        return type(f"{mixin.__name__}{base.__name__}", (mixin, base), {})

    return compose


# --------------------------------------------------------------------------
# The properties, as functions of the gate under test


def check_decision(compose: Compose, negative: bool = False) -> None:
    """a. frozen iff max(gathered) == cap, recomputed on every gather, and
    the seam answers frozen-or-upstream."""

    @hypothesis_settings(100, negative)
    @given(data=st.data(), scenario=scenarios())
    def run(data: st.DataObject, scenario: Scenario) -> None:
        rig = Rig(compose(scenario.base), scenario)
        scheduler = rig.scheduler
        cap = scenario.cap
        for step in range(data.draw(st.integers(0, scenario.horizon), "warmup")):
            rig.step(step)
        dp_size = data.draw(st.integers(2, 8), "dp_size")
        rank = data.draw(st.integers(0, dp_size - 1), "rank")
        for _ in range(2):  # a second gather must not keep the first decision
            others = data.draw(counts_near(cap, dp_size, cap), "counts")
            vector = gather(scheduler, rank, others)
            frozen = expected_frozen(vector, cap)
            assert scheduler.balance_frozen is frozen, (
                f"wrong decision {scheduler.balance_frozen} for {vector}, cap {cap}"
            )
            if max(vector) == cap - 1:
                assert not scheduler.balance_frozen, "wrong decision: cap - 1 froze"
            upstream = Scheduler.__dict__[SEAM](scheduler)
            assert scheduler._should_stop_admitting_waiting() is (frozen or upstream), (
                "seam is not frozen-or-upstream"
            )

    run()


def frozen_trace(
    compose: Compose,
    scenario: Scenario,
    warmup: int,
    rank: int,
    counts: Callable[[int], list[int]],
) -> set[str]:
    """Run ``warmup`` unfrozen steps on a gated and a plain scheduler (equal
    outputs), then keep the gated one frozen (``counts(step)``, the other
    ranks' counts, puts one of them at the cap) for the rest of the horizon:
    nothing leaves WAITING, and on the first frozen step (identical state)
    RUNNING requests get exactly upstream's tokens. Returns what happened."""
    cap = scenario.cap
    seen: set[str] = set()
    gated = Rig(compose(scenario.base), scenario)
    plain = Rig(scenario.base, scenario)
    for step in range(warmup):
        assert gated.step(step) == plain.step(step)

    for step in range(warmup, scenario.horizon):
        gated.arrive(step)
        vector = gather(gated.scheduler, rank, counts(step))
        assert expected_frozen(vector, cap)
        assert gated.scheduler.balance_frozen

        running = {r.request_id for r in gated.scheduler.running}
        queued = gated.queued()
        out = gated.schedule(step)
        assert out["new"] == [], "left WAITING: admitted while frozen"
        assert out["resumed"] == [], "left WAITING: resumed while frozen"
        assert set(out["num_scheduled_tokens"]) <= running, "left WAITING"
        for req_id, status in queued.items():
            now = gated.scheduler.requests[req_id].status
            assert now == status, f"left WAITING: {req_id} {status} -> {now}"

        if step == warmup:  # identical state to plain upstream: compare
            plain.arrive(step)
            ref = plain.schedule(step)
            assert {
                r: n for r, n in ref["num_scheduled_tokens"].items() if r in running
            } == out["num_scheduled_tokens"], "running tokens differ from upstream"
            assert ref["preempted"] == out["preempted"], "preemption differs"
            if ref["new"] or ref["resumed"]:
                seen.add("frozen: upstream admitted, gate held")
        if out["preempted"]:
            seen.add("frozen: preemption")
    return seen


def check_frozen_holds_waiting(compose: Compose, negative: bool = False) -> None:
    """b. frozen: nothing leaves WAITING (step after step), and RUNNING
    requests get the tokens plain upstream gives them on the same state."""

    @hypothesis_settings(150, negative)
    @given(data=st.data(), scenario=scenarios(min_horizon=2))
    def run(data: st.DataObject, scenario: Scenario) -> None:
        cap = scenario.cap
        warmup = data.draw(st.integers(0, scenario.horizon - 1), "warmup")
        dp_size = data.draw(st.integers(2, 8), "dp_size")
        rank = data.draw(st.integers(0, dp_size - 1), "rank")

        def counts(step: int) -> list[int]:
            others = data.draw(counts_near(cap, dp_size, cap), "counts")
            leader = data.draw(
                st.sampled_from([i for i in range(dp_size) if i != rank]), "leader"
            )
            others[leader] = cap  # another rank is at the cap
            return others

        for what in frozen_trace(compose, scenario, warmup, rank, counts):
            event(what)

    run()


def unfrozen_trace(
    compose: Compose,
    scenario: Scenario,
    rank: int,
    counts: Callable[[int], list[int]],
) -> set[str]:
    """Run a gated and a plain scheduler in lockstep, gathering before every
    step with ``counts(step)`` (no other rank at the cap): every output is
    equal. Returns what happened."""
    cap = scenario.cap
    seen: set[str] = set()
    gated = Rig(compose(scenario.base), scenario)
    plain = Rig(scenario.base, scenario)
    for step in range(scenario.horizon):
        gated.arrive(step)
        plain.arrive(step)
        vector = gather(gated.scheduler, rank, counts(step))
        decided = gated.scheduler.balance_frozen
        plain_out = plain.schedule(step)
        assert gated.schedule(step) == plain_out, (
            f"output differs from upstream at step {step}, gathered {vector}"
        )
        assert decided is expected_frozen(vector, cap), "wrong decision"
        seen.update(
            f"unfrozen: {key}"
            for key in ("new", "preempted", "resumed")
            if plain_out[key]
        )
        if decided:
            seen.add("unfrozen: local rank at its own cap")
    return seen


def check_unfrozen_matches_upstream(compose: Compose, negative: bool = False) -> None:
    """c. no other rank at the cap: every step's output equals plain
    upstream's on the same state (the local rank at its own cap freezes,
    which upstream's own cap check makes a no-op)."""

    @hypothesis_settings(150, negative)
    @given(data=st.data(), scenario=scenarios())
    def run(data: st.DataObject, scenario: Scenario) -> None:
        cap = scenario.cap
        dp_size = data.draw(st.integers(2, 8), "dp_size")
        rank = data.draw(st.integers(0, dp_size - 1), "rank")

        def counts(step: int) -> list[int]:
            return data.draw(counts_near(cap, dp_size, max(cap - 1, 0)), "counts")

        for what in unfrozen_trace(compose, scenario, rank, counts):
            event(what)

    run()


def check_same_decision_every_rank(compose: Compose, negative: bool = False) -> None:
    """d. every rank, whatever its local state, takes the same decision from
    the same gathered vector, and admits accordingly."""

    @hypothesis_settings(60, negative)
    @given(data=st.data(), cap=st.integers(1, 6), dp_size=st.integers(2, 4))
    def run(data: st.DataObject, cap: int, dp_size: int) -> None:
        vector = data.draw(counts_near(cap, dp_size, cap), "vector")
        decisions, admitted, extras = [], [], []
        for rank, count in enumerate(vector):
            base = data.draw(st.sampled_from(BASES), "base")
            scenario = Scenario(base, cap, 200, 512, 2, ())
            rig = Rig(compose(base), scenario)
            for i in range(count):
                prompt = data.draw(st.integers(1, 32), "prompt")
                rig.scheduler.add_request(
                    make_request(f"r{rank}-run{i}", prompt, 8, BLOCK_SIZE)
                )
            rig.schedule(0)
            assert len(rig.scheduler.running) == count
            extra = data.draw(st.integers(0, 3), "extra waiting")
            for i in range(extra):
                prompt = data.draw(st.integers(1, 32), "prompt")
                rig.scheduler.add_request(
                    make_request(f"r{rank}-wait{i}", prompt, 8, BLOCK_SIZE)
                )
            assert gather(rig.scheduler, rank, vector) == vector
            decisions.append(rig.scheduler.balance_frozen)
            admitted.append(len(rig.schedule(1)["new"]))
            extras.append(extra)
        frozen = expected_frozen(vector, cap)
        assert decisions == [frozen] * dp_size, (
            f"decision differs across ranks: {decisions} for {vector}, cap {cap}"
        )
        if frozen:
            assert admitted == [0] * dp_size, "admitted while frozen"
        else:  # ample KV and budget: upstream fills up to the cap
            room = [cap - count for count in vector]
            expected = [min(e, r) for e, r in zip(extras, room, strict=True)]
            assert admitted == expected, "admission differs from upstream"

    run()


# --------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize(
    "check",
    [
        check_decision,
        check_frozen_holds_waiting,
        check_unfrozen_matches_upstream,
        check_same_decision_every_rank,
    ],
)
def test_gate_property(check: Callable[[Compose], None]) -> None:
    check(composition.compose_scheduler)


def test_cap_minus_one_never_freezes_example() -> None:
    """The ``==`` contract on one hand-made state: leader at cap - 1 admits,
    leader at cap freezes, for both scheduler classes."""
    for base in BASES:
        scenario = Scenario(base, 3, 200, 512, 1, ())
        for leader, frozen in ((2, False), (3, True)):
            rig = Rig(composition.compose_scheduler(base), scenario)
            for i in range(3):
                rig.add(f"w{i}", 8, 4)
            gather(rig.scheduler, 0, [0, leader])
            assert rig.scheduler.balance_frozen is frozen
            assert len(rig.schedule(0)["new"]) == (0 if frozen else 3)


# KV pressure, deterministically: 4 requests fill 8 of 10 blocks, and each
# needs a third block at its first decode, so upstream preempts; more
# requests arrive while that happens.
PRESSURE = tuple([(0, 16, 24)] * 4 + [(1, 8, 8)] * 3 + [(3, 8, 8)])


@pytest.mark.parametrize("base", BASES)
def test_frozen_under_kv_pressure(base: type) -> None:
    scenario = Scenario(base, 4, 10, 256, 8, PRESSURE)
    seen = frozen_trace(
        composition.compose_scheduler, scenario, 1, 0, lambda step: [0, 4]
    )
    assert "frozen: preemption" in seen


@pytest.mark.parametrize("base", BASES)
def test_unfrozen_under_kv_pressure(base: type) -> None:
    scenario = Scenario(base, 4, 10, 256, 8, PRESSURE)
    seen = unfrozen_trace(
        composition.compose_scheduler, scenario, 0, lambda step: [0, 3]
    )
    assert {"unfrozen: preempted", "unfrozen: new"} <= seen


# Deliberately wrong gates: each must make at least one property fail.


class OffByOneGate(BalanceSchedulerMixin):
    """Freezes at ``>= cap - 1`` (tried in vllm-ascend, reverted)."""

    def admission_gather(self) -> None:
        super().admission_gather()
        cap = admission_cap(self)
        self.balance_frozen = int(self.balance_gathered.max()) >= cap - 1


class NeverFreezesGate(BalanceSchedulerMixin):
    """Gathers and decides, but the seam ignores the decision."""

    def _should_stop_admitting_waiting(self) -> bool:
        return super(BalanceSchedulerMixin, self)._should_stop_admitting_waiting()


class CatchUpToLeaderGate(BalanceSchedulerMixin):
    """The rejected reading: stop admitting once the local rank has caught
    up with the leader (the cap temporarily lowered to ``max(gathered)``)."""

    def _should_stop_admitting_waiting(self) -> bool:
        if self.balance_gathered is not None:
            leader = int(self.balance_gathered.max())
            if len(self.running) >= leader:
                return True
        return super()._should_stop_admitting_waiting()


class LocalOnlyGate(BalanceSchedulerMixin):
    """Decides from the local count only (no global freeze)."""

    def admission_gather(self) -> None:
        super().admission_gather()
        self.balance_frozen = len(self.running) == admission_cap(self)


@pytest.mark.parametrize(
    ("check", "gate", "reason"),
    [
        pytest.param(
            check_decision,
            compose_with(OffByOneGate),
            "wrong decision",
            id="a-off-by-one",
        ),
        pytest.param(
            check_unfrozen_matches_upstream,
            compose_with(OffByOneGate),
            "output differs from upstream",
            id="c-off-by-one",
        ),
        pytest.param(
            check_frozen_holds_waiting,
            compose_with(NeverFreezesGate),
            "left WAITING",
            id="b-never-freezes",
        ),
        pytest.param(
            check_unfrozen_matches_upstream,
            compose_with(CatchUpToLeaderGate),
            "output differs from upstream",
            id="c-catch-up-to-leader",
        ),
        pytest.param(
            check_same_decision_every_rank,
            compose_with(LocalOnlyGate),
            "decision differs across ranks",
            id="d-rank-local",
        ),
    ],
)
def test_negative_control_fails(
    check: Callable[..., None], gate: Compose, reason: str
) -> None:
    """The property check, run against a deliberately wrong gate, fails for
    the reason it exists."""
    with pytest.raises(AssertionError, match=reason):
        check(gate, negative=True)
