# SPDX-License-Identifier: Apache-2.0
"""The ``--mode`` grammar of the peer policies: every knob of every peer
is settable from the mode string (what a sweep needs), each default is the
one the grammar documents, and the grammar is documented where users read
it (``--help``, :mod:`vllm_ascend_balance.replay.pipeline.modes`)."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_ascend_balance.replay.peers import POLICIES, PolicyError, make_policy
from vllm_ascend_balance.replay.pipeline import modes
from vllm_ascend_balance.replay.pipeline.modes import ModeError, parse_modes
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions

# Parsing only: no vLLM object is involved.
pytestmark = pytest.mark.lane_scope("release")

#: mode string -> the attributes it must set (every knob, off its default).
FULL = {
    "sglang-delayer:7:20:15:800:4:8": dict(
        max_delay_passes=7, watermark_permille=200, queue_ratio_percent=15,
        max_delay_ms=800, interval=4, prefill_bs_window=8, delayer=True,
    ),
    "sglang-pdi:22": dict(interval=22, delayer=False),
    "trtllm-adp:40:5:2:3": dict(
        timeout_iters=40, batching_wait_iters=5, min_gen_requests=2,
        low_occupancy_timeout_iters=3,
    ),
    "vllm-align:12:1:2500": dict(max_delay_passes=12, lead=1, max_delay_ms=2500),
    "atom-delayer:12:700": dict(max_delay_passes=12, max_delay_ms=700),
}  # fmt: skip

#: name -> the documented defaults.
DEFAULTS = {
    "sglang-delayer": dict(
        max_delay_passes=30, watermark_permille=0, queue_ratio_percent=0,
        max_delay_ms=5000, interval=0, prefill_bs_window=16,
    ),
    "trtllm-adp": dict(
        timeout_iters=50, batching_wait_iters=10, min_gen_requests=0,
        low_occupancy_timeout_iters=0,
    ),
    "vllm-align": dict(max_delay_passes=30, lead=2, max_delay_ms=5000),
    "atom-delayer": dict(max_delay_passes=30, max_delay_ms=5000),
}  # fmt: skip


@pytest.mark.parametrize("text", FULL)
def test_every_knob_is_settable(text: str) -> None:
    policy = make_policy(text)
    for attr, value in FULL[text].items():
        assert getattr(policy, attr) == value, (text, attr)
    (mode,) = parse_modes(text)
    assert mode.peer == text and not mode.balance


@pytest.mark.parametrize("name", DEFAULTS)
def test_documented_defaults(name: str) -> None:
    policy = make_policy(name)
    for attr, value in DEFAULTS[name].items():
        assert getattr(policy, attr) == value, (name, attr)


def test_grammar_covers_every_policy() -> None:
    assert {t.partition(":")[0] for t in FULL} == set(POLICIES)
    doc = modes.__doc__ or ""
    (field,) = [f for f in dataclasses.fields(ReplayOptions) if f.name == "mode"]
    help_text = field.metadata["help"]
    for name in POLICIES:
        assert name in doc and name in help_text, name


@pytest.mark.parametrize(
    "text",
    [
        "sglang-delayer:1:2:3:4:5:6:7",
        "trtllm-adp:10:1:0:11",
        "sglang-pdi:0",
        "vllm-align:1:1:0",
    ],
)
def test_out_of_range_knobs_are_one_line_errors(text: str) -> None:
    with pytest.raises(PolicyError) as info:
        make_policy(text)
    assert "\n" not in str(info.value)
    with pytest.raises(ModeError):
        parse_modes(f"off,{text}")
