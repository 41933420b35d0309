"""The data source's options read into one write request (no Spark, no server): mpcommit's own names beside the
fluent writer's, refusals by name before anything runs, and the session settings a data source cannot see. (The
stream sink's job ids and record: tests/protocol/test_stream.py.)"""

from __future__ import annotations

import pyarrow as pa
import pytest

from mpcommit.errors import SparkWriterError, UsageError
from mpcommit.modes import PartitionOverwrite, WriteMode
from mpcommit.spark.plan import plan_write
from mpcommit.spark.session import Recorder, SessionSettingError, SessionSettings
from mpcommit.spark.source_options import GlueCatalogSpec, parse

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("dt", pa.string())])


def read(options: dict[str, str], *, overwrite: bool = False, streaming: bool = False):  # noqa: ANN201
    session = Recorder(SessionSettings.unseen())
    source = parse(options, overwrite=overwrite, session=session, streaming=streaming, columns=["id", "name", "dt"])
    return source, plan_write(source.request, SCHEMA, session)


def test_every_setting_of_writer_is_an_option_of_the_same_name() -> None:
    source, planned = read({"path": "s3a://bkt/t", "format": "CSV", "partitionby": "dt", "header": "true",
                            "partitionOverwriteMode": "dynamic", "maxRecordsPerFile": "5",
                            "s3.endpointUrl": "http://127.0.0.1:9", "s3.region": "eu-west-1",
                            "S3.CONNECT_TIMEOUT": "2.5", "s3.conditionalWrites": "true",
                            "writer.initialPartSize": "16MiB", "writer.upload_threads": "2",
                            "merge.targetSize": "100MB", "max_open_writers": "3", "commitThreads": "4",
                            "overwriteBucketRoot": "true", "schemaMismatch": "error",
                            "table": "db.t", "catalog": "glue", "glue.endpointUrl": "http://127.0.0.1:9"},
                           overwrite=True)
    r = source.request
    assert (r.uri, r.format, r.mode, r.partition_by) == ("s3a://bkt/t", "csv", WriteMode.OVERWRITE, ("dt",))
    assert r.partition_overwrite is PartitionOverwrite.DYNAMIC and planned.max_records_per_file == 5
    s = r.settings
    assert (s.s3.endpoint_url, s.s3.region, s.s3.connect_timeout, s.s3.conditional_writes) == (
        "http://127.0.0.1:9", "eu-west-1", 2.5, True)
    assert (s.writer.initial_part_size, s.writer.upload_threads) == (16 * 2**20, 2)
    assert s.merge is not None and s.merge.target_size == 100_000_000
    assert (s.max_open_writers, s.commit_threads, s.overwrite_bucket_root, s.schema_mismatch.value) == (3, 4, True,
                                                                                                        "error")
    assert s.table == "db.t" and s.catalog == GlueCatalogSpec(endpoint_url="http://127.0.0.1:9")
    assert planned.fmt.name == "csv" and planned.columns == ("dt",)


def test_the_commit_orders_lease_and_max_wait_are_options_as_the_clis_flags_are() -> None:
    import math

    from mpcommit.options import OrderSettings

    source, _ = read({"path": "s3://bkt/t", "order.lease": "90s", "ORDER.MAX_WAIT": "30m"})
    order = source.request.settings.order
    assert order == OrderSettings.for_lease(90.0, 1800.0)
    assert (order.lease_seconds, order.max_wait_seconds, order.heartbeat_seconds) == (90.0, 1800.0, 10.0)
    short, _ = read({"path": "s3://bkt/t", "order.lease": "6s", "order.maxWait": "forever"})
    # a lease shorter than the default beats' three: the job beats a third of it, so it is never taken for dead
    assert (short.request.settings.order.heartbeat_seconds, short.request.settings.order.max_wait_seconds) == (
        2.0, math.inf)
    assert read({"path": "s3://bkt/t"})[0].request.settings.order is None  # the defaults: OrderSettings()
    # By default a live earlier job is waited for 30 minutes, then the write fails by name; None waits for ever.
    assert (OrderSettings().max_wait_seconds, OrderSettings.for_lease().max_wait_seconds) == (1800.0, 1800.0)
    assert OrderSettings(max_wait_seconds=None).max_wait_seconds == math.inf
    with pytest.raises(UsageError, match="option 'order.lease': '90' is not a duration: write 90s"):
        read({"path": "s3://bkt/t", "order.lease": "90"})
    with pytest.raises(UsageError, match="'soon' is not a wait: write 90s, 30m, 24h, 7d or forever"):
        read({"path": "s3://bkt/t", "order.maxWait": "soon"})
    with pytest.raises(UsageError, match="did you mean 'order.lease'"):
        read({"path": "s3://bkt/t", "order.leas": "90s"})


