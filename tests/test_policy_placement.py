# SPDX-License-Identifier: Apache-2.0
"""The placement comparison (``benchmarks/compare_placement.py``): its
score, its table and its refusal of an unknown case (no replay runs here:
``--routing trtllm-adp`` itself is tested in ``test_peer_fidelity.py``)."""

from __future__ import annotations

import math

import pytest

from benchmarks.compare_placement import main, markdown, score

pytestmark = pytest.mark.lane_scope("release")

OFF = {"ttft_p50": [100.0, 200.0], "tpot_p50": [40.0, 40.0],
       "tpot_p99": [80.0, 100.0], "tok_s": [900.0, 800.0]}  # fmt: skip


def test_score_is_the_tuning_score_against_off() -> None:
    assert score(OFF, OFF) == 0.0
    half = {k: [v / 2 for v in vs] for k, vs in OFF.items()}
    assert score(half, OFF) == pytest.approx(2 * math.log(0.5))
    # control: a row only faster in TPOT p50 scores nothing (not an axis)
    assert score(dict(OFF, tpot_p50=[1.0, 1.0]), OFF) == 0.0


def test_table_has_a_row_per_mode_and_router() -> None:
    rows = {"off (vLLM router)": OFF, "off (TensorRT-LLM router)": OFF}
    text = markdown([{"case": "c", "seeds": [0, 1], "commands": ["cmd"], "rows": rows}])
    assert "| `off (TensorRT-LLM router)` | 150 ± 635 |" in text
    assert text.count("+0.00 | - |") == 2  # no peer row: nothing to hold against


def test_unknown_case_is_a_one_line_error(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--case", "nope"])
    assert exc.value.code == 2
    assert "--case nope: not in benchmarks/results/policies.json" in (
        capsys.readouterr().err
    )
