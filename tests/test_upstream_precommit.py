# SPDX-License-Identifier: Apache-2.0
"""vLLM's own pre-commit checks pass on the files every shipped series
changes: ruff check, ruff format and mypy, at the versions and with the
arguments the release's ``.pre-commit-config.yaml`` pins, run as vLLM's CI
runs them (``tests/support/vllm_precommit.py``), on the release sdist with
the series applied.

Negative control: the same run on the fork's series with three known
defects added fails each of the three hooks, and mypy by the error the
round-5 review found (a test mixin calling a method no base defines).

The hooks' outcomes are cached outside the repo like a build's outputs
(``tests/support/vllm_precommit.py``: keyed by every file of the patched
tree, the files checked, the hooks and their tool venvs' contents, and the
runner's source), and stored only once a test's assertions on them held.
Whenever any input changes (a series, a pin, a pre-commit config, a tool),
the hooks run for real; an unchanged input replays their outcome on exactly
that input. The negative control always runs for real.
``test_verdict_key_covers_the_tree`` checks that the tree part
of the key sees a changed, added or renamed file. Delete
``$VAB_CACHE/tools/precommit-verdicts`` to run every hook again.

The commit-msg stage too: the commit the runbook exports carries vLLM's
trailers in the form its contribution guide and its ``signoff-commit``
hook expect.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.support.lanes import REPO_ROOT, pin_tag
from tests.support.series_tool import series
from tests.support.vllm_precommit import (
    patched_tree,
    recalled,
    remember,
    run_hooks,
    series_files,
    tree_digest,
    verdict_key,
)

# Text against sdists, the tools in a venv of their own: the verdict is the
# same on every lane, so the release lane runs it, once.
pytestmark = pytest.mark.lane_scope("release")

SHIPPED_TAGS = sorted(
    path.parent.name for path in (REPO_ROOT / "upstream_patch").glob("v*/series")
)


def _outcomes(key, tree, files, mypy_cache):
    """The hooks' outcomes on ``tree``: recalled when this exact input was
    checked before (module docstring), else run."""
    outcomes = recalled(key)
    print(f"verdict {key[:12]}: {'recalled' if outcomes is not None else 'run'}")
    if outcomes is None:
        outcomes = run_hooks(tree, files, mypy_cache)
    print(_report(outcomes))
    return outcomes


def _report(outcomes) -> str:
    return "\n".join(
        f"{o.hook}: exit {o.returncode}, modified {list(o.modified)}\n{o.output}"
        for o in outcomes
    )


@pytest.mark.parametrize("tag", SHIPPED_TAGS)
def test_vllm_precommit_passes_on_the_series_files(tag, tmp_path):
    """Every ruff and mypy hook CI runs passes on the series' files (the
    scheduler, its test file and, where the series touches it, the test
    helper), and the run is not vacuous: both ruff hooks and at least one
    mypy hook ran."""
    files = series_files(tag)
    assert files[0] == "tests/v1/core/test_scheduler.py", files
    assert files[-1] == series.SCHEDULER_REL, files
    tree = patched_tree(series.fetch_sdist("vllm", tag[1:]), tag, tmp_path)
    key = verdict_key(tree, files)
    outcomes = _outcomes(key, tree, files, tag)
    ran = [o.hook for o in outcomes]
    assert {"ruff-check", "ruff-format"} <= set(ran) or {"ruff", "ruff-format"} <= set(
        ran
    ), ran
    assert any(hook.startswith("mypy") for hook in ran), ran
    assert all(o.ok for o in outcomes), _report(outcomes)
    remember(key, outcomes)


# The review's mypy error: a mixin whose only base is object calls super().
MIXIN_DEFECT = """

class _Gate:
    def _should_stop_admitting_waiting(self) -> bool:
        return super()._should_stop_admitting_waiting()
