"""Scenario 6: the real peers. Spark's own ``df.write.partitionBy("p").parquet("s3a://...")`` with Hadoop's
committers, against ``mpcommit.spark.write``, on the same DataFrame, server and network, interleaved.

Variants (every one a real, unmodified implementation; nothing here is a model):

* ``v1``: FileOutputCommitter, algorithm 1, through Spark's default commit protocol
  (``SQLHadoopMapReduceCommitProtocol``; Parquet's ``ParquetOutputCommitter``): task commit renames the task
  attempt directory under ``_temporary/0/``, job commit merges every file into the destination. On S3A a rename
  is a copy and a delete per file.
* ``v2``: FileOutputCommitter, algorithm 2: task commit merges the task's files straight into the destination.
* ``magic``: the S3A magic committer, through spark-hadoop-cloud's ``PathOutputCommitProtocol``: files stream to
  their final keys as pending multipart uploads described under ``__magic``; the job commit completes them.
  At Hadoop's defaults (``core-default.xml``: 8 committer threads, disk buffers, ``.pending`` files in S3).
* ``magic-tuned``: the same committer as Hadoop's documentation advises its users to run it for a job like this
  one (:data:`S3A_TUNING`, each value with the reason).
* ``directory``: the S3A directory staging committer: tasks write to the local disk, task commit uploads each
  file as a pending multipart upload and records it in the cluster filesystem (``file://`` in local mode,
  ``fs.s3a.committer.staging.tmp.path``); the job commit completes them. Conflict mode ``append`` (every
  destination is a fresh prefix, and Spark's overwrite has already cleared it). Defaults otherwise.
* ``directory-tuned``: the same with :data:`S3A_TUNING`'s settings that apply to it.
* ``mpcommit``: ``mpcommit.spark.write(df, "s3a://...", "parquet", mode="overwrite", partition_by=["p"])``.

Every variant writes with ``mode("overwrite")`` to a fresh prefix of a bucket of its own (S3A keeps one
filesystem instance per bucket, and its thread pools, connection pool and buffers are set per instance: a bucket
per variant, with S3A's per-bucket options, is how each variant gets its own settings), snappy Parquet.

What is measured per run, and where it comes from:

* end to end: the wall time of the ``write`` call in the driver;
* job commit: for Spark, the SQL metric ``job commit time`` that Spark's ``FileFormatWriter`` times around the
  commit protocol's ``commitJob`` (read from the event log, ``SparkListenerDriverAccumUpdates``); task commit
  likewise (``task commit time``, summed over tasks); for mpcommit, its report's ``commit`` timing;
* requests by S3 operation, bytes up and down, bytes copied server-side: the counting proxy
  (``tests/support/s3_network.py``) that every client here sends through -- S3A's ``fs.s3a.endpoint`` and mpcommit's
  endpoint both point at it, with no shaping ("raw") or the S3-like profile;
* CPU: ``/proc`` (psutil) of the Spark JVM (in ``local[2]`` the driver and the executors are one JVM), of the
  Python workers it starts (mpcommit's tasks run there), of the Python driver; the tasks' own JVM CPU from the
  event log (``Executor CPU Time`` of every task); and the proxy's and the S3 server's.

Spark runs in a child process (``python -m bench.bench_spark_peers``): its JVM must start with the S3A jars on
its classpath, which an earlier scenario's JVM in the same process would not have.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.common import (  # noqa: E402
    GiB,
    empty_prefix,
    ensure_bucket,
    human_bytes,
    log,
    make_client,
    s3_options,
)

BUCKET = "bench-peers"
VARIANTS = ("magic-tuned", "mpcommit", "magic", "directory-tuned", "directory", "v2", "v1")
LABELS = {
    "v1": "Spark + FileOutputCommitter v1",
    "v2": "Spark + FileOutputCommitter v2",
    "magic": "Spark + S3A magic committer, Hadoop's defaults",
    "magic-tuned": "Spark + S3A magic committer, tuned",
    "directory": "Spark + S3A directory staging committer, Hadoop's defaults",
    "directory-tuned": "Spark + S3A directory staging committer, tuned",
    "mpcommit": "mpcommit.spark.write",
}

#: The S3A settings of the tuned variants, chosen as Hadoop's own documentation advises (hadoop-aws 3.5.0:
#: ``committers.md``, ``performance.md``, ``core-default.xml``, the ``BulkDelete`` and ``CommitConstants``
#: javadoc): (key, tuned value, Hadoop's default as this Hadoop ships it, why). ``applies`` names the committers
#: a setting changes anything for. BENCHMARKS.md prints this table; every run records the values in effect.
S3A_TUNING: tuple[dict[str, str], ...] = (
    {"key": "fs.s3a.committer.threads", "value": "32", "default": "8", "applies": "magic directory",
     "why": "Threads of the committers' parallel work (job commit's completes, task commit's uploads and "
            "listings); core-default.xml ships 8, hadoop-aws's own CommitConstants.DEFAULT_COMMITTER_THREADS is 32, "
            "and Hadoop's docs advise more threads when a job writes many files. 32 is also mpcommit's commit "
            "concurrency, so both commits keep as many completes in flight."},
    {"key": "fs.s3a.threads.max", "value": "96", "default": "96", "applies": "magic directory",
     "why": "The filesystem's pool for block uploads and other queued work; performance.md advises a larger "
            "pool for parallel IO. Kept at 96: 8 writing tasks x fs.s3a.fast.upload.active.blocks (4) = 32 "
            "uploads at most here, well under it."},
    {"key": "fs.s3a.connection.maximum", "value": "500", "default": "500", "applies": "magic directory",
     "why": "core-default.xml: must be bigger than fs.s3a.threads.max so that threads never wait for a "
            "connection; the committer's two pools of fs.s3a.committer.threads use the same connection pool "
            "(performance.md): 96 + 2 x 32 = 160 < 500, so the default holds."},
    {"key": "fs.s3a.fast.upload.buffer", "value": "bytebuffer", "default": "disk", "applies": "magic",
     "why": "performance.md, 'Maybe: Buffer Write Data in Memory': memory buffers can be faster when the "
            "bandwidth to the store is so high that disk IO becomes the bottleneck (a loopback server is that "
            "case); the memory they take is fs.s3a.multipart.size x active blocks per stream, and here a file is "
            "about 1 MiB. (The staging committer buffers on local disk by design: not applied to it.)"},
    {"key": "fs.s3a.committer.magic.track.commits.in.memory.enabled", "value": "true", "default": "false",
     "applies": "magic",
     "why": "HADOOP-19047: the magic stream keeps each file's pending commit in the task's JVM instead of "
            "writing a .pending file to S3 that task commit lists and reads back: fewer requests per file. Valid "
            "when task commit runs in the JVM that wrote the files, which Spark's tasks always do."},
    {"key": "fs.s3a.create.performance", "value": "true", "default": "false", "applies": "magic directory",
     "why": "performance.md, 'Create Performance': no overwrite or parent-directory probes when a file is "
            "created; advised for uploads 'to a new path where no existing data exists', which every run here "
            "is (a fresh prefix, cleared by Spark's overwrite)."},
)
#: The keys whose values in effect every run records (read from the filesystem instance of its bucket).
S3A_KEYS = tuple(t["key"] for t in S3A_TUNING) + ("fs.s3a.committer.name", "fs.s3a.fast.upload.active.blocks",
                                                  "fs.s3a.multipart.size", "fs.s3a.bulk.delete.page.size")


def bucket_of(variant: str) -> str:
    """Each variant's own bucket (S3A's filesystem instances, pools and buffers are per bucket)."""
    return f"{BUCKET}-{variant}"


def tuned_settings(variant: str) -> dict[str, str]:
    """The S3A settings a tuned variant adds to its committer's (none for the others)."""
    if not variant.endswith("-tuned"):
        return {}
    committer = variant.split("-", 1)[0]
    return {t["key"]: t["value"] for t in S3A_TUNING if committer in t["applies"].split()}


