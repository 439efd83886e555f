# SPDX-License-Identifier: Apache-2.0
"""The README stays a front page, and the docs name modules that exist
(issue #41).

Read from the files alone (nothing runs, nothing is imported):

- the README has at most :data:`MAX_LINES` lines;
- it opens with the two commands a newcomer runs: its first fenced block,
  before its first ``##`` section, holds exactly ``scripts/replay`` on its
  default input (no arguments) and the command ``.ci/run`` runs (the whole
  suite), in that order;
- each README section with a table of figures also names the command that
  produced them (a fenced block), the date they were measured (YYYY-MM-DD)
  and their noise;
- every dotted ``vllm_ascend_balance.…`` path the README, CONTRIBUTING, a
  page or a text a page includes names (``scheduler_cls`` values,
  ``python -m`` targets, the API reference) is a module of the package or a
  name one defines, so a module moved without its docs fails here.

Each check has a negative control on a synthetic text (a README one line
too long, openings with a missing, an extra, a reordered or an argumented
command, an undated table, an old module path).
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

#: The README's length limit (issue #41).
MAX_LINES = 200
PACKAGE = "vllm_ascend_balance"
# The README and every text the site includes (pages and their snippets).
TEXTS = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "CONTRIBUTING.md",
    REPO_ROOT / "benchmarks" / "README.md",
    *sorted((REPO_ROOT / "upstream_patch").glob("*.md")),
    *sorted((REPO_ROOT / "docs").rglob("*.md")),
]
DOTTED = re.compile(rf"(?<![\w.]){PACKAGE}(?:\.[A-Za-z_]\w*)+")
# A class vLLM logs by its runtime name (built with type(), so no source
# line defines it), quoted from a log line.
LOGGED_CLASS = "<class '"
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


def ci_command(ci_run: str) -> list[str]:
    """The argv ``.ci/run`` execs (its last ``exec`` line)."""
    execs = [ln for ln in ci_run.splitlines() if ln.startswith("exec ")]
    assert execs, ".ci/run has no exec line"
    return shlex.split(execs[-1])[1:]


def opening_commands(readme: str) -> list[list[str]]:
    """The commands of the README's first fenced block, if it comes before
    the first ``##`` section (comments and blank lines dropped)."""
    commands: list[list[str]] = []
    fence = False
    for line in readme.splitlines():
        if line.lstrip().startswith("```"):
            if fence:
                return commands
            fence = True
            continue
        if fence:
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
        elif line.startswith("## "):
            return []
    return []


def opening_errors(readme: str, ci_argv: list[str]) -> list[str]:
    expected = [["scripts/replay"], ci_argv]
    found = opening_commands(readme)
    if found != expected:
        return [f"the README opens with {found}, not {expected}"]
    return []


def length_errors(readme: str) -> list[str]:
    n = len(readme.splitlines())
    return [f"README.md has {n} lines (at most {MAX_LINES})"] if n > MAX_LINES else []


def undated_figures(readme: str) -> list[str]:
    """``##`` sections with a table of figures but no fenced command, no
    date or no word on the noise."""
    errors: list[str] = []
    for section in re.split(r"^(?=## )", readme, flags=re.M):
        rows = [ln for ln in section.splitlines() if ln.startswith("|")]
        if not any(re.search(r"\d", row) for row in rows[2:]):
            continue
        title = section.splitlines()[0]
        if "```" not in section:
            errors.append(f"{title}: figures without the command that produced them")
        if not DATE.search(section):
            errors.append(f"{title}: figures without the date they were measured")
        if "noise" not in section.lower():
            errors.append(f"{title}: figures without their noise")
    return errors


