# SPDX-License-Identifier: Apache-2.0
"""The peer admission policies (``vllm_ascend_balance/replay/peers``).

Per policy: its source's rule on scripted gathered states (the expected
decision sequences are read off the source's rule as cited in the module
docstring), with a negative control: a known-bad variant (the bug the
source fixed, or the rule without its bound) must fail the same script.
For all policies, two properties over random gathered sequences (every
rank's instance decides from the same vector; each hold streak is bounded,
so the lock step never deadlocks), each with its negative control. And one
end-to-end run per policy on the simulated engine (real vLLM schedulers),
where the seam must hold every new admission while the policy holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from vllm_ascend_balance.replay.peers import (
    POLICIES,
    PeerPolicy,
    PolicyError,
    RankState,
    make_policy,
)
from vllm_ascend_balance.replay.peers.atom_delayer import AtomPrefillDelayer
from vllm_ascend_balance.replay.peers.sglang_delayer import SGLangPrefillDelayer
from vllm_ascend_balance.replay.peers.trtllm_adp import TrtllmAttentionDpBalance
from vllm_ascend_balance.replay.peers.vllm_align import VllmPrefillAlignment

# Pure decision logic on scripted states: no vLLM object is involved, so
# another vLLM lane adds nothing.
pytestmark = pytest.mark.lane_scope("release")

CAP = 8
IDLE = RankState(waiting=0, running=0, cap=CAP)
#: A rank with a request to admit.
READY = RankState(waiting=2, running=3, cap=CAP)
#: A rank decoding, nothing waiting.
BUSY = RankState(waiting=0, running=5, cap=CAP)
#: A rank at its cap with requests waiting.
FULL = RankState(waiting=3, running=CAP, cap=CAP)


def run_script(
    policy: PeerPolicy, script: Sequence[tuple[Sequence[RankState], bool]], dt=0.05
) -> None:
    """Feed each gathered vector (every rank's clock at step ``i * dt``
    seconds); assert the hold decision (same on every rank for these
    policies)."""
    for i, (states, hold) in enumerate(script):
        gathered = [replace(s, clock_ms=round(1000 * i * dt)) for s in states]
        decision = policy.decide(gathered)
        assert decision == (hold,) * len(gathered), (
            f"{policy.name} step {i}: {decision} for {gathered}, expected {hold}"
        )


# ---------------------------------------------------------------- SGLang


def sglang_script() -> list[tuple[list[RankState], bool]]:
    mixed = [READY, BUSY]
    return [
        # mixed: N - 1 = 2 denies in a row, then the forced allow
        (mixed, True), (mixed, True), (mixed, False),
        # the allow reset the counter; none prefillable allows and resets
        (mixed, True), ([BUSY, IDLE], False), (mixed, True), (mixed, True),
        # all prefillable with free slots: allow
        ([READY, READY], False),
        # a chunk in flight makes a rank prefillable (the newer add_chunked_req)
        ([READY, replace(BUSY, prefilling=1)], False),
    ]  # fmt: skip


class SGLangUnbounded(SGLangPrefillDelayer):
    """Known bad: the delay without its pass bound (the starvation of
    sgl-project/sglang#29898 / #32880)."""

    def _delay_or_allow(self, now_s: float) -> bool:
        self.delayed += 1
        return True


def test_sglang_rule() -> None:
    run_script(make_policy("sglang-delayer:3"), sglang_script())


def test_sglang_rule_negative_control() -> None:
    with pytest.raises(AssertionError):
        run_script(SGLangUnbounded("3"), sglang_script())


def test_sglang_watermark_and_slot_condition() -> None:
    low = replace(READY, kv_usage_permille=100)
    high = replace(READY, kv_usage_permille=500)
    crowded = replace(high, running=CAP - 1, max_prefill_batch_recent=4)
    run_script(
        make_policy("sglang-delayer:3:20"),
        [
            ([low, BUSY], False),  # a prefillable rank under 20 %: allow
            ([high, replace(BUSY, kv_usage_permille=100)], True),  # not prefillable
            # all prefillable, 1 free slot < recent batch 4: the first such
            # delay is let through, the next are bounded like the mixed case
            ([crowded, high], False), ([crowded, high], True),
            ([crowded, high], True), ([crowded, high], False),
        ],
    )  # fmt: skip


# ---------------------------------------------------------------- ATOM


def atom_script() -> list[tuple[list[RankState], bool]]:
    mixed = [READY, BUSY]
    return [
        (mixed, False),  # the process's first decision is let through
        # mixed: N = 3 denies in a row, then allow (fail-open)
        (mixed, True), (mixed, True), (mixed, True), (mixed, False),
        # all / none: allow
        ([READY, FULL], False), ([BUSY, IDLE], False),
    ]  # fmt: skip


class AtomWithoutFirstSkip(AtomPrefillDelayer):
    """Known bad: no first-call skip (ATOM#930 lets the first one through)."""

    def __init__(self, params: str = "") -> None:
        super().__init__(params)
        self.skip_first = False


def test_atom_rule() -> None:
    run_script(make_policy("atom-delayer:3:5000"), atom_script())


def test_atom_rule_negative_control() -> None:
    with pytest.raises(AssertionError):
        run_script(AtomWithoutFirstSkip("3:5000"), atom_script())


def test_atom_wall_clock_bound() -> None:
    # 30 passes allowed, but 1 s per step against a 2,500 ms bound: held at
    # 0, 1 and 2 s after the first delay, let through at 3 s (fail-open).
    mixed = [READY, BUSY]
    run_script(
        make_policy("atom-delayer:30:2500"),
        [(mixed, False), (mixed, True), (mixed, True), (mixed, True), (mixed, False)],
        dt=1.0,
    )


# ---------------------------------------------------------------- TensorRT-LLM


def trtllm_script() -> list[tuple[list[RankState], bool]]:
    # Context on one rank only, every rank decoding: held until
    # timeout_iters = 3 (released on the 3rd), then the count restarts.
    unsync = [READY, BUSY]
    # Context and generation on every rank, room on each: batched for
    # batching_wait_iters = 2, released on the next.
    sync = [READY, READY]
    return [
        (unsync, True), (unsync, True), (unsync, False), (unsync, True),
        (sync, True), (sync, True), (sync, False),
        # a rank with no generation request: released at once
        ([READY, RankState(waiting=2, running=0, cap=CAP)], False),
        # a full rank keeps the ranks unsynchronised: held
        ([READY, replace(BUSY, running=CAP)], True),
    ]  # fmt: skip


class TrtllmIgnoringGeneration(TrtllmAttentionDpBalance):
    """Known bad: holds even when a rank has no generation request (an
    empty batch on that rank)."""

    def _hold(self, gathered: Sequence[RankState]) -> bool:
        return super()._hold([replace(s, running=max(s.running, 1)) for s in gathered])


def test_trtllm_rule() -> None:
    run_script(make_policy("trtllm-adp:3:2"), trtllm_script())


def test_trtllm_rule_negative_control() -> None:
    with pytest.raises(AssertionError):
        run_script(TrtllmIgnoringGeneration("3:2"), trtllm_script())


# ---------------------------------------------------------------- vLLM #51199


def align_script() -> list[tuple[list[RankState], bool]]:
    deferred = replace(READY, deferred=True)
    return [
        # throttled by default; nothing deferred yet: nothing to release
        ([READY, BUSY], True),
        # one of two ranks deferred: delays 1, 2, then the 3rd (max 3)
        # releases, applied target_step_lead = 2 steps later
        ([deferred, BUSY], True), ([deferred, BUSY], True),
        ([deferred, BUSY], True), ([deferred, BUSY], True),
        ([deferred, BUSY], False),
        # a rank left requests waiting on its last admitting pass: release now,
        # applied 2 steps later
        ([replace(deferred, capacity_bound=True), BUSY], True),
        ([deferred, BUSY], True), ([deferred, BUSY], False),
    ]  # fmt: skip


class AlignWithoutLead(VllmPrefillAlignment):
    """Known bad: applies a release on the step it is decided, so ranks
    that receive it at different times would diverge."""

    def __init__(self, params: str = "") -> None:
        super().__init__(params)
        self.lead = 0


def test_vllm_align_rule() -> None:
    run_script(make_policy("vllm-align:3:2"), align_script())


def test_vllm_align_rule_negative_control() -> None:
    with pytest.raises(AssertionError):
        run_script(AlignWithoutLead("3:2"), align_script())


# ---------------------------------------------------------------- properties


def hold_bound(policy: PeerPolicy) -> int:
    """The longest hold streak a rank that can admit may see: what each
    source's bounds add up to."""
    if isinstance(policy, SGLangPrefillDelayer):
        # A delayer deny lets chunks run, whose extend re-arms the interval
        # P: each of the N - 1 denies can be followed by P deferred rounds.
        n = policy.max_delay_passes - 1 if policy.delayer else 0
        p = policy.interval
        return n * (p + 1) + p
    if isinstance(policy, AtomPrefillDelayer):
        return policy.max_delay_passes
    if isinstance(policy, TrtllmAttentionDpBalance):
        # Synchronised steps restart the timeout count; the batching count is
        # not reset by them: both bounds multiply.
        t, w = policy.timeout_iters, policy.batching_wait_iters
        return (w + 1) * max(t - 1, 0) + w
    if isinstance(policy, VllmPrefillAlignment):
        return policy.max_delay_passes + policy.lead + 1
    raise AssertionError(f"no bound for {policy.name}")


@st.composite
def rank_states(draw: st.DrawFn, size: int, step: int) -> list[RankState]:
    """Random states; each rank's clock at ``step`` x 50 ms, skewed by up
    to 400 ms (local clocks of different hosts)."""
    out = []
    for _ in range(size):
        running = draw(st.integers(0, CAP))
        out.append(
            RankState(
                waiting=draw(st.sampled_from([0, 0, 1, 3])),
                running=running,
                cap=CAP,
                prefilling=draw(st.integers(0, min(running, 1))),
                kv_usage_permille=draw(st.sampled_from([50, 500, 950])),
                max_prefill_batch_recent=draw(st.integers(0, 4)),
                max_prefill_batch_ever=draw(st.integers(0, 4)),
                capacity_bound=draw(st.booleans()),
                clock_ms=50 * step + draw(st.integers(0, 400)),
                fits=draw(st.sampled_from([None, None, 0, 1])),
                extended=draw(st.booleans()),
            )
        )
    return out


def _settings(negative: bool) -> settings:
    return settings(
        max_examples=200 if negative else 60,
        deadline=None,
        database=None,
        derandomize=negative,
        phases=(Phase.explicit, Phase.generate) if negative else tuple(Phase),
        suppress_health_check=[HealthCheck.too_slow],
    )


SPECS = [
    "sglang-delayer:3",
    "sglang-delayer:4:20",
    "atom-delayer:3",
    "atom-delayer:30:300",  # the wall-clock bound decides
    "sglang-delayer:3:0:50:300:2",  # queue trigger and interval
    "sglang-pdi:3",
    "trtllm-adp:3:2",
    "trtllm-adp:5:2:3:1",  # the low-occupancy timeout
    "vllm-align:3:2",
    "vllm-align:30:2:300",  # the wall-clock bound decides
]


def check_properties(factory: Callable[[int], PeerPolicy], negative: bool) -> None:
    """Two ranks' instances (``factory(rank)``) fed the same gathered
    sequence decide alike and keep the same state; a rank that can admit,
    and reports its deferral as a real engine would, is never held longer
    than :func:`hold_bound` steps in a row."""

    @_settings(negative)
    @given(data=st.data(), size=st.integers(2, 6), steps=st.integers(1, 60))
    def run(data: st.DataObject, size: int, steps: int) -> None:
        a, b = factory(0), factory(size - 1)
        bound = hold_bound(a)
        holds = (False,) * size
        streak = [0] * size
        for step in range(steps):
            states = data.draw(rank_states(size, step))
            # A real engine: a held rank deferred its prefill work; a step
            # whose hold covers chunks runs no prefill (no extend).
            chunks = a.holds_chunks()
            states = [
                replace(
                    s,
                    deferred=held and (s.waiting > 0 or s.prefilling > 0),
                    extended=s.extended and not (held and chunks),
                )
                for s, held in zip(states, holds, strict=True)
            ]
            holds = a.decide(states)
            assert holds == b.decide(states), "ranks decided apart"
            assert a.snapshot() == b.snapshot(), "ranks' policy state diverged"
            for r, s in enumerate(states):
                streak[r] = streak[r] + 1 if holds[r] and s.can_admit else 0
                assert streak[r] <= bound, (
                    f"rank {r} held {streak[r]} steps in a row (bound {bound})"
                )

    run()


@pytest.mark.parametrize("spec", SPECS)
def test_lockstep_and_bounded_hold(spec: str) -> None:
    check_properties(lambda rank: make_policy(spec), negative=False)


class LocalView(SGLangPrefillDelayer):
    """Known bad: decides from the rank's own state, not the gathered
    vector (ranks then disagree: the lock-step deadlock)."""

    def __init__(self, rank: int) -> None:
        super().__init__("3")
        self.rank = rank

    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        hold = self._hold([gathered[self.rank]] * len(gathered))
        return (hold,) * len(gathered)


class AtomOwnClock(AtomPrefillDelayer):
    """Known bad: times its bound by the rank's own clock, as ATOM#930 did
    (skewed clocks split the decision)."""

    def __init__(self, rank: int) -> None:
        super().__init__("30:300")
        self.rank = rank

    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        own = gathered[self.rank].clock_ms
        return super().decide([replace(s, clock_ms=own) for s in gathered])


@pytest.mark.parametrize("bad", [LocalView, AtomOwnClock])
def test_lockstep_negative_control(bad: Callable[[int], PeerPolicy]) -> None:
    with pytest.raises(AssertionError, match="apart|diverged"):
        check_properties(bad, negative=True)


def test_bounded_hold_negative_control() -> None:
    with pytest.raises(AssertionError, match="in a row"):
        check_properties(lambda rank: SGLangUnbounded("3"), negative=True)


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text",
    [
        "sglang-delayer:x",
        "trtllm-adp:1:2:3:4:5",
        "trtllm-adp:3:2:1:4",
        "sglang-pdi",
        "sglang-pdi:0",
        "sglang-delayer:30:0:0:5000:0:0",
        "sglang-delayer:0",
        "sglang-delayer:30:500",
        "sglang-delayer:\u00b2",
        "atom-delayer:",
        "atom-delayer:0",
        "vllm-align:3:",
        "nope:1",
    ],
)
def test_bad_parameters_are_one_line_errors(text: str) -> None:
    with pytest.raises(PolicyError) as info:
        make_policy(text)
    assert "\n" not in str(info.value) and "--mode" in str(info.value)


def test_every_policy_cites_its_source() -> None:
    for name, cls in POLICIES.items():
        assert cls.name == name and cls.source and name in cls.usage
