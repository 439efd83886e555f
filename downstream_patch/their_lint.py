# SPDX-License-Identifier: Apache-2.0
"""vllm-ascend's own pre-commit hooks, run offline on the files a tree's
patches change, with the tree's ``.pre-commit-config.yaml`` read as their CI
reads it (``pre-commit run --hook-stage manual``: every hook of the default
stages and of ``manual``).

``pre-commit`` itself would clone each hook's repository from GitHub, so the
hooks are run the way their repositories define them, by name:

- ``ruff-check`` and ``ruff-format`` (ruff at the config's ``rev``, the
  tree's ``pyproject.toml`` settings; ``--fix`` dropped and ``--check``
  added: a hook that would rewrite a file fails here), ``codespell`` and
  ``typos`` (at their ``rev``, with the config's arguments), installed from
  the package index into a tool venv under ``$VAB_CACHE`` keyed by those
  versions;
- the ``local`` hooks, from the tree (their ``tools/`` scripts), with the
  tool venv's ``python`` first on ``PATH``;
- the others are reported as not run, with the reason (:data:`NOT_RUN`),
  when a changed file is of their kind, else as ``no files``.

Imported as a sibling module.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from vllm_refs import cache_dir

#: pip distribution per hook repository (the version is the config's rev).
PYPI = {
    "ruff-pre-commit": "ruff",
    "codespell": "codespell",
    "typos": "typos",
}
#: Hooks not run here, with why.
NOT_RUN = {
    "clang-format": "a mirror of the clang-format binary, fetched by pre-commit",
    "markdownlint": "markdownlint-cli is a Node package, not installed here",
    "actionlint": "a Go binary, fetched by pre-commit",
    "gitleaks-offline-scan": "its script downloads the gitleaks binary",
}
#: Which changed files a hook is run on (its manifest's types, by suffix).
KINDS = {
    "python": (".py", ".pyi"),
    "shell": (".sh",),
    "png": (".png",),
    "c++": (".cc", ".cpp", ".cxx", ".h", ".hpp"),
    "markdown": (".md",),
    "workflow": (".github/workflows/",),  # a path prefix, not a suffix
}
HOOK_KINDS = {
    "ruff-check": ["python"],
    "ruff-format": ["python"],
    "clang-format": ["c++"],
    "markdownlint": ["markdown"],
    "actionlint": ["workflow"],
}
STAGES = {"pre-commit", "manual"}


def _config(tree: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    config = yaml.safe_load((tree / ".pre-commit-config.yaml").read_text())
    default = set(config.get("default_stages") or STAGES)
    return [
        (repo, hook)
        for repo in config["repos"]
        for hook in repo["hooks"]
        if set(hook.get("stages") or default) & STAGES
    ]


def _repo_name(repo: dict[str, Any]) -> str:
    return str(repo["repo"]).rstrip("/").rsplit("/", 1)[-1]


def _requirements(tree: Path) -> list[str]:
    reqs = {"regex"}  # check-forbidden-imports' additional dependency
    for repo, hook in _config(tree):
        name = PYPI.get(_repo_name(repo))
        if name:
            reqs.add(f"{name}=={str(repo['rev']).lstrip('v')}")
            reqs.update(hook.get("additional_dependencies") or [])
    return sorted(reqs)


def tools(tree: Path) -> Path:
    """The tool venv's ``bin`` for ``tree``'s config (built once)."""
    reqs = _requirements(tree)
    key = hashlib.sha256(" ".join(reqs).encode()).hexdigest()[:12]
    venv = cache_dir() / "tools" / f"vllm-ascend-lint-{key}"
    if not (venv / ".complete").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *reqs],
            capture_output=True,
            text=True,
        )
        if pip.returncode:
            raise SystemExit(f"their_lint.py: pip install {reqs} failed: {pip.stderr}")
        (venv / ".complete").touch()
    return venv / "bin"


def _matches(path: str, kinds: list[str] | None) -> bool:
    if not kinds:
        return True
    if "workflow" in kinds:
        return path.startswith(KINDS["workflow"])
    return any(path.endswith(KINDS.get(kind, ("\0",))) for kind in kinds)


def _command(repo: dict, hook: dict, files: list[str]) -> list[str]:
    args = [a for a in hook.get("args") or [] if a not in ("--fix", "--write-changes")]
    hook_id = hook["id"]
    if hook_id == "ruff-check":
        return ["ruff", "check", "--force-exclude", *args, *files]
    if hook_id == "ruff-format":
        return ["ruff", "format", "--force-exclude", "--check", *args, *files]
    if hook_id in ("codespell", "typos"):
        return [hook_id, *args, *files]
    entry = shlex.split(hook["entry"]) + args
    return entry + (files if hook.get("pass_filenames", True) else [])


def run(tree: Path, files: list[str], bin_dir: Path) -> list[dict[str, str]]:
    """One result per hook: ``hook``, ``status`` (passed, failed, no files,
    not run) and ``detail`` (a failure's output tail, or why not run)."""
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    results = []
    for repo, hook in _config(tree):
        hook_id = hook["id"]
        kinds = hook.get("types") or hook.get("types_or") or HOOK_KINDS.get(hook_id)
        mine = [f for f in files if _matches(f, kinds)]
        if not mine and not hook.get("always_run"):
            results.append({"hook": hook_id, "status": "no files", "detail": ""})
            continue
        offline = repo["repo"] == "local" or _repo_name(repo) in PYPI
        if hook_id in NOT_RUN or not offline:
            why = NOT_RUN.get(hook_id, "no offline equivalent")
            results.append({"hook": hook_id, "status": "not run", "detail": why})
            continue
        proc = subprocess.run(
            _command(repo, hook, mine),
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
        status = "passed" if proc.returncode == 0 else "failed"
        detail = "" if status == "passed" else (proc.stdout + proc.stderr)[-2000:]
        results.append({"hook": hook_id, "status": status, "detail": detail})
    return results


def ok(results: list[dict[str, str]]) -> bool:
    return all(r["status"] != "failed" for r in results)


def summary(results: list[dict[str, str]]) -> str:
    """``passed: a, b; failed: c; not run: d (why)`` for a table cell."""
    parts = []
    for status in ("failed", "passed", "not run"):
        hooks = [r for r in results if r["status"] == status]
        if not hooks:
            continue
        if status == "not run":
            names = ", ".join(f"{r['hook']} ({r['detail']})" for r in hooks)
        else:
            names = ", ".join(r["hook"] for r in hooks)
        parts.append(f"{status}: {names}")
    return "; ".join(parts) or "no files"
