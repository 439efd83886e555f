# SPDX-License-Identifier: Apache-2.0
"""The documentation stays true: the site builds strictly, and the commands
and paths the README and the pages name still exist.

- The site: ``scripts/docs build`` (``mkdocs build --strict``) fails on a
  broken link between pages, a page missing from the nav, an unknown anchor,
  a snippet whose file is gone or an unresolved API reference. It runs on the
  release lane only: the build does not depend on the vLLM lane (its own
  small venv), so once per suite run is enough.
- The commands: ``vllm-ascend-balance --help`` (the console script) and each
  subcommand's ``--help``; every ``replay``, ``doctor``, ``demo`` and
  ``validate-sim`` command line in a fenced block of the README or a page
  parses with the CLI's own parser (replay options are also validated),
  without running it.
- The paths: every ``scripts/...``, ``benchmarks/...``, ``tests/data/...``
  and ``upstream_patch/...`` path the README, CONTRIBUTING or a page names
  exists in the checkout.
- The README's relative links (not part of the site, so mkdocs does not
  check them): each file exists, each ``#anchor`` is a heading there.

Each check has a negative control (a broken link, a stale command, a gone
path, a stale README link must be found).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT
from vllm_ascend_balance.tools.cli import build_parser, parse_command_line
from vllm_ascend_balance.tools.doctor import cli as doctor

pytestmark = pytest.mark.lane_scope("release")

DOCS = sorted((REPO_ROOT / "docs").rglob("*.md"))
TEXTS = [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", *DOCS]
# Written as placeholders, not paths: vX.Y.Z, LANE, <name>, globs.
PLACEHOLDER = re.compile(r"X\.Y\.Z|vOLD|LANE|<|\*|…|\.\.\.")
PATH = re.compile(
    r"(?<![\w/.$-])((?:scripts|benchmarks|tests/data|upstream_patch)/[\w.+-]*(?:/[\w.+-]+)*)"
)
SUBCOMMANDS = (["patch-vllm"], ["doctor"], ["demo"], ["replay"], ["validate-sim"])
COMMANDS = {  # documented prefix -> argv prefix of build_parser()
    "scripts/replay": ["replay"],
    "scripts/doctor": ["doctor"],
    "scripts/serve": ["demo"],
    "vllm-ascend-balance": [],
    "scripts/vllm-ascend-balance": [],
    "python -m vllm_ascend_balance": [],
}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def _fenced_lines(text: str) -> list[str]:
    """Command lines of fenced code blocks: ``$ `` prompts dropped,
    backslash continuations joined, trailing ``# comments`` cut."""
    lines: list[str] = []
    fence = False
    pending = ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("```"):
            fence, pending = not fence, ""
            continue
        if not fence:
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        lines.append(line.removeprefix("$ "))
    return lines


