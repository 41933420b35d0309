"""Real S3 servers for the tests.

- moto: :class:`mpcommit.demo.embedded_s3.EmbeddedS3Server`, in a process of its own (see :func:`start_moto`), or
  in this one for a test that patches moto itself.
- LocalStack 4.13.1: a separate host process managed by ``localstack/start.sh`` / ``stop.sh``
  (see :func:`start_localstack`). Its state and log live in ``localstack/state/PORT/``.
- versitygw and SeaweedFS: S3 servers written in Go, built once per machine by ``s3servers/install.sh`` into
  ``~/.cache/mpcommit/TOOL-VERSION/`` and run by ``s3servers/start.sh`` (see :func:`start_go_server`) on free
  loopback ports over a temporary folder; they die with the test session (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mpcommit.demo.embedded_s3 import EmbeddedS3Server
from tests.support.processes import dying_with_parent

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCALSTACK_DIR = REPO_ROOT / "localstack"
S3SERVERS_DIR = REPO_ROOT / "s3servers"
#: The S3 servers written in Go that s3servers/ builds and starts.
GO_SERVERS = ("versitygw", "seaweedfs")

__all__ = ["GO_SERVERS", "LOCALSTACK_DIR", "S3SERVERS_DIR", "ServerHandle", "free_port", "go_server_binary",
           "go_server_problem", "start_go_server", "start_localstack", "start_moto"]


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


def start_moto(*, in_process: bool = False) -> ServerHandle:
    """Start moto's S3 server (:class:`~mpcommit.demo.embedded_s3.EmbeddedS3Server`) in a process of its own, or
    with ``in_process`` in this one (for a test that patches moto's classes).

    Its own process by default: in this one, moto's request handling shares the interpreter lock with the test's
    threads and its Spark driver, and the two take turns on one core. Measured on this suite's hosts: 2,100 puts
    from 16 threads took 23.8 s in the process and 15.1 s in a process of its own.
    """
    if in_process:
        server = EmbeddedS3Server().start()
        return ServerHandle(name="moto", endpoint_url=server.endpoint_url, port=server.port, _stop=server.stop)
    args, preexec = dying_with_parent(
        [sys.executable, "-c", "from tests.support.servers import serve_moto; serve_moto()"])
    proc = subprocess.Popen(args, cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=preexec)
    endpoint = proc.stdout.readline().strip()  # type: ignore[union-attr]
    if not endpoint.startswith("http"):
        proc.kill()
        raise RuntimeError(f"moto's S3 server did not start in its own process (it said {endpoint!r})")

    def stop() -> None:
        proc.stdin.close()  # type: ignore[union-attr]  # serve_moto returns when its stdin closes
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)

    return ServerHandle(name="moto", endpoint_url=endpoint, port=int(endpoint.rsplit(":", 1)[1]), _stop=stop)


def serve_moto() -> None:
    """The process :func:`start_moto` starts: moto's server, its address on stdout, serving until stdin closes."""
    with EmbeddedS3Server() as server:
        print(server.endpoint_url, flush=True)
        sys.stdin.read()


# -- the Go servers (s3servers/) ---------------------------------------------------------------------------------


def go_server_binary(tool: str) -> Path | None:
    """The built binary of ``tool`` (``s3servers/install.sh TOOL --path``), None when it is not built."""
    result = subprocess.run([str(S3SERVERS_DIR / "install.sh"), tool, "--path"], capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        return None
    return Path(result.stdout.strip())


def go_server_problem(tool: str) -> str | None:
    """Why the tests cannot run ``tool`` (not built, and how to build it), or None when they can."""
    if go_server_binary(tool) is not None:
        return None
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    how = (f"run 'make {tool}-install' (s3servers/install.sh {tool}; "
           + ("about 25 minutes of CPU the first time)" if tool == "seaweedfs" else "about a minute the first time)"))
    if go is None:
        how = f"install Go 1.26+ (https://go.dev/dl/), then {how}"
    return f"{tool} is not built: {how}. Its tests are skipped until then."


def _free_port_pair(host: str = "127.0.0.1", offset: int = 10000) -> int:
    """A free port whose port + ``offset`` is free too (SeaweedFS listens for gRPC there)."""
    for _ in range(200):
        port = free_port(host)
        if port + offset > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port + offset))
            except OSError:
                continue
        return port
    raise RuntimeError(f"found no free port p on {host} with p + {offset} free too")


def _answers_http(url: str) -> int | None:
    """The HTTP status of an unsigned GET of ``url``; None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 - loopback test server
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


def start_go_server(tool: str, *, timeout: float = 120.0) -> ServerHandle:
    """Start ``tool`` (versitygw or seaweedfs) on free loopback ports over a fresh temporary folder.

    The server is ``s3servers/start.sh``'s exec: it gets SIGTERM when the thread that started it dies (start it
    from the main thread), so no server outlives a killed test session. ``stop()`` sends SIGTERM, waits, and
    removes the folder. Raises RuntimeError with the server's log when it does not answer within ``timeout``.
    """
    if tool not in GO_SERVERS:
        raise ValueError(f"unknown Go server {tool!r}: choose among {', '.join(GO_SERVERS)}")
    data = Path(tempfile.mkdtemp(prefix=f"mpcommit-{tool}-"))
    log_path = data / "server.log"
    if tool == "seaweedfs":
        ports = [_free_port_pair() for _ in range(4)]
        while len(set(ports)) < 4:
            ports = [_free_port_pair() for _ in range(4)]
        port, extra = ports[0], [str(p) for p in ports[1:]]
    else:
        port, extra = free_port(), []
    (data / "store").mkdir()
    with open(log_path, "wb") as log:
        args, preexec = dying_with_parent([str(S3SERVERS_DIR / "start.sh"), tool, str(port), str(data / "store"),
                                           *extra])
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=preexec, start_new_session=True)

    def stop() -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(data, ignore_errors=True)

    endpoint = f"http://127.0.0.1:{port}"
    # versitygw answers an unsigned GET of / with 403 at once; SeaweedFS with 200 once its filer is up (~15 s).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if _answers_http(endpoint + "/") in (200, 403):
            return ServerHandle(name=tool, endpoint_url=endpoint, port=port, _stop=stop)
        time.sleep(0.25)
    text = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
    status = f"exited with {proc.returncode}" if proc.poll() is not None else f"did not answer within {timeout:.0f} s"
    stop()
    raise RuntimeError(f"{tool} on {endpoint} {status}; its log:\n{text}")
