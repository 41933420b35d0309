"""mpcommit through a Spark Connect session: ``write``, the fluent writer, the commit-time merge and catalog
registration, each read back independently; what needs the JVM is refused by name before anything is written."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from mpcommit.catalog import GlueCatalog
from mpcommit.compaction import MergePolicy
from mpcommit.errors import SparkWriterError, UsageError
from mpcommit.spark import write, writer
from tests.support.glue import create_table, partitions, raw_glue_client, stats_of
from tests.support.spark_tables import PYSPARK4, SPARK_MARKS, assert_clean, files, partition_dirs, read_table, s3_filesystem, same_report
from tests.support.checks import list_objects, pending_uploads
from tests.support.spark_s3a import s3a_jars_problem

pytestmark = [*SPARK_MARKS, pytest.mark.connect]

ROWS = [(i, f"name {i}", f"2024-01-0{1 + i % 3}") for i in range(60)]


def frame(spark: Any, rows: list[tuple[int, str, str]] = ROWS, parts: int = 2) -> Any:
    return spark.createDataFrame(rows, "id long, name string, dt string").repartition(parts, "id")


def read_back(backend: Any, bucket: str, prefix: str, fmt: str = "parquet") -> list[tuple[int, str, str]]:
    import pyarrow as pa

    table = read_table(s3_filesystem(backend.endpoint_url), bucket, prefix, fmt=fmt,
                       partitions=pa.schema([("dt", pa.string())]))
    return sorted((r["id"], r["name"], r["dt"]) for r in table.to_pylist())


def test_write_over_connect_commits_exactly_the_rows(connect_spark, moto_backend) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    write(frame(connect_spark, ROWS[:30]), f"s3://{bucket}/t", partition_by=["dt"], s3=moto_backend.options)
    report = write(frame(connect_spark), f"s3://{bucket}/t", mode="overwrite", partition_by=["dt"],
                   s3=moto_backend.options)
    assert report.rows == 60 and set(report.partitions) == {"dt=2024-01-01", "dt=2024-01-02", "dt=2024-01-03"}
    assert read_back(moto_backend, bucket, "t") == sorted(ROWS)
    assert_clean(moto_backend.client, bucket, "t")
    if s3a_jars_problem() is None:  # and Spark itself, on the server, reads what the client's write committed
        back = connect_spark.read.parquet(f"s3a://{bucket}/t").collect()
        assert sorted((r["id"], r["name"], str(r["dt"])) for r in back) == sorted(ROWS)


def test_executors_take_the_store_from_their_environment_over_connect(connect_spark, moto_backend,
                                                                      monkeypatch) -> None:  # noqa: ANN001
    # s3=None: S3Options() from boto3's usual sources, here in this client and in the server's Python workers.
    bucket = moto_backend.new_bucket()
    for key, value in {"AWS_ENDPOINT_URL_S3": moto_backend.endpoint_url, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    report = writer(frame(connect_spark)).partitionBy("dt").csv(f"s3://{bucket}/t", header=True)
    assert report.rows == 60 and read_back(moto_backend, bucket, "t", fmt="csv") == sorted(ROWS)


def test_the_fluent_writer_over_connect_matches_write(connect_spark, moto_backend) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    df = frame(connect_spark)
    got = (writer(df, s3=moto_backend.options).mode("overwrite").partitionBy("dt").option("compression", "zstd")
           .parquet(f"s3://{bucket}/fluent"))
    expected = write(df, f"s3://{bucket}/write", mode="overwrite", partition_by=["dt"],
                     options={"compression": "zstd"}, s3=moto_backend.options)
    same_report(got, expected)
    assert files(moto_backend.client, bucket, "fluent") == files(moto_backend.client, bucket, "write")
    assert all(f.endswith(".zstd.parquet") for f in got.filenames)

    # The session's settings reach the fluent writer over Connect too.
    connect_spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        writer(frame(connect_spark, [(100, "x", "2024-01-09")]), s3=moto_backend.options) \
            .mode("overwrite").partitionBy("dt").parquet(f"s3://{bucket}/fluent")
    finally:
        connect_spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert partition_dirs(moto_backend.client, bucket, "fluent") == {
        "dt=2024-01-01", "dt=2024-01-02", "dt=2024-01-03", "dt=2024-01-09"}
    with pytest.raises(SparkWriterError, match='save mode "merge" is invalid') as caught:
        writer(df, s3=moto_backend.options).mode("merge")
    assert caught.value.getCondition() == "INVALID_SAVE_MODE"


def test_the_commit_time_merge_runs_over_connect_and_says_where(connect_spark, moto_backend, caplog) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    with caplog.at_level(logging.WARNING, logger="mpcommit.spark.writer"):
        report = writer(frame(connect_spark, parts=6), s3=moto_backend.options, merge=MergePolicy()) \
            .mode("append").partitionBy("dt").json(f"s3://{bucket}/t")
    # Six tasks each wrote a small file per day; each day's files were merged into one before the commit.
    assert report.files == 3 and report.rows == 60 and "merge" in report.timings
    assert Counter(f.split("/")[1] for f in report.filenames) == {"dt=2024-01-01": 1, "dt=2024-01-02": 1,
                                                                   "dt=2024-01-03": 1}
    assert read_back(moto_backend, bucket, "t", fmt="json") == sorted(ROWS)
    assert_clean(moto_backend.client, bucket, "t")
    assert any("Spark Connect session has no SparkContext" in r.getMessage() for r in caplog.records)


def test_catalog_registration_over_connect(connect_spark, moto_backend) -> None:  # noqa: ANN001
    import uuid

    glue_client = raw_glue_client(moto_backend.endpoint_url)
    database = f"db_{uuid.uuid4().hex[:12]}"
    glue_client.create_database(DatabaseInput={"Name": database})
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/events"
    create_table(glue_client, database, "events", uri)
    glue = GlueCatalog(moto_backend.options, endpoint_url=moto_backend.endpoint_url)
    report = writer(frame(connect_spark), s3=moto_backend.options, table=f"{database}.events", catalog=glue) \
        .mode("overwrite").partitionBy("dt").parquet(uri)
    found = partitions(glue_client, database, "events")
    assert set(found) == {"2024-01-01", "2024-01-02", "2024-01-03"}
    assert report.catalog is not None and report.catalog.ok and len(report.catalog.created) == 3
    per_day = Counter(dt for _i, _n, dt in ROWS)
    assert {dt: stats_of(p)[2] for dt, p in found.items()} == per_day, "numRows of each partition"


def test_the_session_catalog_is_refused_over_connect_before_anything_is_written(connect_spark, moto_backend) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    for run in (lambda: writer(frame(connect_spark), s3=moto_backend.options, table="db.events")
                .partitionBy("dt").parquet(f"s3://{bucket}/t"),
                lambda: write(frame(connect_spark), f"s3://{bucket}/t", partition_by=["dt"], s3=moto_backend.options,
                              table="db.events", catalog="spark")):
        with pytest.raises(UsageError, match=r"catalog 'spark' .*Spark Connect session.*catalog='glue'.*"
                                             r"mpcommit catalog sync"):
            run()
    assert list_objects(moto_backend.client, bucket, "") == [] and pending_uploads(moto_backend.client, bucket, "") == []


@PYSPARK4
def test_the_data_source_over_connect(connect_spark, moto_backend) -> None:  # noqa: ANN001
    """``df.write.format("mpcommit")`` from a Connect client: found by the server's own look for pyspark_* modules
    (no register call), committed by mpcommit on the server; a failed task leaves nothing."""
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    # The server's workers take the store from their environment (the fixture's); the options name it too.
    store = {"s3.endpointUrl": be.endpoint_url, "s3.accessKeyId": "test", "s3.secretAccessKey": "test"}
    frame(connect_spark, ROWS[:30]).write.format("mpcommit").mode("overwrite").options(**store) \
        .option("partitionBy", "dt").save(uri)
    frame(connect_spark, ROWS[30:]).write.format("mpcommit").mode("append").options(**store, partitionBy="dt") \
        .save(uri)
    assert read_back(be, bucket, "t") == sorted(ROWS)
    before = {o["Key"] for o in list_objects(be.client, bucket)}
    failing = frame(connect_spark).selectExpr("CASE WHEN id = 17 THEN raise_error('boom') ELSE id END AS id",
                                              "name", "dt")
    with pytest.raises(Exception, match="boom"):
        failing.write.format("mpcommit").mode("append").options(**store, partitionBy="dt").save(uri)
    assert {o["Key"] for o in list_objects(be.client, bucket)} == before
    assert read_back(be, bucket, "t") == sorted(ROWS)
    assert_clean(be.client, bucket, "t")