def bucket_conf(variants: Any) -> dict[str, str]:
    """Spark settings giving each variant's bucket its own S3A settings (S3A's per-bucket options:
    ``fs.s3a.bucket.NAME.X`` applies as ``fs.s3a.X`` to that bucket's filesystem instance)."""
    conf = {}
    for v in variants:
        for key, value in tuned_settings(v).items():
            conf[f"spark.hadoop.fs.s3a.bucket.{bucket_of(v)}.{key[len('fs.s3a.'):]}"] = value
    return conf
DEFAULT_SIZE = 1 * GiB
SPARK_TASKS = 4
DOUBLES = 4
ROW_BYTES = 8 + 8 * DOUBLES  # id + random doubles (incompressible); the partition column lives in the path
#: Task slots of ``local[N]``: this machine's 2 cores. Through the S3-like network, where S3A's tasks wait on
#: one request after another, a run may give Spark more slots than cores (``--slots``), as a cluster would.
SPARK_SLOTS = 2
MASTER = f"local[{SPARK_SLOTS}]"

_SPARK_PROTOCOL = "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
_CLOUD_PROTOCOL = {
    "spark.sql.sources.commitProtocolClass": "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol",
    "spark.sql.parquet.output.committer.class": "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter",
    "mapreduce.outputcommitter.factory.scheme.s3a": "org.apache.hadoop.fs.s3a.commit.S3ACommitterFactory",
}


def variant_settings(variant: str, staging_dir: str) -> dict[str, str]:
    """Session settings for one variant's write (set for the write, then put back)."""
    if variant in ("v1", "v2"):
        # Spark 4 turns the magic committer on by itself when spark-hadoop-cloud is on the classpath
        # (SparkContext.enableMagicCommitterIfNeeded sets these four unless fs.s3a.committer.magic.enabled is
        # false): name Spark's own commit protocol and Parquet's FileOutputCommitter explicitly.
        return {"spark.sql.sources.commitProtocolClass": _SPARK_PROTOCOL,
                "spark.sql.parquet.output.committer.class": "org.apache.parquet.hadoop.ParquetOutputCommitter",
                "fs.s3a.committer.name": "file",
                "mapreduce.fileoutputcommitter.algorithm.version": variant[1]}
    # The committer's own options go into the write's job configuration as well as into the bucket's settings:
    # S3A reads some of them from the job, some from the filesystem instance.
    if variant in ("magic", "magic-tuned"):
        return {**_CLOUD_PROTOCOL, "fs.s3a.committer.name": "magic", "fs.s3a.committer.magic.enabled": "true",
                **tuned_settings(variant)}
    if variant in ("directory", "directory-tuned"):
        return {**_CLOUD_PROTOCOL, "fs.s3a.committer.name": "directory",
                "fs.s3a.committer.staging.conflict-mode": "append",
                "fs.s3a.committer.staging.tmp.path": f"file://{staging_dir}", **tuned_settings(variant)}
    return {}


