# SPDX-License-Identifier: Apache-2.0
"""Trace readers of the replay (``--trace FILE``).

Formats (JSONL for a ``.jsonl`` or ``.json`` file or a first non-blank line
that opens a JSON object or array, else the CSV; UTF-8 text, a byte-order
mark is accepted). ``-`` reads standard input; any file is read once, so a
pipe or a FIFO (``--trace <(zcat trace.csv.gz)``) works as a file does.

- Azure LLM inference trace CSV (Azure Public Dataset, e.g.
  ``AzureLLMInferenceTrace_conv.csv``): header
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` (any column order), one request
  per row; ``TIMESTAMP`` is ``YYYY-MM-DD HH:MM:SS[.fffffff]``, rows in
  non-decreasing time order. Arrival = seconds since the first row.
- JSONL: one JSON object per line, blank lines ignored::

      {"arrival_s": 0.25, "prompt_tokens": 812, "output_tokens": 64}
      {"arrival_s": 0.30, "prompt_tokens": 90, "output_tokens": 300, "rank": 1}

  ``arrival_s`` (seconds from the start, non-decreasing), ``prompt_tokens``
  (>= 1) and ``output_tokens`` (>= 1) are required; ``rank`` (optional)
  pins the request to a DP rank (``AsyncLLM.generate(data_parallel_rank=)``),
  otherwise vLLM's DP load balancer chooses. Any other field is an error
  (a typo such as ``rnak`` would otherwise silently unpin the request).

Every reader error is a :class:`~.workload_types.WorkloadError` whose message
names the file and line and says what is wrong, in one line.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.workload_types import (
    ReplayRequest,
    WorkloadError,
)

logger = init_logger(__name__)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: The Azure 2023 conversation trace's header and first three rows
#: (stripped, joined by newlines), SHA-256: the shipped slice and the full
#: trace both begin so, a user's own CSV in the layout does not. Its CC-BY
#: attribution is due for those only, however named or passed (a pipe).
AZURE_2023_CONV_HEAD = (
    "b55348243f22b9cd776126a80a6196604a9b8eea11a0037e12d51f9877e6775a"
)
_AZURE_HEAD_LINES = 4
#: How messages name ``--trace -``.
STDIN = "<stdin>"
#: Every field a JSONL line may carry (the schema above); any other is
#: refused, since a misspelt optional field (``rnak``) was silently dropped.
JSONL_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens", "rank")


def _int_field(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool):
        raise WorkloadError(f"{where}: {name} must be an integer, got {value!r}")
    try:
        number = int(value) if isinstance(value, int) else int(str(value).strip())
    except (TypeError, ValueError):
        raise WorkloadError(
            f"{where}: {name} must be an integer, got {value!r}"
        ) from None
    if number < 0:
        raise WorkloadError(f"{where}: {name} must not be negative, got {number}")
    return number


def _name(path: Path) -> str:
    return STDIN if str(path) == "-" else str(path)


def _open_bytes(path: Path) -> BinaryIO:
    """``path`` opened for reading, ``-`` standard input; a file that cannot
    be opened is a :class:`WorkloadError`."""
    if str(path) == "-":
        return sys.stdin.buffer
    try:
        return path.open("rb")
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory") from None
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror})") from None


def _decoded(name: str, f: BinaryIO) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line of ``f``, decoded as UTF-8
    (a leading byte-order mark is dropped; line ends are kept). A byte that
    is not UTF-8, wherever it is, is a :class:`WorkloadError` naming its
    line, and so is a read error."""
    try:
        for line_no, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise WorkloadError(
                    f"{name}:{line_no}: not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                    f"at column {exc.start + 1})"
                ) from None
            yield line_no, text
    except OSError as exc:  # a read error (e.g. EIO, EISDIR on read)
        raise WorkloadError(f"{name}: cannot read ({exc.strerror})") from None


@contextmanager
def _open_text(path: Path) -> Iterator[Iterator[tuple[int, str]]]:
    """:func:`_decoded` lines of ``path``, closed at the end."""
    f = _open_bytes(path)
    try:
        yield _decoded(_name(path), f)
    finally:
        _close(f)


def _parse_timestamp(text: str, where: str) -> datetime:
    """``YYYY-MM-DD HH:MM:SS[.f...]`` with any number of fractional digits
    (the Azure trace has 7, more than ``datetime`` parses)."""
    raw = text.strip()
    base, _, frac = raw.partition(".")
    try:
        stamp = datetime.strptime(base, "%Y-%m-%d %H:%M:%S")
        if frac:
            if not frac.isdigit():
                raise ValueError
            micro = round(int(frac) / 10 ** len(frac) * 1e6)
            stamp = stamp.replace(microsecond=min(micro, 999_999))
    except ValueError:
        raise WorkloadError(
            f"{where}: TIMESTAMP must look like 2023-11-16 18:15:46.6805900, "
            f"got {raw!r}"
        ) from None
    return stamp


def read_azure_csv(path: Path) -> Iterator[ReplayRequest]:
    """Rows of an Azure LLM inference trace CSV, arrivals relative to the
    first row. Raises :class:`WorkloadError` on a malformed row."""
    with _open_text(path) as lines:
        yield from _azure_rows(_name(path), lines)


