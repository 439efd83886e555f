#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Apply, revert and verify the upstream patch series of one vLLM lane.

A lane is one pin file in ``.github/``: ``release`` reads
``vllm-release-tag.commit``, ``main`` reads ``vllm-main-verified.commit``,
``fork`` (a vLLM branch built from the release sdist with the series
committed on top) reads ``vllm-fork-base.commit`` and ``ascend`` (the same
kind of branch, of the vLLM release vllm-ascend pins, with vllm-ascend's
Python code next to it) reads ``vllm-ascend-base.commit``.
Each holds a vLLM release tag (``vX.Y.Z``); the series for that tag lives in
``upstream_patch/<tag>/`` and its order in ``upstream_patch/<tag>/series``.

Commands (stdlib only, so it runs in any venv; needs ``git`` on PATH). The
apply/revert machinery is the package's :mod:`vllm_ascend_balance.tools.series`
(imported from this checkout), shared with ``vllm-ascend-balance patch-vllm``,
which picks the series by the installed vLLM's version instead of a lane:

``apply --lane L [--site DIR]``
    Patch the *installed* vLLM (or the ``vllm/`` under ``DIR``) in place
    (only the ``vllm/`` part of each patch; upstream's tests are not
    installed). Idempotent: a second call is
    a no-op, and a changed series replaces the one applied before. Refuses
    when the installed vLLM is not the lane's release.
``revert --lane L [--site DIR]``
    Restore the installed files exactly as they were before ``apply``.
``status --lane L [--site DIR]``
    Print whether the series is applied to the installed vLLM.
``check --lane L [--tree DIR]``
    ``git apply --check`` of the whole series (tests included) against the
    release's own source tree: ``DIR``, or the release sdist (``sdist``).
``resync [--tree DIR] [--tag vX.Y.Z] [--out DIR] [--lane L]``
    Rebuild the series against a vLLM source tree (default: the lane's
    release sdist) into ``upstream_patch/<tag>/`` (or ``DIR``): the hook is
    placed by AST after the WAITING loop's own cap check, the upstream test
    is appended to the tree's test file (no offset-patching of old hunks),
    and the patch is ``git format-patch`` output of a scratch commit, with
    no ``Signed-off-by`` (the submitter adds their own).
``sdist --lane L [--project vllm-ascend]``
    Download the release sdist once into the cache (``$VAB_CACHE``, default
    ``~/.cache/vllm-ascend-balance``), verify its sha256 against the package
    index, unpack it and print the tree's path. ``--project vllm-ascend``
    fetches the vllm-ascend sdist of ``.github/vllm-ascend.version`` instead.

``--site DIR`` names a site-packages-like directory holding ``vllm/`` and
the vLLM ``*.dist-info`` to use instead of the ones this Python imports (the
tests patch scratch copies this way, never a shared venv).

Exit status: 0 on success, 1 with a one-line ``error:`` on stderr otherwise.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import urllib.request
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
# The apply/revert machinery is the package's (vllm-ascend-balance patch-vllm
# uses the same code); this checkout's copy of it, whatever is installed.
sys.path.insert(0, str(ROOT))
from vllm_ascend_balance.tools.series import (  # noqa: E402
    STATE_DIR_NAME,
    SeriesError,
    applied_digest,
    apply_series,
    git_apply,
    installed_vllm,
    read_series,
    revert_series,
    series_digest,
    touched_files,
)

__all__ = ["STATE_DIR_NAME", "SeriesError", "git_apply", "touched_files"]
PATCH_DIR = ROOT / "upstream_patch"
PIN_FILES = {
    "release": ROOT / ".github" / "vllm-release-tag.commit",
    "main": ROOT / ".github" / "vllm-main-verified.commit",
    "fork": ROOT / ".github" / "vllm-fork-base.commit",
    "ascend": ROOT / ".github" / "vllm-ascend-base.commit",
}
# The vllm-ascend release the ascend lane installs (a version, not a tag).
ASCEND_VERSION_FILE = ROOT / ".github" / "vllm-ascend.version"


def cache_dir() -> Path:
    base = os.environ.get("VAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "vllm-ascend-balance",
    )
    return Path(base)


def pin_file(lane: str, root: Path | None = None) -> Path:
    """The pin file of ``lane`` in the repository at ``root`` (default: this
    one). ``root`` lets the drift guard be tested on a scratch copy of the
    repository layout whose pin was moved."""
    try:
        relative = PIN_FILES[lane].relative_to(ROOT)
    except KeyError:
        raise SeriesError(
            f"unknown lane {lane!r}; use one of {sorted(PIN_FILES)}"
        ) from None
    return (root or ROOT) / relative


def lane_tag(lane: str, root: Path | None = None) -> str:
    """The release tag pinned for ``lane`` (e.g. the content of the pin file)."""
    pin = pin_file(lane, root)
    tag = "".join(pin.read_text().split())
    if not tag.startswith("v"):
        where = pin.relative_to(root or ROOT)
        raise SeriesError(f"{where} must hold a tag like vX.Y.Z")
    return tag


def series_patches(
    tag: str, root: Path | None = None, lane: str | None = None
) -> list[Path]:
    """The patch files of ``upstream_patch/<tag>/series``, in order.

    ``lane`` only sharpens the error: a pin moved to a tag without a series
    names the lane and its pin file, so the reader knows what to re-sync.
    """
    series = (root or ROOT) / "upstream_patch" / tag / "series"
    if not series.is_file():
        pinned = ""
        if lane:
            pin = pin_file(lane, root).relative_to(root or ROOT)
            pinned = f"the {lane} lane pins {tag} ({pin}) but "
        raise SeriesError(
            f"{pinned}there is no patch series for {tag} (missing "
            f"upstream_patch/{tag}/series): re-sync the series into "
            f"upstream_patch/{tag}/ for this pin, see CONTRIBUTING.md"
        )
    return read_series(series.parent)


