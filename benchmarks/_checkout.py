# SPDX-License-Identifier: Apache-2.0
"""This checkout first on the import path, for a benchmark run as a script.

``$venv/bin/python benchmarks/x.py`` must run the code next to it, whichever
checkout the lane venv's editable install names (CONTRIBUTING.md, "Two
checkouts, one cache"). Every benchmark starts with::

    if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _checkout  # noqa: F401

Run as a script (or loaded from its path, as some tests do), the import
finds this file next to the benchmark, which puts the checkout first on
``sys.path`` (this process) and on ``PYTHONPATH`` (every process the
benchmark starts). Imported as ``benchmarks.x`` (tests, ``python -m``), the
checkout is already first and nothing is done.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CHECKOUT = str(Path(__file__).resolve().parents[1])
if sys.path[:1] != [CHECKOUT]:
    sys.path.insert(0, CHECKOUT)
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != CHECKOUT:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")])
    )
