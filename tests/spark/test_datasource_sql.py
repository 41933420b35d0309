"""The SQL user's first tries through the ``mpcommit`` data source (issue 38, item 3), in real Spark on moto: each
works, or is refused by name before anything is written, and the README's table of what Spark refuses says what to
write instead. Where Spark itself refuses (its analyzer, before mpcommit is asked), its words are pinned here, so that
a Spark that starts accepting the statement is noticed; where mpcommit can do better, it does.

The catalog route: a table Spark reads natively (in Glue here: a data source cannot reach the session's catalog)
written through ``option("table", ...)``, its location, format and partition columns taken from the catalog."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pyarrow as pa
import pytest

from mpcommit.spark import register
from tests.support.checks import all_keys, pending_uploads
from tests.support.glue import create_table, partitions, raw_glue_client
from tests.support.spark_s3a import session_settings
from tests.support.spark_tables import PYSPARK4, SPARK_MARKS, assert_clean, data_keys, read_table, s3_filesystem

pytestmark = [*SPARK_MARKS, PYSPARK4]

DT = pa.schema([("dt", pa.string())])


@pytest.fixture(scope="module")
def source(spark) -> Any:  # noqa: ANN001
    register(spark)
    return spark


def s3(backend: Any) -> dict[str, str]:
    return {"s3.endpointUrl": backend.endpoint_url, "s3.accessKeyId": "test", "s3.secretAccessKey": "test",
            "s3.region": "us-east-1"}


def sql_options(options: dict[str, str]) -> str:
    return ", ".join(f"`{k}` '{v}'" for k, v in options.items())


def rows(backend: Any, bucket: str, prefix: str) -> list[tuple[int, str]]:
    table = read_table(s3_filesystem(backend.endpoint_url), bucket, prefix, partitions=DT)
    return sorted(zip(table.column("id").to_pylist(), table.column("dt").to_pylist()))


def first_line(exc: BaseException) -> str:
    return next(line.strip() for line in str(exc).splitlines() if line.strip())


def view(spark: Any, name: str, backend: Any, bucket: str, **options: str) -> None:
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {name} (id BIGINT, name STRING, dt STRING) USING mpcommit OPTIONS "
              f"(path 's3://{bucket}/events', format 'parquet', partitionBy 'dt', "
              f"{sql_options({**s3(backend), **options})})")


def test_insert_overwrite_with_a_partition_clause_is_sparks_refusal_and_the_column_form_works(
        source, moto_backend) -> None:  # noqa: ANN001
    """``INSERT OVERWRITE events PARTITION (dt='1') SELECT ...``: Spark sees no partition columns in a Python data
    source's table and refuses in its analyzer. What works: the partition's value as a column, through a view whose
    overwrite is dynamic -- only the partitions written are replaced."""
    be, bucket = moto_backend, moto_backend.new_bucket()
    view(source, "events", be, bucket)
    source.sql("INSERT INTO events SELECT id, 'n', IF(id < 3, '1', '2') FROM range(6)")
    before = all_keys(be.client, bucket)
    with pytest.raises(Exception, match=r"\[NON_PARTITION_COLUMN\] PARTITION clause cannot contain the "
                                        r"non-partition column: `dt`"):
        source.sql("INSERT OVERWRITE events PARTITION (dt='1') SELECT id, 'n' FROM range(100, 102)")
    assert all_keys(be.client, bucket) == before and pending_uploads(be.client, bucket) == []
    # Instead: the value as a column, into a view whose overwrite replaces only the partitions written.
    view(source, "events_by_day", be, bucket, partitionOverwriteMode="dynamic")
    source.sql("INSERT OVERWRITE events_by_day SELECT id, 'n', '1' AS dt FROM range(100, 102)")
    assert rows(be, bucket, "events") == [(3, "2"), (4, "2"), (5, "2"), (100, "1"), (101, "1")]
    assert_clean(be.client, bucket, "events")


def test_a_dynamic_session_refuses_insert_overwrite_on_a_view_and_the_views_option_works(
        source, moto_backend) -> None:  # noqa: ANN001
    """``SET spark.sql.sources.partitionOverwriteMode=dynamic`` then ``INSERT OVERWRITE`` on a view: Spark plans a
    dynamic overwrite, which it offers no Python data source, and refuses before mpcommit is asked (its message does
    not mention the view's option). What works: the session's setting left static and the view's own
    ``partitionOverwriteMode 'dynamic'``. ``df.write`` in that session reaches mpcommit, which names the option."""
    be, bucket = moto_backend, moto_backend.new_bucket()
    view(source, "events", be, bucket)
    source.sql("INSERT INTO events SELECT id, 'n', IF(id < 3, '1', '2') FROM range(6)")
    before = all_keys(be.client, bucket)
    with session_settings(source, {"spark.sql.sources.partitionOverwriteMode": "dynamic"}):
        with pytest.raises(Exception, match=r"UNSUPPORTED_FEATURE\.TABLE_OPERATION.*does not support dynamic "
                                            r"overwrite"):
            source.sql("INSERT OVERWRITE events SELECT id, 'n', '1' FROM range(100, 102)")
        assert all_keys(be.client, bucket) == before
        # The same session's df.write reaches mpcommit, whose task refuses, naming the option to write instead.
        df = source.createDataFrame([(100, "n", "1")], "id long, name string, dt string")
        with pytest.raises(Exception) as caught:
            df.write.format("mpcommit").mode("overwrite").options(**s3(be), partitionBy="dt") \
                .save(f"s3://{bucket}/events")
        text = str(caught.value)
        assert "the session sets spark.sql.sources.partitionOverwriteMode=dynamic" in text, text[-2000:]
        assert ".option('partitionOverwriteMode', 'dynamic')" in text, text[-2000:]
        assert all_keys(be.client, bucket) == before and pending_uploads(be.client, bucket) == []
    view(source, "events_by_day", be, bucket, partitionOverwriteMode="dynamic")
    source.sql("INSERT OVERWRITE events_by_day SELECT id, 'n', '1' FROM range(100, 102)")
    assert rows(be, bucket, "events") == [(3, "2"), (4, "2"), (5, "2"), (100, "1"), (101, "1")]
    assert_clean(be.client, bucket, "events")


def test_a_table_made_by_save_as_table_is_named_when_read(source, moto_backend) -> None:  # noqa: ANN001
    """``df.write.format("mpcommit").option("path", ...).saveAsTable("t")``: Spark hands the source the same options
    as ``save()`` (nothing tells mpcommit that a table is being made), commits the data through it, and records ``t``
    with no location and no options. A query of ``t`` is refused, saying what happened and what to do."""
    be, bucket = moto_backend, moto_backend.new_bucket()
    name = f"sat_{uuid.uuid4().hex[:8]}"
    df = source.createDataFrame([(1, "a", "d1")], "id long, name string, dt string")
    try:
        df.write.format("mpcommit").mode("append").options(**s3(be), partitionBy="dt") \
            .option("path", f"s3://{bucket}/events").saveAsTable(name)
        assert rows(be, bucket, "events") == [(1, "d1")], "the data is where the path said"
        with pytest.raises(Exception) as caught:
            source.sql(f"SELECT * FROM {name}").collect()
        first = first_line(caught.value)
        assert "mpcommit.errors.UsageError: this table has no options" in first, first
        assert "saveAsTable" in first and "USING parquet PARTITIONED BY (...) LOCATION" in first, first
    finally:
        source.sql(f"DROP TABLE IF EXISTS {name}")


# ---------------------------------------------------------------- the catalog route: a table Spark reads natively
@pytest.fixture
def glue_table(moto_backend) -> Any:  # noqa: ANN001
    """A Parquet table partitioned by dt in moto's Glue, located at s3://BUCKET/events (as Athena, or Spark with
    Glue as its metastore, would make it)."""
    client = raw_glue_client(moto_backend.endpoint_url)
    database = f"db_{uuid.uuid4().hex[:12]}"
    client.create_database(DatabaseInput={"Name": database})
    bucket = moto_backend.new_bucket()
    create_table(client, database, "events", f"s3://{bucket}/events")
    yield client, database, bucket
    client.delete_database(Name=database)


def glue_options(backend: Any, database: str) -> dict[str, str]:
    return {**s3(backend), "table": f"{database}.events", "catalog": "glue", "glue.endpointUrl": backend.endpoint_url}


def test_option_table_writes_where_the_catalog_says_and_registers_the_partitions(source, moto_backend,
                                                                                  glue_table) -> None:  # noqa: ANN001
    client, database, bucket = glue_table
    be = moto_backend
    df = source.createDataFrame([(i, f"n{i}", f"d{i % 2}") for i in range(6)], "id long, name string, dt string")
    # No path, no format, no partitionBy: the table's location, Parquet and dt.
    df.write.format("mpcommit").mode("append").options(**glue_options(be, database)).save()
    assert rows(be, bucket, "events") == [(i, f"d{i % 2}") for i in range(6)]
    assert all(k.endswith(".snappy.parquet") and k.split("/")[1] in ("dt=d0", "dt=d1")
               for k in data_keys(be.client, bucket, "events"))
    assert set(partitions(client, database, "events")) == {"d0", "d1"}
    # SQL through a view that names the table.
    source.sql(f"CREATE OR REPLACE TEMPORARY VIEW events_t (id BIGINT, name STRING, dt STRING) USING mpcommit "
               f"OPTIONS ({sql_options(glue_options(be, database))})")
    source.sql("INSERT INTO events_t SELECT 10, 'n', 'd2'")
    assert (10, "d2") in rows(be, bucket, "events")
    assert set(partitions(client, database, "events")) == {"d0", "d1", "d2"}
    assert_clean(be.client, bucket, "events")


@pytest.mark.parametrize("options,match", [
    ({"partitionBy": "name"}, "PartitionColumnsMismatchError: the write is partitioned by \\(name\\), but table"),
    ({"format": "json"}, "UsageError: the write is json, but table .* is stored as parquet"),
    ({"path": "s3://elsewhere/t"}, "TableLocationMismatchError: the write goes to s3://elsewhere/t, but table"),
])
def test_option_table_refuses_what_the_table_contradicts_before_writing(source, moto_backend, glue_table, options,
                                                                        match) -> None:  # noqa: ANN001
    _client, database, bucket = glue_table
    df = source.createDataFrame([(1, "a", "d1")], "id long, name string, dt string")
    with pytest.raises(Exception) as caught:
        df.write.format("mpcommit").mode("append").options(**glue_options(moto_backend, database), **options).save()
    assert re.search(match, first_line(caught.value)), first_line(caught.value)
    assert all_keys(moto_backend.client, bucket) == set()