def test_defaults_are_sparks_and_the_settings_taken_from_them_are_remembered() -> None:
    source, planned = read({"path": "s3://bkt/t", "partitionBy": "dt"}, overwrite=True)
    r = source.request
    assert (r.format, r.mode, r.partition_overwrite) == ("parquet", WriteMode.OVERWRITE, PartitionOverwrite.STATIC)
    assert dict(r.options) == {"compression": "snappy"}
    assert planned.consulted == {"source_default", "parquet_codec", "max_records_per_file", "partition_overwrite"}
    # No timestamp column: Parquet's timestamp type does not matter, and is not taken from anywhere.
    assert "timestamp_type" not in planned.consulted


def test_spark_refused_modes_have_an_option_instead() -> None:
    assert read({"path": "s3://bkt/t", "saveMode": "errorifexists"})[0].request.mode is WriteMode.ERROR
    assert read({"path": "s3://bkt/t", "savemode": "Ignore"})[0].request.mode is WriteMode.IGNORE
    with pytest.raises(UsageError, match=r"with \.mode\('overwrite'\): give one.*\.mode\('append'\)"):
        read({"path": "s3://bkt/t", "saveMode": "ignore"}, overwrite=True)
    with pytest.raises(UsageError, match="saveMode is for batch writes"):
        read({"path": "s3://bkt/t", "saveMode": "ignore"}, streaming=True)


@pytest.mark.parametrize("options,error,match", [
    ({}, UsageError, r"no options at all.*CREATE TEMPORARY VIEW.*INSERT INTO t WITH \('path'"),
    ({"format": "csv"}, UsageError, "'path' is not specified"),
    ({"path": "s3://bkt/t", "s3.bogus": "1"}, UsageError, "unknown mpcommit option.*'s3.bogus'"),
    ({"path": "s3://bkt/t", "compresion": "zstd"}, UsageError, r"does not know option\(s\) 'compresion'"),
    ({"path": "s3://bkt/t", "format": "orc"}, UsageError, "format 'orc'.*mpcommit writes parquet"),
    ({"path": "s3://bkt/t", "format": "bogus"}, SparkWriterError, "DATA_SOURCE_NOT_FOUND"),
    ({"path": "s3://bkt/t", "compression": "zip"}, SparkWriterError, "codec zip is not available"),
    ({"path": "s3://bkt/t", "partitionBy": "dt,,id"}, UsageError, "comma"),
    ({"path": "s3://bkt/t", "partitionBy": "nope"}, UsageError, "partition column 'nope' is not a column"),
    ({"path": "s3://bkt/t", "partitionBy": "id,name,dt"}, SparkWriterError, "ALL_PARTITION_COLUMNS_NOT_ALLOWED"),
    ({"path": "s3://bkt/t", "table": "db.t"}, UsageError, "needs option catalog 'glue'.*writer\\(df, table="),
    ({"path": "s3://bkt/t", "catalog": "glue"}, UsageError, "needs option table"),
    ({"path": "s3://bkt/t", "merge": "false", "merge.targetSize": "1MB"}, UsageError, "merge is false"),
    ({"path": "s3://bkt/t", "maxOpenWriters": "0"}, UsageError, "max_open_writers must be an integer of at least 1"),
    ({"path": "s3://bkt/t", "s3.connectTimeout": "soon"}, UsageError, "must be a number"),
    ({"path": "s3://bkt/t", "format": "csv", "outputTimestampType": "INT96"}, UsageError, "Parquet's"),
])
def test_bad_options_are_refused_by_name(options, error, match) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match):
        read(options)


@pytest.mark.parametrize("options,meant", [
    # Issue 40: refused by the format ("parquet does not know option(s) 'partitionby_cols'; it accepts:
    # compression, parquet.block.size"), while the option meant is the data source's own.
    ({"partitionby_cols": "dt"}, "partitionBy"),
    ({"format": "csv", "partition_overwrite_mode": "dynamic"}, "partitionOverwriteMode"),
    ({"maxRecordPerFile": "10"}, "maxRecordsPerFile"),
    ({"s3.endpoint": "http://127.0.0.1:9"}, "s3.endpointUrl"),
    ({"writer.uploadThread": "2"}, "writer.uploadThreads"),
    ({"format": "csv", "headr": "true"}, "header"),
    ({"compresion": "zstd"}, "compression"),
    ({"checkpointLocaton": "s3a://bkt/c"}, "checkpointLocation"),
])
def test_an_unknown_option_is_refused_naming_the_closest_option_of_the_data_source(options, meant) -> None:  # noqa: ANN001
    given = next(iter(k for k in options if k != "format"))
    with pytest.raises(UsageError) as refused:
        read({"path": "s3://bkt/t", **options})
    message = str(refused.value)
    assert repr(given) in message and f"did you mean {meant!r}? Nothing was written" in message and "Nothing was written" in message


