# SPDX-License-Identifier: Apache-2.0
"""Runs the schedule-seams series' upstream tests
(``tests/v1/core/test_scheduler_seams.py``, and upstream's own
``test_scheduler.py`` when asked) against a release's ``scheduler.py`` with
the balance and seams series applied, or a variant of it, in a subprocess
of any vLLM venv of that release.

The machinery is ``tests/test_upstream_unit.py``'s (its child-run plugin,
which imports the given ``scheduler.py`` under the real module name before
any test does, and its fake offline hub), so the installed vLLM need not
carry the series: only ``scheduler.py`` differs. Variants for the negative
controls are made here from the patched text: ``bypassed`` calls each
seam's default directly (an override is never asked: the call sites as
good as removed), ``defaults changed`` makes each default do something
else. ``python -m tests.support.seam_series_run TAG PYTHON`` is the
by-hand run ``upstream_patch/schedule_seams/README.md`` records."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support.series_tool import series

SEAMS_TEST = "test_scheduler_seams.py"
#: Each seam's call in schedule(), and the default's body line.
CALLS = {
    "A": "self._waiting_admission(",
    "C": "self._evict_running_request(",
    "B": "self._cap_num_new_tokens(",
}
DEFAULTS = {
    "A": (
        '"""\n        return Admission.ADMIT\n',
        '"""\n        return Admission.SKIP\n',
    ),
    # Finishes the victim instead (the preempting call, however laid out).
    "C": (
        r"self\._preempt_request\(\s*victim, timestamp[^)]*\)\n",
        "self.finish_requests(victim.request_id, RequestStatus.FINISHED_ABORTED)\n",
    ),
    "B": (
        '"""\n        return num_new_tokens\n',
        '"""\n        return max(num_new_tokens - 1, 0)\n',
    ),
}
#: The test cases each seam's tests have (pytest ids).
CASES = {
    "A": {
        "test_waiting_admission[Admission.SKIP]",
        "test_waiting_admission[Admission.STOP]",
    },
    "C": {"test_evict_running_request[False]", "test_evict_running_request[True]"},
    "B": {
        "test_cap_num_new_tokens_chunks_prefill",
        "test_cap_num_new_tokens_zero_defers",
    },
}


def _seam_tool():
    sys.path.insert(0, str(series.ROOT / "upstream_patch"))
    from series_tool import seam_series

    return seam_series


def stacked_patches(tag: str) -> list[Path]:
    return _seam_tool().stacked_patches(tag)


def build_tree(tag: str, root: Path) -> Path:
    """``root`` with upstream's scheduler tests (and what they import) from
    the sdist of ``tag``, the stacked series applied (tests included), a
    fake hub and the child-run plugin; returns the patched ``scheduler.py``
    (``root/variants/patched/scheduler.py``)."""
    from tests.test_upstream_unit import _PLUGIN, _write_fake_hub

    sdist = series.fetch_sdist("vllm", tag[1:])
    for rel in [
        "pyproject.toml",
        "tests/__init__.py",
        "tests/v1/__init__.py",
        "tests/v1/kv_connector/__init__.py",
        "tests/v1/kv_connector/unit/__init__.py",
        "tests/v1/kv_connector/unit/utils.py",
        series.SCHEDULER_REL,
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist / rel, root / rel)
    shutil.copytree(sdist / "tests/v1/core", root / "tests/v1/core")
    for patch in stacked_patches(tag):  # one by one: they stack on one file
        result = series.git_apply(root, [patch])
        assert result.returncode == 0, (patch.name, result.stderr)
    patched = variant(root, "patched", (root / series.SCHEDULER_REL).read_text())
    shutil.rmtree(root / "vllm")  # the child imports the venv's vLLM
    (root / "_vab_offline_plugin.py").write_text(_PLUGIN)
    _write_fake_hub(root / "hf")
    return patched


def variant(root: Path, name: str, source: str) -> Path:
    path = root / "variants" / name / "scheduler.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


def bypassed(source: str, seams: str = "ACB") -> str:
    """``source`` whose ``schedule()`` calls the defaults of ``seams``
    directly, so an override is never asked."""
    for seam in seams:
        call = CALLS[seam]
        assert source.count(call) >= 1, call
        source = source.replace(call, f"Scheduler.{call[5:]}self, ")
    return source


