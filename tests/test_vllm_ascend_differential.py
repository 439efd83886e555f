# SPDX-License-Identifier: Apache-2.0
"""Differential proof against the code this package replaces: vllm-ascend's
real ``BalanceScheduler`` (its copied ``schedule()``, balance enabled) vs this
package's gate composed onto upstream's ``Scheduler``/``AsyncScheduler`` on the
same vLLM, stepped through the same hypothesis-driven traces.

Traces: bursts of requests (some sharing prompt prefixes, for prefix caching),
chunked prefill under a small token budget, a KV pool small enough to force
preemption, natural finishes (``max_tokens``), aborts, forced
``reset_prefix_cache(reset_running_requests=True)``; throttled steps only
where the installed ``schedule()`` takes ``throttle_prefills``. Before every
step both gates gather the same scripted DP vector (this rank's own slot is
its real ``len(running)``; the other ranks: gate open, leader at the cap,
lagging), through their real ``balance_gather`` with ``dist.all_gather``
replaced. Both decisions and every field of both ``SchedulerOutput``s (and of
the ``EngineCoreOutputs``, scheduler stats included) must agree, except the
differences listed in :data:`DRIFT`: each is the copy departing from upstream,
pinned below by a minimal reproduction that also runs upstream's ungated
``Scheduler`` on the same inputs and shows it agrees with this package.

Negative control: a gate that freezes one request early (``max >= cap - 1``)
makes the same machine fail.

Runs on the ascend lane (vllm-ascend installed); skipped elsewhere.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import inspect
import os
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest

if importlib.util.find_spec("vllm_ascend") is None:
    pytest.skip(
        "vllm-ascend is not installed: the differential needs its real "
        "BalanceScheduler (the ascend lane: scripts/fork.sh --lane ascend)",
        allow_module_level=True,
    )
if os.environ.get("VAB_LANE") == "ascend-main":
    pytest.skip(
        "the 0.23.0.post1 differential (vllm-ascend main's is "
        "tests/test_vllm_ascend_main_differential.py)",
        allow_module_level=True,
    )

import torch
import torch.distributed as dist
import vllm.v1.core.sched.scheduler as scheduler_mod  # noqa: E402
import vllm.v1.engine.core as engine_core_mod  # noqa: E402
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from vllm.v1.request import RequestStatus  # noqa: E402

pytestmark = pytest.mark.lane_scope("ascend")

# vllm-ascend's patch module, imported for its classes only. Importing it
# swaps process-wide hooks (the module-level Scheduler, run_engine_core) that
# other test modules of the same process rely on (test_coexistence keeps the
# parent process unpatched), so both are put back at once. vLLM imports it
# (platform pre_register_and_update()) before the engine resolves its
# scheduler class, so vLLM's AsyncScheduler then subclasses BalanceScheduler:
# ASCEND_ASYNC below is built that way explicitly, whatever this process
# imported first.
_saved = (
    scheduler_mod.Scheduler,
    engine_core_mod.EngineCoreProc.__dict__["run_engine_core"],
)
from vllm_ascend.patch.platform import (  # noqa: E402
    patch_balance_schedule as ascend,
)

scheduler_mod.Scheduler = _saved[0]
engine_core_mod.EngineCoreProc.run_engine_core = _saved[1]

from tests.support.model_outputs import fake_model_output  # noqa: E402
from tests.support.original_scheduler import async_scheduler_over  # noqa: E402
from tests.support.vllm_objects import (  # noqa: E402
    make_request,
    make_scheduler,
    make_vllm_config,
)
from vllm_ascend_balance.activation import compose_scheduler  # noqa: E402
from vllm_ascend_balance.scheduler import admission_cap  # noqa: E402

BLOCK_SIZE = 16
UPSTREAM = ascend._ORIGINAL_SCHEDULER
ASCEND = ascend.BalanceScheduler


UPSTREAM_ASYNC = async_scheduler_over("vab_diff_upstream_async", UPSTREAM)
ASCEND_ASYNC = async_scheduler_over("vab_diff_ascend_async", ASCEND)
# Whether the installed schedule() has throttled steps at all (by signature,
# not by version); the copy must then take the same flag.
THROTTLE = "throttle_prefills" in inspect.signature(UPSTREAM.schedule).parameters

# Known drift of the copy: output paths the differential leaves out of the
# comparison, each pinned by a test_drift_* below with its reproduction.
DRIFT: dict[str, str] = {}

# Known drift of the copy that is a setting upstream reads and the copy
# ignores: the differential runs with the setting at the value under which
# upstream behaves as the copy does (so every other difference still shows);
# each is pinned by a test_drift_* below at upstream's default.
DRIFT_SETTINGS: dict[str, Any] = {
    # Upstream passes full_sequence_must_fit=scheduler_reserve_full_isl
    # (default on) to allocate_slots when admitting from WAITING; the copy
    # does not (test_drift_admits_prompt_that_cannot_fit).
    "scheduler_reserve_full_isl": False,
}


def _apply_drift_settings(scheduler_config: Any) -> None:
    for name, value in DRIFT_SETTINGS.items():
        if hasattr(scheduler_config, name):
            setattr(scheduler_config, name, value)


class Divergence(AssertionError):
    """vllm-ascend's copy and this package disagreed."""


