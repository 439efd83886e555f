# SPDX-License-Identifier: Apache-2.0
"""Replay input: Azure CSV and JSONL readers, their errors, selection,
length checks, the built-in workload; and the CLI's one-line errors."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from vllm_ascend_balance.replay.pipeline.traces import read_azure_csv, read_jsonl
from vllm_ascend_balance.replay.pipeline.workload import (
    AZURE_ATTRIBUTION,
    WorkloadError,
    builtin_requests,
    check_lengths,
    load_workload,
    select,
)
from vllm_ascend_balance.tools.cli import main

pytestmark = pytest.mark.lane_scope("release")

# A slice of the real trace, committed with its attribution (tests/data/README.md).
AZURE_TRACE = (
    Path(__file__).parent / "data" / "azure_llm_inference_2023_conv_first300.csv"
)
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_ROWS = (
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:51.2224670,879,55\n"
)


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _load(path: Path | None, **overrides) -> object:
    kwargs = dict(
        seed=0, start_s=0.0, duration_s=None, limit=None, rate_scale=1.0,
        max_model_len=4096, dp_size=2, clip=False,
    )  # fmt: skip
    kwargs.update(overrides)
    return load_workload(None if path is None else str(path), **kwargs)


def test_azure_csv_reads_arrivals_relative_to_first_row(tmp_path):
    reqs = list(read_azure_csv(_write(tmp_path, HEADER + GOOD_ROWS)))
    assert [r.prompt_tokens for r in reqs] == [374, 396, 879]
    assert [r.output_tokens for r in reqs] == [44, 109, 55]
    assert reqs[0].arrival_s == 0.0
    assert reqs[1].arrival_s == pytest.approx(4.314579)
    assert reqs[2].origin.endswith("trace.csv:4")


def test_azure_csv_column_order_from_header(tmp_path):
    text = "GeneratedTokens,TIMESTAMP,ContextTokens\n7,2023-11-16 18:15:46,30\n"
    (req,) = read_azure_csv(_write(tmp_path, text))
    assert (req.prompt_tokens, req.output_tokens) == (30, 7)


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("TIMESTAMP,ContextTokens\n", 1, "lacks column(s) GeneratedTokens"),
        (HEADER + "2023-11-16 18:15:46.68,374\n", 2, "2 column(s), expected 3"),
        (
            HEADER + "2023-11-16 18:15:46.68,abc,44\n",
            2,
            "ContextTokens must be an integer",
        ),
        (
            HEADER + "2023-11-16 18:15:46.68,374,-5\n",
            2,
            "GeneratedTokens must not be negative",
        ),
        (HEADER + "yesterday,374,5\n", 2, "TIMESTAMP must look like"),
        (
            GOOD_ROWS.join([HEADER, "2023-11-16 18:15:40.0,1,1\n"]),
            5,
            "earlier than the previous",
        ),
    ],
    ids=[
        "missing-column",
        "short-row",
        "non-numeric",
        "negative",
        "bad-time",
        "out-of-order",
    ],
)
def test_azure_csv_errors_name_file_and_line(tmp_path, text, line, words):
    path = _write(tmp_path, text)
    with pytest.raises(WorkloadError) as info:
        list(read_azure_csv(path))
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message
    assert "\n" not in message


def test_jsonl_format_with_pinned_ranks(tmp_path):
    path = _write(
        tmp_path,
        '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 3}\n\n'
        '{"arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 4, "rank": 1}\n',
        "w.jsonl",
    )
    reqs = list(read_jsonl(path))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.rank) for r in reqs] == [
        (0.0, 10, 3, None),
        (0.5, 20, 4, 1),
    ]
    assert reqs[1].origin == f"{path}:3"


@pytest.mark.parametrize(
    "line, words",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"arrival_s": 1, "prompt_tokens": 3}', "missing field 'output_tokens'"),
        (
            '{"arrival_s": "soon", "prompt_tokens": 3, "output_tokens": 1}',
            "arrival_s must be a number",
        ),
        (
            '{"arrival_s": 1, "prompt_tokens": 3.5, "output_tokens": 1}',
            "prompt_tokens must be an integer",
        ),
        (
            '{"arrival_s": 1, "prompt_tokens": 3, "output_tokens": -1}',
            "must not be negative",
        ),
        (
            '{"arrival_s": 0.5, "prompt_tokens": 3, "output_tokens": 1}',
            "earlier than the previous",
        ),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, line, words):
    first = '{"arrival_s": 0.75, "prompt_tokens": 1, "output_tokens": 1}\n'
    path = _write(tmp_path, first + line + "\n", "w.jsonl")
    with pytest.raises(WorkloadError) as info:
        list(read_jsonl(path))
    assert str(info.value).startswith(f"{path}:2: ")
    assert words in str(info.value)


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("w.jsonl", "[1, 2, 3]\n", ":1: expected a JSON object"),
        ("w.txt", "[1, 2, 3]\n", ":1: expected a JSON object"),
        ("w.jsonl", "TIMESTAMP,ContextTokens\n", ":1: not valid JSON"),
        ("w.csv", "when,ContextTokens\n", ":1: header lacks column(s) TIMESTAMP"),
    ],
)
def test_the_format_is_the_files_own(tmp_path, name, text, words):
    # A JSON line that is not an object, or any line of a .jsonl file, gets
    # the JSONL reader's error (it once got the CSV header's).
    path = _write(tmp_path, text, name)
    with pytest.raises(WorkloadError) as info:
        _load(path)
    assert words in str(info.value)


def test_selection_window_limit_and_rate_scale(tmp_path):
    rows = "".join(
        f'{{"arrival_s": {t}, "prompt_tokens": 5, "output_tokens": 2}}\n'
        for t in (0, 1, 2, 3, 4, 5)
    )
    reqs = list(read_jsonl(_write(tmp_path, rows, "w.jsonl")))
    chosen = select(reqs, start_s=1.0, duration_s=3.0)
    assert [r.arrival_s for r in chosen] == [0.0, 1.0, 2.0]  # re-based at 1 s
    assert [r.index for r in chosen] == [0, 1, 2]
    assert len(select(reqs, start_s=1.0, limit=2)) == 2
    assert [r.arrival_s for r in select(reqs, rate_scale=2.0)][:3] == [0.0, 0.5, 1.0]


def test_selection_stops_before_a_bad_row_outside_the_window(tmp_path):
    path = _write(tmp_path, HEADER + GOOD_ROWS + "garbage,1,1\n")
    assert len(select(read_azure_csv(path), limit=3)) == 3


def test_empty_selection_says_so(tmp_path):
    path = _write(tmp_path, HEADER + GOOD_ROWS)
    with pytest.raises(WorkloadError, match="selection is empty"):
        _load(path, start_s=100.0)


def test_too_long_rejected_with_count_or_clipped(tmp_path):
    path = _write(
        tmp_path,
        HEADER + "2023-11-16 18:15:46,4000,200\n2023-11-16 18:15:47,100,10\n"
        "2023-11-16 18:15:48,5000,1\n",
    )
    with pytest.raises(WorkloadError) as info:
        _load(path)
    assert str(info.value).startswith("2 request(s) do not fit")
    assert "zero" not in str(info.value)
    assert "longest 5000+1" in str(info.value) and "--clip" in str(info.value)
    workload = _load(path, clip=True)
    assert workload.clipped == 2
    for r in workload.requests:
        assert r.prompt_tokens + r.output_tokens <= 4096
        assert r.prompt_tokens >= 1 and r.output_tokens >= 1
    assert workload.requests[0].output_tokens == 200  # output kept, prompt cut


def test_zero_tokens_need_clip():
    reqs = select(builtin_requests(0))[:1]
    from dataclasses import replace

    zero = [replace(reqs[0], output_tokens=0)]
    with pytest.raises(
        WorkloadError, match="builtin: output_tokens must be >= 1, got 0"
    ):
        check_lengths(zero, 4096, 2, clip=False)
    fixed, clipped = check_lengths(zero, 4096, 2, clip=True)
    assert clipped == 1 and fixed[0].output_tokens == 1


def test_pinned_rank_must_exist(tmp_path):
    path = _write(
        tmp_path,
        '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, "rank": 2}\n',
        "w.jsonl",
    )
    with pytest.raises(WorkloadError, match="rank 2 is outside the DP ranks 0..1"):
        _load(path)


def test_builtin_workload_is_seeded_and_bursty():
    a, b = builtin_requests(3), builtin_requests(3)
    assert a == b and a != builtin_requests(4)
    arrivals = [r.arrival_s for r in a]
    assert arrivals == sorted(arrivals)
    gaps = [y - x for x, y in zip(arrivals, arrivals[1:], strict=False)]
    assert sum(g > 5 for g in gaps) == 4  # five bursts
    assert {r.output_tokens >= 200 for r in a} == {True, False}  # mixed lengths


def test_real_azure_trace_slice_reads_and_attributes():
    workload = _load(AZURE_TRACE, duration_s=60.0, max_model_len=16384, clip=True)
    assert 100 < len(workload.requests) < 600
    assert workload.kind == "azure-csv"
    assert (
        workload.attribution == AZURE_ATTRIBUTION and "CC-BY 4.0" in AZURE_ATTRIBUTION
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--trace", "{missing}"], "no such file"),
        (["--trace", "{bad}"], "bad.csv:2: ContextTokens must be an integer"),
        (["--trace", "{good}", "--start", "999"], "the selection is empty"),
        (["--trace", "{good}", "--max-model-len", "100"], "do not fit"),
        (["--rate-scale", "0"], "--rate-scale must be a finite number >= 0.001, got 0"),
        (["--time-scale", "-1"], "--time-scale must be a finite number > 0, got -1"),
        (["--step-ms", "-3"], "--step-ms must be a finite number >= 0, got -3"),
        (["--trace", "{tmp}"], "is a directory"),
        (["--time-scale", "nan"], "--time-scale must be a finite number > 0"),
        (["--rate-scale", "inf"], "--rate-scale must be a finite number >= 0.001"),
        (["--decode-kv-ms-per-1k", "nan"], "--decode-kv-ms-per-1k must be a finite"),
        (["--start", "nan"], "--start must be a finite number >= 0"),
        (["--duration", "inf"], "--duration must be a finite number > 0"),
        (["--json", "/proc/out.json"], "--json /proc/out.json: cannot write in /proc"),
        (["--json", "{tmp}"], "--json {tmp}: is a directory"),
        (["--plot", "{tmp}/no/p.png"], "--plot {tmp}/no/p.png: directory"),
        (["--plot", "{tmp}/p.xyz"], "unsupported image format .xyz"),
        (["--run-dir", "{tmp}/no/run"], "--run-dir {tmp}/no/run: directory"),
        (["--run-dir", "{bad}"], "--run-dir {bad}: not a directory"),
    ],
)
def test_cli_input_errors_are_one_line(tmp_path, capsys, argv, words):
    files = {
        "missing": tmp_path / "nope.csv",
        "bad": _write(tmp_path, HEADER + "2023-11-16 18:15:46,x,1\n", "bad.csv"),
        "good": _write(tmp_path, HEADER + GOOD_ROWS, "good.csv"),
        "tmp": tmp_path,
    }
    names = {k: str(v) for k, v in files.items()}
    argv = [a.format(**names) for a in argv]
    before = set(Path(tempfile.gettempdir()).glob("vab-replay-*"))
    assert main(["replay", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vllm-ascend-balance replay: error: ")
    assert words.format(**names) in err
    assert "\n" not in err and "Traceback" not in err
    # Nothing left behind: no temporary work dir, no run dir, no probe file.
    assert set(Path(tempfile.gettempdir()).glob("vab-replay-*")) <= before
    assert not (tmp_path / "run").exists()
    assert not list(tmp_path.glob(".vab-write-test-*"))


def test_a_bad_byte_anywhere_names_its_line(tmp_path):
    rows = "".join(
        f"2023-11-16 18:15:{46 + i // 1000}.{i:04d},10,5\n" for i in range(900)
    )
    path = tmp_path / "trace.csv"
    path.write_bytes((HEADER + rows).encode() + b"2023-11-16 18:17:00,1\xff0,5\n")
    assert path.stat().st_size > 8192  # past any sniffing buffer
    with pytest.raises(WorkloadError) as info:
        list(read_azure_csv(path))
    assert str(info.value) == f"{path}:902: not UTF-8 text (byte 0xff at column 22)"
    jsonl = tmp_path / "w.jsonl"
    jsonl.write_bytes(
        b'{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n\xc3(\n'
    )
    with pytest.raises(WorkloadError, match=r"w\.jsonl:2: not UTF-8 text"):
        list(read_jsonl(jsonl))
    first = tmp_path / "first.csv"
    first.write_bytes(b"\xff\xfeT\x00")  # UTF-16: detection says so too
    with pytest.raises(WorkloadError, match=r"first\.csv:1: not UTF-8 text"):
        _load(first)


@pytest.mark.parametrize("name", ["trace.csv", "w.jsonl"])
def test_byte_order_mark_is_accepted(tmp_path, name):
    text = (
        HEADER + GOOD_ROWS
        if name.endswith(".csv")
        else '\n{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 3}\n'
    )
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    workload = _load(path)
    assert workload.kind == ("azure-csv" if name.endswith(".csv") else "jsonl")
    assert workload.requests[0].prompt_tokens in (374, 10)


@pytest.mark.parametrize(
    "text, name, words",
    [
        (HEADER + "2023-11-16 18:15:46,0,5\n", "z.csv", "z.csv:2: ContextTokens must"),
        (
            HEADER + "2023-11-16 18:15:46,5,0\n",
            "z.csv",
            "z.csv:2: GeneratedTokens must",
        ),
        (
            '{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 1}\n',
            "z.jsonl",
            "z.jsonl:1: prompt_tokens must",
        ),
    ],
)
def test_zero_token_count_is_named(tmp_path, text, name, words):
    path = _write(tmp_path, text, name)
    with pytest.raises(WorkloadError) as info:
        _load(path)
    assert str(info.value).startswith(f"{tmp_path}/{words} be >= 1, got 0")
    assert "max-model-len" not in str(info.value)
    assert _load(path, clip=True).clipped == 1
