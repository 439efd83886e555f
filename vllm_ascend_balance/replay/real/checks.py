# SPDX-License-Identifier: Apache-2.0
"""Checks of a real-deployment run's per-rank records before they are joined:
a recording that cannot be trusted fails the run loudly (one line) instead of
being reported as measured."""

from __future__ import annotations

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.engine import RecordingError
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus
from vllm_ascend_balance.replay.real.recorder import RankFile

logger = init_logger(__name__)


def check_recording(files: list[RankFile], records: RunRecords) -> None:
    """Loud failure (:class:`RecordingError`, one line) when a rank stepped
    without its recording scheduler, a completed run recorded no request, or a
    balance-on run that was not interrupted never gathered (an interrupted
    one may have hung in its first gather: it is reported interrupted)."""
    for rank, f in enumerate(files):
        if f.steps and not f.starts:
            raise RecordingError(
                f"rank {rank} recorded steps but its recording scheduler never "
                f"attached: running/waiting/frozen would read as 0"
            )
    if records.status is RunStatus.OK and not any(f.requests for f in files):
        raise RecordingError("the run completed but no rank recorded a request")
    # A balance-on run whose schedulers never gathered ran as "off": most
    # likely the plugin failed to load in the engine cores (e.g. a shared
    # venv's editable install pointing at another checkout), which vLLM only
    # logs. Reporting it as "on" would compare off with off.
    stepped = any(f.steps for f in files)
    gathered = any(f.gathers for f in files) or any(
        s.gathers for f in files for s in f.steps
    )
    interrupted = records.status is RunStatus.INTERRUPTED
    if records.mode.balance and stepped and not gathered and not interrupted:
        raise RecordingError(
            f"mode {records.mode.label} runs balance scheduling but no rank ever "
            "gathered: the ascend_balance plugin most likely did not load in the "
            "engine cores; check `vllm-ascend-balance doctor` and the engine log "
            "for 'Failed to load plugin'"
        )
