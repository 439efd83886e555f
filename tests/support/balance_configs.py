# SPDX-License-Identifier: Apache-2.0
"""Balance settings on real ``VllmConfig`` objects, shared by the
configuration and reach tests: the two ``additional_config`` forms, a DP 2
config built from them, and the one-line error check."""

from __future__ import annotations

from typing import Any

from tests.support.vllm_objects import make_vllm_config

ON = {"scheduler_config": {"enable_balance_scheduling": True}}
OFF = {"scheduler_config": {"enable_balance_scheduling": False}}


def vllm_config(additional: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """A real ``VllmConfig`` with ``additional`` as its
    ``additional_config``, DP 2 unless ``data_parallel_size`` is given."""
    kwargs.setdefault("data_parallel_size", 2)
    return make_vllm_config(additional_config=additional, **kwargs)


def assert_one_line_error(exc: BaseException, *needles: str) -> None:
    """``exc``'s message is one line and names every one of ``needles``."""
    message = str(exc)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)
