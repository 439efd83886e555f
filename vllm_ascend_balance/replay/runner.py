# SPDX-License-Identifier: Apache-2.0
"""Run one replay mode on a real vLLM DP deployment (``AsyncLLM``).

The deployment is started the way ``vllm serve`` starts it: ``AsyncLLM``
with ``data_parallel_size`` N spawns the DP coordinator and one
``DPEngineCoreProc`` per rank; our plugin is activated by vLLM through its
``vllm.general_plugins`` entry point, and balance scheduling by
``additional_config``. The executor is
:class:`~vllm_ascend_balance.replay.executor.CostModelExecutor`.

Requests are sent at their arrival time (``arrival_s * time_scale`` wall
seconds after the start) as token-id prompts (no tokenizer:
``skip_tokenizer_init``), with ``ignore_eos`` and ``max_tokens`` = the
request's output length.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.costmodel import (
    REPLAY_CONFIG_KEY,
    CostModel,
    ReplaySettings,
)
from vllm_ascend_balance.replay.model_dir import write_tiny_moe_model
from vllm_ascend_balance.replay.recorder import rank_file
from vllm_ascend_balance.replay.workload import ReplayRequest

logger = init_logger(__name__)

EXECUTOR = "vllm_ascend_balance.replay.executor.CostModelExecutor"
ROUTINGS = ("vllm", "round-robin")


@dataclass(frozen=True)
class RunOptions:
    """Deployment and pacing options shared by both modes.

    Attributes:
        dp_size: data-parallel ranks (engine processes).
        max_num_seqs: per-rank running cap (the balance gate's cap).
        max_num_batched_tokens: per-rank token budget per step.
        max_model_len: model length in tokens.
        time_scale: wall seconds per modeled second.
        cost: the cost model.
        routing: ``"vllm"`` (vLLM's DP load balancer) or ``"round-robin"``
            (request i pinned to rank i % N, like an external router);
            requests with a ``rank`` are always pinned.
        work_dir: where the model directory and run records go.
        executor: executor class qualname (tests substitute variants).
        log_level: vLLM log level for the engine processes.
    """

    dp_size: int = 2
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    max_model_len: int = 16384
    time_scale: float = 1.0
    cost: CostModel = field(default_factory=CostModel)
    routing: str = "vllm"
    work_dir: str = ""
    executor: str = EXECUTOR
    log_level: str = "WARNING"


@dataclass
class RequestResult:
    """Front-end view of one request, in wall seconds (``time.monotonic``)."""

    index: int
    rank: int | None
    sent: float
    first: float | None = None
    finish: float | None = None
    output_tokens: int = 0
    expected_tokens: int = 0
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.finish is not None and self.error is None


@dataclass
class ModeRun:
    """What one mode measured (also when interrupted or failed)."""

    mode: str
    balance: bool
    run_dir: Path
    t0: float = 0.0
    startup_s: float = 0.0
    results: list[RequestResult] = field(default_factory=list)
    status: str = "ok"  # "ok", "interrupted", "failed: <cause>"
    started: bool = False  # the deployment came up


#: Signals that stop a replay like Ctrl-C (SIGTERM: ``kill`` of the
#: front-end; the engines are stopped and the work dir removed).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Ctrl-C (SIGINT; SIGTERM likewise) handling of a replay, installed in
    the front-end's event loop by :meth:`install` (main thread only;
    elsewhere it changes nothing).

    The flag :attr:`interrupted` is set in the signal handler itself, so it
    is already set when the consequences of the Ctrl-C (engines that died
    of it) reach the front-end. The first Ctrl-C while the engines start
    (:meth:`engine_startup`, a blocking call) raises ``KeyboardInterrupt``
    there, which ``AsyncLLM`` start-up unwinds by stopping what it started;
    any other cancels the replay's main task (the running mode stops its
    engines and reports what it measured).
    """

    def __init__(self) -> None:
        self.interrupted = False
        self._raised = False
        self._starting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._previous: dict[int, Any] = {}
        self._installed = False

    def install(self) -> None:
        """Take over SIGINT and SIGTERM for the current task (call inside the
        running loop)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._previous = {
            sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS
        }
        self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            for sig, previous in self._previous.items():
                signal.signal(sig, previous)
            self._installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.interrupted = True
        if self._starting and not self._raised:
            self._raised = True
            raise KeyboardInterrupt
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    @contextlib.contextmanager
    def engine_startup(self) -> Iterator[None]:
        """Around ``AsyncLLM`` start-up: the engine processes are spawned
        with SIGINT blocked (a child inherits its parent thread's signal
        mask), so a Ctrl-C in the terminal, which reaches the whole process
        group, does not kill them mid-import with a ``KeyboardInterrupt``
        traceback each; the front-end alone handles it and stops them. A
        helper thread that does not block SIGINT receives it meanwhile, so
        the front-end's handler still runs promptly."""
        if not self._installed:
            yield
            return
        # Start multiprocessing's resource tracker now if it is not running:
        # starting it unblocks SIGINT in the calling thread (it blocks, spawns
        # and unblocks), which would undo the mask below.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        stop = threading.Event()
        receiver = threading.Thread(
            target=stop.wait, name="replay-sigint-receiver", daemon=True
        )
        receiver.start()
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._starting = True
            yield
        finally:
            self._starting = False
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
            stop.set()
            receiver.join()


def free_loopback_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prompt_ids(request: ReplayRequest, vocab: int = 30000) -> list[int]:
    """Deterministic distinct token ids (prefix caching is off anyway)."""
    rng = random.Random(request.index)
    return [rng.randrange(10, vocab) for _ in range(request.prompt_tokens)]


def _engine_args(opts: RunOptions, balance: bool, run_dir: Path, model: Path) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs

    # KV cache: room for every running request at full length, so the
    # replay never preempts (preemption is not what is being compared).
    settings = ReplaySettings(
        run_dir=str(run_dir),
        lockstep_port=free_loopback_port(),
        time_scale=opts.time_scale,
        cost=opts.cost,
        kv_cache_tokens=opts.max_num_seqs * opts.max_model_len + opts.max_model_len,
    )
    return AsyncEngineArgs(
        model=str(model),
        skip_tokenizer_init=True,
        data_parallel_size=opts.dp_size,
        data_parallel_address="127.0.0.1",
        distributed_executor_backend=opts.executor,
        max_num_seqs=opts.max_num_seqs,
        max_num_batched_tokens=opts.max_num_batched_tokens,
        max_model_len=opts.max_model_len,
        enable_prefix_caching=False,
        enforce_eager=True,
        dtype="float32",
        seed=0,
        additional_config={
            "scheduler_config": {"enable_balance_scheduling": balance},
            REPLAY_CONFIG_KEY: settings.to_dict(),
        },
    )


def reap_children(grace_s: float = 5.0) -> list[int]:
    """Terminate, then kill, every child process this process started and
    that is still alive (engine cores, DP coordinator); return their pids.
    A safety net after ``AsyncLLM.shutdown()``, which normally stops them."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)
    return [c.pid for c in children if c.pid is not None]


async def run_mode(
    balance: bool,
    requests: list[ReplayRequest],
    opts: RunOptions,
    progress: Any = None,
    interrupts: Interrupts | None = None,
) -> ModeRun:
    """Start a deployment, replay ``requests``, stop it. Never raises for an
    engine failure or a cancellation (Ctrl-C, see :class:`Interrupts`): the
    returned :class:`ModeRun` says so and holds what was measured."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    mode = "on" if balance else "off"
    work = Path(opts.work_dir)
    run = ModeRun(mode, balance, work / f"balance-{mode}")
    if interrupts is not None and interrupts.interrupted:
        run.status = "interrupted"
        return run
    run.run_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(opts.dp_size):  # records of an earlier run in --run-dir
        rank_file(run.run_dir, rank).unlink(missing_ok=True)
    model = write_tiny_moe_model(work / "model", opts.max_model_len)
    # Engine processes are spawned and configure vLLM logging from the env.
    os.environ["VLLM_LOGGING_LEVEL"] = opts.log_level
    logging.getLogger("vllm").setLevel(opts.log_level)

    llm: Any = None
    started = time.monotonic()
    startup = interrupts.engine_startup() if interrupts else contextlib.nullcontext()
    try:
        with startup:
            llm = AsyncLLM.from_engine_args(
                _engine_args(opts, balance, run.run_dir, model)
            )
        run.started = True
        run.startup_s = time.monotonic() - started
        # A small lead so the first arrivals are not late while the loop
        # creates the request tasks.
        run.t0 = time.monotonic() + 0.2
        run.results = [
            RequestResult(
                r.index, _route(r, opts), 0.0, expected_tokens=r.output_tokens
            )
            for r in requests
        ]

        async def one(req: ReplayRequest, res: RequestResult) -> None:
            delay = run.t0 + req.arrival_s * opts.time_scale - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            res.sent = time.monotonic()
            params = SamplingParams(
                max_tokens=req.output_tokens,
                ignore_eos=True,
                output_kind=RequestOutputKind.DELTA,
                detokenize=False,
            )
            stream = llm.generate(
                {"prompt_token_ids": prompt_ids(req)},
                params,
                f"req-{req.index}",
                data_parallel_rank=res.rank,
            )
            async for out in stream:
                n = len(out.outputs[0].token_ids) if out.outputs else 0
                if n and res.first is None:
                    res.first = time.monotonic()
                res.output_tokens += n
                if out.finished:
                    res.finish = time.monotonic()
            if progress is not None:
                progress.update(1)

        tasks = [
            asyncio.create_task(one(r, res))
            for r, res in zip(requests, run.results, strict=True)
        ]
        try:
            await _wait_all(tasks, run)
        finally:
            for task in tasks:
                task.cancel()
    except (asyncio.CancelledError, KeyboardInterrupt):
        run.status = "interrupted"
    except Exception as exc:  # engine start-up failure
        run.status = f"failed: {_one_line(exc)}"
    finally:
        if llm is not None:
            try:
                llm.shutdown()
            except Exception:  # already dead: fall through to the reaper
                logger.debug("AsyncLLM.shutdown failed", exc_info=True)
        reaped = reap_children()
        if reaped:
            logger.debug("reaped leftover processes %s", reaped)
    return run


async def _wait_all(tasks: list[asyncio.Task], run: ModeRun) -> None:
    """Wait for every request; the first failure (an engine died) stops the
    mode, marking the results still pending."""
    pending: set[asyncio.Task] = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            exc = task.exception() if not task.cancelled() else None
            if exc is not None:
                run.status = f"failed: {_one_line(exc)}"
                for res in run.results:
                    if res.finish is None and res.error is None:
                        res.error = "not completed"
                return


def _route(request: ReplayRequest, opts: RunOptions) -> int | None:
    if request.rank is not None:
        return request.rank
    if opts.routing == "round-robin":
        return request.index % opts.dp_size
    return None


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, in full."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
