"""Every format, written by Spark through mpcommit and read back over S3 with pyarrow: identical rows.

Runs on each backend (moto in-process, LocalStack as a separate server).
"""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.dataset as ds
import pyarrow.json as pjson
import pyarrow.parquet as pq
import pytest

from mpcommit.spark import write
from tests.support.spark_tables import SPARK_MARKS, assert_clean, data_keys, read_table, sorted_rows, to_arrow
from tests.support.checks import read_object
from tests.support.spark_s3a import session_settings

pytestmark = SPARK_MARKS

ROWS = 3000
KEYS = ["north", "south", "east/west", None]


def make_rows(n: int = ROWS) -> list[tuple]:
    utc = dt.timezone.utc
    rows = []
    for i in range(n):
        rows.append((
            i,
            KEYS[i % len(KEYS)],
            None if i % 17 == 0 else f"name {i} ü, \"q\"" + ("\nline" if i % 50 == 0 else ""),
            None if i % 13 == 0 else decimal.Decimal(i * 7 % 100000) / 100,
            dt.datetime(2024, 6, 15, tzinfo=utc) + dt.timedelta(seconds=i * 37, microseconds=i % 1000),
            dt.date(2024, 1, 1) + dt.timedelta(days=i % 200),
            None if i % 11 == 0 else i % 2 == 0,
            i / 7.0,
            [f"t{j}" for j in range(i % 4)],
            {"a": i % 5, "b": None if i % 3 else f"x{i}"},
            {f"k{i % 3}": i},
            bytes([i % 256, (i * 3) % 256]),
        ))
    return rows


SCHEMA = (
    "id long, k string, name string, amount decimal(10,2), ts timestamp, day date, ok boolean, score double, "
    "tags array<string>, attrs struct<a:int,b:string>, m map<string,int>, raw binary"
)
FLAT = ["id", "k", "name", "amount", "ts", "day", "ok", "score"]


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    return spark.createDataFrame(make_rows(), SCHEMA).repartition(3).cache()


def expected(frame: Any, columns: list[str]) -> list[dict]:
    """What Spark itself hands Python as Arrow (the same conversion the write runs on)."""
    return sorted_rows(to_arrow(frame.select(columns)), columns=columns)


def with_string_key(table: pa.Table) -> pa.Table:
    return table.set_column(table.schema.get_field_index("k"), "k", table.column("k").cast(pa.string()))


KEY_PARTITION = pa.schema([("k", pa.string())])


@pytest.mark.parametrize("compression,ext", [(None, "snappy.parquet"), ("zstd", "zstd.parquet"), ("none", "parquet")])
def test_parquet_round_trip(frame, backend, bucket, pyarrow_fs, compression, ext) -> None:  # noqa: ANN001
    columns = FLAT + ["tags", "attrs", "m", "raw"]
    options = {"compression": compression} if compression else None
    report = write(frame, f"s3://{bucket}/t", mode="overwrite", partition_by=["k"], options=options, s3=backend.options)
    keys = data_keys(backend.client, bucket, "t")
    assert keys and all(k.endswith(f".{ext}") and f"-{report.job_id}.c" in k for k in keys)
    assert report.files == len(keys) and report.rows == ROWS
    assert sorted(report.partitions) == ["k=__HIVE_DEFAULT_PARTITION__", "k=east%2Fwest", "k=north", "k=south"]
    # Timestamps as Spark writes them by default (spark.sql.parquet.outputTimestampType=INT96): UTC instants
    # without a zone in the file.
    footer = pq.read_metadata(pa.BufferReader(read_object(backend.client, bucket, sorted(keys)[0])))
    assert footer.schema.column(footer.schema.names.index("ts")).physical_type == "INT96"
    table = read_table(pyarrow_fs, bucket, "t", partitions=KEY_PARTITION)
    table = table.set_column(table.schema.get_field_index("ts"), "ts", table.column("ts").cast(pa.timestamp("us", "UTC")))
    assert sorted_rows(with_string_key(table), columns=columns) == expected(frame, columns)
    assert_clean(backend.client, bucket, "t")


