# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance`` command line: ``patch-vllm``, ``doctor``,
``demo``, ``replay`` and ``validate-sim``."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from vllm_ascend_balance.tools.vllm_presence import (
    import_error,
    import_problem,
    not_installed,
)


def main(argv: list[str] | None = None) -> int:
    """Run the command; results go to stdout, vLLM's logs to stderr."""
    from vllm_ascend_balance.log_streams import vllm_logs_to_stderr

    # Before the subcommands import vLLM, which configures its log handler
    # on first import.
    with vllm_logs_to_stderr():
        return _main(argv)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand (tests check documented commands with it)."""
    parser = argparse.ArgumentParser(
        prog="vllm-ascend-balance",
        description="Balance scheduling for vLLM DP + MoE: diagnostics and replay.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from vllm_ascend_balance.tools.doctor import cli as doctor
    from vllm_ascend_balance.tools.patch import cli as patch_vllm

    patch_vllm.add_arguments(
        sub.add_parser(
            "patch-vllm",
            help="add the seam to the installed vLLM (the series for its version)",
        )
    )

    doctor.add_arguments(
        sub.add_parser(
            "doctor",
            help="check the install and what a `vllm serve` command line activates",
            allow_abbrev=False,
        )
    )
    from vllm_ascend_balance.tools.demo import cli as demo_cli

    demo_cli.add_arguments(
        sub.add_parser(
            "demo",
            help="serve a balance-enabled vLLM DP deployment on CPU (tiny MoE "
            "model, no weights): URL, curl, /metrics, doctor",
            allow_abbrev=False,
        )
    )
    # An ImportError of the replay is a bug to see in full, not a missing
    # subcommand (argparse would answer "invalid choice: 'replay'").
    from vllm_ascend_balance.replay.pipeline import cli as replay_cli

    replay_cli.add_arguments(
        sub.add_parser(
            "replay",
            help="replay a workload on a real vLLM DP deployment: balance off, "
            "on, vLLM's prefill_schedule_interval",
        )
    )
    from vllm_ascend_balance.replay.validation import cli as validate

    validate.add_arguments(
        sub.add_parser(
            "validate-sim",
            help="check the simulated replay engine against the real deployment",
        )
    )
    return parser


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed as the command runs it: ``doctor``'s and ``demo``'s
    arguments beyond their own are ``vllm serve``'s, left for vLLM's parser
    (``doctor.parse_serve_args``, at run time; the demo server's own
    parser); any other subcommand refuses an argument it does not know."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in ("doctor", "demo"):
        args.serve_args = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args


def _patch_vllm(argv: list[str]) -> int:
    """``patch-vllm`` with its own parser: the full one imports the replay,
    and with it vLLM, which may not import before it is patched."""
    from vllm_ascend_balance.tools.patch import cli as patch_vllm

    parser = argparse.ArgumentParser(prog="vllm-ascend-balance patch-vllm")
    patch_vllm.add_arguments(parser)
    return patch_vllm.run(parser.parse_args(argv))


def _main(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["patch-vllm"]:
        # Reads and patches files only: vLLM is imported in a new process,
        # after the patch, never in this one (it may not import yet).
        return _patch_vllm(words[1:])
    from vllm_ascend_balance.replay.pipeline import cli as replay_cli
    from vllm_ascend_balance.replay.validation import cli as validate
    from vllm_ascend_balance.tools.doctor import cli as doctor

    args = parse_command_line(argv)
    if args.command == "demo":
        # Starts vLLM in a subprocess; this process never imports it.
        from vllm_ascend_balance.tools.demo import cli as demo_cli

        if importlib.util.find_spec("vllm") is None:
            print(f"error: {not_installed('demo')}", file=sys.stderr)
            return 1

        return demo_cli.run(args)
    if args.command == "patch-vllm":  # taken above; kept for a direct call
        return _patch_vllm(words[1:])
    if args.command == "doctor" and importlib.util.find_spec("vllm") is None:
        return doctor.run(args)  # its report says so, exit 1 (its EPILOG)
    # Configures vLLM's logging (our loggers live under ``vllm.``) before any
    # subcommand logs; after parse_args, so that --help never imports vLLM.
    if args.command == "doctor":
        # Its report says what it can without vLLM (the torch line), then why.
        args.vllm_import_error = import_error()
    else:
        problem = import_problem(args.command)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1
    if args.command == "doctor":
        return doctor.run(args)
    if args.command == "validate-sim":
        return validate.run(args)
    return replay_cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
