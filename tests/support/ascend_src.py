# SPDX-License-Identifier: Apache-2.0
"""The ``ascend-main`` lane: a vllm-ascend source checkout next to the
release lane's vLLM, without copying or building any of it.

vllm-ascend's main branch (and its v0.27.1rc1) pins the vLLM release of the
release lane, but is not on the package index. Given a checkout of it in
``VAB_VLLM_ASCEND_SRC``, :func:`make_overlay` writes a directory that, put
first on ``PYTHONPATH``, makes every Python process of the release lane's
venv see it as an installed vllm-ascend:

- ``vllm_ascend``: a symbolic link to the checkout's package (its real code,
  read in place);
- ``vllm_ascend-<version>.dist-info``: ``METADATA`` and ``entry_points.txt``,
  the entry points read from the checkout's ``setup.py`` (its
  ``entry_points=`` literal), so vLLM loads its platform and general plugins
  as it would from a wheel; the version is ``0+g<commit>``;
- ``sitecustomize.py``, importing ``vab_npu_stubs`` (a link to
  :mod:`tests.support.npu_stubs`): the stand-ins for the NPU-only modules, in
  every process, spawned ones included, as the ``ascend`` lane's ``.pth``
  does.

``scripts/test --lane ascend-main`` builds it and runs the suite's
vllm-ascend tests with it. Run as ``python -m tests.support.ascend_src
OUT_DIR`` to build it by hand; prints the directory.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ENV = "VAB_VLLM_ASCEND_SRC"
REPO_ROOT = Path(__file__).resolve().parents[2]
PIN_FILE = REPO_ROOT / ".github" / "vllm-ascend-main.commit"
STUBS = Path(__file__).resolve().with_name("npu_stubs.py")


class SourceError(RuntimeError):
    """The checkout cannot serve as the ``ascend-main`` lane (one line)."""


def source_dir(environ: dict[str, str] | None = None) -> Path | None:
    """The checkout ``VAB_VLLM_ASCEND_SRC`` names, or None when unset.

    Raises:
        SourceError: it is set but holds no ``vllm_ascend`` package.
    """
    raw = (os.environ if environ is None else environ).get(ENV)
    if not raw:
        return None
    src = Path(raw).expanduser().resolve()
    if not (src / "vllm_ascend" / "__init__.py").is_file():
        raise SourceError(
            f"{ENV}={raw} holds no vllm_ascend/ package: point it at a checkout "
            f"of vllm-ascend (commit {pinned_commit()[:10]}, .github/{PIN_FILE.name})"
        )
    return src


def pinned_commit() -> str:
    """The vllm-ascend commit this project verified by hand."""
    return PIN_FILE.read_text().strip()


def commit_of(src: Path) -> str | None:
    """The checkout's HEAD commit, or None outside a git work tree."""
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def entry_points(setup_py: Path) -> dict[str, list[str]]:
    """The ``entry_points=`` literal of ``setup(...)`` in ``setup_py``.

    Raises:
        SourceError: no such literal (its setup.py changed shape: the lane
            needs the entry points to load vllm-ascend as vLLM does).
    """
    tree = ast.parse(setup_py.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            for kw in node.keywords:
                if kw.arg == "entry_points":
                    value = ast.literal_eval(kw.value)
                    return {group: list(eps) for group, eps in value.items()}
    raise SourceError(
        f"{setup_py} has no literal entry_points= in setup(): the ascend-main "
        f"lane cannot register vllm-ascend's plugins"
    )


def make_overlay(src: Path, out: Path) -> Path:
    """Write the overlay for ``src`` into ``out`` (replacing what is there);
    returns ``out``."""
    commit = commit_of(src)
    version = f"0+g{commit[:10]}" if commit else "0+unknown"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.is_symlink() or old.is_file():
            old.unlink()
        else:
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
    (out / "vllm_ascend").symlink_to(src / "vllm_ascend", target_is_directory=True)
    (out / "vab_npu_stubs.py").symlink_to(STUBS)
    (out / "sitecustomize.py").write_text("import vab_npu_stubs  # noqa: F401\n")
    dist = out / f"vllm_ascend-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm-ascend\nVersion: {version}\n"
    )
    lines = []
    for group, eps in entry_points(src / "setup.py").items():
        lines.append(f"[{group}]")
        lines.extend(eps)
        lines.append("")
    (dist / "entry_points.txt").write_text("\n".join(lines))
    (dist / "direct_url.json").write_text(f'{{"url": "file://{src}"}}\n')
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.ascend_src OUT_DIR", file=sys.stderr)
        return 2
    try:
        src = source_dir()
        if src is None:
            raise SourceError(
                f"{ENV} is not set: point it at a vllm-ascend checkout (commit "
                f"{pinned_commit()[:10]}, .github/{PIN_FILE.name})"
            )
        theirs = src / ".github" / "vllm-release-tag.commit"
        ours = REPO_ROOT / ".github" / "vllm-release-tag.commit"
        if theirs.is_file() and theirs.read_text().split() != ours.read_text().split():
            raise SourceError(
                f"{ENV} pins vLLM {theirs.read_text().strip()} (its .github/"
                f"vllm-release-tag.commit), the release lane has "
                f"{ours.read_text().strip()}: use a vllm-ascend commit that pins "
                f"the release lane's vLLM"
            )
        commit = commit_of(src)
        if commit != pinned_commit():
            print(
                f"warning: {ENV} is at {commit or 'an unknown commit'}, not the "
                f"pinned {pinned_commit()[:10]} (.github/{PIN_FILE.name})",
                file=sys.stderr,
            )
        print(make_overlay(src, Path(argv[0])))
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
