"""Idempotent writes through Spark (issue 38, item 2): an application id and a version on a write -- the ``txn``
argument, or Delta Lake's options ``txnAppId`` / ``txnVersion`` -- make a scheduler's re-run of a run that did
commit, and a ``foreachBatch`` batch that Spark replays after a failure, a no-op that says so. Real Spark on moto;
every door but the data source's runs on PySpark 3.5 too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mpcommit import Txn
from mpcommit.errors import TxnVersionError, UsageError
from mpcommit.spark import register, write, writer
from tests.support.checks import read_object
from tests.support.spark_tables import PYSPARK4, SPARK_MARKS, assert_clean, read_table, s3_filesystem

pytestmark = SPARK_MARKS

DT = pa.schema([("dt", pa.string())])


def frame(spark: Any, start: int, n: int = 20) -> Any:
    rows = [(start + i, ("d1", "d2")[i % 2]) for i in range(n)]
    return spark.createDataFrame(rows, "id long, dt string").repartition(2)


def ids(backend: Any, bucket: str) -> list[int]:
    return sorted(read_table(s3_filesystem(backend.endpoint_url), bucket, "t", partitions=DT).column("id").to_pylist())


def last_job(backend: Any, bucket: str) -> str:
    return json.loads(read_object(backend.client, bucket, "t/_SUCCESS"))["jobId"]


def test_a_rerun_of_a_committed_version_writes_nothing_and_an_older_one_is_refused(spark, moto_backend) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    first = write(frame(spark, 0), uri, mode="append", partition_by="dt", s3=be.options, txn=Txn("daily", 20261127))
    assert first.duplicate_of is None and first.rows == 20
    again = write(frame(spark, 0), uri, mode="append", partition_by="dt", s3=be.options, txn=Txn("daily", 20261127))
    assert again.duplicate_of is not None and again.duplicate_of.job_id == first.job_id
    assert not again.filenames and last_job(be, bucket) == first.job_id
    assert ids(be, bucket) == list(range(20)), "the re-run wrote nothing"

    nxt = write(frame(spark, 100), uri, mode="append", partition_by="dt", s3=be.options, txn=Txn("daily", 20261128))
    assert nxt.duplicate_of is None
    with pytest.raises(TxnVersionError, match=r"version 20261127 of application 'daily' is older than version 20261128"):
        write(frame(spark, 200), uri, mode="append", partition_by="dt", s3=be.options, txn=Txn("daily", 20261127))
    other = write(frame(spark, 300), uri, mode="append", partition_by="dt", s3=be.options, txn=Txn("hourly", 1))
    assert other.duplicate_of is None, "each application has its own versions"
    assert ids(be, bucket) == list(range(20)) + list(range(100, 120)) + list(range(300, 320))
    assert_clean(be.client, bucket, "t")


def test_the_fluent_writer_takes_delta_lakes_option_names(spark, moto_backend) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"

    def run(start: int, version: Any) -> Any:
        return writer(frame(spark, start), s3=be.options).mode("append").partitionBy("dt") \
            .option("txnAppId", "loader").option("txnVersion", version).parquet(uri)

    assert run(0, 7).duplicate_of is None
    assert run(0, "7").duplicate_of is not None
    assert run(50, 8).duplicate_of is None
    assert ids(be, bucket) == list(range(20)) + list(range(50, 70))
    with pytest.raises(UsageError, match="txnVersion is missing"):
        writer(frame(spark, 90), s3=be.options).mode("append").option("txnAppId", "loader").parquet(uri)
    with pytest.raises(UsageError, match="txnVersion must be an integer, got 'x'"):
        writer(frame(spark, 90), s3=be.options).mode("append").option("txnAppId", "loader") \
            .option("txnVersion", "x").parquet(uri)
    with pytest.raises(UsageError, match="differ from the txn argument"):
        writer(frame(spark, 90), s3=be.options, txn=Txn("loader", 9)).mode("append") \
            .option("txnAppId", "loader").option("txnVersion", 10).parquet(uri)
    assert ids(be, bucket) == list(range(20)) + list(range(50, 70)), "nothing written by the refused writes"


def test_a_foreach_batch_replayed_after_a_failure_commits_every_row_once(spark, moto_backend, tmp_path: Path) -> None:  # noqa: ANN001
    """The failure Spark's own replay exists for: a batch committed to the table, then the query died before
    Spark's commit log recorded the batch. The restarted query runs that batch again (same id, same rows); the
    write of ``Txn(query, batch_id)`` recognises it."""
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    source = tmp_path / "in"
    source.mkdir()
    for n in range(3):
        (source / f"part-{n}.json").write_text("".join(json.dumps({"id": n * 10 + i, "dt": f"d{n}"}) + "\n"
                                                       for i in range(10)))
    reports: list[tuple[int, Any]] = []
    fail_after = {1}

    def each(batch: Any, batch_id: int) -> None:
        report = write(batch, uri, mode="append", partition_by="dt", s3=be.options, txn=Txn("events-q", batch_id))
        reports.append((batch_id, report))
        if batch_id in fail_after:
            fail_after.discard(batch_id)
            raise RuntimeError("the driver dies after the batch committed, before Spark records it")

    def run() -> None:
        stream = spark.readStream.schema("id long, dt string").option("maxFilesPerTrigger", 1).json(str(source))
        query = stream.writeStream.foreachBatch(each).option("checkpointLocation", str(tmp_path / "cp")) \
            .trigger(availableNow=True).start()
        query.awaitTermination()

    with pytest.raises(Exception, match="the driver dies after the batch committed"):
        run()
    run()  # restarted from the checkpoint: batch 1 again, then batch 2
    assert [b for b, _ in reports] == [0, 1, 1, 2]
    replayed = reports[2][1]
    assert replayed.duplicate_of is not None and replayed.duplicate_of.job_id == reports[1][1].job_id
    assert ids(be, bucket) == list(range(30))
    assert_clean(be.client, bucket, "t")


@PYSPARK4
def test_the_data_source_takes_the_same_options(spark, moto_backend) -> None:  # noqa: ANN001
    register(spark)
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    options = {"s3.endpointUrl": be.endpoint_url, "s3.accessKeyId": "test", "s3.secretAccessKey": "test",
               "s3.region": "us-east-1", "partitionBy": "dt", "txnAppId": "nightly", "txnVersion": "3"}
    for start in (0, 0):
        frame(spark, start).write.format("mpcommit").mode("append").options(**options).save(uri)
    assert ids(be, bucket) == list(range(20)), "the second run of version 3 wrote nothing"
    with pytest.raises(Exception, match="older than version 3"):
        frame(spark, 40).write.format("mpcommit").mode("append").options(**{**options, "txnVersion": "2"}).save(uri)
    assert ids(be, bucket) == list(range(20))
    assert_clean(be.client, bucket, "t")


@pytest.mark.long
def test_a_foreach_batch_query_whose_driver_is_killed_in_commits_commits_every_row_once(moto_backend,  # noqa: ANN001
                                                                                         tmp_path: Path) -> None:
    """The same with real kills: the query's driver -- its JVM and Python workers with it -- SIGKILLed in batch
    0's commit right after it wrote _SUCCESS (its place in the order not ended yet). Restarted, Spark replays batch
    0, whose write waits for the dead driver's place (a lease: 4 s here), takes it over and finishes that commit --
    and is killed again there, at that finish's first complete. A third run replays batch 0 once more: it takes the
    twice-dead place over, finishes it, and is then a no-op saying so; batches 1-3 follow. Every row once, and
    `recover` leaves nothing behind."""
    from mpcommit import recover
    from tests.spark.test_stream_kills import report_of, run_driver
    from tests.spark.test_streaming import add_file

    be, bucket = moto_backend, moto_backend.new_bucket()
    folder = tmp_path / "in"
    folder.mkdir()
    for n in range(4):
        add_file(folder, n, range(n * 10, (n + 1) * 10))
    config = {"endpoint": be.endpoint_url, "uri": f"s3://{bucket}/t", "input": str(folder),
              "checkpoint": str(tmp_path / "cp"), "foreachBatch": "events-q",
              "order": {"heartbeat_seconds": 1.0, "lease_seconds": 4.0}}
    writes: list[dict[str, Any]] = []
    for fault in ("commit.after_success:1:killgroup", "commit.after_complete:1:killgroup", None):
        run = run_driver(config, fault)
        writes += [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"write"')]
        if fault is None:
            assert report_of(run)["error"] is None
        else:
            assert run.returncode != 0, f"the driver was to be killed at {fault}"
    # Printed after each write returned: batch 0's first two writes were killed before they could say so.
    assert [w["write"] for w in writes] == [0, 1, 2, 3], writes
    assert [w["duplicateOf"] is not None for w in writes] == [True, False, False, False], writes
    assert ids(be, bucket) == list(range(40))
    recover(f"s3://{bucket}/t", s3=be.options, older_than=0)
    assert_clean(be.client, bucket, "t")