def documented_commands(
    texts: dict[str, str] | None = None,
) -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of every documented CLI command line (of ``texts``,
    name -> Markdown, default: the README and the pages)."""
    if texts is None:
        texts = {_rel(p): p.read_text() for p in TEXTS}
    found: list[tuple[str, list[str]]] = []
    for name, text in texts.items():
        for line in _fenced_lines(text):
            try:
                words = shlex.split(line, comments=True)
            except ValueError:  # not shell (e.g. a table's text)
                continue
            for prefix, argv in COMMANDS.items():
                n = len(prefix.split())
                if words[:n] != prefix.split() or PLACEHOLDER.search(line):
                    continue
                rest = words[n:]
                if prefix == "scripts/vllm-ascend-balance" and rest[:1] == ["--lane"]:
                    rest = rest[2:]
                if argv or rest[:1] in SUBCOMMANDS:
                    found.append((f"{name}: {line}", argv + rest))
    return found


def test_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(REPO_ROOT / "scripts" / "docs"), "build", "--site-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for page in ("index.html", "install/index.html", "api/index.html"):
        assert (tmp_path / page).is_file(), page
    # The API reference was rendered from the docstrings, not left empty.
    api = (tmp_path / "api" / "index.html").read_text()
    assert "BalanceSchedulerMixin" in api and "admission_gather" in api


def test_negative_control_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The same site with one link to a page that does not exist must fail:
    a copy of docs/ and of mkdocs.yml (pointing at the checkout for the
    snippets and the API sources) with the link added to the home page."""
    shutil.copytree(REPO_ROOT / "docs", tmp_path / "docs")
    home = tmp_path / "docs" / "index.md"
    home.write_text(home.read_text() + "\n[gone](no-such-page.md)\n")
    config = (REPO_ROOT / "mkdocs.yml").read_text()
    for old, new in (
        ("docs_dir: docs", f"docs_dir: {tmp_path / 'docs'}"),
        ("paths: [.]", f"paths: [{REPO_ROOT}]"),
        ("base_path: [.]", f"base_path: [{REPO_ROOT}]"),
    ):
        assert old in config, old
        config = config.replace(old, new)
    (tmp_path / "mkdocs.yml").write_text(config)
    result = subprocess.run(
        [
            str(REPO_ROOT / "scripts" / "docs"),
            "build",
            "-f",
            str(tmp_path / "mkdocs.yml"),
        ]
        + ["--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr, result.stderr[-4000:]


def test_console_script_help() -> None:
    script = Path(sys.executable).parent / "vllm-ascend-balance"
    result = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    for (command,) in SUBCOMMANDS:
        assert command in result.stdout


@pytest.mark.parametrize("command", [c for (c,) in SUBCOMMANDS])
def test_subcommand_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--help"])
    assert exit_.value.code == 0
    assert f"vllm-ascend-balance {command}" in capsys.readouterr().out


def test_documented_commands_parse() -> None:
    commands = documented_commands()
    # The README's own examples are among them (the extraction works).
    wheres = [where for where, _ in commands]
    assert any(w.startswith("README.md: scripts/replay") for w in wheres)
    assert any(w.startswith("README.md: vllm-ascend-balance doctor") for w in wheres)
    assert any("validate-sim" in w for w in wheres)
    assert not _bad_commands(commands)


def _bad_commands(commands: list[tuple[str, list[str]]]) -> list[str]:
    from vllm_ascend_balance.replay.pipeline import options as replay_options

    bad: list[str] = []
    for where, argv in commands:
        try:
            args = parse_command_line(argv)
            if args.command in ("doctor", "demo"):  # vllm serve's, by vLLM
                doctor.parse_serve_args(args.serve_args)
            if args.command == "replay":
                replay_options.from_namespace(args)  # ranges and --mode
        except (SystemExit, ValueError) as exc:
            bad.append(f"{where}: {exc}")
    return bad


def test_negative_control_stale_commands_are_found() -> None:
    text = "```bash\nscripts/replay --no-such-option\n"
    text += "vllm-ascend-balance replay --mode sideways  # a bad mode\n"
    text += "scripts/doctor --data-parallel-size 0\n```\n"
    commands = documented_commands({"x.md": text})
    assert len(commands) == 3
    assert len(_bad_commands(commands)) == 3


def _missing_paths(texts: dict[str, str]) -> tuple[int, list[str]]:
    missing: list[str] = []
    seen = 0
    for where, text in texts.items():
        for match in PATH.finditer(text):
            name = match.group(1).rstrip(".,:;")
            if PLACEHOLDER.search(name) or name.endswith("/<"):
                continue
            seen += 1
            target = REPO_ROOT / name
            # An output prefix (``--out benchmarks/results/x``) names x.md, x.json.
            if not target.exists() and not any(target.parent.glob(target.name + ".*")):
                missing.append(f"{where}: {name}")
    return seen, missing


def test_documented_paths_exist() -> None:
    seen, missing = _missing_paths({_rel(p): p.read_text() for p in TEXTS})
    assert seen > 50, seen  # the pattern still finds the paths
    assert not missing, "\n".join(missing)


def test_negative_control_a_gone_path_is_found() -> None:
    text = "run `benchmarks/no_such_bench.py`, then scripts/gone and `scripts/docs`"
    seen, missing = _missing_paths({"x.md": text})
    assert seen == 3
    assert missing == ["x.md: benchmarks/no_such_bench.py", "x.md: scripts/gone"]


def _github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def readme_link_errors(readme: str, root: Path) -> list[str]:
    """Relative links of ``readme`` whose file, or heading anchor, is gone
    (the README is not part of the site, so mkdocs does not check it)."""
    errors: list[str] = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file, _, anchor = target.partition("#")
        if not (root / file).exists():
            errors.append(f"{target}: no {file}")
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", (root / file).read_text(), re.M)
            if anchor not in {_github_slug(h) for h in headings}:
                errors.append(f"{target}: no heading #{anchor} in {file}")
    return errors


def test_readme_links_resolve() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert "](docs/install.md" in readme  # the links into the site are there
    assert not readme_link_errors(readme, REPO_ROOT)


def test_negative_control_stale_readme_links_are_found() -> None:
    readme = "[a](docs/gone.md) [b](docs/install.md#no-such-heading) [c](LICENSE)"
    assert readme_link_errors(readme, REPO_ROOT) == [
        "docs/gone.md: no docs/gone.md",
        "docs/install.md#no-such-heading: no heading #no-such-heading in "
        "docs/install.md",
    ]
