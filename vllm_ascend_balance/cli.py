# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance`` command line: ``doctor``, ``replay`` and
``validate-sim``."""

from __future__ import annotations

import argparse
import sys


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
    from vllm_ascend_balance import doctor

    doctor.add_arguments(
        sub.add_parser("doctor", help="check the install and what a config activates")
    )
    # An ImportError of the replay is a bug to see in full, not a missing
    # subcommand (argparse would answer "invalid choice: 'replay'").
    from vllm_ascend_balance.replay import cli as replay_cli

    replay_cli.add_arguments(
        sub.add_parser(
            "replay",
            help="replay a workload on a real vLLM DP deployment: balance off, "
            "on, vLLM's prefill_schedule_interval",
        )
    )
    from vllm_ascend_balance.replay import validate

    validate.add_arguments(
        sub.add_parser(
            "validate-sim",
            help="check the simulated replay engine against the real deployment",
        )
    )
    return parser


def _main(argv: list[str] | None) -> int:
    from vllm_ascend_balance import doctor
    from vllm_ascend_balance.replay import cli as replay_cli
    from vllm_ascend_balance.replay import validate

    args = build_parser().parse_args(argv)
    # Configures vLLM's logging (our loggers live under ``vllm.``) before any
    # subcommand logs; after parse_args, so that --help never imports vLLM.
    import vllm.logger  # noqa: F401

    if args.command == "doctor":
        return doctor.run(args)
    if args.command == "validate-sim":
        return validate.run(args)
    return replay_cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
