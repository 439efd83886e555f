# SPDX-License-Identifier: Apache-2.0
"""vLLM's ZeroMQ IPC socket files stay out of the temp dir
(vllm_ascend_balance/ipc_sockets.py), in real processes binding real
sockets at the path vLLM's own ``get_open_zmq_ipc_path`` gives.

The leak it stops: an engine process killed while its socket is bound
leaves the socket file. Here the stand-in engine is a child that binds and
SIGKILLs itself; the front-end (the parent) exits normally.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

ENGINE = """
import os, signal, zmq
from vllm.utils.network_utils import get_open_zmq_ipc_path
path = get_open_zmq_ipc_path()
zmq.Context().socket(zmq.PULL).bind(path)
print(path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
#: The front-end: ``{setup}``, then one engine; prints the base it used
#: and whether the engine's socket file was there when the engine died.
FRONT_END = """
import os, subprocess, sys
from vllm_ascend_balance import ipc_sockets
{setup}
out = subprocess.run([sys.executable, "-c", ENGINE], capture_output=True, text=True)
path = out.stdout.strip().removeprefix("ipc://")
assert out.returncode == -9 and path, out.stderr[-2000:]
print(base, os.path.exists(path))
"""
OWN = "base = ipc_sockets.own_ipc_dir()"
#: Known bad: as before, vLLM's default base (the temp dir).
NOTHING = "import tempfile; base = tempfile.gettempdir()"
#: Known bad: a directory of its own whatever the temp dir's length.
ALWAYS = "ipc_sockets.SUN_PATH_MAX = 10**6\n" + OWN


def front_end(setup: str, tmp: Path, **env: str) -> tuple[str, bool, list[str]]:
    """Run the front-end with ``TMPDIR=tmp``: the base it used, whether the
    engine's socket file existed, and what is left in ``tmp`` afterwards."""
    code = f"ENGINE = {ENGINE!r}\n" + FRONT_END.format(setup=setup)
    full = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp), **env}
    full = {k: v for k, v in full.items() if v}
    if "VLLM_RPC_BASE_PATH" not in env:
        full.pop("VLLM_RPC_BASE_PATH", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    base, existed = out.stdout.split()
    return base, existed == "True", sorted(p.name for p in tmp.iterdir())


@pytest.fixture
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short temp dir: the test's own path leaves no room for a directory
    under it (the fallback the long-path tests below check)."""
    return tmp_path_factory.mktemp("ipc")


def sockets(names: list[str], tmp: Path) -> list[str]:
    return [n for n in names if stat.S_ISSOCK((tmp / n).lstat().st_mode)]


def test_a_killed_engines_socket_goes_with_the_front_end(tmp: Path) -> None:
    base, existed, left = front_end(OWN, tmp)
    assert Path(base).parent == tmp and Path(base).name.startswith("vab-ipc-")
    assert existed, "the killed engine left its socket file"
    assert left == []


def test_vllms_default_leaves_it_in_the_temp_dir_negative_control(
    tmp: Path,
) -> None:
    base, existed, left = front_end(NOTHING, tmp)
    assert base == str(tmp) and existed
    assert len(sockets(left, tmp)) == 1


def _long_temp_dir(tmp: Path) -> Path:
    """A temp dir whose own socket paths fit on Linux (107 bytes) but leave
    no room for a directory between."""
    room = 107 - len("/") - 36 - len(str(tmp)) - len("/")
    long = tmp / ("d" * room)
    long.mkdir()
    return long


def test_a_temp_dir_too_long_for_a_directory_is_left_to_vllm(tmp: Path) -> None:
    long = _long_temp_dir(tmp)
    base, existed, _ = front_end(OWN, long)
    assert base == str(long) and existed  # the bind worked, as vLLM's own


def test_a_directory_there_makes_the_bind_fail_negative_control(
    tmp: Path,
) -> None:
    with pytest.raises(AssertionError, match="longer than 107 characters"):
        front_end(ALWAYS, _long_temp_dir(tmp))


def test_a_base_the_user_set_is_kept(tmp: Path) -> None:
    mine = tmp / "mine"
    mine.mkdir()
    base, existed, left = front_end(OWN, tmp, VLLM_RPC_BASE_PATH=str(mine))
    assert base == str(mine) and existed
    assert left == ["mine"]
