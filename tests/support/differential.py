# SPDX-License-Identifier: Apache-2.0
"""The differential machine shared by the vllm-ascend differentials
(``tests/test_vllm_ascend_differential.py``: 0.23.0.post1 on the ascend lane;
``tests/test_vllm_ascend_main_differential.py``: main on the release lane).

A :class:`Sides` names the four classes of one release (vllm-ascend's
``BalanceScheduler`` and its async variant, upstream's ``Scheduler`` and
``AsyncScheduler``); :func:`machine_for` builds a hypothesis state machine
that steps vllm-ascend's class and this package's gate composed onto upstream
through the same traces, gathering the same scripted DP vector before every
step and comparing the gate decisions, every field of both
``SchedulerOutput``s and ``EngineCoreOutputs`` (paths in ``drift`` left out)
and the scheduler state. :func:`trio` builds the three schedulers a drift pin
compares.

    sides = Sides(ascend=..., ascend_async=..., upstream=..., upstream_async=...)
    machine = machine_for(DifferentialMachine, sides, sides.ours(False), False)
    run_differential(machine)            # coverage asserted
    assert_caught(machine_for(..., off_by_one(sides.ours(False)), False))
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections import Counter, deque
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from hypothesis.strategies import SearchStrategy
from vllm.v1.request import RequestStatus

from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.scheduler import admission_cap
from vllm_ascend_balance.wiring.composition import compose_scheduler

BLOCK_SIZE = 16

DIFFERENTIAL_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# What every passing differential run must have reached at least once.
REACHED = (
    "preemption",
    "admitted",
    "frozen with requests waiting",
    "prefix cache hit",
    "finished",
    "aborted",
    "reset",
)


class Divergence(AssertionError):
    """vllm-ascend's BalanceScheduler and this package disagreed."""


# --------------------------------------------------------------------------
# Field-by-field normalisation
# --------------------------------------------------------------------------

# Wall-clock readings: never equal between two schedulers.
_CLOCK_FIELDS = {"timestamp", "scheduled_timestamp", "arrival_time"}


def plain(obj: Any, path: str = "", drift: Collection[str] = ()) -> Any:
    """A comparable tree of ``obj``: dataclasses and objects field by field
    (clock readings and the ``drift`` paths left out), containers
    element-wise, sets sorted, tensors as lists."""
    if path in drift:
        return "<drift>"
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, dict):
        return {
            k: plain(v, f"{path}.{k}", drift) for k, v in sorted(obj.items(), key=str)
        }
    if isinstance(obj, (set, frozenset)):
        return sorted((plain(v, path, drift) for v in obj), key=repr)
    if isinstance(obj, (list, tuple, deque)):
        return [plain(v, path, drift) for v in obj]
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__struct_fields__"):  # msgspec structs
        names = list(obj.__struct_fields__)
    elif hasattr(obj, "__dict__"):
        names = sorted(vars(obj))
    else:
        return repr(obj)
    return {
        name: plain(getattr(obj, name), f"{path}.{name}" if path else name, drift)
        for name in names
        if name not in _CLOCK_FIELDS
    }


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """The first path where two :func:`plain` trees differ, or None."""
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


def outputs_tree(outputs: dict[int, Any], drift: Collection[str] = ()) -> Any:
    """``EngineCoreOutputs`` by client index, with the drift paths named
    without the index."""
    return {
        index: plain(eco, "EngineCoreOutputs", drift)
        for index, eco in sorted(outputs.items())
    }


def state(sched: Any) -> dict[str, Any]:
    """The scheduler state both sides must share after every call."""
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


# --------------------------------------------------------------------------
# Scripted DP vectors through both real gathers
# --------------------------------------------------------------------------


class FakeGroup:
    """A DP group that only knows its size (the gathers ask nothing else
    once ``dist.all_gather`` is scripted)."""

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
    """One scripted vector through vllm-ascend's ``balance_gather`` (0.23's
    takes the DP group, main's reads ``self.dp_group``) and this package's."""
    takes_group = "dp_group" in inspect.signature(type(a).balance_gather).parameters
    with scripted_gather(others):
        a.balance_gather(*((a.dp_group,) if takes_group else ()))
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


def request_shapes(min_tail: int) -> SearchStrategy[list[tuple[int, int, int, int]]]:
    """Bursts of 1-4 requests: (prefix family, -1 for none; shared prefix
    length; own tail length, at least ``min_tail``; max output tokens)."""
    return st.lists(
        st.tuples(
            st.integers(-1, 2),
            st.integers(0, 64),
            st.integers(min_tail, 40),
            st.integers(1, 24),
        ),
        min_size=1,
        max_size=4,
    )


# --------------------------------------------------------------------------
# The sides of one release
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sides:
    """One vllm-ascend release's classes: its ``BalanceScheduler`` (sync and
    async) and the upstream classes it subclasses."""

    ascend: type
    ascend_async: type
    upstream: type
    upstream_async: type

    def ascend_for(self, asynchronous: bool) -> type:
        return self.ascend_async if asynchronous else self.ascend

    def upstream_for(self, asynchronous: bool) -> type:
        return self.upstream_async if asynchronous else self.upstream

    def ours(self, asynchronous: bool) -> type:
        """This package's gate composed onto upstream."""
        return compose_scheduler(self.upstream_for(asynchronous))

    @property
    def throttle(self) -> bool:
        """Whether the installed ``schedule()`` has throttled steps at all (by
        signature, not by version)."""
        parameters = inspect.signature(self.upstream.schedule).parameters
        return "throttle_prefills" in parameters


