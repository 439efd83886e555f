# SPDX-License-Identifier: Apache-2.0
"""A weightless tiny MoE model directory, enough for vLLM's ``ModelConfig``.

vLLM decides ``model_config.is_moe`` (and so whether DP ranks run as
``DPEngineCoreProc``) from the HF config; no weights are ever loaded because
the replay's executor never builds the model.
"""

from __future__ import annotations

import json
from pathlib import Path

TINY_MOE_CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "rope_theta": 1e6,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_tiny_moe_model(directory: Path, max_model_len: int = 32768) -> Path:
    """Write ``config.json`` of a tiny Mixtral-style MoE model into
    ``directory`` (created if needed) and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    config = dict(TINY_MOE_CONFIG, max_position_embeddings=max_model_len)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory
