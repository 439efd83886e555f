# SPDX-License-Identifier: Apache-2.0
"""Differential against vllm-ascend main's real ``BalanceScheduler`` (from the
checkout in ``$VAB_VLLM_ASCEND_SRC``, .github/vllm-ascend-main.commit) on the
vLLM it pins (0.27.1, the release lane) vs this package's gate composed onto
upstream's ``Scheduler``/``AsyncScheduler``, stepped through the same
hypothesis-driven traces (the machine of ``test_vllm_ascend_differential.py``,
which does this for vllm-ascend 0.23.0.post1 on the ascend lane).

Before every step both gates gather the same scripted DP vector through their
real gathers (``dist.all_gather`` replaced): the gate decisions must be
identical on every step. Every field of both ``SchedulerOutput``s, the
``EngineCoreOutputs`` (scheduler stats included) and the scheduler state must
agree too, except the paths in :data:`DRIFT`: each is vllm-ascend's copied
``schedule()`` departing from upstream, pinned below by a minimal
reproduction that runs upstream's ungated ``Scheduler`` on the same inputs
and shows it agrees with this package (``test_drift_*``). On a vllm-ascend
tree whose ``BalanceScheduler`` gates through vLLM's seam (patch 1 of
``downstream_patch/vllm-ascend/main/``) no copy runs and :data:`DRIFT` is
empty: the outputs must then be identical everywhere.

Negative control: a gate that freezes one request early (``max >= cap - 1``)
makes the same machine fail.

vllm-ascend's NPU-only modules are the suite's stand-ins
(tests/support/npu_stubs.py); its patch module is executed by file path, so
the rest of its platform patches are not applied to this process.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import inspect
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tests.support import vllm_ascend_src

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # two hypothesis state machines over real schedulers
]

SRC = vllm_ascend_src.source()
if SRC is None:
    pytest.skip(vllm_ascend_src.SKIP_REASON, allow_module_level=True)
try:
    vllm_ascend_src.activate(SRC)
except RuntimeError as exc:  # another vllm_ascend already imported
    pytest.skip(str(exc), allow_module_level=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import vllm.v1.core.sched.scheduler as scheduler_mod  # noqa: E402
import vllm.v1.engine.core as engine_core_mod  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from vllm.v1.request import RequestStatus  # noqa: E402

from tests.support.model_outputs import fake_model_output  # noqa: E402
from tests.support.original_scheduler import async_scheduler_over  # noqa: E402
from tests.support.vllm_objects import (  # noqa: E402
    make_request,
    make_scheduler,
    make_vllm_config,
)
from vllm_ascend_balance.activation import compose_scheduler  # noqa: E402
from vllm_ascend_balance.scheduler import SEAM, admission_cap  # noqa: E402


def _load_patch_module() -> Any:
    """vllm-ascend's ``patch_balance_schedule.py`` executed by file path (its
    package ``vllm_ascend.patch.platform`` would apply every platform patch).
    Its import-time swaps (the module-level ``Scheduler``,
    ``EngineCoreProc.run_engine_core``) are put back at once."""
    saved = (
        scheduler_mod.Scheduler,
        engine_core_mod.EngineCoreProc.__dict__["run_engine_core"],
        engine_core_mod.DPEngineCoreProc,
    )
    path = SRC / "vllm_ascend" / "patch" / "platform" / "patch_balance_schedule.py"
    spec = importlib.util.spec_from_file_location("vab_vllm_ascend_main_balance", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        scheduler_mod.Scheduler = saved[0]
        engine_core_mod.EngineCoreProc.run_engine_core = saved[1]
        engine_core_mod.DPEngineCoreProc = saved[2]
    return module


ascend = _load_patch_module()
BLOCK_SIZE = 16
ASCEND = ascend.BalanceScheduler
UPSTREAM = ASCEND.__bases__[0]
UPSTREAM_ASYNC = async_scheduler_over("vab_main_diff_upstream_async", UPSTREAM)
ASCEND_ASYNC = async_scheduler_over("vab_main_diff_ascend_async", ASCEND)
THROTTLE = "throttle_prefills" in inspect.signature(UPSTREAM.schedule).parameters
# Whether vllm-ascend's copied schedule() is what runs with balance on (main
# as it is), or upstream's through the seam (patch 1 on a vLLM with the seam).
COPY_RUNS = "schedule" in vars(ASCEND) and not getattr(
    ascend, "_HAS_ADMISSION_SEAM", False
)

# Known drift of the copy: output/state paths the differential leaves out of
# the comparison, each pinned by a test_drift_* below with its reproduction.
DRIFT: frozenset[str] = (
    frozenset(
        {
            # Reset preemptions not reported (test_drift_reset_preemptions_*).
            "SchedulerOutput.preempted_req_ids",
            # Prefix-cache counters (test_drift_prefix_cache_stats_*).
            "EngineCoreOutputs.scheduler_stats.prefix_cache_stats",
        }
    )
    if COPY_RUNS
    else frozenset()
)
# The copy defers a throttled full prefix hit (and a 1-token prompt) that
# upstream admits (test_drift_throttled_step_defers_full_prefix_hit): where the
# copy runs, throttled steps are drawn only without prefix caching, and prompts
# have at least 2 tokens, where the two rules agree.
THROTTLE_NEEDS_NO_PREFIX_CACHE = COPY_RUNS


class Divergence(AssertionError):
    """vllm-ascend's BalanceScheduler and this package disagreed."""


