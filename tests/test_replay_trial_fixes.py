# SPDX-License-Identifier: Apache-2.0
"""Replay inputs a user trial found mishandled: outputs that are the input
trace, each refused in one line before any engine starts."""

from __future__ import annotations

import dataclasses
import io
import os
import sys
import threading
from pathlib import Path

import pytest

from vllm_ascend_balance.replay.pipeline.environment import crowded_cores
from vllm_ascend_balance.replay.pipeline.modes import ModeError, parse_modes
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions, parse
from vllm_ascend_balance.replay.pipeline.paths import (
    RUN_DIR_MARKER,
    OutputPathError,
    check_outputs,
)
from vllm_ascend_balance.replay.pipeline.workload import (
    AZURE_ATTRIBUTION,
    RATE_SCALE_MAX,
    RATE_SCALE_MIN,
    Workload,
    WorkloadError,
    builtin_requests,
    load_workload,
    select,
)
from vllm_ascend_balance.tools.cli import main

pytestmark = pytest.mark.lane_scope("release")

AZURE_TRACE = (
    Path(__file__).parent / "data" / "azure_llm_inference_2023_conv_first300.csv"
)
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


def test_an_output_that_is_the_trace_on_stdin_is_refused(tmp_path, capsys, monkeypatch):
    # --trace - < victim.csv --json victim.csv replaced the trace (rc 0).
    victim = tmp_path / "victim.jsonl"
    victim.write_text(TRACE)
    saved = os.dup(0)
    try:
        with victim.open() as stdin:
            os.dup2(stdin.fileno(), 0)  # < victim.jsonl
            monkeypatch.setattr(sys, "stdin", stdin)
            err = _refused(capsys, ["--trace", "-", "--json", str(victim)])
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert f"--json {victim}: is the input trace (--trace -)" in err
    assert victim.read_text() == TRACE


def test_json_and_plot_naming_one_file_are_refused(tmp_path, capsys):
    # --json X --plot X was accepted, and the plot replaced the JSON.
    out = tmp_path / "out.png"
    other = f"{tmp_path}/../{tmp_path.name}/out.png"
    err = _refused(capsys, ["--json", str(out), "--plot", other])
    assert f"--plot {other}: is the --json file (--json {out})" in err
    assert not out.exists()
    out.write_text("keep")  # an existing file, through a link
    (tmp_path / "link.png").symlink_to(out)
    err = _refused(capsys, ["--json", str(out), "--plot", str(tmp_path / "link.png")])
    assert "is the --json file" in err
    assert out.read_text() == "keep"


def test_a_trace_inside_the_run_dirs_subdirectories_is_refused(tmp_path, capsys):
    trace = tmp_path / "model" / "t.jsonl"
    trace.parent.mkdir()
    trace.write_text(TRACE)
    real = ["--engine", "asyncllm", "--mode", "off", "--run-dir", str(tmp_path)]
    err = _refused(capsys, ["--trace", str(trace), *real])
    assert f"--run-dir {tmp_path}: the run replaces model/, which holds" in err
    assert trace.read_text() == TRACE
    # Beside the run's directories, the trace is safe: accepted.
    beside = tmp_path / "t.jsonl"
    os.replace(trace, beside)
    argv = ["--trace", str(beside), "--run-dir", str(tmp_path), "--mode", "off"]
    assert main(["replay", "--engine", "sim", "--repeat", "1", *argv]) == 0
    assert beside.read_text() == TRACE


def test_a_trace_in_a_run_dir_is_refused_only_where_the_run_writes(tmp_path):
    # Any subdirectory was refused (--run-dir ~ with ~/data/t.csv), and so
    # was one with --engine sim, which writes nothing there.
    for sub in ("data", "off-2", "on-1", "model"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "t.jsonl").write_text(TRACE)
        (tmp_path / sub / RUN_DIR_MARKER).touch()  # past the ownership check
    real = ["--engine", "asyncllm", "--mode", "off", "--run-dir", str(tmp_path)]
    real += ["--repeat", "1"]
    for sub in ("data", "off-2", "on-1"):  # --repeat 1: off-1/ only
        check_outputs(parse([*real, "--trace", str(tmp_path / sub / "t.jsonl")]))
    check_outputs(
        parse([*real, "--engine", "sim", "--trace", f"{tmp_path}/model/t.jsonl"])
    )
    with pytest.raises(OutputPathError, match="the run replaces off-2/"):
        trace = str(tmp_path / "off-2" / "t.jsonl")
        check_outputs(parse([*real, "--repeat", "2", "--trace", trace]))


