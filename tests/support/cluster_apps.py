"""Drivers of the standalone test cluster, and what the cluster tests check after a write.

:class:`DriverApp` runs ``tests/cluster/cluster_job.py`` (one Spark application) in a subprocess and talks to it
one JSON line at a time; every wait is on an event (a line, a flag file, a process exit), bounded by a
generous timeout, never a fixed sleep.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.support.cli import cli_env, mpcommit_command
from tests.support.spark_tables import read_table, s3_filesystem
from tests.support.checks import all_keys, pending_upload_entries
from tests.support.spark_cluster import StandaloneCluster, process_alive
from tests.support.spark_events import TaskEnd, event_log, event_log_settings, task_ends, write_stages

REPO = Path(__file__).resolve().parents[2]
#: Bounds of the waits; generous, because the machine is shared (they only matter when something hangs).
STEP_TIMEOUT = 300.0

SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "200ms",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "2s",
    # Stages with no more tasks than an executor has slots are speculated after this long, successes or not:
    # the way to get a copy of *every* task.
    "spark.speculation.task.duration.threshold": "3s",
    # Spark 3.4+ skips copies of tasks whose data rate looks fine; a stalled task's may.
    "spark.speculation.efficiency.enabled": "false",
}


def wait_for(ready: Callable[[], Any], what: str, timeout: float = STEP_TIMEOUT, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def read_flag(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


class DriverApp:
    """One Spark application of the cluster, driven from the test (see cluster_job.py)."""

    def __init__(self, cluster: StandaloneCluster, name: str, *, executor_cores: int, cores_max: int,
                 extra: dict[str, str] | None = None):
        self.cluster = cluster
        self.dir = cluster.root / "apps" / name
        self.events_dir = self.dir / "events"
        self.events_dir.mkdir(parents=True, exist_ok=True)
        conf = cluster.driver_conf(cores_max=cores_max, executor_cores=executor_cores,
                                   extra={**event_log_settings(self.events_dir), **(extra or {})})
        self.log = self.dir / "driver.log"
        with open(self.log, "ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.cluster_job",
                 json.dumps({"conf": conf, "dir": str(self.dir), "name": f"mpcommit-{name}"})],
                cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        info = wait_for(lambda: self._alive_or_fail() and read_flag(self.dir / "driver.json"),
                        f"the driver of {name} to start (log: {self.log})")
        self.pid: int = info["pid"]
        self.app_id: str = info["appId"]

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _alive_or_fail(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the driver exited with {self.process.returncode}; see {self.log}")
        return True

    def send(self, op: str, **fields: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()

    def call(self, op: str, timeout: float = STEP_TIMEOUT, **fields: Any) -> dict[str, Any]:
        self.send(op, **fields)
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer to {op} within {timeout:.0f}s; see {self.log}") from None
        if line is None:
            raise AssertionError(f"the driver exited ({self.process.poll()}) during {op}; see {self.log}")
        return json.loads(line)

    def kill(self) -> None:
        """SIGKILL the driver process (its JVM follows: PySpark's gateway exits when its parent's pipe closes)."""
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(60)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("quit")
                self.process.wait(120)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(30)
        # Closed here, not by the GC, which warns (ResourceWarning) inside whatever test runs then. Not stdout: the
        # reader thread may still be on it (the driver's JVM can hold the pipe a moment after the driver is gone).
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def task_ends(self, needle: str) -> dict[int, list[TaskEnd]]:
        path = event_log(self.events_dir, self.app_id)
        stages = write_stages(path, needle)
        assert stages, f"no Spark job labelled {needle!r} in {path}"
        return task_ends(path, stages)


# ---------------------------------------------------------------- reading back
def visible_rows(endpoint: str, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """(id, task, attempt, host) of every visible row, read with pyarrow (an independent client)."""
    table = read_table(s3_filesystem(endpoint), bucket, prefix, partitions=pa.schema([("k", pa.string())]))
    return table.select(["id", "task", "attempt", "host"]).to_pylist()


def attempts_by_task(rows: list[dict[str, Any]]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for r in rows:
        out.setdefault(r["task"], set()).add(r["attempt"])
    return out


def check_rows(rows: list[dict[str, Any]], *, tasks: int, per_task: int) -> dict[int, int]:
    """Every id exactly once, each task's rows from one attempt; returns the visible attempt per task."""
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(tasks * per_task)), (
        f"visible ids: {len(ids)} rows, {len(set(ids))} distinct, expected {tasks * per_task}")
    attempts = attempts_by_task(rows)
    mixed = {t: a for t, a in attempts.items() if len(a) != 1}
    assert not mixed, f"rows of several attempts of one task are visible: {mixed}"
    return {t: next(iter(a)) for t, a in attempts.items()}


def uploads_under(client: Any, bucket: str, prefix: str) -> dict[tuple[str, str], int]:
    """Pending uploads under ``prefix`` with the bytes their parts hold, from a raw client."""
    out = {}
    for e in pending_upload_entries(client, bucket, prefix):
        parts = client.list_parts(Bucket=bucket, Key=e["Key"], UploadId=e["UploadId"]).get("Parts", [])
        out[(e["Key"], e["UploadId"])] = sum(p["Size"] for p in parts)
    return out


def records_under(client: Any, bucket: str, prefix: str) -> set[str]:
    return all_keys(client, bucket, f"{prefix}/_temporary/", exact_prefix=True)


def cli(endpoint: str, *args: str, fault: str | None = None, timeout: float = STEP_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """The real ``mpcommit`` command in another process; ``fault`` sets ``MPCOMMIT_FAULT`` (e.g. ``...:kill``)."""
    env = cli_env(**({"MPCOMMIT_FAULT": fault} if fault else {}))
    return subprocess.run([*mpcommit_command(), "--endpoint-url", endpoint, *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def cli_json(endpoint: str, *args: str) -> Any:
    done = cli(endpoint, *args, "--json")
    assert done.returncode == 0, f"mpcommit {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


def check_abort_finds_everything(endpoint: str, client: Any, bucket: str, prefix: str) -> dict[str, Any]:
    """Whatever is pending under ``prefix``, ``mpcommit uploads abort --older-than 0s`` finds it and prices it
    (bytes equal to what its parts hold), and after it nothing is pending. Returns the dry run's report."""
    before = uploads_under(client, bucket, prefix)
    plan = cli_json(endpoint, "uploads", "abort", f"s3://{bucket}/{prefix}", "--older-than", "0s", "--dry-run")
    priced = {(r["key"], r["uploadId"]): r["bytes"] for r in plan["results"]}
    missing = set(before) - set(priced)
    assert not missing, f"pending uploads that `uploads abort` does not select: {sorted(missing)[:3]}"
    wrong = {u: (before[u], priced[u]) for u in before if priced[u] != before[u]}
    assert not wrong, f"uploads priced wrong (held, priced): {wrong}"
    if before:
        done = cli_json(endpoint, "uploads", "abort", f"s3://{bucket}/{prefix}", "--older-than", "0s", "--yes")
        assert done["ok"], done
    assert uploads_under(client, bucket, prefix) == {}
    return plan


def wait_gone(pid: int, what: str, timeout: float = STEP_TIMEOUT) -> None:
    wait_for(lambda: not process_alive(pid), f"{what} (pid {pid}) to end", timeout)
