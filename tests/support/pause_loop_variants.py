# SPDX-License-Identifier: Apache-2.0
"""Known-bad variants of the patched ``scheduler.py``, built from the
installed text at run time, that the negative controls load: the call-site
variants of every shape, and those of the 0.34 loop (the flag
``stop_admitting_waiting = (<pause test> or self._should_stop_admitting_
waiting())`` set before ``while True:``; the loop's two tests ``not
stop_admitting_waiting``, one taking ``self.waiting`` or
``self.async_kv_waiting`` below the running cap, one taking
``self.async_kv_waiting`` at it).

* :func:`asked_per_iteration_source`: the hook asked on every loop
  iteration instead of once per call;
* :func:`pause_term_dropped_source`: the flag is the hook alone, as in the
  round-4 series (default: the pause test) with an override that forgets
  ``super()``: ``PAUSED_NEW`` stops holding;
* :func:`async_loads_below_cap_source` and :func:`async_loads_at_cap_source`:
  a held step that still starts async KV loads, below the running cap or at
  it (the hold then covers ``self.waiting`` only).
"""

from __future__ import annotations

import re

SEAM_CALL = "self._should_stop_admitting_waiting()"
PAUSE_TERM = "self._pause_state != PauseState.UNPAUSED"
# The 0.34 ask, as the series writes it (ruff's layout), and the older one.
ASK = re.compile(
    r"^(?P<indent> *)stop_admitting_waiting = (?:\(\n"
    rf" *{re.escape(PAUSE_TERM)}\n *or {re.escape(SEAM_CALL)}\n *\)"
    rf"|{re.escape(SEAM_CALL)})\n",
    re.M,
)
BELOW_CAP = "if not request_queue and not stop_admitting_waiting:\n"
AT_CAP = "elif take_async_kv and not stop_admitting_waiting:\n"


def _one(pattern: re.Pattern[str], source: str) -> re.Match[str]:
    found = list(pattern.finditer(source))
    assert len(found) == 1, "the installed series changed"
    return found[0]


def asked_per_iteration_source(source: str) -> str:
    """The patched file asking the seam on every read of its flag (every
    loop iteration) instead of once before the loop: the ask removed, each
    read of the flag its value (the call, or the pause test or the call)."""
    ask = _one(ASK, source)
    value = (
        SEAM_CALL
        if PAUSE_TERM not in ask.group(0)
        else (f"({PAUSE_TERM} or {SEAM_CALL})")
    )
    source = source[: ask.start()] + source[ask.end() :]
    reads = re.compile(r"(?<![\w.])stop_admitting_waiting\b")
    assert reads.search(source), "the installed series changed"
    return reads.sub(value, source)


def pause_term_dropped_source(source: str) -> str:
    """The patched 0.34 file whose flag is the hook alone: under
    ``PAUSED_NEW`` the loop admits new requests whenever the hook says False
    (its default, or an override that does not call ``super()``)."""
    ask = _one(ASK, source)
    assert PAUSE_TERM in ask.group(0), "not the pause-loop shape"
    indent = ask.group("indent")
    return (
        source[: ask.start()]
        + f"{indent}stop_admitting_waiting = {SEAM_CALL}\n"
        + source[ask.end() :]
    )


def async_loads_below_cap_source(source: str) -> str:
    """The patched 0.34 file whose held step, below the running cap, still
    takes ``self.async_kv_waiting`` (it holds ``self.waiting`` only)."""
    assert source.count(BELOW_CAP) == 1, "the installed series changed"
    at = source.index(BELOW_CAP)
    indent = source[source.rindex("\n", 0, at) + 1 : at]
    held = (
        "if not request_queue and stop_admitting_waiting and take_async_kv:\n"
        f"{indent}    request_queue = self.async_kv_waiting\n"
        f"{indent}el"
    )
    return source[:at] + held + source[at:]


def async_loads_at_cap_source(source: str) -> str:
    """The patched 0.34 file whose held step, at the running cap (or out of
    token budget), still starts async KV loads: that branch keeps the
    release's own pause test, as if the series had replaced only the first
    of the two."""
    assert source.count(AT_CAP) == 1, "the installed series changed"
    return source.replace(
        AT_CAP, "elif take_async_kv and self._pause_state == PauseState.UNPAUSED:\n"
    )
