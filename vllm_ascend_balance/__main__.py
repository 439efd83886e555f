# SPDX-License-Identifier: Apache-2.0
"""``python -m vllm_ascend_balance``: the ``vllm-ascend-balance`` command,
reachable without the console script on ``PATH`` (e.g. a venv that is not
activated)."""

from __future__ import annotations

import sys

from vllm_ascend_balance.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
