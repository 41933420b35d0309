"""A commit-time merge through a real PySpark job: ``write(df, ..., merge=MergePolicy())``.

Tasks stage their small files; the merges run as a Spark stage; the commit makes only merged files visible.
Read back with pyarrow's own S3 client.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from mpcommit.compaction import MergePolicy
from tests.support.checks import all_keys, pending_uploads, read_object, visible_keys

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

TASKS = 6
PARTS = 3
ROWS = 6000


def frame(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return (spark.range(ROWS, numPartitions=TASKS)
            .withColumn("part", (F.col("id") % PARTS).cast("int"))
            .withColumn("name", F.concat(F.lit("name-"), F.col("id").cast("string"))))


def s3fs(backend: Any) -> Any:
    from urllib.parse import urlsplit

    from pyarrow import fs

    return fs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1", scheme="http",
                           endpoint_override=urlsplit(backend.endpoint_url).netloc)


def assert_clean(backend: Any, bucket: str, prefix: str) -> None:
    assert pending_uploads(backend.client, bucket, prefix) == []
    assert not [k for k in all_keys(backend.client, bucket, prefix) if "/_temporary/" in k]


def data_files(backend: Any, bucket: str, prefix: str) -> dict[str, list[str]]:
    by_partition: dict[str, list[str]] = {}
    for key in visible_keys(backend.client, bucket, prefix):
        by_partition.setdefault(key.rsplit("/", 2)[-2], []).append(key)
    return by_partition


@pytest.mark.ci_on("localstack")
def test_parquet_json_and_csv_merged_before_they_are_visible(spark, backend, bucket) -> None:
    from mpcommit.spark import write

    df = frame(spark)
    partitioning = ds.partitioning(pa.schema([("part", pa.int32())]), flavor="hive")
    for fmt, options in (("parquet", None), ("json", None), ("csv", {"header": "true"})):
        prefix = f"t-{fmt}"
        report = write(df, f"s3://{bucket}/{prefix}", format=fmt, mode="overwrite", partition_by=["part"],
                       merge=MergePolicy(), options=options, s3=backend.options)
        files = data_files(backend, bucket, prefix)
        assert sorted(files) == [f"part={p}" for p in range(PARTS)]
        assert all(len(v) == 1 for v in files.values()), f"{fmt}: one merged file per partition, got {files}"
        assert report.files == PARTS and report.rows == ROWS and "merge" in report.timings
        assert_clean(backend, bucket, prefix)
        if fmt == "csv":
            for (key,) in files.values():
                lines = read_object(backend.client, bucket, key).decode().splitlines()
                assert lines[0].replace('"', "") == "id,name" and lines.count(lines[0]) == 1
                assert len(lines) == ROWS // PARTS + 1
            continue
        fmt_obj = "parquet" if fmt == "parquet" else ds.JsonFileFormat()
        table = ds.dataset(f"{bucket}/{prefix}", filesystem=s3fs(backend), format=fmt_obj,
                           partitioning=partitioning).to_table()
        assert sorted(table.column("id").to_pylist()) == list(range(ROWS))
        assert {(r["id"] % PARTS, r["part"]) for r in table.select(["id", "part"]).to_pylist()} == {
            (p, p) for p in range(PARTS)}


def test_partitions_of_large_files_are_not_merged(spark, backend, bucket) -> None:
    from mpcommit.spark import write

    report = write(frame(spark), f"s3://{bucket}/t", format="json", partition_by=["part"],
                   merge=MergePolicy(small_file_avg=100), s3=backend.options)
    assert report.files == TASKS * PARTS and report.rows == ROWS
    assert sum(len(v) for v in data_files(backend, bucket, "t").values()) == TASKS * PARTS
    assert_clean(backend, bucket, "t")


def test_bad_merge_argument_is_a_usage_error(spark, backend, bucket) -> None:
    from mpcommit.errors import UsageError
    from mpcommit.spark import write

    with pytest.raises(UsageError, match="MergePolicy"):
        write(frame(spark), f"s3://{bucket}/t", format="json", merge=True, s3=backend.options)
    assert all_keys(backend.client, bucket, "t") == set()
