"""Scenario 4: a PySpark job writing about 1 GiB of partitioned Parquet through mpcommit, against the same
job writing straight to the final keys with no commit protocol at all (the unsafe floor).

Both sides run the same DataFrame in the same local Spark session, and format and partition its rows with
the same code (mpcommit's ``PartitionedWriter`` and Parquet format, default settings), so the difference is
the commit protocol alone:

* **mpcommit**: ``mpcommit.spark.write(df, uri, "parquet", mode="overwrite", partition_by=["p"])`` -- every
  file a pending multipart upload streamed from the task, one manifest per task, then the job commit.
* **unsafe floor**: ``df.mapInArrow`` tasks that buffer each finished file and upload it with boto3's
  ``upload_fileobj`` (s3transfer: PUT, or parallel multipart above 8 MiB) straight to its final key. Nothing
  is recorded and nothing is cleaned up, so a failed or retried task leaves partial or duplicate files
  visible (PySpark here has no hadoop-aws, so this is the "direct write" floor written with boto3).

Each timed run is the whole ``write`` call (job set-up, the Spark job and, for mpcommit, the commit).
"""

from __future__ import annotations

import io
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from .common import (
    GiB,
    MiB,
    describe_ratio,
    empty_prefix,
    ensure_bucket,
    human_bytes,
    human_seconds,
    interleaved,
    log,
    make_client,
    md_table,
    median,
    paired_ratio,
    ratio_spread,
    s3_options,
)

BUCKET = "bench-e2e"
VARIANTS = ("mpcommit", "floor")
LABELS = {"mpcommit": "mpcommit.spark.write", "floor": "unsafe floor (boto3 upload to final keys)"}
DEFAULT_SIZE = 1 * GiB
PARTITION_VALUES = 8
SPARK_TASKS = 4
DOUBLES = 4
ROW_BYTES = 8 + 8 * DOUBLES  # id + random doubles (incompressible); the partition column lives in the path


