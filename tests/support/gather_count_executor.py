# SPDX-License-Identifier: Apache-2.0
"""A weightless vLLM executor that counts, in its engine process, the
busy-loop syncs and the balance all-gathers of whatever engine class
``run_engine_core`` built (vllm-ascend's ``BalanceDPEngineCoreProc`` or
vLLM's own ``DPEngineCoreProc``).

Passed as ``distributed_executor_backend="tests.support.gather_count_executor.
GatherCountExecutor"``; vLLM builds one per DP rank inside the engine being
constructed, after ``run_engine_core`` chose the engine class, so the
module-level ``DPEngineCoreProc`` read here is the class being built. What
cannot exist here is stood in for: no model (one token per finished prefill,
:class:`~vllm_ascend_balance.replay.model.outputs.OutputModel`), one KV cache
layer. Everything around it (front-end, DP coordinator, engine processes,
their gloo DP group, vllm-ascend's patches) is the real code.

Each rank writes ``rank<N>.json`` into ``$VAB_GATHER_COUNT_DIR`` after every
step: ``engine_cls``; ``syncs`` (calls of upstream's
``DPEngineCoreProc._has_global_unfinished_reqs``, once per non-idle busy-loop
iteration); ``gathers`` (``torch.distributed.all_gather`` calls whose tensor
list is the scheduler's ``balance_queue``); the scheduler's class and
``_balance_enabled``; the steps that scheduled tokens.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.worker.worker_base import CompilationTimes

from vllm_ascend_balance.replay.model.outputs import OutputModel, model_runner_output

OUT_ENV = "VAB_GATHER_COUNT_DIR"
KV_LAYER = "model.layers.0.self_attn.attn"
BLOCK_SIZE = 16
KV_TOKENS = 64 * 1024

_COUNTS: dict[str, Any] = {"syncs": 0, "gathers": 0}


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _upstream(cls: type, module: str, name: str) -> type:
    """vLLM's own class ``module.name`` in ``cls``'s MRO (the module-level
    name may be a subclass swapped in by vllm-ascend)."""
    for klass in cls.__mro__:
        if (klass.__module__, klass.__name__) == (module, name):
            return klass
    raise RuntimeError(f"{cls} is no {name}")


def _count_syncs_and_gathers(engine: type, scheduler: type) -> None:
    """Wrap upstream's sync and scheduler ``__init__`` (subclasses reach
    both through ``super()``) and ``dist.all_gather`` (read by name at call
    time by vllm-ascend's ``balance_gather``), counting into
    :data:`_COUNTS`. vLLM freezes the GC heap after start-up, so the
    scheduler is kept when it is built, not searched for later."""
    sync = engine._has_global_unfinished_reqs
    init = scheduler.__init__
    all_gather = dist.all_gather

    def kept_init(self: Any, *args: Any, **kwargs: Any) -> None:
        _COUNTS["scheduler"] = self
        init(self, *args, **kwargs)

    def counted_sync(self: Any, local_unfinished: bool) -> bool:
        _COUNTS["syncs"] += 1
        return sync(self, local_unfinished)

    def counted_all_gather(tensor_list: Any, tensor: Any, *args: Any, **kwargs: Any):
        scheduler = _COUNTS.get("scheduler")
        if tensor_list is getattr(scheduler, "balance_queue", None):
            _COUNTS["gathers"] += 1
        return all_gather(tensor_list, tensor, *args, **kwargs)

    engine._has_global_unfinished_reqs = counted_sync  # type: ignore[attr-defined]
    scheduler.__init__ = kept_init  # type: ignore[method-assign]
    dist.all_gather = counted_all_gather


class GatherCountExecutor(Executor):
    """See the module docstring."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        import vllm.v1.core.sched.scheduler as scheduler_mod
        import vllm.v1.engine.core as engine_core_mod

        self.rank: int = self.parallel_config.data_parallel_rank
        self.out = Path(os.environ[OUT_ENV]) / f"rank{self.rank}.json"
        self.engine_cls = engine_core_mod.DPEngineCoreProc
        _count_syncs_and_gathers(
            _upstream(self.engine_cls, engine_core_mod.__name__, "DPEngineCoreProc"),
            _upstream(scheduler_mod.Scheduler, scheduler_mod.__name__, "Scheduler"),
        )
        self.outputs = OutputModel(self.rank)
        self.step = 0
        self.busy_steps = 0
        self.pending: Any = None

    def _write(self) -> None:
        scheduler = _COUNTS.get("scheduler")
        engine = self.engine_cls
        record = {
            "rank": self.rank,
            "engine_cls": f"{engine.__module__}.{engine.__qualname__}",
            "scheduler_cls": type(scheduler).__qualname__,
            "balance_enabled": getattr(scheduler, "_balance_enabled", None),
            "syncs": _COUNTS["syncs"],
            "gathers": _COUNTS["gathers"],
            "busy_steps": self.busy_steps,
        }
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self.out)

    def collective_rpc(
        self,
        method: Any,
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
        non_block: bool = False,
    ) -> Any:
        name = method if isinstance(method, str) else getattr(method, "__name__", "")
        spec = FullAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=1, head_size=8, dtype=torch.float32
        )
        answers: dict[str, Any] = {
            "get_kv_cache_spec": {KV_LAYER: spec},
            "determine_available_memory": spec.page_size_bytes
            * (KV_TOKENS // BLOCK_SIZE),
            "compile_or_warm_up_model": CompilationTimes(0.0, 0.0),
            "get_supported_tasks": ("generate",),
        }
        # Other worker RPCs change no state here: there is no worker.
        result = [answers.get(name)]
        return _done(result) if non_block else result

    def check_health(self) -> None:
        return

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        _, self.pending, _ = self.outputs.step(scheduler_output, self.step)
        self.step += 1
        if scheduler_output.total_num_scheduled_tokens > 0:
            self.busy_steps += 1
        self._write()
        return _done(None) if non_block else None

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
        output = self.pending or model_runner_output([], [])
        self.pending = None
        return _done(output) if non_block else output

    def execute_dummy_batch(self) -> None:
        self._write()

    def take_draft_token_ids(self) -> None:
        return None

    def shutdown(self) -> None:
        if self.out.parent.is_dir():
            self._write()

    @classmethod
    def supports_async_scheduling(cls) -> bool:
        return False
