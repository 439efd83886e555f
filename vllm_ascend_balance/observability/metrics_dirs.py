# SPDX-License-Identifier: Apache-2.0
"""Where the engines' metrics files live, and how the front-end serves them.

With one API server (``vllm serve`` default) the front-end serves
``prometheus_client.REGISTRY``: :func:`serve_from_front_end` creates a
private directory, exports it to the engines as :data:`METRICS_DIR_ENV` and
registers a ``MultiProcessCollector`` for that directory only. With several
API servers vLLM sets ``PROMETHEUS_MULTIPROC_DIR`` and serves it itself; the
engines write there (:func:`engine_metrics_dir`). Directories of killed runs
are removed at the next start (:func:`remove_stale_dirs`).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

METRICS_DIR_ENV = "VAB_METRICS_DIR"
#: Front-end metrics directories: ``<temp dir>/vllm-ascend-balance-<pid>-*``.
DIR_PREFIX = "vllm-ascend-balance-"
PROMETHEUS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
_front_end_dir: tempfile.TemporaryDirectory[str] | None = None


def serve_from_front_end() -> None:
    """Make the engines' balance series reach this process's ``/metrics``
    (idempotent; front-end process, before engines start). First removes
    the directories of killed runs (:func:`remove_stale_dirs`).

    Does nothing when ``PROMETHEUS_MULTIPROC_DIR`` is set (vLLM's own
    multi-process collector serves the engines' files then)."""
    global _front_end_dir
    if os.environ.get(PROMETHEUS_DIR_ENV) or _front_end_dir is not None:
        return
    from prometheus_client import REGISTRY
    from prometheus_client.multiprocess import MultiProcessCollector

    remove_stale_dirs()
    # The owner's pid in the name lets the next start tell a killed run's
    # directory (its owner gone) from a live server's.
    _front_end_dir = tempfile.TemporaryDirectory(prefix=f"{DIR_PREFIX}{os.getpid()}-")
    os.environ[METRICS_DIR_ENV] = _front_end_dir.name
    # Registered on the default registry, which vLLM's /metrics serves with
    # one API server; it has no ``_name``, so vLLM's unregister_vllm_metrics()
    # (which drops collectors named "vllm:*") leaves it in place.
    MultiProcessCollector(REGISTRY, path=_front_end_dir.name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def remove_stale_dirs(parent: str | None = None) -> list[str]:
    """Remove the metrics directories of front-ends that are gone (a run
    killed with SIGKILL never cleans up its ``TemporaryDirectory``).

    Looks in ``parent`` (default: the temp dir) for
    ``vllm-ascend-balance-<pid>-*`` directories and removes those whose
    ``<pid>`` is not a running process; a live owner's directory, and one
    whose name carries no pid, are left alone. Errors (a directory removed
    concurrently, no permission) are ignored. Returns the removed paths.
    """
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(DIR_PREFIX):
            continue
        owner = name[len(DIR_PREFIX) :].split("-", 1)[0]
        path = os.path.join(parent, name)
        if not owner.isdigit() or _pid_alive(int(owner)) or not os.path.isdir(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    if removed:
        logger.info(
            "balance scheduling: removed %d metrics directories of runs that "
            "are gone: %s",
            len(removed),
            ", ".join(removed),
        )
    return removed


def engine_metrics_dir() -> str | None:
    """Where this engine process writes its series, or None (not served)."""
    path = os.environ.get(PROMETHEUS_DIR_ENV) or os.environ.get(METRICS_DIR_ENV)
    return path if path and os.path.isdir(path) else None
