# SPDX-License-Identifier: Apache-2.0
"""The seam patch is a pure refactor: the patched, installed ``Scheduler``
and the release's original ``Scheduler`` (loaded side by side from the
unpatched sdist source at run time) produce the same outputs for the same
multi-step traces.

A hypothesis state machine drives both through identical random traces: add
requests of varied lengths, schedule and feed a fake model output back through
``update_from_output`` (one token per request whose prefill completed), abort
requests, all under a small KV cache so that preemption happens. After every
rule it compares the normalized ``SchedulerOutput``/``EngineCoreOutputs`` and
the running/waiting state. The same is done for ``AsyncScheduler`` (with
up to two steps in flight, as the engine's batch queue does).

Where the release's loop tests ``PauseState`` (0.34 on the fork lane: the
seam's flag is the pause test or the hook), the traces also toggle the
pause state (UNPAUSED, PAUSED_NEW, PAUSED_ALL) on both sides, and the
KV-load variant runs with vLLM's ``NixlConnector`` (scheduler side, on CPU)
and ``--max-num-inflight-kv-loads`` on (a limit of 1 or 2: async KV loads
start from ``async_kv_waiting``, at the running cap too) or off: some
requests are remote prefills, whose loads the fed-back outputs finish.

Negative controls: non-neutral variants must make the same machine fail: an
override of the seam that stops one request early, and a patched file whose
inline cap check says ``>`` instead of the release's ``>=`` (built at run
time from the installed source, ``tests/support/seam_shapes.py``); from
0.34, a patched file whose flag is the hook alone (the pause term dropped:
the round-4 call site with an override that forgets ``super()``), which
admits under PAUSED_NEW.
"""

from __future__ import annotations

from collections import Counter, deque
from pathlib import Path
from typing import Any

import pytest
import vllm.v1.core.sched.scheduler as installed_scheduler
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import RequestStatus

from tests.support.model_outputs import fake_model_output
from tests.support.original_scheduler import classes_from_source, original_classes
from tests.support.pause_loop_variants import (
    async_loads_below_cap_source,
    pause_term_dropped_source,
)
from tests.support.seam_shapes import (
    inline_cap_mutant_source,
    pause_cap_mutant_source,
    pause_loop,
)
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.scheduler import SEAM, admission_cap

# why: the installed patched Scheduler against the release's original
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

BLOCK_SIZE = 16
# The installed release's loop tests PauseState, through the seam's flag
# (0.34 on).
PAUSE_SHAPE = pause_loop(Path(installed_scheduler.__file__).read_text()) is not None
# --max-num-inflight-kv-loads exists (0.34 on).
HAS_KV_LOAD_LIMIT = hasattr(Scheduler, "_admits_inflight_kv_load")


def test_original_classes_are_the_unpatched_release():
    """Guard against comparing the patched class with itself."""
    orig_sched, orig_async = original_classes()
    assert orig_sched is not Scheduler and not hasattr(orig_sched, SEAM)
    assert hasattr(Scheduler, SEAM)
    assert orig_async.__mro__[1] is orig_sched
    assert orig_async.__module__ == "vab_original_scheduler_async"
    assert set(orig_async.__dict__) - {"__module__"} == set(AsyncScheduler.__dict__) - {
        "__module__"
    }


# --------------------------------------------------------------------------
# Normalization
# --------------------------------------------------------------------------


class Divergence(AssertionError):
    """The two schedulers disagreed (as opposed to the harness crashing)."""


def _blocks(block_ids: Any) -> Any:
    if block_ids is None:
        return None
    return tuple(tuple(group) for group in block_ids)


