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
* ``directory``: the S3A directory staging committer: tasks write to the local disk, task commit uploads each
  file as a pending multipart upload and records it in the cluster filesystem (``file://`` in local mode,
  ``fs.s3a.committer.staging.tmp.path``); the job commit completes them. Conflict mode ``append`` (every
  destination is a fresh prefix, and Spark's overwrite has already cleared it).
* ``mpcommit``: ``mpcommit.spark.write(df, "s3a://...", "parquet", mode="overwrite", partition_by=["p"])``.

Every variant writes with ``mode("overwrite")`` to a fresh prefix, snappy Parquet, default settings otherwise.

What is measured per run, and where it comes from:

* end to end: the wall time of the ``write`` call in the driver;
* job commit: for Spark, the SQL metric ``job commit time`` that Spark's ``FileFormatWriter`` times around the
  commit protocol's ``commitJob`` (read from the event log, ``SparkListenerDriverAccumUpdates``); task commit
  likewise (``task commit time``, summed over tasks); for mpcommit, its report's ``commit`` timing;
* requests by S3 operation, bytes up and down, bytes copied server-side: the counting proxy
  (``bench/s3_network.py``) that every client here sends through -- S3A's ``fs.s3a.endpoint`` and mpcommit's
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
VARIANTS = ("magic", "mpcommit", "directory", "v2", "v1")
LABELS = {
    "v1": "Spark + FileOutputCommitter v1",
    "v2": "Spark + FileOutputCommitter v2",
    "magic": "Spark + S3A magic committer",
    "directory": "Spark + S3A directory staging committer",
    "mpcommit": "mpcommit.spark.write",
}
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
    if variant == "magic":
        return {**_CLOUD_PROTOCOL, "fs.s3a.committer.name": "magic", "fs.s3a.committer.magic.enabled": "true"}
    if variant == "directory":
        return {**_CLOUD_PROTOCOL, "fs.s3a.committer.name": "directory",
                "fs.s3a.committer.staging.conflict-mode": "append",
                "fs.s3a.committer.staging.tmp.path": f"file://{staging_dir}"}
    return {}


#: Runs per size and variant. The two the targets compare (magic, mpcommit) repeat most; the rest of the real
#: peers run fewer times, because with S3A every file costs requests one after another in its task (and, for
#: v1 and v2, renames -- copy and delete -- file by file): see BENCHMARKS.md for what one run of each costs.
DEFAULT_PLAN = {
    "raw": "1000:magic=3,mpcommit=3,directory=3,v2=1,v1=1;10000:magic=2,mpcommit=2,directory=1",
    "s3": "1000:magic=3,mpcommit=3,directory=2,v2=1,v1=1;10000:magic=1,mpcommit=1,directory=1",
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


def _listing(client: Any, prefix: str) -> dict[str, Any]:
    files = markers = 0
    size = 0
    hidden: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for o in page.get("Contents", []) or []:
            rel = o["Key"][len(prefix):]
            if rel == "" or rel.endswith("/"):
                markers += 1
            elif any(part.startswith(("_", ".")) for part in rel.split("/")):
                hidden.append(rel)
            else:
                files += 1
                size += o["Size"]
    uploads = 0
    kw: dict[str, Any] = {"Bucket": BUCKET, "Prefix": prefix}
    while True:
        page = client.list_multipart_uploads(**kw)
        uploads += len(page.get("Uploads", []) or [])
        if not page.get("IsTruncated"):
            break
        kw["KeyMarker"], kw["UploadIdMarker"] = page.get("NextKeyMarker", ""), page.get("NextUploadIdMarker", "")
    success = ""
    try:
        body = client.get_object(Bucket=BUCKET, Key=prefix + "_SUCCESS")["Body"].read()
        success = json.loads(body).get("committer", "json") if body.startswith(b"{") else f"{len(body)} bytes"
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        success = f"unreadable: {type(exc).__name__}"
    return {"files": files, "bytes": size, "markers": markers, "success": success, "hidden": sorted(hidden)[:20],
            "hidden_count": len(hidden), "pending_uploads": uploads}


def _rows_in(client: Any, prefix: str) -> int:
    """Rows of every Parquet file under ``prefix``, from the footers (read directly from the server)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = [(o["Key"], o["Size"]) for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in page.get("Contents", []) or [] if o["Key"].endswith(".parquet")]

    def rows(item: tuple[str, int]) -> int:
        key, size = item
        tail = client.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={max(0, size - 65536)}-")["Body"].read()
        meta_len = int.from_bytes(tail[-8:-4], "little")
        if meta_len + 8 > len(tail):  # a footer over 64 KiB: read the whole file
            tail = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        footer = tail[-(meta_len + 8):]
        return pq.read_metadata(pa.BufferReader(b"PAR1" + footer)).num_rows

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(rows, keys))


def child(args: argparse.Namespace) -> int:
    import psutil  # noqa: F401 - fail early
    from pyspark.sql import functions as F

    from mpcommit.spark import write as mp_write
    from tests.support.spark_s3a import s3a_jars_problem, session_has_s3a, session_settings, spark_session

    problem = s3a_jars_problem()
    if problem:
        raise SystemExit(f"bench_spark_peers: {problem}")
    work = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    eventlog_dir = work / "eventlog"
    eventlog_dir.mkdir()
    staging = work / "staging"
    buffers = work / "s3a-buffer"
    conf = {
        "spark.driver.memory": args.driver_memory,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{eventlog_dir}",
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        "spark.local.dir": str(work / "spark-local"),
        "spark.hadoop.fs.s3a.endpoint": args.endpoint,
        "spark.hadoop.fs.s3a.buffer.dir": str(buffers),
        "spark.sql.shuffle.partitions": str(args.tasks),
    }
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
    ensure_bucket(direct, BUCKET)
    plan = parse_plan(args.plan)
    variants = tuple(dict.fromkeys(v for runs in plan.values() for v in runs))
    results: dict[str, Any] = {"variants": list(variants), "plan": args.plan, "size": args.size, "tasks": args.tasks, "master": f"local[{args.slots}]",
                               "driver_memory": args.driver_memory, "runs": [], "shapes": {},
                               "spark_version": spark.version, "jvm_found": jvm_found,
                               "settings": {v: variant_settings(v, str(staging)) for v in variants}}
    out_path = Path(args.out)

    def dataframe(n_rows: int, values: int) -> Any:
        df = spark.range(0, n_rows, numPartitions=args.tasks)
        cols = [F.col("id"), (F.col("id") % values).cast("int").alias("p")]
        cols += [F.rand(seed=i).alias(f"x{i}") for i in range(DOUBLES)]
        return df.select(*cols)

    def one_write(variant: str, df: Any, prefix: str) -> dict[str, Any]:
        uri = f"s3a://{BUCKET}/{prefix.rstrip('/')}"
        info: dict[str, Any] = {}
        if variant == "mpcommit":
            report = mp_write(df, uri, "parquet", mode="overwrite", partition_by=["p"], s3=s3_options(args.endpoint))
            info["mp_timings"] = {k: round(v, 4) for k, v in report.timings.items()}
            info["mp_files"] = report.files
        else:
            with session_settings(spark, variant_settings(variant, str(staging))):
                df.write.mode("overwrite").partitionBy("p").parquet(uri)
        return info

    try:
        # Warm-up, untimed: each variant once on a small job (JIT, the Python workers, S3A's client). Small in
        # files too: with latency, v1 pays about half a second per file.
        warm = dataframe(20_000, 2)
        for v in variants:
            one_write(v, warm, f"warmup/{v}/")
        empty_prefix(direct, BUCKET, "warmup/")
        elog.window()
        for files, runs in plan.items():
            sh = shape(files, args.size, args.tasks)
            results["shapes"][str(files)] = sh
            df = dataframe(sh["rows"], sh["values"])
            for repeat, variant in schedule(runs):
                prefix = f"{variant}/n{files}/r{repeat}/"
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
                listing = _listing(direct, prefix)
                rows = _rows_in(direct, prefix) if (args.check_rows and repeat == 0) else None
                empty_prefix(direct, BUCKET, prefix)
                run = {"variant": variant, "files_target": files, "repeat": repeat, "seconds": seconds,
                       "load_before": load, "load_after": os.getloadavg(), "cpu": CpuMeter.delta(c0, c1),
                       "proxy": {"ops": stats["ops"], "totals": stats["totals"], "max_in_flight": stats["max_in_flight"],
                                 "connections": stats["connections"]},
                       "events": ev, "listing": listing, "rows": rows, **info}
                results["runs"].append(run)
                out_path.write_text(json.dumps(results, indent=1, default=str))
                jc = ev["driver_metrics"].get("job commit time")
                jc_s = (jc / 1e3) if jc is not None else (info.get("mp_timings") or {}).get("commit", float("nan"))
                log(f"peers: {variant:<9} {files:>6} files r{repeat}: {seconds:6.1f} s, job commit {jc_s:.2f} s, "
                    f"{listing['files']} files {human_bytes(listing['bytes'])}, {stats['totals']['requests']:.0f} requests, "
                    f"{human_bytes(stats['totals']['copied_bytes'])} copied, load {load[0]:.1f}")
    finally:
        cpu.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


# ---------------------------------------------------------------- the parent: one network's runs
def run(server: Any, net: Any | None, network: str, *, plan: str | None = None, size: int = DEFAULT_SIZE,
        tasks: int = SPARK_TASKS, slots: int = SPARK_SLOTS, check_rows: bool | None = None) -> dict[str, Any]:
    """Run the plan in a child process through ``net`` (the run's S3-like network) or, for ``network="raw"``, a
    proxy of this scenario's own with no shaping (it forwards and counts: S3A's requests must be counted too)."""
    from bench.s3_network import NONE, S3Network

    own = None
    if net is None:
        own = net = S3Network(server.endpoint_url, NONE).start()
    plan = plan or DEFAULT_PLAN.get(network, DEFAULT_PLAN["raw"])
    fd, out = tempfile.mkstemp(prefix="bench-peers-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "bench.bench_spark_peers", "--endpoint", net.endpoint_url,
           "--upstream", server.endpoint_url, "--proxy-pid", str(net.pid or 0), "--server-pid", str(server.pid or 0),
           "--plan", plan, "--size", str(size), "--tasks", str(tasks), "--slots", str(slots), "--out", out]
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


def main(argv: list[str] | None = None) -> int:
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
    return child(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------- summaries and BENCHMARKS.md
def job_commit_seconds(run: dict[str, Any]) -> float:
    """Spark: its ``job commit time`` SQL metric (ms, around the commit protocol's commitJob); mpcommit: its report."""
    if run["variant"] == "mpcommit":
        return float((run.get("mp_timings") or {}).get("commit", float("nan")))
    value = (run.get("events") or {}).get("driver_metrics", {}).get("job commit time")
    return float(value) / 1e3 if value is not None else float("nan")


def task_commit_seconds(run: dict[str, Any]) -> float:
    value = (run.get("events") or {}).get("task_metrics", {}).get("task commit time")
    return float(value) / 1e3 if value is not None else float("nan")


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
                "success": rs[0]["listing"].get("success", "?"),
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
