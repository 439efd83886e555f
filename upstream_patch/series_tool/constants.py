# SPDX-License-Identifier: Apache-2.0
"""Names the series uses in every vLLM tree: the files it patches, the hook,
its flag, the patch file and, from vLLM 0.34, the pause test the loop keeps
inline next to the hook."""

from __future__ import annotations

SCHEDULER_REL = "vllm/v1/core/sched/scheduler.py"
TEST_REL = "tests/v1/core/test_scheduler.py"
UTILS_REL = "tests/v1/core/utils.py"
SEAM = "_should_stop_admitting_waiting"
FLAG = "stop_admitting_waiting"
PATCH_NAME = "0001-scheduler-add-should-stop-admitting-waiting-hook.patch"
# From 0.34 the waiting loop's flag is this test or the hook (asked only when
# unpaused), so no override can lift pause(mode="wait") (PAUSED_NEW).
PAUSE_TERM = "self._pause_state != PauseState.UNPAUSED"
