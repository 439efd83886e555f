# SPDX-License-Identifier: Apache-2.0
"""Every ``replay`` option, defined once (:class:`ReplayOptions`), and the
argparse parser built from it.

A field of :class:`ReplayOptions` (or of the nested
:class:`~vllm_ascend_balance.replay.pipeline.cost.CostModel`, whose fields are
flattened into ``--step-ms`` ...) is an option ``--<field-name>``; its help,
bounds and choices are the field's metadata (:func:`.fields.option`).
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
import typing
from dataclasses import dataclass
from pathlib import Path

from vllm_ascend_balance.gate.policies import POLICIES
from vllm_ascend_balance.gate.settings import MAX_BOUND_STEPS
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.cost import CostModel
from vllm_ascend_balance.replay.pipeline.fields import (
    HelpFormatter,
    add_fields,
    build,
    check_bounds,
    option,
)
from vllm_ascend_balance.replay.pipeline.help_text import DESCRIPTION, EPILOG
from vllm_ascend_balance.replay.pipeline.modes import Mode, parse_modes, policy_usage
from vllm_ascend_balance.replay.pipeline.option_checks import check_combination
from vllm_ascend_balance.replay.pipeline.registry import ENGINES
from vllm_ascend_balance.replay.pipeline.workload import Workload, load_workload

logger = init_logger(__name__)
EXECUTOR = "vllm_ascend_balance.replay.real.executor.CostModelExecutor"
#: ``trtllm-adp`` (TensorRT-LLM's own router) exists in the simulated engine
#: only: the real deployment's front end routes with vLLM's balancer.
ROUTINGS = ("vllm", "round-robin", "trtllm-adp")
#: ``--peer-router``: a peer behind its own router, or behind ``--routing``'s.
PEER_ROUTERS = ("own", "shared")
#: ``--peer-timing``: what a peer decides on (sim/peer_step.py).
PEER_TIMINGS = ("source", "gate")
#: ``--sglang-passes``: how an SGLang peer's rank runs prefill next to decodes
#: (sim/sglang_rounds.py).
SGLANG_PASSES = ("mixed", "two-pass", "prefill-first")
#: ``--sglang-defer``: which chunks in flight SGLang's interval holds.
SGLANG_DEFERS = ("throttle", "every-rank")
_IN, _DEP, _CMP, _OUT = "input", "deployment", "comparison", "output"
#: ``--dp``: production DP MoE runs up to 256 ranks (--help, docs/replay.md);
#: beyond, the one-process simulation only grows until memory runs out.
MAX_DP = 256
#: ``--max-model-len``: 1M tokens, the longest context of today's production
#: models (e.g. Qwen2.5-1M); the simulated engine holds a prompt that long
#: (~36 MB of token ids), so an absurd length only exhausts memory.
MAX_MODEL_LEN = 1 << 20
#: The gate's policies in the ``--mode`` grammar, from their registry.
_OUR_MODES = ", ".join(policy_usage(p).split(";")[0] for p in POLICIES.values())


@dataclass(frozen=True)
class ReplayOptions:
    """The options of one replay (see ``vllm-ascend-balance replay --help``)."""

    # input
    trace: str | None = option(
        None,
        "Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens) "
        "or JSONL ({arrival_s, prompt_tokens, output_tokens[, rank]} per line); "
        "- reads stdin; default: the built-in bursty mix",
        metavar="FILE",
        group=_IN,
    )
    seed: int = option(0, "seed of the built-in workload", group=_IN)
    start: float = option(
        0.0, "skip requests arriving before S seconds into the trace",
        metavar="S", ge=0.0, group=_IN,
    )  # fmt: skip
    duration: float | None = option(
        None, "only requests arriving within S seconds after --start",
        metavar="S", gt=0.0, group=_IN,
    )  # fmt: skip
    limit: int | None = option(None, "at most N requests", metavar="N", ge=1, group=_IN)
    rate_scale: float = option(
        1.0, "divide inter-arrival times by X (2 = twice the rate; "
        "0.001 to 1000)", metavar="X", ge=1e-3, le=1e3, group=_IN,
    )  # fmt: skip
    clip: bool = option(
        False,
        "shorten requests longer than --max-model-len and raise zero token "
        "counts to 1, instead of rejecting the input",
        group=_IN,
    )
    routing: str = option(
        "vllm",
        "vllm: vLLM's DP load balancer picks the rank; round-robin: request i "
        "goes to rank i %% N; trtllm-adp (--engine sim): TensorRT-LLM's "
        "attention-DP router, one global queue, for every mode (the "
        "trtllm-adp peer always uses it); JSONL 'rank' always pins",
        choices=ROUTINGS, group=_IN,
    )  # fmt: skip
    peer_router: str = option(
        "own",
        "own: a peer that ships its own router (trtllm-adp) runs behind it; "
        "shared: every peer runs behind --routing's router, like the other "
        "modes (a peer's admission rule apart from its router; the real "
        "engine's front end is vLLM's router, so it needs shared)",
        choices=PEER_ROUTERS, group=_IN,
    )  # fmt: skip
    peer_timing: str = option(
        "source",
        "source: a peer decides on what its source's collective sees (after "
        "this step's arrivals, for most); gate: on the previous step's end, "
        "where the gate gathers (--engine sim; the real engine's peers always "
        "decide there)",
        choices=PEER_TIMINGS, group=_IN,
    )  # fmt: skip
    sglang_passes: str = option(
        "mixed",
        "SGLang peers (--engine sim): mixed: a rank's prefill and decodes run "
        "in one vLLM mixed batch (SGLang's --enable-mixed-chunk); two-pass: "
        "the same, but such a step costs a prefill pass plus a decode pass "
        "(one more --step-ms); prefill-first: SGLang's default (no mixed "
        "chunk), a rank that runs prefill in a round runs none of its "
        "decodes in it",
        choices=SGLANG_PASSES, group=_IN,
    )  # fmt: skip
    sglang_defer: str = option(
        "throttle",
        "SGLang's prefill-decode interval (--engine sim): throttle: a "
        "deferred round holds chunks in flight through vLLM's prefill "
        "throttle (only on a rank that has decodes and whose last undeferred "
        "pass left no request waiting); every-rank: on every rank, as "
        "SGLang's _should_defer_prefill",
        choices=SGLANG_DEFERS, group=_IN,
    )  # fmt: skip
    # deployment
    dp: int = option(
        2, f"data-parallel size (<= {MAX_DP})", ge=1, le=MAX_DP, group=_DEP
    )
    max_num_seqs: int = option(
        16, "per-rank running cap (the balance gate's cap)",
        metavar="N", ge=1, group=_DEP,
    )  # fmt: skip
    max_num_batched_tokens: int = option(
        2048, "per-rank token budget per step (chunked prefill)",
        metavar="N", ge=1, group=_DEP,
    )  # fmt: skip
    max_model_len: int = option(
        16384, "model length: prompt + output tokens of any request "
        f"(<= {MAX_MODEL_LEN})",
        metavar="N", ge=1, le=MAX_MODEL_LEN, group=_DEP,
    )  # fmt: skip
    kv_cache_tokens: int | None = option(
        None,
        "per-rank KV cache size in tokens (KV-bound runs: the cache, not "
        "--max-num-seqs, limits how many requests run; vLLM preempts when it "
        "fills); default: room for --max-num-seqs + 1 requests at their "
        "longest, so nothing is ever preempted",
        metavar="N", ge=1, group=_DEP,
    )  # fmt: skip
    balance_max_frozen_steps: int | None = option(
        None,
        "modes with balance on and no bound of their own (no max-held or "
        "max-frozen in the mode, no policy default): pass "
        "scheduler_config.balance_max_frozen_steps N (bounded freeze) to the "
        "engines; refused if no mode takes it",
        metavar="N", ge=1, le=MAX_BOUND_STEPS, group=_DEP,
    )  # fmt: skip
    engine: str = option(
        "asyncllm",
        "asyncllm: a real AsyncLLM DP deployment (one engine process per rank); "
        "sim: N real vLLM schedulers stepped in lock step in one process, for "
        "DP 8 to 256 (no wall-clock pacing; --time-scale unused)",
        choices=tuple(ENGINES), group=_DEP,
    )  # fmt: skip
    # comparison
    mode: str = option(
        "off,on",
        "comma-separated modes, the first is the baseline: off, on (balance), "
        "interval:N (vLLM's prefill_schedule_interval), on+interval:N, "
        "on+max-frozen:N, on+max-held:N, the gate's policies "
        f"({_OUR_MODES}; combinable with a bound), peer policies (knobs "
        "and defaults: docs/peer-policies.md): "
        "sglang-delayer[:N[:W[:Q[:MS[:PDI[:WIN]]]]]], sglang-pdi:PDI, "
        "trtllm-adp[:T[:W[:M[:L]]]], vllm-align[:D[:L[:MS]]], "
        "atom-delayer[:N[:MS]]; shorthands both (off,on) "
        "and aa (off,off: an A/A comparison)",
        metavar="LIST", group=_CMP,
    )  # fmt: skip
    repeat: int = option(
        2,
        "runs per mode, in alternating order (ABBA...); with 2 or more every "
        "metric gets a noise band and differences inside it read '~'",
        metavar="N", ge=1, group=_CMP,
    )  # fmt: skip
    warmup: int = option(
        2,
        "requests per rank run (and not measured) after start-up, before the "
        "workload, so no run pays a cold start",
        metavar="N", ge=0, group=_CMP,
    )  # fmt: skip
    starvation_steps: int = option(
        64,
        "report requests that waited through at least N frozen steps",
        metavar="N", ge=1, group=_CMP,
    )  # fmt: skip
    # cost model
    cost: CostModel = dataclasses.field(default_factory=CostModel)
    time_scale: float = option(
        0.5,
        "wall seconds per modeled second (smaller = faster run, until loop "
        "overhead exceeds the step budgets: see 'pacing overrun')",
        metavar="X", gt=0.0, group="cost model (modeled milliseconds per forward pass)",
    )  # fmt: skip
    # output
    json: str | None = option(None, "write runs, metrics and comparison to FILE",
                              metavar="FILE", group=_OUT)  # fmt: skip
    plot: str | None = option(
        None, "plot per-rank running counts over modeled time, one panel per run",
        metavar="FILE.png", group=_OUT,
    )  # fmt: skip
    run_dir: str | None = option(
        None,
        "asyncllm: keep the model dir and per-rank records in DIR (default: a "
        "temp dir, removed); refused if its model/ or run dirs hold files "
        "this tool did not write; sim writes nothing there",
        metavar="DIR", group=_OUT,
    )  # fmt: skip
    log_level: str = option(
        "WARNING", "vLLM log level (front-end and engines; logs go to stderr)",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"), group=_OUT,
    )  # fmt: skip
    executor: str = option(EXECUTOR, "executor class (tests)", hidden=True)

    def __post_init__(self) -> None:
        check_bounds(self)
        # a bad --mode, or options that do not go together: one line
        check_combination(self, self.modes())

    def modes(self) -> list[Mode]:
        """The parsed ``--mode`` list, baseline first."""
        return parse_modes(self.mode)

    def load_workload(self, root: Path | None = None) -> Workload:
        """The workload these options select (:func:`.workload.load_workload`);
        a relative ``--trace`` is read from ``root`` when given.

        Raises:
            WorkloadError: see :func:`.workload.load_workload`.
        """
        trace = self.trace
        if trace is not None and root is not None:
            trace = str(root / trace)
        return load_workload(
            trace,
            seed=self.seed,
            start_s=self.start,
            duration_s=self.duration,
            limit=self.limit,
            rate_scale=self.rate_scale,
            max_model_len=self.max_model_len,
            dp_size=self.dp,
            clip=self.clip,
        )


def pacing(options: ReplayOptions) -> str:
    """How the run is paced, for headers: the real engine's time scale, or
    none (the simulated engine has no wall clock)."""
    if options.engine == "sim":
        return "modeled time only"
    return f"time scale {options.time_scale:g}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option of :class:`ReplayOptions` to ``parser``."""
    parser.description = textwrap.fill(DESCRIPTION, width=78, break_on_hyphens=False)
    parser.epilog = EPILOG
    parser.formatter_class = HelpFormatter
    add_fields(parser, ReplayOptions)


def from_namespace(args: argparse.Namespace) -> ReplayOptions:
    """The options parsed by a parser built with :func:`add_arguments`.

    Raises:
        ValueError: an out-of-range value or a bad ``--mode``, one line.
    """
    return typing.cast(ReplayOptions, build(ReplayOptions, vars(args)))


def parse(argv: list[str]) -> ReplayOptions:
    """Parse ``argv`` (tests and scripts); argparse errors exit 2."""
    parser = argparse.ArgumentParser(prog="vllm-ascend-balance replay")
    add_arguments(parser)
    return from_namespace(parser.parse_args(argv))
