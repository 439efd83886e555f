# SPDX-License-Identifier: Apache-2.0
"""The patch's commit message, in the release's own terms, with the
AI-assistance trailer vLLM's contribution guide asks for."""

from __future__ import annotations

import textwrap

from .shapes import Shape
from .texts import (
    COUPLING,
    MESSAGE,
    PAUSE_MESSAGE,
    SCOPE_KV,
    SCOPE_PLAIN,
    SUBJECT,
    TRAILERS,
)


def commit_message(shape: Shape) -> str:
    """The patch's commit message, in the release's own terms."""
    throttles = "schedule(throttle_prefills=True)"
    if shape.local_cadence:
        throttles += " or the local\nprefill_schedule_interval cadence"
    held = "the gate holds waiting requests and never admits past max_num_seqs"
    if shape.coupled and shape.throttle_arg:
        held += ", and the step after a held one admits, throttled or not"
    tests = [held + " (sync and async scheduling)"]
    if shape.async_kv:
        tests.append(
            "with --max-num-inflight-kv-loads (a new create_scheduler() "
            "argument), a held step admits a request whose KV has arrived and "
            "starts no new load, at the running cap and below it"
        )
    elif shape.kv_queue:
        tests.append("a KV-holding request is admitted while the gate is closed")
    tests.append(
        "the hook is asked once per schedule() call"
        + (", and not under PAUSED_NEW" if shape.pause_inline else "")
    )
    listed = "; ".join(tests)
    coupling = COUPLING.format(throttles=throttles) if shape.coupled else ""
    if shape.pause_inline:
        body = PAUSE_MESSAGE.format(
            skipped=shape.skipped_text(rst=False),
            cap_text=shape.cap_text(rst=False),
            coupling=coupling,
            tests=listed,
        )
    else:
        body = MESSAGE.format(
            skipped=shape.skipped_text(rst=False),
            cap_text=shape.cap_text(rst=False),
            scope=SCOPE_KV if shape.kv_queue else SCOPE_PLAIN,
            coupling=coupling,
            tests=listed,
        )
    return SUBJECT + "\n\n" + textwrap_paragraphs(body) + "\n" + TRAILERS + "\n"


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
