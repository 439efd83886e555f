# SPDX-License-Identifier: Apache-2.0
"""Replay options: defined once in a dataclass that drives argparse; the
``--mode`` grammar; the run order; how modes and options reach vLLM's engine
arguments (built with the installed vLLM's own ``AsyncEngineArgs``)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from vllm_ascend_balance.replay.model.cost import REPLAY_CONFIG_KEY
from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model
from vllm_ascend_balance.replay.pipeline import options as replay_options
from vllm_ascend_balance.replay.pipeline.cli import run_order
from vllm_ascend_balance.replay.pipeline.cost import CostModel
from vllm_ascend_balance.replay.pipeline.modes import Mode, ModeError, parse_modes
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions, parse
from vllm_ascend_balance.replay.pipeline.records import RunStatus
from vllm_ascend_balance.replay.real.deployment import engine_args

# why: the installed vLLM's AsyncEngineArgs take the modes' arguments
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    replay_options.add_arguments(parser)
    return parser


def _option_fields() -> list[dataclasses.Field]:
    own = [f for f in dataclasses.fields(ReplayOptions) if f.name != "cost"]
    return own + list(dataclasses.fields(CostModel))


def test_every_field_is_one_option_with_the_dataclass_default():
    parser = _parser()
    flags = [s for a in parser._actions for s in a.option_strings if s != "-h"]
    assert len(flags) == len(set(flags))  # nothing defined twice
    fields = _option_fields()
    assert sorted(flags) == sorted(
        ["--help"] + ["--" + f.name.replace("_", "-") for f in fields]
    )
    assert parse([]) == ReplayOptions()  # parser defaults = dataclass defaults
    for f in fields:
        assert f.metadata["help"], f"{f.name} has no help"


def test_values_are_typed_and_nested_cost_model_is_filled():
    opts = parse(
        ["--dp", "4", "--step-ms", "30", "--clip", "--duration", "60",
         "--balance-max-frozen-steps", "8", "--mode", "on,interval:2"]
    )  # fmt: skip
    assert opts.dp == 4 and opts.clip and opts.duration == 60.0
    assert opts.cost == CostModel(step_ms=30.0)
    assert opts.balance_max_frozen_steps == 8
    assert [m.label for m in opts.modes()] == ["on", "interval:2"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--dp", "0"], "--dp must be >= 1, got 0"),
        (["--repeat", "0"], "--repeat must be >= 1, got 0"),
        (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
        (
            ["--balance-max-frozen-steps", "0"],
            "--balance-max-frozen-steps must be >= 1",
        ),
        (["--time-scale", "nan"], "--time-scale must be a finite number > 0"),
        (["--mode", "on,sometimes"], "unknown mode 'sometimes'"),
        (["--mode", "interval:0"], "interval:N needs an integer N >= 1"),
        (["--mode", ","], "no mode given"),
        (["--mode", "on,"], "an empty entry"),
        (
            ["--max-num-batched-tokens", "8", "--max-num-seqs", "16"],
            "--max-num-batched-tokens \\(8\\) must be >= --max-num-seqs \\(16\\)",
        ),
        (["--dp", "1", "--mode", "off,on"], "--dp 1: balance .* use --dp 2"),
        (["--mode", "off,sglang-delayer:x"], "expected sglang-delayer\\[:N"),
        (
            ["--engine", "asyncllm", "--mode", "off,trtllm-adp"],
            "--mode trtllm-adp: this peer ships its own router, .* "
            "add --peer-router shared or --engine sim",
        ),
        (
            ["--engine", "asyncllm", "--routing", "trtllm-adp"],
            "--routing trtllm-adp: .* simulated engine only .* --engine sim",
        ),
        (
            ["--engine", "sim", "--dp", "1", "--mode", "off,atom-delayer"],
            "--mode atom-delayer: a peer policy coordinates DP ranks .* --dp 2",
        ),
        (["--mode", "on+sglang-delayer"], "a peer policy runs alone"),
        (
            ["--mode", "off,on+max-held:65537"],
            "max-held:N takes N from 1 to 65536, as the balance setting does",
        ),
        (
            ["--balance-max-frozen-steps", "65537"],
            "--balance-max-frozen-steps must be <= 65536, got 65537",
        ),
        (
            ["--mode", "off,on+max-held:64", "--balance-max-frozen-steps", "64"],
            "--balance-max-frozen-steps 64: no mode of --mode off,on\\+max-held:64 "
            "takes it .* e.g. on\\+max-frozen:64",
        ),
        (
            ["--mode", "off,interval:2", "--balance-max-frozen-steps", "8"],
            "--balance-max-frozen-steps 8: no mode of --mode off,interval:2 takes it",
        ),
    ],
)
def test_out_of_range_values_are_one_line_errors(argv, words):
    with pytest.raises(ValueError, match=words):
        parse(argv)


def test_peers_run_on_the_real_engine_behind_vllms_router():
    # A peer without a router of its own needs nothing; TensorRT-LLM's needs
    # the shared router said, since the real front end is vLLM's.
    parse(["--engine", "asyncllm", "--mode", "off,interval:2,atom-delayer:4"])
    opts = parse(
        ["--engine", "asyncllm", "--peer-router", "shared", "--mode", "off,trtllm-adp"]
    )
    assert [m.peer for m in opts.modes()] == [None, "trtllm-adp"]


def test_mode_grammar():
    assert parse_modes("both") == [Mode("off"), Mode("on", True)]
    assert parse_modes("aa") == [Mode("off"), Mode("off'")]
    assert parse_modes("off,on+interval:4") == [
        Mode("off"),
        Mode("on+interval:4", True, 4),
    ]
    on, on2 = parse_modes("on,on")
    assert on.config == on2.config and on2.label == "on'"  # an A/A pair
    with pytest.raises(ModeError):
        parse_modes("off+on")
    peer, peer2 = parse_modes("vllm-align:30:2,vllm-align:30:2")
    assert peer == Mode("vllm-align:30:2", peer="vllm-align:30:2")
    assert peer.config == peer2.config and not peer.balance
    with pytest.raises(ModeError, match="unknown peer policy|unknown mode"):
        parse_modes("off,sglang")


def test_mode_grammar_of_the_balance_settings():
    bounded, held, queued = parse_modes(
        "on+max-frozen:64,on+max-held:16,on+queued-leader+max-held:64"
    )
    assert bounded.bounds(None) == {"balance_max_frozen_steps": 64}
    assert held.bounds(8) == {"balance_max_held_steps": 16}  # its own bound
    assert queued.bounds(None) == {
        "balance_policy": "queued_leader",
        "balance_max_held_steps": 64,
    }
    assert parse_modes("on")[0].bounds(8) == {"balance_max_frozen_steps": 8}
    assert Mode("off").bounds(8) == {}
    assert len({m.config for m in (bounded, held, queued)}) == 3
    for bad, words in [
        ("max-held:4", "needs balance on"),
        ("on+queued-leader+max-frozen:4+max-held:4", "keep one"),
        ("on+max-held:0", "N >= 1"),
    ]:
        with pytest.raises(ModeError, match=words):
            parse_modes(bad)


def test_mode_grammar_of_the_throttled_policy():
    plain, tuned, frozen = parse_modes(
        "on+throttled,on+throttled:32+max-held:16,on+throttled+max-frozen:4"
    )
    assert plain.bounds(8) == {"balance_policy": "throttled"}  # its own bound
    assert tuned.bounds(None) == {
        "balance_policy": "throttled",
        "balance_align_window": 32,
        "balance_max_held_steps": 16,
    }
    # A bound the mode names replaces the policy's own.
    assert frozen.bounds(None) == {
        "balance_policy": "throttled",
        "balance_max_frozen_steps": 4,
    }
    assert len({m.config for m in (plain, tuned, frozen)}) == 3
    for bad, words in [
        ("throttled", "needs balance on"),
        ("on+throttled:0", "balance_align_window must be an integer from 1"),
        ("on+throttled:x", "balance_align_window must be an integer"),
        ("on+throttled:8:9", r"expected on\+throttled\[:ALIGN_WINDOW\]"),
        ("on+throttled+max-frozen:4+max-held:4", "keep one"),
    ]:
        with pytest.raises(ModeError, match=words):
            parse_modes(bad)


@pytest.mark.parametrize("name", ["aligned", "cohort", "batched"])
def test_retired_policies_are_refused_naming_throttled(name: str) -> None:
    """Retired on purpose (folded into ``throttled``): each name, with or
    without knobs and bounds, is refused in one line naming the
    replacement."""
    for text in (f"on+{name}", f"on+{name}:8+max-held:16"):
        with pytest.raises(ModeError, match="retired; use on\\+throttled") as err:
            parse_modes(f"off,{text}")
        assert "\n" not in str(err.value)


def test_runs_alternate_abba():
    a, b, c = parse_modes("off,on,interval:2")
    order = run_order([a, b], 4)
    assert order == [(a, 0), (b, 0), (b, 1), (a, 1), (a, 2), (b, 2), (b, 3), (a, 3)]
    assert [m.label for m, _ in run_order([a, b, c], 2)] == [
        "off", "on", "interval:2", "interval:2", "on", "off",
    ]  # fmt: skip


def _engine_args(tmp_path: Path, argv: list[str], mode: Mode):
    opts = parse(argv)
    model = write_tiny_moe_model(tmp_path / "model")
    return engine_args(opts, mode, tmp_path / "run", model)


def test_modes_reach_vllm_engine_args(tmp_path):
    on = _engine_args(tmp_path, ["--balance-max-frozen-steps", "8"], Mode("on", True))
    scheduler = on.additional_config["scheduler_config"]
    assert scheduler == {
        "enable_balance_scheduling": True,
        "balance_max_frozen_steps": 8,
    }
    assert REPLAY_CONFIG_KEY in on.additional_config
    off = _engine_args(tmp_path, ["--balance-max-frozen-steps", "8"], Mode("off"))
    # The bounded freeze is a balance setting: not passed when balance is off.
    assert off.additional_config["scheduler_config"] == {
        "enable_balance_scheduling": False
    }
    if not _has_prefill_schedule_interval():
        # Older vLLM (the ascend lane's): the interval mode is refused in one line.
        with pytest.raises(ValueError, match="prefill_schedule_interval"):
            _engine_args(tmp_path, [], Mode("on+interval:4", True, 4))
        return
    interval = _engine_args(tmp_path, [], Mode("on+interval:4", True, 4))
    assert interval.prefill_schedule_interval == 4
    default = dataclasses.fields(type(off))
    assert off.prefill_schedule_interval == next(
        f.default for f in default if f.name == "prefill_schedule_interval"
    )


def _has_prefill_schedule_interval() -> bool:
    from vllm.engine.arg_utils import EngineArgs

    return "prefill_schedule_interval" in {
        f.name for f in dataclasses.fields(EngineArgs)
    }


def test_prefill_schedule_interval_is_an_engine_arg_of_this_vllm():
    """Issue 12's comparison needs vLLM's own knob: introspected, not
    assumed from a version number."""
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

    if not _has_prefill_schedule_interval():
        pytest.skip(
            "this vLLM has no prefill_schedule_interval engine argument (it "
            "came in a later release); the interval modes are refused here"
        )

    for cls in (EngineArgs, AsyncEngineArgs):
        assert "prefill_schedule_interval" in {f.name for f in dataclasses.fields(cls)}


def test_run_status_is_an_enum_with_a_separate_cause():
    assert {s.value for s in RunStatus} == {"ok", "interrupted", "failed"}
    assert RunStatus("failed") is RunStatus.FAILED
