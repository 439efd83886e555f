# SPDX-License-Identifier: Apache-2.0
"""The demo command's arguments, checked before anything starts.

A bad value gets one line naming the setting and the fix (exit 2), not a
stack from vLLM's start-up a minute later: the port range, the JSON of an
``--additional-config`` given after the demo's options, and the balance
settings it holds, read by the same reader the engines use
(:func:`~vllm_ascend_balance.wiring.config_read.read_user_setting`); then
the whole ``vllm serve`` command line, read by vLLM's own parser as doctor
reads it (:func:`check_serve_args`), and ``--dir``, made ready to write
(:func:`check_dir`). Balance requested with DP 1 is a warning, as doctor
and the engines treat it: it has no effect there, nothing is refused.
Imports neither vLLM nor torch (vLLM's parser runs in a child process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vllm_ascend_balance.tools.demo.command import (
    BALANCE_ON,
    MAX_PORT,
    merge_into,
    serve_args,
    server_env,
    split_additional_config,
)
from vllm_ascend_balance.tools.plugin_loading import load_problem
from vllm_ascend_balance.tools.vllm_presence import SEE_DOCTOR, does_not_import
from vllm_ascend_balance.wiring.config import BalanceConfigError
from vllm_ascend_balance.wiring.config_read import read_user_setting

#: ``vllm serve`` flags the demo sets from its own options: given among the
#: extra arguments, the last would win in vLLM's parser while the demo
#: announces (and checks) its own value.
OWN_FLAGS = {"--data-parallel-size": "--dp", "-dp": "--dp"}
#: How the child process running vLLM's parser marks its answer: vLLM's
#: import logs on stdout and stderr too.
_ANSWER = "vab-demo-serve-args:"
_BROKEN = "vab-demo-vllm-broken:"
_DRAINS = "vab-demo-drains:"
_PARSE_IN_CHILD = (
    "import sys\n"
    "try:\n"
    "    import vllm.logger\n"
    "except Exception as exc:\n"
    "    from vllm_ascend_balance.tools.vllm_presence import cause_of\n"
    f"    print('\\n{_BROKEN}' + cause_of(exc), flush=True)\n"
    "    sys.exit(0)\n"
    "from vllm_ascend_balance.tools.doctor.args import serve_args_refusal\n"
    "from vllm_ascend_balance.tools.demo.drain import parser_takes_flag\n"
    "refusal = serve_args_refusal(sys.argv[1:])\n"
    f"print('\\n{_DRAINS}' + str(parser_takes_flag()), flush=True)\n"
    f"print('\\n{_ANSWER}' + (refusal or ''), flush=True)\n"
)
#: A hang guard for that child (it imports vLLM: seconds, a minute when
#: the machine is loaded), not a performance bound.
PARSE_LIMIT_S = 600.0


class UsageError(ValueError):
    """A demo argument that cannot work: one line naming it and the fix."""


class VllmBroken(RuntimeError):
    """The server's vLLM does not import: one line, its cause and the fix
    (exit 1, as a missing vLLM: not an argument's fault)."""


@dataclass
class DemoPlan:
    """What the checked arguments will serve.

    Attributes:
        balance: balance scheduling as the server will run it, in a few
            words (``on``, ``off (...)``, ``requested, no effect at DP 1``).
        active: the gate will run (series on ``/metrics``).
        warnings: one line each, printed before the server starts.
    """

    balance: str
    active: bool
    warnings: list[str] = field(default_factory=list)


@dataclass
class ServeArgsCheck:
    """What :func:`check_serve_args` learnt of vLLM besides its verdict.

    Attributes:
        warning: why the check itself could not run, else None.
        drains: vLLM's ``vllm serve`` parser has ``--shutdown-timeout``
            (:func:`~vllm_ascend_balance.tools.demo.drain.parser_takes_flag`).
    """

    warning: str | None = None
    drains: bool = False


def check_arguments(
    dp: int,
    port: int,
    max_num_seqs: int,
    extra_args: Sequence[str],
    environ: Mapping[str, str] | None = None,
) -> DemoPlan:
    """Check the demo's arguments (``extra_args``: the ``vllm serve``
    arguments after its own; ``environ`` default ``os.environ``, the
    server's).

    Raises:
        UsageError: ``--dp`` or ``--max-num-seqs`` < 1, ``--port`` out of
            0..65535, ``--data-parallel-size`` among ``extra_args``
            (:data:`OWN_FLAGS`), an ``--additional-config`` that is not a
            JSON object, a balance setting the engines would refuse, or
            balance on where vLLM will not load the plugin
            (:func:`~vllm_ascend_balance.tools.plugin_loading.load_problem`).
    """
    for flag, value, fix in (("--dp", dp, 2), ("--max-num-seqs", max_num_seqs, 4)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}: use e.g. {flag} {fix}")
    if not 0 <= port <= MAX_PORT:
        raise UsageError(
            f"--port must be 0..{MAX_PORT}, got {port}: choose a port in range "
            f"(--port 0: a free one)"
        )
    for arg in extra_args:
        flag = arg.split("=", 1)[0].replace("_", "-")
        if flag in OWN_FLAGS:
            raise UsageError(
                f"{arg.split('=', 1)[0]} is the demo's own setting: use "
                f"{OWN_FLAGS[flag]}"
            )
    try:
        user, _ = split_additional_config(extra_args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    additional = merge_into({"scheduler_config": dict(BALANCE_ON)}, user)
    try:
        setting = read_user_setting(
            additional, os.environ if environ is None else environ, quiet=True
        )
    except BalanceConfigError as exc:
        raise UsageError(str(exc)) from None
    if not setting.enabled:
        return DemoPlan(f"off (from {setting.source})", False)
    if dp == 1:
        return DemoPlan(
            "requested, no effect at DP 1",
            False,
            [
                "balance scheduling needs DP >= 2: with --dp 1 it has no effect "
                "(nothing is activated, /metrics has no vllm:balance_* series); "
                "use --dp 2 or more"
            ],
        )
    unloaded = load_problem(os.environ if environ is None else environ)
    if unloaded:
        raise UsageError(unloaded)
    return DemoPlan("on", True)


def check_serve_args(
    dp: int,
    max_num_seqs: int,
    extra_args: Sequence[str],
    environ: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> ServeArgsCheck:
    """Check the server's whole ``vllm serve`` command line (the demo's own
    arguments, then ``extra_args``) with vLLM's own parser, as doctor does
    (:func:`~vllm_ascend_balance.tools.doctor.args.serve_args_refusal`), in
    a child process of ``python`` with the server's environment: the
    demo's process stays free of vLLM, and vLLM's import logs stay out of
    its one-line refusal. The same child asks that parser whether it has
    ``--shutdown-timeout`` (the demo's drain on Ctrl-C). Returns a warning
    if the check itself could not run (the server's start then reports
    what it meets; no drain flag then: vLLM might refuse it).

    Raises:
        VllmBroken: the server's vLLM does not import (its cause).
        UsageError: vLLM refuses an argument (an unknown flag, a bad value,
            a ``SchedulerConfig`` value it refuses at start-up): vLLM's
            message, one line, and the fix.
    """
    # Placeholders where the demo fills in paths and ports later: vLLM's
    # parser takes them as strings and numbers, it opens nothing.
    args = serve_args(
        dp,
        0,
        Path("model"),
        Path("run"),
        max_num_seqs=max_num_seqs,
        lockstep_port=1,
        extra_args=extra_args,
    )
    try:
        done = subprocess.run(
            [python, "-c", _PARSE_IN_CHILD, *args],
            capture_output=True,
            text=True,
            env=server_env(environ),
            timeout=PARSE_LIMIT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ServeArgsCheck(
            f"could not check the vllm serve arguments with vLLM's parser ({exc})"
        )
    broken = [
        line[len(_BROKEN) :]
        for line in done.stdout.splitlines()
        if line.startswith(_BROKEN)
    ]
    if broken:
        # The server would fail the same way, after its start-up.
        raise VllmBroken(does_not_import(broken[-1], SEE_DOCTOR))
    answers = [
        line[len(_ANSWER) :]
        for line in done.stdout.splitlines()
        if line.startswith(_ANSWER)
    ]
    if not answers:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ServeArgsCheck(
            f"could not check the vllm serve arguments with vLLM's parser "
            f"(exit status {done.returncode}: {last})"
        )
    if answers[-1]:
        raise UsageError(
            f"vllm serve refuses the arguments after the demo's options: "
            f"{answers[-1]}: correct or remove it (vLLM's options: python -m "
            f"vllm.entrypoints.openai.api_server --help)"
        )
    return ServeArgsCheck(drains=f"{_DRAINS}True" in done.stdout.splitlines())


def check_dir(path: Path) -> None:
    """Make ``--dir`` ``path`` ready: created with any missing parent
    folders (as ``mkdir -p``), then a file written and removed there, so
    that a place the demo cannot write is refused now rather than with a
    stack from the server's start.

    Raises:
        UsageError: ``path`` or a parent is a file, or it cannot be created
            or written (a read-only file system, no permission): one line
            naming ``--dir``, the reason and the fix.
    """
    fix = "choose a directory you can write, or leave --dir out for a temporary one"
    for place in (path, *path.parents):
        if place.exists() or place.is_symlink():
            if not place.is_dir():
                what = "is" if place == path else f"is under {place}, which is"
                raise UsageError(f"--dir {path} {what} not a directory: {fix}")
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".vab-demo-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        where = f" ({exc.filename})" if exc.filename else ""
        raise UsageError(
            f"--dir {path} cannot be written: {reason}{where}: {fix}"
        ) from None
