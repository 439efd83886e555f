# SPDX-License-Identifier: Apache-2.0
"""What ``patch-vllm`` keeps next to ``vllm/``, and who may touch it when.

``.vllm-ascend-balance-series/`` holds ``pristine/`` (the files before the
patch), ``applied.sha256`` (the digest of the series applied) and
``patched.sha256`` (each patched file's sha256 right after the patch, in
``sha256sum`` format): a file whose bytes no longer match was edited after
patching, and reverting it would silently discard those edits.

Runs on one install are serialized by an ``flock`` on the ``vllm/``
directory itself: nothing is created for it, so ``--check`` takes it (shared)
on a read-only install too, and the lock goes with the process however it
ends. Standard library only; never imports vLLM.

Errors: none of its own; :func:`locked` raises ``OSError`` when
``site/vllm`` cannot be opened, :func:`unwritable` returns its reason as text.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

STATE_DIR_NAME = ".vllm-ascend-balance-series"
PATCHED_NAME = "patched.sha256"


@contextlib.contextmanager
def locked(site: Path, exclusive: bool) -> Iterator[None]:
    """Hold ``site/vllm``'s lock: ``exclusive`` for a run that writes, shared
    for one that only reads, so each run sees another's finished state (two
    concurrent runs otherwise revert and re-apply under each other)."""
    fd = os.open(site / "vllm", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_patched(site: Path, files: list[str]) -> None:
    """Write ``patched.sha256``: each of ``files`` (relative to ``site``) as
    the patch left it."""
    lines = [f"{_sha256(site / rel)}  {rel}\n" for rel in files]
    (site / STATE_DIR_NAME / PATCHED_NAME).write_text("".join(lines))


def edited_since_patched(site: Path) -> list[str]:
    """The patched files (relative to ``site``) whose bytes differ from
    ``patched.sha256``; empty without that record (a state folder written
    before it existed: nothing to compare against)."""
    record = site / STATE_DIR_NAME / PATCHED_NAME
    if not record.is_file():
        return []
    edited = []
    for line in record.read_text().splitlines():
        digest, _, rel = line.partition("  ")
        try:
            current = _sha256(site / rel)
        except OSError:
            current = ""
        if current != digest:
            edited.append(rel)
    return edited


def unwritable(site: Path, files: list[str]) -> str | None:
    """None when this process may write the state folder and ``files``
    (relative to ``site``; ``git apply`` replaces a file, so its directory
    too), else the first path it may not, with the reason."""
    state = site / STATE_DIR_NAME
    targets = [state if state.is_dir() else site]
    for rel in files:
        targets += [(site / rel).parent, site / rel]
    for target in targets:
        if target.exists() and not os.access(target, os.W_OK):
            reason = "read-only file system" if _read_only_mount(target) else "denied"
            return f"{target} ({reason})"
    return None


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@contextlib.contextmanager
def restored_on_error(site: Path) -> Iterator[None]:
    """Put the applied series back as it was (its patched files and its
    state folder, byte for byte) when the block raises: replacing a series
    reverts the old one before it can check the new one fits, and a new one
    that does not fit must not leave vLLM without the seam it had."""
    state = site / STATE_DIR_NAME
    pristine = state / "pristine"
    patched = [p.relative_to(pristine) for p in pristine.rglob("*") if p.is_file()]
    with tempfile.TemporaryDirectory(prefix="vab-series-") as tmp:
        kept = Path(tmp)
        shutil.copytree(state, kept / "state")
        for rel in patched:
            (kept / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(site / rel, kept / "files" / rel)
        try:
            yield
        except BaseException:
            for rel in patched:
                shutil.copy2(kept / "files" / rel, site / rel)
            shutil.rmtree(state, ignore_errors=True)
            shutil.copytree(kept / "state", state)
            raise