def apply(
    lane: str, quiet: bool = False, site: Path | None = None, root: Path | None = None
) -> None:
    tag = lane_tag(lane, root)
    patches = series_patches(tag, root, lane)
    site, version = installed_vllm(site)
    if f"v{version}" != tag:
        raise SeriesError(
            f"installed vLLM is {version} but the {lane} lane pins {tag}: "
            f"this lane's venv is built by scripts/lane.sh {lane}; to patch this "
            f"vLLM by its own version, run `vllm-ascend-balance patch-vllm`"
        )
    message = apply_series(site, tag, patches, version)
    if not quiet:
        print(message)


def revert(
    lane: str, quiet: bool = False, site: Path | None = None, root: Path | None = None
) -> None:
    lane_tag(lane, root)
    site, _ = installed_vllm(site)
    reverted = revert_series(site)
    if not quiet:
        print(
            f"reverted the series in {site / 'vllm'}"
            if reverted
            else "series not applied; nothing to revert"
        )


def status(lane: str, site: Path | None = None, root: Path | None = None) -> bool:
    tag = lane_tag(lane, root)
    site, version = installed_vllm(site)
    if f"v{version}" != tag:
        print(
            f"lane {lane}: pin {tag}, but the installed vLLM is {version}: "
            f"this lane's series does not apply to it"
        )
        return False
    applied = applied_digest(site) == series_digest(series_patches(tag, root, lane))
    print(
        f"lane {lane}: pin {tag}, installed vLLM {version}, series applied: {applied}"
    )
    return applied


def _index_url() -> str:
    """The simple index pip is configured with (PIP_INDEX_URL, pip config, default)."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
        )
        url = result.stdout.strip() if result.returncode == 0 else ""
    if not url:
        from pip._internal.models.index import PyPI

        url = PyPI.simple_url
    return url.rstrip("/")


def ascend_version(root: Path | None = None) -> str:
    """The vllm-ascend release pinned in ``.github/vllm-ascend.version``."""
    pin = (root or ROOT) / ASCEND_VERSION_FILE.relative_to(ROOT)
    version = "".join(pin.read_text().split())
    if not version or version.startswith("v"):
        raise SeriesError(
            f"{pin.relative_to(root or ROOT)} must hold a version like X.Y.Z[.postN]"
        )
    return version


def fetch_sdist(project: str, version: str) -> Path:
    """Path of the unpacked sdist ``<project>==<version>`` from the index pip
    is configured with (the JSON simple API; downloaded once, sha256-checked
    against the index, cached under ``$VAB_CACHE/sdist``).

    Not ``pip download``: building an sdist's metadata runs its setup.py,
    which for vLLM and vllm-ascend wants a compiler toolchain and fails.
    """
    stem = f"{project.replace('-', '_')}-{version}"
    cache = cache_dir() / "sdist"
    # vLLM's sdist is named vllm-X.Y.Z; newer sdists use the normalized name.
    candidates = [f"{stem}.tar.gz", f"{project}-{version}.tar.gz"]
    for name in candidates:
        tree = cache / name[: -len(".tar.gz")]
        if (tree / ".complete").is_file():
            return tree
    cache.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(
        f"{_index_url()}/{project}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            files = json.load(response)["files"]
        entry = next(f for f in files if f["filename"] in candidates)
    except StopIteration:
        raise SeriesError(
            f"the package index has no sdist of {project} {version} "
            f"({candidates[0]}): check the pin or pip's index-url"
        ) from None
    except OSError as exc:
        raise SeriesError(
            f"cannot reach the package index for {project} {version}: {exc}"
        ) from exc
    filename = entry["filename"]
    tree = cache / filename[: -len(".tar.gz")]
    archive = cache / filename
    with (
        tempfile.NamedTemporaryFile(dir=cache, delete=False) as tmp,
        urllib.request.urlopen(entry["url"], timeout=600) as response,
    ):
        shutil.copyfileobj(response, tmp)
    expected = entry.get("hashes", {}).get("sha256")
    actual = hashlib.sha256(Path(tmp.name).read_bytes()).hexdigest()
    if expected and actual != expected:
        os.unlink(tmp.name)
        raise SeriesError(f"{filename}: sha256 {actual} does not match the index")
    os.replace(tmp.name, archive)
    shutil.rmtree(tree, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    archive.unlink()
    if not tree.is_dir():
        raise SeriesError(f"{filename} does not unpack to {tree.name}/")
    (tree / ".complete").touch()
    return tree


def sdist(lane: str, root: Path | None = None) -> Path:
    """Path of the unpacked release sdist of the lane (downloaded once, cached)."""
    return fetch_sdist("vllm", lane_tag(lane, root)[1:])


def ascend_sdist(root: Path | None = None) -> Path:
    """Path of the unpacked vllm-ascend sdist the ascend lane installs."""
    return fetch_sdist("vllm-ascend", ascend_version(root))


# Series shipped though no lane pins their tag: tag -> why it is kept.
KEPT_TAGS = {
    "v0.29.0": "the vLLM vllm-ascend main pins (vllm-ascend #16393)",
    "v0.33.0": "the fork lane's previous pin, the newest release before 0.34",
}


def check_tag(tag: str, tree: Path, root: Path | None = None) -> None:
    """``git apply --check`` of ``upstream_patch/<tag>/`` on ``tree``."""
    patches = series_patches(tag, root)
    result = git_apply(tree, patches, "--check")
    if result.returncode != 0:
        first = result.stderr.strip().splitlines()[0] if result.stderr else ""
        raise SeriesError(
            f"upstream_patch/{tag}/series does not apply to {tree} ({first}): "
            f"re-sync it with `series.py resync --tag {tag}`, see CONTRIBUTING.md"
        )
    print(f"upstream_patch/{tag}: {len(patches)} patch(es) apply cleanly to {tree}")


def check(lane: str, tree: Path | None = None, root: Path | None = None) -> None:
    tag = lane_tag(lane, root)
    patches = series_patches(tag, root, lane)
    tree = tree or sdist(lane, root)
    result = git_apply(tree, patches, "--check")
    if result.returncode != 0:
        first = result.stderr.strip().splitlines()[0] if result.stderr else ""
        raise SeriesError(
            f"upstream_patch/{tag}/series no longer applies to the {tag} source "
            f"tree ({first}): re-sync the {lane} lane's series, see CONTRIBUTING.md"
        )
    print(f"upstream_patch/{tag}: {len(patches)} patch(es) apply cleanly to {tree}")


# --- resync: rebuild a lane's series against any vLLM source tree ----------

SCHEDULER_REL = "vllm/v1/core/sched/scheduler.py"
TEST_REL = "tests/v1/core/test_scheduler.py"
UTILS_REL = "tests/v1/core/utils.py"
SEAM = "_should_stop_admitting_waiting"
FLAG = "stop_admitting_waiting"
PATCH_NAME = "0001-scheduler-add-should-stop-admitting-waiting-hook.patch"
# The commit the series is: author and date are placeholders, so a re-sync of
# the same tree is byte-identical. No Signed-off-by: a DCO sign-off is the
# submitter's own statement, added at export time (CONTRIBUTING.md).
AUTHOR = (
    "vllm-ascend-balance maintainers <vllm-ascend-balance@users.noreply.github.com>"
)
DATE = "Mon, 30 Nov 2026 12:00:00 +0000"
SUBJECT = "[Core][Scheduler] Add a _should_stop_admitting_waiting() admission hook"
MESSAGE = """\
Scheduler.schedule() gives a subclass no way to keep new requests waiting
for a step. vllm-ascend's balance scheduling (a data-parallel admission
gate: once one DP rank's running set is full, no rank admits a new waiting
request in that step) carries a full copy of schedule() to add that one
condition, and re-syncs the copy by hand on every vLLM release.

