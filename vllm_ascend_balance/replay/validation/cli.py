# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance validate-sim``: the simulated engine against the real
deployment, on the same inputs.

For each case (a workload at a DP size, balance off and on) the workload runs
``real_repeats`` times on the real ``AsyncLLM`` deployment (``--engine
asyncllm``) and once on the simulated engine (``--engine sim``, deterministic),
and the simulation's metrics (the replay's own,
:func:`~vllm_ascend_balance.replay.pipeline.metrics.run_metrics`) must agree with the
median of the real runs (the checks and their tolerances: :mod:`.checks`):

- every request completes on every run;
- frozen share of steps within :data:`FROZEN_POINTS` points;
- share of steps whose slowest rank mixes prefill and decode within
  :data:`MIXED_POINTS` points;
- TPOT p50 and p99 within :data:`TPOT_RELATIVE` (relative to the real median);
- one balance gather per step on every rank with balance on (the same count
  on every rank, ``gathers/step == 1``), none with balance off, on every run.

Why a median of several real runs: the real deployment is not deterministic.
Its DP load balancer routes on engine stats that the DP coordinator publishes
on the wall clock (every 100 ms), so which request lands on which rank, and
when, changes from run to run (how much: docs/fleet.md). One real run is
then a noisy estimate of what the real engine does; the real runs' range is
printed next to the median so the noise is visible.

The full matrix (:data:`CASES`: the built-in mix and the committed Azure
slice, DP 2 and 4) spends almost all its time in the real deployment. Exit
status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_ascend_balance.ipc_sockets import own_ipc_dir
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.engine import load_engine
from vllm_ascend_balance.replay.pipeline.environment import vllm_logs_to_stderr
from vllm_ascend_balance.replay.pipeline.metrics import RunMetrics, run_metrics
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
from vllm_ascend_balance.replay.pipeline.progress import announced
from vllm_ascend_balance.replay.pipeline.records import RunStatus
from vllm_ascend_balance.replay.pipeline.workload import Workload, load_workload
from vllm_ascend_balance.replay.validation.checks import (
    FROZEN_POINTS,
    MIXED_POINTS,
    TPOT_RELATIVE,
    Check,
    compare_runs,
    format_checks,
)

__all__ = [
    "AZURE_SLICE",
    "CASES",
    "FROZEN_POINTS",
    "MIXED_POINTS",
    "REAL_REPEATS",
    "TPOT_RELATIVE",
    "Case",
    "Check",
    "compare_runs",
    "format_checks",
    "run_case",
]

logger = init_logger(__name__)

AZURE_SLICE = "tests/data/azure_llm_inference_2023_conv_first300.csv"
#: Real-deployment runs per case and mode (the median is compared).
REAL_REPEATS = 3


@dataclass(frozen=True)
class Case:
    """One validation case: a workload (built-in when ``trace`` is None) at
    a DP size. ``rate_scale``/``duration``/``num_bursts`` select it."""

    name: str
    dp: int
    trace: str | None = None
    duration: float | None = None
    rate_scale: float = 1.0
    limit: int | None = None

    def workload(self, root: Path, max_model_len: int) -> Workload:
        return load_workload(
            str(root / self.trace) if self.trace else None,
            seed=0,
            start_s=0.0,
            duration_s=self.duration,
            limit=self.limit,
            rate_scale=self.rate_scale,
            max_model_len=max_model_len,
            dp_size=self.dp,
            clip=True,
        )


#: The full matrix: the built-in bursty mix and the first 60 s of the Azure
#: slice (at the README example's load per rank), DP 2 and 4.
CASES = (
    Case("builtin", 2),
    Case("builtin", 4),
    Case("azure", 2, AZURE_SLICE, duration=60.0, rate_scale=1.0),
    Case("azure", 4, AZURE_SLICE, duration=60.0, rate_scale=2.0),
)