def trio(
    sides: Sides, asynchronous: bool = False, **config: Any
) -> tuple[Any, Any, Any]:
    """(vllm-ascend's BalanceScheduler, this package's gate, upstream without
    a gate) on the same config, gate open on both gated sides (DP 2, the other
    rank idle)."""
    made = []
    for cls in (
        sides.ascend_for(asynchronous),
        sides.ours(asynchronous),
        sides.upstream_for(asynchronous),
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


# --------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------


class DifferentialMachine(RuleBasedStateMachine):
    """vllm-ascend's class (``a``) and this package's (``b``) on the same
    trace. Subclasses (via :func:`machine_for`) set the classes; a release
    narrows what it draws by overriding :meth:`config`, :meth:`may_throttle`
    or the ``add_requests`` rule."""

    ascend_cls: type
    ours_cls: type
    in_flight: int = 1
    coverage: Counter
    drift: Collection[str] = frozenset()
    throttle: bool = False

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

    def config(self, **config: Any) -> Any:
        """The vLLM config both sides are built from."""
        return balance_config(**config)

    def may_throttle(self) -> bool:
        """Whether this step may be drawn throttled."""
        return self.throttle

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
            config = self.config(
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

    def add(self, shapes: list[tuple[int, int, int, int]]) -> None:
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

    @rule(shapes=request_shapes(min_tail=1))
    def add_requests(self, shapes: list[tuple[int, int, int, int]]) -> None:
        self.add(shapes)

    @rule(data=st.data(), num_steps=st.integers(1, 6))
    def run_steps(self, data: st.DataObject, num_steps: int) -> None:
        for _ in range(num_steps):
            self.gather(data)
            throttle = self.may_throttle() and data.draw(
                st.booleans(), label="throttle"
            )
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
        self.trace.append(f"gather others={others}")
        gather_both(self.a, self.b, others)
        frozen = ascend_decision(self.a)
        if frozen != self.b.balance_frozen:
            self.fail(
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
        self.same(
            f"SchedulerOutput of step {self.steps}",
            plain(got, "SchedulerOutput", self.drift),
            plain(want, "SchedulerOutput", self.drift),
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
        self.same(
            "EngineCoreOutputs",
            outputs_tree(got, self.drift),
            outputs_tree(want, self.drift),
        )
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
            self.fail(f"reset_prefix_cache: {got} != {want}")
        self.coverage["reset"] += 1
        self.same_state()

    def fail(self, message: str) -> None:
        raise Divergence(f"{message}\ntrace:\n  " + "\n  ".join(self.trace))

    def same(self, label: str, got: Any, want: Any) -> None:
        diff = first_difference(got, want)
        if diff:
            self.fail(f"{label}: vllm-ascend != vllm-ascend-balance at {diff}")

    def same_state(self) -> None:
        self.same("scheduler state", state(self.a), state(self.b))


def machine_for(
    base: type[DifferentialMachine],
    sides: Sides,
    ours: type,
    asynchronous: bool,
    **attrs: Any,
) -> type[DifferentialMachine]:
    """``base`` stepping vllm-ascend's class against ``ours`` (two steps in
    flight when ``asynchronous``, as the async engine runs); ``attrs`` (e.g.
    ``drift``) override the machine's class attributes."""
    return type(
        f"{base.__name__}_{ours.__name__}",
        (base,),
        {
            "ascend_cls": sides.ascend_for(asynchronous),
            "ours_cls": ours,
            "in_flight": 2 if asynchronous else 1,
            "coverage": Counter(),
            "throttle": sides.throttle,
            **attrs,
        },
    )


def run_differential(machine: type[DifferentialMachine], note: str = "") -> None:
    """Run ``machine`` and assert every trace kind in :data:`REACHED` was
    reached (a differential that never froze proves nothing)."""
    run_state_machine_as_test(machine, settings=DIFFERENTIAL_SETTINGS)
    print(f"{machine.__name__} coverage: {dict(machine.coverage)}{note}")
    for reached in REACHED:
        assert machine.coverage[reached] > 0, (reached, dict(machine.coverage))


def off_by_one(base: type) -> type:
    """This package's composed class with the gate's ``==`` turned into
    ``max >= cap - 1``: freezes one request early (the negative control)."""
    name = ours_gather_name(base)
    original = getattr(base, name)

    def gather(self: Any) -> None:
        original(self)
        if self.balance_gathered is not None:
            self.balance_frozen = (
                int(self.balance_gathered.max()) >= admission_cap(self) - 1
            )

    return type("OffByOneGate", (base,), {name: gather})


def assert_caught(machine: type[DifferentialMachine]) -> None:
    """The negative control: ``machine`` must raise :class:`Divergence`."""
    strict = settings(DIFFERENTIAL_SETTINGS, phases=[Phase.generate])
    with pytest.raises(Divergence):
        run_state_machine_as_test(machine, settings=strict)
