# SPDX-License-Identifier: Apache-2.0
"""The upstream patch series tool, one module per job.

Run it as ``python upstream_patch/series.py COMMAND`` (``cli``: the commands
and their options). Stdlib only, plus this checkout's
:mod:`vllm_ascend_balance.tools.patch.series` (the apply/revert machinery it shares
with ``vllm-ascend-balance patch-vllm``).

* ``lanes``: the lanes' pin files, tags, series folders, the cache folder;
* ``sdist``: release sdists from the package index (fetched once, checked);
* ``install``: ``apply``/``revert``/``status``/``check`` of a lane's series;
* ``shapes``: the WAITING-loop shapes ``resync`` knows, read by AST;
* ``texts``: the commit message's and the hook docstring's prose;
* ``upstream_tests``: the upstream tests the series appends (templates);
* ``emit_scheduler`` / ``emit_tests`` / ``message``: a release's patched
  ``scheduler.py``, ``test_scheduler.py`` (and, where a test needs it, the
  helper ``utils.py``) and commit message;
* ``resync``: the series of a vLLM source tree, as ``git format-patch``
  output;
* ``constants``: the file paths and names shared by the above.
"""

import sys
from pathlib import Path

# This checkout's vllm_ascend_balance, whatever is installed: set up here,
# before any module of the package imports it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