#: Runs per size and variant. The two the targets compare (magic, mpcommit) repeat most; the rest of the real
#: peers run fewer times, because with S3A every file costs requests one after another in its task (and, for
#: v1 and v2, renames -- copy and delete -- file by file): see BENCHMARKS.md for what one run of each costs.
DEFAULT_PLAN = {
    "raw": "1000:magic-tuned=5,mpcommit=5,magic=5,directory-tuned=5,directory=2,v2=1,v1=1;"
           "10000:magic-tuned=5,mpcommit=5,magic=2,directory-tuned=2",
    "s3": "1000:magic-tuned=5,mpcommit=5,magic=5,directory-tuned=5,directory=2,v2=1,v1=1;"
          "10000:magic-tuned=5,mpcommit=5,magic=2,directory-tuned=2",
}


def parse_plan(text: str) -> dict[int, dict[str, int]]:
    """``"1000:magic=3,mpcommit=3;10000:magic=1,mpcommit=1"`` -> {files: {variant: runs}} (order kept)."""
    plan: dict[int, dict[str, int]] = {}
    for block in filter(None, (b.strip() for b in text.split(";"))):
        files, _, rest = block.partition(":")
        runs: dict[str, int] = {}
        for item in filter(None, (i.strip() for i in rest.split(","))):
            variant, _, n = item.partition("=")
            if variant not in LABELS:
                raise ValueError(f"unknown variant {variant!r}: one of {', '.join(LABELS)}")
            runs[variant] = int(n or 1)
        plan[int(files)] = runs
    return plan


def schedule(runs: dict[str, int]) -> list[tuple[int, str]]:
    """(round, variant): round r holds every variant with more than r runs. The first two variants of the plan
    (the pair the targets compare) always run back to back, in ABBA order from round to round (A B rest,
    rest B A, A B rest, ...); the others' order rotates, so that none always comes first."""
    from bench.common import abba

    order: list[tuple[int, str]] = []
    names = list(runs)
    rounds = max(runs.values(), default=0)
    pairs = abba(names[:2], rounds)
    for r in range(rounds):
        pair = [v for rr, v in pairs if rr == r and runs[v] > r]
        rest = [v for v in names[2:] if runs[v] > r]
        if rest:
            k = r % len(rest)
            rest = rest[k:] + rest[:k]
        seq = pair + rest if r % 2 == 0 else rest + pair
        order += [(r, v) for v in seq]
    return order


