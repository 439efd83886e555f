# SPDX-License-Identifier: Apache-2.0
"""Which seeds the policy comparison judges on (``benchmarks/policies/``):
the held-out draw, the held-out run's modes and the table's statement of
the seeds.

The contract (issue "a comparison a peer's author would sign"): held-out
seeds are drawn after our settings are fixed, by no one, and none of them
was seen during the design; the held-out run judges the settings the design
table judged (ours, each peer's default and its tuned point); the table
says which seeds are which, with the commit order. Pure functions, no vLLM;
each check has a negative control.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks.policies import cases, judging, settings
from benchmarks.policies.render import markdown
from benchmarks.policies.rivals import (
    design_tuned,
    held_out_modes,
    held_out_plan,
    record_rivals,
    rivals,
)
from benchmarks.policies.runs import case_values

pytestmark = pytest.mark.lane_scope("release")

COMMIT = "b3a30e912abb9d1d7c37425e49ec8c05ef0b7fce"


def test_held_out_seeds_are_unseen_drawn_and_redrawn_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn = settings.held_out_seeds(COMMIT)
    assert len(drawn) == settings.HELD_OUT_COUNT == len(set(drawn))
    assert not set(drawn) & set(settings.SEEN_SEEDS)
    assert all(s in settings.SEED_RANGE for s in drawn)
    assert settings.held_out_seeds(COMMIT) == drawn  # anyone redraws them
    # Negative control: from a wider range (the trace allows only five
    # unseen seeds today, so the draw takes all), another commit draws
    # other seeds: nobody picks them.
    monkeypatch.setattr(settings, "SEED_RANGE", range(100))
    assert settings.held_out_seeds("0" * 40) != settings.held_out_seeds(COMMIT)
    with pytest.raises(ValueError, match="FROZEN_AT"):
        settings.held_out_seeds("")


def test_every_seed_of_the_range_selects_azure_requests_at_every_dp() -> None:
    """The last seed's Azure window lies inside the trace at the largest DP
    the Azure cases run (an empty window fails the replay); negative
    control: the seed after the range does not fit."""
    with open(cases.AZURE_TRACE) as f:
        stamps = [line.split(",")[0] for line in f.read().splitlines()[1:]]
    start, end = (datetime.fromisoformat(x[:26]) for x in (stamps[0], stamps[-1]))
    span_s = (end - start).total_seconds()
    dp = max(c.dp for c in cases.CASES if c.workload == "azure" and c.full)
    window = cases.AZURE_WINDOW_S * dp / 2

    def fits(seed: int) -> bool:
        return seed * window + window <= span_s

    assert all(fits(s) for s in settings.SEED_RANGE)
    assert not fits(settings.SEED_RANGE.stop)


def _record(case: str, seeds: list[int], modes: dict[str, float]) -> dict:
    """A design or held-out record: every metric 1.0 but TTFT p50 = the
    mode's value (TPOT p99 0.5 everywhere)."""

    def values(m: str) -> dict[str, float]:
        return {
            **{k: 1.0 for k, _, _ in judging.METRICS},
            "ttft_p50": modes[m],
            "tpot_p99": 0.5,
        }

    runs = [
        {"seed": s, "command": "cmd", "wall_s": 1.0, "requests": 10,
         "span_s": 5.0, "mode_wall_s": {},
         "values": {m: values(m) for m in modes}}
        for s in seeds
    ]  # fmt: skip
    return {"case": case, "runs": runs}


def test_held_out_modes_are_what_the_design_judged() -> None:
    delayer = settings.PEERS[0]
    tuned_point, other = delayer.sweep[0], delayer.sweep[1]
    modes = {
        settings.BASELINE: 100.0,
        settings.OURS[0]: 90.0,
        delayer.default: 95.0,
        tuned_point: 80.0,  # the family's tuned point on the design seeds
        other: 85.0,
    }
    chosen = held_out_modes(_record("x-dp4", [0, 1, 2], modes))
    assert chosen == [settings.BASELINE, settings.OURS[0], delayer.default,
                      tuned_point]  # fmt: skip
    # Negative control: a point the design did not pick is not run again.
    assert other not in chosen


