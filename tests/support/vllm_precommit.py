# SPDX-License-Identifier: Apache-2.0
"""vLLM's own pre-commit checks (ruff check, ruff format, mypy) on the files
a series changes, run as the release's ``.pre-commit-config.yaml`` runs them.

What runs is read off the release sdist at run time, never written here:

* the ruff hooks: the ``astral-sh/ruff-pre-commit`` repository's ``rev``
  (or its ``# frozen: vX`` comment) is the ruff version; its hooks' entries
  are that repository's (``ruff check --force-exclude``, ``ruff format
  --force-exclude``), with the config's ``args``;
* the mypy hooks: the local hooks whose id starts with ``mypy``, their
  ``entry`` (vLLM's ``tools/pre_commit/mypy.py`` with a Python version) and
  ``additional_dependencies`` (mypy's pin, the stub packages, pydantic);
* the stage: CI's (``pre-commit run --all-files --hook-stage manual``), so a
  release with one mypy hook per Python version runs all of them.

The tools are installed from the package index into a venv of their own
under ``$VAB_CACHE/tools``, keyed by the requirement strings (never into a
lane venv, never committed); vLLM itself is not installed there, as in
pre-commit's isolated hook environments (``ignore_missing_imports`` in
vLLM's mypy config). A hook fails as pre-commit fails it: a non-zero exit,
or a file it modified (``ruff check --fix``, ``ruff format``).

Verdicts are cached like build outputs (:func:`verdict_key`,
:func:`recalled`, :func:`remember`): the hooks' outcomes on a tree, stored
under ``$VAB_CACHE/tools/precommit-verdicts`` by a key over everything the
run reads (every file of the patched tree, by content; the files checked;
each hook's id, command and requirements; each tool venv's interpreter and
installed distributions; this module's source). Any change to any of them
is a new key, so the hooks run for real again; an unchanged input replays
the outcome they gave on exactly that input. Nearly all of the hooks' time
is mypy following the scheduler's imports through all of vLLM (several
seconds a call even with its cache warm, once per Python version a release
pins), which an unchanged series need not pay on every run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from tests.support.series_tool import series

RUFF_REPO = "https://github.com/astral-sh/ruff-pre-commit"
# ruff-pre-commit's own hook entries (its .pre-commit-hooks.yaml), by hook id
# ("ruff" is the check hook's older id).
RUFF_ENTRIES = {
    "ruff": "ruff check --force-exclude",
    "ruff-check": "ruff check --force-exclude",
    "ruff-format": "ruff format --force-exclude",
}
STAGE = "manual"  # what vLLM's CI runs


@dataclass(frozen=True)
class Hook:
    """One pre-commit hook: its id, its command (files are appended) and the
    requirements its environment holds."""

    id: str
    argv: tuple[str, ...]
    requirements: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    hook: str
    returncode: int
    modified: tuple[str, ...]
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.modified


def _ruff_version(config_text: str) -> str:
    """The ruff version the config pins: ``rev: vX`` or a frozen SHA with
    its ``# frozen: vX`` comment."""
    block = config_text.split(f"repo: {RUFF_REPO}", 1)[1]
    match = re.search(r"^\s*rev:\s*(\S+)(?:\s*#\s*frozen:\s*(\S+))?", block, re.M)
    assert match, f"no rev for {RUFF_REPO}"
    return (match.group(2) or match.group(1)).lstrip("v")


def hooks(tree: Path) -> list[Hook]:
    """The ruff and mypy hooks of ``tree``'s ``.pre-commit-config.yaml``
    that CI's stage runs, in the config's order."""
    text = (tree / ".pre-commit-config.yaml").read_text()
    config = yaml.safe_load(text)
    default_stages = config.get("default_stages") or [STAGE]
    found = []
    for repo in config["repos"]:
        for hook in repo["hooks"]:
            if STAGE not in hook.get("stages", default_stages):
                continue
            if repo["repo"] == RUFF_REPO and hook["id"] in RUFF_ENTRIES:
                argv = shlex.split(RUFF_ENTRIES[hook["id"]]) + hook.get("args", [])
                requirements = [f"ruff=={_ruff_version(text)}"]
            elif repo["repo"] == "local" and hook["id"].startswith("mypy"):
                argv = shlex.split(hook["entry"]) + hook.get("args", [])
                requirements = list(hook.get("additional_dependencies", []))
            else:
                continue
            found.append(Hook(hook["id"], tuple(argv), tuple(requirements)))
    return found


def tool_venv(requirements: list[str]) -> Path:
    """A venv holding ``requirements`` (pip, from the configured index),
    built once under ``$VAB_CACHE/tools`` and keyed by them."""
    key = hashlib.sha256(
        "\n".join([sys.version.split()[0], *sorted(requirements)]).encode()
    ).hexdigest()[:12]
    venv = series.cache_dir() / "tools" / f"vllm-precommit-{key}"
    stamp = venv / ".complete"  # written last: a venv without it is rebuilt
    if stamp.is_file():
        return venv
    locks = series.cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file():  # built by another process while this one waited
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        # In place: a venv does not survive a move.
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin/python"), "-m", "pip", "install", "-q", *requirements],
            check=True,
        )
        stamp.write_text("\n".join(requirements) + "\n")
    return venv


