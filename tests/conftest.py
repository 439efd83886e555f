# SPDX-License-Identifier: Apache-2.0
import os

# Nothing in the suite may reach a model hub: models are local config dirs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