def normalize_output(out: Any) -> dict[str, Any]:
    cached = out.scheduled_cached_reqs
    return {
        "new": [
            (r.req_id, tuple(r.prompt_token_ids or ()), r.num_computed_tokens)
            + (_blocks(r.block_ids),)
            for r in out.scheduled_new_reqs
        ],
        "cached": (
            tuple(cached.req_ids),
            tuple(sorted(getattr(cached, "resumed_req_ids", ()) or ())),
            tuple(cached.num_computed_tokens),
            tuple(_blocks(b) for b in cached.new_block_ids),
        ),
        "num_scheduled_tokens": dict(out.num_scheduled_tokens),
        "total": out.total_num_scheduled_tokens,
        "preempted": sorted(out.preempted_req_ids or ()),
        "finished": sorted(out.finished_req_ids),
    }


def normalize_engine_outputs(outputs: dict[int, Any]) -> dict[int, Any]:
    return {
        index: (
            [
                (o.request_id, tuple(o.new_token_ids), o.finish_reason, o.stop_reason)
                for o in eco.outputs
            ],
            sorted(eco.finished_requests or ()),
        )
        for index, eco in outputs.items()
    }


def scheduler_state(sched: Any) -> dict[str, Any]:
    waiting = [r.request_id for r in sched.waiting]
    skipped = [r.request_id for r in getattr(sched, "skipped_waiting", ())]
    return {
        "running": [r.request_id for r in sched.running],
        "waiting": waiting,
        "skipped_waiting": skipped,
        "kv_holding_waiting": [
            r.request_id for r in getattr(sched, "kv_holding_waiting", ())
        ],
        "async_kv_waiting": [
            r.request_id for r in getattr(sched, "async_kv_waiting", ())
        ],
        "requests": {
            rid: (r.status, r.num_computed_tokens, r.num_tokens)
            for rid, r in sched.requests.items()
        },
        "free_blocks": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
    }


def _with_kv_loads(config: Any, limit: int) -> None:
    """vLLM's NixlConnector as a KV consumer (scheduler side only, as
    tests/test_gate_scope.py uses it); ``limit`` > 0 sets
    ``--max-num-inflight-kv-loads``."""
    from vllm.config import KVTransferConfig

    config.kv_transfer_config = KVTransferConfig(
        kv_connector="NixlConnector", kv_role="kv_consumer"
    )
    config.cache_config.kv_cache_layout = "LBNHC"  # as upstream's connector tests
    if limit:
        config.scheduler_config.max_num_inflight_kv_loads = limit


