"""A driver of the standalone test cluster, in a process of its own: it holds one Spark application and runs
``mpcommit.spark.write`` jobs for the tests, one command at a time.

Why a process of its own: a test must be able to SIGKILL a driver; the pytest process may hold a ``local``
SparkContext already (one per process); and one application serves several tests (an application start costs
a driver JVM and one executor JVM per worker).

Usage: ``python -m tests.cluster.cluster_job '<json>'`` with ``{"conf": {...Spark settings...}, "dir": PATH}``.
The driver writes ``PATH/driver.json`` (pid, application id, event log) once Spark is up, then reads one JSON
command per line on stdin and answers each with one JSON line on stdout:

- ``{"op": "write", "args": {...}}``: one write (keys below); answers ``{"report": ..., "filenames": [...]}``
  or ``{"error": TYPE, "message": ...}``. Before answering it waits until no executor runs a task (losers end
  a little after their job) and flushes the event log, so that every attempt's end is in it.
- ``{"op": "write_async", "args": {...}}``: the same in a thread; answers ``{"started": true}`` at once.
- ``{"op": "executors", "count": N}``: waits until N executors are registered; answers their hosts.
- ``{"op": "quit"}``.

The dataset of a write: ``tasks`` Spark tasks, each generating ``rows`` rows in a Python stage (``mapInArrow``)
that runs in the same task attempt as the write, so every row carries the task and the *attempt number* that
wrote it (and the executor's host): a reader can tell which attempt of a task became visible. Ids are
``task * rows + i`` (each must be visible exactly once). ``k`` is the partition column: one row in ten goes to
``k=b``. Tasks in ``big`` carry a 1,000-byte payload per row, so that their ``k=a`` file passes one 5 MiB
part and parts upload while the task runs; the others carry 10 bytes.

Stalls (``stall``): a task hook that travels with the write's closure. For attempt ``attempt`` of the tasks in
``tasks`` (all when null), after batch ``at_batch`` it waits until S3 lists an uploaded part of the attempt's
``k=a`` file when the task is big (parts really are uploading), records what the attempt has pending in
``DIR/stalled-tT-aA.json``, and waits until ``DIR/release`` exists (a file flag, not a fixed sleep), then
records ``released-tT-aA.json`` (was the job already committed? are its uploads still there?). Bounded by
``timeout``. With ``copies_wait``, later attempts of those tasks (speculative copies) start generating rows only
once the first attempt has stalled.

Blocks (``block``, for killing the driver): ``"before_journal"`` blocks the write when ``Job.commit`` is
entered (every task result is in, no journal yet); ``["commit.after_complete", 2]`` blocks it at that
checkpoint of :mod:`mpcommit.protocol.faults`. The blocked thread writes ``DIR/blocked.json`` and never
returns; the test then SIGKILLs this process. Run blocked writes one after another (``write_async``, then wait
for the flag): a checkpoint hook cannot tell jobs apart, so only one job may be committing unblocked at a time.

``cancel_without_executors`` (seconds): Spark waits for ever for resources when its last worker is gone; this
watchdog cancels the running jobs once the application has had no executor for that long, as an
orchestrator's timeout would, so that the write fails with Spark's own error.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

BATCH_ROWS = 1000  # rows per Arrow batch handed to the write's Python function (spark.sql.execution.arrow...)
BIG_PAYLOAD, SMALL_PAYLOAD = 1000, 10
SCHEMA = "id long, task int, attempt int, host string, k string, payload string"


def write_json(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)  # readers never see half a file


def _client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))


def generator(rows: int, big: frozenset[int], stall: dict[str, Any] | None, label: str | None = None) -> Any:
    """The Python stage that makes each task's rows, tagged with the attempt that made them."""

    def generate(batches: Any) -> Any:
        import hashlib

        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task, attempt = ctx.partitionId(), ctx.attemptNumber()
        host = os.environ.get("SPARK_LOCAL_IP", "?")  # the worker's address, inherited by its executors
        size = BIG_PAYLOAD if task in big else SMALL_PAYLOAD
        for _ in batches:  # one input row per task: its index
            pass
        if stall and stall.get("copies_wait") and attempt > stall.get("attempt", 0) and (
                stall.get("tasks") is None or task in stall["tasks"]):
            # A later attempt (a speculative copy) of a task whose first attempt is to stall starts only once that
            # one has stalled mid-upload, before it opens any file of its own: otherwise a fast copy could win
            # before the race under test, and the stalled attempt could not tell its uploads from the copy's.
            flags = Path(stall["dir"])
            first = flags / f"stalled-t{task}-a{stall.get('attempt', 0)}.json"
            deadline = time.monotonic() + float(stall.get("timeout", 300))
            while not first.exists() and not (flags / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        for start in range(0, rows, BATCH_ROWS):
            ids = range(task * rows + start, task * rows + min(rows, start + BATCH_ROWS))
            yield pa.RecordBatch.from_pydict({
                **({"run": pa.array([label] * len(ids), pa.string())} if label else {}),
                "id": pa.array(list(ids), pa.int64()),
                "task": pa.array([task] * len(ids), pa.int32()),
                "attempt": pa.array([attempt] * len(ids), pa.int32()),
                "host": pa.array([host] * len(ids), pa.string()),
                "k": pa.array(["b" if i % 10 == 0 else "a" for i in ids], pa.string()),
                "payload": pa.array([(hashlib.sha256(str(i).encode()).hexdigest() * (size // 64 + 1))[:size]
                                     for i in ids], pa.string()),
            })

    return generate


def stall_hook(spec: dict[str, Any], *, endpoint: str, bucket: str, prefix: str, big: frozenset[int]) -> Any:
    """The write's task hook (see the module docstring)."""
    flags = Path(spec["dir"])
    only_tasks = spec.get("tasks")  # None: every task
    stall_attempt = spec.get("attempt", 0)
    at_batch = spec["at_batch"]
    timeout = float(spec.get("timeout", 300))

    def hook(task_id: int, attempt: int, batches: int) -> None:
        if batches != at_batch or attempt != stall_attempt:
            return
        if only_tasks is not None and task_id not in only_tasks:
            return
        release = flags / "release"
        if release.exists():
            return
        client = _client(endpoint)
        mine = f"/part-{task_id:05d}-"
        deadline = time.monotonic() + timeout
        pending: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            pending = []
            for u in client.list_multipart_uploads(Bucket=bucket, Prefix=f"{prefix}/").get("Uploads", []):
                if mine not in u["Key"]:
                    continue
                parts = client.list_parts(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"]).get("Parts", [])
                pending.append({"key": u["Key"], "uploadId": u["UploadId"], "parts": len(parts),
                                "bytes": sum(p["Size"] for p in parts)})
            # Parts upload in the writer's threads: wait (bounded) until the big file shows one.
            if task_id not in big or any(p["parts"] for p in pending if "/k=a/" in p["key"]):
                break
            time.sleep(0.2)
        # Other attempts of the task use the same keys: the upload ids tell them apart. The test only needs the set.
        write_json(flags / f"stalled-t{task_id}-a{attempt}.json", {
            "task": task_id, "attempt": attempt, "pid": os.getpid(), "ppid": os.getppid(),
            "host": os.environ.get("SPARK_LOCAL_IP", "?"), "pending": pending, "at": time.time(),
        })
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        # Still alive after the job committed? Then this is a loser that outlived its job: say what it sees.
        committed = (flags / "committed.json").exists()
        gone = []
        for p in pending:
            try:
                client.list_parts(Bucket=bucket, Key=p["key"], UploadId=p["uploadId"])
            except client.exceptions.NoSuchUpload:
                gone.append(p["uploadId"])
        write_json(flags / f"released-t{task_id}-a{attempt}.json", {
            "task": task_id, "attempt": attempt, "pid": os.getpid(), "at": time.time(), "jobCommitted": committed,
            "uploadsGone": gone,
        })

    return hook


class Driver:
    def __init__(self, spark: Any, directory: Path):
        self.spark = spark
        self.sc = spark.sparkContext
        self.dir = directory
        # The running write's flag directory and where it is to block (or die), set before it starts.
        self._current: dict[str, Any] = {}
        self._install_blocks()

    # ------------------------------------------------------------ blocking at a commit point
    def _install_blocks(self) -> None:
        import mpcommit
        from mpcommit.protocol import faults

        driver = self
        create, commit = mpcommit.Job.create, mpcommit.Job.commit

        def create_and_say(*a: Any, **kw: Any) -> Any:
            job = create(*a, **kw)
            if driver._current.get("dir"):  # the soak learns the job id of a driver it may kill
                write_json(Path(driver._current["dir"]) / "job.json", {"jobId": job.job_id, "at": time.time()})
            return job

        def commit_or_block(job: Any, *a: Any, **kw: Any) -> Any:
            if driver._current.get("dir"):
                write_json(Path(driver._current["dir"]) / "commit_start.json", {"jobId": job.job_id, "at": time.time()})
            if driver._current.get("block") == "before_journal":
                driver._block_here(job.job_id)
            return commit(job, *a, **kw)

        mpcommit.Job.create = create_and_say  # type: ignore[method-assign]
        mpcommit.Job.commit = commit_or_block  # type: ignore[method-assign]

        def hook(name: str, index: int) -> None:
            block = driver._current.get("block")
            if isinstance(block, list) and block[0] == name and block[1] == index:
                driver._block_here(None)

        # For the life of the process; the context manager is kept, or its collection would remove the hook.
        self._hook = faults.installed(hook)
        self._hook.__enter__()

    def _block_here(self, job_id: str | None) -> None:
        current, self._current = self._current, {}  # one block per write; the next write sets its own
        if current.get("kill"):
            os.kill(os.getpid(), signal.SIGKILL)  # the soak's random driver death, at a chosen commit point
        write_json(Path(current["dir"]) / "blocked.json", {"block": current["block"], "jobId": job_id,
                                                           "at": time.time()})
        threading.Event().wait()  # until the test kills this process

    # ------------------------------------------------------------ commands
    def running_tasks(self) -> int:
        """Tasks running on any executor (the JVM's status tracker; PySpark's does not say)."""
        return sum(info.numRunningTasks() for info in self.sc._jsc.sc().statusTracker().getExecutorInfos())

    def executor_hosts(self) -> list[str]:
        infos = self.sc._jsc.sc().statusTracker().getExecutorInfos()
        driver_host = self.sc.getConf().get("spark.driver.host")
        hosts = [info.host() for info in infos]
        hosts.remove(driver_host)  # the driver counts itself as one
        return sorted(hosts)

    def wait_executors(self, count: int, timeout: float = 180) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.executor_hosts()) < count and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.executor_hosts()

    def write(self, args: dict[str, Any]) -> dict[str, Any]:
        from mpcommit import RetryPolicy, S3Options, WriterSettings
        from mpcommit.spark import write

        flags = Path(args["dir"])
        flags.mkdir(parents=True, exist_ok=True)
        self._current = {"dir": str(flags), "block": args.get("block"), "kill": bool(args.get("kill"))}
        if args.get("delete_batch"):
            # Several delete batches without seeding thousands of old objects (as tests/reliability does).
            import mpcommit.protocol.commit.replacing as commit_module

            assert hasattr(commit_module, "DELETE_BATCH"), "the commit module no longer has DELETE_BATCH"
            commit_module.DELETE_BATCH = int(args["delete_batch"])
        endpoint, bucket, prefix = args["endpoint"], args["bucket"], args.get("prefix", "t")
        tasks, rows = int(args.get("tasks", 4)), int(args.get("rows", 6000))
        big = frozenset(args.get("big", ()))
        schema = f"run string, {SCHEMA}" if args.get("label") else SCHEMA
        df = self.spark.range(0, tasks, 1, tasks).mapInArrow(
            generator(rows, big, args.get("stall"), args.get("label")), schema)
        hook = (stall_hook(args["stall"], endpoint=endpoint, bucket=bucket, prefix=prefix, big=big)
                if args.get("stall") else None)
        watchdog = self._watchdog(float(args["cancel_without_executors"])) if args.get("cancel_without_executors") else None
        try:
            retry = RetryPolicy(max_attempts=6, initial_delay=0.05, max_delay=1.0)
            options = S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test",
                                secret_access_key="test", retry=retry)
            report = write(df, f"s3://{bucket}/{prefix}", format="parquet", mode=args.get("mode", "overwrite"),
                           partition_by=["k"], partition_overwrite=args.get("partition_overwrite", "static"),
                           # Row groups of 1 MiB: bytes reach the multipart writer (and parts reach S3) mid-task.
                           options={"compression": "none", "parquet.block.size": str(1 << 20)},
                           s3=options, writer=WriterSettings(initial_part_size=5 << 20, max_parts_in_flight=2,
                                                             upload_threads=2),
                           commit_threads=int(args.get("commit_threads", 1)), _task_hook=hook)
            out: dict[str, Any] = {"report": report.summary(), "filenames": list(report.filenames)}
            write_json(flags / "committed.json", out)
        except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
            out = {"error": type(exc).__name__, "message": str(exc)[:6000]}
            write_json(flags / "failed.json", out)
        finally:
            self._current = {}
            if watchdog is not None:
                watchdog.set()
        hold = args.get("hold_after_commit")
        if hold:
            deadline = time.monotonic() + float(args.get("hold_timeout", 300))
            while not Path(hold).exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        drain = time.monotonic() + float(args.get("drain_timeout", 120))
        while self.running_tasks() and time.monotonic() < drain:
            time.sleep(0.2)
        # A job's end flushes the event log, with every event posted before it (the losers' ends included).
        # Without an executor that job could never run: the log is then flushed when the application stops.
        if self.executor_hosts():
            self.spark.range(1).count()
        out["appId"] = self.sc.applicationId
        write_json(flags / "done.json", out)
        return out

    def _watchdog(self, seconds: float) -> threading.Event:
        done = threading.Event()

        def watch() -> None:
            since: float | None = None
            while not done.wait(0.5):
                if self.executor_hosts():
                    since = None
                    continue
                since = since or time.monotonic()
                if time.monotonic() - since >= seconds:
                    self.sc.cancelAllJobs()
                    return

        threading.Thread(target=watch, name="no-executor-watchdog", daemon=True).start()
        return done


def main(setup: dict[str, Any]) -> int:
    warnings.filterwarnings("ignore")
    directory = Path(setup["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf().setAll(list(setup["conf"].items()))
    conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
    spark = SparkSession.builder.appName(setup.get("name", "mpcommit-cluster-test")).config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    driver = Driver(spark, directory)
    write_json(directory / "driver.json", {"pid": os.getpid(), "appId": spark.sparkContext.applicationId})
    out = sys.stdout
    sys.stdout = sys.stderr  # only answers on stdout
    lock = threading.Lock()

    def answer(doc: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(doc) + "\n")
            out.flush()

    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        op = command["op"]
        if op == "quit":
            break
        if op == "write":
            answer(driver.write(command["args"]))
        elif op == "write_async":
            threading.Thread(target=driver.write, args=(command["args"],), daemon=True).start()
            answer({"started": True})
        elif op == "executors":
            answer({"hosts": driver.wait_executors(int(command["count"]), float(command.get("timeout", 180)))})
        else:
            answer({"error": "UsageError", "message": f"unknown op {op!r}"})
    spark.stop()
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(main(json.loads(sys.argv[1])))
