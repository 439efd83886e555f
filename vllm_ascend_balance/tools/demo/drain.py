# SPDX-License-Identifier: Apache-2.0
"""The demo's Ctrl-C lets the requests in flight finish: vLLM's
``--shutdown-timeout``.

vLLM's default, 0, aborts every request in flight when the server stops
(``mode=abort timeout=0s`` in the log; the clients get an error or a cut
reply); ``docs/deployments.md`` ("Flags to set") recommends a drain bound
instead. The demo passes ``--shutdown-timeout`` :data:`DRAIN_S` where the
installed vLLM's ``vllm serve`` parser has the flag (:func:`parser_takes_flag`,
asked of the parser, never inferred from a version number) and the user's
``vllm serve`` arguments do not set it (:func:`with_drain`); the stop waits
that long before it kills what is left (:func:`drain_seconds`). Importing
this module imports neither vLLM nor torch.
"""

from __future__ import annotations

from collections.abc import Sequence

#: vLLM's flag: seconds a stopping server lets its requests run (0: abort).
FLAG = "--shutdown-timeout"
#: The demo's bound, shorter than the 60 s ``docs/deployments.md`` gives
#: production: a demo request runs at most ``MAX_MODEL_LEN`` (1,024) tokens,
#: about 6 s on 2 cores, and 10 of 1,000 tokens (two waves on DP 2 at the
#: default cap of 4) drain in about 11 s, so 30 s drains what the demo is
#: usually given, while a Ctrl-C under a flood of queued requests still
#: ends in half a minute rather than feel hung for one.
DRAIN_S = 30


def _spelled(arg: str, flag: str) -> bool:
    """Whether ``arg`` is ``flag`` (vLLM's parser also takes underscores),
    alone or with ``=value``."""
    return arg.split("=", 1)[0].replace("_", "-") == flag


def given(args: Sequence[str], flag: str = FLAG) -> bool:
    """Whether ``args`` set ``flag`` (``--flag N``, ``--flag=N``, or
    spelled with underscores)."""
    return any(_spelled(arg, flag) for arg in args)


def with_drain(extra_args: Sequence[str], parser_has_flag: bool) -> list[str]:
    """``extra_args`` (the ``vllm serve`` arguments after the demo's own)
    with ``--shutdown-timeout`` :data:`DRAIN_S` appended, unless vLLM's
    parser lacks the flag (``parser_has_flag`` False: vLLM would refuse it)
    or they set it already (the user's value stands, 0 included)."""
    if not parser_has_flag or given(extra_args):
        return list(extra_args)
    return [*extra_args, FLAG, str(DRAIN_S)]


def drain_seconds(args: Sequence[str]) -> int:
    """The ``--shutdown-timeout`` ``args`` give the server (the last one,
    as vLLM's parser takes it), 0 where none (vLLM's default) or one that
    is not a number (vLLM's parser refuses it before the server starts)."""
    value = None
    for index, arg in enumerate(args):
        if not _spelled(arg, FLAG):
            continue
        _, eq, inline = arg.partition("=")
        value = inline if eq else (args[index + 1] if index + 1 < len(args) else "")
    try:
        return max(int(value or 0), 0)
    except ValueError:
        return 0


def parser_takes_flag(flag: str = FLAG) -> bool:
    """Whether the installed vLLM's ``vllm serve`` parser has ``flag`` (the
    parser doctor reads the arguments with); False where vLLM cannot build
    it. Imports vLLM: the demo runs it in the child process that checks
    its arguments (:mod:`~vllm_ascend_balance.tools.demo.checks`)."""
    from vllm_ascend_balance.tools.doctor.args import serve_parser

    try:
        parser = serve_parser()
    except Exception:  # no parser, no flag: the server's start says why
        return False
    # argparse keeps its option strings only in this (stable) mapping.
    return flag in parser._option_string_actions