@pytest.mark.parametrize("setting,physical,unit", [("TIMESTAMP_MICROS", "INT64", "us"), ("TIMESTAMP_MILLIS", "INT64", "ms")])
def test_parquet_timestamps_follow_the_sessions_output_timestamp_type(spark, moto_backend, setting, physical,
                                                                       unit) -> None:  # noqa: ANN001
    """spark.sql.parquet.outputTimestampType decides how TIMESTAMP columns are stored, as in Spark's writer;
    TIMESTAMP_NTZ stays INT64 microseconds, and MILLIS cuts off the sub-millisecond digits, as Spark does."""
    bucket = moto_backend.new_bucket()
    df = spark.createDataFrame([(1, dt.datetime(2024, 3, 1, 12, 30, 1, 123456))], "id long, ts timestamp")
    with session_settings(spark, {"spark.sql.parquet.outputTimestampType": setting}):
        write(df, f"s3://{bucket}/t", s3=moto_backend.options)
    (key,) = data_keys(moto_backend.client, bucket, "t")
    data = read_object(moto_backend.client, bucket, key)
    column = pq.read_metadata(pa.BufferReader(data)).schema.column(1)
    logical = str(column.logical_type)
    assert column.physical_type == physical and "isAdjustedToUTC=true" in logical
    assert f"timeUnit={'microseconds' if unit == 'us' else 'milliseconds'}" in logical
    want = dt.datetime(2024, 3, 1, 12, 30, 1, 123456 if unit == "us" else 123000, tzinfo=dt.timezone.utc)
    assert pq.read_table(pa.BufferReader(data)).column("ts").to_pylist()[0] == want


