"""Which PySpark and Python mpcommit runs on (mpcommit/spark/compat.py): an unsupported one is refused by name at
import or at the first write, never by an error that blames something else; the data source's doors are refused by
name on PySpark 3.5, which has no Python data source API; and PySpark's own conversion differences are bridged.
These run under whichever PySpark is installed: ``make test-matrix`` runs them on each combination of the README's
support matrix."""

from __future__ import annotations

import datetime
import glob
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mpcommit.errors import UnsupportedVersionError, UsageError
from mpcommit.spark import compat, write, writer
from tests.support.checks import all_keys, pending_uploads

REPO = Path(__file__).resolve().parents[2]
ON_3_5 = pytest.importorskip("pyspark") and compat.pyspark_version() < compat.DATA_SOURCE_MIN


@pytest.mark.parametrize("version", [(3, 3), (3, 4), (2, 4), (5, 0)])
def test_an_unsupported_pyspark_is_refused_by_name(version: tuple[int, int]) -> None:
    with pytest.raises(UnsupportedVersionError, match=rf"^PySpark {version[0]}\.{version[1]} is not supported: "
                                                      r"mpcommit runs on PySpark 3\.5 and 4\.x"):
        compat.check_pyspark(version)


@pytest.mark.parametrize("version", [(3, 5), (4, 0), (4, 1), (4, 2), (4, 3), (4, 9)])
def test_the_supported_pysparks_pass(version: tuple[int, int]) -> None:
    compat.check_pyspark(version)


def test_the_data_source_on_pyspark_3_5_is_refused_saying_what_works_there() -> None:
    with pytest.raises(UnsupportedVersionError) as caught:
        compat.check_data_source((3, 5))
    text = str(caught.value)
    assert text.startswith("the mpcommit data source (df.write.format('mpcommit'), SQL ... USING mpcommit, "
                           "df.writeStream.format('mpcommit')) needs PySpark 4.0 or later: PySpark 3.5 has no Python "
                           "data source API"), text
    assert "mpcommit.spark.writer(df)" in text and "Nothing was written" in text
    compat.check_data_source((4, 0))
    with pytest.raises(UnsupportedVersionError, match=r"^PySpark 3\.4 is not supported"):
        compat.check_data_source((3, 4))  # the older refusal first: nothing of mpcommit's runs there


def test_the_stream_sink_without_an_arrow_stream_writer_is_refused_saying_what_works(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "pyspark_version", lambda: (4, 0))
    monkeypatch.setattr(compat, "stream_writer_base", lambda: None)
    with pytest.raises(UnsupportedVersionError) as caught:
        compat.check_stream_sink()
    text = str(caught.value)
    assert text.startswith("the mpcommit streaming sink (df.writeStream.format('mpcommit')) needs a PySpark that hands "
                           "a Python stream writer Arrow batches (DataSourceStreamArrowWriter, PySpark 4.1 and later): "
                           "PySpark 4.0 hands it rows one by one"), text
    assert "foreachBatch" in text and "Nothing was written" in text
    monkeypatch.setattr(compat, "stream_writer_base", lambda: object)
    compat.check_stream_sink()


class _Refused(Exception):
    def __init__(self, condition: str):
        super().__init__(f"[{condition}] ...")
        self.condition = condition

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return self.condition


def test_registering_over_the_source_spark_found_itself_is_no_error_and_anything_else_is() -> None:
    """PySpark 4.0 refuses to register a data source under a name it found by itself (4.1+ replace it)."""
    calls = []

    class Registry:
        def __init__(self, condition: str | None):
            self.condition = condition

        def register(self, source: type) -> None:
            calls.append(source)
            if self.condition is not None:
                raise _Refused(self.condition)

    class Session:
        def __init__(self, condition: str | None):
            self.dataSource = Registry(condition)  # noqa: N815 - PySpark's name

    compat.register_data_source(Session(None), int)
    compat.register_data_source(Session("DATA_SOURCE_ALREADY_EXISTS"), int)
    with pytest.raises(_Refused, match="DATA_SOURCE_TYPE_MISMATCH"):
        compat.register_data_source(Session("DATA_SOURCE_TYPE_MISMATCH"), int)
    assert calls == [int, int, int]


@pytest.mark.parametrize("text,expected", [("3.5.9", (3, 5)), ("4.1.0.dev1", (4, 1)), ("4.3.0", (4, 3))])
def test_pysparks_version_strings_are_read(text: str, expected: tuple[int, int]) -> None:
    assert compat.parse_version(text) == expected


def test_an_unreadable_version_string_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedVersionError, match="PySpark reports version 'dev'"):
        compat.parse_version("dev")


