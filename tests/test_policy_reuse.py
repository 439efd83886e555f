# SPDX-License-Identifier: Apache-2.0
"""Resuming the policy comparison (``benchmarks/policies/reuse.py``) and its
per-case grids (``settings.py``, ``cases.py``): which stored rows a new run
keeps, how modes split over replay processes, the order and size of what
the full run runs.

Pure functions, no vLLM. Each reuse rule keeps a negative control: another
vLLM, other replay arguments or a moved baseline row keep nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.compare_policies import estimate
from benchmarks.policies import cases, reuse, settings
from tests.support.lanes import pin_tag

pytestmark = pytest.mark.lane_scope("release")

ARGS = ["--engine", "sim", "--dp", "4", "--seed", "0"]
#: The vLLM the comparison runs on (the main lane's pin file).
VLLM = pin_tag("main")[1:]


def _stored(modes: dict[str, float], vllm: str = VLLM) -> dict[str, object]:
    return {
        "args": list(ARGS),
        "vllm": vllm,
        "wall_s": 10.0,
        "values": {m: {"ttft_p50": v} for m, v in modes.items()},
        "digests": {m: f"d-{m}-{v}" for m, v in modes.items()},
        "mode_wall_s": dict.fromkeys(modes, 1.0),
    }


# ---------------------------------------------------------------- splitting
def test_split_modes_deals_round_robin_baseline_first() -> None:
    modes = ["off", "a", "b", "c", "d"]
    assert reuse.split_modes(modes, 2) == [["off", "b", "d"], ["a", "c"]]
    assert reuse.split_modes(modes, 1) == [modes]
    # More processes than modes: no empty process.
    assert reuse.split_modes(["off", "a"], 5) == [["off"], ["a"]]
    with pytest.raises(ValueError, match="--jobs must be >= 1"):
        reuse.split_modes(modes, 0)


# ---------------------------------------------------------------- the plan
def test_plan_keeps_stored_rows_and_runs_the_baseline_again() -> None:
    stored = _stored({"off": 1.0, "a": 2.0, "b": 3.0})
    todo = reuse.plan(stored, ARGS, VLLM, ["off", "a", "c"], "off")
    assert todo.fresh == ["off", "c"]  # the baseline always, then new ones
    assert todo.kept == ["a", "b"]  # stored rows, asked for or not


@pytest.mark.parametrize(
    "why",
    ["nothing stored", "another vLLM", "other arguments", "no baseline row"],
)
def test_plan_keeps_nothing_when_the_run_is_not_the_same(why: str) -> None:
    stored = _stored({"off": 1.0, "a": 2.0})
    args, vllm = list(ARGS), VLLM
    if why == "nothing stored":
        stored = None  # type: ignore[assignment]
    elif why == "another vLLM":
        vllm = f"{VLLM}.post1"  # any other version string
    elif why == "other arguments":
        args[-1] = "1"
    else:
        del stored["values"]["off"]  # type: ignore[attr-defined]
    todo = reuse.plan(stored, args, vllm, ["off", "a"], "off")
    assert todo == reuse.Plan(["off", "a"], [])


def test_same_baseline_needs_equal_values_and_digest() -> None:
    stored = _stored({"off": 1.0, "a": 2.0})
    assert reuse.same_baseline(stored, _stored({"off": 1.0}), "off")
    # Negative controls: the row moved, or the same metrics from another
    # history (digest differs).
    assert not reuse.same_baseline(stored, _stored({"off": 1.5}), "off")
    other = _stored({"off": 1.0})
    other["digests"] = {"off": "another history"}
    assert not reuse.same_baseline(stored, other, "off")


def test_merge_adds_kept_rows_and_a_fresh_row_wins() -> None:
    stored = _stored({"off": 1.0, "a": 2.0, "b": 3.0})
    fresh = _stored({"off": 1.0, "b": 9.0})
    out = reuse.merge(stored, fresh, ["a", "b"])
    assert out["values"] == {
        "a": {"ttft_p50": 2.0},
        "b": {"ttft_p50": 9.0},
        "off": {"ttft_p50": 1.0},
    }
    assert out["wall_s"] == 20.0  # replay time over both invocations
    assert reuse.ordered(out["values"], ["off", "b"]) == ["off", "b", "a"]


# ---------------------------------------------------------------- grids
def test_a_cut_case_runs_the_same_number_of_points_per_family() -> None:
    for points in (1, cases.CUT_POINTS, None):
        n = len(settings.OURS) if points is None else points
        # A whole grid (DP 4): each family as many points as ours tried.
        peer_n = settings.PEER_POINTS if points is None else points
        modes = settings.all_modes(points=points)
        assert settings.ours(points) == list(settings.OURS[:n])
        assert settings.check_grids(points=points) == []
        for family in settings.PEERS:
            assert sum(m in modes for m in settings.grid(family)) == peer_n
        assert modes[0] == settings.BASELINE and len(modes) == len(set(modes))
    assert settings.ours(1)[0] == settings.RECOMMENDED  # in every cut grid
    # Negative control: a family too small for the grid is named.
    small = (settings.PeerFamily("x", None, ("x:1", "x:2")),)
    assert settings.check_grids(small, points=3) == [
        "x: a grid of 2 point(s), the case's has 3"
    ]


def test_the_full_run_goes_small_dp_first_and_names_its_cuts() -> None:
    full = sorted(cases.select(None, quick=False), key=lambda c: c.cost_rank)
    assert [c.dp for c in full] == sorted(c.dp for c in full)
    assert all(c.full for c in full)
    # The costly DP 64 traces are out of the full run but can be named.
    assert "azure-dp64" not in {c.key for c in full}
    assert [c.key for c in cases.select(["azure-dp64"], False)] == ["azure-dp64"]
    # Every case of the full run runs whole grids (issue 55: each peer
    # family as many points as ours tried, at every DP size).
    assert {c.points for c in full} == {None}
    assert {c.dp for c in full} == {4, 16, 64}


def test_estimate_uses_each_case_s_own_mode_count() -> None:
    def rec(case: str) -> dict[str, object]:
        run = {"wall_s": 14.0, "mode_wall_s": {"off": 5.0, "x": 2.0}}
        return {"case": case, "runs": [run]}

    lines = estimate([rec("a"), rec("b")], {"a": 10, "b": 1}, 3)
    # Per mode 2 s (the first run carries start-up); start-up 14 - 2*2 = 10.
    assert lines[0].endswith("10 modes x 3 seeds: 1.5 min")
    assert lines[1].endswith("1 modes x 3 seeds: 0.6 min")
    assert lines[-1].startswith("expected: 2 min")


def test_prune_keeps_the_grid_s_rows_only() -> None:
    """The full matrix cuts rows of modes no longer in its grid (an earlier
    grid's, kept by a partial run): every per-row field, nothing else."""
    run = {
        "seed": 0,
        "wall_s": 3.0,
        "values": {"off": {"x": 1}, "on": {"x": 2}, "old": {"x": 3}},
        "digests": {"off": "a", "on": "b", "old": "c"},
        "mode_wall_s": {"off": 1.0, "on": 1.0, "old": 1.0},
    }
    out = reuse.prune(run, ["off", "on"])
    assert list(out["values"]) == list(out["digests"]) == ["off", "on"]
    assert list(out["mode_wall_s"]) == ["off", "on"] and "code" not in out
    assert out["wall_s"] == 3.0 and list(run["values"]) == ["off", "on", "old"]


def test_package_digest_follows_the_package_code(tmp_path: Path) -> None:
    """A policy changed behind an unchanged ``--mode`` name runs again: the
    reuse key holds the package's digest (a stale row once survived a
    rewrite of ``throttled``). Control: an unchanged tree, the same digest."""
    pkg = tmp_path / "vllm_ascend_balance" / "gate"
    pkg.mkdir(parents=True)
    (pkg / "rule.py").write_text("HOLD = 1\n")
    before = reuse.package_digest(tmp_path)
    assert reuse.package_digest(tmp_path) == before
    (pkg / "rule.py").write_text("HOLD = 2\n")
    assert reuse.package_digest(tmp_path) != before


def test_fits_rules_tool_refuses_checkouts_that_differ_beyond_the_rule(
    tmp_path: Path,
) -> None:
    """``benchmarks/compare_fits_rules.py``: equal answers of the rule mean
    equal rows only if nothing else in the package differs. A change to the
    rule's module alone passes; negative control: a change anywhere else
    (or a file only one side has) is named."""
    from benchmarks.compare_fits_rules import RULE, other_changes

    here, there = tmp_path / "here", tmp_path / "there"
    for root in (here, there):
        (root / RULE).parent.mkdir(parents=True)
        (root / RULE).write_text("rule = 1\n")
        (root / "vllm_ascend_balance" / "other.py").write_text("x = 1\n")
    (there / RULE).write_text("rule = 2\n")
    assert other_changes(here, there) == []
    (there / "vllm_ascend_balance" / "other.py").write_text("x = 2\n")
    (there / "vllm_ascend_balance" / "new.py").write_text("")
    assert other_changes(here, there) == [
        "vllm_ascend_balance/new.py", "vllm_ascend_balance/other.py",
    ]  # fmt: skip