This adds Scheduler._should_stop_admitting_waiting(), asked at most once
per schedule() call, right before the waiting loop (not on steps that
{skipped}). Its answer is honoured in the loop right after the loop's own
admission-cap check, which stays first, inline and unchanged: an override
can end admission earlier but never admit past {cap_text}.
The default returns False: every SchedulerOutput is unchanged.
{scope}{coupling}
Tests in tests/v1/core/test_scheduler.py, with gating subclasses passed to
create_scheduler(), asserting on SchedulerOutputs only: {tests}.
"""
PAUSE_DOC = """Whether this step admits no request without KV blocks.

Asked once per ``schedule()`` call, before the waiting loop; not asked on
steps that {skipped}. While True, ``self.waiting`` and
``self.async_kv_waiting`` are held (new or preempted requests, and new
async KV loads); ``self.kv_holding_waiting`` still drains. The cap
(``{cap}``) is checked apart, so an override cannot admit past it.
Overrides must call ``super().{seam}()`` and be cheap and side-effect
free (no collectives: ranks that skip the call would fall out of step).

Returns:
    True to hold the step; by default, whether the scheduler is paused
    (``PauseState.PAUSED_NEW``)."""
PAUSE_MESSAGE = """\
Scheduler.schedule() gives a subclass no way to keep requests waiting
for a step. vllm-ascend's balance scheduling (a data-parallel admission
gate: once one DP rank's running set is full, no rank admits a waiting
request in that step) carries a full copy of schedule() to add that one
condition, and re-syncs the copy by hand on every vLLM release.

The waiting loop already has that condition: PauseState.PAUSED_NEW. This
moves its two `self._pause_state == PauseState.UNPAUSED` tests into
Scheduler._should_stop_admitting_waiting(), asked once per schedule()
call right before the loop (not on steps that {skipped}); the default is
the test it replaces, so PAUSED_NEW is its in-tree user and every
SchedulerOutput is unchanged. The admission cap, {cap_text}, is computed
apart and stays as it is: an override can hold a step, never admit past
the cap. Overrides call super().