def run_case(
    case: Case,
    root: Path,
    work: Path,
    modes: str = "off,on",
    warmup: int = 2,
    time_scale: float = 0.5,
    routing: str = "vllm",
    real_repeats: int = REAL_REPEATS,
) -> list[Check]:
    """Run ``case`` on both engines, every mode of ``modes``; its checks.

    Args:
        time_scale: paces the real deployment (wall s per modeled s).
        routing: ``--routing`` for both engines (``round-robin`` takes the
            balancer's wall-clock stats timing out of the comparison, README).
        real_repeats: real-deployment runs per mode, in ABBA order (the
            simulation is deterministic: one run per mode).
    """
    base = ReplayOptions(
        mode=modes,
        repeat=1,
        dp=case.dp,
        warmup=warmup,
        time_scale=time_scale,
        routing=routing,
    )
    workload = case.workload(root, base.max_model_len)
    real: dict[str, list[RunMetrics]] = {}
    sim: dict[str, RunMetrics] = {}
    failures: list[Check] = []
    name = f"{case.name} DP {case.dp}"
    plan = [("sim", 0, m) for m in base.modes()]
    for repeat in range(real_repeats):
        order = base.modes() if repeat % 2 == 0 else base.modes()[::-1]
        plan += [("asyncllm", repeat, m) for m in order]
    for k, (engine_name, repeat, mode) in enumerate(plan, 1):
        options = dataclasses.replace(
            base, engine=engine_name, run_dir=str(work / f"{case.name}-{case.dp}")
        )
        what = f"{name}, run {k}/{len(plan)}: {engine_name} {mode.label}"
        with announced(what, prefix="validate-sim") as progress:
            records = load_engine(engine_name).run(workload, mode, options, repeat)
            if records.status is not RunStatus.OK:
                progress["status"] = records.status.value
        if records.status is not RunStatus.OK:
            failures.append(
                Check(
                    name,
                    mode.label,
                    f"{engine_name} run {repeat + 1} status",
                    records.status.value if engine_name == "asyncllm" else "",
                    records.status.value if engine_name == "sim" else "",
                    False,
                )
            )
            logger.warning("%s run failed: %s", engine_name, records.cause)
        metrics = run_metrics(records, options.starvation_steps)
        if engine_name == "sim":
            sim[mode.label] = metrics
        else:
            real.setdefault(mode.label, []).append(metrics)
    checks: list[Check] = list(failures)
    for mode in base.modes():
        checks += compare_runs(
            f"{name} ({len(workload.requests)} req)",
            mode.label,
            mode.balance,
            real[mode.label],
            sim[mode.label],
        )
    return checks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run each case (a workload at a DP size, balance off and on) "
        "--real-repeats times on the real AsyncLLM deployment and once on the "
        "simulated engine (deterministic), and check that the simulation "
        "agrees with the median of the real runs: every request completes, "
        f"frozen share within {FROZEN_POINTS * 100:g} points, slowest-rank mixed "
        f"prefill+decode share within {MIXED_POINTS * 100:g} points, TPOT p50/p99 "
        f"within {TPOT_RELATIVE:.0%}, one gather per active step on every rank. "
        "Exit 0 when every check passes, 1 otherwise."
    )
    parser.add_argument(
        "--case",
        choices=sorted({f"{c.name}-{c.dp}" for c in CASES}),
        action="append",
        help="run only this case (repeatable); default: all",
    )
    parser.add_argument(
        "--real-repeats",
        type=int,
        default=REAL_REPEATS,
        metavar="R",
        help="real-deployment runs per mode; their median is compared "
        f"(default {REAL_REPEATS})",
    )
    parser.add_argument(
        "--root",
        default=".",
        help="the checkout holding tests/data/ (the Azure slice)",
    )


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if not (root / AZURE_SLICE).exists():
        print(
            f"validate-sim: error: {root / AZURE_SLICE} not found: run from a "
            f"checkout or pass --root CHECKOUT",
            file=sys.stderr,
        )
        return 2
    if args.real_repeats < 1:
        print(
            f"validate-sim: error: --real-repeats must be at least 1 "
            f"(got {args.real_repeats})",
            file=sys.stderr,
        )
        return 2
    cases = [c for c in CASES if not args.case or f"{c.name}-{c.dp}" in args.case]
    checks: list[Check] = []
    own_ipc_dir()
    with (
        tempfile.TemporaryDirectory(prefix="vab-validate-") as tmp,
        vllm_logs_to_stderr(),
    ):
        for case in cases:
            print(f"validate-sim: {case.name} DP {case.dp} ...", file=sys.stderr)
            found = run_case(case, root, Path(tmp), real_repeats=args.real_repeats)
            print(format_checks(found), file=sys.stderr)  # as each case ends
            checks += found
    print(format_checks(checks))
    failed = [c for c in checks if not c.ok]
    print(f"validate-sim: {len(checks) - len(failed)} checks ok, {len(failed)} failed")
    return 1 if failed else 0
