# SPDX-License-Identifier: Apache-2.0
"""A vLLM DP 2 deployment with a vllm-ascend tree's real platform patches
(its ``Scheduler`` swap and its ``run_engine_core`` chain), run in a child
process of the test (``python -m tests.support.ascend_dp_run``), returning
what each rank's engine did (:mod:`tests.support.gather_count_executor`).

The child is the front-end: it imports ``vllm_ascend.patch.platform`` from
the tree (as vllm-ascend's platform does on NPU), builds the config, then
initialises vllm-ascend's ``AscendConfig`` from it, as vllm-ascend's
``NPUPlatform.check_and_update_config`` does in the front-end (vLLM's CPU
platform runs here, which does not). Engine cores start as vLLM starts them
(``target=EngineCoreProc.run_engine_core``), by the CPU platform's ``spawn``
unless ``start="fork"``, vLLM's default start method elsewhere (a forked
engine core inherits the front-end's ``AscendConfig``; a spawned one starts
without it). Four requests per rank, pinned to ranks, then shutdown.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.gather_count_executor import OUT_ENV
from tests.support.lanes import REPO_ROOT

EXECUTOR = "tests.support.gather_count_executor.GatherCountExecutor"
DP_SIZE = 2
REQUESTS_PER_RANK = 4
MAX_TOKENS = 8
#: The deprecated environment switch vllm-ascend still reads.
ENV_SWITCH = "VLLM_ASCEND_BALANCE_SCHEDULING"


async def _serve(cfg: Any) -> None:
    from vllm.inputs import tokens_input
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_vllm_config(cfg)
    params = SamplingParams(
        max_tokens=MAX_TOKENS,
        ignore_eos=True,
        output_kind=RequestOutputKind.DELTA,
        detokenize=False,
    )

    async def one(i: int) -> None:
        ids = [10 + (i * 7 + k) % 1000 for k in range(24)]
        async for _ in llm.generate(
            tokens_input(ids), params, f"r{i}", data_parallel_rank=i % DP_SIZE
        ):
            pass

    try:
        await asyncio.gather(*(one(i) for i in range(DP_SIZE * REQUESTS_PER_RANK)))
    finally:
        llm.shutdown()


def _front_end(
    tree: str, env: dict[str, str], additional: dict, start: str, out: str
) -> None:
    from tests.support import vllm_ascend_src
    from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model

    os.environ.pop(ENV_SWITCH, None)
    # No general plugin: this package's (installed in the lane's venv) would
    # steer vllm-ascend's switch off; the deployment is vllm-ascend's alone.
    os.environ.update(env, **{OUT_ENV: out, "VLLM_PLUGINS": ""})
    vllm_ascend_src.activate(Path(tree), export=True)
    # vllm-ascend's tree has a tests/ package too: this checkout's first, so
    # the processes vLLM spawns (they take this sys.path) find tests.support.
    sys.path.remove(str(REPO_ROOT))
    sys.path.insert(0, str(REPO_ROOT))
    import vllm_ascend.patch.platform  # noqa: F401  (the swap and the chain)
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm_ascend.ascend_config import init_ascend_config

    model = write_tiny_moe_model(Path(out) / "model", 2048)
    cfg = AsyncEngineArgs(
        model=str(model),
        skip_tokenizer_init=True,
        data_parallel_size=DP_SIZE,
        data_parallel_address="127.0.0.1",
        distributed_executor_backend=EXECUTOR,
        max_num_seqs=4,
        max_model_len=2048,
        enable_prefix_caching=False,
        enforce_eager=True,
        dtype="float32",
        additional_config=additional,
    ).create_engine_config()
    init_ascend_config(cfg)
    if start == "fork":
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
    asyncio.run(_serve(cfg))


def run_dp2(
    tree: Path, out: Path, *, env: dict[str, str], additional: dict, start: str
) -> list[dict[str, Any]]:
    """Deploy (see the module docstring) and return one record per rank."""
    out.mkdir(parents=True, exist_ok=True)
    case = json.dumps([str(tree), env, additional, start, str(out)])
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    # A hang guard, not a timed assertion: start-up is ~30 s, the run ~1 s.
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.ascend_dp_run", case],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [
        json.loads((out / f"rank{rank}.json").read_text()) for rank in range(DP_SIZE)
    ]


if __name__ == "__main__":
    _front_end(*json.loads(sys.argv[1]))