Scope, as under PAUSED_NEW: a held step admits nothing from self.waiting
(requests without KV blocks, new or preempted) nor from
self.async_kv_waiting (no new async KV load starts, not even past the
running cap); self.kv_holding_waiting still drains: those requests hold
KV blocks already, and holding them would keep the blocks allocated on
the held rank while admitting no new work.
{coupling}
Tests in tests/v1/core/test_scheduler.py, with gating subclasses passed to
create_scheduler(), asserting on SchedulerOutputs only: {tests}.
"""
SCOPE_KV = """
Scope: only self.waiting is held. Requests in self.kv_holding_waiting (KV
already loaded, e.g. by an async KV load) are still admitted, as under
PauseState.PAUSED_NEW: holding them admits no new work but keeps their
blocks allocated, which adds KV pressure on the held rank.
"""
SCOPE_PLAIN = """
Scope: self.waiting and self.skipped_waiting, the waiting queues this
release has.
"""
COUPLING = """
Coupling with the prefill throttle: a held step leaves requests waiting,
so it is recorded as prefill_capacity_bound and the next throttled step
({throttles}) admits: a held rank catches up. Kept on
purpose; a comment says so where the flag is set.
"""
# The docstring an override author reads: which queues, when it is asked,
# which cap wins, what an override must not do (paragraphs, wrapped to the
# method's indentation by _docstring()).
DOC_PARAGRAPHS = [
    "Return True to admit no request from {queues} for the rest of this "
    "``schedule()`` call.{exempt}",
    "Asked at most once per call, right before the waiting loop; not asked on "
    "steps that {skipped}. The admission cap ({cap_doc}) is checked first, so "
    "an override can stop admission early but never admit past it. Must be "
    "cheap and side-effect free (no collectives: ranks that skip the call "
    "would fall out of step).",
    "Experimental and private: may change or be removed without notice.",
]
EXEMPT_KV = (
    " Requests in ``self.kv_holding_waiting`` (already holding KV blocks) are "
    "still admitted."
)
COUPLING_COMMENT = (
    "A step that {seam}() held counts as capacity-bound too (its requests are "
    "left waiting): the next throttled step admits."
)
TEST_BODY = '''

class _AdmissionGate:
    """Admits no request from ``self.waiting`` while ``closed`` is set."""

    closed = False

    def {seam}(self) -> bool:
        return {gate_return}


class GatedScheduler(_AdmissionGate, Scheduler):
    pass


class GatedAsyncScheduler(_AdmissionGate, AsyncScheduler):
    pass


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_should_stop_admitting_waiting_override({params}):
    """While _should_stop_admitting_waiting() returns True, running requests
    are scheduled and no waiting request is admitted; once it returns False,
    admission resumes up to max_num_seqs, never past it.{doc_coupling}"""
    gated = GatedAsyncScheduler if async_scheduling else GatedScheduler
{make}
    requests = create_requests(num_requests=5)
    running = {{req.request_id for req in requests[:2]}}

    for request in requests[:2]:
        scheduler.add_request(request)
    output = scheduler.schedule()
    assert {{req.req_id for req in output.scheduled_new_reqs}} == running
    scheduler.update_from_output(output, make_output(scheduler))

    # Closed: the running requests are scheduled, no waiting one is admitted.
    scheduler.closed = True
    for request in requests[2:]:
        scheduler.add_request(request)
    output = scheduler.schedule()
    assert output.scheduled_new_reqs == []
    assert set(output.num_scheduled_tokens) == running
    scheduler.update_from_output(output, make_output(scheduler))

{open_comment}    scheduler.closed = False
    output = scheduler.schedule({open_args})
    admitted = [req.req_id for req in output.scheduled_new_reqs]
    assert admitted == [requests[2].request_id]
    assert set(output.num_scheduled_tokens) == running | {{requests[2].request_id}}
'''
OPEN_PLAIN = "    # Open: admission resumes, up to max_num_seqs running requests.\n"
OPEN_THROTTLED = (
    "    # Open, on a throttled step: the held step was recorded as\n"
    "    # prefill_capacity_bound, so the throttle does not defer; admission\n"
    "    # resumes, up to max_num_seqs running requests.\n"
)
DOC_COUPLING = (
    "\n    The held step counts as capacity-bound: the next throttled step admits."
)
TEST_KV_BODY = '''

def test_should_stop_admitting_waiting_admits_kv_holding_requests({kv_params}):
    """While _should_stop_admitting_waiting() returns True, a request whose KV
    arrived by an async load (kv_holding_waiting) is still admitted, as under
    PauseState.PAUSED_NEW; a new request is not."""
    block_size = 16
{kv_make}
    loading, new = create_requests(
        num_requests=2,
        num_tokens=3 * block_size,
        block_size=block_size,
        req_ids=["loading", "new"],
    )
    scheduler.add_request(loading)
    output = scheduler.schedule()
    assert loading.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    scheduler.update_from_output(output, _runner_output([], {{"loading"}}))

    scheduler.closed = True
    scheduler.add_request(new)
    output = scheduler.schedule()
    assert set(output.num_scheduled_tokens) == {{"loading"}}
    assert new.status == RequestStatus.WAITING
'''
MAKE_WITH_CLS = """\
    scheduler = create_scheduler(
        max_num_seqs=3, async_scheduling=async_scheduling, scheduler_cls=gated
    )"""
# Releases whose create_scheduler() takes no scheduler_cls pick the class
# from the helper module's globals: the test swaps it there for its own run
# (monkeypatch), leaving the shared helper's code untouched.
MAKE_SWAP = """\
    name = "AsyncScheduler" if async_scheduling else "Scheduler"
    monkeypatch.setitem(create_scheduler.__globals__, name, gated)
    scheduler = create_scheduler(max_num_seqs=3, async_scheduling=async_scheduling)"""
KV_MAKE_WITH_CLS = """\
    scheduler = create_scheduler(
        use_kv_connector=mock_kv(matched_tokens=2 * block_size, is_async=True),
        block_size=block_size,
        scheduler_cls=GatedScheduler,
    )"""
KV_MAKE_SWAP = """\
    monkeypatch.setitem(create_scheduler.__globals__, "Scheduler", GatedScheduler)
    scheduler = create_scheduler(
        use_kv_connector=mock_kv(matched_tokens=2 * block_size, is_async=True),
        block_size=block_size,
    )"""
ASYNC_IMPORT = "from vllm.v1.core.sched.async_scheduler import AsyncScheduler\n"


def _breaks(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.If)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Break)
        and not stmt.orelse
    )


def _is_cap_test(test: ast.expr) -> bool:
    """``<count> >= self.max_num_*`` or ``<count> == self.max_num_*``."""
    return any(
        isinstance(op, (ast.GtE, ast.Eq))
        and isinstance(right, ast.Attribute)
        and isinstance(right.value, ast.Name)
        and right.value.id == "self"
        and right.attr.startswith("max_num_")
        for node in ast.walk(test)
        if isinstance(node, ast.Compare)
        for op, right in zip(node.ops, node.comparators, strict=True)
    )


def _class_method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise SeriesError(f"no {cls}.{name}() in {SCHEDULER_REL}")


def _comment_start(lines: list[str], lineno: int) -> int:
    """0-based index of the first line of the comment block right above line
    ``lineno`` (1-based) at the same indentation, or of that line itself."""
    row = lineno - 1
    indent = lines[row][: len(lines[row]) - len(lines[row].lstrip())]
    while row > 0 and lines[row - 1].startswith(indent + "#"):
        row -= 1
    return row


class Shape(NamedTuple):
    """What the hook's text says about one release, read off its source."""

    kv_queue: str | None  # the loop's variable for self.kv_holding_waiting
    queues: list[str]  # the queues the hook holds (``self.<name>``)
    skipped: list[str]  # when the waiting loop does not run
    cap: str  # the attribute the inline cap check compares with
    counts_streaming: bool  # the cap counts paused streaming sessions
    coupled: bool  # schedule() records prefill_capacity_bound
    throttle_arg: bool  # schedule() takes throttle_prefills
    local_cadence: bool  # the release has the local prefill_schedule_interval
    # The loop tests ``self._pause_state == PauseState.UNPAUSED`` (0.34 on):
    # the hook's default is that test and replaces it (PAUSED_NEW its user).
    pause_default: bool = False

    def skipped_text(self, rst: bool) -> str:
        quote = "``" if rst else ""
        words = []
        for reason in self.skipped:
            if reason == "preempt":
                words.append("preempt")
            elif reason == "PAUSED_ALL":
                words.append(f"under {quote}PauseState.PAUSED_ALL{quote}")
            else:
                words.append("while the scheduler is paused")
        return " or ".join(words)

    def cap_text(self, rst: bool) -> str:
        quote = "``" if rst else ""
        if not self.counts_streaming:
            return f"{quote}{self.cap}{quote}"
        if rst:
            return f"``{self.cap}``, counting paused streaming sessions"
        return f"{self.cap} (running requests plus paused streaming sessions)"