def test_the_table_says_which_seeds_are_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "FROZEN_AT", COMMIT)
    modes = {
        settings.BASELINE: 100.0,
        settings.RECOMMENDED: 90.0,
        "sglang-delayer": 95.0,
    }
    drawn = settings.held_out_seeds(COMMIT)
    held = markdown([_record("x-dp4", drawn, modes)], "0.0")
    assert f"**Held-out seeds** {drawn}" in held and COMMIT[:10] in held
    assert settings.HELD_OUT_COMMAND in held
    assert f"at {len(drawn)} seeds" in held  # the t quantile of n - 1 df
    design = markdown([_record("x-dp4", [0, 1, 2], modes)], "0.0")
    assert "**Design seeds** [0, 1, 2]" in design and "Held-out" not in design
    assert f"Written by `{settings.COMMAND}`" in design
    # Negative control: seeds of neither set are named as such.
    other = markdown([_record("x-dp4", [200, 201], modes)], "0.0")
    assert "neither the design set nor the drawn held-out set" in other


def test_the_held_out_run_keeps_its_rows_and_adds_the_design_s_new_points() -> None:
    """A later design table (more seeds, a larger grid) that tunes a family
    to another point adds that point to the held-out run, after the stored
    run's modes (kept, in order); without a stored run the design alone
    decides."""
    delayer = settings.PEERS[0]
    first, second = delayer.sweep[0], delayer.sweep[1]
    later_design = _record(
        "x-dp4", [0, 1, 2, 3, 4],
        {settings.BASELINE: 100.0, delayer.default: 95.0, first: 85.0,
         second: 80.0},
    )  # fmt: skip
    plan = {settings.BASELINE: 100.0, delayer.default: 95.0, first: 80.0}
    drawn = settings.held_out_seeds(settings.FROZEN_AT)
    at_freeze = _record("x-dp4", drawn, plan)
    design = {"x-dp4": later_design}
    assert held_out_plan("x-dp4", design, at_freeze) == [
        settings.BASELINE, delayer.default, first, second,
    ]  # fmt: skip
    assert held_out_plan("x-dp4", design, None) == [
        settings.BASELINE, delayer.default, second,
    ]  # fmt: skip
    # A stored run of other seeds (a partial run, another freeze) is no plan.
    other_seeds = _record("x-dp4", [9, 10], plan)
    assert held_out_plan("x-dp4", design, other_seeds)[-1] == second
    with pytest.raises(SystemExit, match="y-dp4 has no design row"):
        held_out_plan("y-dp4", design, None)


def test_held_out_rivals_are_the_points_fixed_on_the_design_seeds() -> None:
    """On the held-out seeds a family's tuned point is the one the design
    picked (the point it ran besides its default), even where its default
    scores better there. Negative control: re-picked on the held-out values
    (``frozen=False``), the tuned point is the default and the point the
    design picked is judged by no one."""
    delayer = settings.PEERS[0]
    point = delayer.sweep[0]
    modes = {settings.BASELINE: 100.0, delayer.default: 80.0, point: 90.0}
    record = _record("x-dp4", settings.held_out_seeds(COMMIT), modes)
    values = case_values(record)
    assert rivals(values, frozen=True)[f"{delayer.name} tuned"] == point
    assert rivals(values)[f"{delayer.name} tuned"] == delayer.default
    # More points than a plan runs (a partial run): picked as in the design.
    more = case_values(_record("x-dp4", [9], {**modes, delayer.sweep[1]: 70.0}))
    assert rivals(more, frozen=True)[f"{delayer.name} tuned"] == delayer.sweep[1]


