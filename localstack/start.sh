#!/usr/bin/env bash
# Start LocalStack (S3 only) as a host process on 127.0.0.1:PORT, in the background, and wait until S3 is up.
#
# Usage: localstack/start.sh [PORT]      (default 4566; works from any cwd)
# Prints the endpoint URL (http://127.0.0.1:PORT) on stdout; progress goes to stderr. Exit 1 if it fails to start.
#
# Several instances on different ports can run at once. Per instance, under localstack/state/PORT/:
#   pid               the server's pid (its own session/process group)
#   localstack.log    its stdout/stderr
#   fs/               LocalStack's FILESYSTEM_ROOT (its tmp dir, cleared at its start and stop)
#   s3/               the S3 provider's object/part spool directory (see launch.py)
#   config/           CONFIG_DIR, so that a user's ~/.localstack/*.env profiles do not leak in
# Nothing is persisted: every start begins with an empty store.
#
# Env: LOCALSTACK_START_TIMEOUT   seconds to wait for S3 (default 120)
#      MPCOMMIT_LS_WATCH_PID      stop the server by itself when this pid exits (the test harness passes its own)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${1:-4566}"
if ! [[ "$PORT" =~ ^[0-9]+$ ]] || (( PORT < 1 || PORT > 65535 )); then
    echo "start.sh: bad port: $PORT" >&2
    exit 2
fi
TIMEOUT="${LOCALSTACK_START_TIMEOUT:-120}"
ENDPOINT="http://127.0.0.1:$PORT"
STATE="$HERE/state/$PORT"
PIDFILE="$STATE/pid"
LOG="$STATE/localstack.log"
VENV="$HERE/.venv"

s3_ready() {
    local body
    body="$(curl -fsS --noproxy "*" --max-time 3 "$ENDPOINT/_localstack/health" 2>/dev/null)" || return 1
    grep -Eq '"s3" *: *"(available|running)"' <<<"$body"
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

pid_alive() {
    [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null
}

"$HERE/install.sh"

# Already started by us? (No folder is made for PORT before the port is known to be free: a refused start
# leaves nothing behind.)
if [[ -f "$PIDFILE" ]]; then
    oldpid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if pid_alive "$oldpid"; then
        if s3_ready; then
            echo "start.sh: LocalStack already running on port $PORT (pid $oldpid)" >&2
            echo "$ENDPOINT"
            exit 0
        fi
        echo "start.sh: pid $oldpid from $PIDFILE is alive but S3 does not answer on $ENDPOINT; run stop.sh $PORT first" >&2
        exit 1
    fi
    rm -f "$PIDFILE"
fi

if port_in_use; then
    echo "start.sh: port $PORT is already in use by another process" >&2
    exit 1
fi

rm -rf "$STATE/fs" "$STATE/s3"
mkdir -p "$STATE/fs" "$STATE/s3" "$STATE/config"
: >"$LOG"

# setsid: own session and process group, so that a Ctrl-C in the caller's terminal does not reach it and
# stop.sh can signal the whole group.
(
    cd "$STATE"
    exec env -u DATA_DIR -u LOCALSTACK_HOST -u DEBUG -u LS_LOG \
        SERVICES=s3 \
        EAGER_SERVICE_LOADING=1 \
        GATEWAY_LISTEN="127.0.0.1:$PORT" \
        DISABLE_EVENTS=1 \
        DNS_ADDRESS=0 \
        PERSISTENCE=0 \
        FILESYSTEM_ROOT="$STATE/fs" \
        CONFIG_DIR="$STATE/config" \
        CONFIG_PROFILE= \
        MPCOMMIT_LS_S3_DIR="$STATE/s3" \
        MPCOMMIT_LS_BIND=127.0.0.1 \
        SKIP_SSL_CERT_DOWNLOAD=1 \
        PYTHONUNBUFFERED=1 \
        setsid "$VENV/bin/python" "$HERE/launch.py" </dev/null >>"$LOG" 2>&1
) &
pid=$!
echo "$pid" >"$PIDFILE"
echo "start.sh: starting LocalStack on $ENDPOINT (pid $pid, log $LOG)" >&2

start=$SECONDS
while true; do
    if s3_ready; then
        echo "start.sh: S3 ready on $ENDPOINT after $((SECONDS - start)) s" >&2
        echo "$ENDPOINT"
        exit 0
    fi
    if ! pid_alive "$pid"; then
        echo "start.sh: LocalStack exited during startup; last lines of $LOG:" >&2
        tail -n 40 "$LOG" >&2 || true
        rm -f "$PIDFILE"
        exit 1
    fi
    if (( SECONDS - start >= TIMEOUT )); then
        echo "start.sh: S3 not ready on $ENDPOINT after ${TIMEOUT} s; last lines of $LOG:" >&2
        tail -n 40 "$LOG" >&2 || true
        "$HERE/stop.sh" "$PORT" >&2 || true
        exit 1
    fi
    sleep 0.5
done
