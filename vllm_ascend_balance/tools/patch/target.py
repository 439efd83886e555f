# SPDX-License-Identifier: Apache-2.0
"""The vLLM install ``patch-vllm`` acts on: where it is and what kind of
install it is (read from files, never by importing vLLM), and whether a
fresh Python process imports it with the seam afterwards.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from vllm_ascend_balance.tools.patch.seam_source import PRESENT, seam_in_file
from vllm_ascend_balance.tools.patch.series import DIST_NAMES, SEAM, installed_vllm
from vllm_ascend_balance.tools.patch.torch_companions import mismatch_hint


@dataclass(frozen=True)
class Install:
    """A vLLM install: ``site`` (the folder holding ``vllm/``), its version,
    and what kind of install it is, in words."""

    site: Path
    version: str
    kind: str


def find_install(site: Path | None) -> Install:
    """Where vLLM is and what kind of install it is (read from files)."""
    path = None if site is None else [str(Path(site).resolve())]
    site, version = installed_vllm(site)
    dist = next(
        (
            d
            for name in DIST_NAMES
            for d in (
                importlib.metadata.distributions(name=name)
                if path is None
                else importlib.metadata.distributions(name=name, path=path)
            )
        ),
        None,
    )
    kind = "wheel"
    name = "vllm"
    full_version = version
    if dist is not None:
        name, full_version = dist.metadata["Name"], dist.version
        record = _direct_url(dist) or {}
        tree = Path(unquote(urlparse(record.get("url", "")).path))
        beside = Path(str(dist.locate_file(""))).resolve() == site.resolve()
        if record.get("dir_info", {}).get("editable"):
            kind = f"editable source tree {tree}"
        elif not beside:
            # vllm/ imported from elsewhere than its metadata: a source tree
            # ahead on the import path (PYTHONPATH, a .pth line).
            kind = f"source tree {site}"
        elif "dir_info" in record:
            kind = f"source install from {tree}"
    elif site.name not in ("site-packages", "dist-packages"):
        kind = f"source tree {site}"
    return Install(site=site, version=version, kind=f"{name} {full_version}, {kind}")


def _direct_url(dist: importlib.metadata.Distribution) -> dict | None:
    text = dist.read_text("direct_url.json")
    try:
        record = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def verify_seam(site: Path, explicit_site: bool) -> str | None:
    """None when a new Python process imports vLLM from ``site`` and its
    ``Scheduler`` has the seam, and the file it was loaded from calls it in
    ``schedule()`` (a half-applied patch imports and has the method, yet the
    gate is never asked), else what went wrong (one line)."""
    code = (
        "import inspect, sys, vllm\n"
        "from vllm.v1.core.sched.scheduler import Scheduler\n"
        "print(inspect.getfile(Scheduler))\n"
        "print(vllm.__file__)\n"
        f"sys.exit(0 if callable(getattr(Scheduler, {SEAM!r}, None)) else 3)\n"
    )
    env = dict(os.environ)
    if explicit_site:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(site), env.get("PYTHONPATH", "")])
        )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    lines = result.stdout.strip().splitlines()
    imported = Path(lines[-1]).resolve() if lines else None
    if result.returncode not in (0, 3):
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        hint = mismatch_hint(result.stderr)
        if hint is not None:
            return (
                f"a fresh `import vllm.v1.core.sched.scheduler` failed ({last}): "
                f"{hint}, then run patch-vllm again"
            )
        return (
            f"a fresh `import vllm.v1.core.sched.scheduler` failed ({last}): the "
            f"files are patched; check that vLLM imports in {sys.executable}"
        )
    if imported is None or site.resolve() not in imported.parents:
        return (
            f"a fresh import loads vLLM from {imported}, not from {site}: another "
            "vLLM shadows the one patched (PYTHONPATH, a second install)"
        )
    if result.returncode == 3:
        return f"the freshly imported Scheduler has no {SEAM}()"
    loaded = Path(lines[-2])
    if seam_in_file(loaded) != PRESENT:
        return (
            f"the freshly imported Scheduler has {SEAM}() but schedule() in "
            f"{loaded} never calls it (a partially applied patch): restore the "
            "original file (reinstall vLLM the way it was installed), then run "
            "patch-vllm"
        )
    return None
