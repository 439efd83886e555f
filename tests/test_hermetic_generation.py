# SPDX-License-Identifier: Apache-2.0
"""A derandomized test draws the same examples whatever the process imported
before it (:mod:`tests.support.hermetic_generation`, pinned for the whole
suite by ``tests/conftest.py``); with Hypothesis's own pool of local constants
(the negative control) importing one more local module changes them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.internal.constants_ast import is_local_module_file

from tests.support import hermetic_generation

# Every lane installs the same Hypothesis (scripts/requirements-dev.txt).
pytestmark = pytest.mark.lane_scope("release")

# Constants only a freshly imported local module carries; each is inside the
# drawn range, so Hypothesis's pool would offer them.
NEW = [987_654_000 + i for i in range(1, 41)] + [-987_654_000 - i for i in range(1, 41)]
NEW_MODULE = f"LIMITS = {NEW}\n"


def _draws() -> list[int]:
    seen: list[int] = []

    @settings(
        derandomize=True, database=None, max_examples=400, phases=[Phase.generate]
    )
    @given(st.integers(-(10**9), 10**9))
    def collect(value: int) -> None:
        seen.append(value)

    collect()
    return seen


@pytest.fixture
def import_new_local_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Imports a module with fresh constants from a local directory."""
    name = f"vab_constants_{tmp_path.name.replace('-', '_')}"
    path = tmp_path / f"{name}.py"
    path.write_text(NEW_MODULE)
    # Hypothesis skips files under a directory named test/tests: a base
    # temporary directory there would leave the control nothing to draw.
    assert is_local_module_file(str(path)), f"{path} is not local to Hypothesis"
    monkeypatch.syspath_prepend(str(tmp_path))

    def load() -> None:
        importlib.import_module(name)

    yield load
    sys.modules.pop(name, None)


def test_examples_ignore_what_was_imported(import_new_local_module) -> None:
    before = _draws()
    import_new_local_module()
    after = _draws()
    assert before == after
    assert len(before) >= 300, len(before)


def test_negative_control_hypothesis_own_pool_follows_imports(
    import_new_local_module,
) -> None:
    with hermetic_generation.unpinned():
        before = _draws()
        import_new_local_module()
        after = _draws()
    assert before != after
    # The new module's constants were drawn: the pool is what changed.
    assert {abs(v) - 987_654_000 for v in after} & set(range(1, 41))
