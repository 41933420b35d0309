"""The ``mpcommit`` streaming sink in real Spark on moto: ``df.writeStream.format("mpcommit")`` with a checkpoint, each
micro-batch one job; a micro-batch that Spark replays after a restart (its commit log lost between mpcommit's data
commit and Spark's own) is recognised by the table's commit order, where each micro-batch committed as a version of
the query, and not written twice; a micro-batch whose task failed leaves nothing visible or pending; a query
restarted on another table is refused by name.

The source is Spark's file source over local JSON files, one file per micro-batch (``maxFilesPerTrigger``), run
with ``trigger(availableNow=True)`` so that each run ends by itself. A "crash" is what it leaves behind: Spark's
commit log entry for the last micro-batch removed (Spark then replays that micro-batch from its offset log on the
next start).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from mpcommit.protocol.layout import Table
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol.records.order import TxnRecord
from mpcommit.protocol.stream import batch_txn
from mpcommit.store.s3 import S3Store
from tests.support.spark_tables import JOB_ID, PYSPARK4, SPARK_MARKS, STREAM_SINK, assert_clean, data_keys, read_table, s3_filesystem
from tests.spark.test_datasource import DT, ids, last_commit, s3, source  # noqa: F401 - source: the fixture
from tests.support.checks import all_keys, list_objects, pending_uploads, read_object

pytestmark = [*SPARK_MARKS, PYSPARK4, STREAM_SINK]

SCHEMA = "id long, dt string"


def add_file(folder: Path, n: int, rows: range) -> None:
    """Input file ``n`` (older files first, as the file source takes them)."""
    path = folder / f"part-{n:03d}.json"
    path.write_text("".join(json.dumps({"id": i, "dt": f"d{i % 2}"}) + "\n" for i in rows))
    os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))


def run(spark: Any, backend: Any, folder: Path, checkpoint: Path, uri: str, *, poison: int | None = None) -> Any:
    """One run of the query until the input is used up; the query (``exception()`` tells how it ended)."""
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))
    if poison is not None:
        df = df.selectExpr(f"CASE WHEN id = {poison} THEN raise_error('poisoned row') ELSE id END AS id", "dt")
    query = (df.writeStream.format("mpcommit").options(**s3(backend)).option("partitionBy", "dt")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(uri))
    try:
        query.awaitTermination(120)
    except Exception:  # noqa: BLE001 - the test looks at query.exception()
        pass
    return query


def query_record(backend: Any, bucket: str) -> dict:
    """The sink's one record of the query under the table."""
    keys = [o["Key"] for o in list_objects(backend.client, bucket, "t/_mpcommit/streams/")]
    assert len(keys) == 1, keys
    return json.loads(read_object(backend.client, bucket, keys[0]))


def newest(backend: Any, bucket: str, query_id: str) -> TxnRecord | None:
    """The ledger: the query's newest micro-batch committed (its version) and the job that did, as the table's
    commit order holds it."""
    return TableOrder(S3Store(backend.options), Table(bucket, "t")).txn_state(batch_txn(query_id, 0).app_id).newest


def jobs_of(backend: Any, bucket: str) -> set[str]:
    """The jobs whose files are visible (every data file's name carries its job's id)."""
    return {JOB_ID.search(k.rsplit("/", 1)[-1]).group(0) for k in data_keys(backend.client, bucket, "t")}


def replayed(query: Any, checkpoint: Path, batch: int) -> bool:
    """Whether this run of the query ran micro-batch ``batch`` again and Spark logged its commit."""
    return (checkpoint / "commits" / str(batch)).exists() and any(
        p["batchId"] == batch and p["numInputRows"] > 0 for p in query.recentProgress)


