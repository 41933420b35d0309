#!/usr/bin/env bash
# Install LocalStack 4.13.1 (S3 test server) into localstack/.venv, pinned by localstack/constraints.txt.
#
# Idempotent: a marker file in the venv records the hash of constraints.txt it was installed from; when it
# matches and the venv imports LocalStack, nothing is done. LocalStack lives in its own venv because it pins
# boto3/botocore 1.42.x, which must not constrain the project's own boto3.
# See /work/shared/notes/localstack-host-mode.md (LocalStack needs Python 3.11 here: newer cores need >= 3.12).
#
# Usage: localstack/install.sh [--force]          (works from any cwd)
# Env:   LOCALSTACK_PYTHON  interpreter used to create the venv (default: python3.11, else python3 if it is 3.11)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
CONSTRAINTS="$HERE/constraints.txt"
MARKER="$VENV/.mpcommit-install"
LOCALSTACK_VERSION="4.13.1"

FORCE=0
if [[ "${1:-}" == "--force" ]]; then FORCE=1; fi

[[ -f "$CONSTRAINTS" ]] || { echo "install.sh: missing $CONSTRAINTS" >&2; exit 1; }

want="localstack-core==$LOCALSTACK_VERSION constraints-sha256=$(sha256sum "$CONSTRAINTS" | cut -d' ' -f1)"

# Everything the host-mode S3 gateway imports at startup (service_identity is not a declared dependency).
venv_works() {
    [[ -x "$VENV/bin/python" ]] || return 1
    "$VENV/bin/python" - "$LOCALSTACK_VERSION" >/dev/null 2>&1 <<'EOF'
import sys
from importlib.metadata import version
assert sys.version_info[:2] == (3, 11), sys.version
assert version("localstack-core") == sys.argv[1]
import localstack.runtime.main, localstack.services.s3.provider  # noqa: F401
import cbor2, OpenSSL, cryptography, service_identity  # noqa: F401
EOF
}

already_installed() {
    [[ $FORCE -eq 0 && -f "$MARKER" && "$(cat "$MARKER")" == "$want" ]] && venv_works
}

# Fast path without the lock.
if already_installed; then
    exit 0
fi

# Serialise concurrent installs (e.g. two start.sh at once).
mkdir -p "$HERE/state"
exec 9>"$HERE/state/.install.lock"
flock 9
if already_installed; then
    exit 0
fi

pick_python() {
    local cand
    for cand in "${LOCALSTACK_PYTHON:-}" python3.11 python3; do
        [[ -n "$cand" ]] || continue
        command -v "$cand" >/dev/null 2>&1 || continue
        if "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}

# A venv left by an earlier install: keep it if its interpreter is a working 3.11, else rebuild it.
if [[ -d "$VENV" ]]; then
    if ! "$VENV/bin/python" -c 'import sys, pip; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1; then
        echo "install.sh: $VENV is broken or not Python 3.11; recreating it" >&2
        rm -rf "$VENV"
    fi
fi

if [[ ! -d "$VENV" ]]; then
    PY="$(pick_python)" || { echo "install.sh: Python 3.11 is needed (set LOCALSTACK_PYTHON)" >&2; exit 1; }
    echo "install.sh: creating $VENV with $PY" >&2
    "$PY" -m venv "$VENV"
fi

rm -f "$MARKER"
echo "install.sh: installing localstack-core[base-runtime]==$LOCALSTACK_VERSION into $VENV" >&2
"$VENV/bin/python" -m pip install --disable-pip-version-check -q \
    -c "$CONSTRAINTS" \
    "localstack-core[base-runtime]==$LOCALSTACK_VERSION" cbor2 pyopenssl cryptography service_identity >&2

if ! venv_works; then
    echo "install.sh: LocalStack was installed but does not import; see:" >&2
    "$VENV/bin/python" -c 'import localstack.runtime.main, localstack.services.s3.provider, service_identity' >&2 || true
    exit 1
fi
echo "$want" >"$MARKER"
echo "install.sh: LocalStack $LOCALSTACK_VERSION ready in $VENV" >&2
