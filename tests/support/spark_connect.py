"""A Spark Connect server for the tests: PySpark's own, started once per test session.

PySpark's pip package ships the server (``jars/spark-connect_*.jar``); ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` runs it, here on ``127.0.0.1`` and a free port, as a
local Spark application whose Python workers run this venv's interpreter. The client side needs PySpark's Connect
extra (grpcio, grpcio-status, googleapis-common-protos, zstandard): ``pip install -e '.[connect]'``.

Clients come from :func:`connect_session`: PySpark's ``SparkSession.builder.remote(...)`` turns the whole Python
process into Connect mode, and refuses outright while a classic SparkContext runs in it (SESSION_ALREADY_EXIST) --
and the suite's classic Spark tests share this process. The Connect session's own builder, which that entry point
hands over to, makes the same kind of session without either effect.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import dying_with_parent
from tests.support.servers import free_port
from tests.support.spark_s3a import JVM_CONF

CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: The client's Python packages (PySpark's ``connect`` extra), by distribution -> import name.
CLIENT_MODULES = {"grpcio": "grpc", "grpcio-status": "grpc_status", "googleapis-common-protos": "google.rpc",
                  "zstandard": "zstandard"}


def client_modules() -> list[str]:
    """The client modules the installed PySpark's ``connect`` extra asks for (zstandard only from 4.1 on)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        wanted = {Requirement(r).name.lower() for r in metadata.requires("pyspark") or []
                  if Requirement(r).marker is not None and Requirement(r).marker.evaluate({"extra": "connect"})}
    except metadata.PackageNotFoundError:  # a PySpark from SPARK_HOME, no metadata: ask for them all
        wanted = set(CLIENT_MODULES)
    return [module for dist, module in CLIENT_MODULES.items() if dist in wanted]


def client_problem() -> str | None:
    """Why this venv cannot be a Spark Connect client (the missing packages named), or None when it can."""
    import importlib.util

    missing = []
    for name in client_modules():
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    if missing:
        return (f"the Spark Connect client needs {', '.join(missing)}: pip install -e '.[connect]' "
                "(make install does)")
    return None


def server_problem() -> str | None:
    """Why PySpark's own Connect server cannot be started here (its jar is not in the pip package), or None."""
    try:
        server_jar()
    except RuntimeError as exc:
        return str(exc)
    return None


def server_jar() -> Path:
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("spark-connect_*.jar"))
    if not jars:
        # PySpark 3.5's pip package has the Connect client only; its server is a Maven artifact (spark-connect_2.12).
        raise RuntimeError(f"PySpark {pyspark.__version__} ships no Spark Connect server (no spark-connect_*.jar in "
                           f"{Path(pyspark.__file__).parent / 'jars'}), so the Connect tests cannot start one")
    return jars[0]


@dataclass
class ConnectServer:
    """A running Spark Connect server: its ``sc://`` URL, process and log."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    started_in: float

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def stop(self) -> None:
        """SIGTERM (Spark's shutdown hooks stop the SparkContext and its Python workers), then SIGKILL."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def start_connect_server(*, conf: dict[str, str], env: dict[str, str], log: Path,
                         timeout: float = 240.0) -> ConnectServer:
    """Start PySpark's Connect server on a free port of 127.0.0.1 with ``conf`` (Spark settings) and ``env``
    (added to this process's), and wait until it accepts connections. RuntimeError with its log otherwise."""
    server_jar()  # fail with a clear message when this PySpark has no server
    spark_submit = Path(sys.executable).with_name("spark-submit")
    if not spark_submit.exists():
        from pyspark.find_spark_home import _find_spark_home

        spark_submit = Path(_find_spark_home()) / "bin" / "spark-submit"
    port = free_port()
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
        **JVM_CONF,
        # Executors (here: the local driver's Python workers) run this venv, where mpcommit is installed.
        "spark.pyspark.python": sys.executable,
        **conf,
    }
    command = [str(spark_submit), "--class", CONNECT_CLASS, "--master", "local[2,3]", "--name", "mpcommit-connect-tests"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("wb") as out:
        args, preexec = dying_with_parent(command)
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=log.parent, preexec_fn=preexec,
                                   env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
                                        **env})
    server = ConnectServer(f"sc://127.0.0.1:{port}", port, process, log, 0.0)
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with {process.returncode}:\n{server.log_tail()}")
        with socket.socket() as sock:
            sock.settimeout(1)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                server.started_in = time.monotonic() - started
                return server
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"the Spark Connect server did not listen on {port} within {timeout:.0f} s:\n{server.log_tail()}")


@contextlib.contextmanager
def connect_session(url: str) -> Iterator[Any]:
    """A Spark Connect session on ``url``, stopped afterwards; this process's environment left as it was."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    before = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    session = RemoteSparkSession.builder.remote(url).getOrCreate()
    after = {k: os.environ.get(k) for k in before}
    assert after == before, f"the Connect session changed this process's environment: {before} -> {after}"
    try:
        yield session
    finally:
        session.stop()
