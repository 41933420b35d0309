"""Write modes, empty DataFrames and bad input, through real Spark jobs on moto."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpcommit.errors import DestinationExistsError, InvalidUriError, NoSuchBucketError, UsageError
from mpcommit.spark import write
from tests.support.spark_tables import SPARK_MARKS, assert_clean, data_keys, read_table
from tests.support.checks import all_keys, list_objects, pending_uploads, read_object

pytestmark = SPARK_MARKS

DAY = pa.schema([("day", pa.string())])


def events(spark: Any, days: list[str], per_day: int = 50, start: int = 0) -> Any:
    rows = [(start + i * len(days) + j, day, float(i)) for i in range(per_day) for j, day in enumerate(days)]
    return spark.createDataFrame(rows, "id long, day string, v double").repartition(2)


def objects(client: Any, bucket: str, prefix: str) -> dict[str, str]:
    """key -> ETag of every object under prefix (to tell untouched objects from rewritten ones)."""
    return {o["Key"]: o["ETag"] for o in list_objects(client, bucket, f"{prefix}/")}


def ids(fs: Any, bucket: str, prefix: str) -> list[int]:
    return sorted(read_table(fs, bucket, prefix, partitions=DAY).column("id").to_pylist())


def success(client: Any, bucket: str, prefix: str) -> dict:
    return json.loads(read_object(client, bucket, f"{prefix}/_SUCCESS"))


@pytest.fixture
def store(moto_backend) -> Any:  # noqa: ANN001
    return moto_backend


@pytest.fixture
def fs(store) -> Any:  # noqa: ANN001
    from urllib.parse import urlsplit

    from pyarrow import fs as pafs

    return pafs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1", scheme="http",
                             endpoint_override=urlsplit(store.endpoint_url).netloc)


def test_error_mode_writes_a_new_table_and_refuses_an_existing_one(spark, store, fs) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    report = write(events(spark, ["d1", "d2"]), f"s3://{bucket}/t", partition_by=["day"], s3=store.options)  # default mode
    assert report.mode == "error" and report.rows == 100
    before = objects(store.client, bucket, "t")
    for mode in ("error", "errorifexists", "ErrorIfExists"):
        with pytest.raises(DestinationExistsError, match="already holds data"):
            write(events(spark, ["d3"]), f"s3://{bucket}/t", mode=mode, partition_by=["day"], s3=store.options)
    assert objects(store.client, bucket, "t") == before, "nothing written, not even a job record"
    assert pending_uploads(store.client, bucket, "t") == []


def test_append_adds_a_second_job_beside_the_first(spark, store, fs) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    first = write(events(spark, ["d1", "d2"]), f"s3a://{bucket}/t", mode="append", partition_by=["day"], s3=store.options)
    second = write(events(spark, ["d2", "d3"], start=1000), f"s3n://{bucket}/t", mode="append", partition_by=["day"],
                   s3=store.options)
    keys = data_keys(store.client, bucket, "t")
    assert {k for k in keys if first.job_id in k} == set(first.filenames)
    assert {k for k in keys if second.job_id in k} == set(second.filenames)
    assert len(keys) == first.files + second.files
    assert ids(fs, bucket, "t") == sorted(list(range(100)) + list(range(1000, 1100)))
    assert success(store.client, bucket, "t")["jobId"] == second.job_id
    assert_clean(store.client, bucket, "t")


def test_static_overwrite_replaces_everything(spark, store, fs) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    write(events(spark, ["d1", "d2"]), f"s3://{bucket}/t", mode="append", partition_by=["day"], s3=store.options)
    report = write(events(spark, ["d3"], start=500), f"s3://{bucket}/t", mode="overwrite", partition_by=["day"],
                   s3=store.options)
    assert data_keys(store.client, bucket, "t") == set(report.filenames)
    assert ids(fs, bucket, "t") == list(range(500, 550))
    assert report.deleted_objects > 0
    assert_clean(store.client, bucket, "t")


def test_dynamic_overwrite_replaces_only_the_partitions_written(spark, store, fs) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    write(events(spark, ["d0", "d1", "d2"]), f"s3://{bucket}/t", mode="overwrite", partition_by=["day"], s3=store.options)
    before = objects(store.client, bucket, "t")
    report = write(events(spark, ["d1", "d3"], start=1000), f"s3://{bucket}/t", mode="overwrite",
                   partition_by=["day"], partition_overwrite="dynamic", s3=store.options)
    after = objects(store.client, bucket, "t")
    for key, etag in before.items():
        if key.startswith(("t/day=d0/", "t/day=d2/")):
            assert after.get(key) == etag, f"{key} was in an untouched partition and must stay as it was"
        elif key.startswith("t/day=d1/"):
            assert key not in after, f"{key} was in a replaced partition"
    assert {k for k in data_keys(store.client, bucket, "t") if k.startswith(("t/day=d1/", "t/day=d3/"))} == set(report.filenames)
    table = read_table(fs, bucket, "t", partitions=DAY)
    by_day: dict[str, list[int]] = {}
    for row in table.to_pylist():
        by_day.setdefault(row["day"], []).append(row["id"])
    assert {d: len(v) for d, v in by_day.items()} == {"d0": 50, "d1": 50, "d2": 50, "d3": 50}
    assert all(i >= 1000 for i in by_day["d1"] + by_day["d3"]) and all(i < 1000 for i in by_day["d0"] + by_day["d2"])
    assert success(store.client, bucket, "t")["mode"] == "overwrite-dynamic"
    assert_clean(store.client, bucket, "t")


def test_ignore_mode_on_existing_data_runs_no_spark_job(spark, store) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    write(events(spark, ["d1"]), f"s3://{bucket}/t", mode="append", s3=store.options)
    before = objects(store.client, bucket, "t")

    def must_not_run(task_id: int, attempt: int, batches: int) -> None:
        raise AssertionError("mode ignore on existing data must not run any task")

    report = write(events(spark, ["d2"]), f"s3://{bucket}/t", mode="ignore", s3=store.options, _task_hook=must_not_run)
    assert report.ignored and report.files == 0
    assert objects(store.client, bucket, "t") == before
    # On an empty destination, ignore writes like append.
    report = write(events(spark, ["d2"]), f"s3://{bucket}/other", mode="ignore", s3=store.options)
    assert not report.ignored and report.rows == 50


def test_empty_dataframe_writes_what_spark_writes_and_overwrite_still_replaces(spark, store) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    write(events(spark, ["d1"]), f"s3://{bucket}/t", mode="append", partition_by=["day"], s3=store.options)
    empty = events(spark, ["d1"]).limit(0)
    report = write(empty, f"s3://{bucket}/t", mode="overwrite", partition_by=["day"], s3=store.options)
    assert report.files == 0 and report.rows == 0
    assert data_keys(store.client, bucket, "t") == set(), "partitioned, no rows: an empty table, as Spark leaves it"
    assert success(store.client, bucket, "t")["files"] == 0
    # Not partitioned: the one file Spark's writer leaves for no rows (a CSV without a header: empty).
    report = write(spark.createDataFrame([], "id long"), f"s3://{bucket}/fresh", mode="error", format="csv",
                   s3=store.options)
    assert {k for k in all_keys(store.client, bucket, "fresh") if "/_mpcommit/" not in k} == {
        "fresh/_SUCCESS", f"fresh/part-00000-{report.job_id}.c000.csv"}
    assert read_object(store.client, bucket, f"fresh/part-00000-{report.job_id}.c000.csv") == b""
    assert (report.files, report.rows) == (1, 0)
    # Empty, but a table now: mode error refuses it.
    with pytest.raises(DestinationExistsError):
        write(spark.createDataFrame([], "id long"), f"s3://{bucket}/fresh", s3=store.options)
    assert_clean(store.client, bucket, "t")


def test_an_empty_result_reads_back_in_spark_with_its_schema(spark, store, tmp_path) -> None:  # noqa: ANN001
    """writer() and write() of no rows leave Spark's files: spark.read finds the schema and no rows (before, the
    table held only _SUCCESS and spark.read.parquet failed with UNABLE_TO_INFER_SCHEMA)."""
    from mpcommit.spark import writer

    bucket = store.new_bucket()
    df = spark.createDataFrame([(1, "a", 2.5)], "id long, name string, v double").filter("id < 0")
    report = writer(df, s3=store.options).mode("overwrite").parquet(f"s3://{bucket}/p")
    (key,) = data_keys(store.client, bucket, "p")
    assert key == f"p/part-00000-{report.job_id}.c000.snappy.parquet" and report.rows == 0
    header = write(df, f"s3://{bucket}/c", format="csv", options={"header": "true", "compression": "gzip"},
                   s3=store.options)
    (csv_key,) = data_keys(store.client, bucket, "c")
    assert csv_key == f"c/part-00000-{header.job_id}.c000.csv.gz"
    for name, got in (("p", key), ("c", csv_key)):
        (tmp_path / name).mkdir()
        (tmp_path / name / got.rsplit("/", 1)[1]).write_bytes(read_object(store.client, bucket, got))
    back = spark.read.parquet(str(tmp_path / "p"))
    assert back.schema == df.schema and back.count() == 0
    back = spark.read.options(header="true", inferSchema="true").csv(str(tmp_path / "c"))
    assert back.columns == ["id", "name", "v"] and back.count() == 0
    assert_clean(store.client, bucket, "p")


def test_max_records_per_file_splits_files(spark, store, fs) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    df = spark.range(2500).coalesce(1)
    report = write(df, f"s3://{bucket}/t", options={"maxRecordsPerFile": "1000"}, s3=store.options)
    counts = sorted(pq.ParquetFile(fs.open_input_file(f"{bucket}/{k}")).metadata.num_rows for k in report.filenames)
    assert counts == [500, 1000, 1000]


@pytest.mark.parametrize("kwargs,error,message", [
    ({"format": "orc"}, UsageError, "unsupported format 'orc'"),
    ({"mode": "upsert"}, UsageError, "unknown mode 'upsert'"),
    ({"partition_by": ["nope"]}, UsageError, "partition column 'nope' is not a column"),
    ({"partition_overwrite": "sometimes"}, UsageError, "unknown partition_overwrite"),
    ({"format": "csv", "options": {"header": "true"}, "tags": True}, UsageError, "csv cannot hold column 'tags'"),
    ({"format": "text"}, UsageError, "text holds exactly one string column"),
    ({"options": {"compresion": "zstd"}}, UsageError, r"does not know option\(s\) 'compresion'"),
    ({"options": {"maxRecordsPerFile": "-5"}}, UsageError, "maxRecordsPerFile"),
    # Until merge policies are supported a policy is refused; after, anything but a MergePolicy is.
    ({"merge": object()}, UsageError, "merge (is not supported by this version|must be None or a MergePolicy)"),
    ({"max_open_writers": 0}, UsageError, "max_open_writers"),
    ({"dup": True}, UsageError, "duplicate column"),
    ({"uri": "hdfs://nn/table"}, InvalidUriError, "not an S3 URI"),
    ({"uri": "s3://no-such-bucket-mpcommit/t"}, NoSuchBucketError, None),
    ({"uri": "s3://{bucket}", "mode": "overwrite"}, UsageError, "root of the bucket.*overwrite_bucket_root=True"),
    # As in Spark, a dynamic overwrite of unpartitioned data replaces the whole destination: refused at the root.
    ({"uri": "s3://{bucket}/", "mode": "overwrite", "partition_overwrite": "dynamic"}, UsageError,
     "root of the bucket: A static overwrite"),
])
def test_bad_input_fails_before_any_upload(spark, store, kwargs, error, message) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    kwargs = dict(kwargs)
    df = events(spark, ["d1"])
    if kwargs.pop("tags", False):
        from pyspark.sql import functions as F

        df = df.withColumn("tags", F.array(F.lit("a")))
    if kwargs.pop("dup", False):
        df = df.select("id", "day", df["v"].alias("V"), "v")
    uri = kwargs.pop("uri", f"s3://{bucket}/t").replace("{bucket}", bucket)

    def must_not_run(task_id: int, attempt: int, batches: int) -> None:
        raise AssertionError("bad input must be refused before any task runs")

    with pytest.raises(error, match=message):
        write(df, uri, s3=store.options, _task_hook=must_not_run, **kwargs)
    assert all_keys(store.client, bucket) == set(), "nothing at all may be written"
    assert pending_uploads(store.client, bucket) == []


def test_not_a_dataframe_is_a_usage_error(store) -> None:  # noqa: ANN001
    with pytest.raises(UsageError, match="takes a PySpark DataFrame"):
        write([1, 2, 3], "s3://bucket/t", s3=store.options)