@pytest.mark.parametrize(
    "text, words",
    [
        ("on+queued-leader+throttled", "two policies (queued-leader and throttled)"),
        ("off,on+throttled+throttled:8", "throttled given twice; keep one"),
        ("on+queued-leader+queued-leader", "queued-leader given twice; keep one"),
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


def _load(trace: str) -> Workload:
    return load_workload(
        trace, seed=0, start_s=0.0, duration_s=None, limit=None, rate_scale=1.0,
        max_model_len=16384, dp_size=2, clip=True,
    )  # fmt: skip


def test_a_trace_through_a_fifo_is_read_once(tmp_path):
    fifo = tmp_path / "trace"
    os.mkfifo(fifo)
    data = AZURE_TRACE.read_bytes()

    def feed() -> None:
        with open(fifo, "wb") as w:  # blocks until the reader opens it
            w.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    workload = _load(str(fifo))
    writer.join(timeout=10)
    assert workload.kind == "azure-csv"
    assert len(workload.requests) == len(_load(str(AZURE_TRACE)).requests)


def test_trace_dash_reads_stdin(monkeypatch):
    stdin = io.TextIOWrapper(io.BytesIO(TRACE.encode() * 2))
    monkeypatch.setattr(sys, "stdin", stdin)
    workload = _load("-")
    assert (workload.kind, workload.source, len(workload.requests)) == (
        "jsonl",
        "<stdin>",
        2,
    )
    assert not stdin.closed  # not ours to close


def test_the_attribution_is_for_the_azure_trace_only(tmp_path):
    assert _load(str(AZURE_TRACE)).attribution == AZURE_ATTRIBUTION
    # The shipped slice under another name, with CRLF line ends or not.
    copy = tmp_path / "mine.csv"
    copy.write_text(AZURE_TRACE.read_text().replace("\r\n", "\n"))
    assert _load(str(copy)).attribution == AZURE_ATTRIBUTION
    own = tmp_path / "own.csv"
    own.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-01-01 00:00:00,100,10\n2024-01-01 00:00:01,200,20\n"
    )
    workload = _load(str(own))
    assert workload.kind == "azure-csv" and workload.attribution is None
    assert _load(str(tmp_path / "../" / tmp_path.name / "own.csv")).attribution is None


def test_an_unknown_jsonl_field_is_refused(tmp_path, capsys):
    # "rnak" (a typo of rank) was silently dropped: the request ran unpinned.
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE + '{"arrival_s": 0, "prompt_tokens": 10, '
                     '"output_tokens": 5, "rnak": 1}\n')  # fmt: skip
    err = _refused(capsys, ["--trace", str(trace)])
    assert (
        f"{trace}:2: unknown field(s) 'rnak' "
        "(accepted: arrival_s, prompt_tokens, output_tokens, rank)"
    ) in err


@pytest.mark.parametrize(
    "scale, bound",
    [("1e-300", ">= 0.001"), ("0.0009", ">= 0.001"), ("1001", "<= 1000"),
     ("nan", ">= 0.001")],
)  # fmt: skip
def test_a_rate_scale_out_of_range_is_refused(capsys, scale, bound):
    # 1e-300 was accepted: the banner gave a 300-digit modeled makespan.
    err = _refused(capsys, ["--rate-scale", scale])
    assert f"--rate-scale must be a finite number {bound}, got {float(scale)}" in err


def test_the_rate_scale_bounds_are_accepted_and_agree():
    reqs = builtin_requests(seed=0)
    for scale in (RATE_SCALE_MIN, RATE_SCALE_MAX):
        assert len(select(reqs, rate_scale=scale)) == len(reqs)
        with pytest.raises(WorkloadError, match="from 0.001 to 1000"):
            select(reqs, rate_scale=scale * (0.5 if scale < 1 else 2))
    # The option's bounds (checked at parse time) are the library's.
    meta = {f.name: f.metadata for f in dataclasses.fields(ReplayOptions)}
    assert (meta["rate_scale"]["ge"], meta["rate_scale"]["le"]) == (
        RATE_SCALE_MIN,
        RATE_SCALE_MAX,
    )


