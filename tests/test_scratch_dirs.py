# SPDX-License-Identifier: Apache-2.0
"""The suite's process-lived scratch directories are gone once the process
exits (tests/support/scratch.py): a whole suite run used to leave hundreds of
tiny-model and scheduler-variant directories in the temp dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

#: The tiny model directory every offline vLLM config of a process points at.
_MODEL_DIR = (
    "from tests.support.vllm_objects import tiny_moe_model_dir\n"
    "from tests.support.vllm_objects import make_vllm_config\n"
    "make_vllm_config()\n"
    "print(tiny_moe_model_dir())\n"
)
#: Known bad: the directory made as before, with nothing to remove it.
_BARE_MKDTEMP = "import tempfile\nprint(tempfile.mkdtemp(prefix='vab-model-'))\n"

#: A rank as the suite spawns one (tests/support/processes.py), making the
#: tiny model directory and ending in ``{exit}``; the parent prints its path.
_RANK = """
import multiprocessing, os
from tests.support.processes import run_processes
from tests.support.scratch import exit_without_teardown
from tests.support.vllm_objects import tiny_moe_model_dir

def rank(queue):
    queue.put(tiny_moe_model_dir())
    queue.close()
    queue.join_thread()
    {exit}

if __name__ == "__main__":
    queue = multiprocessing.get_context("spawn").Queue()
    joined = run_processes(rank, [(queue,)], timeout=120)
    assert joined.exitcodes == [0], joined
    print(queue.get(timeout=10))
"""


def _left_behind(code: str, tmp: Path) -> list[str]:
    """Run ``code`` in a new interpreter with ``tmp`` as its temp dir; the
    entries it leaves there, after checking it printed one that existed."""
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO_ROOT)}
    script = tmp.parent / f"{tmp.name}.py"  # spawn re-imports the main module
    script.write_text(code)
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    assert Path(out).parent == tmp, out
    return sorted(p.name for p in tmp.iterdir())


def test_the_tiny_model_directory_is_removed_when_the_process_exits(
    tmp_path: Path,
) -> None:
    assert _left_behind(_MODEL_DIR, tmp_path) == []


def test_a_bare_mkdtemp_is_left_behind_negative_control(tmp_path: Path) -> None:
    left = _left_behind(_BARE_MKDTEMP, tmp_path)
    assert len(left) == 1 and left[0].startswith("vab-model-")


def test_a_rank_ending_in_exit_without_teardown_leaves_nothing(
    tmp_path: Path,
) -> None:
    code = _RANK.format(exit="exit_without_teardown()")
    assert _left_behind(code, tmp_path) == []


def test_a_rank_ending_in_bare_os_exit_leaves_it_negative_control(
    tmp_path: Path,
) -> None:
    left = _left_behind(_RANK.format(exit="os._exit(0)"), tmp_path)
    assert len(left) == 1 and left[0].startswith("vab-model-")