# --------------------------------------------------------------------------
# Field-by-field normalisation
# --------------------------------------------------------------------------

# Wall-clock readings: never equal between two schedulers.
_CLOCK_FIELDS = {"timestamp", "scheduled_timestamp", "arrival_time"}


def plain(obj: Any, path: str = "") -> Any:
    """A comparable tree of ``obj``: dataclasses and objects field by field
    (clock readings and :data:`DRIFT` paths left out), containers
    element-wise, sets sorted, tensors as lists."""
    if path in DRIFT:
        return "<drift>"
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: plain(v, f"{path}.{k}") for k, v in sorted(obj.items(), key=str)}
    if isinstance(obj, (set, frozenset)):
        return sorted((plain(v, path) for v in obj), key=repr)
    if isinstance(obj, (list, tuple, deque)):
        return [plain(v, path) for v in obj]
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__struct_fields__"):  # msgspec structs
        names = list(obj.__struct_fields__)
    elif hasattr(obj, "__dict__"):
        names = sorted(vars(obj))
    else:
        return repr(obj)
    return {
        name: plain(getattr(obj, name), f"{path}.{name}" if path else name)
        for name in names
        if name not in _CLOCK_FIELDS
    }


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    if type(got) is not type(want):
        return f"{path}: {got!r} != {want!r}"
    if isinstance(got, dict):
        for key in sorted(set(got) | set(want), key=str):
            if key not in got or key not in want:
                return f"{path}.{key}: only on one side"
            found = first_difference(got[key], want[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(got, list) and len(got) == len(want):
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = first_difference(g, w, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if got == want else f"{path}: {got!r} != {want!r}"


def _same(label: str, ascend_obj: Any, ours_obj: Any, root: str) -> None:
    diff = first_difference(plain(ascend_obj, root), plain(ours_obj, root), root)
    if diff:
        raise Divergence(f"{label}: vllm-ascend != vllm-ascend-balance at {diff}")


# --------------------------------------------------------------------------
# Scripted DP vectors through both real gathers
# --------------------------------------------------------------------------


class FakeGroup:
    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size


@contextmanager
def scripted_gather(others: dict[int, int]) -> Iterator[None]:
    """``dist.all_gather`` filling every slot but this rank's own (which gets
    the local tensor, as the real collective does) from ``others``."""

    def all_gather(slots: list[torch.Tensor], local: torch.Tensor, group: Any = None):
        for i, slot in enumerate(slots):
            slot.copy_(local if i not in others else torch.tensor([others[i]]))

    with mock.patch.object(dist, "all_gather", all_gather):
        yield


def ascend_decision(sched: Any) -> bool:
    """vllm-ascend's gate, read from its own gathered state."""
    return max(t.item() for t in sched.balance_queue) == sched.max_num_running_reqs


# --------------------------------------------------------------------------
# Prompts: a few shared prefixes so prefix caching hits
# --------------------------------------------------------------------------

PREFIXES = [[1000 + 97 * p + i for i in range(64)] for p in range(3)]


def prompt(prefix: int, shared: int, tail: int, salt: int) -> list[int]:
    head = PREFIXES[prefix][:shared] if prefix >= 0 else []
    return head + [(salt * 131 + i * 7) % 900 + 10 for i in range(tail)]


# --------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------


class DifferentialMachine(RuleBasedStateMachine):
    ascend_cls: type
    ours_cls: type
    in_flight: int = 1
    coverage: Counter

    def __init__(self) -> None:
        super().__init__()
        self.a: Any = None
        self.b: Any = None
        self.pending: deque = deque()
        self.next_id = 0
        self.steps = 0
        self.coverage_reset = False
        # What happened so far, in the Divergence message: the minimal
        # reproduction of a difference, readable without hypothesis' output.
        self.trace: list[str] = []

    @initialize(
        dp_size=st.integers(2, 8),
        data=st.data(),
        max_num_seqs=st.integers(1, 6),
        num_blocks=st.one_of(st.integers(6, 16), st.integers(48, 96)),
        budget=st.sampled_from([32, 64, 128, 512]),
        prefix_caching=st.booleans(),
    )
    def build(
        self,
        dp_size: int,
        data: st.DataObject,
        max_num_seqs: int,
        num_blocks: int,
        budget: int,
        prefix_caching: bool,
    ) -> None:
        self.dp_size = dp_size
        self.rank = data.draw(st.integers(0, dp_size - 1), label="rank")

        def build_one(cls: type) -> Any:
            config = make_vllm_config(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=budget,
                num_blocks=num_blocks,
                block_size=BLOCK_SIZE,
                enable_prefix_caching=prefix_caching,
                async_scheduling=self.in_flight > 1,
                data_parallel_size=dp_size,
                # vllm-ascend's own setting (its AscendConfig is not
                # initialised offline, so its decision reads this).
                additional_config={"enable_balance_scheduling": True},
            )
            _apply_drift_settings(config.scheduler_config)
            return make_scheduler(cls, vllm_config=config)

        self.trace.append(
            f"config dp={dp_size} rank={self.rank} max_num_seqs={max_num_seqs} "
            f"num_blocks={num_blocks} budget={budget} prefix_caching={prefix_caching}"
        )
        self.a = build_one(self.ascend_cls)
        self.b = build_one(self.ours_cls)
        assert self.a._balance_enabled, "vllm-ascend's copy would not run"
        self.b.dp_group = FakeGroup(dp_size)

    @rule(
        shapes=st.lists(
            st.tuples(
                st.integers(-1, 2),  # prefix family (-1: none)
                st.integers(0, 64),  # shared prefix length
                st.integers(1, 40),  # own tail length
                st.integers(1, 24),  # max output tokens
            ),
            min_size=1,
            max_size=4,
        )
    )
    def add_requests(self, shapes: list[tuple[int, int, int, int]]) -> None:
        for family, shared, tail, max_tokens in shapes:
            rid = f"r{self.next_id}"
            tokens = prompt(family, shared, tail, self.next_id)
            self.trace.append(f"add {rid} prompt={len(tokens)} max_tokens={max_tokens}")
            self.next_id += 1
            for sched in (self.a, self.b):
                sched.add_request(
                    make_request(
                        rid,
                        len(tokens),
                        max_tokens,
                        BLOCK_SIZE,
                        prompt_token_ids=tokens,
                    )
                )

    @rule(data=st.data(), num_steps=st.integers(1, 6))
    def run_steps(self, data: st.DataObject, num_steps: int) -> None:
        for _ in range(num_steps):
            self.gather(data)
            throttle = THROTTLE and data.draw(st.booleans(), label="throttle")
            self.schedule_one(throttle)
            if len(self.pending) >= self.in_flight:
                self.update_from_output()

    def vector(self) -> list[int]:
        return [int(t.item()) for t in self.a.balance_queue]

    def gather(self, data: st.DataObject) -> None:
        """One scripted DP vector through both real gathers."""
        cap = admission_cap(self.b)
        mine = len(self.b.running)
        ranks = [r for r in range(self.dp_size) if r != self.rank]
        mode = data.draw(
            st.sampled_from(["open", "leader at cap", "lagging", "any"]), label="mode"
        )
        if mode == "open":
            values = st.integers(0, max(cap - 1, 0))
        elif mode == "lagging":
            values = st.integers(0, mine)
        else:
            values = st.integers(0, cap)
        others = {r: data.draw(values, label="count") for r in ranks}
        if mode == "leader at cap":
            others[data.draw(st.sampled_from(ranks), label="leader")] = cap
        with scripted_gather(others):
            self.trace.append(f"gather others={others}")
            self.a.balance_gather(object())
            self.b.admission_gather()
        frozen = ascend_decision(self.a)
        if frozen != self.b.balance_frozen:
            raise Divergence(
                f"gate decision: vllm-ascend {frozen}, vllm-ascend-balance "
                f"{self.b.balance_frozen} for {self.vector()}"
            )
        self.coverage["frozen" if frozen else "open"] += 1

    def schedule_one(self, throttle: bool) -> None:
        self.steps += 1
        kwargs = {"throttle_prefills": True} if throttle else {}
        waiting_before = len(self.b.waiting) + len(
            getattr(self.b, "skipped_waiting", ())
        )
        self.trace.append(f"schedule{kwargs or ''}")
        got = self.a.schedule(**kwargs)
        want = self.b.schedule(**kwargs)
        self.same(f"SchedulerOutput of step {self.steps}", got, want, "SchedulerOutput")
        self.same_state()
        self.coverage["steps"] += 1
        if got.preempted_req_ids:
            self.coverage["preemption"] += 1
        if got.scheduled_new_reqs:
            self.coverage["admitted"] += 1
        if self.b.balance_frozen and waiting_before:
            self.coverage["frozen with requests waiting"] += 1
        if any(r.num_computed_tokens for r in got.scheduled_new_reqs):
            self.coverage["prefix cache hit"] += 1
        self.pending.append(
            (
                got,
                fake_model_output(self.a, got, self.steps),
                want,
                fake_model_output(self.b, want, self.steps),
            )
        )

    @precondition(lambda self: bool(self.pending))
    @rule()
    def update_from_output(self) -> None:
        got_out, got_mro, want_out, want_mro = self.pending.popleft()
        self.trace.append("update_from_output")
        got = self.a.update_from_output(got_out, got_mro)
        want = self.b.update_from_output(want_out, want_mro)
        for outputs in (got, want):
            for eco in outputs.values():
                if any(o.finish_reason is not None for o in eco.outputs):
                    self.coverage["finished"] += 1
        self.same("EngineCoreOutputs", got, want, "EngineCoreOutputs")
        self.same_state()

    @precondition(lambda self: self.a is not None and len(self.a.requests) >= 3)
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.a.requests)))
        self.trace.append(f"abort {rid}")
        for sched in (self.a, self.b):
            sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
        self.coverage["aborted"] += 1
        self.same_state()

    # Rare (once per trace, with requests running): a reset empties the KV
    # cache, which would otherwise keep traces away from preemption.
    @precondition(
        lambda self: (
            self.a is not None
            and not self.pending
            and not self.coverage_reset
            and len(self.a.running) >= 2
        )
    )
    @rule()
    def reset_prefix_cache(self) -> None:
        """An operator's forced reset (between steps, as the engine does it)."""
        self.coverage_reset = True
        self.trace.append("reset_prefix_cache(reset_running_requests=True)")
        got = self.a.reset_prefix_cache(reset_running_requests=True)
        want = self.b.reset_prefix_cache(reset_running_requests=True)
        if got != want:
            raise Divergence(f"reset_prefix_cache: {got} != {want}")
        self.coverage["reset"] += 1
        self.same_state()

    def same(self, label: str, got: Any, want: Any, root: str) -> None:
        try:
            _same(label, got, want, root)
        except Divergence as exc:
            raise Divergence(f"{exc}\ntrace:\n  " + "\n  ".join(self.trace)) from None

    def same_state(self) -> None:
        self.same("scheduler state", state(self.a), state(self.b), "state")


