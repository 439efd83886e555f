# SPDX-License-Identifier: Apache-2.0
"""``patch-vllm``'s arguments that cannot work together or here: refused
before vLLM is looked for or locked (exit 2, as argparse's own refusals),
each in one line naming the argument and the fix."""

from __future__ import annotations

import argparse

from vllm_ascend_balance.tools.patch.series import available_series, normalize_tag


def bad_arguments(args: argparse.Namespace) -> str | None:
    """Why ``args`` (patch-vllm's parse) cannot work whatever the install,
    one line, or None.

    Raises:
        SeriesError: this package carries no series at all (its install's
            fault, not the arguments').
    """
    if args.discard_edits and not args.revert:
        return "--discard-edits goes with --revert"
    if args.revert and args.series is not None:
        # Silently ignored before: --revert puts back what was applied.
        return (
            f"--series {args.series} goes without --revert: --revert restores "
            "the files of whichever series is recorded as applied; leave "
            "--series out"
        )
    if args.series is not None:
        tags = available_series()
        if normalize_tag(args.series) not in tags:
            return (
                f"--series {args.series}: no such series (this package has "
                f"{', '.join(tags)}): name one of them, or leave --series out "
                "for the installed version's"
            )
    if args.site is not None and not (args.site / "vllm").is_dir():
        return (
            f"--site {args.site}: no vllm/ package there: give the directory "
            "holding vllm/ and its *.dist-info (e.g. a venv's site-packages), "
            "or leave --site out for the vLLM this Python imports"
        )
    return None
