#!/usr/bin/env bash
# Stop the LocalStack started by start.sh on PORT: SIGTERM, then SIGKILL after a grace period.
#
# Usage: localstack/stop.sh [PORT]      (default 4566; works from any cwd; no error if it is not running)
# Env:   LOCALSTACK_STOP_GRACE   seconds between SIGTERM and SIGKILL (default 15)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${1:-4566}"
if ! [[ "$PORT" =~ ^[0-9]+$ ]]; then
    echo "stop.sh: bad port: $PORT" >&2
    exit 2
fi
GRACE="${LOCALSTACK_STOP_GRACE:-15}"
STATE="$HERE/state/$PORT"
PIDFILE="$STATE/pid"

cleanup_state() {
    rm -f "$PIDFILE"
    # Spooled object data; LocalStack's own tmp dir (fs/) it clears itself. Keep the log for post-mortems.
    rm -rf "$STATE/s3" "$STATE/fs" "$STATE/config"
}

if [[ ! -f "$PIDFILE" ]]; then
    echo "stop.sh: LocalStack on port $PORT is not running (no $PIDFILE)" >&2
    exit 0
fi
pid="$(cat "$PIDFILE" 2>/dev/null || true)"
if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
    echo "stop.sh: LocalStack on port $PORT is not running (stale pid file)" >&2
    cleanup_state
    exit 0
fi
# Guard against a recycled pid: only signal the process that start.sh launched.
if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$HERE/launch.py"; then
    echo "stop.sh: pid $pid is not our LocalStack any more; removing the stale pid file" >&2
    cleanup_state
    exit 0
fi

# start.sh runs it under setsid, so it leads its own process group: signal the group (pid and any children).
target="$pid"
if [[ "$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" == "$pid" ]]; then
    target="-$pid"
fi

echo "stop.sh: stopping LocalStack on port $PORT (pid $pid)" >&2
kill -TERM -- "$target" 2>/dev/null || true
deadline=$((SECONDS + GRACE))
while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do
    sleep 0.2
done
if kill -0 "$pid" 2>/dev/null; then
    echo "stop.sh: pid $pid still alive after ${GRACE} s; sending SIGKILL" >&2
    kill -KILL -- "$target" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
fi
cleanup_state
echo "stop.sh: stopped" >&2
