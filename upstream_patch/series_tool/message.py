# SPDX-License-Identifier: Apache-2.0
"""The patch's commit message, in the release's own terms."""

from __future__ import annotations

import textwrap

from .shapes import Shape
from .texts import COUPLING, MESSAGE, PAUSE_MESSAGE, SCOPE_KV, SCOPE_PLAIN, SUBJECT


def commit_message(shape: Shape) -> str:
    """The patch's commit message, in the release's own terms."""
    throttles = "schedule(throttle_prefills=True)"
    if shape.local_cadence:
        throttles += " or the local\nprefill_schedule_interval cadence"
    tests = [
        "the gate holds waiting requests and never admits past max_num_seqs "
        "(sync and async scheduling)"
    ]
    if shape.coupled and shape.throttle_arg:
        tests.append("the step after a held one is not throttled")
    if shape.kv_queue:
        tests.append("a KV-holding request is admitted while the gate is closed")
    tests.append("the hook is asked once per schedule() call")
    listed = "; ".join(tests)
    if shape.pause_default:
        body = PAUSE_MESSAGE.format(
            skipped=shape.skipped_text(rst=False),
            cap_text=shape.cap_text(rst=False),
            coupling=COUPLING.format(throttles=throttles) if shape.coupled else "",
            tests=listed,
        )
        return SUBJECT + "\n\n" + textwrap_paragraphs(body)
    body = MESSAGE.format(
        skipped=shape.skipped_text(rst=False),
        cap_text=shape.cap_text(rst=False),
        scope=SCOPE_KV if shape.kv_queue else SCOPE_PLAIN,
        coupling=COUPLING.format(throttles=throttles) if shape.coupled else "",
        tests=listed,
    )
    return SUBJECT + "\n\n" + textwrap_paragraphs(body)


def textwrap_paragraphs(text: str, width: int = 72) -> str:
    """Re-wrap each paragraph (blank-line separated) to ``width`` columns."""
    paragraphs = text.strip("\n").split("\n\n")
    return (
        "\n\n".join(
            textwrap.fill(" ".join(p.split()), width=width, break_on_hyphens=False)
            for p in paragraphs
        )
        + "\n"
    )
