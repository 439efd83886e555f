# SPDX-License-Identifier: Apache-2.0
"""The state machine of the DyntraLB differential
(``tests/test_dyntra_override_differential.py``, whose docstring says what
the traces hold): the copy (``a``) and the override (``b``) stepped through
the same random trace, compared after every call. The recompute
and profiling-chunk differentials' machines
(:mod:`tests.support.recompute_machine`, :mod:`tests.support.profiling_machine`)
subclass it."""

from __future__ import annotations

import copy
from collections import Counter, deque
from collections.abc import Collection
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
)
from vllm.v1.request import RequestStatus

from tests.support.differential import (
    BLOCK_SIZE,
    Divergence,
    first_difference,
    outputs_tree,
    plain,
    prompt,
    request_shapes,
    state,
)
from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config

# The trace's configuration (sibling machines draw it too).
BUILD_DRAWS: dict[str, st.SearchStrategy[Any]] = {
    "max_num_seqs": st.integers(1, 6),
    "num_blocks": st.one_of(st.integers(6, 16), st.integers(48, 96)),
    "budget": st.sampled_from([32, 64, 128, 512]),
    "prefix_caching": st.booleans(),
}

# What every passing run must have reached at least once.
REACHED = ("preemption", "admitted", "paused by plan", "held by plan", "finished")


