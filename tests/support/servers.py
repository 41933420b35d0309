"""Real S3 servers for the tests.

- moto: :class:`mpcommit.demo.embedded_s3.EmbeddedS3Server`, in this process (see :func:`start_moto`).
- LocalStack 4.13.1: a separate host process managed by ``localstack/start.sh`` / ``stop.sh``
  (see :func:`start_localstack`). Its state and log live in ``localstack/state/PORT/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mpcommit.demo.embedded_s3 import EmbeddedS3Server

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCALSTACK_DIR = REPO_ROOT / "localstack"

__all__ = ["LOCALSTACK_DIR", "ServerHandle", "free_port", "start_localstack", "start_moto"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerHandle:
    """A running S3 server: where to reach it and how to stop it. ``stop()`` is idempotent."""

    name: str
    endpoint_url: str
    port: int
    _stop: Callable[[], None] = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._stop()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _run_script(script: str, port: int, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOCALSTACK_DIR / script), str(port)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def start_localstack(port: int | None = None, *, timeout: float = 300.0, watch_this_process: bool = True) -> ServerHandle:
    """Start LocalStack (S3 only) on ``127.0.0.1:port`` via ``localstack/start.sh`` (installing it on first use).

    ``port=None`` picks a free port (and retries with another one if it was taken in the meantime).
    With ``watch_this_process`` the server stops by itself when this Python process exits, even if the
    handle's ``stop()`` never runs (e.g. pytest killed with SIGKILL).
    """
    env = dict(os.environ)
    if watch_this_process:
        env["MPCOMMIT_LS_WATCH_PID"] = str(os.getpid())
    attempts = 1 if port is not None else 3
    last: subprocess.CompletedProcess[str] | None = None
    for _ in range(attempts):
        chosen = port if port is not None else free_port()
        last = _run_script("start.sh", chosen, timeout, env)
        if last.returncode == 0:
            endpoint = last.stdout.strip().splitlines()[-1]

            def stop(chosen: int = chosen) -> None:
                result = _run_script("stop.sh", chosen, timeout=120)
                if result.returncode != 0:
                    raise RuntimeError(f"localstack/stop.sh {chosen} failed:\n{result.stderr}")
                # A clean stop: drop its state dir (log included) so that random ports do not pile up dirs.
                shutil.rmtree(LOCALSTACK_DIR / "state" / str(chosen), ignore_errors=True)

            return ServerHandle(name="localstack", endpoint_url=endpoint, port=chosen, _stop=stop)
        if "already in use" not in last.stderr:
            break
    assert last is not None
    raise RuntimeError(
        f"localstack/start.sh failed (exit {last.returncode}):\n{last.stderr[-4000:]}\n"
        "Is LocalStack installed? Run localstack/install.sh; see /work/shared/notes/localstack-host-mode.md"
    )


def start_moto() -> ServerHandle:
    """Start moto's S3 server in this process (:class:`~mpcommit.demo.embedded_s3.EmbeddedS3Server`)."""
    server = EmbeddedS3Server().start()
    return ServerHandle(name="moto", endpoint_url=server.endpoint_url, port=server.port, _stop=server.stop)
