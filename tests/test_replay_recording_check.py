# SPDX-License-Identifier: Apache-2.0
"""The real engine's check of a run's recording, on synthetic rank files (no
deployment): a balance-on run whose ranks never gathered ran as "off" (the
plugin did not load in the engine cores) and must fail, not be reported;
an interrupted one may have hung in its first gather (the collective-safety
negative control's deadlock) and is reported as interrupted."""

from __future__ import annotations

import pytest

from vllm_ascend_balance.replay.pipeline.engine import RecordingError
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.records import (
    GatherRecord,
    RankRequest,
    RankStart,
    RankStep,
    RunRecords,
    RunStatus,
)
from vllm_ascend_balance.replay.real.checks import check_recording
from vllm_ascend_balance.replay.real.recorder import RankFile

pytestmark = pytest.mark.lane_scope("release")


def _rank(rank: int, gathers: int) -> RankFile:
    """One rank that started, stepped and finished a request, with
    ``gathers`` balance gathers (in its gather records and its steps)."""
    f = RankFile()
    f.starts.append(RankStart(rank, "RecordingScheduler", "m", 8, 2))
    f.steps.append(RankStep(0, rank, 1.0, 1.0, 1, 0, 16, 0, 1, False, gathers, False))
    f.requests.append(RankRequest(f"r{rank}", rank, 0, 0, 0, 1))
    f.gathers.extend(
        GatherRecord(rank, n + 1, 1, [1, 1], False, 8, None) for n in range(gathers)
    )
    return f


def _check(mode: Mode, gathers: int, status: RunStatus = RunStatus.OK) -> None:
    records = RunRecords(mode, 0, 2)
    records.status = status
    check_recording([_rank(0, gathers), _rank(1, gathers)], records)


def test_balance_on_without_a_gather_fails_naming_the_plugin():
    with pytest.raises(RecordingError) as err:
        _check(Mode("on", balance=True), gathers=0)
    text = str(err.value)
    assert "\n" not in text
    assert "plugin" in text and "vllm-ascend-balance doctor" in text


def test_balance_off_without_a_gather_passes():
    _check(Mode("off"), gathers=0)


def test_balance_on_with_gathers_passes():
    # The negative control of the first test: the same on-mode run, had the
    # plugin loaded, is accepted.
    _check(Mode("on", balance=True), gathers=3)


def test_an_interrupted_run_without_a_gather_is_not_a_recording_failure():
    """A deployment hung in its first gather and stopped by Ctrl-C: its
    records are kept and the run reads as interrupted (the first test is the
    control: the same records from a run that was not interrupted fail)."""
    _check(Mode("on", balance=True), gathers=0, status=RunStatus.INTERRUPTED)
    with pytest.raises(RecordingError):
        _check(Mode("on", balance=True), gathers=0, status=RunStatus.FAILED)
