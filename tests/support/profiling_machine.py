# SPDX-License-Identifier: Apache-2.0
"""The state machine of the profiling-chunk differential
(``tests/test_profiling_override_differential.py``, whose docstring says what
the traces hold): main's ``ProfilingChunkScheduler`` (the copy, ``a``) and
patch 0004's (the override, ``b``), compared after every call. It is
DyntraLB's machine with no plan, longer prompts, and a predictor on both
sides fitted by the scheduler's own ``run_profiling_chunk_init()``: only the
executor that would time a forward pass on the NPU is stood in for
(:class:`SyntheticTimer`, a quadratic in the chunk size), and the worker's
online timings are the same synthetic samples on both sides (rules).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from vllm.v1.metrics.stats import PrefillStats
from vllm.v1.request import RequestStatus

from tests.support.differential import BLOCK_SIZE
from tests.support.dyntra_machine import BUILD_DRAWS, DyntraMachine
from tests.support.vllm_objects import make_vllm_config

# What every passing run must have reached at least once.
REACHED = (
    "capped by prediction",
    "admission stopped by time budget",
    "running loop stopped",
    "running loop stopped, no prediction",
    "no prediction",
    "history model",
    "preemption",
    "admitted",
    "finished",
)

# Latency models f(c) = k + b*c + a*c*c (ms) the stand-in executor answers
# with, a scaled by the base chunk (the step's token budget) so that each
# keeps its shape under every budget: convex, steep (attention-bound: the
# predicted chunk shrinks fast with the history), nearly linear, and concave
# with its peak just past the base chunk, where a prefill with a history has
# no real root under the full target (no prediction: the copy's warning, or
# its break once the budget is partly spent).
TIMINGS = {
    "convex": (3.0, 0.05, 0.05),
    "steep": (3.0, 0.05, 0.4),
    "nearly linear": (1.0, 0.02, 0.002),
    "concave": (2.0, 0.05, -0.05 / 2.4),
}


# Bursts of 1-2 long requests: (prefix family, -1 for none; shared prefix
# length; own tail length, 100-700 so that the prompt (at most 764 tokens,
# 48 blocks) fits the smallest pool; max output tokens).
LONG_SHAPES = st.lists(
    st.tuples(
        st.integers(-1, 2),
        st.integers(0, 64),
        st.integers(100, 700),
        st.integers(1, 24),
    ),
    min_size=1,
    max_size=2,
)


class SyntheticTimer:
    """Stands in for the model executor in ``run_profiling_chunk_init()``: its
    ``collective_rpc("profile_prefill_latency", args=(chunk,))`` returns
    ``[f(chunk)]`` instead of timing a forward pass on the NPU."""

    def __init__(self, shape: str, base_chunk: int) -> None:
        self.k, self.b, scale = TIMINGS[shape]
        self.a = scale / base_chunk

    def latency(self, tokens: int) -> float:
        return self.k + self.b * tokens + self.a * tokens * tokens

    def span(self, chunk: int, history: int) -> float:
        """A chunk's time after ``history`` tokens (ms)."""
        return self.latency(history + chunk) - self.latency(history)

    def collective_rpc(self, method: str, args: tuple[int, ...] = ()) -> list[float]:
        assert method == "profile_prefill_latency", method
        (chunk,) = args
        return [self.latency(chunk)]


class FirstAdmissionStats(PrefillStats):
    """Drift P11 (docs/schedule-copies.md) taken out of the copy's side: a
    request's prefill stats as vLLM 0.27.0+ keeps them, set only before its
    first preemption (the copy sets them again at every admission). The
    override's stats, whatever it does, are then compared field by field."""

    def __init__(self, machine: ProfilingMachine, request: Any) -> None:
        super().__init__()
        self._machine, self._request = machine, request

    def set(self, **kwargs: Any) -> None:
        if self._request.num_preemptions > 0:
            would_be = PrefillStats()
            PrefillStats.set(would_be, **kwargs)
            if would_be.num_cached_tokens != self.num_cached_tokens:
                # The copy would have reported another hit: P11 reached.
                self._machine.coverage["copy's prefill stats kept (P11)"] += 1
            return
        super().set(**kwargs)


