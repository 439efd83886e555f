# SPDX-License-Identifier: Apache-2.0
"""The timed tables: ``schedule()`` of two schedulers on identical states,
back to back, alternating which goes first; the median of the per-trial
ratios per row, with an A/A row for the machine's noise."""

from __future__ import annotations

import gc
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from benchmarks.schedule_overhead.rig import (
    CAP,
    GOAL,
    PROMPT_LEN,
    build,
    check_refactor_pair,
    seam_calls_per_schedule,
)
from tests.support.vllm_objects import make_request
from vllm_ascend_balance.gate.scheduler import SEAM
from vllm_ascend_balance.wiring.composition import compose_scheduler


def _timed_schedule(sched: Any, requests: list) -> float:
    for request in requests:
        sched.add_request(request)
    gc.disable()  # no collection inside the timed call (gc.freeze() in main)
    try:
        start = time.perf_counter()
        sched.schedule()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    # Back to an empty scheduler with the same operations on both sides:
    # abort everything, then one (untimed) step to flush the finished ids.
    sched.finish_requests(
        [r.request_id for r in requests], RequestStatus.FINISHED_ABORTED
    )
    sched.schedule()
    return elapsed


def measure(
    a_cls: type, b_cls: type, dp_size: int | None, waiting: int, trials: int
) -> tuple[float, float, float]:
    """(median schedule() s of a, of b, median of the per-trial b/a ratios);
    b gets the gathered vector when ``dp_size`` is set.

    Each trial times a and b back to back on the same state (alternating
    which goes first), so the per-trial ratio cancels the slow drifts of a
    shared machine (another process taking a core for a while) that shift
    both timings alike; its median is the row's ratio.
    """
    a, b = build(a_cls, None), build(b_cls, dp_size)
    times: dict[str, list[float]] = {"a": [], "b": []}
    warmup = 2
    for trial in range(trials + warmup):
        order = [("a", a), ("b", b)] if trial % 2 == 0 else [("b", b), ("a", a)]
        batches = {
            key: [
                make_request(f"{key}{trial}-{i}", PROMPT_LEN, max_tokens=8)
                for i in range(waiting)
            ]
            for key, _ in order
        }
        for key, sched in order:
            elapsed = _timed_schedule(sched, batches[key])
            if trial >= warmup:
                times[key].append(elapsed)
    ratios = [tb / ta for ta, tb in zip(times["a"], times["b"], strict=True)]
    return (
        statistics.median(times["a"]),
        statistics.median(times["b"]),
        statistics.median(ratios),
    )


def _seam_ns(sched: Any) -> float:
    """ns per ``_should_stop_admitting_waiting()`` call on ``sched``."""
    number = 200_000
    best = min(timeit.repeat(getattr(sched, SEAM), number=number, repeat=5))
    return best / number * 1e9


def seam_call_cost(balance_cls: type) -> tuple[float, float]:
    """ns per ``_should_stop_admitting_waiting()`` call: plain vs balance."""
    return _seam_ns(build(Scheduler, None)), _seam_ns(build(balance_cls, 8))


def _verdict(ratio: float, aa: float) -> str:
    verdict = "PASS" if ratio <= GOAL else "FAIL"
    if verdict == "FAIL" and ratio <= GOAL + abs(aa - 1):
        verdict += " (within the A/A noise)"
    return verdict


