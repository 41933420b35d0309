#!/usr/bin/env bash
# Build one of the Go S3 servers the tests run beside moto and LocalStack, at the version pinned below, into a
# cache outside the clone: ${MPCOMMIT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/mpcommit}/TOOL-VERSION/ (so a machine
# builds each version once, whatever clone or worktree asks).
#
#   seaweedfs  github.com/seaweedfs/seaweedfs (Apache-2.0): `go install` is refused (its go.mod has a replace
#              directive), so the module is downloaded from the proxy, copied somewhere writable and built with
#              `go build ./weed`. ~25 min of CPU on 2 cores the first time; Go's caches make a rebuild quick.
#   versitygw  github.com/versity/versitygw (Apache-2.0): a plain `go install`, about a minute.
#
# Idempotent: TOOL-VERSION/.installed names the binary; when it is there and runs, nothing is done. Builds go
# into a staging folder first, so an interrupted build never leaves a half binary behind a marker; concurrent
# installs of one tool are serialised by a lock.
#
# Usage: s3servers/install.sh TOOL [--force]      build (if needed); prints the binary's path on stdout
#        s3servers/install.sh TOOL --path         print the binary's path if it is built (exit 3 if not)
#        s3servers/install.sh --versions          print "TOOL VERSION" per line
# Env:   MPCOMMIT_CACHE   the cache root (default ~/.cache/mpcommit)
#        GO               the go command (default: go on PATH, else /usr/local/go/bin/go)
# Exit:  0 ready; 1 cannot build (no Go toolchain, no module proxy, build failed); 2 usage; 3 (--path) not built.
set -euo pipefail

# Pinned versions (module path, version, what to build, binary name). Change them here and only here.
declare -A MODULE=([seaweedfs]=github.com/seaweedfs/seaweedfs [versitygw]=github.com/versity/versitygw)
declare -A VERSION=([seaweedfs]=v0.0.0-20261109003541-7506e5f91cd6 [versitygw]=v1.8.0)
declare -A PACKAGE=([seaweedfs]=./weed [versitygw]=./cmd/versitygw)
declare -A BINARY=([seaweedfs]=weed [versitygw]=versitygw)

say() { echo "s3servers/install.sh: $*" >&2; }
usage() { say "usage: $0 {seaweedfs|versitygw} [--force|--path]  |  $0 --versions"; exit 2; }

if [[ "${1:-}" == "--versions" ]]; then
    for t in seaweedfs versitygw; do echo "$t ${VERSION[$t]}"; done
    exit 0
fi
TOOL="${1:-}"
[[ -n "$TOOL" && -n "${MODULE[$TOOL]:-}" ]] || usage
MODE="${2:-}"
[[ -z "$MODE" || "$MODE" == "--force" || "$MODE" == "--path" ]] || usage

CACHE="${MPCOMMIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mpcommit}"
DEST="$CACHE/$TOOL-${VERSION[$TOOL]}"
BIN="$DEST/${BINARY[$TOOL]}"
MARKER="$DEST/.installed"
want="${MODULE[$TOOL]}@${VERSION[$TOOL]} ${PACKAGE[$TOOL]}"

already_installed() {
    [[ -f "$MARKER" && "$(cat "$MARKER")" == "$want" && -x "$BIN" ]]
}

if [[ "$MODE" == "--path" ]]; then
    already_installed || exit 3
    echo "$BIN"
    exit 0
fi
if [[ "$MODE" != "--force" ]] && already_installed; then
    echo "$BIN"
    exit 0
fi

GO="${GO:-$(command -v go || true)}"
[[ -n "$GO" ]] || { [[ -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go; }
if [[ -z "$GO" ]] || ! "$GO" version >/dev/null 2>&1; then
    say "cannot build $TOOL: no Go toolchain (install Go 1.26+ from https://go.dev/dl/ and put 'go' on PATH)," \
        "then run 'make $TOOL-install'. Without it the tests on $TOOL are skipped."
    exit 1
fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9
if [[ "$MODE" != "--force" ]] && already_installed; then
    echo "$BIN"
    exit 0
fi

staging="$(mktemp -d "$DEST/.staging.XXXXXX")"
trap 'chmod -R u+w "$staging" 2>/dev/null; rm -rf "$staging"' EXIT
log="$staging/build.log"
started=$SECONDS
say "building $TOOL ${VERSION[$TOOL]} with $("$GO" version | cut -d' ' -f3) into $DEST (log: $log)"

fail() {
    tail -20 "$log" >&2 || true
    say "$1 (above: the last lines of the log). The tests on $TOOL are skipped until 'make $TOOL-install' succeeds."
    exit 1
}

mod="${MODULE[$TOOL]}@${VERSION[$TOOL]}"
case "$TOOL" in
seaweedfs)
    # The module's source from the proxy (into Go's module cache, read-only), copied to build in place: its go.mod
    # has a replace directive, which `go install module@version` refuses.
    info="$(cd "$staging" && "$GO" mod download -json "$mod" 2>>"$log")" \
        || fail "could not download $mod (is the Go module proxy reachable? GOPROXY=$("$GO" env GOPROXY))"
    dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$info" | head -1)"
    [[ -n "$dir" && -d "$dir" ]] || { echo "$info" >>"$log"; fail "go mod download printed no source folder for $mod"; }
    cp -r "$dir" "$staging/src"
    chmod -R u+w "$staging/src"
    (cd "$staging/src" && GOFLAGS=-mod=mod "$GO" build -trimpath -ldflags="-s -w" \
        -o "$staging/${BINARY[$TOOL]}" "${PACKAGE[$TOOL]}") >>"$log" 2>&1 || fail "go build of $mod failed"
    ;;
versitygw)
    (cd "$staging" && GOBIN="$staging" "$GO" install -trimpath -ldflags="-s -w" \
        "${MODULE[$TOOL]}/${PACKAGE[$TOOL]#./}@${VERSION[$TOOL]}") >>"$log" 2>&1 \
        || fail "go install of $mod failed (is the Go module proxy reachable? GOPROXY=$("$GO" env GOPROXY))"
    ;;
esac

"$staging/${BINARY[$TOOL]}" --help >/dev/null 2>&1 || "$staging/${BINARY[$TOOL]}" version >/dev/null 2>&1 \
    || fail "the built ${BINARY[$TOOL]} does not run"
rm -f "$MARKER"
mv -f "$staging/${BINARY[$TOOL]}" "$BIN"
echo "$want" >"$MARKER"
say "$TOOL ${VERSION[$TOOL]}: $(du -h "$BIN" | cut -f1) in $((SECONDS - started)) s: $BIN"
echo "$BIN"