def state(sched: Any) -> dict[str, Any]:
    return {
        "running": [r.request_id for r in sched.running],
        "waiting": [r.request_id for r in sched.waiting],
        "skipped_waiting": [
            r.request_id for r in getattr(sched, "skipped_waiting", ())
        ],
        "requests": {
            rid: (r.status, r.num_computed_tokens, r.num_tokens, r.num_preemptions)
            for rid, r in sched.requests.items()
        },
        "free_blocks": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
    }


def machine_for(ours: type, asynchronous: bool) -> type:
    return type(
        f"Differential_{ours.__name__}",
        (DifferentialMachine,),
        {
            "ascend_cls": ASCEND_ASYNC if asynchronous else ASCEND,
            "ours_cls": ours,
            "in_flight": 2 if asynchronous else 1,
            "coverage": Counter(),
        },
    )


DIFFERENTIAL_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _ours(asynchronous: bool) -> type:
    return compose_scheduler(UPSTREAM_ASYNC if asynchronous else UPSTREAM)


def test_sides_are_what_they_claim() -> None:
    """Guard against comparing a class with itself, or with a neutralised
    vllm-ascend decision (another test in the process may have patched it)."""
    assert ASCEND.schedule is not UPSTREAM.schedule
    assert ASCEND_ASYNC.__mro__[1] is ASCEND
    # The import of vllm-ascend's patch left the process as it found it.
    assert scheduler_mod.Scheduler is UPSTREAM
    assert UPSTREAM_ASYNC.__mro__[1] is UPSTREAM
    assert ascend._balance_scheduling_enabled(
        make_vllm_config(additional_config={"enable_balance_scheduling": True})
    )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_copy_equals_gate_over_upstream(asynchronous: bool) -> None:
    machine = machine_for(_ours(asynchronous), asynchronous)
    run_state_machine_as_test(machine, settings=DIFFERENTIAL_SETTINGS)
    print(f"{machine.__name__} coverage: {dict(machine.coverage)}")
    for reached in (
        "preemption",
        "admitted",
        "frozen with requests waiting",
        "prefix cache hit",
        "finished",
        "aborted",
        "reset",
    ):
        assert machine.coverage[reached] > 0, (reached, dict(machine.coverage))


