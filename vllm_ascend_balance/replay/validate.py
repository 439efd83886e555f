# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance validate-sim``: the simulated engine against the real
deployment, on the same inputs.

For each case (a workload at a DP size, balance off and on) the workload runs
once on the real ``AsyncLLM`` deployment (``--engine asyncllm``) and once on
the simulated engine (``--engine sim``), and the two runs' metrics (the
replay's own, :func:`~.metrics.run_metrics`) must agree:

- every request completes on both;
- frozen share of steps within :data:`FROZEN_POINTS` points;
- share of steps whose slowest rank mixes prefill and decode within
  :data:`MIXED_POINTS` points;
- TPOT p50 and p99 within :data:`TPOT_RELATIVE` (relative to the real run);
- one balance gather per step on every rank with balance on (the same count
  on every rank, ``gathers/step == 1``), none with balance off, on both.

The full matrix (:data:`CASES`: the built-in mix and the committed Azure
slice, DP 2 and 4) takes about 10 minutes on 2 cores, almost all of it the
real deployment. Exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.engine import load_engine
from vllm_ascend_balance.replay.environment import vllm_logs_to_stderr
from vllm_ascend_balance.replay.metrics import RunMetrics, run_metrics
from vllm_ascend_balance.replay.options import ReplayOptions
from vllm_ascend_balance.replay.records import RunStatus
from vllm_ascend_balance.replay.workload import Workload, load_workload

logger = init_logger(__name__)

FROZEN_POINTS = 0.03
MIXED_POINTS = 0.02
TPOT_RELATIVE = 0.10
AZURE_SLICE = "tests/data/azure_llm_inference_2023_conv_first300.csv"


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


@dataclass(frozen=True)
class Check:
    """One compared quantity of one case and mode."""

    case: str
    mode: str
    what: str
    real: str
    sim: str
    ok: bool


def _gathers_ok(m: RunMetrics, balance: bool) -> bool:
    if not balance:
        return not any(m.gathers_per_rank)
    return len(set(m.gathers_per_rank)) == 1 and m.gathers_per_step == 1.0


def compare_runs(
    case: str, mode: str, balance: bool, real: RunMetrics, sim: RunMetrics
) -> list[Check]:
    """The checks of one case and mode (see the module docstring)."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    def rel_ok(a: float | None, b: float | None) -> bool:
        return a is not None and b is not None and abs(b - a) <= TPOT_RELATIVE * a

    def abs_ok(a: float | None, b: float | None, tol: float) -> bool:
        return abs((a or 0.0) - (b or 0.0)) <= tol

    out = [
        Check(
            case,
            mode,
            "completed",
            f"{real.completed}/{real.requests}",
            f"{sim.completed}/{sim.requests}",
            real.completed == real.requests and sim.completed == sim.requests,
        ),
        Check(
            case,
            mode,
            f"steps frozen (±{100 * FROZEN_POINTS:g} pts)",
            pct(real.frozen_share),
            pct(sim.frozen_share),
            abs_ok(real.frozen_share, sim.frozen_share, FROZEN_POINTS),
        ),
        Check(
            case,
            mode,
            f"slowest rank mixed P+D (±{100 * MIXED_POINTS:g} pts)",
            pct(real.mixed_share),
            pct(sim.mixed_share),
            abs_ok(real.mixed_share, sim.mixed_share, MIXED_POINTS),
        ),
    ]
    for label, a, b in (
        ("TPOT p50 ms", real.tpot_p50_ms, sim.tpot_p50_ms),
        ("TPOT p99 ms", real.tpot_p99_ms, sim.tpot_p99_ms),
    ):
        out.append(
            Check(
                case,
                mode,
                f"{label} (±{100 * TPOT_RELATIVE:g}%)",
                ms(a),
                ms(b),
                rel_ok(a, b),
            )
        )
    out.append(
        Check(
            case,
            mode,
            "gathers/step, per rank" + (" (1, equal)" if balance else " (none)"),
            f"{real.gathers_per_step or 0:.2f} {list(real.gathers_per_rank)}",
            f"{sim.gathers_per_step or 0:.2f} {list(sim.gathers_per_rank)}",
            _gathers_ok(real, balance) and _gathers_ok(sim, balance),
        )
    )
    return out


def run_case(
    case: Case,
    root: Path,
    work: Path,
    modes: str = "off,on",
    warmup: int = 2,
    time_scale: float = 0.5,
    routing: str = "vllm",
) -> list[Check]:
    """Run ``case`` on both engines, every mode of ``modes``; its checks.
    ``time_scale`` paces the real deployment (wall s per modeled s);
    ``routing`` is ``--routing`` for both engines (``round-robin`` takes the
    balancer's wall-clock stats timing out of the comparison, README)."""
    base = ReplayOptions(
        mode=modes,
        repeat=1,
        dp=case.dp,
        warmup=warmup,
        time_scale=time_scale,
        routing=routing,
    )
    workload = case.workload(root, base.max_model_len)
    metrics: dict[str, dict[str, RunMetrics]] = {}
    failures: list[Check] = []
    for engine_name in ("asyncllm", "sim"):
        options = dataclasses.replace(
            base, engine=engine_name, run_dir=str(work / f"{case.name}-{case.dp}")
        )
        engine = load_engine(engine_name)
        for mode in options.modes():
            records = engine.run(workload, mode, options, 0)
            if records.status is not RunStatus.OK:
                failures.append(
                    Check(
                        f"{case.name} DP {case.dp}",
                        mode.label,
                        f"{engine_name} run status",
                        records.status.value if engine_name == "asyncllm" else "",
                        records.status.value if engine_name == "sim" else "",
                        False,
                    )
                )
                logger.warning("%s run failed: %s", engine_name, records.cause)
            metrics.setdefault(mode.label, {})[engine_name] = run_metrics(
                records, options.starvation_steps
            )
    checks: list[Check] = list(failures)
    for mode in base.modes():
        by_engine = metrics[mode.label]
        checks += compare_runs(
            f"{case.name} DP {case.dp} ({len(workload.requests)} req)",
            mode.label,
            mode.balance,
            by_engine["asyncllm"],
            by_engine["sim"],
        )
    return checks


def format_checks(checks: list[Check]) -> str:
    rows = [("case", "mode", "check", "real", "sim", "")] + [
        (c.case, c.mode, c.what, c.real, c.sim, "ok" if c.ok else "FAIL")
        for c in checks
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[1] if __doc__ else None
    parser.add_argument(
        "--case",
        choices=sorted({f"{c.name}-{c.dp}" for c in CASES}),
        action="append",
        help="run only this case (repeatable); default: all",
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
    cases = [c for c in CASES if not args.case or f"{c.name}-{c.dp}" in args.case]
    checks: list[Check] = []
    with (
        tempfile.TemporaryDirectory(prefix="vab-validate-") as tmp,
        vllm_logs_to_stderr(),
    ):
        for case in cases:
            print(f"validate-sim: {case.name} DP {case.dp} ...", file=sys.stderr)
            found = run_case(case, root, Path(tmp))
            print(format_checks(found), file=sys.stderr)  # as each case ends
            checks += found
    print(format_checks(checks))
    failed = [c for c in checks if not c.ok]
    print(f"validate-sim: {len(checks) - len(failed)} checks ok, {len(failed)} failed")
    return 1 if failed else 0
