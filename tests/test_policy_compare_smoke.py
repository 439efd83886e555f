# SPDX-License-Identifier: Apache-2.0
"""``benchmarks/compare_policies.py`` end to end on its smallest case: two
seeds of ``starvation-dp4`` with the baseline, the recommended setting and
one peer at its defaults on the simulated engine (real vLLM schedulers; the
peer runs through the seam on this release), then ``--render`` from the
JSON it wrote (one replay process per seed: ``--jobs 1``). It checks the
script's plumbing, not the modes: every peer and setting runs in the
simulated engine's own tests (``tests/test_replay_sim*.py``). Most of its
time is the two replays' start-up.

Only the shape is checked (the numbers are the model's); the negative
control is the per-seed values themselves: the two seeds draw different
workloads, so their values must differ.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.policies import settings
from benchmarks.policies.out_lock import lock_path, sole_writer
from tests.support.lanes import REPO_ROOT
from tests.support.replay_variants import session_pids

pytestmark = pytest.mark.lane_scope("release")

SCRIPT = REPO_ROOT / "benchmarks" / "compare_policies.py"
MODES = [
    settings.BASELINE,
    settings.RECOMMENDED,
    next(f.default for f in settings.PEERS if f.default),
]


def _run(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--cases", "starvation-dp4", *flags],
        capture_output=True,
        text=True,
        timeout=900,  # hang guard only
        cwd=REPO_ROOT,
    )


def test_two_seeds_write_the_tables_and_render_again(tmp_path: Path) -> None:
    out = tmp_path / "p"
    flags = ["--seeds", "0", "1", "--modes", ",".join(MODES), "--jobs", "1",
             "--out", str(out)]  # fmt: skip
    done = _run(*flags)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(out.with_suffix(".json").read_text())
    assert [r["case"] for r in records] == ["starvation-dp4"]
    runs = records[0]["runs"]
    assert [r["seed"] for r in runs] == [0, 1]
    assert list(runs[0]["values"]) == MODES  # every run completed (exit 0)
    assert runs[0]["values"]["off"] != runs[1]["values"]["off"]
    assert runs[0]["values"]["off"]["goodput"] >= 0
    text = out.with_suffix(".md").read_text()
    assert "**starvation-dp4** (seeds 0, 1" in text and " ± " in text
    # The header names the command that wrote the file, not the full run's.
    ran = shlex.join(["python", "benchmarks/compare_policies.py",
                      "--cases", "starvation-dp4", *flags])  # fmt: skip
    assert text.splitlines()[1].startswith(f"Written by `{ran}` "), text[:400]
    case_table = text[text.index("**starvation-dp4**") :]
    rows = [
        line.split("`")[1] for line in case_table.splitlines() if line.startswith("| `")
    ]
    assert rows == MODES
    out.with_suffix(".md").unlink()
    again = subprocess.run(
        [sys.executable, str(SCRIPT), "--render", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert out.with_suffix(".md").read_text() == text
    # The header names the vLLM the rows ran on, not the rendering one's.
    for run in runs:
        run["vllm"] = "9.9.9 package 0123456789abcdef"
    out.with_suffix(".json").write_text(json.dumps(records))
    other = subprocess.run(
        [sys.executable, str(SCRIPT), "--render", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr[-3000:]
    assert "Simulated engine on vLLM 9.9.9 (" in out.with_suffix(".md").read_text()


def test_an_unknown_case_is_one_line() -> None:
    done = _run("--cases", "nope")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("--cases: no case 'nope'")
    assert "Traceback" not in done.stderr


def test_a_bad_mode_is_refused_before_any_replay_runs(tmp_path: Path) -> None:
    """Every mode is read (the replay's grammar) before anything runs: with
    two replay processes, ``off`` ran first and the bad mode failed after.
    Control: the good modes of the test above run."""
    out = tmp_path / "p"
    done = _run("--modes", "off,bogus-mode", "--jobs", "2", "--out", str(out))
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("--modes: unknown mode 'bogus-mode' (use off, on"), last
    assert "Traceback" not in done.stderr
    assert not any(line.startswith("$ ") for line in done.stderr.splitlines())
    assert not out.with_suffix(".json").exists(), "no replay ran"


def test_a_second_run_on_the_same_out_is_refused(tmp_path: Path) -> None:
    """Two runs on one OUT overwrite each other's rows (both rewrite
    OUT.json after every seed): the second is refused in one line, before
    any replay. Control: once the first ends, its lock file is gone and the
    same OUT is free again."""
    out = tmp_path / "p"
    with sole_writer(out):
        assert lock_path(out).exists()
        done = _run("--modes", "off", "--jobs", "1", "--out", str(out))
        assert done.returncode == 1, done.stderr[-3000:]
        last = done.stderr.strip().splitlines()[-1]
        assert last == (
            f"another compare_policies.py run is writing {out}.json; wait for "
            "it, or give this run its own --out"
        ), last
        assert "Traceback" not in done.stderr
        assert not out.with_suffix(".json").exists(), "no replay ran"
    assert not lock_path(out).exists(), "the lock file is left behind"
    with sole_writer(out):
        pass


def test_sigterm_stops_the_replays_and_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM mid-run (the replay child started) ends the run with one line,
    exit 1: the replay is stopped, the work directory and OUT's lock are
    gone. The code before: the lock file and the work directory stayed and
    the replay ran on."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "p"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--cases", "starvation-dp4", "--modes",
         "off", "--jobs", "1", "--out", str(out)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        cwd=REPO_ROOT, env={**os.environ, "TMPDIR": str(temp)},
        start_new_session=True,  # the replay and its engines: this session
    )  # fmt: skip
    assert proc.stderr is not None
    seen = []
    # The replay's own banner (its stderr is this one): the child runs, long
    # after Popen returned in the parent. Its command line ("$ ...") comes
    # before Popen: a SIGTERM then could find the child not yet recorded.
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("replay: "):
            break
    assert len(session_pids(proc.pid)) >= 2, "".join(seen)[-3000:]
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=300) == 1, rest[-3000:]
    assert "Traceback" not in rest, rest[-3000:]
    assert rest.strip().splitlines()[-1] == (
        "compare_policies.py: interrupted; OUT.json keeps the cases and seeds "
        "that finished"
    )
    assert session_pids(proc.pid) == [], "a replay still runs"
    assert (
        sorted(p.name for p in temp.iterdir() if p.name.startswith("vab-policies"))
        == []
    )
