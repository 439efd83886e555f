# SPDX-License-Identifier: Apache-2.0
"""Property tests of the opt-in rules: the held-step bound
(``balance_max_held_steps``) and the ``queued_leader`` policy.

Real schedulers in lock step over the simulated all-gather, the harness of
``tests/support/lockstep_policy.py`` (scenarios with a leader that often
stays at the cap, generated loads elsewhere): each rank's payload is
``(len(running), held, queued)``, the bound N (1-4, or none) the harness's
deadline. The rules: ``queued_leader`` unbounded, the contract
(``leader_at_cap``) bounded, and both.

Properties (a)-(d) of the harness: ranks agree (decision and run counter),
the decision equals the oracle (the rule below, written independently of
the package, under the bound), no run of frozen steps that held a request
is longer than N, nothing leaves WAITING while frozen; and a leader at the
cap with no queue does not freeze under ``queued_leader`` (the contract,
whose payload stays ``len(running)`` alone, does).

Negative controls (each must make the properties fail): the bound counted
from each rank's own queue instead of the gathered flag (ranks disagree),
a bound off by one (held past it), the contract's gate run where
``queued_leader`` is asked for (wrong decision: it freezes with no rank at
the cap having a queue), and a seam that ignores the freeze (admits while
frozen).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.support import lockstep_policy as lockstep
from tests.support.lockstep_policy import Make, Row, Rule, anyone
from tests.test_gate_properties import BASES, LockstepScenario
from vllm_ascend_balance.gate.scheduler import admission_cap
from vllm_ascend_balance.wiring import composition

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


@dataclasses.dataclass(frozen=True)
class Bound:
    """``balance_max_held_steps`` N as the harness's deadline; ``math.inf``
    where it is unset (the oracle then never fails open)."""

    deadline: float


BOUNDED = st.builds(Bound, deadline=st.integers(1, 4))
UNBOUNDED = st.just(Bound(math.inf))


def composer(policy: str) -> Make:
    """The package's composition of ``policy`` under the setting's bound."""

    def compose(base: type, s: Bound) -> type:
        bound = None if math.isinf(s.deadline) else int(s.deadline)
        return composition.compose_scheduler(base, max_held_steps=bound, policy=policy)

    return compose


def leader_at_cap(row: list[Row], since: float, cap: int, s: Bound) -> bool:
    """The contract: frozen while the largest running count is the cap."""
    return max(r[0] for r in row) == cap


def queued_leader(row: list[Row], since: float, cap: int, s: Bound) -> bool:
    """Frozen only while some rank at the cap has requests waiting."""
    return anyone(row)[1]


def classify(row: list[Row], state: str) -> Iterator[str]:
    # A frozen gather that holds nothing neither counts nor restarts the run.
    if state == "frozen" and not anyone(row)[0]:
        yield "frozen holding nothing"


def _idle_leader() -> LockstepScenario:
    """Rank 0 fills its cap exactly (nothing waits there) while rank 1 gets
    work."""
    burst = tuple((0, 8, 30) for _ in range(3))
    return LockstepScenario(BASES[0], 3, 2, 8, (burst, ((1, 8, 4), (2, 8, 4))))


def rule_policy(
    rule: Rule, settings: st.SearchStrategy[Bound], reached: set[str], **more: Any
) -> lockstep.Policy:
    return lockstep.Policy(
        columns=("held", "queued"),
        rule=rule,
        settings=settings,
        reached=frozenset(reached),
        classify=classify,
        **more,
    )


HELD_BOUND = {"held up to the deadline", "fail-open", "frozen holding nothing"}
#: The rules under test: (policy, bound) -> the harness's policy, the class.
RULES: dict[str, tuple[lockstep.Policy, Make]] = {
    "queued_leader": (
        rule_policy(
            queued_leader,
            UNBOUNDED,
            {"held while frozen", "frozen", "open"},
            examples=((_idle_leader(), Bound(math.inf)),),
        ),
        composer("queued_leader"),
    ),
    "leader_at_cap+held": (
        rule_policy(leader_at_cap, BOUNDED, HELD_BOUND),
        composer("leader_at_cap"),
    ),
    "queued_leader+held": (
        rule_policy(queued_leader, BOUNDED, HELD_BOUND),
        composer("queued_leader"),
    ),
}
#: The contract unbounded: its payload is ``len(running)`` alone.
CONTRACT = rule_policy(leader_at_cap, UNBOUNDED, set(), flagless=True)


@pytest.mark.parametrize("rule", list(RULES))
def test_rule_properties(rule: str) -> None:
    lockstep.check_reached(*RULES[rule])


def test_queued_leader_does_not_freeze_behind_a_leader_with_no_queue() -> None:
    """One hand-made trace, the properties checked on it: the contract
    freezes rank 1, ``queued_leader`` does not."""
    queued, make = RULES["queued_leader"]
    unbounded = Bound(math.inf)
    scenario = _idle_leader()
    assert "frozen" not in lockstep.policy_trace(queued, make, scenario, unbounded)
    contract = composer("leader_at_cap")
    assert "frozen" in lockstep.policy_trace(CONTRACT, contract, scenario, unbounded)


#: Known-bad: the bound counts a frozen step by this rank's own queue, not
#: by the gathered flag.
LocalHeldGate = lockstep.local_view(
    "held", lambda s: bool(s.waiting) and len(s.running) < admission_cap(s)
)


@pytest.mark.parametrize(
    ("rule", "make", "reason"),
    [
        pytest.param(
            "leader_at_cap+held",
            lockstep.with_gate(LocalHeldGate, composer("leader_at_cap")),
            "decision differs across ranks",
            id="local",
        ),
        pytest.param(
            "leader_at_cap+held",
            lockstep.off_by_one(composer("leader_at_cap")),
            "held past the deadline",
            id="off-by-one",
        ),
        pytest.param(
            "queued_leader+held",
            composer("leader_at_cap"),
            "wrong decision",
            id="contract",
        ),
        pytest.param(
            "queued_leader+held",
            lockstep.with_gate(lockstep.LeakyGate, composer("queued_leader")),
            "left WAITING",
            id="leaky",
        ),
    ],
)
def test_negative_controls_fail(rule: str, make: Make, reason: str) -> None:
    lockstep.check_fails(RULES[rule][0], make, reason)