def test_an_unknown_option_like_none_is_refused_without_a_guess() -> None:
    with pytest.raises(UsageError, match=r"does not know option\(s\) 'bogus'; it accepts: compression") as refused:
        read({"path": "s3://bkt/t", "bogus": "1"})
    assert "did you mean" not in str(refused.value)


def test_a_session_setting_the_plan_could_not_see_is_refused_in_the_task(monkeypatch) -> None:  # noqa: ANN001
    _, planned = read({"path": "s3://bkt/t", "partitionBy": "dt"}, overwrite=True)
    session: dict[str, str] = {}
    monkeypatch.setattr(SessionSettings, "of_task", classmethod(lambda cls: cls.of(session.get)))
    planned.session.check_in_task(planned.consulted)  # the session sets nothing: Spark's defaults hold
    session["spark.sql.files.maxRecordsPerFile"] = "0"
    session["spark.sql.sources.partitionOverwriteMode"] = "static"  # the same, spelt otherwise
    planned.session.check_in_task(planned.consulted)
    session["spark.sql.parquet.compression.codec"] = "zstd"
    with pytest.raises(SessionSettingError, match=r"spark.sql.parquet.compression.codec=zstd.*"
                                                  r"\.option\('compression', 'zstd'\)"):
        planned.session.check_in_task(planned.consulted)
    # Given as an option, the session's value is not consulted, and not checked.
    _, given = read({"path": "s3://bkt/t", "compression": "gzip"})
    given.session.check_in_task(given.consulted)


def test_every_option_the_readme_lists_is_one_the_data_source_takes() -> None:
    """The README's table of the data source's options: each name (as written there) is read, none refused."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("## Writing with df.write.format('mpcommit'), SQL and streaming")
    rows = [line for line in readme[start:readme.index("\n## ", start + 1)].splitlines()
            if line.startswith("| `") and "Spark refuses" not in line]
    names = {n for line in rows for n in re.findall(r"`([A-Za-z0-9_.]+)`", line.split("|")[1])}
    assert {"path", "format", "partitionBy", "s3.endpointUrl", "writer.initialPartSize"} <= names, names
    values = {"format": "csv", "partitionBy": "dt", "partitionOverwriteMode": "dynamic", "saveMode": "ignore",
              "outputTimestampType": "TIMESTAMP_MICROS", "merge": "true", "merge.smallFileAvg": "16MB",
              "merge.targetSize": "256MB", "table": "db.t", "catalog": "glue", "overwriteBucketRoot": "true",
              "schemaMismatch": "error", "s3.addressingStyle": "path", "s3.sse": "AES256", "compression": "gzip",
              "header": "true", "sep": ";", "writer.initialPartSize": "8MiB", "order.lease": "90s",
              "order.maxWait": "forever"}
    for name in sorted(names):
        value = values.get(name, "s3://bkt/t" if name == "path" else "http://127.0.0.1:9" if "endpoint" in name.lower()
                           else "2")
        options = {"path": "s3://bkt/t", "format": "csv" if name in ("header", "sep") else "parquet", name: value}
        if name in ("table", "catalog", "glue.endpointUrl", "glue.catalogId"):
            # What the options leave out of a named table is the catalog's: all given, nothing is asked of Glue.
            options.update(table="db.t", catalog="glue", partitionBy="dt")
        if name == "outputTimestampType":
            options["format"] = "parquet"
        read(options)  # refused names raise here


def test_only_mpcommits_own_errors_lose_their_traceback_in_what_spark_prints(monkeypatch) -> None:  # noqa: ANN001
    """The data source's methods report an MpcommitError as its own line (the worker's switch, set in the worker's
    process as it fails), and any other exception -- a bug -- with its traceback. test_datasource.py reads what
    PySpark prints."""
    import os

    from mpcommit.spark.datasource import HIDE_TRACEBACK, user_facing

    monkeypatch.setenv(HIDE_TRACEBACK, "")
    monkeypatch.delenv(HIDE_TRACEBACK)  # absent now, and absent again after the test

    @user_facing
    def bug() -> None:
        raise KeyError("a bug")

    @user_facing
    def refusal() -> None:
        raise UsageError("option 'bogus': ...")

    with pytest.raises(KeyError):
        bug()
    assert HIDE_TRACEBACK not in os.environ
    with pytest.raises(UsageError):
        refusal()
    assert os.environ[HIDE_TRACEBACK] == "1"
