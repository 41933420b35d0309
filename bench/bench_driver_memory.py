"""Whole-driver memory of a write's job commit (issue 25, item 5): through the Spark path at 10,000 and 100,000
files, and the driver's side of that path up to a million files.

Two modes, each case in a fresh process, against the stub server (:mod:`bench.stub_s3`: the server's cost is
not what is measured here):

* ``spark``: ``mpcommit.spark.write`` of a DataFrame that makes ``files`` Parquet files, 100 per Spark task, in
  ``local[2]``; each task carries its manifest in-line within its share of the job's in-line budget
  (``INLINE_BUDGET_PARTS`` over the task count Spark's plan gives, at most ``INLINE_MAX_PARTS`` = 256 parts), the
  rest named and streamed by the commit. Measured: this Python driver's RSS, sampled
  every 10 ms, from just before ``write`` to its end (peak growth), in one run; the Python heap's peak
  (tracemalloc) during ``write`` in a second run (tracemalloc's own bookkeeping would inflate RSS); the Spark JVM's
  RSS alongside (in local mode it holds the executors too: reported, not the figure). How many task results
  carried their manifest in-line is counted, not assumed.
* ``replay``: the driver's side of the same path without Spark: the task results as Spark's ``collect`` hands them
  over (``TaskResult.to_bytes()`` rows, 100 files per task, manifests in-line), decoded and committed as
  ``mpcommit.spark.write`` does (``TaskResult.from_bytes`` into ``HandedOverResults``, the rows let go, then
  ``Job.commit``). With ``--referenced`` every result
  names its manifest instead and the commit reads them from the store, streamed (the product's path for large
  manifests): the case that should keep a million files bounded. Besides the peaks, the heap is broken down by
  allocation site (tracemalloc, grouped by file and line) just before ``_SUCCESS`` is written, when everything the
  commit keeps per file is alive: that table says what grows with the files.

    python -m bench.bench_driver_memory spark --files 10000 100000 --repeats 3
    python -m bench.bench_driver_memory replay --files 10000 100000 1000000
    python -m bench.bench_driver_memory replay --referenced --files 10000 100000 1000000

One JSON line per case goes to ``bench/results/driver_memory.jsonl``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.common import log, make_client, s3_options  # noqa: E402

MiB = 1024 * 1024
FILES_PER_TASK = 100
#: The issue's bound for the driver's growth from 10,000 files to a million (Hadoop's manifest committer bounds
#: its driver the same way, by design).
GROWTH_BOUND_MIB = 100


class Sampler:
    """Peak RSS of a process (and optionally its children), sampled every ``interval`` seconds."""

    def __init__(self, pid: int | None = None, *, children: bool = False, interval: float = 0.01):
        import psutil

        self.proc = psutil.Process(pid)
        self.children = children
        self.interval = interval
        self.base = self.rss()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def rss(self) -> int:
        total = self.proc.memory_info().rss
        if self.children:
            for c in self.proc.children(recursive=True):
                try:
                    total += c.memory_info().rss
                except Exception:  # noqa: BLE001 - a child gone
                    pass
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.rss())
            except Exception:  # noqa: BLE001 - only a measurement
                pass
            time.sleep(self.interval)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.base) / MiB


def top_sites(snapshot: Any, limit: int = 15) -> list[dict[str, Any]]:
    """The heap by allocation site (file:line, paths relative to the repository or site-packages)."""
    stats = snapshot.statistics("lineno")
    out = []
    for st in stats[:limit]:
        frame = st.traceback[0]
        name = frame.filename
        for marker in ("site-packages/", str(REPO_ROOT) + "/"):
            if marker in name:
                name = name.split(marker, 1)[1]
        out.append({"site": f"{name}:{frame.lineno}", "mib": st.size / MiB, "blocks": st.count})
    return out


# ---------------------------------------------------------------- replay: the driver's side without Spark
def replay_setup(endpoint: str, files: int, referenced: bool, out: str) -> None:
    """In a helper process (so that its allocations are not the measured driver's): a job whose tasks left
    ``files`` uploads, its manifests in the store, and the task results as Spark's collect() would hand them to the
    driver, written to ``out`` (length-prefixed bytes)."""
    from bench.bench_commit_scale import prepare

    prep = prepare(endpoint, files, keep_uploads=False, referenced=referenced)
    with open(out, "wb") as f:
        for r in prep.results:
            data = r.to_bytes()
            f.write(len(data).to_bytes(8, "little") + data)
    print(json.dumps({"uri": prep.job.destination.uri, "job_id": prep.job.job_id}))


def _read_rows(path: str) -> list[bytes]:
    rows = []
    with open(path, "rb") as f:
        while head := f.read(8):
            rows.append(f.read(int.from_bytes(head, "little")))
    return rows


def replay_one(files: int, *, referenced: bool, trace: bool) -> dict[str, Any]:
    import tempfile

    from bench.bench_commit_scale import BUCKET, THREADS, Stub
    from mpcommit import Job
    from mpcommit.protocol.commit.committed import HandedOverResults
    from mpcommit.protocol.records.manifest import InlineBudget, TaskResult

    stub = Stub()
    fd, rows_path = tempfile.mkstemp(prefix="bench-driver-rows-")
    os.close(fd)
    try:
        make_client(stub.endpoint).create_bucket(Bucket=BUCKET)
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "bench.bench_driver_memory", "replay-setup", stub.endpoint, str(files), rows_path]
        r = subprocess.run(cmd + (["--referenced"] if referenced else []), cwd=REPO_ROOT, capture_output=True,
                           text=True, check=True)
        where = json.loads(r.stdout.strip().splitlines()[-1])
        setup_s = time.perf_counter() - t0
        job = Job.open(where["uri"], where["job_id"], s3=s3_options(stub.endpoint), commit_threads=THREADS)
        at_success: list[Any] = []

        def progress(step: str, done: int, total: int | None) -> None:
            # Called just before _SUCCESS is written, when everything the commit keeps per file is alive.
            if trace and step == "success" and done == 0 and not at_success:
                at_success.append(tracemalloc.take_snapshot())

        # No public way to give Job.open a progress hook: set the committer's (bench only; see BENCHMARKS.md).
        committer = getattr(job, "_committer", None)
        if committer is not None and hasattr(committer, "progress"):
            committer.progress = progress
        gc.collect()
        with Sampler() as rss:
            if trace:
                tracemalloc.start()
            t1 = time.perf_counter()
            rows = _read_rows(rows_path)  # the collected rows arrive in the driver
            tasks, rows_bytes = len(rows), sum(len(b) for b in rows)
            # As mpcommit.spark.writer.run_spark_tasks: decoded within the job's in-line budget (the results were
            # made with the per-task cap alone, as where Spark's plan gives no task count), handed over to the
            # commit, the rows not kept.
            budget = InlineBudget()
            results = HandedOverResults(TaskResult.from_bytes(b, destination=job.destination, job_id=job.job_id,
                                                              budget=budget) for b in rows)
            del rows
            inline = sum(res.manifest is not None for res in results)
            report = job.commit(results)
            wall = time.perf_counter() - t1
            peak = tracemalloc.get_traced_memory()[1] if trace else 0
            after = tracemalloc.take_snapshot() if trace else None
            if trace:
                tracemalloc.stop()
        assert report.files == files, (report.files, files)
        success = make_client(stub.endpoint).head_object(Bucket=BUCKET, Key=job.destination.success_key)["ContentLength"]
        out = {"mode": "replay", "files": files, "tasks": tasks, "inline": inline, "referenced": referenced,
               "traced": trace, "rows_bytes": rows_bytes, "rows_kept": False, "commit_s": wall, "setup_s": setup_s,
               "rss_growth_mib": rss.growth_mib, "rss_before_mib": rss.base / MiB, "success_bytes": success,
               "timings": dict(report.timings)}
        if trace:
            out["heap_peak_mib"] = peak / MiB
            if at_success:
                out["sites_at_success"] = top_sites(at_success[0])
            if after is not None:
                out["sites_after"] = top_sites(after, 8)
        return out
    finally:
        os.unlink(rows_path)
        stub.stop()


# ---------------------------------------------------------------- spark: the whole path
def spark_one(files: int, *, trace: bool, tasks: int | None, fmt: str) -> dict[str, Any]:
    import psutil
    from pyspark.sql import functions as F

    import importlib

    from bench.bench_commit_scale import BUCKET, Stub

    # The module (mpcommit.spark re-exports a function of the same name as the module).
    spark_writer = importlib.import_module("mpcommit.spark.writer")
    from tests.support.spark_s3a import spark_session

    stub = Stub()
    spark = None
    try:
        make_client(stub.endpoint).create_bucket(Bucket=BUCKET)
        n_tasks = tasks or max(1, files // FILES_PER_TASK)
        values = max(1, files // n_tasks)
        spark, _ = spark_session(master="local[2]", app="mpcommit-bench-driver-memory",
                                 conf={"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": str(n_tasks),
                                       "spark.default.parallelism": str(n_tasks)})
        spark.sparkContext.setLogLevel("ERROR")
        # One row per file: every task holds one row of each partition value, so it writes `values` files.
        df = (spark.range(0, n_tasks * values, numPartitions=n_tasks)
              .select((F.col("id") % values).cast("int").alias("p"), F.col("id"), F.rand(seed=1).alias("x")))
        inline = {"n": 0, "of": 0}
        decode = spark_writer.TaskResult.from_bytes

        def counting(data: bytes, **kw: Any) -> Any:  # counts what the driver got; the decoding is the product's
            r = decode(data, **kw)
            inline["of"] += 1
            inline["n"] += r.manifest is not None
            return r

        spark_writer.TaskResult.from_bytes = counting  # type: ignore[method-assign]
        jvm = next((p for p in psutil.Process().children(recursive=True) if p.name() == "java"), None)
        # Warm-up, untimed: the Python workers, the JVM's code paths, the store's first connections.
        spark_writer.write(spark.range(0, 8, numPartitions=2).select((F.col("id") % 2).cast("int").alias("p"), "id"),
                           f"s3://{BUCKET}/warm", fmt, mode="overwrite", partition_by=["p"], s3=s3_options(stub.endpoint))
        inline.update(n=0, of=0)
        gc.collect()
        jvm_rss = Sampler(jvm.pid) if jvm is not None else None
        with Sampler() as rss:
            if jvm_rss is not None:
                jvm_rss.__enter__()
            if trace:
                tracemalloc.start()
            t0 = time.perf_counter()
            report = spark_writer.write(df, f"s3://{BUCKET}/t{files}", fmt, mode="overwrite", partition_by=["p"],
                                        s3=s3_options(stub.endpoint))
            wall = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] if trace else 0
            if trace:
                tracemalloc.stop()
            if jvm_rss is not None:
                jvm_rss.__exit__()
        spark_writer.TaskResult.from_bytes = decode  # type: ignore[method-assign]
        out = {"mode": "spark", "files": report.files, "files_target": files, "tasks": n_tasks, "format": fmt,
               "inline": inline["n"], "results": inline["of"], "traced": trace, "write_s": wall,
               "commit_s": report.timings.get("commit"), "rss_growth_mib": rss.growth_mib,
               "rss_before_mib": rss.base / MiB, "jvm_rss_growth_mib": jvm_rss.growth_mib if jvm_rss else None,
               "jvm_rss_before_mib": jvm_rss.base / MiB if jvm_rss else None, "timings": dict(report.timings)}
        if trace:
            out["heap_peak_mib"] = peak / MiB
        return out
    finally:
        if spark is not None:
            spark.stop()
        stub.stop()


# ---------------------------------------------------------------- the parent
def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from bench.records import RecordLog

    records = RecordLog("driver_memory", directory=args.records, mode=args.cmd,
                        referenced=getattr(args, "referenced", False), files_per_task=FILES_PER_TASK,
                        server="bench.stub_s3 (another process)")
    out = []
    for files in args.files:
        for repeat in range(args.repeats):
            row: dict[str, Any] = {}
            for trace in (False,) if args.no_trace else (False, True):
                cmd = [sys.executable, "-m", "bench.bench_driver_memory", f"{args.cmd}-one", str(files)]
                if args.cmd == "replay" and args.referenced:
                    cmd.append("--referenced")
                if args.cmd == "spark":
                    cmd += ["--format", args.format] + (["--tasks", str(args.tasks)] if args.tasks else [])
                if trace:
                    cmd.append("--trace")
                t0 = time.perf_counter()
                r = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
                if r.returncode != 0:
                    log(f"driver memory {args.cmd} {files:,}{' traced' if trace else ''}: failed\n{r.stderr[-3000:]}")
                    row.setdefault("failed", []).append(r.stderr.strip().splitlines()[-1][:300] if r.stderr.strip() else "?")
                    continue
                one = json.loads(r.stdout.strip().splitlines()[-1])
                one["process_s"] = time.perf_counter() - t0
                if trace:
                    row.update({k: v for k, v in one.items() if k in ("heap_peak_mib", "sites_at_success")})
                    row["traced_commit_s"] = one.get("commit_s")
                else:
                    row.update(one)
            rec = records.run(variant=f"{args.cmd}{'-referenced' if getattr(args, 'referenced', False) else ''}",
                              pair=repeat, **row)
            log(f"driver memory {args.cmd} {files:,} files r{repeat}: RSS +{row.get('rss_growth_mib', float('nan')):.1f} MiB, "
                f"heap peak {row.get('heap_peak_mib', float('nan')):.1f} MiB, inline {row.get('inline')}/"
                f"{row.get('tasks')} results, commit {row.get('commit_s', float('nan')):.1f} s")
            out.append(rec)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_driver_memory", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("spark", "replay"):
        p = sub.add_parser(name)
        p.add_argument("--files", type=int, nargs="+", default=[10_000, 100_000])
        p.add_argument("--repeats", type=int, default=1)
        p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
        p.add_argument("--no-trace", action="store_true", help="skip the second, traced run of each case (heap "
                       "peak and allocation sites): for cases too long to run twice")
        if name == "spark":
            p.add_argument("--format", default="parquet")
            p.add_argument("--tasks", type=int, default=0, help=f"Spark tasks (default files / {FILES_PER_TASK})")
        else:
            p.add_argument("--referenced", action="store_true", help="manifests in the store, streamed by the commit")
        one = sub.add_parser(f"{name}-one")
        one.add_argument("files", type=int)
        one.add_argument("--trace", action="store_true")
        if name == "spark":
            one.add_argument("--format", default="parquet")
            one.add_argument("--tasks", type=int, default=0)
        else:
            one.add_argument("--referenced", action="store_true")
    setup = sub.add_parser("replay-setup")
    setup.add_argument("endpoint")
    setup.add_argument("files", type=int)
    setup.add_argument("out")
    setup.add_argument("--referenced", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "replay-setup":
        replay_setup(args.endpoint, args.files, args.referenced, args.out)
        return 0
    if args.cmd == "replay-one":
        print(json.dumps(replay_one(args.files, referenced=args.referenced, trace=args.trace), default=str))
        return 0
    if args.cmd == "spark-one":
        print(json.dumps(spark_one(args.files, trace=args.trace, tasks=args.tasks or None, fmt=args.format), default=str))
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
