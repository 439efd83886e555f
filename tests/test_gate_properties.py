# SPDX-License-Identifier: Apache-2.0
"""Property tests of the balance admission gate on real vLLM schedulers.

Every scheduler here is a real ``Scheduler`` or ``AsyncScheduler`` of the
installed (patched) vLLM, driven through generated traces: requests of varied
prompt lengths arriving over several steps, KV pressure from a small number
of blocks (so upstream preempts), caps from ``max_num_seqs``, token budgets,
and model outputs fed back through ``update_from_output`` by a deterministic
fake model (:func:`fake_model_output`).

The gathered running counts are set by the package's real
``admission_gather()``; only its transport is scripted: the DP group is a
:class:`ScriptedGroup` whose other ranks' counts are generated, and
``torch.distributed.all_gather_into_tensor`` is replaced for the duration of
one gather by a function that writes them (the local entry is the real
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
   rank's local state;
e. disabled (what activation leaves in place when balance is off) is the
   upstream class itself: no buffer, zero collectives, same outputs.

Each property is a function of the gate under test. Negative controls run the
same functions against deliberately wrong gates (``>= cap - 1``, a gate that
never freezes, "catch up to the leader", a rank-local decision, a disabled
path that composes anyway) and require them to fail, so a green run shows the
properties can fail.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import vllm.v1.engine.core as engine_core_mod
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.scheduler import (
    SEAM,
    BalanceSchedulerMixin,
    admission_cap,
)
from vllm_ascend_balance.wiring import activation, composition, engine_chain
from vllm_ascend_balance.wiring.config import SETTING
from vllm_ascend_balance.wiring.engine_hook import gather_hook_installed

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

BASES = (Scheduler, AsyncScheduler)
BLOCK_SIZE = 8


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


@contextlib.contextmanager
def counting_collectives() -> Iterator[list[str]]:
    """Count (and pass through) every collective the code under test makes."""
    calls: list[str] = []

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(dist, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return wrapper

    names = ("all_gather_into_tensor", "all_gather", "all_reduce", "broadcast")
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(mock.patch.object(dist, name, counted(name)))
        yield calls


# --------------------------------------------------------------------------
# Deterministic traces on real schedulers


@dataclass(frozen=True)
class Scenario:
    """A generated workload. ``requests[i] = (arrival_step, prompt_len,
    max_tokens)``; ``horizon`` steps are run."""

    base: type
    cap: int
    num_blocks: int
    budget: int
    horizon: int
    requests: tuple[tuple[int, int, int], ...]


@st.composite
def scenarios(draw: st.DrawFn, min_horizon: int = 1, max_horizon: int = 12) -> Scenario:
    horizon = draw(st.integers(min_horizon, max_horizon))
    n = draw(st.integers(1, 12))
    requests = tuple(
        (
            draw(st.integers(0, horizon - 1)),
            draw(st.integers(1, 56)),
            draw(st.integers(1, 24)),
        )
        for _ in range(n)
    )
    return Scenario(
        base=draw(st.sampled_from(BASES)),
        cap=draw(st.integers(1, 6)),
        # 8-token blocks: 10 blocks hold the longest request (56 + 24 tokens),
        # few requests at once, so decodes run out of blocks and upstream
        # preempts.
        num_blocks=draw(st.one_of(st.integers(10, 16), st.integers(10, 40))),
        budget=draw(st.sampled_from([32, 64, 128, 256])),
        horizon=horizon,
        requests=requests,
    )


def normalize(output: Any) -> dict[str, Any]:
    """The parts of a ``SchedulerOutput`` that say what was scheduled."""
    cached = output.scheduled_cached_reqs

    def blocks(block_ids: Any) -> Any:
        return None if block_ids is None else tuple(tuple(b) for b in block_ids)

    return {
        "new": [
            (r.req_id, r.num_computed_tokens, blocks(r.block_ids))
            for r in output.scheduled_new_reqs
        ],
        "cached": [
            (req_id, computed, blocks(new_blocks))
            for req_id, computed, new_blocks in zip(
                cached.req_ids,
                cached.num_computed_tokens,
                cached.new_block_ids,
                strict=True,
            )
        ],
        "resumed": sorted(getattr(cached, "resumed_req_ids", ()) or ()),
        "num_scheduled_tokens": dict(output.num_scheduled_tokens),
        "total": output.total_num_scheduled_tokens,
        "preempted": sorted(output.preempted_req_ids or ()),
        "finished": sorted(output.finished_req_ids),
    }


class Rig:
    """One real scheduler of class ``cls`` driven through a scenario."""

    def __init__(self, cls: type, scenario: Scenario) -> None:
        self.scenario = scenario
        self.scheduler: Any = make_scheduler(
            cls,
            max_num_seqs=scenario.cap,
            num_blocks=scenario.num_blocks,
            max_num_batched_tokens=scenario.budget,
            block_size=BLOCK_SIZE,
        )
        assert admission_cap(self.scheduler) == scenario.cap

    def add(self, req_id: str, prompt_len: int, max_tokens: int) -> None:
        self.scheduler.add_request(
            make_request(req_id, prompt_len, max_tokens, BLOCK_SIZE)
        )

    def arrive(self, step: int) -> None:
        for i, (arrival, prompt_len, max_tokens) in enumerate(self.scenario.requests):
            if arrival == step:
                self.add(f"req-{i}", prompt_len, max_tokens)

    def schedule(self, step: int) -> dict[str, Any]:
        # As the engine hook asks (wiring/throttle_hook.py): throttled only
        # where the gate says so, else upstream's own call.
        throttles = getattr(self.scheduler, "balance_throttles", None)
        if throttles is not None and throttles():
            output = self.scheduler.schedule(True)
        else:
            output = self.scheduler.schedule()
        normalized = normalize(output)
        self.scheduler.update_from_output(
            output, fake_model_output(self.scheduler, output, step)
        )
        return normalized

    def step(self, step: int) -> dict[str, Any]:
        self.arrive(step)
        return self.schedule(step)

    def queued(self) -> dict[str, RequestStatus]:
        """Status of every known request that is not running."""
        running = {r.request_id for r in self.scheduler.running}
        return {
            req_id: req.status
            for req_id, req in self.scheduler.requests.items()
            if req_id not in running and not req.is_finished()
        }


Compose = Callable[[type], type]


def compose_with(mixin: type) -> Compose:
    @functools.cache
    def compose(base: type) -> type:
        return type(f"{mixin.__name__}{base.__name__}", (mixin, base), {})

    return compose


@st.composite
def counts_near(draw: st.DrawFn, cap: int, size: int, top: int) -> list[int]:
    """``size`` running counts in ``[0, top]``, biased to the interesting
    values ``cap`` and ``cap - 1``."""
    value = st.one_of(
        st.just(min(cap, top)), st.just(max(min(cap - 1, top), 0)), st.integers(0, top)
    )
    return draw(st.lists(value, min_size=size, max_size=size))


def hypothesis_settings(max_examples: int, negative: bool) -> settings:
    """Positive runs explore randomly; negative controls are derandomized and
    skip shrinking (only that they fail matters)."""
    return settings(
        max_examples=max_examples * (4 if negative else 1),
        deadline=None,
        database=None,
        derandomize=negative,
        phases=(Phase.explicit, Phase.generate) if negative else tuple(Phase),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


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


def _recording_upstream(seen: dict[str, Any]) -> Callable[..., None]:
    def record(*args: Any, **kwargs: Any) -> None:
        seen["engine_cls"] = engine_core_mod.DPEngineCoreProc
        seen["scheduler_cls"] = kwargs[
            "vllm_config"
        ].scheduler_config.get_scheduler_cls()

    return record


@functools.cache
def disabled_scheduler_cls(base: type) -> type:
    """The scheduler class an engine core gets when balance is off: run the
    package's ``run_engine_core`` on a DP 2 MoE config with the setting off,
    the link below it replaced by a recorder (no engine starts)."""
    config = make_vllm_config(
        data_parallel_size=2,
        additional_config={"scheduler_config": {"enable_balance_scheduling": False}},
    )
    # vLLM's CPU platform turns async scheduling off; on accelerators it is
    # on by default, which makes AsyncScheduler the class to keep.
    config.scheduler_config.async_scheduling = base is AsyncScheduler
    seen: dict[str, Any] = {}
    previous = engine_core_mod.DPEngineCoreProc
    try:
        with mock.patch.object(engine_chain, "_next", _recording_upstream(seen)):
            activation.run_engine_core(vllm_config=config, dp_rank=0, local_dp_rank=0)
    finally:
        engine_core_mod.DPEngineCoreProc = previous
    assert seen["engine_cls"] is previous, SETTING
    assert not gather_hook_installed(previous), SETTING
    return seen["scheduler_cls"]


def check_disabled(provider: Compose, negative: bool = False) -> None:
    """e. disabled: the upstream class itself, no buffer, no collective,
    outputs equal to upstream."""

    @hypothesis_settings(40, negative)
    @given(scenario=scenarios())
    def run(scenario: Scenario) -> None:
        cls = provider(scenario.base)
        assert cls is scenario.base, f"{cls} is not upstream's {scenario.base}"
        disabled = Rig(cls, scenario)
        plain = Rig(scenario.base, scenario)
        assert not hasattr(disabled.scheduler, "balance_gathered"), "buffer present"
        assert not hasattr(disabled.scheduler, "admission_gather"), "gather present"
        with counting_collectives() as calls:
            for step in range(scenario.horizon):
                assert disabled.step(step) == plain.step(step), "output differs"
        assert calls == [], f"collectives made while disabled: {calls}"

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


def test_disabled_is_upstream() -> None:
    check_disabled(disabled_scheduler_cls)


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


def _always_compose(base: type) -> type:
    """A disabled path that composes the gate anyway."""
    return composition.compose_scheduler(base)


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
        pytest.param(
            check_disabled,
            _always_compose,
            "not upstream's",
            id="e-composes-when-off",
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


# --------------------------------------------------------------------------
# Bounded freeze (additional_config.scheduler_config.balance_max_frozen_steps)
#
# Several real schedulers, one per DP rank, step in lock step in this
# process; before every step each one runs the package's admission_gather()
# on the vector of all ranks' real len(running) (the scripted transport
# hands every rank the same vector, as the all-gather does). The real
# cross-rank transport with a bound is in test_gather_cadence.py.


def expected_bounded(vectors: list[list[int]], cap: int, bound: int) -> list[str]:
    """The bounded contract, written independently of the package: per
    gather ``"frozen"``, ``"open"`` or ``"fail-open"`` (leader at the cap
    after ``bound`` consecutive frozen gathers)."""
    decisions, run = [], 0
    for vector in vectors:
        if max(vector) != cap:
            decisions.append("open")
            run = 0
        elif run < bound:
            decisions.append("frozen")
            run += 1
        else:
            decisions.append("fail-open")
            run = 0
    return decisions


BoundedCompose = Callable[[type, int], type]


def gather_on(scheduler: Any, group: ScriptedGroup, vector: list[int]) -> None:
    """The real ``admission_gather()`` on a persistent group (the engine hands
    the scheduler the same ``dp_group`` object every step; a new object is
    a replaced group, which restarts the bounded-freeze run)."""
    group.counts = list(vector)
    scheduler.dp_group = group
    with scripted_transport() as payloads:
        scheduler.admission_gather()
    assert payloads == [vector[group.rank]], "payload is not len(running)"
    assert scheduler.balance_gathered.tolist() == vector


@dataclass(frozen=True)
class LockstepScenario:
    """``requests[rank] = ((arrival_step, prompt_len, max_tokens), ...)``."""

    base: type
    cap: int
    bound: int
    horizon: int
    requests: tuple[tuple[tuple[int, int, int], ...], ...]


@st.composite
def lockstep_scenarios(draw: st.DrawFn) -> LockstepScenario:
    cap = draw(st.integers(1, 4))
    horizon = draw(st.integers(4, 24))
    dp_size = draw(st.integers(2, 4))
    request = st.tuples(
        st.integers(0, horizon - 1), st.integers(1, 24), st.integers(1, 30)
    )
    requests = []
    for rank in range(dp_size):
        # A leader that stays at the cap (long outputs, more than the cap)
        # makes long frozen runs; the other ranks get generated loads.
        burst = (
            [(0, 8, draw(st.integers(8, 40))) for _ in range(cap + 2)]
            if rank == 0 and draw(st.booleans())
            else []
        )
        more = draw(st.lists(request, max_size=8))
        requests.append(tuple(burst + more))
    return LockstepScenario(
        base=draw(st.sampled_from(BASES)),
        cap=cap,
        bound=draw(st.integers(1, 4)),
        horizon=horizon,
        requests=tuple(requests),
    )


def bounded_lockstep_trace(
    compose: BoundedCompose, scenario: LockstepScenario
) -> set[str]:
    """Run every rank in lock step with a gather before each step and check
    the bounded-freeze properties (assertion messages name the property)."""
    cap, bound = scenario.cap, scenario.bound
    seen: set[str] = set()
    ranks = []
    for rank_requests in scenario.requests:
        rig = Rig(
            compose(scenario.base, bound),
            Scenario(scenario.base, cap, 400, 512, scenario.horizon, rank_requests),
        )
        ranks.append(rig)
    groups = [ScriptedGroup(rank, [0] * len(ranks)) for rank in range(len(ranks))]
    vectors: list[list[int]] = []
    decided: list[str] = []
    run = 0
    for step in range(scenario.horizon):
        for rig in ranks:
            rig.arrive(step)
        vector = [len(rig.scheduler.running) for rig in ranks]
        vectors.append(vector)
        frozen = []
        for rank, rig in enumerate(ranks):
            fail_opens = rig.scheduler.balance_fail_opens
            gather_on(rig.scheduler, groups[rank], vector)
            state = "frozen" if rig.scheduler.balance_frozen else "open"
            if rig.scheduler.balance_fail_opens > fail_opens:
                state = "fail-open"
            frozen.append(state)
        assert len(set(frozen)) == 1, (
            f"decision differs across ranks at step {step}: {frozen} for {vector}"
        )
        state = frozen[0]
        decided.append(state)
        run = run + 1 if state == "frozen" else 0
        assert run <= bound, f"frozen run longer than N={bound} at step {step}"
        at_cap = max(vector) == cap
        if state == "frozen":
            assert at_cap, f"wrong decision: froze below the cap, {vector}"
        elif at_cap:  # open at the cap: only as a fail-open after N frozen
            assert state == "fail-open", f"wrong decision: open at the cap, {vector}"
            assert decided[-bound - 1 : -1] == ["frozen"] * bound, (
                f"wrong decision: fail-open before N={bound} frozen gathers"
            )
            seen.add("fail-open")
        for rig in ranks:
            out = rig.schedule(step)
            if state == "frozen":
                assert out["new"] == [] and out["resumed"] == [], "left WAITING"
        if run == bound:
            seen.add("frozen run of N")
    assert decided == expected_bounded(vectors, cap, bound), "wrong decision"
    return seen


def check_bounded(compose: BoundedCompose, negative: bool = False) -> None:
    """Bounded freeze: identical decisions on every rank; no frozen run
    longer than N; frozen exactly when max == cap outside fail-open steps;
    a fail-open only after N frozen gathers; nothing leaves WAITING while
    frozen."""

    @hypothesis_settings(80, negative)
    @given(scenario=lockstep_scenarios())
    def run(scenario: LockstepScenario) -> None:
        for what in bounded_lockstep_trace(compose, scenario):
            event(what)

    run()


def test_bounded_freeze_properties() -> None:
    check_bounded(composition.compose_scheduler)


@pytest.mark.parametrize("base", BASES)
def test_bounded_freeze_opens_after_n_example(base: type) -> None:
    """One hand-made lock-step trace: a leader pinned at the cap with N = 2
    gives frozen, frozen, fail-open, frozen, frozen, fail-open, ..."""
    burst = tuple((0, 8, 30) for _ in range(5))
    scenario = LockstepScenario(base, 3, 2, 12, (burst, ((0, 8, 30),)))
    seen = bounded_lockstep_trace(composition.compose_scheduler, scenario)
    assert {"fail-open", "frozen run of N"} <= seen


def test_unbounded_is_the_contract() -> None:
    """No setting: the composed class is the unbounded gate (no fail-open)."""
    for base in BASES:
        assert composition.compose_scheduler(base).balance_max_frozen_steps is None
        assert composition.compose_scheduler(
            base, None
        ) is composition.compose_scheduler(base)
        assert composition.compose_scheduler(base, 3).balance_max_frozen_steps == 3


@pytest.mark.parametrize("base", BASES)
def test_replaced_group_restarts_the_run(base: type) -> None:
    """Elastic EP replaces ``dp_group``; a joining rank has no history, so
    every member restarts the run at 0 and all agree again."""
    rig = Rig(
        composition.compose_scheduler(base, 2), Scenario(base, 3, 200, 512, 1, ())
    )
    scheduler = rig.scheduler
    states = []
    for group in (ScriptedGroup(0, [0, 3]), ScriptedGroup(0, [0, 3, 3])):
        for _ in range(3):
            gather_on(scheduler, group, [0] + group.counts[1:])
            states.append(scheduler.balance_frozen)
    assert states == [True, True, False, True, True, False]
    fresh = Rig(
        composition.compose_scheduler(base, 2), Scenario(base, 3, 200, 512, 1, ())
    )
    gather_on(scheduler, ScriptedGroup(0, [0, 3]), [0, 3])
    gather_on(fresh.scheduler, ScriptedGroup(0, [0, 3]), [0, 3])
    assert scheduler.balance_frozen_run == fresh.scheduler.balance_frozen_run == 1


def _off_by_one_bound(base: type, bound: int) -> type:
    """A bound that is off by one: opens after N + 1 frozen gathers."""
    return composition.compose_scheduler(base, bound + 1)


class PerRankCounterGate(BalanceSchedulerMixin):
    """A per-rank (not shared) counter: counts a frozen gather only while
    this rank has requests waiting, so ranks with different local queues
    open on different steps."""

    local_bound: int = 1
    _local_run: int = 0

    def admission_gather(self) -> None:
        super().admission_gather()  # composed unbounded: the plain decision
        if not self.balance_frozen:
            self._local_run = 0
        elif self._local_run >= self.local_bound:
            self.balance_frozen = False
            self.balance_fail_opens += 1
            self._local_run = 0
        elif self.waiting:  # type: ignore[attr-defined]
            self._local_run += 1


@functools.cache
def _per_rank_counter(base: type, bound: int) -> type:
    return type(
        f"PerRankCounter{base.__name__}",
        (PerRankCounterGate, base),
        {"local_bound": bound},
    )


@pytest.mark.parametrize(
    ("gate", "reason"),
    [
        pytest.param(_off_by_one_bound, "frozen run longer than N", id="off-by-one"),
        pytest.param(_per_rank_counter, "decision differs across ranks", id="per-rank"),
    ],
)
def test_bounded_negative_control_fails(gate: BoundedCompose, reason: str) -> None:
    with pytest.raises(AssertionError, match=reason):
        check_bounded(gate, negative=True)
