# SPDX-License-Identifier: Apache-2.0
"""Trace readers of the replay (``--trace FILE``).

Formats (JSONL for a ``.jsonl`` or ``.json`` file or a first non-blank line
that opens a JSON object or array, else the CSV; UTF-8 text, a byte-order
mark is accepted):

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
  otherwise vLLM's DP load balancer chooses.

Every reader error is a :class:`~.workload_types.WorkloadError` whose message
names the file and line and says what is wrong, in one line.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.workload_types import (
    ReplayRequest,
    WorkloadError,
)

logger = init_logger(__name__)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


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


@contextmanager
def _open_text(path: Path) -> Iterator[Iterator[tuple[int, str]]]:
    """``(line number, text)`` of every line of ``path``, decoded as UTF-8
    (a leading byte-order mark is dropped; line ends are kept). A byte that
    is not UTF-8, wherever it is, is a :class:`WorkloadError` naming its
    line; a file that cannot be opened is one too."""
    try:
        f = path.open("rb")
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory") from None
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror})") from None

    def lines() -> Iterator[tuple[int, str]]:
        for line_no, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise WorkloadError(
                    f"{path}:{line_no}: not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                    f"at column {exc.start + 1})"
                ) from None
            yield line_no, text

    try:
        yield lines()
    except OSError as exc:  # a read error (e.g. EIO, EISDIR on read)
        raise WorkloadError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        f.close()


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
    previous = -math.inf
    index = 0
    with _open_text(path) as lines:
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
            for key in ("arrival_s", "prompt_tokens", "output_tokens"):
                if key not in obj:
                    raise WorkloadError(f"{where}: missing field {key!r}")
            arrival = obj["arrival_s"]
            if isinstance(arrival, bool) or not isinstance(arrival, int | float):
                raise WorkloadError(
                    f"{where}: arrival_s must be a number, got {arrival!r}"
                )
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


def sniff_kind(path: Path) -> str:
    """``"azure-csv"`` or ``"jsonl"`` from the file's suffix and its first
    non-blank line (after a byte-order mark, if any): a line of JSON that is
    not an object then gets the JSONL reader's error, not the CSV header's."""
    with _open_text(path) as lines:
        for _, line in lines:
            if line.strip():
                json_like = line.lstrip().startswith(("{", "["))
                named = path.suffix.lower() in (".jsonl", ".json")
                return "jsonl" if json_like or named else "azure-csv"
    raise WorkloadError(f"{path}: empty file")


def read_trace(path: Path) -> tuple[str, Iterator[ReplayRequest]]:
    """``(kind, requests)`` of a trace file in either format."""
    kind = sniff_kind(path)
    return kind, (read_jsonl(path) if kind == "jsonl" else read_azure_csv(path))
