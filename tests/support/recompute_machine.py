# SPDX-License-Identifier: Apache-2.0
"""The state machine of the recompute differential
(``tests/test_recompute_override_differential.py``, whose docstring says
what the traces hold): the copy (``a``) and the override (``b``) of
vllm-ascend's ``RecomputeScheduler`` (or its DyntraLB variant) stepped
through the same random trace, compared after every call.

It is :class:`~tests.support.dyntra_machine.DyntraMachine` (requests,
steps, aborts, the forced reset; every ``SchedulerOutput``,
``EngineCoreOutputs`` and the scheduler state compared) with what recompute
adds: most traces run as a decode node (``kv_role="kv_consumer"``) whose KV
connector is :class:`OffloadDouble`, answering the preemption offload with
success or failure as the trace draws it, so that a victim is either
offloaded and preempted or finished as recomputed; some traces run without
a connector (vLLM's own preemption); some with a ``max_model_len`` their
requests reach. The DyntraLB variant
also draws the cross-rank plan each step, as ``DyntraMachine`` does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Any
from unittest import mock

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

from tests.support.differential import plain
from tests.support.dyntra_machine import DyntraMachine

# What every passing run must have reached at least once (the DyntraLB
# variant adds DyntraMachine's plan paths, below).
REACHED = (
    "admitted",
    "finished",
    "preemption",
    "preemption without connector",
    "offloaded preemption",
    "recomputed finish",
    "recomputed with requests waiting",
)
DYNTRA_REACHED = ("paused by plan", "held by plan")
R1_END = "R1: a victim with output in flight (trace ends)"

# How the connector doubles answer update_state_before_preempt in a step:
# all offloads succeed, all fail, or by request (even ids succeed).
OFFLOAD_MODES = ("succeed", "fail", "even ids succeed")


class OffloadDouble:
    """A test double of a decode node's scheduler-side KV connector (the real
    ones move KV over the network or to host memory from the NPU, so none
    runs here). It finds no external KV, loads nothing, and answers
    ``update_state_before_preempt`` as the machine's current offload mode
    says, recording each call (the two sides' records are compared: the
    copy and the override must ask the same victims with the same blocks)."""

    requires_kv_delivery = False

    def __init__(self, machine: RecomputeMachine) -> None:
        self.machine = machine
        self.preempt_calls: list[Any] = []

    def update_state_before_preempt(
        self, request: Any, block_ids: Any, num_computed_tokens: int
    ) -> bool:
        mode = self.machine.offload_mode
        ok = mode == "succeed" or (
            mode == "even ids succeed" and int(request.request_id[1:]) % 2 == 0
        )
        self.preempt_calls.append(
            (request.request_id, plain(block_ids), num_computed_tokens, ok)
        )
        return ok

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int, bool]:
        return 0, False

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, None]:
        return False, None

    def build_connector_meta(self, scheduler_output: Any) -> None:
        return None

    def take_events(self) -> tuple[()]:
        return ()

    def get_kv_connector_stats(self) -> None:
        return None

    def has_pending_push_work(self) -> bool:
        return False

    def reset_cache(self) -> bool:
        return True

    # Notifications the double has nothing to do with.
    def bind_gpu_block_pool(self, block_pool: Any) -> None: ...
    def on_new_request(self, request: Any) -> None: ...
    def update_state_after_alloc(self, *args: Any) -> None: ...
    def update_connector_output(self, connector_output: Any) -> None: ...


class RecomputeMachine(DyntraMachine):
    """The copy (``a``) and the override (``b``) of a recompute scheduler on
    the same trace; ``dyntra`` when they are the DyntraLB variant."""

    dyntra: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.offload_mode = OFFLOAD_MODES[0]
        self.consumer = False

    @initialize(
        max_num_seqs=st.integers(1, 6),
        num_blocks=st.one_of(st.integers(5, 12), st.integers(48, 96)),
        budget=st.sampled_from([32, 64, 128, 512]),
        prefix_caching=st.booleans(),
        # Recompute runs on decode nodes: most traces have the connector.
        consumer=st.sampled_from([True, True, False]),
        # Prompts are up to 56 tokens: 64 lets some requests reach it.
        max_model_len=st.sampled_from([64, 4096]),
    )
    def build(  # type: ignore[override]
        self,
        max_num_seqs: int,
        num_blocks: int,
        budget: int,
        prefix_caching: bool,
        consumer: bool,
        max_model_len: int,
    ) -> None:
        self.consumer = consumer
        self.trace.append(f"consumer={consumer}")
        # Each side's scheduler asks the factory for its connector: each gets
        # its own double (their records are compared).
        with mock.patch.object(
            KVConnectorFactory,
            "create_connector",
            side_effect=lambda **_: OffloadDouble(self),
        ):
            self.build_sides(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=budget,
                num_blocks=num_blocks,
                enable_prefix_caching=prefix_caching,
                max_model_len=max_model_len,
            )

    def side_config(self, **config: Any) -> Any:
        vllm_config = super().side_config(**config)
        if self.consumer:
            # Set after the config is built, so that vLLM's config checks
            # never look the double's name up.
            vllm_config.kv_transfer_config = KVTransferConfig(
                kv_connector="OffloadDouble", kv_role="kv_consumer"
            )
        return vllm_config

    # Shorter prompts and longer outputs than DyntraMachine's: requests are
    # admitted into a small pool and then outgrow it while decoding, which
    # is what reaches the preemption branch.
    @rule(
        shapes=st.lists(
            st.tuples(
                st.integers(-1, 2),
                st.integers(0, 32),
                st.integers(1, 24),
                st.integers(8, 48),
            ),
            min_size=1,
            max_size=4,
        )
    )
    def add_requests(self, shapes: list[tuple[int, int, int, int]]) -> None:
        super().add_requests(shapes)

    def plan(self, data: st.DataObject) -> None:
        """The DyntraLB plan (the variant only), the offload mode, and the
        guard's coverage, before each step."""
        if self.dyntra:
            super().plan(data)
        self.offload_mode = data.draw(st.sampled_from(OFFLOAD_MODES), label="offload")
        self.trace.append(f"offload {self.offload_mode}")
        # Counted, not required: vLLM 0.27.1's own cap (max_model_len less
        # the computed and the sampled tokens) already keeps a running
        # request's computed tokens below max_model_len.
        if any(r.num_computed_tokens >= self.a.max_model_len for r in self.a.running):
            self.coverage["max_model_len guard"] += 1

    def count(self, output: Any) -> None:
        before = self.preemptions
        super().count(output)
        if self.preemptions > before and not self.consumer:
            self.coverage["preemption without connector"] += 1
        if output.preempted_reqs:
            self.coverage["offloaded preemption"] += 1
        if output.recomputed_reqs:
            self.coverage["recomputed finish"] += 1
            # The copy admits no waiting request in such a step; seam C's
            # call site counts the finished victim as a preemption for that.
            if self.a.waiting or self.a.skipped_waiting:
                self.coverage["recomputed with requests waiting"] += 1
        # Drift R1: vLLM 0.27.1's _preempt_request() turns a victim's in-flight
        # output (async scheduling) into stale output, which its
        # update_from_output() counts down; the copy's 0.25 update_from_output
        # does not (it fails an assertion of AsyncScheduler's on that output).
        # Everything up to this step was compared; the trace ends here.
        if any(r.num_stale_output_tokens for r in self.a.requests.values()):
            self.coverage[R1_END] += 1
            assume(False)

    def extra_state(self, sched: Any) -> dict[str, Any]:
        calls = sched.connector.preempt_calls if sched.connector is not None else []
        return {"update_state_before_preempt calls": calls}


def machine(
    copy_module: Any,
    override_module: Any,
    name: str,
    drift: Collection[str],
    block_num: Any,
) -> type[RecomputeMachine]:
    """The machine stepping ``copy_module.<name>`` against
    ``override_module.<name>`` (two steps in flight for the ``Async``
    classes); ``block_num`` is DyntraLB's load unit, for the plan."""
    return type(
        f"RecomputeMachine_{override_module.__name__}_{name}",
        (RecomputeMachine,),
        {
            "copy_cls": getattr(copy_module, name),
            "override_cls": getattr(override_module, name),
            "in_flight": 2 if name.startswith("Async") else 1,
            "coverage": Counter(),
            "drift": frozenset(drift),
            "dyntra": "DyntraLB" in name,
            "block_num": staticmethod(block_num),
        },
    )
