#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Re-sync and check the schedule-seams series (``README.md`` beside this
file): ``python upstream_patch/schedule_seams/seams.py resync --tag vX.Y.Z``
rebuilds ``<tag>/`` from the release sdist (fetched once into the cache, as
``upstream_patch/series.py sdist`` does); ``check --tag vX.Y.Z [--tree DIR]``
runs ``git apply --check`` of the balance series and this one on ``DIR`` or
the sdist. Exit status 0, or 1 with a one-line ``error:``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The series tool lives in upstream_patch/series_tool, one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from series_tool.lanes import SeriesError  # noqa: E402
from series_tool.seam_series import check, resync  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["resync", "check"])
    parser.add_argument("--tag", required=True, help="the vLLM release, vX.Y.Z")
    parser.add_argument("--tree", type=Path, help="a vLLM source tree (default: sdist)")
    args = parser.parse_args(argv)
    try:
        if args.command == "resync":
            print(resync(args.tag, args.tree))
        else:
            print(check(args.tag, args.tree))
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
