# SPDX-License-Identifier: Apache-2.0
"""The sdist cache (``upstream_patch/series_tool/sdist.py``) shared by
processes: the release lane's two shards and the fork lane's build fetch
the same vLLM sdist at the same moment on an empty cache.

Before the per-sdist lock, each of them deleted and unpacked the same tree
while the others were unpacking or reading it, and one stamped a tree that
another had half deleted: every later run read ``vllm-0.34.0/`` with
nothing in it but ``vllm.egg-info`` (a fresh-clone CI run, 2026-12-04).

Each case serves a small sdist from a local index (the JSON simple API
pip's index speaks) and runs real processes against a scratch cache. The
index holds the archive back until four requests for it arrived or
:data:`HOLD_S` passed, so every unlocked fetcher is certain to download at
once; the verdict is a count of downloads, not a time.

Negative control: the same four processes with the lock replaced by a
no-op download four times (the check would catch a lock that does not
lock).
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

PROJECT, VERSION = "fakepkg", "1.0"
STEM = f"{PROJECT}-{VERSION}"
FILES = 200
FETCHERS = 4
#: Longest the index holds the archive back waiting for more requests.
HOLD_S = 5.0

FETCH = """
import sys, types
sys.path.insert(0, {upstream!r})
import series_tool.sdist as sdist
if {unlocked!r}:
    sdist.fcntl = types.SimpleNamespace(flock=lambda *a: None, LOCK_EX=2)
print(sdist.fetch_sdist({project!r}, {version!r}))
"""


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(FILES):
            data = f"file {i}\n".encode() * 50
            info = tarfile.TarInfo(f"{STEM}/pkg/m{i:03d}.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _Index(http.server.ThreadingHTTPServer):
    archive = _archive()
    downloads = 0
    #: Requests for the archive the index waits for before it answers.
    expect = FETCHERS
    arrived = threading.Condition()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Index

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        index = self.server
        if self.path == f"/simple/{PROJECT}/":
            host, port = index.server_address[:2]
            body = json.dumps(
                {
                    "files": [
                        {
                            "filename": f"{STEM}.tar.gz",
                            "url": f"http://{host!s}:{port}/files/{STEM}.tar.gz",
                            "hashes": {
                                "sha256": hashlib.sha256(index.archive).hexdigest()
                            },
                        }
                    ]
                }
            ).encode()
        elif self.path == f"/files/{STEM}.tar.gz":
            with index.arrived:
                index.downloads += 1
                index.arrived.notify_all()
                index.arrived.wait_for(
                    lambda: index.downloads >= index.expect, timeout=HOLD_S
                )
            body = index.archive
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def index() -> Iterator[_Index]:
    server = _Index(("127.0.0.1", 0), _Handler)
    server.arrived = threading.Condition()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _command(index: _Index, cache: Path, unlocked: bool = False):
    host, port = index.server_address[:2]
    env = {
        **os.environ,
        "VAB_CACHE": str(cache),
        "PIP_INDEX_URL": f"http://{host!s}:{port}/simple",
    }
    code = FETCH.format(
        upstream=str(REPO_ROOT / "upstream_patch"),
        unlocked=unlocked,
        project=PROJECT,
        version=VERSION,
    )
    return [sys.executable, "-c", code], env


def _fetch_at_once(index: _Index, cache: Path, unlocked: bool) -> list[Path]:
    """The trees the :data:`FETCHERS` processes print (unlocked: some may
    fail instead, renaming onto a tree another one just put there)."""
    args, env = _command(index, cache, unlocked)
    procs = [
        subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(FETCHERS)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    if not unlocked:
        assert [p.returncode for p in procs] == [0] * FETCHERS, outs
    return [Path(out.strip()) for out, _ in outs]


def _fetch(index: _Index, cache: Path) -> Path:
    args, env = _command(index, cache)
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _whole(tree: Path) -> bool:
    return len(list((tree / "pkg").glob("m*.py"))) == FILES


def test_fetchers_at_once_download_once_and_all_read_a_whole_tree(index, tmp_path):
    trees = _fetch_at_once(index, tmp_path / "cache", unlocked=False)
    assert index.downloads == 1
    assert len(set(trees)) == 1 and _whole(trees[0])


def test_negative_control_unlocked_fetchers_all_download(index, tmp_path):
    _fetch_at_once(index, tmp_path / "cache", unlocked=True)
    assert index.downloads == FETCHERS


def test_a_stamped_tree_that_lost_files_is_fetched_again(index, tmp_path):
    """The stamp's file list catches a tree broken before the lock existed
    (or by hand): the old stamp-only rule fails the first ``_whole`` after
    the second fetch."""
    index.expect = 1
    tree = _fetch(index, tmp_path / "cache")
    assert _whole(tree)
    (tree / "pkg" / "m007.py").unlink()
    # A run that imports from the tree adds files; that alone is no reason.
    (tree / "pkg" / "__pycache__").mkdir()
    (tree / "pkg" / "__pycache__" / "m000.pyc").write_bytes(b"")
    assert _fetch(index, tmp_path / "cache") == tree and _whole(tree)
    assert index.downloads == 2
    _fetch(index, tmp_path / "cache")
    assert index.downloads == 2, "a whole tree is fetched once"