"""
UNUSED_IMPORT = "\nimport os\n"  # ruff check (F401, fixable: --fix rewrites)
UNFORMATTED = "\nassert ( 1 )\n"  # ruff format rewrites it


def test_vllm_precommit_fails_on_known_defects(tmp_path):
    """Negative control, on the fork's series (the one proposed upstream):
    the mixin defect fails mypy with "undefined in superclass" at its line,
    an unused import fails ruff check (its --fix rewrites the file), an
    unformatted statement fails ruff format."""
    tag = pin_tag("fork")
    files = series_files(tag)
    tree = patched_tree(series.fetch_sdist("vllm", tag[1:]), tag, tmp_path)
    test_file = tree / "tests/v1/core/test_scheduler.py"
    text = test_file.read_text()
    defect_line = text.count("\n") + MIXIN_DEFECT.count("\n")
    test_file.write_text(text + MIXIN_DEFECT)
    scheduler = tree / series.SCHEDULER_REL
    scheduler.write_text(scheduler.read_text() + UNUSED_IMPORT + UNFORMATTED)
    # Always run for real, never recalled: each run shows that the tools on
    # this machine can fail, which a recalled pass relies on. Its own mypy
    # cache: the defects would otherwise evict the clean scheduler's entries
    # the positive run of this release reuses.
    found = run_hooks(tree, files, f"{tag}-defects")
    print(_report(found))
    outcomes = {o.hook: o for o in found}
    check = outcomes.get("ruff-check") or outcomes["ruff"]
    assert not check.ok and series.SCHEDULER_REL in check.modified
    assert not outcomes["ruff-format"].ok
    mypy = [o for hook, o in outcomes.items() if hook.startswith("mypy")]
    assert mypy and all(not o.ok for o in mypy)
    for outcome in mypy:
        assert (
            f"test_scheduler.py:{defect_line}: error: "
            '"_should_stop_admitting_waiting" undefined in superclass  [misc]'
        ) in outcome.output, outcome.output


def test_verdict_key_covers_the_tree(tmp_path):
    """The tree part of the verdict key changes with any file's content, an
    added file and a renamed one, so a stored verdict is never replayed on
    a tree it was not given for."""
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "a.py").write_text("x = 1\n")
    (tree / "pyproject.toml").write_text("[tool.mypy]\n")
    seen = {tree_digest(tree)}
    (tree / "vllm" / "a.py").write_text("x = 2\n")
    seen.add(tree_digest(tree))
    (tree / "vllm" / "b.py").write_text("")
    seen.add(tree_digest(tree))
    (tree / "vllm" / "b.py").rename(tree / "vllm" / "c.py")
    seen.add(tree_digest(tree))
    assert len(seen) == 4
    assert tree_digest(tree) == tree_digest(tree)  # deterministic


def _git(repo, *args: str) -> str:
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": str(repo),
        "PATH": os.environ["PATH"],
    }
    result = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_exported_commit_has_vllms_trailers(tmp_path):
    """The runbook's export (``git am``, then ``git commit --amend
    --reset-author -s`` by the submitter) yields the trailers vLLM's
    contribution guide shows, in its order: the AI-assistance
    ``Co-authored-by:`` the series carries, then the submitter's DCO
    ``Signed-off-by:``, in the form vLLM's ``signoff-commit`` hook greps for
    (``^Signed-off-by: <user.name> <<user.email>>``)."""
    tag = pin_tag("fork")
    sdist_tree = series.fetch_sdist("vllm", tag[1:])
    repo = tmp_path / "vllm"
    for rel in series_files(tag):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist_tree / rel, repo / rel)
    _git(repo, "init", "-q")
    name, email = "A Submitter", "submitter@example.com"
    _git(repo, "config", "user.name", name)
    _git(repo, "config", "user.email", email)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", tag)
    _git(repo, "am", "-q", "--keep-non-patch", *map(str, series.series_patches(tag)))
    _git(repo, "commit", "-q", "--amend", "--reset-author", "-s", "--no-edit")
    trailers = _git(repo, "log", "-1", "--format=%(trailers:only,unfold)").split("\n")
    assert [t for t in trailers if t] == [
        "Co-authored-by: Claude",
        f"Signed-off-by: {name} <{email}>",
    ]
    message = _git(repo, "log", "-1", "--format=%B")
    assert re.search(rf"^Signed-off-by: {name} <{email}>$", message, re.M)
    assert _git(repo, "log", "-1", "--format=%an <%ae>").strip() == f"{name} <{email}>"
