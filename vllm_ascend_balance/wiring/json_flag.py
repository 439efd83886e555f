# SPDX-License-Identifier: Apache-2.0
"""A command-line flag whose value is a JSON object (``--additional-config``,
``--kv-transfer-config``), read with a one-line error naming the flag and
the fix. vLLM keeps a value it cannot parse as the raw string and fails on
it later, deep in its start-up, with a stack; doctor, the demo and the
plugin's front-end check refuse it with this message instead.
"""

from __future__ import annotations

import json
from typing import Any

from vllm_ascend_balance.wiring.config import ENABLE_EXAMPLE

#: A flag's own example where it is not ``--additional-config`` (whose
#: example is the switch, :data:`ENABLE_EXAMPLE`).
EXAMPLES = {
    "--kv-transfer-config": (
        '--kv-transfer-config \'{"kv_connector": "ExampleConnector", '
        '"kv_role": "kv_both"}\''
    ),
}


def json_object(text: Any, flag: str) -> dict:
    """``text`` (the value of ``flag``) parsed as a JSON object; a dict is
    returned as is.

    Raises:
        ValueError: not valid JSON, or not an object: one line naming
            ``flag`` and the fix.
    """
    example = EXAMPLES.get(flag, ENABLE_EXAMPLE)
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{flag} is not valid JSON ({exc}): quote keys and strings with "
                f"double quotes, write true/false in lower case, and wrap the "
                f"whole object in single quotes for the shell, e.g. {example}"
            ) from None
    if not isinstance(text, dict):
        raise ValueError(f"{flag} must be a JSON object, e.g. {example}")
    return text
