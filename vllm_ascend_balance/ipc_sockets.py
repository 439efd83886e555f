# SPDX-License-Identifier: Apache-2.0
"""vLLM's ZeroMQ IPC sockets in a directory this process removes at exit.

vLLM names each IPC endpoint ``ipc://$VLLM_RPC_BASE_PATH/<uuid4>``
(``vllm.utils.network_utils.get_open_zmq_ipc_path``; the base defaults to
the temp dir), and an engine process that ends without closing its sockets
leaves the socket file: one real replay left 24 in the temp dir, one
``scripts/serve`` session 6. This module imports neither vLLM nor torch.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

BASE_PATH_ENV = "VLLM_RPC_BASE_PATH"

#: The longest socket path every platform vLLM runs on binds: a Unix socket
#: address holds 107 bytes on Linux, 103 on macOS and the BSDs (``sun_path``
#: less its NUL).
SUN_PATH_MAX = 103
#: ``/<uuid4>``, what vLLM appends to the base.
_ENDPOINT_LEN = 1 + 36


def own_ipc_dir() -> str:
    """Point ``VLLM_RPC_BASE_PATH`` at a new directory for the rest of this
    process, removed (with whatever sockets are left in it) at exit; the base
    vLLM will use.

    Left as it is: a base the user set, and a temp dir so long that a socket
    path in a directory under it would not fit in ``SUN_PATH_MAX`` bytes
    (vLLM's own path might: this must never make a bind fail that would not
    have). Once per process, never undone: vLLM caches its environment once
    an engine core starts in a process (``vllm.envs.enable_envs_cache``), so
    a directory removed between two engine runs could be bound again.
    """
    base = os.environ.get(BASE_PATH_ENV)
    if base:
        return base
    temp = tempfile.gettempdir()
    # mkdtemp's name: the prefix and 8 random characters.
    if len(os.fsencode(temp)) + len("/vab-ipc-12345678") + _ENDPOINT_LEN > SUN_PATH_MAX:
        return temp
    owned = tempfile.mkdtemp(prefix="vab-ipc-", dir=temp)
    atexit.register(shutil.rmtree, owned, ignore_errors=True)
    os.environ[BASE_PATH_ENV] = owned
    return owned
