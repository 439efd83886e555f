# SPDX-License-Identifier: Apache-2.0
"""Names the series uses in every vLLM tree: the files it patches, the hook,
its flag, the patch file and the hook's default from vLLM 0.34."""

from __future__ import annotations

SCHEDULER_REL = "vllm/v1/core/sched/scheduler.py"
TEST_REL = "tests/v1/core/test_scheduler.py"
UTILS_REL = "tests/v1/core/utils.py"
SEAM = "_should_stop_admitting_waiting"
FLAG = "stop_admitting_waiting"
PATCH_NAME = "0001-scheduler-add-should-stop-admitting-waiting-hook.patch"
PAUSE_DEFAULT = "self._pause_state != PauseState.UNPAUSED"