def _remote_params(rid: str, prompt_len: int) -> dict[str, Any]:
    """``kv_transfer_params`` of a remote prefill (P/D consumer side)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "prefill-engine",
        "remote_request_id": f"prefill-{rid}",
        "remote_block_ids": list(range(prompt_len // BLOCK_SIZE)),
        "remote_host": "localhost",
        "remote_port": 1234,
        "tp_size": 1,
    }


def _same(label: str, got: Any, want: Any) -> None:
    if got != want:
        raise Divergence(f"{label} differs:\n  candidate: {got}\n  original:  {want}")


def _both(candidate_call: Any, original_call: Any) -> tuple[Any, Any]:
    """Run the same operation on both sides. If only one side raises, that is
    a divergence too (a non-neutral seam can trip vLLM's own assertions)."""
    results, errors = [], []
    for call in (candidate_call, original_call):
        try:
            results.append(call())
            errors.append(None)
        except Exception as exc:  # compared below, then re-raised
            results.append(None)
            errors.append(exc)
    got_err, want_err = errors
    if (got_err is None) != (want_err is None):
        raise Divergence(
            f"only one side raised: candidate {got_err!r}, original {want_err!r}"
        ) from got_err or want_err
    if got_err is not None:
        raise got_err  # both failed alike: a harness problem, not a divergence
    return results[0], results[1]


# --------------------------------------------------------------------------
# The state machine
# --------------------------------------------------------------------------


class EquivalenceMachine(RuleBasedStateMachine):
    """Candidate (patched, or a deliberately broken variant) vs original."""

    candidate_cls: type
    original_cls: type
    in_flight: int = 1  # steps scheduled before the oldest output is fed back
    coverage: Counter  # per machine class, across all examples

    def __init__(self) -> None:
        super().__init__()
        self.candidate: Any = None
        self.original: Any = None
        self.pending: deque = deque()
        self.next_id = 0
        self.kv_loads: int | None = None
        self.steps = 0

    @initialize(
        max_num_seqs=st.integers(1, 6),
        # 16-token blocks. Tight: a few long requests exhaust the cache, so
        # decode steps run out of blocks and the scheduler preempts. Roomy:
        # the running-request cap, not the cache, is what stops admission.
        num_blocks=st.one_of(st.integers(6, 16), st.integers(48, 96)),
        budget=st.sampled_from([32, 64, 128, 512]),
        # None: no KV connector; 0: NixlConnector, no load limit; 1-2:
        # --max-num-inflight-kv-loads (only where the release has it).
        kv_loads=st.sampled_from([None, 0, 1, 2] if HAS_KV_LOAD_LIMIT else [None]),
    )
    def build(
        self, max_num_seqs: int, num_blocks: int, budget: int, kv_loads: int | None
    ) -> None:
        self.kv_loads = kv_loads

        def build_one(cls: type) -> Any:
            # One config per scheduler: nothing mutable is shared between them.
            config = make_vllm_config(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=budget,
                num_blocks=num_blocks,
                block_size=BLOCK_SIZE,
                # By name: the original AsyncScheduler is not a subclass of
                # the installed one.
                async_scheduling=any(
                    c.__name__ == "AsyncScheduler" for c in cls.__mro__
                ),
            )
            if kv_loads is not None:
                _with_kv_loads(config, kv_loads)
            return make_scheduler(cls, vllm_config=config)

        self.candidate = build_one(self.candidate_cls)
        self.original = build_one(self.original_cls)

    @rule(
        shapes=st.lists(
            st.tuples(st.integers(1, 80), st.integers(1, 40)), min_size=1, max_size=4
        )
    )
    def add_requests(self, shapes: list[tuple[int, int]]) -> None:
        """A burst of requests: (prompt length, max output tokens) each; with
        a KV connector, every other one long enough is a remote prefill."""
        for prompt_len, max_tokens in shapes:
            rid = f"r{self.next_id}"
            self.next_id += 1
            remote = (
                self.kv_loads is not None
                and self.next_id % 2 == 0
                and prompt_len > BLOCK_SIZE
            )
            for sched in (self.candidate, self.original):
                request = make_request(rid, prompt_len, max_tokens, BLOCK_SIZE)
                if remote:
                    request.kv_transfer_params = _remote_params(rid, prompt_len)
                sched.add_request(request)

    @precondition(lambda self: self.candidate is not None and PAUSE_SHAPE)
    @rule(state=st.sampled_from(["UNPAUSED", "PAUSED_NEW", "PAUSED_ALL"]))
    def set_pause_state(self, state: str) -> None:
        """Pause or resume both sides (the seam's flag holds the pause test)."""
        from vllm.v1.core.sched.interface import PauseState

        for sched in (self.candidate, self.original):
            sched.set_pause_state(PauseState[state])
        self.coverage[f"pause {state}"] += 1

    @rule(num_steps=st.integers(1, 8))
    def run_steps(self, num_steps: int) -> None:
        """Engine steps: schedule, then feed back the oldest output once
        ``in_flight`` steps are outstanding (1 = sync engine loop; 2 = the
        async engine's batch queue). Several per rule so that traces reach
        deep states (full cache, preemption) within the step budget."""
        for _ in range(num_steps):
            self.schedule_one()
            if len(self.pending) >= self.in_flight:
                self.update_from_output()
            self.same_state()

    def schedule_one(self) -> None:
        self.steps += 1
        got, want = _both(self.candidate.schedule, self.original.schedule)
        _same(
            f"SchedulerOutput of step {self.steps}",
            *map(normalize_output, (got, want)),
        )
        # What the traces reached (asserted by the tests, so a harness that
        # silently stopped exercising preemption or the cap would go red).
        self.coverage["steps"] += 1
        if got.preempted_req_ids:
            self.coverage["preemption"] += 1
        if got.scheduled_new_reqs:
            self.coverage["admitted"] += 1
        if self.original.waiting and _num_running(self.original) >= admission_cap(
            self.original
        ):
            self.coverage["stopped at the cap with requests waiting"] += 1
        if getattr(self.original, "async_kv_waiting", None):
            self.coverage["async KV loads queued"] += 1
            # The loop's loads-only branch (no running slot), and a pause.
            if _num_running(self.original) >= admission_cap(self.original):
                self.coverage["async KV loads queued at the cap"] += 1
            pause = getattr(self.original, "_pause_state", None)
            if getattr(pause, "name", None) == "PAUSED_NEW":
                self.coverage["async KV loads queued under PAUSED_NEW"] += 1
        self.pending.append(
            (
                got,
                fake_model_output(self.candidate, got, self.steps),
                want,
                fake_model_output(self.original, want, self.steps),
            )
        )

    @precondition(lambda self: bool(self.pending))
    @rule()
    def update_from_output(self) -> None:
        got_out, got_mro, want_out, want_mro = self.pending.popleft()
        if self.kv_loads is not None:
            # Every load in flight on the original finishes with this output
            # (the same ids on both sides: a divergence shows in the state).
            loading = {
                rid
                for rid, r in self.original.requests.items()
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            }
            if loading:
                self.coverage["KV loads finished"] += 1
            for mro in (got_mro, want_mro):
                mro.kv_connector_output = KVConnectorOutput(finished_recving=loading)
        got, want = _both(
            lambda: self.candidate.update_from_output(got_out, got_mro),
            lambda: self.original.update_from_output(want_out, want_mro),
        )
        _same("EngineCoreOutputs", *map(normalize_engine_outputs, (got, want)))

    # Only with a few requests around, so aborts do not keep the system empty.
    @precondition(lambda self: len(self.original.requests) >= 3)
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.original.requests)))
        _both(
            lambda: self.candidate.finish_requests(rid, RequestStatus.FINISHED_ABORTED),
            lambda: self.original.finish_requests(rid, RequestStatus.FINISHED_ABORTED),
        )

    @invariant()
    def same_state(self) -> None:
        if self.candidate is not None:
            _same(
                "scheduler state",
                *map(scheduler_state, (self.candidate, self.original)),
            )