def test_held_out_rivals_follow_the_stored_design_tuned_points() -> None:
    """A held-out record that ran several points of a family judges the one
    the design table tuned (its stored ``tuned_on_design``), even where
    another scores better on the held-out values. Negative control: without
    the map the point is re-picked on the held-out values."""
    delayer = settings.PEERS[0]
    picked, better_here = delayer.sweep[0], delayer.sweep[1]
    design = _record(
        "x-dp4", [0, 1, 2, 3, 4],
        {settings.BASELINE: 100.0, delayer.default: 95.0, picked: 80.0,
         better_here: 90.0},
    )  # fmt: skip
    tuned_on = design_tuned(design)
    assert tuned_on[delayer.name] == picked
    held = _record(
        "x-dp4", settings.held_out_seeds(settings.FROZEN_AT),
        {settings.BASELINE: 100.0, delayer.default: 95.0, picked: 90.0,
         better_here: 70.0},
    )  # fmt: skip
    held["tuned_on_design"] = tuned_on
    assert record_rivals(held)[f"{delayer.name} tuned"] == picked
    del held["tuned_on_design"]
    assert record_rivals(held)[f"{delayer.name} tuned"] == better_here
    # A map naming a point that did not run is refused, not judged without it.
    held["tuned_on_design"] = {delayer.name: delayer.sweep[2]}
    with pytest.raises(ValueError, match="did not run on these seeds"):
        record_rivals(held)


def test_a_held_out_re_run_stores_the_new_map_once_every_seed_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A design table that tunes a family to a new point makes the held-out
    run add that point seed by seed; the tables are written after every
    seed, so until the last seed ran the record keeps the map its rows were
    run for, and the new map is stored at the end. The replay is replaced
    by fixed rows (the judging and the files are real). Negative control:
    the new map stored before the seeds ran (the known-bad order) names a
    point the record's seeds do not all have, and judging it is refused."""
    from benchmarks import compare_policies

    delayer = settings.PEERS[0]
    old, new = delayer.sweep[0], delayer.sweep[1]
    drawn = settings.held_out_seeds(settings.FROZEN_AT)
    base = {settings.BASELINE: 100.0, settings.RECOMMENDED: 90.0,
            delayer.default: 95.0}  # fmt: skip
    design = _record("builtin-dp4", [0, 1, 2, 3, 4], {**base, old: 85.0, new: 80.0})
    stored = _record("builtin-dp4", drawn, {**base, old: 85.0})
    stored["tuned_on_design"] = {delayer.name: old}
    (tmp_path / "policies.json").write_text(json.dumps([design]))
    (tmp_path / "policies_heldout.json").write_text(json.dumps([stored]))
    monkeypatch.setattr(compare_policies, "RESULTS", tmp_path)
    maps: list[object] = []

    def fake_run(case, seed, modes, *args, **kwargs):  # type: ignore[no-untyped-def]
        on_disk = json.loads((tmp_path / "policies_heldout.json").read_text())
        maps.append(on_disk[0].get("tuned_on_design"))
        rows = _record(case.key, [seed], {**base, old: 85.0, new: 70.0})
        return {**rows["runs"][0], "values": {
            m: rows["runs"][0]["values"][m] for m in modes}}  # fmt: skip

    monkeypatch.setattr(compare_policies, "run_seed", fake_run)
    assert compare_policies.main(["--held-out", "--cases", "builtin-dp4"]) == 0
    # Every seed ran under the old map (the md written after each is judged).
    assert maps == [{delayer.name: old}] * len(drawn)
    final = json.loads((tmp_path / "policies_heldout.json").read_text())[0]
    assert final["tuned_on_design"][delayer.name] == new
    assert record_rivals(final)[f"{delayer.name} tuned"] == new
    # Negative control: mid-way, with the new map stored first.
    midway = _record("builtin-dp4", drawn, {**base, old: 85.0})
    midway["runs"][0]["values"][new] = midway["runs"][0]["values"][old]
    midway["tuned_on_design"] = {delayer.name: new}
    with pytest.raises(ValueError, match="did not run on these seeds"):
        record_rivals(midway)