class ProfilingMachine(DyntraMachine):
    """The copy (``a``) and the override (``b``) of ``ProfilingChunkScheduler``."""

    in_flight = 2  # pipeline parallelism: the engine's batch queue
    # False: the copy's own prefill stats (its P11 control diverges).
    upstream_prefill_stats = True

    def side_config(self, **config: Any) -> Any:
        # Prompts here run to several hundred tokens (chunking is the point),
        # so the inherited draws are scaled: budgets of 128 to 2048 tokens,
        # pools of 48-128 blocks (preemption) or 384-768.
        config["max_num_batched_tokens"] *= 4
        config["num_blocks"] *= 8
        # Predictions are aligned to 64 tokens; a floor of 64 lets the
        # predicted chunk bind under every budget.
        profiling = {"enabled": True, "min_chunk": 64}
        made = make_vllm_config(
            block_size=BLOCK_SIZE,
            additional_config={
                "scheduler_config": {"profiling_chunk_config": profiling}
            },
            **config,
        )
        # vllm-ascend's AscendConfig refuses profiling chunk without PP (the
        # scheduler reads nothing else of it on a sync scheduler but the
        # sampled-token payload of its output, the same on both sides).
        made.parallel_config.pipeline_parallel_size = 2
        # A per-request chunk limit keeps several prefills in progress at once
        # (without it FCFS has at most one, last in `running`, so the copy's
        # running loop would never stop before another request).
        made.scheduler_config.long_prefill_token_threshold = self.threshold
        return made

    @initialize(
        **BUILD_DRAWS,
        timing=st.sampled_from(sorted(TIMINGS)),
        need_timing=st.booleans(),
        smooth_factor=st.sampled_from([1.0, 0.8]),
        first=LONG_SHAPES,
        threshold=st.sampled_from([0, 64, 96]),
    )
    def build(  # type: ignore[override]
        self,
        timing: str,
        need_timing: bool,
        smooth_factor: float,
        first: list[tuple[int, int, int, int]],
        threshold: int,
        **drawn: Any,
    ) -> None:
        """Both sides built as DyntraLB's are, then profiled through their
        own ``run_profiling_chunk_init()`` on the same synthetic timings."""
        self.threshold = threshold
        DyntraMachine.build(self, **drawn)
        self.trace.append(
            f"long_prefill_token_threshold={threshold} "
            f"profile timing={timing} need_timing={need_timing} "
            f"smooth_factor={smooth_factor}"
        )
        self.timer = SyntheticTimer(timing, self.a.max_num_scheduled_tokens)
        for sched in (self.a, self.b):
            sched.profiling_chunk_config.need_timing = need_timing
            sched.profiling_chunk_manager.predictor.smooth_factor = smooth_factor
            sched.run_profiling_chunk_init(self.timer)
            assert sched.profiling_chunk_manager.is_ready
        self.seen: Counter = Counter()
        self.observe()
        DyntraMachine.add_requests(self, first)

    def observe(self) -> None:
        """Counts what the sides answer (the values unchanged): the copy's "no
        prediction"; the override's chunk cut below vLLM's count, its 0 for a
        running request with tokens to run (the copy's running loop stopped
        there, spent or for want of a prediction), its ``STOP``."""
        predict = self.a.profiling_chunk_manager.predict_chunk_size
        cap, admission = self.b._cap_num_new_tokens, self.b._waiting_admission

        def counting_predict(num_computed_tokens: int, target_time: float) -> Any:
            chunk = predict(num_computed_tokens, target_time)
            self.seen["no prediction"] += chunk is None
            return chunk

        def counting_cap(request: Any, num_new_tokens: int) -> int:
            capped = cap(request, num_new_tokens)
            self.seen["capped by prediction"] += 0 < capped < num_new_tokens
            running = request.status == RequestStatus.RUNNING
            self.seen["running loop stopped"] += (
                running and capped == 0 < num_new_tokens
            )
            return capped

        def counting_admission(request: Any) -> Any:
            answer = admission(request)
            self.seen["admission stopped by time budget"] += answer.name == "STOP"
            return answer

        self.a.profiling_chunk_manager.predict_chunk_size = counting_predict
        self.b._cap_num_new_tokens = counting_cap
        self.b._waiting_admission = counting_admission

    # Steps only with requests to schedule: an empty trace proves nothing.
    run_steps = precondition(lambda self: self.a is not None and bool(self.a.requests))(
        DyntraMachine.run_steps
    )

    @rule(shapes=LONG_SHAPES)
    def add_long_requests(self, shapes: list[tuple[int, int, int, int]]) -> None:
        """Prompts long enough to be chunked under every budget."""
        DyntraMachine.add_requests(self, shapes)

    # Timings are only collected while online calibration runs.
    @precondition(
        lambda self: (
            self.a is not None
            and self.a.profiling_chunk_config.need_timing
            and not self.a.profiling_chunk_manager.predictor.history_fitted
        )
    )
    @rule(
        batches=st.lists(
            st.lists(
                st.tuples(st.integers(1, 512), st.integers(0, 1024)),
                min_size=1,
                max_size=4,
            ),
            min_size=1,
            max_size=3,
        ),
        noise=st.floats(0.9, 1.1),
    )
    def refit(self, batches: list[list[tuple[int, int]]], noise: float) -> None:
        """What the worker's per-step timing does (``patch_profiling_chunk``'s
        ``update_from_output`` wrapper, outside the scheduler): the same
        batches of (chunk, history), timed by the trace's latency model, refit
        the history-aware model on both sides."""
        samples = [
            (chunks, noise * sum(self.timer.span(c, h) for c, h in chunks) / 1000)
            for chunks in batches
        ]
        self.trace.append(f"refit {samples}")
        for sched in (self.a, self.b):
            for chunks, seconds in samples:
                sched.profiling_chunk_manager.record_batch_execution_time(
                    chunks, seconds
                )

    # As patch_profiling_chunk does it: the first three such steps only.
    @precondition(
        lambda self: (
            self.a is not None and self.a.profiling_chunk_manager._set_time_count < 3
        )
    )
    @rule(fraction=st.sampled_from([0.25, 0.5, 1.0, 1.5]))
    def retarget(self, fraction: float) -> None:
        """A first step's measured time becomes the target latency, as
        ``patch_profiling_chunk`` does: here a multiple of the profiled one."""
        base = self.a.max_num_scheduled_tokens
        elapsed_ms = fraction * self.timer.span(base, 0)
        self.trace.append(f"target latency {elapsed_ms:.3f} ms")
        for sched in (self.a, self.b):
            manager = sched.profiling_chunk_manager
            manager.predictor.set_target_latency(0, elapsed_ms)
            manager._set_time_count += 1

    @precondition(
        lambda self: self.a is not None and self.a.profiling_chunk_config.need_timing
    )
    @rule()
    def calibration_done(self) -> None:
        """Online calibration ends (the wrapper turns ``need_timing`` off)."""
        self.trace.append("need_timing=False")
        for sched in (self.a, self.b):
            sched.profiling_chunk_config.need_timing = False

    def schedule_one(self) -> None:
        if self.upstream_prefill_stats:
            for request in self.a.requests.values():
                stats = request.prefill_stats
                if type(stats) is PrefillStats:  # not yet guarded
                    request.prefill_stats = FirstAdmissionStats(self, request)
        super().schedule_one()

    def extra_state(self, sched: Any) -> dict[str, Any]:
        manager = sched.profiling_chunk_manager
        return {
            "predictor": vars(manager.predictor),
            "fit data": manager.chunked_fit_data,
        }

    def keeps_kv(self) -> bool:
        return False

    def plan(self, data: st.DataObject) -> None:
        """No cross-rank plan: profiling chunk has none."""

    def count_extra(self, output: Any) -> None:
        for seen in +self.seen:  # the kinds seen in this step
            self.coverage[seen] += 1
        self.seen.clear()
        if self.b._running_loop_stopped:
            self.coverage["running loop stopped, no prediction"] += 1
        if self.a.profiling_chunk_manager.history_ready:
            self.coverage["history model"] += 1


def machine(
    copy_module: Any, override: type, drift: Collection[str]
) -> type[ProfilingMachine]:
    """The machine stepping ``copy_module``'s ``ProfilingChunkScheduler``
    against ``override``."""
    return type(
        f"ProfilingMachine_{override.__module__}",
        (ProfilingMachine,),
        {
            "copy_cls": copy_module.ProfilingChunkScheduler,
            "override_cls": override,
            "coverage": Counter(),
            "drift": frozenset(drift),
        },
    )