def _off_by_one(base: type) -> type:
    """This package's composed class with the gate's ``==`` turned into
    ``max >= cap - 1``: freezes one request early."""

    def admission_gather(self: Any) -> None:
        base.admission_gather(self)
        if self.balance_gathered is not None:
            self.balance_frozen = (
                int(self.balance_gathered.max()) >= admission_cap(self) - 1
            )

    return type("OffByOneGate", (base,), {"admission_gather": admission_gather})


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_negative_control_off_by_one_gate_is_caught(asynchronous: bool) -> None:
    machine = machine_for(_off_by_one(_ours(asynchronous)), asynchronous)
    strict = settings(DIFFERENTIAL_SETTINGS, phases=[Phase.generate])
    with pytest.raises(Divergence):
        run_state_machine_as_test(machine, settings=strict)


# --------------------------------------------------------------------------
# Drift of the copy, pinned: minimal reproductions (three schedulers on the
# same inputs: vllm-ascend's copy, this package's gate, upstream ungated)
# --------------------------------------------------------------------------


def trio(asynchronous: bool = False, **config: Any) -> tuple[Any, Any, Any]:
    """(vllm-ascend's copy, this package's gate, upstream without a gate),
    gate open on both gated sides (DP 2, the other rank idle)."""
    made = []
    for cls in (
        ASCEND_ASYNC if asynchronous else ASCEND,
        _ours(asynchronous),
        UPSTREAM_ASYNC if asynchronous else UPSTREAM,
    ):
        cfg = make_vllm_config(
            data_parallel_size=2,
            async_scheduling=asynchronous,
            additional_config={"enable_balance_scheduling": True},
            **config,
        )
        made.append(make_scheduler(cls, vllm_config=cfg))
    a, b, _ = made
    b.dp_group = FakeGroup(2)
    with scripted_gather({1: 0}):
        a.balance_gather(object())
        b.admission_gather()
    assert not ascend_decision(a) and not b.balance_frozen
    return made[0], made[1], made[2]


