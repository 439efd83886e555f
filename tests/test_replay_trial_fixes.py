# SPDX-License-Identifier: Apache-2.0
"""Replay inputs a user trial found mishandled: outputs that are the input
trace, each refused in one line before any engine starts."""

from __future__ import annotations

import os

import pytest

from vllm_ascend_balance.replay.pipeline.environment import crowded_cores
from vllm_ascend_balance.replay.pipeline.modes import ModeError, parse_modes
from vllm_ascend_balance.replay.pipeline.options import parse
from vllm_ascend_balance.tools.cli import main

pytestmark = pytest.mark.lane_scope("release")

TRACE = '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 3}\n'


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["replay", "--engine", "sim", "--repeat", "1", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vllm-ascend-balance replay: error: ")
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_an_output_that_is_the_trace_is_refused(tmp_path, capsys, option):
    trace = tmp_path / "t.png"  # a name --plot accepts, read as JSONL (content)
    trace.write_text(TRACE)
    link = tmp_path / "link.png"
    link.symlink_to(trace)
    for out in (str(trace), str(link), f"{tmp_path}/../{tmp_path.name}/t.png"):
        err = _refused(capsys, ["--trace", str(trace), option, out])
        assert f"{option} {out}: is the input trace (--trace {trace})" in err
    assert trace.read_text() == TRACE


def test_a_trace_inside_the_run_dirs_subdirectories_is_refused(tmp_path, capsys):
    trace = tmp_path / "model" / "t.jsonl"
    trace.parent.mkdir()
    trace.write_text(TRACE)
    err = _refused(capsys, ["--trace", str(trace), "--run-dir", str(tmp_path)])
    assert f"--run-dir {tmp_path}: holds the input trace" in err
    assert trace.read_text() == TRACE
    # Beside the run's directories, the trace is safe: accepted.
    beside = tmp_path / "t.jsonl"
    os.replace(trace, beside)
    argv = ["--trace", str(beside), "--run-dir", str(tmp_path), "--mode", "off"]
    assert main(["replay", "--engine", "sim", "--repeat", "1", *argv]) == 0
    assert beside.read_text() == TRACE


@pytest.mark.parametrize(
    "text, words",
    [
        ("on+queued-leader+throttled", "two policies (queued-leader and throttled)"),
        ("off,on+throttled+throttled:8", "two policies (throttled and throttled)"),
        ("on+max-frozen:5+max-frozen:6", "max-frozen given twice; keep one"),
        ("on+max-held:5+max-held:5", "max-held given twice"),
        ("on+interval:2+interval:3", "interval given twice"),
        ("on+on", "on given twice"),
        ("aa,on", "the shorthand aa (= off,off) works only alone; "),
        ("off,both", "e.g. --mode off,off,on"),
    ],
)
def test_a_mode_names_each_setting_once_and_shorthands_stand_alone(text, words):
    with pytest.raises(ModeError) as info:
        parse_modes(text)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert "unknown mode" not in str(info.value)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--dp", "257"], "--dp must be <= 256, got 257"),
        (["--max-model-len", "1048577"], "--max-model-len must be <= 1048576"),
        (
            ["--max-model-len", "99999999999999999999"],
            "--max-model-len must be <= 1048576",
        ),
    ],
)
def test_deployment_sizes_are_bounded(argv, words):
    with pytest.raises(ValueError, match=words):
        parse(argv)
    # The limits themselves are accepted.
    parse(["--dp", "256", "--max-model-len", "1048576"])


def test_the_real_engine_warns_when_ranks_crowd_the_cores():
    assert crowded_cores(4, "asyncllm", cores=2) is None  # the documented example
    assert crowded_cores(256, "sim", cores=2) is None
    warning = crowded_cores(64, "asyncllm", cores=2)
    assert warning is not None and "\n" not in warning
    assert "--dp 64 starts 64 engine processes on 2 CPU core(s)" in warning
    assert "--engine sim" in warning