def machine_for(candidate: type, original: type, in_flight: int = 1) -> type:
    return type(
        f"Equivalence_{candidate.__name__}",
        (EquivalenceMachine,),
        {
            "candidate_cls": candidate,
            "original_cls": original,
            "in_flight": in_flight,
            "coverage": Counter(),
        },
    )


EQUIVALENCE_SETTINGS = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    database=None,  # keep the tree clean; failures print their reproduction
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _assert_traces_were_interesting(machine: type) -> None:
    print(f"{machine.__name__} coverage: {dict(machine.coverage)}")
    reached_all = ["preemption", "admitted", "stopped at the cap with requests waiting"]
    if PAUSE_SHAPE:
        reached_all += ["pause PAUSED_NEW", "pause UNPAUSED"]
    if HAS_KV_LOAD_LIMIT:
        reached_all += [
            "KV loads finished",
            "async KV loads queued",
            "async KV loads queued at the cap",
        ]
    if HAS_KV_LOAD_LIMIT and PAUSE_SHAPE:
        reached_all += ["async KV loads queued under PAUSED_NEW"]
    for reached in reached_all:
        assert machine.coverage[reached] > 0, (reached, dict(machine.coverage))


def _candidates() -> dict[str, tuple[type, type, int]]:
    orig_sched, orig_async = original_classes()
    return {
        "Scheduler": (Scheduler, orig_sched, 1),
        "AsyncScheduler": (AsyncScheduler, orig_async, 2),
    }