def _add(scheds: tuple[Any, ...], rid: str, prompt_len: int, max_tokens: int) -> None:
    tokens = prompt(-1, 0, prompt_len, int(rid[1:]))
    for sched in scheds:
        sched.add_request(
            make_request(
                rid, prompt_len, max_tokens, BLOCK_SIZE, prompt_token_ids=tokens
            )
        )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_drift_admits_prompt_that_cannot_fit(asynchronous: bool) -> None:
    """The copy's WAITING loop calls ``allocate_slots`` without upstream's
    ``full_sequence_must_fit=self.scheduler_reserve_full_isl`` (on by
    default): with 6 blocks of 16 tokens, one 1-token request running and a
    65-token prompt waiting, upstream (and this package's gate, open) does
    not start a prompt whose full sequence cannot fit in the free KV cache;
    the copy starts its prefill (31 tokens) and will have to preempt later.
    """
    scheds = trio(asynchronous, max_num_seqs=2, num_blocks=6, max_num_batched_tokens=32)
    copy, ours, upstream = scheds
    _add(scheds, "r0", 1, 1)
    _add(scheds, "r1", 65, 1)
    got, want, ref = (dict(s.schedule().num_scheduled_tokens) for s in scheds)
    assert ref == {"r0": 1}, "upstream's behaviour changed: re-derive this pin"
    assert want == ref
    assert got == {"r0": 1, "r1": 31}
    # The differential neutralises it with the setting off, under which
    # upstream behaves as the copy does.
    scheds = trio(asynchronous, max_num_seqs=2, num_blocks=6, max_num_batched_tokens=32)
    for sched in scheds:
        sched.scheduler_reserve_full_isl = DRIFT_SETTINGS["scheduler_reserve_full_isl"]
    _add(scheds, "r0", 1, 1)
    _add(scheds, "r1", 65, 1)
    got, want, ref = (dict(s.schedule().num_scheduled_tokens) for s in scheds)
    assert got == want == ref


