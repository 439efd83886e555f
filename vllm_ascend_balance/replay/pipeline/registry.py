# SPDX-License-Identifier: Apache-2.0
"""The replay engines by ``--engine`` name.

Plain data, importing nothing: :mod:`.options` offers these names as the
``--engine`` choices and :mod:`.engine` loads the chosen class, so neither
module needs the other at import time.
"""

from __future__ import annotations

#: ``--engine`` name -> ``module:Class`` (imported only when chosen).
ENGINES: dict[str, str] = {
    "asyncllm": "vllm_ascend_balance.replay.real.engine:AsyncLLMEngine",
    "sim": "vllm_ascend_balance.replay.sim.engine:SimEngine",
}
