#!/usr/bin/env bash
# Run one of the Go S3 servers (built by s3servers/install.sh) in the foreground on 127.0.0.1, over DATA_DIR.
# The tests start it through this script on free ports (tests/support/servers.py) and stop it with SIGTERM; it
# execs the server, so the pid is the server's and a parent-death signal set before exec stays in force.
#
# Usage: s3servers/start.sh versitygw PORT DATA_DIR
#        s3servers/start.sh seaweedfs PORT DATA_DIR [MASTER_PORT VOLUME_PORT FILER_PORT]
#            (defaults 9333 8081 8888; SeaweedFS also listens on each port + 10000 for gRPC, so those must be free)
# Env:   S3SERVERS_ACCESS_KEY / S3SERVERS_SECRET_KEY   versitygw's root credentials (default test / test; SeaweedFS
#        without identities accepts any). The endpoint is http://127.0.0.1:PORT, path-style, region us-east-1.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
say() { echo "s3servers/start.sh: $*" >&2; }
usage() { say "usage: $0 versitygw PORT DATA_DIR | $0 seaweedfs PORT DATA_DIR [MASTER_PORT VOLUME_PORT FILER_PORT]"; exit 2; }

TOOL="${1:-}"; PORT="${2:-}"; DATA="${3:-}"
[[ "$TOOL" == versitygw || "$TOOL" == seaweedfs ]] || usage
is_port() { [[ "$1" =~ ^[0-9]+$ ]] && (( $1 >= 1 && $1 <= 65535 )); }
is_port "$PORT" || { say "bad port: '$PORT'"; usage; }
[[ -n "$DATA" ]] || usage
mkdir -p "$DATA"

BIN="$("$HERE/install.sh" "$TOOL" --path)" || {
    say "$TOOL is not built: run 'make $TOOL-install' (needs Go 1.26+; s3servers/install.sh $TOOL)"
    exit 1
}

case "$TOOL" in
versitygw)
    # --keep-alive: without it every response closes its connection, and a pooled client's next request races the
    # close. posix over DATA_DIR keeps metadata in extended attributes (ext4 and xfs have them).
    exec "$BIN" --access "${S3SERVERS_ACCESS_KEY:-test}" --secret "${S3SERVERS_SECRET_KEY:-test}" \
        --port "127.0.0.1:$PORT" --region us-east-1 --keep-alive --quiet posix "$DATA"
    ;;
seaweedfs)
    MASTER="${4:-9333}"; VOLUME="${5:-8081}"; FILER="${6:-8888}"
    for p in "$MASTER" "$VOLUME" "$FILER"; do is_port "$p" && (( p + 10000 <= 65535 )) || { say "bad port: '$p'"; usage; }; done
    # Every bucket is a collection that grows 7 volumes on its first write: a test server that makes a bucket per
    # test needs many volume slots, each small (volume files grow as written). ../shared/notes/seaweedfs.md.
    exec "$BIN" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$DATA" \
        -master.port="$MASTER" -volume.port="$VOLUME" -filer.port="$FILER" \
        -s3 -s3.port="$PORT" -volume.max=3000 -master.volumeSizeLimitMB=64
    ;;
esac