def _docstring(seam: str, paragraphs: list[str], indent: str) -> str:
    """The hook's ``def`` with its docstring, wrapped to vLLM's 88 columns."""
    width = 80
    text = [f"{indent}def {seam}(self) -> bool:\n"]
    body = indent + "    "
    for number, paragraph in enumerate(paragraphs):
        lead = '"""' if number == 0 else ""
        wrapped = textwrap.fill(
            lead + paragraph,
            width=width,
            initial_indent=body,
            subsequent_indent=body,
            break_on_hyphens=False,
            break_long_words=False,
        )
        text.append(wrapped + "\n")
        text.append("\n" if number < len(paragraphs) - 1 else "")
    text.append(f'{body}"""\n{body}return False\n\n')
    return "".join(text)


def _comment(text: str, indent: str) -> str:
    """``text`` as ``#`` lines at ``indent``, wrapped to 80 columns."""
    return "".join(
        f"{line}\n"
        for line in textwrap.wrap(
            text,
            width=80,
            initial_indent=indent + "# ",
            subsequent_indent=indent + "# ",
            break_on_hyphens=False,
        )
    )


def _waiting_loop_guards(schedule: ast.FunctionDef, loop: ast.While) -> list[str]:
    """Why the waiting loop may not run: the test of the ``if`` around it."""
    guard = next(
        (
            node
            for node in ast.walk(schedule)
            if isinstance(node, ast.If)
            and any(child is loop for stmt in node.body for child in ast.walk(stmt))
            and "preempted_reqs" in ast.unparse(node.test)
        ),
        None,
    )
    if guard is None:
        raise SeriesError(
            f"no `if not preempted_reqs ...` around the waiting loop of "
            f"Scheduler.schedule() in {SCHEDULER_REL}: re-sync by hand"
        )
    test = ast.unparse(guard.test)
    reasons = ["preempt"]
    if "PAUSED_ALL" in test:
        reasons.append("PAUSED_ALL")
    elif "UNPAUSED" in test:
        reasons.append("paused")
    return reasons


def _capacity_bound_update(schedule: ast.FunctionDef) -> ast.If | None:
    """The ``if ...: self.prefill_capacity_bound = ...`` of ``schedule()``."""
    for node in ast.walk(schedule):
        if isinstance(node, ast.If) and any(
            isinstance(stmt, ast.Assign)
            and ast.unparse(stmt.targets[0]) == "self.prefill_capacity_bound"
            for stmt in node.body
        ):
            return node
    return None


def _pause_tests(loop: ast.While) -> list[ast.Compare]:
    """The ``self._pause_state == PauseState.UNPAUSED`` tests in ``loop``."""
    return [
        node
        for node in ast.walk(loop)
        if isinstance(node, ast.Compare)
        and ast.unparse(node) == "self._pause_state == PauseState.UNPAUSED"
    ]


def _pause_loop(
    schedule: ast.FunctionDef,
) -> tuple[ast.While, ast.Assign, list[ast.Compare]] | None:
    """The 0.34 WAITING loop: ``while True:`` whose cap is an assignment
    (``loads_only = (<count> >= self.max_num_* or token_budget <= 0)``) and
    which picks its queue under ``_pause_state == PauseState.UNPAUSED``
    tests, or None."""
    for loop in ast.walk(schedule):
        if not isinstance(loop, ast.While):
            continue
        cap = next(
            (
                s
                for s in loop.body
                if isinstance(s, ast.Assign)
                and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)
                and _is_cap_test(s.value)
            ),
            None,
        )
        tests = _pause_tests(loop)
        if cap is not None and tests:
            return loop, cap, tests
    return None