def defaults_changed(source: str, seams: str = "ACB") -> str:
    """``source`` whose defaults of ``seams`` are no longer stock."""
    for seam in seams:
        old, new = DEFAULTS[seam]
        source, count = re.subn(old if seam == "C" else re.escape(old), new, source)
        assert count == 1, old
    return source


def _cpu_needs_triton(python: str) -> bool:
    """The venv's vLLM CPU platform refuses x86 without triton-cpu (0.34):
    read off its file, found next to ``python``, as test_upstream_unit does."""
    venv = Path(python).absolute().parent.parent  # not resolved: a venv links
    found = list(venv.glob("lib/python*/site-packages/vllm/platforms/cpu.py"))
    return any("requires Triton (triton-cpu)" in p.read_text() for p in found)


def run(
    root: Path, python: str, scheduler: Path, files: list[str], *args: str
) -> tuple[dict[str, str], str]:
    """pytest on ``files`` (under tests/v1/core) in a subprocess of
    ``python``, with ``scheduler`` as vLLM's scheduler module; returns
    ({test id: passed|failure|error|skipped}, pytest's summary line). Tests
    needing a hub model the fake hub lacks are deselected, as upstream's
    unit run does."""
    from tests.test_upstream_unit import _unfaked_models

    deselect = [
        f"{name}::{test}"
        for name in files
        for test in _unfaked_models(root / "tests/v1/core" / name)
    ]
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    report = run_dir / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VAB_"))}
    env.update(
        HF_HOME=str(root / "hf"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_TARGET_DEVICE="cpu",  # a VLLM_TARGET_DEVICE=empty build has none
        VAB_DESELECT=json.dumps(sorted(deselect)),
        VAB_SCHEDULER_VARIANT=str(scheduler),
        VAB_DESELECTED_OUT=str(run_dir / "deselected.json"),
    )
    env.pop("PYTHONPATH", None)  # this repository's tests package would shadow
    if _cpu_needs_triton(python):
        env["VAB_STUB_TRITON_CPU"] = "1"
    result = subprocess.run(
        [python, "-m", "pytest", *(f"tests/v1/core/{f}" for f in files)]
        + ["-p", "no:cacheprovider", "-p", "_vab_offline_plugin", "-q"]
        + ["--tb=short", f"--junitxml={report}", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = result.stdout.strip().splitlines()
    summary = lines[-1] if lines else result.stderr[-2000:]
    outcomes: dict[str, str] = {}
    if report.is_file():
        for case in ET.parse(report).getroot().iter("testcase"):
            kinds = [child.tag for child in case]
            outcomes[f"{case.get('classname')}::{case.get('name')}"] = next(
                (k for k in ("failure", "error", "skipped") if k in kinds), "passed"
            )
    if not outcomes:
        summary += "\n" + result.stdout[-3000:] + result.stderr[-3000:]
    return outcomes, summary


def by_name(outcomes: dict[str, str]) -> dict[str, str]:
    """{test id without module: outcome}."""
    return {key.rsplit("::", 1)[-1]: kind for key, kind in outcomes.items()}


def main(tag: str, python: str) -> int:
    """The by-hand verification: upstream's test_scheduler.py and the seams'
    tests on the patched file; then the seams' tests on the variants."""
    with tempfile.TemporaryDirectory(prefix="vab-seams-run-") as scratch:
        root = Path(scratch)
        patched = build_tree(tag, root)
        source = patched.read_text()
        outcomes, summary = run(
            root, python, patched, ["test_scheduler.py", SEAMS_TEST]
        )
        failed = sorted(k for k, v in outcomes.items() if v in ("failure", "error"))
        print(f"{tag} patched: test_scheduler.py + {SEAMS_TEST}: {summary}")
        print(f"  failed: {failed}")
        for label, make in (
            ("bypassed", bypassed),
            ("default changed", defaults_changed),
        ):
            for seam in "ACB":
                path = variant(root, f"{label}-{seam}", make(source, seam))
                got, summary = run(root, python, path, [SEAMS_TEST])
                named = by_name(got)
                fails = sorted(k for k, v in named.items() if v != "passed")
                print(f"{tag} {label} {seam}: {summary}; not passing: {fails}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