def series_files(tag: str) -> list[str]:
    """The files ``upstream_patch/<tag>/`` changes, in patch order."""
    files: list[str] = []
    for patch in series.series_patches(tag):
        for line in patch.read_text().splitlines():
            rel = line[len("+++ b/") :] if line.startswith("+++ b/") else ""
            if rel and rel not in files:
                files.append(rel)
    return files


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def patched_tree(sdist_tree: Path, tag: str, scratch: Path) -> Path:
    """``sdist_tree`` with ``upstream_patch/<tag>/`` applied, in ``scratch``:
    unchanged files hard-linked (the tools only read them), the files the
    series changes copied, then patched."""
    tree = scratch / "tree"
    shutil.copytree(sdist_tree, tree, copy_function=_link_or_copy)
    for rel in series_files(tag):
        (tree / rel).unlink()
        shutil.copy2(sdist_tree / rel, tree / rel)
    result = series.git_apply(tree, series.series_patches(tag))
    assert result.returncode == 0, result.stderr
    return tree


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_hooks(tree: Path, files: list[str], release: str) -> list[Outcome]:
    """Every hook of :func:`hooks` on ``files`` (relative to ``tree``), in
    order, as pre-commit runs them: a hook sees what earlier ones wrote.

    mypy keeps its cache per ``release`` under ``$VAB_CACHE/tools``, as it
    would in a checkout (a moved tree's entries are revalidated by content
    hash), so a warm run re-checks only the patched files."""
    mypy_cache = series.cache_dir() / "tools" / "mypy-cache" / release
    outcomes = []
    for hook in hooks(tree):
        venv = tool_venv(list(hook.requirements))
        argv = list(hook.argv)
        if argv[0] == "python":
            argv[0] = str(venv / "bin/python")
        env = {
            **os.environ,
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "MYPY_CACHE_DIR": str(mypy_cache),
        }
        for name in ("PYTHONPATH", "VIRTUAL_ENV", "MYPYPATH"):
            env.pop(name, None)
        before = {rel: _digest(tree / rel) for rel in files}
        result = subprocess.run(
            argv + files, cwd=tree, env=env, capture_output=True, text=True
        )
        modified = tuple(rel for rel in files if _digest(tree / rel) != before[rel])
        outcomes.append(
            Outcome(hook.id, result.returncode, modified, result.stdout + result.stderr)
        )
    return outcomes


#: Bumped when what a stored verdict holds changes.
VERDICT_SCHEMA = 1


def tree_digest(tree: Path) -> str:
    """sha256 over every file under ``tree``: its relative path and the
    sha256 of its content (symlinks by their target), in a fixed order."""
    digest = hashlib.sha256()
    for top, dirs, names in os.walk(tree):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, tree)
            if os.path.islink(path):
                content = b"link:" + os.readlink(path).encode()
            else:
                with open(path, "rb") as handle:
                    content = hashlib.sha256(handle.read()).digest()
            digest.update(rel.encode() + b"\0" + content + b"\n")
    return digest.hexdigest()


def _venv_identity(venv: Path) -> list[str]:
    """A tool venv's interpreter (pyvenv.cfg) and installed distributions
    (their dist-info directory names: name and version)."""
    dists = sorted(p.name for p in venv.glob("lib/python*/site-packages/*.dist-info"))
    return [(venv / "pyvenv.cfg").read_text(), *dists]


def verdict_key(tree: Path, files: list[str]) -> str:
    """The key of :func:`run_hooks`'s outcomes on ``files`` of ``tree``: a
    digest of all it reads (module docstring)."""
    found = hooks(tree)
    inputs = {
        "schema": VERDICT_SCHEMA,
        "stage": STAGE,
        "runner": _digest(Path(__file__)),
        "files": files,
        "hooks": [
            [
                h.id,
                h.argv,
                h.requirements,
                _venv_identity(tool_venv(list(h.requirements))),
            ]
            for h in found
        ],
        "tree": tree_digest(tree),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _verdict_path(key: str) -> Path:
    return series.cache_dir() / "tools" / "precommit-verdicts" / f"{key}.json"


def recalled(key: str) -> list[Outcome] | None:
    """The outcomes :func:`remember` stored under ``key``, or None."""
    try:
        stored = json.loads(_verdict_path(key).read_text())
    except (OSError, ValueError):
        return None
    return [
        Outcome(o["hook"], o["returncode"], tuple(o["modified"]), o["output"])
        for o in stored
    ]


def remember(key: str, outcomes: list[Outcome]) -> None:
    """Stores ``outcomes`` under ``key`` (written whole, then renamed). The
    tests call it only once their assertions on the outcomes held, so a
    run that broke for another reason (a tool crash) is not kept."""
    path = _verdict_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    os.replace(scratch, path)
