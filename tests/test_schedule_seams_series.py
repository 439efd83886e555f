# SPDX-License-Identifier: Apache-2.0
"""The schedule-seams series (``upstream_patch/schedule_seams/``): three
patches adding ``_waiting_admission()``, ``_evict_running_request()`` and
``_cap_num_new_tokens()`` to vLLM's ``Scheduler``, stacked on the balance
series of the same tag.

Cheap checks only (CI is near its budget; the full by-hand run, upstream's
whole ``test_scheduler.py`` and every per-seam negative control on each tag,
is ``python -m tests.support.seam_series_run TAG PYTHON``, its results in
the series' README):

* release lane, no vLLM involved: each tag's series applies in order on the
  balance series to the release sdist, and ``resync`` rebuilds it byte for
  byte;
* fork lane (0.34.0): the series' upstream tests pass against the patched
  ``scheduler.py`` and all fail when ``schedule()`` calls the seams'
  defaults directly (an override is never asked), in two subprocess runs
  (about 30 s: on the release lane's 0.27.1 this is the by-hand run);
* fork lane (0.34.0) and release lane (0.27.1), each on its own vLLM: the
  patched ``Scheduler`` with its defaults gives the unpatched release's
  ``SchedulerOutput``s on the balance seam's random-trace differential (its
  seeded budget and coverage floor; 4 to 12 s).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.support import seam_series_run as seams_run
from tests.support.lanes import REPO_ROOT, current_lane, pin_tag
from tests.support.series_tool import series

SEAMS_DIR = REPO_ROOT / "upstream_patch" / "schedule_seams"
TAGS = sorted(path.parent.name for path in SEAMS_DIR.glob("v*/series"))
ALL_CASES = set().union(*seams_run.CASES.values())


def _tool():
    sys.path.insert(0, str(series.ROOT / "upstream_patch"))
    from series_tool import seam_series

    return seam_series


@pytest.mark.lane_scope("release")
def test_the_series_covers_the_fork_pin_and_vllm_ascend_mains():
    """0.34.0 (the fork lane's, proposed upstream), 0.29.0 (vllm-ascend
    main's) and 0.27.1 (the release lane's, which vllm-ascend's copies were
    measured on) at least, each with its three patches in seam order."""
    kept = series.KEPT_TAGS.items()
    ascend_main = next(t for t, why in kept if "vllm-ascend main" in why)
    wanted = {pin_tag("fork"), ascend_main, pin_tag("release")}
    assert wanted <= set(TAGS), (wanted, TAGS)
    for tag in TAGS:
        names = [p.name for p in _tool().seam_patches(tag)]
        assert names == list(_tool().PATCH_NAMES.values()), names


@pytest.mark.lane_scope("release")
@pytest.mark.parametrize("tag", TAGS)
def test_series_applies_on_the_balance_series(tag: str):
    """Balance 0001, then the three seams, each on the result of the ones
    before it, on the release sdist."""
    print(_tool().check(tag))


@pytest.mark.lane_scope("release")
@pytest.mark.parametrize("tag", TAGS)
def test_resync_reproduces_the_series(tag: str, tmp_path: Path):
    """The committed patches are exactly what the generator makes from the
    sdist: nothing in them was edited by hand."""
    out = _tool().resync(tag, out=tmp_path / tag)
    committed = SEAMS_DIR / tag
    for name in ["series", *_tool().PATCH_NAMES.values()]:
        assert (out / name).read_bytes() == (committed / name).read_bytes(), name


@pytest.fixture(scope="module")
def lane_tree(tmp_path_factory) -> tuple[Path, Path]:
    """This lane's release with both series applied (its own vLLM runs it)."""
    lane = current_lane()
    tag = pin_tag(lane)
    assert tag in TAGS, f"no schedule-seams series for the {lane} pin {tag}"
    root = tmp_path_factory.mktemp("seams-upstream")
    return root, seams_run.build_tree(tag, root)


@pytest.mark.lane_scope("fork")
def test_upstream_seam_tests_pass_with_and_fail_without(lane_tree):
    """Every case of ``test_scheduler_seams.py`` passes on the patched file
    and fails on the same file with the seams bypassed."""
    root, patched = lane_tree
    outcomes, summary = seams_run.run(
        root, sys.executable, patched, [seams_run.SEAMS_TEST]
    )
    assert seams_run.by_name(outcomes) == dict.fromkeys(ALL_CASES, "passed"), summary
    bypassed = seams_run.variant(
        root, "bypassed", seams_run.bypassed(patched.read_text())
    )
    outcomes, summary = seams_run.run(
        root, sys.executable, bypassed, [seams_run.SEAMS_TEST]
    )
    assert seams_run.by_name(outcomes) == dict.fromkeys(ALL_CASES, "failure"), summary


@pytest.mark.lane_scope("release", "fork")
def test_defaults_are_stock_on_random_traces(lane_tree):
    """The balance seam's stock-vs-patched state machine
    (``tests/test_refactor_equivalence.py``), with the seams-patched
    ``Scheduler`` as the candidate and the unpatched release as the
    original; its coverage floor (preemption, admission, the cap, pause
    states, async KV loads) is asserted as there; the seams' defaults are
    asked on every step of those traces. The known-bad variant (a
    default that caps one token less) must diverge within the same budget."""
    from tests.support.original_scheduler import classes_from_source, original_classes
    from tests.test_refactor_equivalence import (
        EQUIVALENCE_SETTINGS,
        Divergence,
        _assert_traces_were_interesting,
        machine_for,
    )

    _, patched = lane_tree
    candidate, _ = classes_from_source("vab_seams_scheduler", patched.read_text())
    assert hasattr(candidate, "_cap_num_new_tokens")
    original, _ = original_classes()
    budget = settings(EQUIVALENCE_SETTINGS, derandomize=True)
    machine = machine_for(candidate, original)
    run_state_machine_as_test(machine, settings=budget)
    _assert_traces_were_interesting(machine)

    changed = seams_run.defaults_changed(patched.read_text(), "B")
    mutant, _ = classes_from_source("vab_seams_mutant", changed)
    strict = settings(budget, phases=[Phase.generate])  # found, not shrunk
    with pytest.raises(Divergence):
        run_state_machine_as_test(machine_for(mutant, original), settings=strict)
