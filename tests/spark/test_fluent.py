"""The DataFrameWriter-shaped writer against ``write()``: the same files and report for each format and mode,
PySpark's defaults taken from the session, and PySpark's refusals under Spark's own error conditions."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from mpcommit.errors import DestinationExistsError, SparkWriterError, UsageError
from mpcommit.protocol.commit import CommitReport
from mpcommit.spark import write, writer
from tests.support.spark_tables import SPARK_MARKS, assert_clean, files, partition_dirs, same_report
from tests.support.checks import list_objects, pending_uploads, read_object
from tests.support.spark_s3a import session_settings

pytestmark = SPARK_MARKS


@pytest.fixture
def store(moto_backend) -> Any:  # noqa: ANN001
    return moto_backend


def frame(spark: Any, fmt: str, days: list[str], start: int = 0) -> Any:
    """Rows over ``days``, two Spark partitions; text holds one string column besides the partition column."""
    rows = [(start + i, f"name {start + i}", days[i % len(days)]) for i in range(40)]
    df = spark.createDataFrame(rows, "id long, name string, dt string").repartition(2, "id")
    return df.selectExpr("concat(name, ';', id) AS value", "dt") if fmt == "text" else df


#: Per format: the fluent call (as a df.write line would make it) and the same write through write().
CASES = {
    "parquet": (lambda w, uri: w.option("compression", "zstd").parquet(uri),
                dict(format="parquet", options={"compression": "zstd"})),
    "csv": (lambda w, uri: w.csv(uri, header=True, sep=";"),
            dict(format="csv", options={"header": "true", "sep": ";"})),
    "json": (lambda w, uri: w.format("json").option("compression", "gzip").save(uri),
             dict(format="json", options={"compression": "gzip"})),
    "text": (lambda w, uri: w.text(uri, compression="gzip"),
             dict(format="text", options={"compression": "gzip"})),
}


@pytest.mark.parametrize("fmt", list(CASES))
def test_the_fluent_writer_makes_the_same_files_and_report_as_write_in_every_mode(
        spark, store, fmt) -> None:  # noqa: ANN001
    fluent_call, kwargs = CASES[fmt]
    bucket = store.new_bucket()
    a, b = f"s3://{bucket}/fluent", f"s3://{bucket}/write"

    def both(df: Any, mode: str | None, *, dynamic: bool = False) -> tuple[CommitReport, CommitReport]:
        w = writer(df, s3=store.options).partitionBy("dt")
        if mode is not None:  # None: PySpark's default mode
            w = w.mode(mode)
        if dynamic:
            w = w.option("partitionOverwriteMode", "dynamic")
        got = fluent_call(w, a)
        expected = write(df, b, **kwargs, mode=mode or "errorifexists", partition_by=["dt"],
                         partition_overwrite="dynamic" if dynamic else "static", s3=store.options)
        same_report(got, expected)
        assert files(store.client, bucket, "fluent") == files(store.client, bucket, "write")
        return got, expected

    first, _ = both(frame(spark, fmt, ["d1", "d2"]), None)
    assert first.mode == "error" and first.files >= 2 and first.rows == 40
    with pytest.raises(DestinationExistsError):  # PySpark's default mode on existing data
        fluent_call(writer(frame(spark, fmt, ["d3"]), s3=store.options).partitionBy("dt"), a)
    assert both(frame(spark, fmt, ["d2", "d3"], start=100), "append")[0].rows == 40
    ignored, _ = both(frame(spark, fmt, ["d9"], start=500), "ignore")
    assert ignored.ignored and ignored.files == 0
    replaced, _ = both(frame(spark, fmt, ["d3", "d4"], start=200), "overwrite", dynamic=True)
    assert set(replaced.partitions) == {"dt=d3", "dt=d4"} and replaced.deleted_objects >= 1
    success = json.loads(read_object(store.client, bucket, "fluent/_SUCCESS"))
    assert success["mode"] == "overwrite-dynamic"
    kept = partition_dirs(store.client, bucket, "fluent")
    assert kept == {"dt=d1", "dt=d2", "dt=d3", "dt=d4"}, "a dynamic overwrite keeps the partitions it did not write"
    both(frame(spark, fmt, ["d5"], start=300), "Overwrite")  # Spark's modes ignore case; static: replaces all
    assert partition_dirs(store.client, bucket, "fluent") == {"dt=d5"}
    assert_clean(store.client, bucket, "fluent")


def test_defaults_come_from_the_session_as_in_pyspark(spark, store) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    df = frame(spark, "json", ["d1", "d2"])
    with session_settings(spark, {"spark.sql.sources.default": "json"}):
        report = writer(df, s3=store.options).save(f"s3://{bucket}/by-default")
    assert report.filenames and all(f.endswith(".json") for f in report.filenames)
    with session_settings(spark, {"spark.sql.parquet.compression.codec": "gzip"}):
        report = writer(df, s3=store.options).parquet(f"s3://{bucket}/codec")
        assert all(f.endswith(".gz.parquet") for f in report.filenames)
        # Spark's precedence: compression, then parquet.compression, then the session's codec.
        report = writer(df, s3=store.options).option("parquet.compression", "zstd").parquet(f"s3://{bucket}/legacy")
        assert all(f.endswith(".zstd.parquet") for f in report.filenames)
    report = writer(df, s3=store.options).parquet(f"s3://{bucket}/snappy")  # Spark's own default codec
    assert all(f.endswith(".snappy.parquet") for f in report.filenames)
    rows_per_task = [n for n in df.rdd.glom().map(len).collect() if n]
    with session_settings(spark, {"spark.sql.files.maxRecordsPerFile": "7"}):
        limited = writer(df, s3=store.options).parquet(f"s3://{bucket}/limited")
        # The option wins over the session's setting.
        unlimited = writer(df, s3=store.options).option("maxRecordsPerFile", 0).parquet(f"s3://{bucket}/unlimited")
    assert limited.files == sum(math.ceil(n / 7) for n in rows_per_task) > len(rows_per_task)
    assert unlimited.files == len(rows_per_task)


def test_the_session_partition_overwrite_mode_applies_and_the_option_wins(spark, store) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    uri = f"s3://{bucket}/t"
    writer(frame(spark, "parquet", ["d1", "d2"]), s3=store.options).partitionBy("dt").parquet(uri)

    def overwrite_d2(w: Any) -> set[str]:
        w.mode("overwrite").partitionBy("dt").parquet(uri)
        return partition_dirs(store.client, bucket, "t")

    with session_settings(spark, {"spark.sql.sources.partitionOverwriteMode": "DYNAMIC"}):
        assert overwrite_d2(writer(frame(spark, "parquet", ["d2"]), s3=store.options)) == {"dt=d1", "dt=d2"}
        static = writer(frame(spark, "parquet", ["d2"]), s3=store.options).option("partitionOverwriteMode", "static")
        assert overwrite_d2(static) == {"dt=d2"}
    writer(frame(spark, "parquet", ["d1"]), s3=store.options).mode("append").partitionBy("dt").parquet(uri)
    dynamic = writer(frame(spark, "parquet", ["d2"]), s3=store.options).option("PARTITIONOVERWRITEMODE", "Dynamic")
    assert overwrite_d2(dynamic) == {"dt=d1", "dt=d2"}


def test_mpcommits_own_settings_are_the_writer_arguments(spark, store) -> None:  # noqa: ANN001
    from mpcommit.compaction import MergePolicy

    bucket = store.new_bucket()
    df = frame(spark, "json", ["d1", "d2"]).repartition(8)
    report = writer(df, s3=store.options, merge=MergePolicy()).mode("append").partitionBy("dt").json(f"s3://{bucket}/t")
    assert report.files == 2 and report.rows == 40, "eight tasks' small files merged into one per partition"
    root = writer(df, s3=store.options, overwrite_bucket_root=True).mode("overwrite").partitionBy("dt") \
        .parquet(f"s3://{bucket}")
    assert root.rows == 40 and all(f.startswith("dt=") for f in root.filenames), "the whole bucket was replaced"
    with pytest.raises(UsageError, match="merge must be None or a MergePolicy"):
        writer(df, s3=store.options, merge=1).json(f"s3://{bucket}/u")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="mpcommit.spark.writer takes a PySpark DataFrame, got list"):
        writer([1, 2])  # type: ignore[arg-type]


# ---------------------------------------------------------------- refusals: nothing is written for any of them
def refused(spark: Any, store: Any, call: Any, error: type[Exception], match: str, condition: str | None = None) -> None:
    bucket = store.new_bucket()
    df = frame(spark, "parquet", ["d1"])
    with pytest.raises(error, match=match) as caught:
        call(writer(df, s3=store.options), f"s3://{bucket}/t")
    if condition is not None:
        assert isinstance(caught.value, SparkWriterError) and caught.value.getCondition() == condition
        assert str(caught.value).startswith(f"[{condition}] ")
    else:
        assert not isinstance(caught.value, SparkWriterError), "Spark accepts it: not one of Spark's refusals"
    assert list_objects(store.client, bucket, "") == [] and pending_uploads(store.client, bucket, "") == []


@pytest.mark.parametrize("call,match,condition", [
    # What PySpark refuses: Spark's condition, and Spark's words.
    (lambda w, u: w.mode("bogus").parquet(u), 'save mode "bogus" is invalid', "INVALID_SAVE_MODE"),
    (lambda w, u: w.parquet(u, mode="upsert"), 'save mode "upsert" is invalid', "INVALID_SAVE_MODE"),
    (lambda w, u: w.mode(1).parquet(u), "`saveMode` should be a str, got int", "NOT_STR"),
    (lambda w, u: w.format("bogus").save(u), "Failed to find the data source: bogus", "DATA_SOURCE_NOT_FOUND"),
    (lambda w, u: w.option("compression", "bogus").parquet(u), "codec bogus is not available.*snappy",
     "CODEC_NOT_AVAILABLE.WITH_AVAILABLE_CODECS_SUGGESTION"),
    (lambda w, u: w.csv(u, compression="zip"), "codec zip is not available.*gzip",
     "CODEC_NOT_AVAILABLE.WITH_AVAILABLE_CODECS_SUGGESTION"),
    # Short names write() takes, which Spark refuses.
    (lambda w, u: w.option("compression", "zstandard").parquet(u), "codec zstandard is not available.*zstd",
     "CODEC_NOT_AVAILABLE.WITH_AVAILABLE_CODECS_SUGGESTION"),
    (lambda w, u: w.json(u, compression="gz"), "codec gz is not available.*gzip",
     "CODEC_NOT_AVAILABLE.WITH_AVAILABLE_CODECS_SUGGESTION"),
    (lambda w, u: w.partitionBy("id", "name", "dt").parquet(u), "Cannot use all columns",
     "ALL_PARTITION_COLUMNS_NOT_ALLOWED"),
    (lambda w, u: w.sortBy("id").parquet(u), "sortBy must be used together with bucketBy.*sortWithinPartitions",
     "SORT_BY_WITHOUT_BUCKETING"),
    # What Spark accepts and mpcommit does not do: refused by name, with what to do instead.
    (lambda w, u: w.format("orc").save(u), "format 'orc'.*keep df.write for orc", None),
    (lambda w, u: w.orc(u), "format 'orc'.*mpcommit writes parquet, csv, json", None),
    (lambda w, u: w.option("compression", "lzo").parquet(u), "does not support compression 'lzo'", None),
    (lambda w, u: w.json(u, timestampFormat="yyyy"), "option.*'timestampFormat'", None),
    (lambda w, u: w.mode("overwrite").parquet(u.rsplit("/", 1)[0]), "overwrite_bucket_root=True", None),
    (lambda w, u: w.option("mergeSchemaX", "true").parquet(u), "option.*'mergeSchemaX'", None),
    (lambda w, u: w.bucketBy(4, "id").parquet(u), "bucketBy: mpcommit writes no bucketed output", None),
    (lambda w, u: w.clusterBy("id").parquet(u), "clusterBy: .*sortWithinPartitions", None),
    (lambda w, u: w.insertInto("db.t"), r"insertInto\('db.t'\).*writer\(df, table='db.t'\)", None),
    (lambda w, u: w.saveAsTable("db.t", format="parquet"), r"saveAsTable\('db.t'\).*CREATE TABLE", None),
    (lambda w, u: w.option("partitionOverwriteMode", "bogus").parquet(u), "partitionOverwriteMode must be STATIC or "
     "DYNAMIC, got 'bogus'", None),
    (lambda w, u: w.format("parquet").save(), "'path' is not specified", None),
    (lambda w, u: w.option("path", u).save(u), "there is a 'path' option", None),
])
def test_refusals_name_the_problem_and_write_nothing(spark, store, call, match, condition) -> None:  # noqa: ANN001
    refused(spark, store, call, UsageError, match, condition)


def test_the_session_default_format_is_refused_by_name_when_mpcommit_does_not_write_it(spark, store) -> None:  # noqa: ANN001
    with session_settings(spark, {"spark.sql.sources.default": "orc"}):
        refused(spark, store, lambda w, u: w.save(u), UsageError, r"format 'orc' \(the session's spark.sql.sources"
                ".default\\)", None)


def test_path_option_and_old_format_names_work_as_in_spark(spark, store) -> None:  # noqa: ANN001
    bucket = store.new_bucket()
    df = frame(spark, "csv", ["d1"])
    report = (writer(df, s3=store.options).format("com.databricks.spark.csv")
              .options(header=True, path=f"s3a://{bucket}/t", nullValue=None).save())
    assert report.filenames and all(f.endswith(".csv") for f in report.filenames)
    first = read_object(store.client, bucket, report.filenames[0]).decode().splitlines()[0]
    assert first == "id,name,dt", "header=True became Spark's 'true'"