def _unknown_loop(schedule: ast.FunctionDef) -> str:
    """The one-line error for a WAITING loop of a shape resync does not know."""
    loops = [
        f"`while {ast.unparse(n.test)}:` at line {n.lineno}"
        for n in ast.walk(schedule)
        if isinstance(n, ast.While)
    ]
    where = ", ".join(loops) or "no while loop"
    return (
        f"unknown WAITING-loop shape in Scheduler.schedule() of {SCHEDULER_REL} "
        f"(loops: {where}): neither `if <count> >= self.max_num_*: break` nor "
        f"`<flag> = (<count> >= self.max_num_* ...)` with "
        f"`self._pause_state == PauseState.UNPAUSED` tests; re-sync by hand"
    )


def _patched_pause_loop(
    source: str,
    schedule: ast.FunctionDef,
    loop: ast.While,
    cap: ast.Assign,
    tests: list[ast.Compare],
) -> tuple[str, Shape]:
    """The 0.34 shape: the loop's ``_pause_state == PauseState.UNPAUSED``
    tests become ``not stop_admitting_waiting``, asked once before the loop;
    the hook's default is the test it replaces (PAUSED_NEW its in-tree
    user). ``kv_holding_waiting`` is still drained while it holds."""
    update = _capacity_bound_update(schedule)
    shape = Shape(
        kv_queue="request_queue",
        queues=["waiting", "async_kv_waiting"],
        skipped=_waiting_loop_guards(schedule, loop),
        cap=next(
            node.attr
            for node in ast.walk(cap.value)
            if isinstance(node, ast.Attribute) and node.attr.startswith("max_num_")
        ),
        counts_streaming="num_waiting_for_streaming_input" in ast.unparse(loop),
        coupled=update is not None,
        throttle_arg="throttle_prefills"
        in {a.arg for a in schedule.args.args + schedule.args.kwonlyargs},
        local_cadence="self.local_prefill_interval" in ast.unparse(schedule),
        pause_default=True,
    )
    lines = source.splitlines(keepends=True)
    # Bottom up, so the line numbers above each change stay valid.
    if update is not None:
        lines.insert(
            update.lineno - 1,
            _comment(COUPLING_COMMENT.format(seam=SEAM), " " * update.col_offset),
        )
    for test in sorted(tests, key=lambda t: (t.lineno, t.col_offset), reverse=True):
        if test.end_lineno != test.lineno or test.end_col_offset is None:
            raise SeriesError(
                f"a PauseState test spans lines in {SCHEDULER_REL} "
                f"(line {test.lineno}): re-sync by hand"
            )
        row = lines[test.lineno - 1]
        text = row.encode()
        lines[test.lineno - 1] = (
            text[: test.col_offset]
            + f"not {FLAG}".encode()
            + text[test.end_col_offset :]
        ).decode()
    start = _comment_start(lines, loop.lineno)
    lines.insert(start, f"{' ' * loop.col_offset}{FLAG} = self.{SEAM}()\n")
    lines.insert(
        _comment_start(lines, schedule.lineno),
        _pause_docstring(shape, " " * schedule.col_offset),
    )
    return "".join(lines), shape


def _pause_docstring(shape: Shape, indent: str) -> str:
    """The 0.34 hook: a Google-style docstring (paragraphs wrapped to 80
    columns, the ``Returns:`` block indented under its heading), default =
    the pause test."""
    facts = {"skipped": shape.skipped_text(rst=True), "cap": shape.cap, "seam": SEAM}
    body = indent + "    "
    out = [f"{indent}def {SEAM}(self) -> bool:\n"]
    paragraphs = PAUSE_DOC.format(**facts).split("\n\n")
    for number, paragraph in enumerate(paragraphs):
        lead = '"""' if number == 0 else ""
        first, _, rest = paragraph.partition("\n")
        if first.endswith(":") and rest:  # a section: heading, indented text
            out.append(f"{body}{first}\n")
            out.append(_fill(" ".join(rest.split()), body + "    ") + "\n")
        else:
            out.append(_fill(lead + " ".join(paragraph.split()), body) + "\n")
        if number < len(paragraphs) - 1:
            out.append("\n")
    out.append(f'{body}"""\n{body}return self._pause_state != PauseState.UNPAUSED\n\n')
    return "".join(out)


def _fill(text: str, indent: str) -> str:
    return textwrap.fill(
        text,
        width=80,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )


