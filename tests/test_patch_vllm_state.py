# SPDX-License-Identifier: Apache-2.0
"""``patch-vllm`` on the states an operator's install can be in besides
"released" and "patched by us": half a patch applied by hand, a series
forced onto a version without one, a read-only install, two runs at once,
and patched files edited since.

Each test works on a private copy of the lane's vLLM with the seam taken
out (``tests/support/vllm_copy.py``); the oracles are the command's
documented contract (its ``--help``, docs/install.md), not its code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import vllm_copy
from tests.support.lanes import REPO_ROOT
from vllm_ascend_balance.tools.patch import series

# This package's logic on files; the lane's vLLM only serves as the files.
pytestmark = pytest.mark.lane_scope("release")

SCHEDULER = Path(series.SCHEDULER_REL)


def _cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")])
    )
    command = [sys.executable, "-m", "vllm_ascend_balance", "patch-vllm", *args]
    return subprocess.run(
        [*prefix, *command], capture_output=True, text=True, env=env, cwd=REPO_ROOT
    )


@pytest.fixture(scope="module")
def seamless(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(a copy of the lane's vLLM without the seam, its version); tests copy
    it again before writing."""
    lane_site, version = series.installed_vllm()
    site = vllm_copy.unpatched_copy(
        lane_site, tmp_path_factory.mktemp("seamless"), f"v{version}"
    )
    return site, version


@pytest.fixture
def site(seamless: tuple[Path, str], tmp_path: Path) -> Path:
    vllm_copy.copy_vllm(seamless[0], tmp_path / "site", dist_info=True)
    return tmp_path / "site"


def _patches(version: str) -> list[Path]:
    return series.read_series(series.series_root() / f"v{version}")


def _first_hunk_only(patch: Path, out: Path) -> Path:
    """The scheduler.py part of ``patch`` cut to its first hunk: the method
    added, the call in ``schedule()`` (a later hunk) not."""
    text = patch.read_text()
    start = text.index(f"diff --git a/{SCHEDULER} b/{SCHEDULER}")
    section = text[start:]
    first = section.index("\n@@")
    second = section.index("\n@@", first + 1)
    out.write_text(section[:second] + "\n")
    return out


def test_a_half_applied_seam_is_refused_by_check_apply_and_verification(
    site: Path, seamless: tuple[Path, str], tmp_path: Path
) -> None:
    """Contract: the seam is the method and its call in schedule(); a file
    with the method alone is refused in one line saying it is a partial
    patch and to restore the file, by --check, by a plain run (nothing
    written) and by the fresh-import verification."""
    (patch,) = _patches(seamless[1])
    half = _first_hunk_only(patch, tmp_path / "half.patch")
    applied = series.git_apply(site, [half])
    assert applied.returncode == 0, applied.stderr
    before = (site / SCHEDULER).read_bytes()
    assert f"def {series.SEAM}(".encode() in before
    for args in (["--check"], []):
        result = _cli(*args, "--site", str(site))
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and "never calls it" in line, line
        assert "partially applied" in line and "restore the original" in line
        assert "then run patch-vllm" in line
        assert "nothing to do" not in result.stdout
    assert (site / SCHEDULER).read_bytes() == before
    assert not (site / series.STATE_DIR_NAME).exists()
    from vllm_ascend_balance.tools.patch.target import verify_seam

    problem = verify_seam(site, explicit_site=True)
    assert problem is not None and "never calls it" in problem, problem


def _version_without_series(site: Path, version: str) -> str:
    """Make ``site``'s vLLM metadata say X.Y.99 (no series carried for it),
    keeping the local label vLLM picks its platform from."""
    (info,) = [p for p in site.glob("*.dist-info") if p.name.startswith("vllm")]
    metadata = (info / "METADATA").read_text()
    unknown = f"{'.'.join(version.split('.')[:2])}.99"
    (info / "METADATA").write_text(
        metadata.replace(f"Version: {version}", f"Version: {unknown}", 1)
    )
    assert series.installed_vllm(site)[1] == unknown
    return unknown


