"""A Spark standalone cluster on this machine: a master and workers on distinct loopback addresses.

Why: ``local[...]`` and ``local-cluster[...]`` put every executor on one host, and Spark never places a
speculative copy on the host of the original attempt, so they never speculate. Workers bound to 127.0.0.2,
127.0.0.3, ... are distinct hosts to Spark (all of 127.0.0.0/8 is loopback); see
``/work/shared/notes/spark-standalone-speculation.md``.

The JVMs are started with PySpark's own ``bin/spark-class`` (the pip package ships no sbin scripts), each in a
process group of its own, so that a test can SIGKILL one executor JVM, or a whole worker with its executors and
Python workers, as a machine failure would. Ports are free-picked; every process logs to a file under the
cluster's directory (the executors' logs land in the workers' work dirs), which the caller keeps when a test
failed (see :meth:`StandaloneCluster.stop`).

Drivers run in other processes (one process holds one SparkContext, and the pytest process may hold a ``local``
one): :meth:`StandaloneCluster.driver_conf` gives the settings a driver needs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import dying_with_parent
from tests.support.servers import free_port
from tests.support.spark_s3a import JVM_OPTIONS

__all__ = ["StandaloneCluster", "WorkerProcess", "children_of", "is_executor", "parent_of", "process_alive",
           "spark_home"]

#: Heap of the master and worker daemons: they only schedule (Spark's default is 1 GiB each).
DAEMON_MEMORY = "256m"
#: Heap of each executor. The tests' tasks hold a few MiB of Arrow batches and writer buffers at a time.
EXECUTOR_MEMORY = "512m"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _proc_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    return text.rsplit(")", 1)[1].split()


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a SIGKILLed child not yet reaped counts as dead)."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def parent_of(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return int(stat[1]) if stat is not None else None


def is_executor(pid: int) -> bool:
    """True when ``pid`` is an executor JVM (CoarseGrainedExecutorBackend)."""
    return any("CoarseGrainedExecutorBackend" in a for a in _cmdline(pid))


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc; no psutil in the test dependencies)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None and int(stat[1]) == pid:
                out.append(int(entry))
    return out


def descendants_of(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children_of(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class WorkerProcess:
    """One worker JVM (and, through it, the executors it launches)."""

    index: int
    host: str
    work_dir: Path
    log: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def executor_pids(self) -> list[int]:
        """Executor JVMs this worker launched (children running CoarseGrainedExecutorBackend)."""
        if not self.alive():
            return []
        return [p for p in children_of(self.process.pid)  # type: ignore[union-attr]
                if is_executor(p) and process_alive(p)]


class StandaloneCluster:
    """Master on 127.0.0.1, workers on 127.0.0.2, 127.0.0.3, ...; ``cores`` and ``memory`` per worker.

    ``start()`` waits until every worker has registered (the master's JSON page says ALIVE). ``stop()`` sends
    SIGTERM (then SIGKILL) to every process group it started and removes the directory unless ``keep``.
    """

    def __init__(self, root: Path, *, workers: int = 3, cores: int = 2, memory: str = "1g", first_host: int = 2):
        if not 1 <= workers or first_host + workers > 255:
            raise ValueError("workers must fit in 127.0.0.2 .. 127.0.0.254")
        self.root = Path(root)
        self.cores = cores
        self.memory = memory
        self.master_host = "127.0.0.1"
        self.master_port = 0
        self.master_ui_port = 0
        self.master_process: subprocess.Popen | None = None
        self.workers = [
            WorkerProcess(i, f"127.0.0.{first_host + i}", self.root / f"worker-{i}", self.root / f"worker-{i}.log")
            for i in range(workers)
        ]
        self._spark_class = str(spark_home() / "bin" / "spark-class")

    # ------------------------------------------------------------ lifecycle
    @property
    def master_url(self) -> str:
        return f"spark://{self.master_host}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{self.master_host}:{self.master_ui_port}"

    def _env(self, host: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP=host,
            SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
            SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS,
            # Executors run this interpreter (the project's venv), whatever the driver says.
            PYSPARK_PYTHON=sys.executable,
            SPARK_LOG_DIR=str(self.root),
            SPARK_NO_DAEMONIZE="1",
        )
        env.pop("SPARK_HOME", None)  # spark-class finds its own (PySpark's)
        return env

    def _launch(self, args: list[str], host: str, log: Path) -> subprocess.Popen:
        command, preexec = dying_with_parent([self._spark_class, *args])
        with open(log, "ab") as out:
            return subprocess.Popen(command, env=self._env(host), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec)

    def start(self, timeout: float = 180.0) -> "StandaloneCluster":
        self.root.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a free port may be taken between choosing and binding it
            self.master_port, self.master_ui_port = free_port(), free_port()
            self.master_process = self._launch(
                ["org.apache.spark.deploy.master.Master", "--host", self.master_host, "--port", str(self.master_port),
                 "--webui-port", str(self.master_ui_port)], self.master_host, self.root / "master.log")
            try:
                self._wait(lambda: self._master_json() is not None, timeout, "the master to answer")
                break
            except RuntimeError:
                self._terminate(self.master_process)
                if attempt == 2:
                    raise
        for w in self.workers:
            self.start_worker(w.index, wait=False)
        self.wait_for_workers(len(self.workers), timeout)
        return self

    def start_worker(self, index: int, *, wait: bool = True, timeout: float = 120.0) -> WorkerProcess:
        w = self.workers[index]
        if w.alive():
            return w
        w.work_dir.mkdir(parents=True, exist_ok=True)
        w.process = self._launch(
            ["org.apache.spark.deploy.worker.Worker", "--host", w.host, "--cores", str(self.cores),
             "--memory", self.memory, "--webui-port", str(free_port(w.host)), "--work-dir", str(w.work_dir),
             self.master_url], w.host, w.log)
        if wait:
            self.wait_for_workers(len([x for x in self.workers if x.alive()]), timeout)
        return w

    def stop(self, *, keep: bool = False) -> None:
        """Stop every process; remove the directory unless ``keep`` (logs for a failed test)."""
        for w in self.workers:
            if w.process is not None:
                self._terminate(w.process)
        if self.master_process is not None:
            self._terminate(self.master_process)
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _terminate(process: subprocess.Popen) -> None:
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(20)

    # ------------------------------------------------------------ state
    def _master_json(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def status(self) -> dict:
        doc = self._master_json()
        if doc is None:
            raise RuntimeError(f"the Spark master at {self.master_ui} does not answer; see {self.root / 'master.log'}")
        return doc

    def alive_workers(self) -> list[str]:
        """Hosts of the workers the master counts as ALIVE."""
        return sorted(w["host"] for w in self.status().get("workers", ()) if w.get("state") == "ALIVE")

    def active_apps(self) -> list[dict]:
        return list(self.status().get("activeapps", ()))

    def wait_for_workers(self, count: int, timeout: float = 120.0) -> None:
        self._wait(lambda: len(self.alive_workers()) >= count, timeout, f"{count} workers to register")

    def wait_idle(self, timeout: float = 120.0) -> None:
        """Until no application is active and every worker's executors are gone (a driver ended or was killed)."""
        self._wait(lambda: not self.active_apps() and not any(w.executor_pids() for w in self.workers), timeout,
                   "the previous application's executors to end")

    def ensure_workers(self, timeout: float = 120.0) -> None:
        """Restart any worker that died (a test killed it), and wait until all are registered again."""
        dead = [w for w in self.workers if not w.alive()]
        for w in dead:
            self.start_worker(w.index, wait=False)
        if dead:
            # The master keeps a dead worker's entry (state DEAD); count only ALIVE ones.
            self.wait_for_workers(len(self.workers), timeout)

    def _wait(self, ready, timeout: float, what: str) -> None:  # noqa: ANN001 - a predicate
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.master_process is not None and self.master_process.poll() is not None:
                raise RuntimeError(f"the Spark master exited ({self.master_process.returncode}); "
                                   f"see {self.root / 'master.log'}")
            if ready():
                return
            time.sleep(0.25)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {self.root}")

    # ------------------------------------------------------------ faults
    def worker_on(self, host: str) -> WorkerProcess:
        for w in self.workers:
            if w.host == host:
                return w
        raise KeyError(f"no worker on {host}")

    def kill_executor(self, host: str) -> list[int]:
        """SIGKILL every executor JVM on ``host`` (the worker lives on and reports the executor lost)."""
        pids = self.worker_on(host).executor_pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def kill_worker(self, host: str) -> int:
        """SIGKILL the worker on ``host`` with everything it started (executors, their Python workers): a
        machine that dies. ``ensure_workers()`` brings it back."""
        w = self.worker_on(host)
        assert w.process is not None
        tree = [w.process.pid, *descendants_of(w.process.pid)]
        os.killpg(w.process.pid, signal.SIGKILL)
        for pid in tree:  # a child that left the group (setsid) is still part of the machine
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        w.process.wait(30)
        return w.process.pid

    # ------------------------------------------------------------ drivers
    def driver_conf(self, *, cores_max: int = 2, executor_cores: int = 1,
                    extra: dict[str, str] | None = None) -> dict[str, str]:
        """Spark settings for a driver of this cluster: small executors, the venv's Python, quiet UI."""
        conf = {
            "spark.master": self.master_url,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "512m",
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.cores": str(executor_cores),
            "spark.cores.max": str(cores_max),
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
            # Start the tasks only once every executor asked for is there, so that tasks spread over hosts.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        }
        conf.update(extra or {})
        return conf

    def log_files(self) -> Iterable[Path]:
        yield from sorted(self.root.rglob("*.log"))
        yield from sorted(self.root.rglob("stderr"))