def balance_table(
    queues: list[int], dp_sizes: list[int], trials_for: Callable[[int], int]
) -> dict[str, Any]:
    """Balance scheduler vs plain patched ``Scheduler``, per (DP, queue);
    returns the table (times in seconds) for ``--json``."""
    import vllm

    balance_cls = compose_scheduler(Scheduler)
    print(
        f"schedule() overhead of balance scheduling (vLLM {vllm.__version__}, "
        f"cap={CAP}, prompt={PROMPT_LEN} tokens, median of paired ratios)"
    )
    plain_ns, balance_ns = seam_call_cost(balance_cls)
    print(
        f"seam call: plain {plain_ns:.0f} ns, balance {balance_ns:.0f} ns "
        f"(+{balance_ns - plain_ns:.0f} ns per seam call)"
    )
    header = (
        f"{'dp':>5} {'waiting':>7} {'plain ms':>9} {'balance ms':>10} "
        f"{'ratio':>7} {'model':>7}"
    )
    print(header + "  verdict")
    print("-" * (len(header) + 9))
    failures = 0
    rows: list[dict[str, Any]] = []
    for waiting in queues:
        trials = trials_for(waiting)
        plain_t, other_t, aa = measure(Scheduler, Scheduler, None, waiting, trials)
        calls = seam_calls_per_schedule(balance_cls, waiting)
        # Expected ratio from first principles: the only extra work in
        # schedule() is the balance seam's extra cost, once per call.
        model = 1 + calls * (balance_ns - plain_ns) * 1e-9 / plain_t
        print(
            f"{'A/A':>5} {waiting:>7} {plain_t * 1e3:>9.3f} {other_t * 1e3:>10.3f} "
            f"{aa:>7.3f} {'':>7}  noise floor (plain vs plain); "
            f"{calls} seam calls/schedule(), {trials} trials/row"
        )
        for dp_size in dp_sizes:
            plain_t, balance_t, ratio = measure(
                Scheduler, balance_cls, dp_size, waiting, trials
            )
            verdict = _verdict(ratio, aa)
            failures += verdict.startswith("FAIL")
            print(
                f"{dp_size:>5} {waiting:>7} {plain_t * 1e3:>9.3f} "
                f"{balance_t * 1e3:>10.3f} {ratio:>7.3f} {model:>7.4f}  {verdict}"
            )
            rows.append(
                {
                    "dp": dp_size,
                    "waiting": waiting,
                    "plain_s": plain_t,
                    "balance_s": balance_t,
                    "ratio": ratio,
                    "model": model,
                    "aa_ratio": aa,
                    "seam_calls": calls,
                    "trials": trials,
                    "verdict": verdict,
                }
            )
    print(
        f"summary: {len(rows) - failures}/{len(rows)} rows within {GOAL} (goal); "
        f"'model' = 1 + seam calls x extra seam cost / plain time"
    )
    return {
        "vllm": vllm.__version__,
        "seam_ns": {"plain": plain_ns, "balance": balance_ns},
        "rows": rows,
        "within_goal": len(rows) - failures,
    }


def refactor_table(
    original_cls: type, queues: list[int], trials_for: Callable[[int], int]
) -> dict[str, Any]:
    """Patched plain ``Scheduler`` vs the release's original, per queue;
    returns the table (times in seconds) for ``--json``."""
    import vllm

    check_refactor_pair(original_cls)
    print(
        f"schedule() overhead of the seam refactor (vLLM {vllm.__version__}, "
        f"patched Scheduler vs the release's original, cap={CAP}, "
        f"prompt={PROMPT_LEN} tokens, median of paired ratios)"
    )
    seam_ns = _seam_ns(build(Scheduler, None))
    print(
        f"seam call: patched {seam_ns:.0f} ns per call "
        f"(asked once per schedule(), before the WAITING loop)"
    )
    header = (
        f"{'pair':>5} {'waiting':>7} {'orig ms':>9} {'patched ms':>10} "
        f"{'ratio':>7} {'model':>7}"
    )
    print(header + "  verdict")
    print("-" * (len(header) + 9))
    failures = 0
    rows: list[dict[str, Any]] = []
    for waiting in queues:
        trials = trials_for(waiting)
        orig_t, other_t, aa = measure(original_cls, original_cls, None, waiting, trials)
        calls = seam_calls_per_schedule(Scheduler, waiting, None)
        # From first principles: the patch adds the seam calls counted here
        # (one per schedule() that reaches the WAITING loop).
        model = 1 + calls * seam_ns * 1e-9 / orig_t
        print(
            f"{'A/A':>5} {waiting:>7} {orig_t * 1e3:>9.3f} {other_t * 1e3:>10.3f} "
            f"{aa:>7.3f} {'':>7}  noise floor (original vs original); "
            f"{calls} seam calls/schedule(), {trials} trials/row"
        )
        orig_t, patched_t, ratio = measure(
            original_cls, Scheduler, None, waiting, trials
        )
        verdict = _verdict(ratio, aa)
        failures += verdict.startswith("FAIL")
        print(
            f"{'patch':>5} {waiting:>7} {orig_t * 1e3:>9.3f} "
            f"{patched_t * 1e3:>10.3f} {ratio:>7.3f} {model:>7.4f}  {verdict}"
        )
        rows.append(
            {
                "waiting": waiting,
                "original_s": orig_t,
                "patched_s": patched_t,
                "ratio": ratio,
                "model": model,
                "aa_ratio": aa,
                "seam_calls": calls,
                "trials": trials,
                "verdict": verdict,
            }
        )
    print(
        f"refactor summary: {len(rows) - failures}/{len(rows)} rows within {GOAL} "
        f"(goal); 'model' = 1 + seam calls x seam call cost / original time "
        f"(upper bound: the inline condition it replaces is not subtracted)"
    )
    return {
        "vllm": vllm.__version__,
        "seam_ns": {"patched": seam_ns},
        "rows": rows,
        "within_goal": len(rows) - failures,
    }