class DyntraMachine(RuleBasedStateMachine):
    """The copy (``a``) and the override (``b``) on the same trace."""

    copy_cls: type
    override_cls: type
    in_flight: int = 1
    coverage: Counter
    # The paths left out of the comparison (the test lists them).
    drift: Collection[str] = frozenset()

    @staticmethod
    def block_num(sched: Any, request: Any) -> int:
        """DyntraLB's load unit (the machine class sets the copy's helper)."""
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.a: Any = None
        self.b: Any = None
        self.pending: deque = deque()
        self.next_id = 0
        self.steps = 0
        self.preemptions = 0
        self.reset_done = False
        self.trace: list[str] = []

    @initialize(**BUILD_DRAWS)
    def build(
        self, max_num_seqs: int, num_blocks: int, budget: int, prefix_caching: bool
    ) -> None:
        self.build_sides(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=budget,
            num_blocks=num_blocks,
            enable_prefix_caching=prefix_caching,
        )

    def build_sides(self, **config: Any) -> None:
        """Both sides, each from its own :meth:`side_config` of ``config``
        (``make_vllm_config``'s keywords)."""
        self.trace.append(
            "config " + " ".join(f"{key}={value}" for key, value in config.items())
        )
        self.a = make_scheduler(self.copy_cls, vllm_config=self.side_config(**config))
        self.b = make_scheduler(
            self.override_cls, vllm_config=self.side_config(**config)
        )

    def side_config(self, **config: Any) -> Any:
        """One side's vLLM config (a subclass machine may add to it)."""
        return make_vllm_config(
            block_size=BLOCK_SIZE,
            async_scheduling=self.in_flight > 1,
            data_parallel_size=2,
            **config,
        )

    @rule(shapes=request_shapes(min_tail=1))
    def add_requests(self, shapes: list[tuple[int, int, int, int]]) -> None:
        for family, shared, tail, max_tokens in shapes:
            rid = f"r{self.next_id}"
            tokens = prompt(family, shared, tail, self.next_id)
            self.trace.append(f"add {rid} prompt={len(tokens)} max_tokens={max_tokens}")
            self.next_id += 1
            for sched in (self.a, self.b):
                sched.add_request(
                    make_request(rid, len(tokens), max_tokens, BLOCK_SIZE, tokens)
                )

    @rule(data=st.data(), num_steps=st.integers(1, 6))
    def run_steps(self, data: st.DataObject, num_steps: int) -> None:
        for _ in range(num_steps):
            self.plan(data)
            self.schedule_one()
            if len(self.pending) >= self.in_flight:
                self.update_from_output()

    def plan(self, data: st.DataObject) -> None:
        """Both sides prepare the step; the same plan is handed to both."""
        got = [r.request_id for r in self.a.prepare_dyntra_lb_step()]
        want = [r.request_id for r in self.b.prepare_dyntra_lb_step()]
        self.same("admission candidates", got, want)
        # No plan half the time, so that requests run long enough to outgrow
        # the KV pool (the full prompt must fit at admission).
        modes = ["none", "none", "plan", "frozen"]
        mode = data.draw(st.sampled_from(modes), label="mode")
        modifications = None
        if mode != "none":
            running = [self.block_num(self.a, r) for r in self.a.running]
            waiting = [
                self.block_num(self.a, r) for r in self.a._lb_admission_candidates
            ]
            out_blk = data.draw(_some(running), label="out") + data.draw(
                st.lists(st.integers(1, 6), max_size=1), label="out, unmatched"
            )
            in_blk = data.draw(_some(waiting), label="in")
            modifications = {
                "out_blk": out_blk,
                "in_blk": in_blk,
                "freeze": mode == "frozen",
            }
        self.trace.append(f"plan {modifications}")
        self.a.modifications = copy.deepcopy(modifications)
        self.b.modifications = copy.deepcopy(modifications)

    def schedule_one(self) -> None:
        self.steps += 1
        self.trace.append("schedule")
        got = self.a.schedule()
        want = self.b.schedule()
        self.same(
            f"SchedulerOutput of step {self.steps}",
            plain(got, "SchedulerOutput", self.drift),
            plain(want, "SchedulerOutput", self.drift),
        )
        self.same_state()
        self.count(got)
        self.pending.append(
            (
                got,
                fake_model_output(self.a, got, self.steps),
                want,
                fake_model_output(self.b, want, self.steps),
            )
        )

    def count(self, output: Any) -> None:
        self.coverage["steps"] += 1
        # A preemption is read off the requests' counters (an lb pause keeps
        # its counter; preempted_req_ids also names requests a reset
        # preempted).
        preemptions = sum(r.num_preemptions for r in self.a.requests.values())
        if preemptions > self.preemptions:
            self.coverage["preemption"] += 1
        self.preemptions = preemptions
        if output.scheduled_new_reqs:
            self.coverage["admitted"] += 1
        self.count_extra(output)

    def count_extra(self, output: Any) -> None:
        """The coverage of the scheduler's own paths (DyntraLB's plan here;
        a subclass machine counts its scheduler's)."""
        if getattr(self.a, "_lb_paused_req_ids", ()):
            self.coverage["paused by plan"] += 1
        admit = getattr(self.a, "_lb_admit_req_ids", None)
        if admit is not None and any(
            r.request_id not in admit and r.status == RequestStatus.WAITING
            for r in self.a._lb_admission_candidates
        ):
            self.coverage["held by plan"] += 1

    @precondition(lambda self: bool(self.pending))
    @rule()
    def update_from_output(self) -> None:
        got_out, got_mro, want_out, want_mro = self.pending.popleft()
        self.trace.append("update_from_output")
        got = self.a.update_from_output(got_out, got_mro)
        want = self.b.update_from_output(want_out, want_mro)
        if any(o.finish_reason for eco in got.values() for o in eco.outputs):
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
        self.same_state()

    # Once per trace, with requests running: an operator's forced reset
    # preempts them all (between steps, as the engine does it). Not while a
    # request is paused by the plan: its KV is kept, so vLLM cannot reset the
    # cache (a RuntimeError on both sides).
    @precondition(
        lambda self: (
            self.a is not None
            and not self.pending
            and not self.reset_done
            and not self.keeps_kv()
            and len(self.a.running) >= 2
        )
    )
    @rule()
    def reset_prefix_cache(self) -> None:
        self.reset_done = True
        self.trace.append("reset_prefix_cache(reset_running_requests=True)")
        got = self.a.reset_prefix_cache(reset_running_requests=True)
        want = self.b.reset_prefix_cache(reset_running_requests=True)
        self.same("reset_prefix_cache", got, want)
        self.same_state()

    def same_state(self) -> None:
        def full(sched: Any) -> dict[str, Any]:
            # A subclass machine may step a scheduler without DyntraLB's mixin.
            paused = getattr(sched, "_lb_paused_req_ids", ())
            return {
                **state(sched),
                "lb_paused": sorted(paused),
                **self.extra_state(sched),
            }

        self.same("scheduler state", full(self.a), full(self.b))

    def keeps_kv(self) -> bool:
        """Whether a request holds its KV outside the queues (DyntraLB's
        pause), which forbids a prefix-cache reset."""
        return bool(getattr(self.a, "_lb_paused_req_ids", ()))

    def extra_state(self, sched: Any) -> dict[str, Any]:
        """More state a subclass machine compares (none here)."""
        return {}

    def same(self, label: str, got: Any, want: Any) -> None:
        diff = first_difference(got, want)
        if diff:
            raise Divergence(
                f"{label}: copy != override at {diff}\ntrace:\n  "
                + "\n  ".join(self.trace)
            )


def _some(values: list[int]) -> st.SearchStrategy[list[int]]:
    """Up to three of ``values`` (block counts a plan names), or none."""
    return st.lists(st.sampled_from(values), max_size=3) if values else st.just([])


def machine(
    copy_module: Any, override: type, asynchronous: bool, drift: Collection[str]
) -> type[DyntraMachine]:
    """The machine stepping ``copy_module``'s (a)sync DyntraLB class against
    ``override``."""
    name = "AsyncDyntraLBScheduler" if asynchronous else "DyntraLBScheduler"
    return type(
        f"DyntraMachine_{override.__module__}_{name}",
        (DyntraMachine,),
        {
            "copy_cls": getattr(copy_module, name),
            "override_cls": override,
            "in_flight": 2 if asynchronous else 1,
            "coverage": Counter(),
            "drift": frozenset(drift),
            "block_num": staticmethod(copy_module.get_dyntra_lb_request_block_num),
        },
    )
