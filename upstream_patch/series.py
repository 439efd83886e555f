#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Apply, revert, check and re-sync the upstream patch series (the command
line; ``python upstream_patch/series.py --help``).

The code is the ``series_tool`` package next to this file, one module per
job (its ``__init__`` lists them; ``series_tool/cli.py`` documents the
commands). This file stays the entry point the README, the scripts and the
tests name, and re-exports the names they use (``series.sdist``,
``series.resync``, ...), so loading it by path keeps working.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from series_tool.cli import main  # noqa: E402
from series_tool.constants import (  # noqa: E402
    FLAG,
    PATCH_NAME,
    SCHEDULER_REL,
    SEAM,
    TEST_REL,
    UTILS_REL,
)
from series_tool.emit_scheduler import patched_scheduler  # noqa: E402
from series_tool.emit_tests import patched_test  # noqa: E402
from series_tool.install import apply, check, check_tag, revert, status  # noqa: E402
from series_tool.lanes import (  # noqa: E402
    ASCEND_VERSION_FILE,
    KEPT_TAGS,
    PATCH_DIR,
    PIN_FILES,
    ROOT,
    SeriesError,
    ascend_version,
    cache_dir,
    lane_tag,
    pin_file,
    series_patches,
)
from series_tool.message import commit_message  # noqa: E402
from series_tool.resync import resync  # noqa: E402
from series_tool.sdist import ascend_sdist, fetch_sdist, sdist  # noqa: E402
from series_tool.shapes import Shape  # noqa: E402

from vllm_ascend_balance.tools.patch.series import (  # noqa: E402
    STATE_DIR_NAME,
    git_apply,
    installed_vllm,
    touched_files,
)

__all__ = [
    "ASCEND_VERSION_FILE",
    "FLAG",
    "KEPT_TAGS",
    "PATCH_DIR",
    "PATCH_NAME",
    "PIN_FILES",
    "ROOT",
    "SCHEDULER_REL",
    "SEAM",
    "STATE_DIR_NAME",
    "TEST_REL",
    "UTILS_REL",
    "SeriesError",
    "Shape",
    "apply",
    "ascend_sdist",
    "ascend_version",
    "cache_dir",
    "check",
    "check_tag",
    "commit_message",
    "fetch_sdist",
    "git_apply",
    "installed_vllm",
    "lane_tag",
    "main",
    "patched_scheduler",
    "patched_test",
    "pin_file",
    "resync",
    "revert",
    "sdist",
    "series_patches",
    "status",
    "touched_files",
]

if __name__ == "__main__":
    sys.exit(main())