def test_a_series_applied_with_series_is_honoured_by_check_and_a_rerun(
    site: Path, seamless: tuple[Path, str]
) -> None:
    """Contract: exit 0 when the seam is present (--check: now); running it
    again changes nothing. After --series vX.Y.Z on a version with no series
    of its own, neither --check nor a plain run asks for --series again."""
    version = seamless[1]
    _version_without_series(site, version)
    forced = _cli("--series", f"v{version}", "--site", str(site))
    assert forced.returncode == 0, (forced.stdout, forced.stderr)
    patched = (site / SCHEDULER).read_bytes()
    check = _cli("--check", "--site", str(site))
    assert check.returncode == 0, (check.stdout, check.stderr)
    assert f"present: v{version} applied in place" in check.stdout
    again = _cli("--site", str(site))
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert f"series v{version} already applied" in again.stdout
    assert (site / SCHEDULER).read_bytes() == patched


def test_series_without_the_leading_v_is_the_tag(
    site: Path, seamless: tuple[Path, str]
) -> None:
    """``--series 0.27.1`` names the series ``v0.27.1`` (--check: writes
    nothing, reports it applies)."""
    version = seamless[1]
    result = _cli("--check", "--series", version, "--site", str(site))
    assert f"absent; v{version} applies cleanly" in result.stdout, (
        result.stdout,
        result.stderr,
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--series", "banana"], ["error: --series banana: no such series"]),
        (["--series", "v0.0.1"], ["error: --series v0.0.1: no such series"]),
        (["--discard-edits"], ["error: --discard-edits goes with --revert"]),
        (["--revert", "--series", "TAG"], ["goes without --revert"]),
        (["--site", "EMPTY"], ["error: --site ", ": no vllm/ package there"]),
        (["--check", "--revert"], ["not allowed with argument --check"]),
        (["--no-such-option"], ["unrecognized arguments: --no-such-option"]),
    ],
)
def test_bad_arguments_exit_2_as_the_help_says(
    site: Path,
    seamless: tuple[Path, str],
    tmp_path: Path,
    argv: list[str],
    words: list[str],
) -> None:
    """Contract (--help's exit status: "2 bad arguments"): each is refused
    with exit 2, its error the last line (ours: the only one), nothing
    written. An unknown --series exited 1, after vLLM was found and locked.
    Control: the same flags with good values are not refused."""
    assert "2 bad arguments" in _cli("--help").stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    # TAG: a series this package carries (only --revert makes it bad).
    names = {"EMPTY": str(empty), "TAG": seamless[1]}
    argv = [names.get(arg, arg) for arg in argv]
    before = (site / SCHEDULER).read_bytes()
    result = _cli(*argv, "--site", str(site)) if "--site" not in argv else _cli(*argv)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    if lines[-1].startswith("error: "):
        assert len(lines) == 1, lines
    assert all(word in lines[-1] for word in words), lines[-1]
    assert (site / SCHEDULER).read_bytes() == before
    assert not (site / series.STATE_DIR_NAME).exists()
    good = _cli("--check", "--series", seamless[1], "--site", str(site))
    assert good.returncode == 1 and "absent" in good.stdout, good.stdout


