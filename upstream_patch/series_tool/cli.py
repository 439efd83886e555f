# SPDX-License-Identifier: Apache-2.0
"""Apply, revert and verify the upstream patch series of one vLLM lane.

A lane is one pin file in ``.github/``: ``release`` reads
``vllm-release-tag.commit``, ``main`` reads ``vllm-main-verified.commit``,
``fork`` (a vLLM branch built from the release sdist with the series
committed on top) reads ``vllm-fork-base.commit`` and ``ascend`` (the same
kind of branch, of the vLLM release vllm-ascend pins, with vllm-ascend's
Python code next to it) reads ``vllm-ascend-base.commit``.
Each holds a vLLM release tag (``vX.Y.Z``); the series for that tag lives in
``upstream_patch/<tag>/`` and its order in ``upstream_patch/<tag>/series``.

Commands (stdlib only, so it runs in any venv; needs ``git`` on PATH). The
apply/revert machinery is the package's :mod:`vllm_ascend_balance.tools.patch.series`
(imported from this checkout), shared with ``vllm-ascend-balance patch-vllm``,
which picks the series by the installed vLLM's version instead of a lane:

``apply --lane L [--site DIR]``
    Patch the *installed* vLLM (or the ``vllm/`` under ``DIR``) in place
    (only the ``vllm/`` part of each patch; upstream's tests are not
    installed). Idempotent: a second call is
    a no-op, and a changed series replaces the one applied before. Refuses
    when the installed vLLM is not the lane's release.
``revert --lane L [--site DIR]``
    Restore the installed files exactly as they were before ``apply``.
``status --lane L [--site DIR]``
    Print whether the series is applied to the installed vLLM.
``check --lane L [--tree DIR]``
    ``git apply --check`` of the whole series (tests included) against the
    release's own source tree: ``DIR``, or the release sdist (``sdist``).
``resync [--tree DIR] [--tag vX.Y.Z] [--out DIR] [--lane L]``
    Rebuild the series against a vLLM source tree (default: the lane's
    release sdist) into ``upstream_patch/<tag>/`` (or ``DIR``): the hook is
    placed by AST after the WAITING loop's own cap check, the upstream test
    is appended to the tree's test file (no offset-patching of old hunks),
    and the patch is ``git format-patch`` output of a scratch commit, with
    no ``Signed-off-by`` (the submitter adds their own).
``sdist --lane L [--project vllm-ascend]``
    Download the release sdist once into the cache (``$VAB_CACHE``, default
    ``~/.cache/vllm-ascend-balance``), verify its sha256 against the package
    index, unpack it and print the tree's path. ``--project vllm-ascend``
    fetches the vllm-ascend sdist of ``.github/vllm-ascend.version`` instead.

``--site DIR`` names a site-packages-like directory holding ``vllm/`` and
the vLLM ``*.dist-info`` to use instead of the ones this Python imports (the
tests patch scratch copies this way, never a shared venv).

Exit status: 0 on success, 1 with a one-line ``error:`` on stderr otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .install import apply, check, revert, status
from .lanes import PIN_FILES, SeriesError, lane_tag
from .resync import resync
from .sdist import ascend_sdist, sdist


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["apply", "revert", "status", "check", "sdist", "resync"]
    )
    parser.add_argument("--lane", default="release", choices=sorted(PIN_FILES))
    parser.add_argument(
        "--tree", type=Path, help="vLLM source tree for `check` and `resync`"
    )
    parser.add_argument(
        "--tag",
        help="for resync: the release tag the tree is (default: the lane's pin)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="for resync: output folder (default: upstream_patch/<tag>/)",
    )
    parser.add_argument(
        "--site",
        type=Path,
        help="for apply/revert/status: directory holding vllm/ and its dist-info "
        "(default: the vLLM this Python imports)",
    )
    parser.add_argument(
        "--project",
        default="vllm",
        choices=["vllm", "vllm-ascend"],
        help="for sdist: vllm (the lane's release) or vllm-ascend "
        "(.github/vllm-ascend.version)",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "apply":
            apply(args.lane, args.quiet, site=args.site)
        elif args.command == "revert":
            revert(args.lane, args.quiet, site=args.site)
        elif args.command == "status":
            return 0 if status(args.lane, site=args.site) else 1
        elif args.command == "check":
            check(args.lane, args.tree)
        elif args.command == "resync":
            tag = args.tag or lane_tag(args.lane)
            tree = args.tree or sdist(args.lane)
            print(resync(tree, tag, args.out))
        elif args.project == "vllm-ascend":
            print(ascend_sdist())
        else:
            print(sdist(args.lane))
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
