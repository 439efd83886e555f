# SPDX-License-Identifier: Apache-2.0
"""``scripts/vllm-drift`` (the scheduled CI check): the fork lane's series
against a given release. The release the fork lane pins passes; a release it
does not fit (the main lane's, a real sdist) fails with the re-sync message,
in one line. Asking the index for the newest release is left to CI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.lanes import REPO_ROOT, pin_tag

pytestmark = pytest.mark.lane_scope("release")

SCRIPT = REPO_ROOT / "scripts" / "vllm-drift"


def _run(version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--version", version],
        capture_output=True,
        text=True,
        timeout=900,  # hang guard only (a first sdist download)
    )


def test_the_pinned_release_fits() -> None:
    result = _run(pin_tag("fork")[1:])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "apply to " + pin_tag("fork") in result.stdout


def test_a_release_the_series_does_not_fit_is_red_with_the_resync_message() -> None:
    other = pin_tag("main")
    result = _run(other[1:])
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "re-sync the series into upstream_patch/" + other in errors[0]
    assert f"upstream_patch/{pin_tag('fork')}/series (the fork lane)" in errors[0]
