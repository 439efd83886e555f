# SPDX-License-Identifier: Apache-2.0
"""The distributions users install: built from a copy of this checkout,
checked as the release workflow checks them, and the wheel (not the
checkout) installed into a fresh venv next to the lane's patched vLLM.

The fresh venv sees the lane's vLLM through a ``.pth`` line naming the lane
venv's site-packages: its own site-packages comes first on ``sys.path``, so
``vllm_ascend_balance`` and its entry point come from the installed wheel,
everything else (vLLM, torch) from the lane. Nothing is stood in for.

Packaging does not depend on the vLLM release, so this runs on the release
lane only (skipped with the reason on the others).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT, current_lane

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        current_lane() != "release",
        reason="packaging is the same on every lane: checked on the release lane",
    ),
]

BIN = Path(sys.executable).parent
PACKAGE = "vllm_ascend_balance"
#: Copied to the build tree: everything but caches and build output, so the
#: sdist's contents are decided by MANIFEST.in, not by what lies around.
IGNORED = shutil.ignore_patterns(
    ".git",
    "__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "build",
    "dist",
    "out",
)
#: The sdist holds the package and what PyPI shows, nothing of the repository's
#: test/benchmark/patch machinery (those need a checkout and a lane venv).
SDIST_TOP_LEVEL = {
    "CHANGELOG.md",
    "LICENSE",
    "MANIFEST.in",
    "PKG-INFO",
    "README.md",
    "pyproject.toml",
    "setup.cfg",
    PACKAGE,
    f"{PACKAGE}.egg-info",
}
LOAD_PLUGINS = """
import json, sys
import vllm
from vllm.plugins import load_general_plugins
from vllm.v1.engine import core

load_general_plugins()
import vllm_ascend_balance
from vllm_ascend_balance import activation
print(json.dumps({
    "package": vllm_ascend_balance.__file__,
    "version": vllm_ascend_balance.__version__,
    "vllm": vllm.__file__,
    "registered": core.EngineCoreProc.run_engine_core is activation.run_engine_core,
}))
"""


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,  # hang guard only
        **kwargs,  # type: ignore[call-overload]
    )
    assert result.returncode == 0, (cmd, result.stdout[-3000:], result.stderr[-3000:])
    return result


def _checkout_version() -> str:
    tree = ast.parse((REPO_ROOT / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("no __version__ in the package")


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """sdist and wheel, built like the release workflow (``python -m build``:
    the wheel is built from the sdist, so a wheel here proves the sdist holds
    what a source install needs). ``--no-isolation`` uses the lane venv's
    setuptools instead of downloading the build requirements again."""
    root = tmp_path_factory.mktemp("packaging")
    src = root / "src"
    shutil.copytree(REPO_ROOT, src, ignore=IGNORED)
    out = root / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            "--outdir",
            str(out),
            str(src),
        ]
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel, "root": root}


@pytest.fixture(scope="module")
def fresh_venv(dists: dict[str, Path]) -> Path:
    """A new venv holding only the built wheel, plus a ``.pth`` line that puts
    the lane venv's site-packages (vLLM, torch) after its own."""
    venv = dists["root"] / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    ).stdout.strip()
    lane_site = sysconfig.get_path("purelib")
    (Path(purelib) / "lane_vllm.pth").write_text(lane_site + "\n")
    _run(
        [
            sys.executable, "-m", "pip", "--python", str(python), "install",
            "--no-index", "--no-deps", "--quiet", str(dists["wheel"]),
        ]
    )  # fmt: skip
    return venv


def test_version_has_one_source(dists: dict[str, Path]) -> None:
    version = _checkout_version()
    assert dists["wheel"].name == f"{PACKAGE}-{version}-py3-none-any.whl"
    assert dists["sdist"].name == f"{PACKAGE}-{version}.tar.gz"
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert f"## [{version}]" in (REPO_ROOT / "CHANGELOG.md").read_text()


def test_distributions_pass_twine_and_check_wheel_contents(
    dists: dict[str, Path],
) -> None:
    _run(
        [
            str(BIN / "twine"),
            "check",
            "--strict",
            str(dists["sdist"]),
            str(dists["wheel"]),
        ]
    )
    _run([str(BIN / "check-wheel-contents"), str(dists["wheel"])])


def test_wheel_metadata_does_not_depend_on_vllm(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as whl:
        (meta,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = whl.read(meta).decode()
        (eps,) = [
            n for n in whl.namelist() if n.endswith(".dist-info/entry_points.txt")
        ]
        entry_points = whl.read(eps).decode()
    requires = [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    assert not [r for r in requires if r.split()[0].startswith("vllm")], requires
    npu = [r for r in requires if r.startswith("torch-npu")]
    assert npu and all('extra == "npu"' in r for r in npu), requires
    assert "[vllm.general_plugins]" in entry_points
    assert "ascend_balance = vllm_ascend_balance.activation:register" in entry_points
    assert "vllm-ascend-balance = vllm_ascend_balance.cli:main" in entry_points


def test_sdist_holds_the_package_and_not_the_repository_machinery(
    dists: dict[str, Path],
) -> None:
    with tarfile.open(dists["sdist"]) as tar:
        names = [m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name]
    top = {name.split("/", 1)[0] for name in names}
    assert top == SDIST_TOP_LEVEL, sorted(top ^ SDIST_TOP_LEVEL)
    modules = {
        str(path.relative_to(REPO_ROOT))
        for path in (REPO_ROOT / PACKAGE).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert modules <= set(names), sorted(modules - set(names))
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.endswith((".csv", ".jsonl", ".patch"))]


def test_vllm_plugin_loading_registers_the_installed_wheel(fresh_venv: Path) -> None:
    python = str(fresh_venv / "bin" / "python")
    seen = json.loads(
        _run([python, "-c", LOAD_PLUGINS], cwd=fresh_venv).stdout.splitlines()[-1]
    )
    # The package comes from the wheel in the fresh venv, vLLM from the lane.
    assert seen["package"].startswith(str(fresh_venv)), seen
    assert not seen["package"].startswith(str(REPO_ROOT)), seen
    assert seen["vllm"].startswith(sysconfig.get_path("purelib")), seen
    assert seen["version"] == _checkout_version()
    assert seen["registered"] is True, seen


def test_plugin_check_fails_when_vllm_skips_the_plugin(fresh_venv: Path) -> None:
    """Negative control: with ``VLLM_PLUGINS`` naming another plugin, vLLM's
    loader skips ours, and the same check reports it unregistered."""
    python = str(fresh_venv / "bin" / "python")
    env = {**_clean_env(), "VLLM_PLUGINS": "some_other_plugin"}
    seen = json.loads(
        _run([python, "-c", LOAD_PLUGINS], cwd=fresh_venv, env=env).stdout.splitlines()[
            -1
        ]
    )
    assert seen["registered"] is False, seen


@pytest.mark.parametrize("how", ["console script", "python -m"])
def test_doctor_runs_from_the_installed_wheel(fresh_venv: Path, how: str) -> None:
    bin_dir = fresh_venv / "bin"
    cmd = (
        [str(bin_dir / "vllm-ascend-balance"), "doctor"]
        if how == "console script"
        else [str(bin_dir / "python"), "-m", PACKAGE, "doctor"]
    )
    out = _run(cmd, cwd=fresh_venv, env=_clean_env()).stdout
    lines = out.splitlines()
    assert (
        "seam present:          True (Scheduler._should_stop_admitting_waiting)"
        in lines
    )
    assert "plugin registered:     True (vllm.general_plugins)" in lines


def _clean_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if k not in {"VLLM_PLUGINS", "PYTHONPATH"}
    }
