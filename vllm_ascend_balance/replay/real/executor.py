# SPDX-License-Identifier: Apache-2.0
"""A weightless vLLM executor that models step time and steps in lock step.

Passed to vLLM as ``distributed_executor_backend=
"vllm_ascend_balance.replay.real.executor.CostModelExecutor"``; vLLM builds one in
each engine process (``EngineCore.__init__``), so with data parallelism there
is one per DP rank, inside each ``DPEngineCoreProc``.

What it does in place of a model runner (cf. vLLM's ``UniProcExecutor`` and
``GPUModelRunner.execute_model``/``sample_tokens``):

- answers the start-up RPCs (KV cache spec of one full-attention layer, the
  memory for ``kv_cache_tokens`` tokens, compilation times of zero); worker
  RPCs it does not know return ``None`` (harmless, logged once);
- ``execute_model`` tracks every scheduled request's progress from the
  ``SchedulerOutput`` and ``sample_tokens`` returns one token for each
  request whose prompt (or recompute) is complete, none while a prefill is
  still in progress;
- every forward pass with scheduled tokens and every dummy batch ends in an
  all-gather over the executors' own gloo group of the DP ranks (as the MoE
  dispatch/combine does), so the ranks step in lock step; the step's modeled
  time is the slowest rank's cost
  (:func:`~vllm_ascend_balance.replay.model.cost.lockstep_ms`), and the
  executor sleeps so that the step takes ``modeled * time_scale`` wall
  seconds;
- writes per-step and per-gather records (:mod:`.recorder`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.worker_base import CompilationTimes

from vllm_ascend_balance.gate.scheduler import admission_cap
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.model.cost import ReplaySettings
from vllm_ascend_balance.replay.model.outputs import (
    SAMPLED_TOKEN_ID,
    Batch,
    OutputModel,
    model_runner_output,
)
from vllm_ascend_balance.replay.pipeline.records import RankStart, RankStep
from vllm_ascend_balance.replay.real.lockstep import LockStep
from vllm_ascend_balance.replay.real.modeled_clock import (
    ClockBoard,
    ClockKeeper,
    clock_path,
)
from vllm_ascend_balance.replay.real.peer_gate import install_peer_scheduler
from vllm_ascend_balance.replay.real.recorder import (
    RankRecorder,
    install_recording_scheduler,
    rank_file,
    recording_class,
    scheduler_state,
)

__all__ = ["SAMPLED_TOKEN_ID", "CostModelExecutor"]

logger = init_logger(__name__)

#: The one KV cache layer the executor declares (its name is never checked
#: against a model: there is none).
KV_LAYER = "model.layers.0.self_attn.attn"
KV_BLOCK_SIZE = 16


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class CostModelExecutor(Executor):
    """Executor for ``vllm-ascend-balance replay`` (see the module docstring).

    Settings come from ``additional_config["vllm_ascend_balance_replay"]``
    (:class:`~vllm_ascend_balance.replay.model.cost.ReplaySettings`).
    """

    uses_ray = False
    supports_pp = False

    # ------------------------------------------------------------------ setup
    def _init_executor(self) -> None:
        self.settings = ReplaySettings.from_vllm_config(self.vllm_config)
        parallel = self.parallel_config
        self.dp_rank: int = parallel.data_parallel_rank
        self.dp_size: int = parallel.data_parallel_size
        self.recorder = RankRecorder(rank_file(self.settings.run_dir, self.dp_rank))
        self.scheduler: Any = None
        self._modeled_ms = 0.0
        if self.settings.peer:  # a peer's rule in place of balance's
            install_peer_scheduler(self.vllm_config, self.settings.peer, self.modeled_s)
        install_recording_scheduler(self.vllm_config, self)
        self._outputs = OutputModel(self.dp_rank)
        self._pending: ModelRunnerOutput | None = None
        self._step = 0
        self._unknown_rpcs: set[str] = set()
        self._lockstep = LockStep(self.settings, self.dp_rank, self.dp_size)
        # Rank 0 keeps the modeled clock the front-end feeds arrivals on
        # (:mod:`.modeled_clock`); the ranks step in lock step.
        board = clock_path(self.settings.run_dir)
        self._clock: ClockKeeper | None = None
        if self.dp_rank == 0 and board.exists():
            self._clock = ClockKeeper(ClockBoard(board), self.settings.time_scale)

    def modeled_s(self) -> float:
        """The lock-stepped steps' modeled time so far, in seconds."""
        return self._modeled_ms / 1000.0

    @classmethod
    def engine_scheduler_cls(cls, configured: type) -> type:
        """The scheduler class an engine core with this executor builds when
        its config resolves to ``configured`` (after balance activation):
        ``Recording<configured>`` (:func:`.recorder.install_recording_scheduler`,
        here unbound). doctor's "scheduler class" line reads it."""
        return recording_class(configured)

    def attach_scheduler(self, scheduler: Any) -> None:
        """Called by the recording scheduler once vLLM has built it."""
        self.scheduler = scheduler
        cls = type(scheduler)
        self.recorder.write(
            RankStart(
                rank=self.dp_rank,
                scheduler=cls.__qualname__,
                scheduler_module=cls.__module__,
                cap=admission_cap(scheduler),
                dp_size=self.dp_size,
            )
        )

    # ------------------------------------------------------------- RPC surface
    def _kv_spec(self) -> FullAttentionSpec:
        return FullAttentionSpec(
            block_size=KV_BLOCK_SIZE, num_kv_heads=1, head_size=8, dtype=torch.float32
        )

    def _rpc_handlers(self) -> dict[str, Callable[..., Any]]:
        """Worker methods answered here (names as in ``WorkerBase`` and the
        GPU worker). Each returns the value of one worker."""

        def kv_cache_layouts() -> list[str]:
            from vllm.v1.kv_cache_layout import KVCacheLayout  # newer releases

            return [layout.name for layout in KVCacheLayout]

        return {
            "get_kv_cache_spec": lambda: {KV_LAYER: self._kv_spec()},
            "determine_available_memory": lambda: (
                self._kv_spec().page_size_bytes
                * (self.settings.kv_cache_tokens // KV_BLOCK_SIZE + 1)
            ),
            "compile_or_warm_up_model": lambda: CompilationTimes(0.0, 0.0),
            "get_supported_tasks": lambda: ("generate",),
            "get_supported_kv_cache_layouts": kv_cache_layouts,
            "execute_dummy_batch": self._dummy_batch,
            "take_draft_token_ids": lambda: None,
            "check_health": lambda: None,
            "shutdown": self._shutdown_once,
        }

    def collective_rpc(
        self,
        method: str | Callable,
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
        non_block: bool = False,
    ) -> Any:
        name = method if isinstance(method, str) else getattr(method, "__name__", "?")
        handler = self._rpc_handlers().get(name)
        if handler is None:
            # e.g. initialize_from_config, reset_mm_cache, update_max_model_len:
            # there is no worker state to change.
            if name not in self._unknown_rpcs:
                self._unknown_rpcs.add(name)
                logger.debug("replay executor: no-op worker RPC %s", name)
            result = [None]
        else:
            takes_args = bool(inspect.signature(handler).parameters)
            value = handler(*args, **(kwargs or {})) if takes_args else handler()
            result = [value]
        return _done(result) if non_block else result

    def check_health(self) -> None:
        return

    def execute_model(
        self, scheduler_output: SchedulerOutput, non_block: bool = False
    ) -> Any:
        """Phase 1: account the batch, run the lock-step collective and pace
        the step (only when tokens are scheduled, as a model runner returns
        early on an empty batch); returns ``None`` so that vLLM calls
        :meth:`sample_tokens`."""
        after_pass = getattr(self.scheduler, "peer_after_pass", None)
        if after_pass is not None:  # a peer's rule (peer_gate.py) records it
            after_pass(scheduler_output)
        batch, output, finished = self._outputs.step(scheduler_output, self._step)
        for record in finished:
            self.recorder.write(record)
        if scheduler_output.total_num_scheduled_tokens > 0:
            self._forward(batch, dummy=False)
        self._pending = output
        return _done(None) if non_block else None

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
        """Phase 2: the tokens prepared by :meth:`execute_model`."""
        output = self._pending or model_runner_output([], [])
        self._pending = None
        return _done(output) if non_block else output

    def execute_dummy_batch(self) -> None:
        self._dummy_batch()

    def take_draft_token_ids(self) -> None:
        return None

    def shutdown(self) -> None:
        self._shutdown_once()

    # ------------------------------------------------------------- modelling
    def _dummy_batch(self) -> None:
        self._forward(Batch(), dummy=True)

    def _forward(self, batch: Batch, *, dummy: bool) -> None:
        """One forward pass: the lock step (:mod:`.lockstep`) with this
        rank's modeled cost, then the step's record."""
        t0 = time.monotonic()
        cost_ms = self.settings.cost.rank_cost_ms(
            batch.prefill_tokens, batch.decode_requests, batch.decode_context_tokens
        )
        running, waiting, frozen, gathers = scheduler_state(self.scheduler)
        step_ms = self._lockstep.step_ms(cost_ms)
        self._modeled_ms += step_ms
        clock = self._clock

        def publish(deadline: float, back_to_back: bool) -> None:
            if clock is not None and clock.board is not None:
                # Nothing carried over from the previous step: the rank idled.
                idle_before = running - batch.new_requests <= 0
                origin = clock.board.snapshot().origin
                clock.step(t0, step_ms, deadline, back_to_back, idle_before, origin)

        end, overrun = self._lockstep.pace(t0, step_ms, publish)
        self.recorder.write(
            RankStep(
                step=self._step,
                rank=self.dp_rank,
                cost_ms=round(cost_ms, 3),
                step_ms=step_ms,
                running=running,
                waiting=waiting,
                prefill_tokens=batch.prefill_tokens,
                decode_requests=batch.decode_requests,
                new_requests=batch.new_requests,
                frozen=frozen,
                gathers=gathers,
                dummy=dummy,
                wall_start=t0,
                wall_end=end,
                overrun_s=round(overrun, 6),
            )
        )
        self._step += 1

    def _shutdown_once(self) -> None:
        if getattr(self, "_shut_down", False):
            return
        self._shut_down = True
        for record in self._outputs.unfinished():
            self.recorder.write(record)
        self.recorder.close()
        self._lockstep.close()
        if self._clock is not None and self._clock.board is not None:
            self._clock.board.close()

    @classmethod
    def supports_async_scheduling(cls) -> bool:
        # The CPU platform turns async scheduling off anyway; the two-phase
        # execute/sample above is the synchronous protocol.
        return False
