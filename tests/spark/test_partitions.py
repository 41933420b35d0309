"""Dynamic partitions through real Spark tasks: Hive escaping, nulls, and more partitions than open writers."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from mpcommit.spark import write
from tests.support.spark_tables import SPARK_MARKS, assert_clean, data_keys, read_table

pytestmark = SPARK_MARKS


def test_partition_values_are_escaped_as_hive_does_and_read_back(spark, backend, bucket, pyarrow_fs) -> None:  # noqa: ANN001
    values = ["a/b", "x=y", "50%", "with space", "ünïcødé 日本", None, "", "plain", "#hash", "c:d", "."]
    rows = [(i, values[i % len(values)]) for i in range(len(values) * 20)]
    df = spark.createDataFrame(rows, "id long, k string").repartition(3)
    report = write(df, f"s3://{bucket}/t", mode="overwrite", partition_by=["k"], s3=backend.options)
    folders = {k.split("/")[1] for k in data_keys(backend.client, bucket, "t")}
    assert folders == {"k=a%2Fb", "k=x%3Dy", "k=50%25", "k=with space", "k=ünïcødé 日本", "k=__HIVE_DEFAULT_PARTITION__",
                       "k=plain", "k=%23hash", "k=c%3Ad", "k=."}
    assert set(report.partitions) == folders
    table = read_table(pyarrow_fs, bucket, "t", partitions=pa.schema([("k", pa.string())]))
    got = {(r["id"], r["k"]) for r in table.to_pylist()}
    # null and "" share the default partition and read back as null, as in Spark.
    assert got == {(i, v if v != "" else None) for i, v in rows}
    assert_clean(backend.client, bucket, "t")


def test_several_typed_partition_columns(spark, moto_backend) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    rows = [(i, dt.date(2024, 6, 14 + i % 2), i % 3, i % 2 == 0) for i in range(60)]
    df = spark.createDataFrame(rows, "id long, day date, hour int, even boolean")
    report = write(df, f"s3://{bucket}/t", mode="overwrite", partition_by=["day", "hour"], format="json",
                   s3=moto_backend.options)
    assert sorted(report.partitions) == [f"day=2024-06-{d}/hour={h}" for d in (14, 15) for h in range(3)]
    assert report.rows == 60


def test_one_task_with_many_more_partitions_than_open_writers(spark, moto_backend) -> None:  # noqa: ANN001
    """60 partitions in one task with 4 open writers: the rest is written sorted, one file per partition."""
    bucket = moto_backend.new_bucket()
    n_days = 60
    rows = [(i, f"2024-01-{1 + i % 30:02d}T{i % n_days // 30}") for i in range(n_days * 50)]  # interleaved
    df = spark.createDataFrame(rows, "id long, day string").coalesce(1)
    report = write(df, f"s3://{bucket}/t", mode="overwrite", partition_by=["day"], max_open_writers=4,
                   s3=moto_backend.options)
    keys = data_keys(moto_backend.client, bucket, "t")
    assert len(report.partitions) == n_days and report.rows == n_days * 50
    per_partition: dict[str, int] = {}
    for key in keys:
        per_partition[key.rsplit("/", 1)[0]] = per_partition.get(key.rsplit("/", 1)[0], 0) + 1
    assert len(per_partition) == n_days and set(per_partition.values()) == {1}, "one file per partition"
    assert all("part-00000-" in k for k in keys), "all from the one task"
    # As Spark names them: the cNNN counter starts again at c000 in each partition directory of a task.
    assert {k.rsplit(".c", 1)[1].split(".")[0] for k in keys} == {"000"}
    from urllib.parse import urlsplit

    from pyarrow import fs as pafs

    fs = pafs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1", scheme="http",
                           endpoint_override=urlsplit(moto_backend.endpoint_url).netloc)
    table = read_table(fs, bucket, "t", partitions=pa.schema([("day", pa.string())]))
    assert sorted((r["id"], r["day"]) for r in table.to_pylist()) == sorted(rows)
    assert_clean(moto_backend.client, bucket, "t")
