# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in ``throttled`` policy (``balance_policy:
"throttled"``, :class:`~vllm_ascend_balance.gate.policies.throttled.Throttled`).

Real schedulers in lock step over the simulated all-gather, the harness of
``tests/support/lockstep_policy.py``, prompts chunked by a small token
budget: each rank's payload is ``(len(running), held, queued, starved,
chunk)``, each step's ``schedule()`` throttled where the gate says so
(``balance_throttles()``, as the engine hook asks); the window and deadline
vary per example.

Properties (a)-(e) of the harness: ranks agree, the decision equals
:func:`freeze_rule` under the deadline (an oracle written from the policy's
docstring), the deadline bounds every hold, a chunk-only hold included,
nothing leaves WAITING while frozen, and no prefill chunk in flight runs on
a frozen step of a rank with decodes.

Negative controls (each must make the properties fail): the starved or the
chunk flag from the rank's own queues (ranks disagree), a deadline off by
one, a chunk-only hold the deadline does not count (``batched``'s rule 1:
held past the deadline), ``batched``'s riding opening (wrong decision), a
gate that leaves vLLM's ``prefill_capacity_bound`` set (a chunk runs while
frozen), and a seam that ignores the freeze.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import pytest

from tests.support import lockstep_policy as lockstep
from tests.support.lockstep_policy import CHUNKED, Row, Setting, anyone
from tests.test_gate_properties import BASES, LockstepScenario, Rig, Scenario
from vllm_ascend_balance.gate.policies import Gathered, Knobs, Throttled
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.wiring import composition

# vLLM 0.27 and later (schedule(throttle_prefills)); activation refuses the
# policy on the ascend lane's 0.23 (tests/test_throttle_hook.py).
pytestmark = pytest.mark.lane_scope("release", "main", "fork")


def compose(base: type, s: Setting) -> type:
    return composition.compose_scheduler(
        base, max_held_steps=s.deadline, policy="throttled", align_window=s.window
    )


def freeze_rule(row: list[Row], since: float, cap: int, s: Setting) -> bool:
    """The policy's docstring: frozen when nothing is held (counted by the
    deadline only if a chunk is in flight, :data:`THROTTLED`'s ``counts``);
    a starved rank opens; a queued leader freezes; else the batching wait
    ``ceil(W (lowest / cap)^2)`` must have passed since the last opening.
    No riding opening."""
    held, queued, starved, _chunk = anyone(row)
    if not held:
        return True
    if starved:
        return False
    if queued:
        return True
    lowest = min(r[0] for r in row)
    return since < math.ceil(s.window * lowest**2 / cap**2)


def classify(row: list[Row], state: str) -> Iterator[str]:
    held, _queued, _starved, chunk = anyone(row)
    if state == "frozen" and chunk and not held:
        yield "chunk-only hold"


def _chunk_example() -> LockstepScenario:
    """Two ranks at cap 4 whose long prompts (24 tokens at a 16-token
    budget) are chunked while the other rank decodes."""
    rank0 = ((0, 4, 20), (1, 24, 4), (3, 24, 4), (5, 4, 4))
    rank1 = ((0, 4, 20), (2, 24, 4), (4, 4, 4), (6, 24, 4))
    return LockstepScenario(BASES[0], 4, 4, 16, (rank0, rank1))


THROTTLED = lockstep.Policy(
    columns=("held", "queued", "starved", "chunk"),
    rule=freeze_rule,
    settings=lockstep.SETTINGS,
    reached=frozenset(
        {"chunk held", "chunk-only hold", "held up to the deadline", "fail-open"}
    ),
    classify=classify,
    examples=(
        (_chunk_example(), Setting(6, 8)),
        (_chunk_example(), Setting(2, 2)),
    ),
    budget=CHUNKED,
    counts=("held", "chunk"),
    holds_chunks=True,
)


def test_throttled_properties() -> None:
    lockstep.check_reached(THROTTLED, compose)


