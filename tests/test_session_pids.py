# SPDX-License-Identifier: Apache-2.0
"""``tests/support/replay_variants.session_pids``: the oracle of every "no
process outlived the run" check (``test_collective_safety.py``'s
``leftover_pids``, ``test_policy_compare_smoke.py``'s SIGTERM case).

It must see a live process of the session, no process of another session,
and nothing once the session's processes ended. Until this test it read
``tty_nr`` (field 7 of ``/proc/PID/stat``) as the session id (field 6), so
it found nothing, ever, and those checks could not fail; the first case
fails on that version.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.replay_variants import session_pids

pytestmark = pytest.mark.lane_scope("release")


def test_session_pids_sees_the_session_and_only_it() -> None:
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        assert session_pids(proc.pid) == [proc.pid]
        assert os.getpid() not in session_pids(proc.pid)
        assert proc.pid not in session_pids(os.getsid(0))
    finally:
        proc.kill()
        proc.wait()
    assert session_pids(proc.pid) == []