def patched_scheduler(source: str) -> tuple[str, Shape]:
    """``scheduler.py`` with the hook: (patched text, what the release's
    loop looks like). Found by AST, so it fits any release whose WAITING
    loop stops on ``if <count> >= (or ==) self.max_num_*: break``."""
    if SEAM in source:
        raise SeriesError(f"{SCHEDULER_REL} already has {SEAM}()")
    tree = ast.parse(source)
    schedule = _class_method(tree, "Scheduler", "schedule")
    for loop in ast.walk(schedule):
        if not isinstance(loop, ast.While):
            continue
        cap = next((s for s in loop.body if _breaks(s) and _is_cap_test(s.test)), None)
        if cap is not None:
            break
    else:
        paused = _pause_loop(schedule)
        if paused is not None:
            return _patched_pause_loop(source, schedule, *paused)
        raise SeriesError(_unknown_loop(schedule))
    before_cap = loop.body[: loop.body.index(cap)]
    # Where the release drains a queue of requests that already hold KV
    # blocks, the loop picks it as `<queue> = self.kv_holding_waiting`; the
    # hook then holds only the other queue (new requests).
    queue = next(
        (
            s.targets[0].id
            for s in before_cap
            if isinstance(s, ast.Assign)
            and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Name)
            and ast.unparse(s.value) == "self.kv_holding_waiting"
        ),
        None,
    )
    held = (
        ["waiting"]
        if queue
        else sorted(
            {
                node.attr
                for node in ast.walk(loop.test)
                if isinstance(node, ast.Attribute) and node.attr.endswith("waiting")
            },
            key=lambda name: (name != "waiting", name),
        )
        or ["waiting"]
    )
    (cap_attr,) = {
        node.attr
        for node in ast.walk(cap.test)
        if isinstance(node, ast.Attribute) and node.attr.startswith("max_num_")
    }
    update = _capacity_bound_update(schedule)
    shape = Shape(
        kv_queue=queue,
        queues=held,
        skipped=_waiting_loop_guards(schedule, loop),
        cap=cap_attr,
        counts_streaming="num_waiting_for_streaming_input"
        in "".join(ast.unparse(s) for s in [*before_cap, cap]),
        coupled=update is not None,
        throttle_arg="throttle_prefills"
        in {a.arg for a in schedule.args.args + schedule.args.kwonlyargs},
        local_cadence="self.local_prefill_interval" in ast.unparse(schedule),
    )
    lines = source.splitlines(keepends=True)
    # Bottom up, so the line numbers above each insertion stay valid.
    if update is not None:
        lines.insert(
            update.lineno - 1,
            _comment(COUPLING_COMMENT.format(seam=SEAM), " " * update.col_offset),
        )
    body = " " * cap.body[0].col_offset
    at = " " * cap.col_offset
    honour = f"{FLAG} and {queue} is self.waiting" if queue else FLAG
    assert cap.end_lineno is not None
    lines.insert(cap.end_lineno, f"{at}if {honour}:\n{body}break\n")
    start = _comment_start(lines, loop.lineno)
    ind = " " * loop.col_offset
    lines.insert(start, f"{ind}{FLAG} = self.{SEAM}()\n")
    facts = {
        "queues": " or ".join(f"``self.{name}``" for name in held),
        "exempt": EXEMPT_KV if queue else "",
        "skipped": shape.skipped_text(rst=True),
        "cap_doc": shape.cap_text(rst=True),
    }
    lines.insert(
        _comment_start(lines, schedule.lineno),
        _docstring(
            SEAM,
            [paragraph.format(**facts) for paragraph in DOC_PARAGRAPHS],
            " " * schedule.col_offset,
        ),
    )
    return "".join(lines), shape


def commit_message(shape: Shape) -> str:
    """The patch's commit message, in the release's own terms."""
    throttles = "schedule(throttle_prefills=True)"
    if shape.local_cadence:
        throttles += " or the local\nprefill_schedule_interval cadence"
    tests = [
        "the gate holds waiting requests and never admits past max_num_seqs "
        "(sync and async scheduling)"
    ]
    if shape.coupled and shape.throttle_arg:
        tests.append("the step after a held one is not throttled")
    if shape.kv_queue:
        tests.append("a KV-holding request is admitted while the gate is closed")
    listed = "; ".join(tests)
    if shape.pause_default:
        body = PAUSE_MESSAGE.format(
            skipped=shape.skipped_text(rst=False),
            cap_text=shape.cap_text(rst=False),
            coupling=COUPLING.format(throttles=throttles) if shape.coupled else "",
            tests=listed,
        )
        return SUBJECT + "\n\n" + textwrap_paragraphs(body)
    body = MESSAGE.format(
        skipped=shape.skipped_text(rst=False),
        cap_text=shape.cap_text(rst=False),
        scope=SCOPE_KV if shape.kv_queue else SCOPE_PLAIN,
        coupling=COUPLING.format(throttles=throttles) if shape.coupled else "",
        tests=listed,
    )
    return SUBJECT + "\n\n" + textwrap_paragraphs(body)


def textwrap_paragraphs(text: str, width: int = 72) -> str:
    """Re-wrap each paragraph (blank-line separated) to ``width`` columns."""
    paragraphs = text.strip("\n").split("\n\n")
    return (
        "\n\n".join(
            textwrap.fill(" ".join(p.split()), width=width, break_on_hyphens=False)
            for p in paragraphs
        )
        + "\n"
    )


