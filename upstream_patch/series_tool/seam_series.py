# SPDX-License-Identifier: Apache-2.0
"""The schedule-seams series (``upstream_patch/schedule_seams/<tag>/``): three
patches, one per seam (A ``_waiting_admission``, C ``_evict_running_request``,
B ``_cap_num_new_tokens``), stacked on the balance series of the same tag
(``upstream_patch/<tag>/``, left as it is).

``resync`` rebuilds them from the release sdist: the sdist's files with the
balance series applied are a scratch commit, then each seam is one more
commit (its method and call sites placed by AST, :mod:`seam_emit`; the test
file as of that seam, :mod:`seam_tests`), exported by ``git format-patch``
with the balance series' fixed author and date, so a re-sync of the same
sdist is byte-identical. ``check`` is ``git apply --check`` of the balance
series and this one on a tree. Stdlib only, like the rest of the tool."""

from __future__ import annotations

import ast
import shutil
import subprocess
import tempfile
from pathlib import Path

from vllm_ascend_balance.tools.patch.series import git_apply, read_series

from .constants import SCHEDULER_REL, UTILS_REL
from .emit_scheduler import patched_scheduler
from .lanes import PATCH_DIR, SeriesError, series_patches
from .message import textwrap_paragraphs
from .resync import git_env
from .sdist import fetch_sdist
from .seam_emit import SEAMS
from .seam_sites import find_sites
from .seam_tests import license_lines, test_file
from .seam_texts import MESSAGE_PADDING, MESSAGES, SUBJECTS, TRAILERS, cap_after

SEAMS_DIR = PATCH_DIR / "schedule_seams"
SEAMS_TEST_REL = "tests/v1/core/test_scheduler_seams.py"
#: The release's own scheduler tests (the new file's header comes from it).
UPSTREAM_TEST_REL = "tests/v1/core/test_scheduler.py"
PATCH_NAMES = {
    "A": "0001-scheduler-add-waiting-admission-seam.patch",
    "C": "0002-scheduler-add-evict-running-request-seam.patch",
    "B": "0003-scheduler-add-cap-num-new-tokens-seam.patch",
}
#: The files the two series touch (the balance series' three, and ours).
FILES = (SCHEDULER_REL, UPSTREAM_TEST_REL, UTILS_REL)


def seam_patches(tag: str, root: Path | None = None) -> list[Path]:
    """``upstream_patch/schedule_seams/<tag>/series``'s patches, in order."""
    folder = (root / "upstream_patch" / "schedule_seams" if root else SEAMS_DIR) / tag
    if not (folder / "series").is_file():
        raise SeriesError(f"no schedule-seams series for {tag} (missing {folder})")
    return read_series(folder)


def stacked_patches(tag: str, root: Path | None = None) -> list[Path]:
    """The balance series of ``tag``, then the schedule-seams series."""
    return series_patches(tag, root) + seam_patches(tag, root)


def check(tag: str, tree: Path | None = None) -> str:
    """Applies the stacked series, one patch after the other, to a scratch
    copy of ``tree``'s files that the series touch (default tree: the
    release sdist of ``tag``); the one-line verdict, or SeriesError naming
    the first patch that does not apply. One ``git apply --check`` of all
    patches would not do: it checks each against the unpatched tree."""
    tree = Path(tree) if tree else fetch_sdist("vllm", tag[1:])
    patches = stacked_patches(tag)
    with tempfile.TemporaryDirectory(prefix="vab-seams-check-") as scratch:
        copy = Path(scratch)
        for rel in FILES:
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / rel, copy / rel)
        for patch in patches:
            result = git_apply(copy, [patch])
            if result.returncode != 0:
                first = result.stderr.strip().splitlines()[0] if result.stderr else ""
                raise SeriesError(
                    f"{patch.parent.name}/{patch.name} does not apply after the "
                    f"patches before it to {tree} ({first}): re-sync with "
                    f"`seams.py resync --tag {tag}`"
                )
    return (
        f"{tag}: {len(patches)} patches (balance, then schedule seams) apply "
        f"in order to {tree}"
    )


def _takes_scheduler_cls(utils_source: str) -> bool:
    for node in ast.parse(utils_source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "create_scheduler":
            args = node.args.args + node.args.kwonlyargs
            return any(a.arg == "scheduler_cls" for a in args)
    raise SeriesError(f"no create_scheduler() in {UTILS_REL}")


def _message(seam: str, pads: bool, after: str) -> str:
    body = MESSAGES[seam].format(after=after, padding=MESSAGE_PADDING if pads else "")
    return f"{SUBJECTS[seam]}\n\n{textwrap_paragraphs(body)}\n{TRAILERS}\n"


def resync(tag: str, tree: Path | None = None, out: Path | None = None) -> Path:
    """Rebuild ``upstream_patch/schedule_seams/<tag>/`` (or ``out``) from
    ``tree`` (default: the release sdist of ``tag``)."""
    tree = Path(tree) if tree else fetch_sdist("vllm", tag[1:])
    stock = (tree / SCHEDULER_REL).read_text()
    _, shape = patched_scheduler(stock)  # the release's facts, as 0001 reads them
    with_cls = _takes_scheduler_cls((tree / UTILS_REL).read_text())
    env = git_env()
    patches: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="vab-seams-") as scratch:
        repo = Path(scratch) / "tree"

        def git(*args: str) -> str:
            result = subprocess.run(
                ["git", "-c", "core.autocrlf=false", *args],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                raise SeriesError(f"git {args[0]} failed: {result.stderr.strip()}")
            return result.stdout

        for rel in FILES:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / rel, repo / rel)
        git("init", "-q")
        applied = git_apply(repo, series_patches(tag))
        if applied.returncode != 0:
            raise SeriesError(f"the balance series of {tag} does not apply: re-sync it")
        git("add", "-A")
        git("commit", "-q", "-m", f"vLLM {tag} with upstream_patch/{tag}/series")
        source = (repo / SCHEDULER_REL).read_text()
        header = license_lines((tree / UPSTREAM_TEST_REL).read_text())
        done: list[str] = []
        for seam, add in SEAMS:
            source = add(source, shape)
            done.append(seam)
            (repo / SCHEDULER_REL).write_text(source)
            (repo / SEAMS_TEST_REL).write_text(test_file(done, with_cls, header))
            pads = find_sites(source).pads_spec_decode
            (Path(scratch) / "message").write_text(
                _message(seam, pads, cap_after(source))
            )
            git("add", "-A")
            git("commit", "-q", "-F", str(Path(scratch) / "message"))
            patches[seam] = git(
                "format-patch", "-1", "--stdout", "--zero-commit", "--no-signature"
            )
    out = Path(out) if out else SEAMS_DIR / tag
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.patch"):
        old.unlink()
    for seam, text in patches.items():
        (out / PATCH_NAMES[seam]).write_text(text)
    (out / "series").write_text(
        f"# Applied in this order, on top of upstream_patch/{tag}/series.\n"
        "# Generated by: python upstream_patch/schedule_seams/seams.py resync "
        f"--tag {tag}\n" + "".join(f"{PATCH_NAMES[s]}\n" for s, _ in SEAMS)
    )
    return out
