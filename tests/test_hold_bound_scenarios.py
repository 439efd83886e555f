# SPDX-License-Identifier: Apache-2.0
"""The hold bound on the two long-prompt cases of issue 54 ("Done when"),
on the simulated engine (``replay --engine sim``: vLLM's real schedulers in
lock step), DP 2, cap 16, the workload as JSONL with its ``rank`` pins:

(a) **a long prompt at the cap**: 8 long-decoding requests on rank 0, then
    one 8,192-token prompt there;
(b) **a long prompt at light load**: the same with a 12,288-token prompt,
    nothing waiting anywhere else.

For every opt-in policy (every registered policy but the contract), at its
defaults and with ``max-held:64``: TTFT p99 <= ``off``'s TTFT p99 + N x
``off``'s mean step time, N the mode's hold bound (none: 0). The time is
the simulated engine's modeled time (deterministic: the same input gives
the same numbers), not a wall-clock measurement. And at light load no step
defers a chunk in flight: nothing waits that a hold could align with
(docs/gate-contract.md, "chunks only for alignment").

Negative controls: the old ``throttled`` (chunks held by default, the
deferred chunk left off the hold count) fails the bound in both cases;
chunks held by default with the hold count intact stay within the bound
(the gate bounds them) but fail the light-load check.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from vllm_ascend_balance.gate import bound
from vllm_ascend_balance.gate.holds import HoldLedger
from vllm_ascend_balance.gate.policies import POLICIES, Decision, throttled
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.gate.settings import DEFAULT_POLICY, GateSettings
from vllm_ascend_balance.replay.pipeline.engine import load_engine
from vllm_ascend_balance.replay.pipeline.metrics import run_metrics
from vllm_ascend_balance.replay.pipeline.modes import Mode, parse_modes
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
from vllm_ascend_balance.replay.pipeline.workload import load_workload

# vLLM 0.27 and later: schedule(throttle_prefills), how chunks are held.
pytestmark = [
    pytest.mark.lane_scope("release", "main", "fork"),
    pytest.mark.skipif(
        "throttle_prefills" not in inspect.signature(Scheduler.schedule).parameters,
        reason="this release's schedule() holds no chunk",
    ),
]

CAP = 16
HELD = 64
#: Prompt tokens of the long prompt, per case.
CASES = {"at-cap": 8192, "light-load": 12288}
OPTIONS = ReplayOptions(
    dp=2, engine="sim", max_num_seqs=CAP, max_model_len=16384, repeat=1
)


def rows(prompt_tokens: int) -> list[dict[str, Any]]:
    """8 long-decoding requests pinned to rank 0, then the long prompt
    there half a modeled second later (they decode by then)."""
    decodes = [
        {"arrival_s": 0.0, "prompt_tokens": 64, "output_tokens": 3000, "rank": 0}
        for _ in range(8)
    ]
    prompt = {
        "arrival_s": 0.5,
        "prompt_tokens": prompt_tokens,
        "output_tokens": 16,
        "rank": 0,
    }
    return [*decodes, prompt]


def opt_in_modes() -> list[Mode]:
    """Every registered policy but the contract, at its defaults and with
    ``max-held:64``."""
    names = [
        f"on+{p.mode_name}{suffix}"
        for p in POLICIES.values()
        if p.name != DEFAULT_POLICY
        for suffix in ("", f"+max-held:{HELD}")
    ]
    return parse_modes(",".join(names))


def hold_bound(mode: Mode) -> int:
    """The mode's hold bound in steps as the gate resolves it (0: none)."""
    settings = GateSettings(
        mode.policy or DEFAULT_POLICY,
        max_held_steps=mode.max_held_steps,
        max_frozen_steps=mode.max_frozen_steps,
    )
    return bound.plan(settings).max_held_steps or 0


@dataclass(frozen=True)
class Outcome:
    ttft_p99_ms: float
    step_ms_mean: float
    deferring_steps: int  # rank-steps whose schedule() deferred a chunk


def replay(tmp: Path, case: str, mode: Mode) -> Outcome:
    """One mode of one case on the simulated engine, as ``replay --engine
    sim --trace case.jsonl`` runs it, counting the steps that defer chunks."""
    trace = tmp / f"{case}.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows(CASES[case])))
    workload = load_workload(
        str(trace),
        seed=0,
        start_s=0.0,
        duration_s=None,
        limit=None,
        rate_scale=1.0,
        max_model_len=OPTIONS.max_model_len,
        dp_size=OPTIONS.dp,
        clip=False,
    )
    original = BalanceSchedulerMixin.balance_throttles
    deferring = [0]

    def counted(self: Any) -> bool:
        throttles = original(self)
        deferring[0] += throttles
        return throttles

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BalanceSchedulerMixin, "balance_throttles", counted)
        records = load_engine("sim").run(workload, mode, OPTIONS, 0)
    metrics = run_metrics(records, 64)
    assert metrics.completed == metrics.requests == 9, mode.label
    assert metrics.ttft_p99_ms is not None and metrics.step_ms_mean is not None
    return Outcome(metrics.ttft_p99_ms, metrics.step_ms_mean, deferring[0])


