"""Run LocalStack's host-mode runtime (``python -m localstack.runtime.main``) with three additions that let
several instances share one machine. Started by ``localstack/start.sh`` inside ``localstack/.venv``.

1. LocalStack's S3 provider spools object and part data to a hard-coded ``/tmp/localstack-s3-storage/<bucket>/``
   shared by every instance on the machine: one instance deleting a bucket removes the directory that another
   instance with a bucket of the same name still writes into. ``MPCOMMIT_LS_S3_DIR`` moves it per instance.
2. LocalStack's twisted gateway ignores the host part of ``GATEWAY_LISTEN`` for IPv4 and binds 0.0.0.0
   (``# TODO: interface = host?`` in ``localstack/runtime/server/twisted.py``). ``MPCOMMIT_LS_BIND`` (e.g.
   ``127.0.0.1``) makes it bind that interface only, so a test server is never reachable from the network.
3. ``MPCOMMIT_LS_WATCH_PID``: when that process exits (e.g. a test run killed with SIGKILL, so its teardown never
   ran), this server stops itself with SIGTERM instead of lingering as an orphan.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


def _move_s3_storage(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    try:
        from localstack.services.s3 import provider
    except Exception as e:  # pragma: no cover - only if LocalStack's layout changes
        print(f"launch.py: cannot import the S3 provider to move its storage: {e}", file=sys.stderr)
        return
    if not hasattr(provider, "DEFAULT_S3_TMP_DIR"):  # pragma: no cover
        print("launch.py: S3 provider has no DEFAULT_S3_TMP_DIR; storage stays in /tmp", file=sys.stderr)
        return
    provider.DEFAULT_S3_TMP_DIR = directory


def _bind_gateway_to(host: str) -> None:
    from twisted.internet import endpoints  # does not install a reactor

    original = endpoints.TCP4ServerEndpoint

    def tcp4_server_endpoint(reactor, port, backlog=50, interface=""):  # type: ignore[no-untyped-def]
        return original(reactor, port, backlog, interface or host)

    endpoints.TCP4ServerEndpoint = tcp4_server_endpoint  # type: ignore[misc,assignment]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(pid: int) -> None:
    while _alive(pid):
        time.sleep(1.0)
    print(f"launch.py: watched process {pid} is gone; stopping LocalStack", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    os._exit(1)  # the runtime did not exit on SIGTERM


def main() -> None:
    s3_dir = os.environ.get("MPCOMMIT_LS_S3_DIR")
    if s3_dir:
        _move_s3_storage(s3_dir)
    bind = os.environ.get("MPCOMMIT_LS_BIND")
    if bind:
        _bind_gateway_to(bind)
    watch = os.environ.get("MPCOMMIT_LS_WATCH_PID")
    if watch and watch.isdigit() and int(watch) > 1:
        threading.Thread(target=_watch, args=(int(watch),), name="watch-parent", daemon=True).start()

    from localstack.runtime.main import main as localstack_main

    localstack_main()


if __name__ == "__main__":
    main()