def spark_session() -> Any:
    import os
    from pathlib import Path

    from pyspark.sql import SparkSession

    # The Python workers must be this interpreter (the venv with mpcommit), and they unpickle the floor's
    # task, which refers to this package: let them import it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    repo = str(Path(__file__).resolve().parents[1])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if repo not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([repo, *paths])

    return (
        SparkSession.builder.master("local[2]")
        .appName("mpcommit-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )


def dataframe(spark: Any, size: int) -> Any:
    from pyspark.sql import functions as F

    rows = max(1, size // ROW_BYTES)
    df = spark.range(0, rows, numPartitions=SPARK_TASKS)
    cols = [F.col("id"), (F.col("id") % PARTITION_VALUES).cast("int").alias("p")]
    cols += [F.rand(seed=i).alias(f"x{i}") for i in range(DOUBLES)]
    return df.select(*cols), rows


class _PutSink(io.BufferedIOBase):
    """A finished file buffered in memory, uploaded with boto3 when closed (the unsafe floor's sink)."""

    def __init__(self, client: Any, bucket: str, key: str):
        super().__init__()
        self._client, self._bucket, self._key = client, bucket, key
        self._buf = io.BytesIO()
        self.rows: int | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._buf.write(data)

    def tell(self) -> int:
        return self._buf.tell()

    def close(self) -> None:
        if self.closed:
            return
        self._buf.seek(0)
        self._client.upload_fileobj(self._buf, self._bucket, self._key)
        self._buf = io.BytesIO()
        super().close()

    def abort(self) -> None:
        self._buf = io.BytesIO()
        super().close()


def _floor_write(df: Any, endpoint: str, bucket: str, root: str) -> int:
    """The same job with no commit protocol: each task uploads its finished files to their final keys."""
    import pyarrow as pa

    from mpcommit.formats import make_format
    from mpcommit.formats.partitioning import PartitionedWriter

    fmt = make_format("parquet")
    run_id = str(uuid.uuid4())

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        from bench.common import make_client as _client

        client = _client(endpoint)
        task_id = TaskContext.get().partitionId()
        counter = iter(range(1_000_000))

        def open_sink(path: str, ext: str) -> _PutSink:
            key = f"{root}{path + '/' if path else ''}part-{task_id:05d}-{run_id}.c{next(counter):03d}.{ext}"
            return _PutSink(client, bucket, key)

        out = PartitionedWriter(fmt=fmt, open_sink=open_sink, partition_columns=("p",))
        for b in batches:
            out.write(b)
        stats = out.close()
        yield pa.RecordBatch.from_arrays([pa.array([stats.files], pa.int64())], names=["files"])

    rows = df.mapInArrow(task, "files long").collect()
    return sum(r[0] for r in rows)


def run(endpoint: str, *, size: int = DEFAULT_SIZE, repeats: int = 5, variants: tuple[str, ...] = VARIANTS) -> dict[str, Any]:
    import os

    from mpcommit.spark import write

    cleaner = make_client(endpoint)
    ensure_bucket(cleaner, BUCKET)
    spark = spark_session()
    runs = []
    started = time.perf_counter()
    try:
        df, rows = dataframe(spark, size)
        # One untimed warm-up of each side: the first Spark job pays for starting the Python workers.
        warm, _ = dataframe(spark, 4 * MiB)
        write(warm, f"s3://{BUCKET}/warmup/mp", "parquet", mode="overwrite", partition_by=["p"], s3=s3_options(endpoint))
        _floor_write(warm, endpoint, BUCKET, "warmup/floor/")
        empty_prefix(cleaner, BUCKET, "warmup/")
        for repeat, variant in interleaved(variants, repeats):
            root = f"{variant}/r{repeat}/"
            t0 = time.perf_counter()
            if variant == "mpcommit":
                report = write(df, f"s3://{BUCKET}/{root.rstrip('/')}", "parquet", mode="overwrite",
                               partition_by=["p"], s3=s3_options(endpoint))
                files, extra = report.files, {k: round(v, 3) for k, v in report.timings.items()}
            else:
                files, extra = _floor_write(df, endpoint, BUCKET, root), {}
            seconds = time.perf_counter() - t0
            stored = sum(o["Size"] for page in cleaner.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=root)
                         for o in page.get("Contents", []) or [] if "/_" not in "/" + o["Key"][len(root):])
            empty_prefix(cleaner, BUCKET, root)
            r = {"variant": variant, "repeat": repeat, "seconds": seconds, "files": files, "bytes": stored,
                 "timings": extra, "load": os.getloadavg()[0]}
            runs.append(r)
            log(f"e2e: {variant:<8} r{repeat}: {seconds:.1f} s, {files} files, {human_bytes(stored)}, load {r['load']:.1f}")
    finally:
        spark.stop()
    return {"scenario": "e2e", "size": size, "rows": rows, "repeats": repeats, "variants": list(variants),
            "spark_tasks": SPARK_TASKS, "partition_values": PARTITION_VALUES, "runs": runs,
            "seconds": round(time.perf_counter() - started, 1)}


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    by = {v: sorted((r for r in data["runs"] if r["variant"] == v), key=lambda r: r["repeat"]) for v in data["variants"]}
    out: dict[str, Any] = {"rows": {}, "targets": {}}
    for v, rs in by.items():
        out["rows"][v] = {"n": len(rs), "seconds": median(r["seconds"] for r in rs), "files": median(r["files"] for r in rs),
                          "bytes": median(r["bytes"] for r in rs),
                          "throughput": median(r["bytes"] / r["seconds"] for r in rs)}
    if by.get("mpcommit") and by.get("floor"):
        ratio = paired_ratio([r["seconds"] for r in by["mpcommit"]], [r["seconds"] for r in by["floor"]])
        spread = ratio_spread([r["seconds"] for r in by["mpcommit"]], [r["seconds"] for r in by["floor"]])
        out["ratio"], out["spread"] = ratio, spread
        out["targets"]["e2e_vs_floor"] = {"ratio": ratio, "target": 1.2, "met": ratio <= 1.2, "spread": spread,
                                          "text": f"end to end within 1.2x of the unsafe floor: **{describe_ratio(spread)}**"}
    return out


def markdown(data: dict[str, Any]) -> str:
    s = summarise(data)
    rows = [[LABELS.get(v, v), r["n"], human_seconds(r["seconds"]), f"{r['files']:,.0f}", human_bytes(r["bytes"]),
             f"{r['throughput'] / MiB:,.1f} MiB/s"] for v, r in s["rows"].items()]
    text = (f"{data['rows']:,} rows (id, partition column `p` with {data['partition_values']} values, {DOUBLES} random "
            f"doubles) from `spark.range` in {data['spark_tasks']} tasks on `local[2]`, written as snappy Parquet "
            f"partitioned by `p`; {data['repeats']} repeats, interleaved, after one untimed warm-up of each side.\n\n")
    text += md_table(["job", "runs", "time (median)", "files", "Parquet bytes", "throughput"], rows, align="lrrrrr")
    if "ratio" in s:
        text += f"\n\nmpcommit ÷ unsafe floor: **{describe_ratio(s['spread'])}**."
    mp = [r for r in data["runs"] if r["variant"] == "mpcommit" and r.get("timings")]
    if mp:
        keys = sorted({k for r in mp for k in r["timings"]})
        text += "\n\nmpcommit's own timings (median): " + ", ".join(
            f"{k} {human_seconds(median(r['timings'].get(k, float('nan')) for r in mp))}" for k in keys) + "."
    return text