def bound_errors(off: Outcome, runs: dict[str, tuple[Mode, Outcome]]) -> list[str]:
    """Modes whose TTFT p99 exceeds ``off``'s by more than their hold
    bound's worth of ``off``'s mean steps."""
    errors = []
    for label, (mode, out) in runs.items():
        limit = off.ttft_p99_ms + hold_bound(mode) * off.step_ms_mean
        if out.ttft_p99_ms > limit:
            errors.append(
                f"{label}: TTFT p99 {out.ttft_p99_ms:.0f} ms > off's "
                f"{off.ttft_p99_ms:.0f} ms + {hold_bound(mode)} x "
                f"{off.step_ms_mean:.1f} ms = {limit:.0f} ms"
            )
    return errors


@pytest.fixture(scope="module")
def outcomes(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Outcome, dict[str, tuple[Mode, Outcome]]]]:
    """Per case: ``off``'s outcome and every opt-in mode's."""
    tmp = tmp_path_factory.mktemp("scenarios")
    (off,) = parse_modes("off")
    return {
        case: (
            replay(tmp, case, off),
            {m.label: (m, replay(tmp, case, m)) for m in opt_in_modes()},
        )
        for case in CASES
    }


@pytest.mark.parametrize("case", list(CASES))
def test_every_opt_in_policy_keeps_ttft_within_its_hold_bound(
    outcomes: dict[str, Any], case: str
) -> None:
    off, runs = outcomes[case]
    assert {m.policy for m, _ in runs.values()} == set(POLICIES) - {DEFAULT_POLICY}
    assert bound_errors(off, runs) == []


def test_light_load_defers_no_chunk(outcomes: dict[str, Any]) -> None:
    """Nothing waits anywhere but the long prompt: no chunk is held for an
    alignment nobody needs."""
    _, runs = outcomes["light-load"]
    assert {
        label: out.deferring_steps for label, (_, out) in runs.items()
    } == dict.fromkeys(runs, 0)


# --------------------------------------------------------------------------
# Negative controls: throttled as it was before the gate bounded every hold


@pytest.fixture
def chunks_held_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """``throttled`` holding chunks in flight whenever admission is closed,
    nothing held anywhere included (its old "closed by default"), and the
    gate letting it (its rule "chunks only for alignment" undone: the
    policy's proposal to hold chunks is kept where the gate held admission
    and no bound opened)."""
    monkeypatch.setattr(throttled, "_IDLE", Decision(True, True, "idle"))
    step = bound.step

    def without_alignment_rule(plan_: Any, state: Any, view: Any) -> Any:
        # Policies are pure: asking again gives the same proposal.
        _, proposed = plan_.policy.decide(state.policy, view, plan_.knobs)
        state_, decision, failed_open = step(plan_, state, view)
        if proposed.hold_chunks and decision.hold_waiting and not failed_open:
            decision = Decision(True, True, decision.reason)
        return state_, decision, failed_open

    monkeypatch.setattr(bound, "step", without_alignment_rule)


@pytest.fixture
def chunk_holds_uncounted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ledger that defers chunks but never counts them (the old
    ``throttled``'s flag missed them)."""
    note = HoldLedger.note_deferred

    def uncounted(self: HoldLedger, scheduler: Any) -> bool:
        deferred = note(self, scheduler)
        self.deferred = ()
        return deferred

    monkeypatch.setattr(HoldLedger, "note_deferred", uncounted)


def _throttled_runs(tmp: Path, case: str) -> tuple[Outcome, dict[str, Any]]:
    off, mode = parse_modes("off,on+throttled")
    return replay(tmp, case, off), {mode.label: (mode, replay(tmp, case, mode))}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.usefixtures("chunks_held_by_default", "chunk_holds_uncounted")
def test_negative_control_the_old_throttled_breaks_the_bound(
    tmp_path: Path, case: str
) -> None:
    off, runs = _throttled_runs(tmp_path, case)
    assert bound_errors(off, runs)


@pytest.mark.usefixtures("chunks_held_by_default")
def test_negative_control_chunks_held_for_nothing_are_bounded_yet_seen(
    tmp_path: Path,
) -> None:
    """Chunks held by default with the hold count intact: the gate's bound
    still keeps TTFT within it (the point of the gate owning the bound), and
    the light-load check catches the holds."""
    off, runs = _throttled_runs(tmp_path, "light-load")
    assert bound_errors(off, runs) == []
    ((_, out),) = runs.values()
    assert out.deferring_steps > 0
    assert out.ttft_p99_ms > off.ttft_p99_ms + off.step_ms_mean