def _defined_names(source: Path) -> set[str]:
    """Top-level names a module defines or imports."""
    names: set[str] = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_file(root: Path, parts: list[str]) -> Path | None:
    path = root.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def stale_module_paths(texts: dict[str, str], root: Path) -> list[str]:
    """Dotted package paths in ``texts`` (name -> Markdown) that are neither
    a module under ``root`` nor a top-level name of the longest module
    prefix."""
    stale: list[str] = []
    for where, text in texts.items():
        for match in DOTTED.finditer(text):
            if text[: match.start()].endswith(LOGGED_CLASS):
                continue
            parts = match.group(0).split(".")
            for i in range(len(parts), 0, -1):
                module = _module_file(root, parts[:i])
                if module is not None:
                    break
            rest = parts[i:]
            if module is None or (rest and rest[0] not in _defined_names(module)):
                stale.append(f"{where}: {match.group(0)}")
    return stale


def test_readme_is_at_most_200_lines() -> None:
    assert not length_errors((REPO_ROOT / "README.md").read_text())


def test_readme_opens_with_the_two_commands() -> None:
    ci_argv = ci_command((REPO_ROOT / ".ci" / "run").read_text())
    assert ci_argv == ["scripts/test"]  # the whole suite, as the README says
    assert not opening_errors((REPO_ROOT / "README.md").read_text(), ci_argv)


def test_readme_figures_are_dated() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert "|---|" in readme  # the results table is there to check
    assert not undated_figures(readme)


def test_documented_module_paths_exist() -> None:
    texts = {str(p.relative_to(REPO_ROOT)): p.read_text() for p in TEXTS}
    assert sum(len(DOTTED.findall(t)) for t in texts.values()) > 30  # still found
    stale = stale_module_paths(texts, REPO_ROOT)
    assert not stale, "\n".join(stale)


def test_negative_control_a_long_readme_is_found() -> None:
    assert not length_errors("line\n" * MAX_LINES)
    assert length_errors("line\n" * (MAX_LINES + 1))


OPENING = "# x\n\nwhat it is\n\n```bash\n{}\n```\n\n## Next\n\n```\nscripts/test\n```\n"
CI = ["scripts/test"]


@pytest.mark.parametrize(
    "block",
    [
        "scripts/replay   # the main job",  # the test command missing
        "scripts/test\nscripts/replay",  # reordered
        "scripts/replay --dp 4\nscripts/test",  # not the default input
        "scripts/replay\nscripts/test --lane release",  # not the whole suite
        "scripts/replay\nscripts/test\nscripts/serve",  # a third command
    ],
)
def test_negative_control_a_wrong_opening_is_found(block: str) -> None:
    assert not opening_errors(OPENING.format("scripts/replay # job\nscripts/test"), CI)
    assert opening_errors(OPENING.format(block), CI)


def test_negative_control_an_opening_after_a_section_is_found() -> None:
    readme = "# x\n\n## Install\n\n```bash\nscripts/replay\nscripts/test\n```\n"
    assert opening_errors(readme, CI)


def test_negative_control_undated_figures_are_found() -> None:
    table = "| metric | off | on |\n|---|---|---|\n| TPOT p50 (ms) | 56.2 | 50.9 |\n"
    good = f"## R\n\n```\nscripts/replay\n```\n\n{table}\n2026-12-04; noise: A/A.\n"
    assert not undated_figures(good)
    assert len(undated_figures(f"## R\n\n{table}")) == 3
    assert undated_figures(good.replace("2026-12-04", "today"))
    # A table of words (no figures) needs nothing.
    assert not undated_figures("## D\n\n| a | b |\n|---|---|\n| x | y |\n")


def test_negative_control_an_old_module_path_is_found() -> None:
    text = (
        f"`{PACKAGE}.gate.scheduler` and `{PACKAGE}.gate.scheduler.no_such_name`,"
        f" `{PACKAGE}.scheduler.BalanceScheduler` (moved), `{PACKAGE}.no_such_room`,"
        f" `<class '{PACKAGE}.replay.real.recorder.RecordingScheduler'>`"
    )
    assert stale_module_paths({"x.md": text}, REPO_ROOT) == [
        f"x.md: {PACKAGE}.gate.scheduler.no_such_name",
        f"x.md: {PACKAGE}.scheduler.BalanceScheduler",
        f"x.md: {PACKAGE}.no_such_room",
    ]
