"""An append whose column types differ from the table's files: one existing file is looked at (a Parquet footer,
a CSV header), the column and both types named; a warning by default, an error on request, before anything is
written. The lookup runs on moto without Spark; one real append runs through Spark."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import warnings
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpcommit.formats import make_format
from mpcommit.formats.parquet import ParquetFormat
from mpcommit.protocol.layout import parse_uri
from mpcommit.spark import SchemaMismatchError, SchemaMismatchWarning, write, writer
from mpcommit.spark.table_schema import (
    Difference,
    SchemaMismatch,
    check_existing_files,
    spark_type_name,
    type_differences,
)
from mpcommit.store.s3 import S3Store
from tests.support.spark_tables import data_keys
from tests.support.checks import all_keys, pending_uploads


def parquet_bytes(table: pa.Table, **kwargs: Any) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, **kwargs)
    return out.getvalue()


# ---------------------------------------------------------------- pure
def test_spark_type_names_and_differences() -> None:
    assert [spark_type_name(t) for t in (pa.int64(), pa.decimal128(10, 2), pa.timestamp("ms", "UTC"),
                                         pa.timestamp("us"), pa.large_string(), pa.list_(pa.int32()),
                                         pa.struct([("a", pa.float64())]), pa.map_(pa.string(), pa.int8()))] == [
        "bigint", "decimal(10,2)", "timestamp", "timestamp_ntz", "string", "array<int>", "struct<a:double>",
        "map<string,tinyint>"]
    table = {"id": "bigint", "Amount": "decimal(10,2)", "only_there": "string"}
    write_ = {"id": "bigint", "amount": "double", "only_here": "int"}
    assert type_differences(table, write_) == [Difference("amount", "decimal(10,2)", "double")]


# ---------------------------------------------------------------- the lookup, on moto
@pytest.fixture
def store(moto_backend: Any) -> Any:
    return moto_backend


def check(store: Any, bucket: str, fmt: Any, schema: pa.Schema, *, levels: int = 0,
          policy: SchemaMismatch = SchemaMismatch.WARN) -> list[Difference]:
    s3 = S3Store(store.options)
    found = check_existing_files(s3, parse_uri(f"s3://{bucket}/t"), fmt, schema, partition_levels=levels, policy=policy)
    return found


def test_a_parquet_footer_is_compared_column_by_column_with_int96_read_as_spark_reads_it(store: Any) -> None:
    bucket = store.new_bucket()
    existing = pa.table({"id": pa.array([1], pa.int32()), "ts": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")),
                         "amount": pa.array([1.5])})
    body = parquet_bytes(existing, use_deprecated_int96_timestamps=True)
    store.client.put_object(Bucket=bucket, Key="t/_SUCCESS", Body=b"{}")
    store.client.put_object(Bucket=bucket, Key="t/dt=1/part-00000-x.c000.snappy.parquet", Body=body)
    new = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC")), ("amount", pa.float64())])
    with pytest.warns(SchemaMismatchWarning) as caught:
        found = check(store, bucket, ParquetFormat(), new, levels=1)
    assert found == [Difference("id", "int", "bigint")], "INT96 is a timestamp, as Spark reads it"
    # Only ours: a ResourceWarning of an earlier test's pipe, closed by the GC here, lands in `caught` too.
    (message,) = [str(w.message) for w in caught if issubclass(w.category, SchemaMismatchWarning)]
    assert "column 'id': int in the table, bigint in this write" in message
    assert f"s3://{bucket}/t/dt=1/part-00000-x.c000.snappy.parquet" in message and "schema_mismatch='error'" in message
    with pytest.raises(SchemaMismatchError, match="column 'id': int in the table, bigint in this write.*Nothing was"):
        check(store, bucket, ParquetFormat(), new, levels=1, policy=SchemaMismatch.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check(store, bucket, ParquetFormat(), new, levels=1, policy=SchemaMismatch.IGNORE) == []
        same = pa.schema([("id", pa.int32()), ("ts", pa.timestamp("us", "UTC")), ("amount", pa.float64())])
        assert check(store, bucket, ParquetFormat(), same, levels=1) == []


def test_a_csv_header_is_compared_even_gzipped_and_a_table_without_files_is_no_difference(store: Any) -> None:
    bucket = store.new_bucket()
    fmt = make_format("csv", {"header": "true", "compression": "gzip"})
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert check(store, bucket, fmt, schema) == [], "no table yet"
    store.client.put_object(Bucket=bucket, Key="t/part-00000-x.c000.csv.gz", Body=gzip.compress(b"name,id\nb,1\n"))
    with pytest.warns(SchemaMismatchWarning, match="start with 'name,id', this write's with 'id,name'"):
        assert len(check(store, bucket, fmt, schema)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check(store, bucket, make_format("csv"), schema) == [], "no header written: nothing to compare"


# ---------------------------------------------------------------- through Spark
@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_an_append_with_other_column_types_warns_or_is_refused(spark: Any, store: Any) -> None:
    bucket = store.new_bucket()
    uri = f"s3://{bucket}/t"
    write(spark.createDataFrame([(1, "a", 1.5)], "id long, day string, v double"), uri, partition_by=["day"],
          s3=store.options)
    before = data_keys(store.client, bucket, "t")
    other = spark.createDataFrame([(2, "b", "x")], "id int, day string, v string")
    with pytest.raises(SchemaMismatchError) as refused:
        writer(other, s3=store.options, schema_mismatch="error").mode("append").partitionBy("day").parquet(uri)
    assert "column 'id': bigint in the table, int in this write" in str(refused.value)
    assert "column 'v': double in the table, string in this write" in str(refused.value)
    assert data_keys(store.client, bucket, "t") == before and pending_uploads(store.client, bucket, "t") == []
    assert not [k for k in all_keys(store.client, bucket, "t/_temporary/")], "nothing half-written"
    with pytest.warns(SchemaMismatchWarning, match="column 'id': bigint in the table, int in this write"):
        report = write(other, uri, mode="append", partition_by=["day"], s3=store.options)
    assert report.rows == 1