def test_drift_ignores_pp_decode_cadence() -> None:
    """The copy dropped upstream's V2-model-runner + pipeline-parallel +
    async decode cadence (``current_step`` / ``next_decode_eligible_step``):
    with PP 2, upstream (and this package) schedules a decoding request every
    other step, as the worker's sampled-token broadcast ring expects; the
    copy schedules it every step. ``use_v2_model_runner`` and ``pp_size`` are
    set on the schedulers as their ``__init__`` derives them from such a
    config (a real PP 2 config needs a device platform)."""
    scheds = trio(True, max_num_seqs=4, num_blocks=64, max_num_batched_tokens=64)
    for sched in scheds:
        sched.use_v2_model_runner = True
        sched.pp_size = 2
    _add(scheds, "r0", 8, 8)
    seen: list[list[dict[str, int]]] = []
    pending: deque = deque()
    for step in range(6):
        outs = [sched.schedule() for sched in scheds]
        seen.append([dict(out.num_scheduled_tokens) for out in outs])
        pending.append(outs)
        if len(pending) == 2:  # the async engine's two steps in flight
            for sched, out in zip(scheds, pending.popleft(), strict=True):
                sched.update_from_output(out, fake_model_output(sched, out, step))
    copy, ours, upstream = zip(*seen, strict=True)
    assert upstream[1:] == ({}, {"r0": 1}, {}, {"r0": 1}, {}), upstream
    assert ours == upstream
    assert copy[1:] == ({"r0": 1},) * 5, copy