def _read_only(directory: Path) -> tuple[str, ...]:
    """A command prefix running in a private mount namespace where
    ``directory`` is a read-only bind mount: a real EROFS, which root's
    permission override does not lift (chmod would not stop root)."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode
    ):
        pytest.skip("no unprivileged mount namespace (unshare -rm) here")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    return ("unshare", "-rm", "sh", "-c", script, str(directory))


@pytest.mark.parametrize("read_only", ["site", "sched"])
def test_a_read_only_install_is_one_error_line_and_nothing_written(
    site: Path, read_only: str
) -> None:
    """Contract: one ``error:`` line naming what could not be written and
    the fix (the venv's owner, a writable venv); nothing half done."""
    directory = site if read_only == "site" else (site / SCHEDULER).parent
    before = (site / SCHEDULER).read_bytes()
    result = _cli("--site", str(site), prefix=_read_only(directory))
    assert result.returncode == 1, (result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: cannot write ") and str(directory) in line, line
    assert "read-only" in line and "owns that vLLM" in line and "writable" in line
    assert (site / SCHEDULER).read_bytes() == before
    assert not (site / series.STATE_DIR_NAME).exists()


def _blocked_on_a_lock(pid: int) -> bool:
    """``pid`` waits for a lock (a ``->`` line of ``/proc/locks``)."""
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and f" {pid} " in line for line in lines)


def test_concurrent_runs_are_serialized(site: Path, tmp_path: Path) -> None:
    """Two real runs with a forced interleaving: A stops right before its
    ``git apply`` (pristine copies saved, nothing applied yet) until B has
    either finished or is waiting for A's lock. Contract: runs see each
    other's finished state, so both succeed and the install ends patched
    with its state (``--revert`` restores it). Without the lock B patches
    under A, A's apply fails and reverts B's work."""
    pristine = (site / SCHEDULER).read_bytes()
    paused, go = tmp_path / "paused", tmp_path / "go"
    wrapper = (
        "import os, runpy, sys, time\n"
        "from vllm_ascend_balance.tools.patch import series\n"
        "real = series.git_apply\n"
        "def paused(cwd, patches, *flags):\n"
        "    if '--check' not in flags and '-R' not in flags:\n"
        f"        open({str(paused)!r}, 'w').close()\n"
        f"        while not os.path.exists({str(go)!r}):\n"
        "            time.sleep(0.05)\n"
        "    return real(cwd, patches, *flags)\n"
        "series.git_apply = paused\n"
        f"sys.argv = ['vllm-ascend-balance', 'patch-vllm', '--site', {str(site)!r}]\n"
        "runpy.run_module('vllm_ascend_balance', run_name='__main__')\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")])
    )
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    a = subprocess.Popen([sys.executable, "-c", wrapper], env=env, **pipes)
    command = ["-m", "vllm_ascend_balance", "patch-vllm", "--site", str(site)]
    b = None
    try:
        deadline = time.monotonic() + 300  # a hang guard, not a speed check
        while not paused.exists():
            assert a.poll() is None, a.communicate()
            assert time.monotonic() < deadline, "A never reached its git apply"
            time.sleep(0.05)
        b = subprocess.Popen([sys.executable, *command], env=env, **pipes)
        while b.poll() is None and not _blocked_on_a_lock(b.pid):
            assert time.monotonic() < deadline, "B neither ended nor waited"
            time.sleep(0.05)
        go.touch()
        out_a, err_a = a.communicate(timeout=300)
        out_b, err_b = b.communicate(timeout=300)
    finally:
        go.touch()
        for process in (a, b):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert a.returncode == 0, (out_a, err_a)
    assert b.returncode == 0, (out_b, err_b)
    assert "already applied" in out_b, out_b
    assert series.has_seam_source(site)
    assert series.applied_digest(site) is not None
    reverted = _cli("--revert", "--site", str(site))
    assert reverted.returncode == 0, reverted.stderr
    assert (site / SCHEDULER).read_bytes() == pristine


def test_edits_after_patching_are_reported_and_not_silently_reverted(
    site: Path, seamless: tuple[Path, str]
) -> None:
    """Contract (this fix's, docs/install.md): --check reports a patched
    file changed since patching; --revert refuses in one line naming
    --discard-edits and keeps the file; with it, the release's bytes come
    back."""
    version = seamless[1]
    pristine = (site / SCHEDULER).read_bytes()
    series.apply_series(site, f"v{version}", _patches(version), version)
    with (site / SCHEDULER).open("a") as scheduler:
        scheduler.write("# an operator's edit\n")
    edited = (site / SCHEDULER).read_bytes()

    check = _cli("--check", "--site", str(site))
    assert "changed since patch-vllm patched it" in check.stdout, check.stdout
    assert str(SCHEDULER) in check.stdout

    refused = _cli("--revert", "--site", str(site))
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: ") and "--discard-edits" in line, line
    assert (site / SCHEDULER).read_bytes() == edited

    discarded = _cli("--revert", "--discard-edits", "--site", str(site))
    assert discarded.returncode == 0, discarded.stderr
    assert (site / SCHEDULER).read_bytes() == pristine
    assert not (site / series.STATE_DIR_NAME).exists()


