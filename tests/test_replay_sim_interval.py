# SPDX-License-Identifier: Apache-2.0
"""``interval:N`` on the simulated engine: vLLM's ``prefill_schedule_interval``
applied as ``DPEngineCoreProc`` applies it.

The rule (``DPEngineCoreProc._should_throttle_prefills()``): a step throttles
new prefills iff N > 1 and the wave's step counter is not a multiple of N;
the counter starts at 0 with every wave and counts every engine step. The
check below recovers each schedule call's position in its wave from the
requests the scheduler holds (not from the simulation's own counter) and
compares the ``throttle_prefills`` every real ``Scheduler.schedule()`` call
received with the rule.

Negative controls: a throttle one step off the rule, and a throttle that
never fires, are both detected by the same check; a vLLM whose
``Scheduler.schedule`` has no ``throttle_prefills`` is refused in one line.
Nothing is mocked except, in the refusal test, that older signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest

from vllm_ascend_balance.replay.pipeline.engine import load_engine
from vllm_ascend_balance.replay.pipeline.metrics import run_metrics
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
from vllm_ascend_balance.replay.pipeline.workload import ReplayRequest, load_workload
from vllm_ascend_balance.replay.sim import fleet
from vllm_ascend_balance.replay.sim.engine import SimEngineError, check_mode
from vllm_ascend_balance.replay.sim.fleet import SimOptions, simulate


def _has_throttle() -> bool:
    import inspect

    from vllm.v1.core.sched.scheduler import Scheduler

    return "throttle_prefills" in inspect.signature(Scheduler.schedule).parameters


pytestmark = [
    # why: DPEngineCoreProc's prefill_schedule_interval rule, real schedule()
    pytest.mark.lane_scope("release", "main", "fork", "ascend"),
    pytest.mark.skipif(
        not _has_throttle(),
        reason="this release's Scheduler.schedule() has no throttle_prefills: "
        "the prefill-interval mode cannot run (its refusal is tested where it can)",
    ),
]

# The simulated engine composes balance in-process (plan_activation), which
# is refused while vllm-ascend's own balance patch is loaded.

DP = 2
PER_RANK = 6  # per rank and wave, above the cap: admissions queue
WAVE_GAP_S = 1000.0  # far beyond a wave's length: the engines go idle between
OPTS = SimOptions(dp_size=DP, max_num_seqs=4, max_num_batched_tokens=256)


def _two_waves() -> list[ReplayRequest]:
    """Two identical waves, every rank the same pinned work, so every rank
    schedules on every step of a wave."""
    out: list[ReplayRequest] = []
    for wave in range(2):
        for rank in range(DP):
            for _ in range(PER_RANK):
                out.append(
                    ReplayRequest(len(out), wave * WAVE_GAP_S, 200, 12, rank=rank)
                )
    return out


REQUESTS = _two_waves()
WAVE_SIZE = DP * PER_RANK


def _record_throttles(
    interval: int, rule: Callable[[int | None, int], bool] | None = None
) -> list[list[tuple[int, bool]]]:
    """Per rank, ``(wave, throttle_prefills)`` of every ``schedule()`` call
    of a simulated run (``rule``: a replacement throttle rule)."""
    calls: list[list[tuple[int, bool]]] = [[] for _ in range(DP)]
    build = fleet.build_schedulers

    def spying_build(*args: Any, **kwargs: Any) -> list[Any]:
        scheds = build(*args, **kwargs)
        for rank, s in enumerate(scheds):
            real = s.schedule

            def spy(*a: Any, _real: Any = real, _s: Any = s, _r: int = rank,
                    **kw: Any) -> Any:  # fmt: skip
                # A call right after the last finish holds no request (only
                # finished ids to report): it is a step of the same wave.
                ids = [int(rid.split("-")[1]) for rid in _s.requests]
                wave = max(ids) // WAVE_SIZE if ids else calls[_r][-1][0]
                throttle = kw.get("throttle_prefills", a[0] if a else False)
                calls[_r].append((wave, bool(throttle)))
                return _real(*a, **kw)

            s.schedule = spy
        return scheds

    opts = SimOptions(**{**OPTS.__dict__, "prefill_schedule_interval": interval})
    with mock.patch.object(fleet, "build_schedulers", spying_build):
        if rule is None:
            result = simulate(False, REQUESTS, opts)
        else:
            with mock.patch.object(fleet, "should_throttle_prefills", rule):
                result = simulate(False, REQUESTS, opts)
    assert all(r.finish_step is not None for q in result.rank_requests for r in q)
    return calls


def rule_violations(calls: list[list[tuple[int, bool]]], interval: int) -> list[str]:
    """Schedule calls whose throttle differs from vLLM's rule, counting each
    call's position from the first call of its wave."""
    errors: list[str] = []
    for rank, seq in enumerate(calls):
        position: dict[int, int] = {}
        for wave, throttle in seq:
            k = position.get(wave, 0)
            position[wave] = k + 1
            expected = interval > 1 and k % interval != 0
            if throttle != expected:
                errors.append(f"rank {rank} wave {wave} step {k}: {throttle}")
        if sorted(position) != [0, 1]:
            errors.append(f"rank {rank}: waves {sorted(position)}")
    return errors


@pytest.mark.parametrize("interval", [1, 2, 4])
def test_throttle_follows_vllms_rule_and_restarts_with_each_wave(
    interval: int,
) -> None:
    calls = _record_throttles(interval)
    assert rule_violations(calls, interval) == []
    if interval > 1:
        assert any(t for seq in calls for _, t in seq)


@pytest.mark.parametrize(
    "wrong",
    [
        lambda n, c: n is not None and n > 1 and (c + 1) % n != 0,  # one off
        lambda n, c: False,  # never throttles
    ],
    ids=["one-step-off", "never"],
)
def test_negative_control_wrong_throttle_is_detected(
    wrong: Callable[[int | None, int], bool],
) -> None:
    assert rule_violations(_record_throttles(4, wrong), 4) != []


def test_interval_1_is_vllms_default_and_interval_changes_the_schedule() -> None:
    workload = load_workload(
        None, seed=0, start_s=0.0, duration_s=None, limit=None, rate_scale=1.0,
        max_model_len=16384, dp_size=2, clip=False,
    )  # fmt: skip
    options = ReplayOptions(engine="sim", dp=2, repeat=1, warmup=0)
    engine = load_engine("sim")

    def metrics(mode: Mode) -> Any:
        return run_metrics(engine.run(workload, mode, options, 0), 64)

    off, one, four = (
        metrics(Mode("off")),
        metrics(Mode("interval:1", False, 1)),
        (metrics(Mode("interval:4", False, 4))),
    )
    assert one == off
    assert four.completed == four.requests
    assert four.steps != off.steps or four.ttft_p50_ms != off.ttft_p50_ms


def test_release_without_throttle_parameter_is_refused_in_one_line() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    def old_schedule(self: Any) -> Any:  # the signature before the throttle
        raise AssertionError("not called")

    check_mode(Mode("interval:2", False, 2))  # the installed release has it
    with (
        mock.patch.object(Scheduler, "schedule", old_schedule),
        pytest.raises(SimEngineError) as err,
    ):
        check_mode(Mode("interval:2", False, 2))
    assert "\n" not in str(err.value) and "throttle_prefills" in str(err.value)
    check_mode(Mode("on"))