def lose_commit_log(checkpoint: Path, batch: int) -> None:
    """What a driver killed after mpcommit's commit and before Spark's commit log leaves: no commits/BATCH."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    assert not (checkpoint / "commits" / str(batch)).exists()


@pytest.mark.ci_on("localstack")
@pytest.mark.parametrize("server", ["moto", pytest.param("localstack", marks=pytest.mark.localstack)])
def test_each_micro_batch_is_committed_exactly_once_across_replays(source, server, request, tmp_path) -> None:  # noqa: ANN001, F811
    # The sink's record is created with a conditional write, and replays list the table's job records: on moto and
    # on LocalStack's S3.
    be = request.getfixturevalue(f"{server}_backend")
    bucket = be.new_bucket()
    uri, folder, checkpoint = f"s3://{bucket}/t", tmp_path / "in", tmp_path / "checkpoint"
    folder.mkdir()
    add_file(folder, 0, range(0, 10))
    add_file(folder, 1, range(10, 20))

    q = run(source, be, folder, checkpoint, uri)
    assert q.exception() is None, q.exception()
    assert ids(be, bucket, "t") == list(range(20))
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert query_record(be, bucket)["queryId"] == query_id
    after_1 = newest(be, bucket, query_id)
    assert after_1.version == 1
    # Each micro-batch was one job: its id, carried by every file name, differs between the two.
    assert len(jobs_of(be, bucket)) == 2

    # 1. Killed after the data commit, before Spark's commit log: Spark replays batch 1.
    lose_commit_log(checkpoint, 1)
    add_file(folder, 2, range(20, 30))
    q = run(source, be, folder, checkpoint, uri)
    assert q.exception() is None, q.exception()
    assert replayed(q, checkpoint, 1)
    assert ids(be, bucket, "t") == list(range(30)), "batch 1 replayed, not written twice; batch 2 written"
    after_2 = newest(be, bucket, query_id)
    assert after_2.version == 2 and after_2.job_id != after_1.job_id
    assert len(jobs_of(be, bucket)) == 3, "the replayed attempt of batch 1 left no file"
    assert_clean(be.client, bucket, "t")

    # 2. A micro-batch whose task fails: rolled back, nothing of it visible or pending; the ledger unchanged.
    before = all_keys(be.client, bucket)
    add_file(folder, 3, range(30, 40))
    q = run(source, be, folder, checkpoint, uri, poison=35)
    assert q.exception() is not None and "poisoned row" in str(q.exception())
    assert all_keys(be.client, bucket) == before
    assert pending_uploads(be.client, bucket) == []
    assert newest(be, bucket, query_id) == after_2

    # 3. The same checkpoint on another table: refused by name, nothing left there.
    q = run(source, be, folder, checkpoint, f"s3://{bucket}/elsewhere")
    assert q.exception() is not None and "holds no record of it" in str(q.exception())
    assert all_keys(be.client, bucket, "elsewhere/") == set() and pending_uploads(be.client, bucket) == []
    assert ids(be, bucket, "t") == list(range(30))


def test_complete_mode_replaces_the_table_with_each_micro_batch_exactly_once(source, moto_backend, tmp_path) -> None:  # noqa: ANN001, F811
    """Output mode complete: each micro-batch is the whole result, committed as an overwrite job that replaces the
    table's contents (the sink's record under _mpcommit/ stays); a replayed micro-batch is recognised as any."""
    be = moto_backend
    bucket = be.new_bucket()
    uri, folder, checkpoint = f"s3://{bucket}/t", tmp_path / "in", tmp_path / "checkpoint"
    folder.mkdir()
    add_file(folder, 0, range(0, 10))
    add_file(folder, 1, range(10, 20))

    def run_complete() -> Any:
        df = (source.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))
              .groupBy("dt").agg(F.count("*").alias("n"), F.sum("id").alias("total")))
        query = (df.writeStream.format("mpcommit").outputMode("complete").options(**s3(be))
                 .option("partitionBy", "dt").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start(uri))
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        return query

    def table() -> list[tuple[str, int, int]]:
        got = read_table(s3_filesystem(be.endpoint_url), bucket, "t", partitions=DT)
        return sorted((r["dt"], r["n"], r["total"]) for r in got.to_pylist())

    def expected(upto: int) -> list[tuple[str, int, int]]:
        ids_ = range(upto)
        return [(d, sum(1 for i in ids_ if f"d{i % 2}" == d), sum(i for i in ids_ if f"d{i % 2}" == d))
                for d in ("d0", "d1")]

    run_complete()
    assert table() == expected(20), "micro-batch 1's result replaced micro-batch 0's"
    assert len(jobs_of(be, bucket)) == 1, "only the last micro-batch's files are visible"
    query_id = query_record(be, bucket)["queryId"]
    assert newest(be, bucket, query_id).version == 1
    last = last_commit(be, bucket, "t")
    assert last["mode"] == "overwrite"

    # Spark's commit log loses micro-batch 1: its replay is recognised (the table is not rewritten), then 2 commits.
    lose_commit_log(checkpoint, 1)
    add_file(folder, 2, range(20, 30))
    q = run_complete()
    assert replayed(q, checkpoint, 1)
    assert table() == expected(30)
    (job,) = jobs_of(be, bucket)
    assert (newest(be, bucket, query_id).version, newest(be, bucket, query_id).job_id) == (2, job)
    assert len([k for k in all_keys(be.client, bucket, "t/_mpcommit/order/") if not k.endswith(".done")]) == 3, \
        "one place in the commit order per micro-batch: the replay took none"
    assert_clean(be.client, bucket, "t")


def test_update_mode_is_refused_by_spark_before_anything_is_written(source, moto_backend, tmp_path) -> None:  # noqa: ANN001, F811
    """Spark lets a Python data source's stream take append and complete only: update is refused by Spark itself
    (the source offers no update-as-append), with the source's name, and nothing is written."""
    be = moto_backend
    bucket = be.new_bucket()
    folder = tmp_path / "in"
    folder.mkdir()
    add_file(folder, 0, range(0, 10))
    df = source.readStream.schema(SCHEMA).json(str(folder)).groupBy("dt").count()
    with pytest.raises(Exception, match="mpcommit does not support Update mode"):
        query = (df.writeStream.format("mpcommit").outputMode("update").options(**s3(be))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True)
                 .start(f"s3://{bucket}/t"))
        query.awaitTermination(120)
        raise AssertionError(f"update mode ran: {query.exception()}")
    assert all_keys(be.client, bucket) == set() and pending_uploads(be.client, bucket) == []
