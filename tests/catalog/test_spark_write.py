"""A real PySpark write with ``table=``: the Glue catalog on moto ends up with exactly the partitions and the
statistics of the data the write committed (checked against an independent listing of the bucket)."""

from __future__ import annotations

from collections import Counter

import pytest

from mpcommit.catalog import GlueCatalog
from tests.support.glue import create_table, partitions, stats_of
from tests.support.checks import visible_keys

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]


def test_a_pyspark_write_with_table_registers_exactly_its_partitions_and_statistics(
        spark, moto_backend, glue, glue_client, database):
    from mpcommit.spark import write

    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/events"
    create_table(glue_client, database, "events", uri)
    rows = [(i, f"name-{i}", f"2024-01-0{1 + i % 3}") for i in range(60)]
    df = spark.createDataFrame(rows, "id long, name string, dt string").repartition(2)

    report = write(df, uri, format="parquet", mode="overwrite", partition_by=["dt"], s3=moto_backend.options,
                   table=f"{database}.events", catalog=GlueCatalog(moto_backend.options,
                                                                   endpoint_url=moto_backend.endpoint_url))

    found = partitions(glue_client, database, "events")
    assert set(found) == {"2024-01-01", "2024-01-02", "2024-01-03"}
    assert report.catalog is not None and len(report.catalog.created) == 3
    # The statistics are those of the committed objects, as an independent listing sees them.
    objects = moto_backend.client.list_objects_v2(Bucket=bucket, Prefix="events/")["Contents"]
    sizes = {o["Key"]: o["Size"] for o in objects}
    keys = visible_keys(moto_backend.client, bucket, "events")
    per_dt_rows = Counter(dt for _i, _n, dt in rows)
    for dt, partition in found.items():
        mine = [k for k in keys if k.startswith(f"events/dt={dt}/")]
        assert stats_of(partition) == (len(mine), sum(sizes[k] for k in mine), per_dt_rows[dt])
        assert partition["StorageDescriptor"]["Location"] == f"{uri}/dt={dt}/"


def test_a_bad_table_name_is_refused_before_anything_is_written(spark, moto_backend):
    from mpcommit.errors import UsageError
    from mpcommit.spark import write

    bucket = moto_backend.new_bucket()
    df = spark.createDataFrame([(1, "a")], "id long, dt string")
    with pytest.raises(UsageError, match="db.table"):
        write(df, f"s3://{bucket}/t", partition_by=["dt"], s3=moto_backend.options, table="orders", catalog="glue")
    with pytest.raises(UsageError, match="needs table="):
        write(df, f"s3://{bucket}/t", partition_by=["dt"], s3=moto_backend.options, catalog="glue")
    assert moto_backend.client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