def _azure_rows(path: str, lines: Iterator[tuple[int, str]]) -> Iterator[ReplayRequest]:
    reader = csv.reader(text for _, text in lines)
    header = next(reader, None)
    if header is None:
        raise WorkloadError(f"{path}:1: empty file")
    header = [h.strip() for h in header]
    missing = [c for c in AZURE_COLUMNS if c not in header]
    if missing:
        raise WorkloadError(
            f"{path}:1: header lacks column(s) {', '.join(missing)} "
            f"(need {','.join(AZURE_COLUMNS)})"
        )
    cols = {name: header.index(name) for name in AZURE_COLUMNS}
    first: datetime | None = None
    previous: datetime | None = None
    index = 0
    for row in reader:
        line = reader.line_num
        where = f"{path}:{line}"
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise WorkloadError(
                f"{where}: {len(row)} column(s), expected {len(header)} "
                f"({','.join(header)})"
            )
        stamp = _parse_timestamp(row[cols["TIMESTAMP"]], where)
        prompt = _int_field(row[cols["ContextTokens"]], "ContextTokens", where)
        output = _int_field(row[cols["GeneratedTokens"]], "GeneratedTokens", where)
        if previous is not None and stamp < previous:
            raise WorkloadError(
                f"{where}: TIMESTAMP {row[cols['TIMESTAMP']].strip()} is earlier "
                f"than the previous row's (rows must be in time order)"
            )
        first = first or stamp
        previous = stamp
        yield ReplayRequest(
            index, (stamp - first).total_seconds(), prompt, output, None, where
        )
        index += 1


def read_jsonl(path: Path) -> Iterator[ReplayRequest]:
    """Requests of a JSONL workload (format in the module docstring)."""
    with _open_text(path) as lines:
        yield from _jsonl_rows(_name(path), lines)


def _jsonl_rows(path: str, lines: Iterator[tuple[int, str]]) -> Iterator[ReplayRequest]:
    previous = -math.inf
    index = 0
    for line_no, line in lines:
        where = f"{path}:{line_no}"
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise WorkloadError(f"{where}: expected a JSON object")
        unknown = [key for key in obj if key not in JSONL_FIELDS]
        if unknown:
            raise WorkloadError(
                f"{where}: unknown field(s) {', '.join(map(repr, unknown))} "
                f"(accepted: {', '.join(JSONL_FIELDS)})"
            )
        for key in ("arrival_s", "prompt_tokens", "output_tokens"):
            if key not in obj:
                raise WorkloadError(f"{where}: missing field {key!r}")
        arrival = obj["arrival_s"]
        if isinstance(arrival, bool) or not isinstance(arrival, int | float):
            raise WorkloadError(f"{where}: arrival_s must be a number, got {arrival!r}")
        if not math.isfinite(arrival) or arrival < 0:
            raise WorkloadError(
                f"{where}: arrival_s must be a finite number >= 0, got {arrival}"
            )
        if arrival < previous:
            raise WorkloadError(
                f"{where}: arrival_s {arrival} is earlier than the previous "
                f"line's {previous} (lines must be in time order)"
            )
        previous = arrival
        prompt = _int_field(obj["prompt_tokens"], "prompt_tokens", where)
        output = _int_field(obj["output_tokens"], "output_tokens", where)
        rank = obj.get("rank")
        if rank is not None:
            rank = _int_field(rank, "rank", where)
        yield ReplayRequest(index, float(arrival), prompt, output, rank, where)
        index += 1


def read_trace(path: Path) -> tuple[str, bool, Iterator[ReplayRequest]]:
    """``(kind, azure, requests)`` of a trace file in either format, ``-``
    standard input; ``azure``: the CSV is (a slice of) the Azure trace,
    whose license asks for its attribution. The file is opened and read
    once, so a pipe (``<(...)``, a FIFO, stdin) reads as a file does: the
    kind is sniffed from the lines up to the first non-blank one (after a
    byte-order mark, if any), which the reader then gets back; a line of
    JSON that is not an object then gets the JSONL reader's error, not the
    CSV header's. JSONL for a ``.jsonl`` or ``.json`` name or a line
    opening a JSON object or array."""
    name = _name(path)
    f = _open_bytes(path)
    lines = _decoded(name, f)
    peeked: list[tuple[int, str]] = []
    for item in lines:
        peeked.append(item)
        if item[1].strip():
            break
    else:
        _close(f)
        raise WorkloadError(f"{name}: empty file")
    json_like = peeked[-1][1].lstrip().startswith(("{", "["))
    named = path.suffix.lower() in (".jsonl", ".json")
    kind = "jsonl" if json_like or named else "azure-csv"
    rows = _jsonl_rows if kind == "jsonl" else _azure_rows
    head = [text.strip() for _, text in peeked if text.strip()]
    while kind == "azure-csv" and len(head) < _AZURE_HEAD_LINES:
        more = next(lines, None)
        if more is None:
            break
        peeked.append(more)
        head += [more[1].strip()] if more[1].strip() else []
    digest = hashlib.sha256("\n".join(head).encode()).hexdigest()
    azure = kind == "azure-csv" and digest == AZURE_2023_CONV_HEAD

    def requests() -> Iterator[ReplayRequest]:
        try:
            yield from rows(name, itertools.chain(peeked, lines))
        finally:
            _close(f)

    return kind, azure, requests()


def _close(f: BinaryIO) -> None:
    if f is not sys.stdin.buffer:
        f.close()
