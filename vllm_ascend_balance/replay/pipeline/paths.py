# SPDX-License-Identifier: Apache-2.0
"""Output paths of a replay, checked before any engine starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions

logger = init_logger(__name__)


class OutputPathError(ValueError):
    """An unusable output path; one line naming the option."""


def _check_output_file(option: str, value: str, suffixes: set[str] | None) -> None:
    path = Path(value)
    if path.is_dir():
        raise OutputPathError(f"{option} {value}: is a directory")
    parent = path.parent
    if not parent.is_dir():
        raise OutputPathError(f"{option} {value}: directory {parent} does not exist")
    if suffixes is not None and path.suffix.lstrip(".").lower() not in suffixes:
        raise OutputPathError(
            f"{option} {value}: unsupported image format {path.suffix or '(none)'} "
            f"(use one of {', '.join('.' + x for x in sorted(suffixes))})"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputPathError(f"{option} {value}: not writable")
    _probe_writable(option, value, parent)


def _probe_writable(option: str, value: str, directory: Path) -> None:
    """Create (and remove) a file in ``directory``: the one sure test."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".vab-write-test-"):
            pass
    except OSError as exc:
        raise OutputPathError(
            f"{option} {value}: cannot write in {directory} "
            f"({exc.strerror or type(exc).__name__})"
        ) from None


def check_outputs(options: ReplayOptions) -> None:
    """Every output path is usable, before any engine starts: its directory
    exists and a file can be created there (``--run-dir`` itself is created
    by the run when missing)."""
    if options.json:
        _check_output_file("--json", options.json, None)
    if options.plot:
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise OutputPathError(
                "--plot needs matplotlib (pip install matplotlib)"
            ) from None
        formats = set(Figure().canvas.get_supported_filetypes())
        _check_output_file("--plot", options.plot, formats)
    if options.run_dir:
        run_dir = Path(options.run_dir)
        if run_dir.exists():
            if not run_dir.is_dir():
                raise OutputPathError(f"--run-dir {options.run_dir}: not a directory")
            _probe_writable("--run-dir", options.run_dir, run_dir)
        elif not run_dir.parent.is_dir():
            raise OutputPathError(
                f"--run-dir {options.run_dir}: directory {run_dir.parent} "
                "does not exist"
            )
        else:
            _probe_writable("--run-dir", options.run_dir, run_dir.parent)
