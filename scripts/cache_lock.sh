# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts that build cached venvs under $cache: `cache_lock
# NAME` holds an exclusive lock on $cache/locks/NAME.lock (fd 8) until the
# script exits. Two processes sharing one cache (two checkouts, scripts/replay
# beside scripts/test, a second CI job) would otherwise build, or delete and
# rebuild, the same venv at once and each break the other's install; with
# the lock the second waits and then finds the work done.
cache_lock() {
  local name=$1 file
  file=$cache/locks/$name.lock
  mkdir -p "$cache/locks"
  exec 8>"$file"
  if ! flock -n 8; then
    echo "[cache] another process is building $name; waiting for it (lock $file)" >&2
    flock -w "${VAB_LOCK_WAIT_S:-3600}" 8 || {
      echo "error: $file is still locked after ${VAB_LOCK_WAIT_S:-3600} s: is a build hung? stop it, or set VAB_LOCK_WAIT_S" >&2
      exit 1
    }
  fi
}
