# SPDX-License-Identifier: Apache-2.0
# Sourced by the lane scripts: `with_heartbeat LABEL CMD...` runs CMD and,
# while it runs, prints "LABEL: still running (N s)" on stderr every
# ${VAB_HEARTBEAT_S:-30} s, so a log that is not a terminal (CI, `| tee`,
# nohup) shows a quiet multi-minute pip install is alive. Returns CMD's status.
# The lines go to the script's stderr as it was when this file was sourced
# (fd 9), even when the caller sends CMD's own output to a log file.
exec 9>&2
with_heartbeat() {
  local label=$1; shift
  local every=${VAB_HEARTBEAT_S:-30} start=$SECONDS pid rc
  "$@" &
  pid=$!
  while ! wait_for "$pid" "$every"; do
    echo "$label: still running ($((SECONDS - start)) s)" >&9
  done
  wait "$pid"; rc=$?
  return "$rc"
}

# True once PID has exited, false after SECS seconds while it still runs.
wait_for() {
  local pid=$1 secs=$2 i
  for ((i = 0; i < secs * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 "$pid" 2>/dev/null
}
