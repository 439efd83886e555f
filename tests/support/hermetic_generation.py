# SPDX-License-Identifier: Apache-2.0
"""Examples that do not depend on what else the process imported.

Hypothesis (since 6.131.1: HypothesisWorks/hypothesis#4356) replaces, with
probability 0.05, a drawn integer, float, string or bytes value by a constant
found in the source of a *local* module loaded so far (neither stdlib nor
site-packages nor a test file: this package's modules and the vllm-ascend
checkout a differential reads). Which local modules are loaded depends on the
tests that ran earlier in the same process, so a derandomized test drew other
examples in the suite than alone: the copy differentials passed alone and
failed after ``tests/test_docs.py`` (docs/schedule-copies.md, "The
differentials' examples"). :func:`pin` empties that pool for the session,
leaving Hypothesis's own global constants: a test's examples then follow from
its code and its settings only.

The pool is private to Hypothesis (``providers._get_local_constants``), so the
pin is tied to the version in ``scripts/requirements-dev.txt``;
``tests/test_hermetic_generation.py`` fails if it stops holding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis.internal.conjecture import providers

_UNPINNED: Callable[[], Any] | None = None


def pin() -> None:
    """Make every later draw ignore the local modules' constants (idempotent)."""
    global _UNPINNED
    if _UNPINNED is not None:
        return
    original = getattr(providers, "_get_local_constants", None)
    if original is None:
        raise RuntimeError(
            "hypothesis no longer has providers._get_local_constants: "
            "tests/support/hermetic_generation.py must follow the version "
            "pinned in scripts/requirements-dev.txt"
        )
    empty = providers.Constants()
    _UNPINNED = original
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()


@contextmanager
def unpinned() -> Iterator[None]:
    """Hypothesis's own behaviour for the block (the negative control)."""
    assert _UNPINNED is not None, "pin() first"
    pinned = providers._get_local_constants
    providers._get_local_constants = _UNPINNED
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = pinned
        providers.CONSTANTS_CACHE.cache.clear()