def shape(files: int, size: int, tasks: int = SPARK_TASKS) -> dict[str, int]:
    """Rows and partition values for ``files`` output files of ``size`` bytes in all: every task holds rows of
    every partition value (``p = id % values``), so each task writes one file per value: files = tasks x values."""
    values = max(1, round(files / tasks))
    return {"rows": max(1, size // ROW_BYTES), "values": values, "tasks": tasks, "files": tasks * values}


# ---------------------------------------------------------------- the child: Spark and the runs
def session_conf(work: Path, endpoint: str, *, tasks: int, driver_memory: str) -> dict[str, str]:
    """A benchmark session's settings: its event log (the job commit's metric is read from it), local and S3A
    buffer folders under ``work``, S3A sent to ``endpoint`` (the counting proxy)."""
    (work / "eventlog").mkdir(parents=True, exist_ok=True)
    return {
        "spark.driver.memory": driver_memory,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{work / 'eventlog'}",
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        "spark.local.dir": str(work / "spark-local"),
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.buffer.dir": str(work / "s3a-buffer"),
        "spark.sql.shuffle.partitions": str(tasks),
    }


def peers_dataframe(spark: Any, n_rows: int, values: int, *, tasks: int) -> Any:
    """The peers' rows: ``id``, ``p = id % values`` and DOUBLES random doubles, in ``tasks`` partitions of
    contiguous ids (every task holds every value of ``p``)."""
    from pyspark.sql import functions as F

    df = spark.range(0, n_rows, numPartitions=tasks)
    cols = [F.col("id"), (F.col("id") % values).cast("int").alias("p")]
    cols += [F.rand(seed=i).alias(f"x{i}") for i in range(DOUBLES)]
    return df.select(*cols)


class EventLog:
    """Reads a running application's event log (JSON lines) from where the last read stopped."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.metric_names: dict[int, str] = {}

    def read_new(self) -> list[dict[str, Any]]:
        events = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        for line in data[: end + 1].splitlines():
            if line.strip():
                events.append(json.loads(line))
        return events

    def _plan_metrics(self, plan: dict[str, Any]) -> None:
        for m in plan.get("metrics", []) or []:
            self.metric_names[int(m["accumulatorId"])] = m["name"]
        for child in plan.get("children", []) or []:
            self._plan_metrics(child)

    def window(self, timeout: float = 60.0) -> dict[str, Any]:
        """Everything the application logged since the last call, once every job and SQL execution that started
        in it has ended (the listener bus is asynchronous: the last events land after ``write`` returns)."""
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            events += self.read_new()
            kinds = Counter(e["Event"].rsplit(".", 1)[-1] for e in events)
            done = (kinds["SparkListenerJobStart"] == kinds["SparkListenerJobEnd"]
                    and kinds["SparkListenerSQLExecutionStart"] == kinds["SparkListenerSQLExecutionEnd"]
                    and kinds["SparkListenerJobStart"] > 0)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        out: dict[str, Any] = {"complete": done, "jobs": kinds["SparkListenerJobStart"], "tasks": 0,
                               "executor_cpu_s": 0.0, "executor_run_s": 0.0, "gc_s": 0.0, "driver_metrics": {},
                               "task_metrics": Counter()}
        for e in events:
            kind = e["Event"].rsplit(".", 1)[-1]
            if kind in ("SparkListenerSQLExecutionStart", "SparkListenerSQLAdaptiveExecutionUpdate"):
                self._plan_metrics(e.get("sparkPlanInfo") or {})
            elif kind == "SparkListenerSQLAdaptiveSQLMetricUpdates":
                for m in e.get("sqlPlanMetrics", []) or []:
                    self.metric_names[int(m["accumulatorId"])] = m["name"]
        for e in events:
            kind = e["Event"].rsplit(".", 1)[-1]
            if kind == "SparkListenerTaskEnd":
                m = e.get("Task Metrics") or {}
                out["tasks"] += 1
                out["executor_cpu_s"] += (m.get("Executor CPU Time", 0) + m.get("Executor Deserialize CPU Time", 0)) / 1e9
                out["executor_run_s"] += m.get("Executor Run Time", 0) / 1e3
                out["gc_s"] += m.get("JVM GC Time", 0) / 1e3
                for acc in (e.get("Task Info") or {}).get("Accumulables", []) or []:
                    name = self.metric_names.get(int(acc["ID"])) or acc.get("Name")
                    if name in ("task commit time", "number of written files", "written output"):
                        out["task_metrics"][name] += int(acc.get("Update") or 0)
            elif kind == "SparkListenerDriverAccumUpdates":
                for acc_id, value in e.get("accumUpdates", []):
                    name = self.metric_names.get(int(acc_id))
                    if name:
                        out["driver_metrics"][name] = value
        out["task_metrics"] = dict(out["task_metrics"])
        return out


class CpuMeter:
    """CPU seconds (user + system) of the Spark JVM, the Python processes under it (the workers), this Python
    driver, the proxy and the S3 server, sampled every ``interval`` seconds by a thread of its own.

    Python workers come and go (a dead worker's time would otherwise vanish, or land in its parent's
    ``children_*`` times only if that parent reaps it), so the meter keeps the last time it saw of every process,
    own time only, and a figure is the sum over processes of last-seen minus first-seen (zero for processes born
    during the run). A worker that dies loses at most its last ``interval`` of CPU."""

    def __init__(self, proxy_pid: int | None, server_pid: int | None, interval: float = 0.5):
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.roots: dict[str, Any] = {}
        for name, pid in (("proxy", proxy_pid), ("server", server_pid)):
            if pid:
                self.roots[name] = psutil.Process(pid)
        self.seen: dict[tuple[str, int], float] = {}
        self.interval = interval
        self._lock = __import__("threading").Lock()
        self._stop = False
        self._thread: Any = None

    def find_jvm(self) -> bool:
        for p in self.me.children(recursive=True):
            try:
                if p.name() == "java":
                    self.roots["jvm"] = p
                    return True
            except self.psutil.Error:
                continue
        return False

    def _sample(self) -> None:
        found: dict[tuple[str, int], float] = {}
        t = self.me.cpu_times()
        found[("driver_python", self.me.pid)] = t.user + t.system
        for name, root in self.roots.items():
            try:
                procs = [root, *root.children(recursive=True)]
            except self.psutil.Error:
                continue
            for p in procs:
                group = "python_workers" if name == "jvm" and p.pid != root.pid else name
                try:
                    t = p.cpu_times()
                except self.psutil.Error:
                    continue
                found[(group, p.pid)] = t.user + t.system
        with self._lock:
            self.seen.update(found)

    def _loop(self) -> None:
        while not self._stop:
            self._sample()
            time.sleep(self.interval)

    def start(self) -> "CpuMeter":
        import threading

        self._thread = threading.Thread(target=self._loop, name="cpu-meter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True

    def snapshot(self) -> dict[tuple[str, int], float]:
        self._sample()
        with self._lock:
            return dict(self.seen)

    @staticmethod
    def delta(before: dict[tuple[str, int], float], after: dict[tuple[str, int], float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for (group, pid), value in after.items():
            out[group] = out.get(group, 0.0) + value - before.get((group, pid), 0.0)
        return {k: round(v, 2) for k, v in out.items()}


def _proxy_call(proxy: str, path: str, method: str = "GET") -> dict[str, Any]:
    req = urllib.request.Request(f"{proxy}/__proxy/{path}", data=b"" if method == "POST" else None, method=method)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def _listing(client: Any, bucket: str, prefix: str) -> dict[str, Any]:
    files = markers = 0
    size = 0
    hidden: list[str] = []
    first = ""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []) or []:
            rel = o["Key"][len(prefix):]
            if rel == "" or rel.endswith("/"):
                markers += 1
            elif any(part.startswith(("_", ".")) for part in rel.split("/")):
                hidden.append(rel)
            else:
                files += 1
                size += o["Size"]
                first = first or o["Key"]
    uploads = 0
    kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = client.list_multipart_uploads(**kw)
        uploads += len(page.get("Uploads", []) or [])
        if not page.get("IsTruncated"):
            break
        kw["KeyMarker"], kw["UploadIdMarker"] = page.get("NextKeyMarker", ""), page.get("NextUploadIdMarker", "")
    success: dict[str, Any] = {}
    try:
        body = client.get_object(Bucket=bucket, Key=prefix + "_SUCCESS")["Body"].read()
        success = success_summary(body)
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        success = {"committer": f"unreadable: {type(exc).__name__}"}
    return {"files": files, "bytes": size, "markers": markers, "success": success, "hidden": sorted(hidden)[:20],
            "hidden_count": len(hidden), "pending_uploads": uploads, "first_file": first}


def success_summary(body: bytes) -> dict[str, Any]:
    """What a run keeps of its ``_SUCCESS``: the committer's name and size, and from the S3A committers' JSON its
    IOStatistics -- the counters that are not zero and the duration statistics that have samples -- which is
    where S3A says what its job commit did (completes, listings, deletes, loading the pending sets) and how long
    each took in total. FileOutputCommitter's ``_SUCCESS`` is empty; mpcommit's holds its own timings."""
    if not body.startswith(b"{"):
        return {"committer": f"{len(body)} bytes", "bytes": len(body)}
    data = json.loads(body)
    out: dict[str, Any] = {"committer": data.get("committer", "json"), "bytes": len(body)}
    stats = data.get("iostatistics") or {}
    if stats:
        out["counters"] = {k: v for k, v in (stats.get("counters") or {}).items() if v}
        means = stats.get("meanstatistics") or {}
        out["durations_ms"] = {k: {"n": v.get("samples", 0), "sum": v.get("sum", 0)} for k, v in means.items()
                               if v.get("samples")}
        out["maximums_ms"] = {k: v for k, v in (stats.get("maximums") or {}).items() if v and v > 0}
    if isinstance(data.get("timings"), dict):
        out["timings"] = data["timings"]
    if data.get("diagnostics"):
        out["diagnostics"] = {k: v for k, v in data["diagnostics"].items()
                              if k.startswith("fs.s3a.") or "thread" in k or "committer" in k}
    return out


def _rows_in(client: Any, bucket: str, prefix: str) -> int:
    """Rows of every Parquet file under ``prefix``, from the footers (read directly from the server)."""
    from concurrent.futures import ThreadPoolExecutor

    keys = [(o["Key"], o["Size"]) for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", []) or [] if o["Key"].endswith(".parquet")]

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(lambda item: _footer(client, bucket, *item).num_rows, keys))


def _footer(client: Any, bucket: str, key: str, size: int) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tail = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={max(0, size - 65536)}-")["Body"].read()
    meta_len = int.from_bytes(tail[-8:-4], "little")
    if meta_len + 8 > len(tail):  # a footer over 64 KiB: read the whole file
        tail = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-(meta_len + 8):]))


def compression_of(client: Any, bucket: str, key: str) -> str:
    """The codec of a written Parquet file's first column chunk (every run states what it wrote)."""
    if not key:
        return "?"
    size = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
    meta = _footer(client, bucket, key, size)
    if not meta.num_row_groups:
        return "?"
    return str(meta.row_group(0).column(0).compression).lower()


def effective_s3a(spark: Any, bucket: str, settings: dict[str, str]) -> dict[str, Any]:
    """The S3A settings in effect for ``bucket``'s writes: the filesystem instance's configuration (with the
    bucket's own options applied) overlaid by the write's settings, as the committer sees them."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"s3a://{bucket}/")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    conf = fs.getConf()
    out = {k: conf.get(k) for k in S3A_KEYS}
    out.update({k: v for k, v in settings.items() if k in S3A_KEYS})
    out["filesystem"] = fs.getClass().getSimpleName()
    return {k: v for k, v in out.items() if v is not None}


def child(args: argparse.Namespace) -> int:
    import psutil  # noqa: F401 - fail early

    from bench.records import RecordLog
    from mpcommit.options import S3Options, WriterSettings
    from mpcommit.protocol.commit import DEFAULT_COMMIT_THREADS
    from mpcommit.spark import write as mp_write
    from tests.support.spark_s3a import s3a_jars_problem, session_has_s3a, session_settings, spark_session

    problem = s3a_jars_problem()
    if problem:
        raise SystemExit(f"bench_spark_peers: {problem}")
    work = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    eventlog_dir = work / "eventlog"
    staging = work / "staging"
    plan = parse_plan(args.plan)
    variants = tuple(dict.fromkeys(v for runs in plan.values() for v in runs))
    conf = {**session_conf(work, args.endpoint, tasks=args.tasks, driver_memory=args.driver_memory),
            **bucket_conf(variants)}
    spark, _ = spark_session(master=f"local[{args.slots}]", app="mpcommit-bench-peers", conf=conf)
    if not session_has_s3a(spark):
        raise SystemExit("bench_spark_peers: the Spark JVM has no S3A classes")
    spark.sparkContext.setLogLevel("WARN")
    app_id = spark.sparkContext.applicationId
    elog = EventLog(next(eventlog_dir.glob(f"{app_id}*")))
    cpu = CpuMeter(args.proxy_pid, args.server_pid)
    jvm_found = cpu.find_jvm()
    cpu.start()
    direct = make_client(args.upstream)
    for v in variants:
        ensure_bucket(direct, bucket_of(v))
    results: dict[str, Any] = {"variants": list(variants), "plan": args.plan, "size": args.size, "tasks": args.tasks, "master": f"local[{args.slots}]",
                               "driver_memory": args.driver_memory, "runs": [], "shapes": {},
                               "spark_version": spark.version, "jvm_found": jvm_found,
                               "settings": {v: variant_settings(v, str(staging)) for v in variants}}
    out_path = Path(args.out)
    profile = json.loads(args.network_profile) if args.network_profile else None
    records = RecordLog("peers", directory=args.records, network=args.network, profile=profile,
                        spark=spark.version, master=f"local[{args.slots}]", tasks=args.tasks, size=args.size,
                        driver_memory=args.driver_memory, plan=args.plan, jvm_found=jvm_found,
                        server_pid_affinity=_affinity(args.server_pid), proxy_pid_affinity=_affinity(args.proxy_pid),
                        command=args.command or None)
    codec = spark.conf.get("spark.sql.parquet.compression.codec", "snappy")
    mp_writer = WriterSettings()
    mp_settings = {"commit_threads": DEFAULT_COMMIT_THREADS, "max_pool_connections": S3Options().max_pool_connections,
                   "part_size": mp_writer.initial_part_size, "max_parts_in_flight": mp_writer.max_parts_in_flight,
                   "upload_threads": mp_writer.upload_threads,
                   "complete_transport": S3Options().complete_transport.value,
                   "max_completes_in_flight": S3Options().max_completes_in_flight}

    def dataframe(n_rows: int, values: int) -> Any:
        return peers_dataframe(spark, n_rows, values, tasks=args.tasks)

    def one_write(variant: str, df: Any, prefix: str) -> dict[str, Any]:
        uri = f"s3a://{bucket_of(variant)}/{prefix.rstrip('/')}"
        info: dict[str, Any] = {}
        if variant == "mpcommit":
            report = mp_write(df, uri, "parquet", mode="overwrite", partition_by=["p"], s3=s3_options(args.endpoint))
            info["mp_timings"] = {k: round(v, 4) for k, v in report.timings.items()}
            info["mp_files"] = report.files
        else:
            with session_settings(spark, variant_settings(variant, str(staging))):
                df.write.mode("overwrite").partitionBy("p").parquet(uri)
        return info

    effective: dict[str, dict[str, Any]] = {}
    try:
        # Warm-up, untimed: each variant once on a small job (JIT, the Python workers, S3A's client and its
        # filesystem instance for the variant's bucket). Small in files too: with latency, v1 pays about half a
        # second per file.
        warm = dataframe(20_000, 2)
        for v in variants:
            one_write(v, warm, "warmup/")
            empty_prefix(direct, bucket_of(v), "warmup/")
            if v != "mpcommit":
                effective[v] = effective_s3a(spark, bucket_of(v), variant_settings(v, str(staging)))
                log(f"peers: {v}: S3A settings in effect {effective[v]}")
        elog.window()
        for files, runs in plan.items():
            sh = shape(files, args.size, args.tasks)
            results["shapes"][str(files)] = sh
            df = dataframe(sh["rows"], sh["values"])
            for repeat, variant in schedule(runs):
                bucket = bucket_of(variant)
                prefix = f"n{files}/r{repeat}/"
                shutil.rmtree(staging, ignore_errors=True)
                load = os.getloadavg()
                _proxy_call(args.endpoint, "reset", "POST")
                c0 = cpu.snapshot()
                t0 = time.perf_counter()
                info = one_write(variant, df, prefix)
                seconds = time.perf_counter() - t0
                c1 = cpu.snapshot()
                stats = _proxy_call(args.endpoint, "stats")
                ev = elog.window()
                listing = _listing(direct, bucket, prefix)
                rows = _rows_in(direct, bucket, prefix) if (args.check_rows and repeat == 0) else None
                compression = compression_of(direct, bucket, listing["first_file"])
                empty_prefix(direct, bucket, prefix)
                run = {"variant": variant, "files_target": files, "repeat": repeat, "seconds": seconds,
                       "load_before": load, "load_after": os.getloadavg(), "cpu": CpuMeter.delta(c0, c1),
                       "proxy": {"ops": stats["ops"], "totals": stats["totals"], "max_in_flight": stats["max_in_flight"],
                                 "connections": stats["connections"]},
                       "events": ev, "listing": listing, "rows": rows, **info}
                results["runs"].append(run)
                out_path.write_text(json.dumps(results, indent=1, default=str))
                jc = job_commit_seconds(run)
                records.run(**run_record(run, shape=sh, slots=args.slots, compression=compression,
                                         settings=mp_settings if variant == "mpcommit" else effective.get(variant, {}),
                                         codec_setting="snappy (mpcommit's default)" if variant == "mpcommit" else codec))
                log(f"peers: {variant:<15} {files:>6} files r{repeat}: {seconds:6.1f} s, job commit {jc:.2f} s, "
                    f"{listing['files']} files {human_bytes(listing['bytes'])} {compression}, "
                    f"{stats['totals']['requests']:.0f} requests ({stats['totals'].get('throttled', 0):.0f} throttled), "
                    f"{human_bytes(stats['totals']['copied_bytes'])} copied, load {load[0]:.1f}")
    finally:
        cpu.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _affinity(pid: int) -> list[int] | None:
    try:
        import psutil

        return sorted(psutil.Process(pid).cpu_affinity()) if pid else None
    except Exception:  # noqa: BLE001 - only a description
        return None


def run_record(run: dict[str, Any], *, shape: dict[str, int], slots: int, compression: str, settings: dict[str, Any],
               codec_setting: str) -> dict[str, Any]:
    """The compact raw record of one run (bench/results/peers.jsonl): every figure the tables use, and what the
    run wrote, so that runs can be checked to be alike (same rows, tasks, slots, files, codec)."""
    ops = {op: int(v["requests"]) for op, v in run["proxy"]["ops"].items() if v.get("requests")}
    # Per operation, the time its requests spent at the proxy in all (the server's time to the answer's head plus
    # what the network held back): divided by a phase's wall time, the requests it kept in flight -- the same
    # yardstick for every committer.
    op_seconds = {op: v.get("upstream_seconds", 0.0) + v.get("held_seconds", 0.0) for op, v in run["proxy"]["ops"].items()
                  if v.get("requests")}
    totals = run["proxy"]["totals"]
    ev = run.get("events") or {}
    listing = run["listing"]
    return {
        "variant": run["variant"], "files_target": run["files_target"], "pair": run["repeat"],
        "seconds": run["seconds"], "job_commit_s": job_commit_seconds(run), "task_commit_s": task_commit_seconds(run),
        "files": listing["files"], "bytes": listing["bytes"], "rows_expected": shape["rows"], "rows": run.get("rows"),
        "tasks": shape["tasks"], "slots": slots, "partition_values": shape["values"], "compression": compression,
        "codec_setting": codec_setting, "pending_left": listing["pending_uploads"], "hidden_left": listing.get("hidden_count"),
        "success": listing.get("success"), "mp_timings": run.get("mp_timings"),
        "cpu": run["cpu"], "executor_cpu_s": ev.get("executor_cpu_s"), "gc_s": ev.get("gc_s"),
        "requests": ops, "requests_total": int(totals.get("requests", 0)), "op_seconds": op_seconds,
        "throttled": int(totals.get("throttled", 0)), "errors": int(totals.get("errors", 0)),
        "copied_bytes": int(totals.get("copied_bytes", 0)), "up_bytes": int(totals.get("request_bytes", 0)),
        "late": int(totals.get("late", 0)), "max_in_flight": run["proxy"].get("max_in_flight"),
        "load_before": run["load_before"][0], "load_after": run["load_after"][0], "settings": settings,
    }


# ---------------------------------------------------------------- the parent: one network's runs
def run(server: Any, net: Any | None, network: str, *, plan: str | None = None, size: int = DEFAULT_SIZE,
        tasks: int = SPARK_TASKS, slots: int = SPARK_SLOTS, check_rows: bool | None = None,
        records: str | None = None, command: str | None = None) -> dict[str, Any]:
    """Run the plan in a child process through ``net`` (the run's S3-like network) or, for ``network="raw"``, a
    proxy of this scenario's own with no shaping (it forwards and counts: S3A's requests must be counted too)."""
    from tests.support.s3_network import NONE, S3Network

    own = None
    if net is None:
        own = net = S3Network(server.endpoint_url, NONE).start()
    plan = plan or DEFAULT_PLAN.get(network, DEFAULT_PLAN["raw"])
    fd, out = tempfile.mkstemp(prefix="bench-peers-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "bench.bench_spark_peers", "--endpoint", net.endpoint_url,
           "--upstream", server.endpoint_url, "--proxy-pid", str(net.pid or 0), "--server-pid", str(server.pid or 0),
           "--plan", plan, "--size", str(size), "--tasks", str(tasks), "--slots", str(slots), "--out", out,
           "--network", network, "--network-profile", json.dumps(net.profile.to_json())]
    if records:
        cmd += ["--records", records]
    if command:
        cmd += ["--command", command]
    if check_rows if check_rows is not None else network == "raw":
        cmd.append("--check-rows")
    started = time.perf_counter()
    try:
        rc = subprocess.call(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
        text = Path(out).read_text()
        data = json.loads(text) if text.strip() else {"runs": []}
    finally:
        Path(out).unlink(missing_ok=True)
        if own is not None:
            own.stop()
    data.update(scenario="peers", exit_status=rc, proxy_profile=net.profile.to_json(),
                proxy_description=net.profile.describe(), child_seconds=round(time.perf_counter() - started, 1))
    if rc != 0:
        log(f"peers ({network}): the child exited with status {rc} after {len(data.get('runs', []))} runs")
    return data


def standalone(argv: list[str]) -> int:
    """``python -m bench.bench_spark_peers --network s3 --plan ...``: start LocalStack (or moto) and the network's
    proxy, run the plan in a child process, append the raw records, stop everything."""
    from bench.common import parse_size, start_server
    from tests.support.s3_network import NONE, PROFILES, S3Network

    p = argparse.ArgumentParser(prog="python -m bench.bench_spark_peers", description=__doc__.split("\n\n")[0])
    p.add_argument("--network", choices=("raw", *sorted(k for k in PROFILES if k != "none")), default="s3",
                   help="raw: through the counting proxy, unshaped; otherwise the proxy's profile (default s3)")
    p.add_argument("--plan", default=None, help="runs per size and variant (default: DEFAULT_PLAN for the network)")
    p.add_argument("--size", default="1GiB", help="row data per write (default 1GiB)")
    p.add_argument("--tasks", type=int, default=SPARK_TASKS)
    p.add_argument("--slots", type=int, default=SPARK_SLOTS)
    p.add_argument("--backend", choices=("localstack", "moto"), default="localstack")
    p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    p.add_argument("--check-rows", action="store_true", help="count every file's rows in each first repeat")
    a = p.parse_args(argv)
    command = "python -m bench.bench_spark_peers " + " ".join(argv)
    with start_server(a.backend) as server:
        profile = NONE if a.network == "raw" else PROFILES[a.network]
        with S3Network(server.endpoint_url, profile) as net:
            data = run(server, net, a.network, plan=a.plan or DEFAULT_PLAN.get(a.network, DEFAULT_PLAN["s3"]),
                       size=parse_size(a.size), tasks=a.tasks, slots=a.slots, check_rows=a.check_rows or None,
                       records=a.records, command=command)
    return int(data.get("exit_status", 1))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--endpoint" not in argv:
        return standalone(argv)
    p = argparse.ArgumentParser(prog="python -m bench.bench_spark_peers", description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", required=True, help="the counting proxy every client sends through")
    p.add_argument("--upstream", required=True, help="the S3 server itself (set-up, checks and clean-up)")
    p.add_argument("--plan", default=DEFAULT_PLAN["raw"],
                   help="runs per size and variant, e.g. '1000:magic=3,mpcommit=3;10000:magic=1,mpcommit=1'")
    p.add_argument("--size", default=DEFAULT_SIZE, type=int)
    p.add_argument("--tasks", default=SPARK_TASKS, type=int)
    p.add_argument("--slots", default=SPARK_SLOTS, type=int,
                   help="task slots of the local Spark (local[N]); more than the cores only where tasks wait on "
                        "the network")
    p.add_argument("--driver-memory", default="3g")
    p.add_argument("--check-rows", action="store_true", help="count the rows of every file of each first repeat")
    p.add_argument("--proxy-pid", type=int, default=0)
    p.add_argument("--server-pid", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--network", default="raw", help="the network's name, for the records")
    p.add_argument("--network-profile", default="", help="the proxy's profile (JSON), for the records")
    p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    p.add_argument("--command", default="", help="the command that started the run, for the records")
    return child(p.parse_args(argv))



# ---------------------------------------------------------------- summaries and BENCHMARKS.md
def job_commit_seconds(run: dict[str, Any]) -> float:
    """Spark: its ``job commit time`` SQL metric (ms, around the commit protocol's commitJob); mpcommit: its report."""
    if str(run["variant"]).startswith("mpcommit"):  # (bench_executor's mpcommit-32 too)
        return float((run.get("mp_timings") or {}).get("commit", float("nan")))
    value = (run.get("events") or {}).get("driver_metrics", {}).get("job commit time")
    return float(value) / 1e3 if value is not None else float("nan")


def task_commit_seconds(run: dict[str, Any]) -> float:
    value = (run.get("events") or {}).get("task_metrics", {}).get("task commit time")
    return float(value) / 1e3 if value is not None else float("nan")


def _committer_name(success: Any) -> str:
    return str(success.get("committer", "?")) if isinstance(success, dict) else str(success)


def _files_of(run: dict[str, Any]) -> int:
    return int(run["listing"]["files"]) or int(run["files_target"])


def summarise(data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per size: per variant the medians (and ranges) of every figure, and the ratios to the magic committer
    paired by round (variants of one round ran back to back)."""
    from bench.common import median, ratio_spread

    out: dict[int, dict[str, Any]] = {}
    sizes = sorted({int(r["files_target"]) for r in data.get("runs", [])})
    for files in sizes:
        runs = [r for r in data["runs"] if int(r["files_target"]) == files]
        by = {v: sorted((r for r in runs if r["variant"] == v), key=lambda r: r["repeat"]) for v in data["variants"]}
        by = {v: rs for v, rs in by.items() if rs}
        rows: dict[str, Any] = {}
        for v, rs in by.items():
            secs = [r["seconds"] for r in rs]
            jcs = [job_commit_seconds(r) for r in rs]
            ops: dict[str, list[float]] = {}
            for r in rs:
                for op, st in r["proxy"]["ops"].items():
                    ops.setdefault(op, []).append(st["requests"] / _files_of(r))
            cpu_groups = sorted({k for r in rs for k in r["cpu"]})
            rows[v] = {
                "n": len(rs), "seconds": median(secs), "lo": min(secs), "hi": max(secs),
                "job_commit": median(jcs), "job_commit_lo": min(jcs), "job_commit_hi": max(jcs),
                "task_commit": median(task_commit_seconds(r) for r in rs),
                "files": median(r["listing"]["files"] for r in rs), "bytes": median(r["listing"]["bytes"] for r in rs),
                "rows": next((r["rows"] for r in rs if r.get("rows") is not None), None),
                "success": _committer_name(rs[0]["listing"].get("success", "?")),
                "pending_left": max(r["listing"]["pending_uploads"] for r in rs),
                "requests_per_file": median(r["proxy"]["totals"]["requests"] / _files_of(r) for r in rs),
                "ops_per_file": {op: median(vals) for op, vals in sorted(ops.items())},
                "copied": median(r["proxy"]["totals"]["copied_bytes"] for r in rs),
                "copied_max": max(r["proxy"]["totals"]["copied_bytes"] for r in rs),
                "up": median(r["proxy"]["totals"]["request_bytes"] for r in rs),
                "cpu": {g: median(r["cpu"].get(g, 0.0) for r in rs) for g in cpu_groups},
                "executor_cpu": median(r["events"]["executor_cpu_s"] for r in rs),
                "load": median(r["load_before"][0] for r in rs),
            }
            if v == "mpcommit":
                keys = sorted({k for r in rs for k in (r.get("mp_timings") or {})})
                rows[v]["mp_timings"] = {k: median((r.get("mp_timings") or {}).get(k, float("nan")) for r in rs) for k in keys}
        ratios: dict[str, dict[str, Any]] = {}
        if "magic" in by:
            magic = {r["repeat"]: r for r in by["magic"]}
            for v, rs in by.items():
                if v == "magic":
                    continue
                pairs = [(r, magic[r["repeat"]]) for r in rs if r["repeat"] in magic]
                if not pairs:
                    continue
                ratios[v] = {
                    "seconds": ratio_spread([a["seconds"] for a, _ in pairs], [b["seconds"] for _, b in pairs]),
                    "job_commit": ratio_spread([job_commit_seconds(a) for a, _ in pairs],
                                               [job_commit_seconds(b) for _, b in pairs]),
                }
        out[files] = {"rows": rows, "ratios": ratios, "shape": (data.get("shapes") or {}).get(str(files), {})}
    return out


if __name__ == "__main__":
    sys.exit(main())