@pytest.mark.parametrize("settings", [
    {},  # INT96, the session's zone
    {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS", "spark.sql.session.timeZone": "Europe/Paris"},
], ids=["int96", "micros-paris"])
def test_other_readers_type_an_mpcommit_parquet_file_as_sparks_own(spark, frame, moto_backend, tmp_path,
                                                                   settings) -> None:  # noqa: ANN001
    """pyarrow (and polars, which reads the same footer) type every column of mpcommit's file as they type Spark's
    own writer's file of the same DataFrame written in the same session, so the two tables concat without a cast.
    Issue 40: the Arrow schema in mpcommit's footer made polars read an INT96 ``ts`` as ``Datetime(us, 'Etc/UTC')``
    (Spark's: ``Datetime(ns)``) and pyarrow an INT64 one in the session's zone (Spark's: UTC)."""
    bucket = moto_backend.new_bucket()
    one = frame.coalesce(1)
    with session_settings(spark, settings):
        write(one, f"s3://{bucket}/t", s3=moto_backend.options)
        one.write.parquet(str(tmp_path / "spark"))
    (key,) = data_keys(moto_backend.client, bucket, "t")
    data = read_object(moto_backend.client, bucket, key)
    ours = pq.read_table(pa.BufferReader(data))
    (theirs_path,) = (tmp_path / "spark").glob("part-*.parquet")
    theirs = pq.read_table(theirs_path)
    assert ours.schema.remove_metadata() == theirs.schema.remove_metadata()
    assert pa.concat_tables([ours, theirs.replace_schema_metadata(None)]).num_rows == 2 * ROWS
    # polars types columns from ARROW:schema when the footer has one; Spark's writer writes none.
    assert b"ARROW:schema" not in (pq.read_metadata(pa.BufferReader(data)).metadata or {})


def test_csv_round_trip_with_header_and_gzip(frame, backend, bucket, pyarrow_fs) -> None:  # noqa: ANN001
    report = write(frame.select(FLAT), f"s3://{bucket}/c", format="csv", mode="overwrite", partition_by=["k"],
                   options={"header": "true", "compression": "gzip", "sep": ";",
                            # Spark's default keeps milliseconds; these timestamps have microseconds.
                            "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}, s3=backend.options)
    keys = sorted(data_keys(backend.client, bucket, "c"))
    assert keys and all(k.endswith(".csv.gz") for k in keys)
    first = gzip.decompress(read_object(backend.client, bucket, keys[0])).decode()
    assert first.startswith("id;name;amount;ts;day;ok;score\n"), "header, separator, no k column"
    data_schema = pa.schema([f for f in to_arrow(frame.select(FLAT)).schema if f.name != "k"])
    # Spark's dialect: a quote inside a quoted field is escaped with a backslash, not doubled.
    fmt = ds.CsvFileFormat(parse_options=pcsv.ParseOptions(delimiter=";", newlines_in_values=True, escape_char="\\",
                                                           double_quote=False),
                           convert_options=pcsv.ConvertOptions(column_types=data_schema, strings_can_be_null=True,
                                                               quoted_strings_can_be_null=False))
    table = read_table(pyarrow_fs, bucket, "c", fmt=fmt, partitions=KEY_PARTITION,
                       schema=pa.unify_schemas([data_schema, KEY_PARTITION]))
    assert report.rows == ROWS
    assert sorted_rows(table, columns=FLAT) == expected(frame, FLAT)
    assert_clean(backend.client, bucket, "c")


def test_json_lines_round_trip(frame, backend, bucket, pyarrow_fs) -> None:  # noqa: ANN001
    # pyarrow's JSON reader parses neither decimals nor dates: those two are compared as Spark's JSON text.
    columns = ["id", "k", "name", "ts", "ok", "score", "tags", "attrs"]
    report = write(frame.select(columns), f"s3://{bucket}/j", format="json", mode="overwrite", partition_by="k",
                   s3=backend.options)
    keys = data_keys(backend.client, bucket, "j")
    assert keys and all(k.endswith(".json") for k in keys)
    data_schema = pa.schema([f for f in to_arrow(frame.select(columns)).schema if f.name != "k"])
    fmt = ds.JsonFileFormat(parse_options=pjson.ParseOptions(explicit_schema=data_schema, newlines_in_values=False))
    table = read_table(pyarrow_fs, bucket, "j", fmt=fmt, partitions=KEY_PARTITION,
                       schema=pa.unify_schemas([data_schema, KEY_PARTITION]))
    assert report.rows == ROWS
    got = sorted_rows(table, columns=columns)
    want = expected(frame, columns)
    # ignoreNullFields: a struct's null field is left out and reads back as null, as in Spark.
    assert got == want
    assert_clean(backend.client, bucket, "j")


def test_text_round_trip(frame, backend, bucket, pyarrow_fs) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    lines = frame.select(F.concat_ws("|", "id", "name").alias("value"), "k")
    report = write(lines, f"s3://{bucket}/x", format="text", mode="overwrite", partition_by=["k"],
                   options={"compression": "gzip"}, s3=backend.options)
    got: dict[str, list[str]] = {}
    for key in data_keys(backend.client, bucket, "x"):
        assert key.endswith(".txt.gz")
        part = key.split("/")[1]
        got.setdefault(part, []).extend(gzip.decompress(read_object(backend.client, bucket, key)).decode().split("\n")[:-1])
    want: dict[str, list[str]] = {}
    for row in lines.collect():
        part = "k=" + {None: "__HIVE_DEFAULT_PARTITION__", "east/west": "east%2Fwest"}.get(row["k"], row["k"] or "")
        want.setdefault(part, []).append(row["value"])
    # A value with a line break becomes two lines, as with Spark's text writer.
    assert {p: sorted(v) for p, v in got.items()} == {p: sorted("\n".join(v).split("\n")) for p, v in want.items()}
    assert report.rows == ROWS
    assert_clean(backend.client, bucket, "x")