# --------------------------------------------------------------------------
# Field-by-field normalisation
# --------------------------------------------------------------------------

_CLOCK_FIELDS = {"timestamp", "scheduled_timestamp", "arrival_time"}


def plain(obj: Any, path: str = "") -> Any:
    """A comparable tree of ``obj`` (clock readings and :data:`DRIFT` paths
    left out)."""
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
    elif hasattr(obj, "__struct_fields__"):
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


def outputs_tree(outputs: dict[int, Any]) -> Any:
    """``EngineCoreOutputs`` by client index, with the drift paths named
    without the index."""
    return {
        index: plain(eco, "EngineCoreOutputs") for index, eco in sorted(outputs.items())
    }


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


def ours_gather_name(cls: type) -> str:
    """This package's gather (``admission_gather`` once renamed so it no
    longer shadows vllm-ascend's ``balance_gather``)."""
    return "admission_gather" if hasattr(cls, "admission_gather") else "balance_gather"


def gather_both(a: Any, b: Any, others: dict[int, int]) -> None:
    with scripted_gather(others):
        a.balance_gather()
        getattr(b, ours_gather_name(type(b)))()


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


def balance_config(**config: Any) -> Any:
    # vllm-ascend's own setting (its AscendConfig is not initialised offline,
    # so its decision reads additional_config).
    return make_vllm_config(
        additional_config={"enable_balance_scheduling": True}, **config
    )


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
        self.prefix_caching = prefix_caching
        self.rank = data.draw(st.integers(0, dp_size - 1), label="rank")

        def build_one(cls: type) -> Any:
            config = balance_config(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=budget,
                num_blocks=num_blocks,
                block_size=BLOCK_SIZE,
                enable_prefix_caching=prefix_caching,
                async_scheduling=self.in_flight > 1,
                data_parallel_size=dp_size,
            )
            return make_scheduler(cls, vllm_config=config)

        self.trace.append(
            f"config dp={dp_size} rank={self.rank} max_num_seqs={max_num_seqs} "
            f"num_blocks={num_blocks} budget={budget} prefix_caching={prefix_caching}"
        )
        self.a = build_one(self.ascend_cls)
        self.b = build_one(self.ours_cls)
        assert self.a._balance_enabled, "vllm-ascend's balance would not run"
        self.a.dp_group = FakeGroup(dp_size)
        self.b.dp_group = FakeGroup(dp_size)

    @rule(
        shapes=st.lists(
            st.tuples(
                st.integers(-1, 2),  # prefix family (-1: none)
                st.integers(0, 64),  # shared prefix length
                st.integers(2, 40),  # own tail length
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
            throttle = (
                THROTTLE
                and not (THROTTLE_NEEDS_NO_PREFIX_CACHE and self.prefix_caching)
                and data.draw(st.booleans(), label="throttle")
            )
            self.schedule_one(throttle)
            if len(self.pending) >= self.in_flight:
                self.update_from_output()

    def vector(self) -> list[int]:
        return [int(t.item()) for t in self.a.balance_queue]

    def gather(self, data: st.DataObject) -> None:
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
        self.trace.append(f"gather others={others}")
        gather_both(self.a, self.b, others)
        frozen = ascend_decision(self.a)
        if frozen != self.b.balance_frozen:
            raise Divergence(
                f"gate decision: vllm-ascend {frozen}, vllm-ascend-balance "
                f"{self.b.balance_frozen} for {self.vector()}\ntrace:\n  "
                + "\n  ".join(self.trace)
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
        self.same(
            f"SchedulerOutput of step {self.steps}",
            plain(got, "SchedulerOutput"),
            plain(want, "SchedulerOutput"),
        )
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
        self.same("EngineCoreOutputs", outputs_tree(got), outputs_tree(want))
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

    def same(self, label: str, got: Any, want: Any) -> None:
        diff = first_difference(got, want)
        if diff:
            raise Divergence(
                f"{label}: vllm-ascend != vllm-ascend-balance at {diff}\ntrace:\n  "
                + "\n  ".join(self.trace)
            )

    def same_state(self) -> None:
        self.same("scheduler state", state(self.a), state(self.b))


def state(sched: Any) -> dict[str, Any]:
    return {
        "running": [r.request_id for r in sched.running],
        "waiting": [r.request_id for r in sched.waiting],
        "skipped_waiting": [
            r.request_id for r in getattr(sched, "skipped_waiting", ())
        ],
        "requests": {
            rid: (r.status.name, r.num_computed_tokens, r.num_tokens, r.num_preemptions)
            for rid, r in sched.requests.items()
        },
        "free_blocks": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
    }


def machine_for(ours: type, asynchronous: bool) -> type:
    return type(
        f"MainDifferential_{ours.__name__}",
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
    """vllm-ascend's class comes from the checkout, its decision reads the
    setting, and loading it left the process as it was."""
    assert Path(ascend.__file__).is_relative_to(SRC)
    assert ASCEND.__module__ == ascend.__name__
    assert ASCEND is not UPSTREAM and UPSTREAM is scheduler_mod.Scheduler
    assert ASCEND_ASYNC.__mro__[1] is ASCEND
    assert ascend._balance_scheduling_enabled(balance_config())
    # Which of its two paths runs: the copy (main as it is, or patch 1 on a
    # vLLM without the seam) or upstream's schedule() through the seam.
    if not COPY_RUNS:
        assert hasattr(UPSTREAM, SEAM) and SEAM in vars(ASCEND)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_vllm_ascend_main_equals_gate_over_upstream(asynchronous: bool) -> None:
    machine = machine_for(_ours(asynchronous), asynchronous)
    run_state_machine_as_test(machine, settings=DIFFERENTIAL_SETTINGS)
    print(
        f"{machine.__name__} coverage: {dict(machine.coverage)} drift: {sorted(DRIFT)}"
    )
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
    name = ours_gather_name(base)
    original = getattr(base, name)

    def gather(self: Any) -> None:
        original(self)
        if self.balance_gathered is not None:
            self.balance_frozen = (
                int(self.balance_gathered.max()) >= admission_cap(self) - 1
            )

    return type("OffByOneGate", (base,), {name: gather})


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_negative_control_off_by_one_gate_is_caught(asynchronous: bool) -> None:
    machine = machine_for(_off_by_one(_ours(asynchronous)), asynchronous)
    strict = settings(DIFFERENTIAL_SETTINGS, phases=[Phase.generate])
    with pytest.raises(Divergence):
        run_state_machine_as_test(machine, settings=strict)


# --------------------------------------------------------------------------
# Drift of the copy, pinned: minimal reproductions (three schedulers on the
# same inputs: vllm-ascend's BalanceScheduler, this package's gate, upstream
# without a gate; both gates open)
# --------------------------------------------------------------------------

needs_copy = pytest.mark.skipif(
    not COPY_RUNS, reason="vllm-ascend's BalanceScheduler runs upstream's schedule()"
)


def trio(asynchronous: bool = False, **config: Any) -> tuple[Any, Any, Any]:
    """(vllm-ascend's BalanceScheduler, this package's gate, upstream without
    a gate), gate open on both gated sides (DP 2, the other rank idle)."""
    made = []
    for cls in (
        ASCEND_ASYNC if asynchronous else ASCEND,
        _ours(asynchronous),
        UPSTREAM_ASYNC if asynchronous else UPSTREAM,
    ):
        cfg = balance_config(
            data_parallel_size=2, async_scheduling=asynchronous, **config
        )
        made.append(make_scheduler(cls, vllm_config=cfg))
    a, b, _ = made
    a.dp_group = b.dp_group = FakeGroup(2)
    gather_both(a, b, {1: 0})
    assert not ascend_decision(a) and not b.balance_frozen
    return made[0], made[1], made[2]


def _add(scheds: tuple[Any, ...], rid: str, tokens: list[int], max_tokens: int) -> None:
    for sched in scheds:
        sched.add_request(
            make_request(
                rid, len(tokens), max_tokens, BLOCK_SIZE, prompt_token_ids=tokens
            )
        )


def _step(scheds: tuple[Any, ...], step: int, **kwargs: Any) -> list[Any]:
    outs = [sched.schedule(**kwargs) for sched in scheds]
    for sched, out in zip(scheds, outs, strict=True):
        sched.update_from_output(out, fake_model_output(sched, out, step))
    return outs


@needs_copy
def test_drift_prefix_cache_stats_never_recorded() -> None:
    """Upstream records prefix-cache queries and hits when it admits a request
    (``kv_cache_manager.record_prefix_cache_stats``, "so unscheduled lookups
    are not counted"); the copy predates that split and never records them:
    with balance on, vllm-ascend's prefix-cache hit rate reads 0 queries. Two
    32-token prompts sharing 16 tokens, prefix caching on."""
    scheds = trio(enable_prefix_caching=True, max_num_seqs=4, num_blocks=64)
    shared = PREFIXES[0][:16]
    _add(scheds, "r0", shared + prompt(-1, 0, 16, 1), 2)
    stats = []
    for step in range(3):
        if step == 1:
            _add(scheds, "r1", shared + prompt(-1, 0, 16, 2), 2)
        outs = [sched.schedule() for sched in scheds]
        for sched, out in zip(scheds, outs, strict=True):
            eco = sched.update_from_output(out, fake_model_output(sched, out, step))
            if step == 1:
                stats.append(
                    next(iter(eco.values())).scheduler_stats.prefix_cache_stats
                )
    copy, ours, upstream = ((s.queries, s.hits) for s in stats)
    assert upstream == (32, 16), "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == (0, 0)


@needs_copy
def test_drift_reset_preemptions_not_reported() -> None:
    """``reset_prefix_cache(reset_running_requests=True)`` between steps
    preempts every running request; upstream reports those ids in the next
    ``SchedulerOutput.preempted_req_ids`` (``reset_preempted_req_ids``, which
    the worker needs to drop their state), the copy reports only what its own
    step preempted: nothing."""
    scheds = trio(max_num_seqs=4, num_blocks=64)
    _add(scheds, "r0", prompt(-1, 0, 8, 0), 8)
    _add(scheds, "r1", prompt(-1, 0, 8, 1), 8)
    _step(scheds, 0)
    for sched in scheds:
        assert sched.reset_prefix_cache(reset_running_requests=True)
    copy, ours, upstream = (set(out.preempted_req_ids) for out in _step(scheds, 1))
    assert upstream == {"r0", "r1"}, "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == set()


@needs_copy
def test_drift_cap_ignores_parked_streaming_sessions() -> None:
    """Upstream's admission cap counts paused streaming-input sessions
    (``num_waiting_for_streaming_input``: not in ``running`` but holding a
    model-runner slot); the copy compares ``len(running)`` alone. With
    ``max_num_seqs=2``, one request running and one session parked, upstream
    admits nothing, the copy admits a second request: three slots in use.
    The counter is set as the streaming-session path does when a session
    parks (``_update_request_as_session``)."""
    scheds = trio(max_num_seqs=2, num_blocks=64)
    _add(scheds, "r0", prompt(-1, 0, 8, 0), 8)
    _step(scheds, 0)
    for sched in scheds:
        sched.num_waiting_for_streaming_input = 1
    _add(scheds, "r1", prompt(-1, 0, 8, 1), 8)
    copy, ours, upstream = (
        [r.req_id for r in out.scheduled_new_reqs] for out in _step(scheds, 1)
    )
    assert upstream == [], "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == ["r1"]


@needs_copy
@pytest.mark.skipif(not THROTTLE, reason="this schedule() has no throttle_prefills")
def test_drift_throttled_step_defers_full_prefix_hit() -> None:
    """On a throttled step (``throttle_prefills=True``, a decode running)
    upstream defers only requests with prefill compute left
    (``num_computed_tokens < num_tokens - 1`` after the prefix-cache lookup)
    and admits a full prefix hit (one token to compute); the copy defers
    every request it has not computed yet (``request.num_computed_tokens ==
    0``), so the full hit waits for a cadence-aligned step (as does a 1-token
    prompt, which upstream admits)."""
    scheds = trio(enable_prefix_caching=True, max_num_seqs=4, num_blocks=64)
    tokens = PREFIXES[1][:33]
    _add(scheds, "r0", tokens, 8)
    _step(scheds, 0)  # r0 prefilled: its 2 full blocks are cached
    _step(scheds, 1)  # r0 decoding
    _add(scheds, "r1", tokens, 8)  # the same 33 tokens: 32 hit
    copy, ours, upstream = (
        [r.req_id for r in out.scheduled_new_reqs]
        for out in _step(scheds, 2, throttle_prefills=True)
    )
    assert upstream == ["r1"], "upstream's behaviour changed: re-derive this pin"
    assert ours == upstream
    assert copy == []