class _FrameOf:
    """Has what the doors look for on a DataFrame, and nothing more: a door that went past the version check
    would reach for something else (its schema, its session) and fail on that instead."""

    mapInArrow = schema = sparkSession = None  # noqa: N815 - present, as on a DataFrame

    def __getattribute__(self, name: str) -> Any:
        if name in ("mapInArrow", "schema", "sparkSession", "__class__"):
            return object.__getattribute__(self, name)
        raise AssertionError(f"{name} reached: the version was not checked first")


def test_a_write_on_pyspark_3_4_is_refused_before_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", "3.4.1")
    for door in (lambda: write(_FrameOf(), "s3://bucket/t"), lambda: writer(_FrameOf()).parquet("s3://bucket/t")):
        with pytest.raises(UnsupportedVersionError, match=r"^PySpark 3\.4 is not supported: .*PySpark 3\.4\.1 from "):
            door()


def _python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine (pyenv's versions, or PATH), None when there is none. (A pyenv
    shim on PATH may name a version it cannot run: each candidate is asked for its version.)"""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    candidates += [found for found in [shutil.which(f"python{version}")] if found]
    for candidate in candidates:
        asked = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=60)
        if asked.returncode == 0 and asked.stdout.strip() == version:
            return candidate
    return None


def test_python_3_9_is_refused_at_import_by_name() -> None:
    python = _python("3.9")
    if python is None:
        pytest.skip("no Python 3.9 on this machine (PATH, ~/.pyenv/versions) to import mpcommit with")
    done = subprocess.run([python, "-c", "import mpcommit"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(
        "ImportError: Python 3.9 is not supported: mpcommit needs Python 3.10 or later"), done.stderr[-2000:]


def test_the_package_declares_what_it_runs_on() -> None:
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    requires = SpecifierSet(metadata.metadata("mpcommit")["Requires-Python"])
    assert "3.10" in requires and "3.9" not in requires, requires
    spark = [r for r in metadata.requires("mpcommit") or [] if r.startswith("pyspark") and "extra == \"spark\"" in r]
    assert spark and ">=3.5" in spark[0] and "<5" in spark[0], spark


# ---------------------------------------------------------------- PySpark's conversion, as its JVM hands rows over
def test_the_arrow_schema_is_the_one_spark_hands_python() -> None:
    """PySpark 3.5's to_arrow_schema takes no time zone and no large types (issue 38: the call of 4.x's signature
    failed there and blamed the DataFrame's columns); the shim gives what each version's JVM hands over."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    schema = StructType([
        StructField("id", LongType()), StructField("s", StringType()), StructField("b", BinaryType()),
        StructField("ts", TimestampType()), StructField("ntz", TimestampNTZType()),
        StructField("a", ArrayType(TimestampType())), StructField("m", MapType(StringType(), TimestampType())),
        StructField("st", StructType([StructField("inner", StringType())])),
    ])
    got = compat.to_arrow_schema(schema, time_zone="America/New_York", large_var_types=False)
    zoned = pa.timestamp("us", tz="America/New_York")
    assert got.field("id").type == pa.int64() and got.field("s").type == pa.string()
    assert got.field("ts").type == zoned and got.field("ntz").type == pa.timestamp("us")
    assert got.field("a").type.value_type == zoned and got.field("m").type.item_type == zoned
    large = compat.to_arrow_schema(schema, time_zone=None, large_var_types=True)
    assert large.field("s").type == pa.large_string() and large.field("b").type == pa.large_binary()
    assert large.field("st").type.field("inner").type == pa.large_string()
    assert large.field("ts").type == pa.timestamp("us", tz="UTC"), "no session zone: UTC, as Spark's default"


def test_the_shim_for_pyspark_3_5s_signature_runs_under_any_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make test`` runs one PySpark: the 3.5 branch of the shim is run here under whichever is installed, with a
    conversion of 3.5's signature and output (UTC timestamps, small types: PySpark 3.5.9's, checked against the
    real 3.5 by the matrix's run of the test above)."""
    import pyspark.sql.pandas.types as types
    from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType, TimestampType

    real = types.to_arrow_schema
    if "timezone" not in inspect.signature(real).parameters:
        pytest.skip("this is PySpark 3.5: test_the_arrow_schema_is_the_one_spark_hands_python runs its branch")

    def of_pyspark_3_5(schema: Any) -> pa.Schema:
        return real(schema, timezone="UTC", prefers_large_types=False)

    monkeypatch.setattr(types, "to_arrow_schema", of_pyspark_3_5)
    schema = StructType([StructField("s", StringType()), StructField("b", BinaryType()),
                         StructField("m", MapType(StringType(), TimestampType())), StructField("ts", TimestampType())])
    assert compat.to_arrow_schema(schema, time_zone="Asia/Tokyo", large_var_types=True) == \
        real(schema, timezone="Asia/Tokyo", prefers_large_types=True)
    assert compat.to_arrow_schema(schema, time_zone=None, large_var_types=False) == \
        real(schema, timezone="UTC", prefers_large_types=False)


