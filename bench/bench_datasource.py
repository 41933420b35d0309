"""The data source's costs (issue 24, "Measured"): the door must cost nothing, and a micro-batch's commit must be
quick.

``door``: one local Spark session writes the same cached DataFrame (``--rows`` rows in ``--tasks`` tasks, Parquet
partitioned by ``--partitions`` values, mode overwrite) through the data source,
``df.write.format("mpcommit").option("partitionBy", "k").save(uri)``, and through the fluent writer,
``mpcommit.spark.writer(df).partitionBy("k").parquet(uri)``, in ABBA-ordered pairs, each to its own table. Each
timed run is the whole call (job set-up, the Spark job, the job commit). Target: the data source's time <= 1.05x
the fluent writer's (median of the paired ratios, with its bootstrap interval). One untimed run of each first (the
JVM and the Python workers warm up).

``stream``: the streaming sink's commit of one micro-batch, as it runs on the driver: ``StreamSink.commit(messages,
batch_id)`` -- the query's record read (created at the first micro-batch), the table's job records listed for
earlier attempts, the query's newest version read from the commit order, the job commit (completes, the order's place, ``_SUCCESS``) -- timed with
``perf_counter`` for micro-batches of ``--files`` files (one task writing that many partitions, a few rows each),
straight to the server (``raw``) and through the S3-like network (``s3``: tests/support/s3_network.py, latency per
operation and the rate limit). The tasks' writes go straight to the server, untimed. What is not in the figure:
Spark starting the Python worker that calls the sink's ``commit`` and unpickling the sink there, Spark's own cost
per micro-batch for any Python data source (not measured here).
Micro-batches of every (network, files) are interleaved round by round, each configuration its own table and
query. Reported per configuration: p50 and p95 of the commit times. Target: < 1 s at 100 files with latency.

    python -m bench.bench_datasource door --repeats 6
    python -m bench.bench_datasource stream --batches 20 --files 10 100 1000 --networks raw s3

Raw records: ``bench/results/datasource_door.jsonl``, ``bench/results/stream_commit.jsonl`` (bench/records.py);
tables: ``python -m bench.report_tables``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from typing import Any

from .common import abba, ensure_bucket, interleaved, log, make_client, start_server

BUCKET = "bench-datasource"
DOOR_VARIANTS = ("source", "writer")


# ---------------------------------------------------------------- door
def spark_session() -> Any:
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master("local[2]").appName("mpcommit-bench-datasource")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "2g").getOrCreate())


def run_door(args: argparse.Namespace) -> None:
    from pyspark.sql import functions as F

    from mpcommit.spark import register, writer

    from .records import RecordLog

    server = start_server(args.server)
    try:
        client = make_client(server.endpoint_url)
        ensure_bucket(client, BUCKET)
        spark = spark_session()
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        df = spark.range(0, args.rows, 1, args.tasks).select(
            "id", (F.col("id") % args.partitions).cast("string").alias("k"), F.rand(1).alias("v"),
            F.rand(2).alias("w")).cache()
        df.count()
        s3 = {"s3.endpointUrl": server.endpoint_url, "s3.accessKeyId": "test", "s3.secretAccessKey": "test",
              "s3.region": "us-east-1"}
        from .common import s3_options

        options = s3_options(server.endpoint_url)

        def once(variant: str) -> float:
            uri = f"s3://{BUCKET}/{variant}"
            started = time.perf_counter()
            if variant == "source":
                df.write.format("mpcommit").mode("overwrite").options(**s3).option("partitionBy", "k").save(uri)
            else:
                writer(df, s3=options).mode("overwrite").partitionBy("k").parquet(uri)
            return time.perf_counter() - started

        def files(variant: str) -> int:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{variant}/k=")
            return sum(len(p.get("Contents", []) or []) for p in pages)

        for v in DOOR_VARIANTS:
            log(f"warm-up {v}: {once(v):.2f} s")
        records = RecordLog("datasource_door", directory=args.records, server=server.version, rows=args.rows,
                            tasks=args.tasks, partitions=args.partitions)
        for pair, variant in abba(DOOR_VARIANTS, args.repeats):
            seconds = once(variant)
            n = files(variant)
            log(f"pair {pair} {variant}: {seconds:.2f} s, {n} files")
            records.run(variant=variant, pair=pair, seconds=seconds, files=n, rows=args.rows)
        spark.stop()
    finally:
        server.stop()


# ---------------------------------------------------------------- stream
class Config:
    """One (network, files) configuration: its table, query, and the sinks that write and commit its batches."""

    def __init__(self, network: str, files: int, *, raw: str, endpoint: str, checkpoint: str):
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        from mpcommit.spark.streaming import StreamSink

        self.network, self.files = network, files
        self.query_id = str(uuid.uuid4())
        uri = f"s3://{BUCKET}/stream-{network}-{files}-{self.query_id[:8]}"
        schema = StructType([StructField("id", LongType()), StructField("p", StringType())])

        def options(url: str) -> dict[str, str]:
            return {"path": uri, "partitionBy": "p", "checkpointLocation": checkpoint, "s3.endpointUrl": url,
                    "s3.accessKeyId": "test", "s3.secretAccessKey": "test", "s3.region": "us-east-1"}

        self.writing = StreamSink(options(raw), schema, False)
        self.committing = StreamSink(options(endpoint), schema, False)

    def batch(self, batch_id: int) -> list[Any]:
        """One task's messages for micro-batch ``batch_id``: ``files`` partitions of 4 rows each."""
        import pyarrow as pa

        rows = 4 * self.files
        table = pa.table({"id": pa.array(range(batch_id * rows, (batch_id + 1) * rows), pa.int64()),
                          "p": pa.array([f"{i // 4:05d}" for i in range(rows)], pa.string())})
        # The micro-batch's one task, with the numbers Spark's TaskContext would give it.
        return [self.writing.write_batch_task(self.query_id, batch_id, (0, 0),
                                              iter(table.to_batches(max_chunksize=10_000)))]