def _later_hunks_only(patch: Path, out: Path) -> Path:
    """The scheduler.py part of ``patch`` without its first hunk: the call
    in ``schedule()`` without the method it calls."""
    text = patch.read_text()
    start = text.index(f"diff --git a/{SCHEDULER} b/{SCHEDULER}")
    section = text[start:]
    end = section.find("\ndiff --git", 1)
    section = section if end < 0 else section[: end + 1]
    first = section.index("\n@@")
    second = section.index("\n@@", first + 1)
    out.write_text(section[: first + 1] + section[second + 1 :])
    return out


@pytest.mark.parametrize("half", ["method", "call"])
def test_each_half_is_named_by_patch_vllm_and_doctor(
    half: str, site: Path, seamless: tuple[Path, str], tmp_path: Path
) -> None:
    """Contract: the refusal says which half the file holds, and doctor's
    install kind is ``partly patched`` (not ``unpatched``, whose advice,
    run patch-vllm, patch-vllm then refuses). Negative control (by hand):
    the code before said "defines ... never calls it" for both halves, and
    doctor called the call-only file unpatched."""
    from vllm_ascend_balance.tools.doctor import vllm_install

    (patch,) = _patches(seamless[1])
    cut = _first_hunk_only if half == "method" else _later_hunks_only
    applied = series.git_apply(site, [cut(patch, tmp_path / "half.patch")])
    assert applied.returncode == 0, applied.stderr
    result = _cli("--check", "--site", str(site))
    assert result.returncode == 1, (result.stdout, result.stderr)
    expected = {
        "method": f"defines {series.SEAM}() but its schedule() never calls it",
        "call": f"calls {series.SEAM}() in schedule() but Scheduler does not define",
    }[half]
    assert expected in result.stderr, result.stderr
    install = vllm_install.inspect_install(site)
    assert install is not None and install.kind == vllm_install.PARTLY_PATCHED
    assert expected in install.detail


def test_a_series_that_does_not_fit_keeps_the_one_applied(
    site: Path, seamless: tuple[Path, str]
) -> None:
    """Contract (apply_series: "nothing left written"): replacing the applied
    series with one that does not fit leaves the applied one as it was, and
    says so. Negative control (by hand): the code before reverted the
    applied series first and left vLLM without the seam."""
    version = seamless[1]
    assert _cli("--site", str(site)).returncode == 0
    patched = (site / SCHEDULER).read_bytes()
    state = {
        p.relative_to(site): p.read_bytes()
        for p in (site / series.STATE_DIR_NAME).rglob("*")
        if p.is_file()
    }
    others = sorted(
        p.name
        for p in series.series_root().glob("v*")
        if (p / "series").is_file() and p.name != f"v{version}"
    )
    misfit = next(
        tag
        for tag in others
        # Does not fit the release's own files: the replacement must fail.
        if series.fits(seamless[0], series.read_series(series.series_root() / tag))
    )
    result = _cli("--series", misfit, "--site", str(site))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "the series applied before is kept" in result.stderr, result.stderr
    assert (site / SCHEDULER).read_bytes() == patched
    assert {
        p.relative_to(site): p.read_bytes()
        for p in (site / series.STATE_DIR_NAME).rglob("*")
        if p.is_file()
    } == state
    check = _cli("--check", "--site", str(site))
    assert check.returncode == 0 and f"present: v{version}" in check.stdout, check