def test_an_existing_unwritable_output_names_the_file(tmp_path, capsys):
    # /proc/version exists; the refusal blamed its directory ("cannot write
    # in /proc (No such file or directory)").
    if not os.path.isfile("/proc/version"):
        pytest.skip("needs Linux /proc")
    err = _refused(capsys, ["--json", "/proc/version"])
    assert "--json /proc/version: " in err
    if "not writable" not in err:  # a non-root user fails os.access first
        assert "the file exists but cannot be written (" in err
        assert "pick another file" in err
    # An existing writable file is accepted by the check, untouched.
    out = tmp_path / "out.json"
    out.write_text("keep")
    check_outputs(parse(["--json", str(out)]))
    assert out.read_text() == "keep"


def test_a_run_dir_with_foreign_files_is_refused(tmp_path, capsys):
    # DIR/model/config.json (a user's) was silently overwritten, and so were
    # an earlier run's records.
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text("{}")
    argv = ["--run-dir", str(tmp_path), "--mode", "off", "--repeat", "1"]
    err = _refused(capsys, ["--engine", "asyncllm", *argv])
    assert f"--run-dir {tmp_path}: model/ would be overwritten but holds files" in err
    assert "pick a new or empty --run-dir" in err
    assert config.read_text() == "{}"
    config.unlink()
    (tmp_path / "off-1").mkdir()
    (tmp_path / "off-1" / "notes.txt").write_text("mine")
    err = _refused(capsys, ["--engine", "asyncllm", *argv])
    assert "off-1/ would be overwritten" in err
    # This tool's mark in it: its own earlier run dir is reused.
    (tmp_path / "off-1" / RUN_DIR_MARKER).touch()
    check_outputs(parse(["--engine", "asyncllm", *argv]))


def test_a_run_dir_with_the_sim_engine_says_it_stays_empty(tmp_path, capsys):
    argv = ["--engine", "sim", "--repeat", "1", "--mode", "off"]
    assert main(["replay", *argv, "--run-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"--run-dir {tmp_path}: --engine sim writes nothing there" in err
    assert not list(tmp_path.iterdir())


def test_the_real_engine_marks_its_run_dir(tmp_path, monkeypatch):
    from vllm_ascend_balance.replay.real import engine

    async def stop(*args: object) -> float:
        raise RuntimeError("stop before any deployment")

    monkeypatch.setattr(engine, "_deploy_and_send", stop)
    options = parse(["--run-dir", str(tmp_path / "run"), "--mode", "off"])
    workload = options.load_workload()
    with pytest.raises(RuntimeError, match="stop before"):
        engine.AsyncLLMEngine().run(workload, options.modes()[0], options, 0)
    assert (tmp_path / "run" / "off-1" / RUN_DIR_MARKER).is_file()
    assert (tmp_path / "run" / "model" / RUN_DIR_MARKER).is_file()
    (tmp_path / "run" / "off-1" / "rank0.jsonl").write_text("{}\n")
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    check_outputs(options)  # its own run dir is accepted again


def test_a_run_in_a_users_dir_leaves_the_users_files_protected(tmp_path, monkeypatch):
    # The mark was written at the top of a directory holding a user's
    # off-1/: an 'on' run was rightly accepted, after which '--mode off'
    # was too, and removed the user's off-1/rank0.jsonl.
    from vllm_ascend_balance.replay.real import engine

    async def stop(*args: object) -> float:
        raise RuntimeError("stop before any deployment")

    monkeypatch.setattr(engine, "_deploy_and_send", stop)
    mine = tmp_path / "off-1" / "rank0.jsonl"
    mine.parent.mkdir()
    mine.write_text("rec")
    base = ["--engine", "asyncllm", "--run-dir", str(tmp_path), "--repeat", "1"]
    with pytest.raises(OutputPathError, match="off-1/ would be overwritten"):
        check_outputs(parse([*base, "--mode", "off"]))
    on = parse([*base, "--mode", "on"])
    check_outputs(on)
    with pytest.raises(RuntimeError, match="stop before"):
        engine.AsyncLLMEngine().run(on.load_workload(), on.modes()[0], on, 0)
    with pytest.raises(OutputPathError, match="off-1/ would be overwritten"):
        check_outputs(parse([*base, "--mode", "off"]))
    check_outputs(on)  # the tool's own on-1/ and model/ are reused
    assert mine.read_text() == "rec"