def run_stream(args: argparse.Namespace) -> None:
    from tests.support.s3_network import PROFILES, S3Network

    from .records import RecordLog

    server = start_server(args.server)
    net = None
    try:
        ensure_bucket(make_client(server.endpoint_url), BUCKET)
        if "s3" in args.networks:
            net = S3Network(server.endpoint_url, PROFILES["s3"]).start()
        checkpoint = tempfile.mkdtemp(prefix="mpcommit-bench-stream-")
        configs = [Config(n, f, raw=server.endpoint_url, endpoint=net.endpoint_url if n == "s3" and net else
                          server.endpoint_url, checkpoint=checkpoint)
                   for n in args.networks for f in args.files]
        records = RecordLog("stream_commit", directory=args.records, server=server.version,
                            profile=net.profile.to_json() if net is not None else None,
                            networks=list(args.networks))
        names = [f"{c.network}-{c.files}" for c in configs]
        by_name = dict(zip(names, configs))
        for batch_id, name in interleaved(names, args.batches):
            c = by_name[name]
            messages = c.batch(batch_id)
            if net is not None and c.network == "s3":
                net.reset()
            started = time.perf_counter()
            c.committing.commit(messages, batch_id)
            seconds = time.perf_counter() - started
            proxy: dict[str, Any] = {}
            if net is not None and c.network == "s3":
                # What the commit sent, and how long the server itself took beyond the modelled latency ("late"
                # answers): on these shared cores moto, not the network, can be the slow part.
                ops = net.stats()["ops"]
                proxy = {"requests": {op: v["requests"] for op, v in ops.items()},
                         "late": sum(v.get("late", 0) for v in ops.values()),
                         "upstream_s": sum(v.get("upstream_seconds", 0.0) for v in ops.values())}
            log(f"batch {batch_id} {name}: commit {seconds * 1000:.0f} ms {proxy.get('requests', '')}")
            records.run(variant="sink-commit", network=c.network, files=c.files, batch=batch_id, pair=batch_id,
                        seconds=seconds, **proxy)
    finally:
        if net is not None:
            net.stop()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_datasource", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    door = sub.add_parser("door", help="the data source's batch write against writer(df)")
    door.add_argument("--repeats", type=int, default=6, help="ABBA pairs (at least 5)")
    door.add_argument("--rows", type=int, default=2_000_000)
    door.add_argument("--tasks", type=int, default=4)
    door.add_argument("--partitions", type=int, default=8)
    stream = sub.add_parser("stream", help="the streaming sink's commit per micro-batch")
    stream.add_argument("--batches", type=int, default=20, help="micro-batches per configuration")
    stream.add_argument("--files", type=int, nargs="+", default=[10, 100, 1000])
    stream.add_argument("--networks", nargs="+", choices=("raw", "s3"), default=["raw", "s3"])
    for p in (door, stream):
        p.add_argument("--server", choices=("moto", "localstack"), default="moto")
        p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    args = ap.parse_args(argv)
    if args.what == "door":
        if args.repeats < 5:
            ap.error("--repeats: at least 5 pairs")
        run_door(args)
    else:
        if args.batches < 1 or any(f < 1 for f in args.files):
            ap.error("--batches and --files must be positive")
        run_stream(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
