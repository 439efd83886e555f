# SPDX-License-Identifier: Apache-2.0
"""Output paths of a replay, checked before any engine starts."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions

logger = init_logger(__name__)


#: Written by the real engine into each directory it creates in a
#: ``--run-dir`` (``model/`` and one per run): its mark on a directory it may
#: replace. Without it, one holds a user's files (a silently overwritten
#: config.json). Per directory, not once at the top: a mark on the top of a
#: user's directory would hand the tool every subdirectory in it.
RUN_DIR_MARKER = ".vllm-ascend-balance-replay"


class OutputPathError(ValueError):
    """An unusable output path; one line naming the option."""


def run_slug(label: str) -> str:
    """The run directory name of a mode label (no quotes, colons or pluses)."""
    return label.replace("'", "-aa").replace(":", "").replace("+", "-")


def claim(directory: Path) -> None:
    """Create ``directory`` (if missing) and mark it this tool's, before
    anything is written in it: a run stopped halfway leaves it reusable."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RUN_DIR_MARKER).touch()


def _replaced(options: ReplayOptions) -> list[str]:
    """The ``--run-dir`` subdirectories the real engine writes into or
    removes: ``model/`` and one per mode and repetition."""
    return ["model"] + [
        f"{run_slug(mode.label)}-{i + 1}"
        for mode in options.modes()
        for i in range(options.repeat)
    ]


def _check_run_dir_owned(options: ReplayOptions) -> None:
    """Refuse a ``--run-dir`` whose ``model/`` or run directories exist
    with content but without :data:`RUN_DIR_MARKER`: not this tool's."""
    run_dir = Path(str(options.run_dir))
    if options.engine == "sim":
        return  # the simulated engine writes nothing there
    taken = [
        n
        for n in _replaced(options)
        if _has_content(run_dir / n) and not (run_dir / n / RUN_DIR_MARKER).exists()
    ]
    if taken:
        raise OutputPathError(
            f"--run-dir {options.run_dir}: {', '.join(n + '/' for n in taken)} "
            f"would be overwritten but holds files this tool did not write (no "
            f"{RUN_DIR_MARKER} file in it); pick a new or empty --run-dir"
        )


def _has_content(path: Path) -> bool:
    if not path.exists() and not path.is_symlink():
        return False
    return not path.is_dir() or any(path.iterdir())


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
    if path.is_file():
        # Written in place: the file, not its directory, must take writes
        # (/proc/version passes os.access as root, and the directory probe
        # blamed /proc with ENOENT for a file that exists).
        _probe_file(option, value, path)
    else:
        _probe_writable(option, value, parent)


def _probe_file(option: str, value: str, path: Path) -> None:
    """Open the existing regular file ``path`` for appending and write
    nothing: its content is unchanged, but a read-only filesystem or a
    kernel file (/proc) fails here as the real write would."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"")
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputPathError(
            f"{option} {value}: the file exists but cannot be written "
            f"({exc.strerror or type(exc).__name__}); pick another file"
        ) from None


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


def _is_trace(value: str, trace: str | None) -> bool:
    """``value`` is the file ``--trace`` reads (a link or another spelling
    of it too): writing there would replace the user's input with results."""
    if trace is None or not os.path.exists(value):
        return False
    if trace == "-":
        # Standard input redirected from a file (< trace.csv) is that file.
        try:
            stdin = os.fstat(0)
        except OSError:
            return False  # stdin closed: nothing to compare
        return stat.S_ISREG(stdin.st_mode) and os.path.samestat(stdin, os.stat(value))
    return os.path.exists(trace) and os.path.samefile(value, trace)


def _same_path(a: str, b: str) -> bool:
    """``a`` and ``b`` name one file, existing (any link to it) or not."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _check_not_trace(options: ReplayOptions) -> None:
    for option, value in (("--json", options.json), ("--plot", options.plot)):
        if value and _is_trace(value, options.trace):
            raise OutputPathError(
                f"{option} {value}: is the input trace (--trace {options.trace}); "
                f"write {option} to another file"
            )
    if options.json and options.plot and _same_path(options.json, options.plot):
        # The plot is written after the JSON and would replace it.
        raise OutputPathError(
            f"--plot {options.plot}: is the --json file (--json {options.json}); "
            "write them to different files"
        )
    if (
        options.run_dir
        and options.engine != "sim"  # which writes nothing in the run dir
        and options.trace
        and os.path.exists(options.trace)
    ):
        # The real engine writes (and first removes) only model/ and one
        # directory per run: a trace anywhere else in the run dir is safe.
        run_dir = Path(options.run_dir).resolve()
        parents = Path(options.trace).resolve().parents
        hit = [n for n in _replaced(options) if run_dir / n in parents]
        if hit:
            raise OutputPathError(
                f"--run-dir {options.run_dir}: the run replaces {hit[0]}/, which "
                f"holds the input trace (--trace {options.trace}); move the trace "
                "out or pick another --run-dir"
            )


def check_outputs(options: ReplayOptions) -> None:
    """Every output path is usable, before any engine starts: its directory
    exists and a file can be created there (``--run-dir`` itself is created
    by the run when missing), and none of them is the input trace."""
    _check_not_trace(options)
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
            _check_run_dir_owned(options)
            _probe_writable("--run-dir", options.run_dir, run_dir)
        elif not run_dir.parent.is_dir():
            raise OutputPathError(
                f"--run-dir {options.run_dir}: directory {run_dir.parent} "
                "does not exist"
            )
        else:
            _probe_writable("--run-dir", options.run_dir, run_dir.parent)