def test_a_type_spark_cannot_hand_over_is_blamed_on_the_data_and_a_bug_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql.types import LongType, StructField, StructType, YearMonthIntervalType

    from mpcommit.spark.plan import arrow_schema_of
    from mpcommit.spark.session import SessionSettings

    # A type no PySpark of the matrix hands to Python as Arrow (3.5 to 4.3).
    interval = StructType([StructField("id", LongType()), StructField("age", YearMonthIntervalType())])
    with pytest.raises(UsageError, match=r"the data has a column type Spark cannot hand to Python as Arrow "
                                         r"\(\[UNSUPPORTED_DATA_TYPE_FOR_ARROW_CONVERSION\] YearMonthIntervalType"):
        arrow_schema_of(interval, SessionSettings())
    schema = StructType([StructField("id", LongType())])

    def broken(*args: Any, **kwargs: Any) -> pa.Schema:
        raise TypeError("to_arrow_schema() got an unexpected keyword argument 'timezone'")

    monkeypatch.setattr(compat, "to_arrow_schema", broken)
    with pytest.raises(TypeError, match="unexpected keyword argument") as caught:
        arrow_schema_of(schema, SessionSettings())
    assert not isinstance(caught.value, UsageError), "a signature mismatch is not the user's columns"


# ---------------------------------------------------------------- the doors, in a real session
@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_zoned_timestamps_round_trip_in_the_sessions_zone(spark, moto_backend) -> None:  # noqa: ANN001
    """What the shim's schema says is what the tasks get: a write in a session whose zone is not UTC keeps the
    instants (checked with pyarrow, in UTC)."""
    from tests.support.spark_s3a import session_settings
    from tests.support.spark_tables import read_table, s3_filesystem

    be, bucket = moto_backend, moto_backend.new_bucket()
    instant = datetime.datetime(2024, 3, 1, 12, 30, 1, 123456, tzinfo=datetime.timezone.utc)
    with session_settings(spark, {"spark.sql.session.timeZone": "America/New_York",
                                  "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}):
        df = spark.createDataFrame([(1, instant)], "id long, ts timestamp")
        write(df, f"s3://{bucket}/t", mode="overwrite", s3=be.options)
    table = read_table(s3_filesystem(be.endpoint_url), bucket, "t")
    assert table.column("ts").cast(pa.timestamp("us", tz="UTC")).to_pylist() == [instant]


@pytest.mark.skipif(not ON_3_5, reason="PySpark 3.5's refusals of the data source's doors (this is PySpark 4)")
@pytest.mark.spark
def test_on_pyspark_3_5_the_data_sources_doors_are_refused_and_write_nothing(spark, moto_backend) -> None:  # noqa: ANN001
    from mpcommit.spark import register

    with pytest.raises(UnsupportedVersionError, match=r"needs PySpark 4\.0 or later: PySpark 3\.5 has no Python data "):
        register(spark)
    done = subprocess.run([sys.executable, "-c", "import pyspark_mpcommit"], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert "UnsupportedVersionError: the mpcommit data source" in done.stderr, done.stderr[-2000:]
    # Spark's own writer never reaches mpcommit on 3.5: its JVM knows no "mpcommit" and says so before writing.
    be, bucket = moto_backend, moto_backend.new_bucket()
    df = spark.createDataFrame([(1, "a")], "id long, s string")
    with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND.*mpcommit"):
        df.write.format("mpcommit").mode("append").save(f"s3://{bucket}/t")
    assert all_keys(be.client, bucket) == set() and pending_uploads(be.client, bucket) == []


NO_STREAM_WRITER = not ON_3_5 and compat.stream_writer_base() is None


@pytest.mark.skipif(not NO_STREAM_WRITER, reason="the refusal of the sink where PySpark has no Arrow stream writer "
                                                 "(PySpark 4.0; this one has it, or has no data source at all)")
@pytest.mark.spark
def test_where_pyspark_has_no_arrow_stream_writer_the_sink_is_refused_and_writes_nothing(spark, moto_backend,
                                                                                        tmp_path) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    stream = spark.readStream.format("rate").option("rowsPerSecond", 5).load().selectExpr("value AS id")
    query = (stream.writeStream.format("mpcommit").option("s3.endpointUrl", be.endpoint_url)
             .option("s3.accessKeyId", "test").option("s3.secretAccessKey", "test").option("s3.region", "us-east-1")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start(f"s3://{bucket}/t"))
    try:
        with pytest.raises(Exception, match=r"UnsupportedVersionError: the mpcommit streaming sink .* needs a PySpark "
                                            r"that hands a Python stream writer Arrow batches"):
            query.awaitTermination(300)
    finally:
        query.stop()
    assert all_keys(be.client, bucket) == set() and pending_uploads(be.client, bucket) == []
