"""The ``mpcommit`` streaming sink through a Spark Connect session: ``df.writeStream.format("mpcommit")`` from a
Connect client, the sink found by the server by itself (no register call), each micro-batch committed once by the
server's driver -- a micro-batch the server replays after its commit log was lost is recognised, not written twice.

The input is local JSON files the server (on this machine) reads, one per micro-batch; ``availableNow`` ends each
run by itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_streaming import SCHEMA, add_file, lose_commit_log, newest, query_record
from tests.support.spark_tables import JOB_ID, PYSPARK4, SPARK_MARKS, STREAM_SINK, assert_clean, data_keys, read_table, s3_filesystem

pytestmark = [*SPARK_MARKS, pytest.mark.connect, PYSPARK4, STREAM_SINK]


def run(spark: Any, be: Any, folder: Path, checkpoint: Path, uri: str) -> Any:
    """One run of the query through Connect until the input is used up."""
    store = {"s3.endpointUrl": be.endpoint_url, "s3.accessKeyId": "test", "s3.secretAccessKey": "test"}
    query = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))
             .writeStream.format("mpcommit").options(**store).option("partitionBy", "dt")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(uri))
    query.awaitTermination(180)
    assert not query.isActive, "the query did not end within 180 s"
    assert query.exception() is None, query.exception()
    return query


def ids(be: Any, bucket: str) -> list[int]:
    import pyarrow as pa

    table = read_table(s3_filesystem(be.endpoint_url), bucket, "t", partitions=pa.schema([("dt", pa.string())]))
    return sorted(table.column("id").to_pylist())


def test_a_stream_over_connect_commits_each_micro_batch_exactly_once(connect_spark, moto_backend,
                                                                     tmp_path) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri, folder, checkpoint = f"s3://{bucket}/t", tmp_path / "in", tmp_path / "checkpoint"
    folder.mkdir()
    add_file(folder, 0, range(0, 10))
    add_file(folder, 1, range(10, 20))

    run(connect_spark, be, folder, checkpoint, uri)
    assert ids(be, bucket) == list(range(20))
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert query_record(be, bucket)["queryId"] == query_id
    assert newest(be, bucket, query_id).version == 1

    # The server's commit log loses micro-batch 1 (as a driver killed before writing it would): the server replays
    # it on the next start, and the sink recognises it.
    lose_commit_log(checkpoint, 1)
    add_file(folder, 2, range(20, 30))
    run(connect_spark, be, folder, checkpoint, uri)
    assert (checkpoint / "commits" / "1").exists() and (checkpoint / "commits" / "2").exists()
    assert ids(be, bucket) == list(range(30)), "micro-batch 1 replayed, not written twice"
    jobs = {JOB_ID.search(k.rsplit("/", 1)[-1]).group(0) for k in data_keys(be.client, bucket, "t")}
    assert len(jobs) == 3, "one job per micro-batch; the replayed attempt left no file"
    assert newest(be, bucket, query_id).version == 2 and newest(be, bucket, query_id).job_id in jobs
    assert_clean(be.client, bucket, "t")