def patched_test(source: str, utils_source: str, shape: Shape | None = None) -> str:
    """``test_scheduler.py`` with the behaviour tests appended (and the
    ``AsyncScheduler`` import, where missing, among the ``vllm`` imports).
    ``shape`` (the release's, from :func:`patched_scheduler`) adds the
    coupling pin where ``schedule()`` records ``prefill_capacity_bound`` and
    the exemption test where the release has ``kv_holding_waiting``."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    needed = ["pytest", "Scheduler", "create_requests", "create_scheduler"]
    if shape is not None and shape.kv_queue:
        needed += ["RequestStatus", "mock_kv"]
    for name in needed:
        if name not in names:
            raise SeriesError(f"{TEST_REL} does not import {name}: re-sync by hand")
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for helper_name in ["make_output"] + (
        ["_runner_output"] if shape is not None and shape.kv_queue else []
    ):
        if helper_name not in functions:
            raise SeriesError(f"{TEST_REL} has no {helper_name}(): re-sync by hand")
    lines = source.splitlines(keepends=True)
    if "AsyncScheduler" not in names:
        module = "vllm.v1.core.sched.async_scheduler"
        later = [
            n
            for n in tree.body
            if isinstance(n, ast.ImportFrom)
            and (n.module or "").startswith("vllm.")
            and (n.module or "") > module
        ]
        if not later:
            raise SeriesError(
                f"no vllm import to place AsyncScheduler by in {TEST_REL}"
            )
        lines.insert(later[0].lineno - 1, ASYNC_IMPORT)
    helper = _module_function(ast.parse(utils_source), "create_scheduler")
    params = {a.arg for a in helper.args.args + helper.args.kwonlyargs}
    if "async_scheduling" not in params:
        raise SeriesError(
            "create_scheduler() takes no async_scheduling: re-sync by hand"
        )
    with_cls = "scheduler_cls" in params
    text = "".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    test_params = "async_scheduling: bool"
    if not with_cls:
        test_params = f"\n    {test_params}, monkeypatch: pytest.MonkeyPatch\n"
    throttled = shape is not None and shape.coupled and shape.throttle_arg
    pause = shape is not None and shape.pause_default
    text += TEST_BODY.format(
        seam=SEAM,
        gate_return=f"self.closed or super().{SEAM}()" if pause else "self.closed",
        make=MAKE_WITH_CLS if with_cls else MAKE_SWAP,
        params=test_params,
        doc_coupling=DOC_COUPLING if throttled else "",
        open_comment=OPEN_THROTTLED if throttled else OPEN_PLAIN,
        open_args="throttle_prefills=True" if throttled else "",
    )
    if shape is not None and shape.kv_queue:
        text += TEST_KV_BODY.format(
            kv_params="" if with_cls else "monkeypatch: pytest.MonkeyPatch",
            kv_make=KV_MAKE_WITH_CLS if with_cls else KV_MAKE_SWAP,
        )
    return text


def _module_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise SeriesError(f"no {name}() in {UTILS_REL}")


def resync(tree: Path, tag: str, out: Path | None = None) -> Path:
    """Rebuild the series against the vLLM source tree ``tree`` (a release
    sdist, or a clone of ``main`` at submission time) into
    ``upstream_patch/<tag>/`` (or ``out``): the hook and its call are placed
    by AST, the test is appended to the tree's own test file, and the patch
    is made by ``git format-patch`` from a scratch commit of the tree's files
    (so the hunks are the tree's, never offset-patched)."""
    tree = Path(tree)
    missing = [
        rel
        for rel in (SCHEDULER_REL, TEST_REL, UTILS_REL)
        if not (tree / rel).is_file()
    ]
    if missing:
        raise SeriesError(f"{tree} is not a vLLM source tree (missing {missing[0]})")
    scheduler, shape = patched_scheduler((tree / SCHEDULER_REL).read_text())
    test = patched_test(
        (tree / TEST_REL).read_text(), (tree / UTILS_REL).read_text(), shape
    )
    out = Path(out) if out else PATCH_DIR / tag
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    name, email = AUTHOR[: AUTHOR.index(" <")], AUTHOR[AUTHOR.index("<") + 1 : -1]
    env.update(
        GIT_AUTHOR_NAME=name,
        GIT_AUTHOR_EMAIL=email,
        GIT_COMMITTER_NAME=name,
        GIT_COMMITTER_EMAIL=email,
        GIT_AUTHOR_DATE=DATE,
        GIT_COMMITTER_DATE=DATE,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    with tempfile.TemporaryDirectory(prefix="vab-resync-") as scratch:
        repo = Path(scratch) / "tree"
        repo.mkdir()

        def git(*args: str) -> str:
            result = subprocess.run(
                ["git", "-c", "core.autocrlf=false", *args],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                raise SeriesError(f"git {args[0]} failed: {result.stderr.strip()}")
            return result.stdout

        git("init", "-q")
        for rel in (SCHEDULER_REL, TEST_REL):
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / rel, repo / rel)
        git("add", "-A")
        git("commit", "-q", "-m", f"vLLM {tag}")
        (repo / SCHEDULER_REL).write_text(scheduler)
        (repo / TEST_REL).write_text(test)
        message = commit_message(shape)
        (Path(scratch) / "message").write_text(message)
        git("commit", "-q", "-a", "-F", str(Path(scratch) / "message"))
        patch = git("format-patch", "-1", "--stdout", "--zero-commit", "--no-signature")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.patch"):
        old.unlink()
    (out / PATCH_NAME).write_text(patch)
    (out / "series").write_text(
        "# Applied in this order by upstream_patch/series.py.\n"
        "# Generated by: python upstream_patch/series.py resync "
        f"--tag {tag} --tree DIR\n"
        f"{PATCH_NAME}\n"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["apply", "revert", "status", "check", "sdist", "resync"]
    )
    parser.add_argument("--lane", default="release", choices=sorted(PIN_FILES))
    parser.add_argument(
        "--tree", type=Path, help="vLLM source tree for `check` and `resync`"
    )
    parser.add_argument(
        "--tag",
        help="for resync: the release tag the tree is (default: the lane's pin)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="for resync: output folder (default: upstream_patch/<tag>/)",
    )
    parser.add_argument(
        "--site",
        type=Path,
        help="for apply/revert/status: directory holding vllm/ and its dist-info "
        "(default: the vLLM this Python imports)",
    )
    parser.add_argument(
        "--project",
        default="vllm",
        choices=["vllm", "vllm-ascend"],
        help="for sdist: vllm (the lane's release) or vllm-ascend "
        "(.github/vllm-ascend.version)",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "apply":
            apply(args.lane, args.quiet, site=args.site)
        elif args.command == "revert":
            revert(args.lane, args.quiet, site=args.site)
        elif args.command == "status":
            return 0 if status(args.lane, site=args.site) else 1
        elif args.command == "check":
            check(args.lane, args.tree)
        elif args.command == "resync":
            tag = args.tag or lane_tag(args.lane)
            tree = args.tree or sdist(args.lane)
            print(resync(tree, tag, args.out))
        elif args.project == "vllm-ascend":
            print(ascend_sdist())
        else:
            print(sdist(args.lane))
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