def test_throttled_sends_its_four_flags() -> None:
    """The payload is ``(len(running), held, queued, starved, chunk)``."""
    base = BASES[0]
    scenario = Scenario(base, 2, 400, CHUNKED, 4, ((0, 24, 4), (0, 4, 4)))
    rig = Rig(compose(base, Setting(4, 8)), scenario)
    rig.arrive(0)
    assert rig.scheduler.admission_payload() == (0, (1, 0, 1, 0))
    rig.scheduler.balance_frozen = False
    rig.schedule(0)  # the 24-token prompt takes the whole 16-token budget
    # One running with 8 prompt tokens to go, one still waiting below the cap.
    assert rig.scheduler.admission_payload() == (1, (1, 0, 0, 1))
    seen = Gathered.of(1, 1, 2, (True, False, False, True), Throttled.columns)
    assert seen.chunk and not seen.riding


def test_throttled_counts_chunk_only_holds_and_never_rides() -> None:
    """One hand-made trace: a chunk in flight with nothing held freezes and
    counts toward the deadline (a fail-open after D); nothing at all held or
    in flight freezes without counting; a long chunk does not open."""
    rule = Throttled(Knobs(None, 2, 4))
    chunk_only = Gathered(2, 1, 4, chunk=True)
    assert [rule.decide(chunk_only) for _ in range(4)] == [True, True, False, True]
    nothing = Gathered(1, 0, 4)
    before = rule.run
    assert rule.decide(nothing) is True and rule.run == before
    rule = Throttled(Knobs(None, 2, 4))
    assert rule.decide(Gathered(1, 0, 4, held=True)) is False  # wait 0: opens
    busy = Gathered(4, 3, 4, held=True, riding=True)  # riding is not read
    assert rule.decide(busy) is True  # wait ceil(4 * 9 / 16) = 3
    assert rule.decide(dataclasses.replace(busy, starved=True)) is False
    assert Throttled(Knobs()).knobs.align_window == 16  # DEFAULT_THROTTLED_WINDOW


#: Known-bad: "a rank is starved" read from this rank's own queues.
LocalStarvedGate = lockstep.local_view(
    "starved", lambda s: not s.running and bool(s.waiting)
)
#: Known-bad: "a chunk is in flight" read from this rank alone.
LocalChunkGate = lockstep.local_view("chunk", lambda s: s._balance_pending())


class Uncounted(Throttled):
    """Known-bad: a chunk-only hold not counted by the deadline (as
    ``batched``'s closed-by-default rule 1)."""

    def decide(self, seen: Gathered) -> bool:
        if not seen.held:
            self.since += 1
            return self._closed()
        return super().decide(seen)


class Riding(Throttled):
    """Known-bad: ``batched``'s opening for a long chunk in flight."""

    def decide(self, seen: Gathered) -> bool:
        if seen.held and seen.chunk:
            self.since += 1
            return self._bounded(False)
        return super().decide(seen)


class KeepsCapacityBound(BalanceSchedulerMixin):
    """Known-bad: throttles without clearing vLLM's
    ``prefill_capacity_bound``, so a throttled step after a held one defers
    nothing."""

    def balance_throttles(self) -> bool:
        return self.balance_frozen and self._balance_policy().holds_chunks


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(
            lockstep.with_gate(LocalStarvedGate, compose),
            "decision differs across ranks",
            id="local-starved",
        ),
        pytest.param(
            lockstep.with_gate(LocalChunkGate, compose),
            "decision differs across ranks",
            id="local-chunk",
        ),
        pytest.param(
            lockstep.off_by_one(compose), "held past the deadline", id="off-by-one"
        ),
        pytest.param(
            lockstep.with_gate(lockstep.rule_gate(Uncounted), compose),
            "held past the deadline",
            id="uncounted-chunk-hold",
        ),
        pytest.param(
            lockstep.with_gate(lockstep.rule_gate(Riding), compose),
            "wrong decision",
            id="riding-opens",
        ),
        pytest.param(
            lockstep.with_gate(KeepsCapacityBound, compose),
            "chunk ran while frozen",
            id="capacity-bound-kept",
        ),
        pytest.param(
            lockstep.with_gate(lockstep.LeakyGate, compose), "left WAITING", id="leaky"
        ),
    ],
)
def test_negative_controls_fail(make: lockstep.Make, reason: str) -> None:
    lockstep.check_fails(THROTTLED, make, reason)