@pytest.mark.parametrize("name", ["Scheduler", "AsyncScheduler"])
def test_patched_equals_original_seeded(name):
    """Fixed traces (derandomized), so the coverage check is stable: they
    must include preemption, admission and stops at the cap."""
    candidate, original, in_flight = _candidates()[name]
    machine = machine_for(candidate, original, in_flight)
    seeded = settings(EQUIVALENCE_SETTINGS, derandomize=True)
    run_state_machine_as_test(machine, settings=seeded)
    _assert_traces_were_interesting(machine)


@pytest.mark.parametrize("name", ["Scheduler", "AsyncScheduler"])
def test_patched_equals_original_random(name):
    """Fresh random traces on every run: keeps exploring beyond the seeded
    ones (coverage printed, not asserted, since it varies run to run)."""
    candidate, original, in_flight = _candidates()[name]
    machine = machine_for(candidate, original, in_flight)
    run_state_machine_as_test(machine, settings=EQUIVALENCE_SETTINGS)
    print(f"{machine.__name__} coverage: {dict(machine.coverage)}")


# --------------------------------------------------------------------------
# Negative controls: a non-neutral seam must be caught
# --------------------------------------------------------------------------


def _num_running(sched: Any) -> int:
    return len(sched.running) + getattr(sched, "num_waiting_for_streaming_input", 0)


class StopsOneEarly(Scheduler):
    def _should_stop_admitting_waiting(self) -> bool:
        return _num_running(self) + 1 >= admission_cap(self)


def _inline_strict_greater() -> type:
    """The patched Scheduler with its inline cap check's ``>=`` turned into
    ``>`` (one request past the cap gets in)."""
    source = Path(installed_scheduler.__file__).read_text()
    mutant = pause_cap_mutant_source if PAUSE_SHAPE else inline_cap_mutant_source
    scheduler, _ = classes_from_source("vab_inline_gt_scheduler", mutant(source))
    return scheduler


# From 0.34: variants of the patched file (tests/support/pause_loop_variants.py)
# that differ from stock with the default hook, i.e. under PAUSED_NEW. (Its
# "async loads at the cap" keeps the release's own pause test in that branch:
# with the default hook it is stock, so only the upstream kv scope test,
# whose override holds, can catch it.)
PAUSE_VARIANTS = {
    "pause term dropped": pause_term_dropped_source,
    "async loads below the cap": async_loads_below_cap_source,
}


def _pause_variant(name: str) -> type:
    source = Path(installed_scheduler.__file__).read_text()
    module = "vab_" + name.replace(" ", "_") + "_scheduler"
    scheduler, _ = classes_from_source(module, PAUSE_VARIANTS[name](source))
    return scheduler


@pytest.mark.parametrize(
    "variant",
    [
        "seam stops one early",
        "inline cap uses >",
        *(
            pytest.param(
                name,
                marks=pytest.mark.skipif(
                    not (PAUSE_SHAPE and HAS_KV_LOAD_LIMIT),
                    reason="this release's loop tests no PauseState",
                ),
            )
            for name in PAUSE_VARIANTS
        ),
    ],
)
def test_non_neutral_variant_is_caught(variant):
    """Each known-bad variant diverges from stock within the seeded budget:
    from 0.34 the pause toggles catch the flag without its pause term and,
    with async KV traces, a held (paused) step that starts async KV loads
    below the running cap."""
    if variant == "seam stops one early":
        candidate = StopsOneEarly
    elif variant == "inline cap uses >":
        candidate = _inline_strict_greater()
    else:
        candidate = _pause_variant(variant)
    orig_sched, _ = original_classes()
    # Deterministic and without shrinking: the point is only that the machine
    # finds a divergence, reproducibly, within the same budget as above.
    strict = settings(EQUIVALENCE_SETTINGS, derandomize=True, phases=[Phase.generate])
    with pytest.raises(Divergence):
        run_state_machine_as_test(machine_for(candidate, orig_sched), settings=strict)
