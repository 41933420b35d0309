"""The ``mpcommit`` data source in real Spark on moto: ``df.write.format("mpcommit")``, SQL, what Spark itself refuses
for a Python source and the options that say it instead, bad input refused before any task with nothing written, a
failed task's write rolled back. (That it writes what ``writer(df)`` and Spark's own writer write:
test_equivalence.py; streams: test_streaming.py.)"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pytest

from mpcommit.spark import register
from tests.support.spark_tables import PYSPARK4, SPARK_MARKS, assert_clean, data_keys, read_table, s3_filesystem
from tests.support.checks import all_keys, pending_uploads, read_object
from tests.support.spark_s3a import session_settings

pytestmark = [*SPARK_MARKS, PYSPARK4]

DT = pa.schema([("dt", pa.string())])


@pytest.fixture(scope="module")
def source(spark) -> Any:  # noqa: ANN001
    register(spark)  # the explicit helper; Spark finds it by itself in a fresh session (the test below)
    return spark


def s3(backend: Any) -> dict[str, str]:
    """The store, as data source options (the source's processes see no test fixture)."""
    return {"s3.endpointUrl": backend.endpoint_url, "s3.accessKeyId": "test", "s3.secretAccessKey": "test",
            "s3.region": "us-east-1"}


def frame(spark: Any, start: int = 0, days: tuple[str, ...] = ("d1", "d2")) -> Any:
    rows = [(start + i, f"n{start + i}", days[i % len(days)]) for i in range(30)]
    return spark.createDataFrame(rows, "id long, name string, dt string").repartition(2, "id")


def ids(backend: Any, bucket: str, prefix: str) -> list[int]:
    return sorted(read_table(s3_filesystem(backend.endpoint_url), bucket, prefix, partitions=DT).column("id").to_pylist())


def last_commit(backend: Any, bucket: str, prefix: str) -> dict:
    return json.loads(read_object(backend.client, bucket, f"{prefix}/_SUCCESS"))


def error_text(exc: BaseException) -> str:
    """Spark wraps what the source raised; its own text is the last lines."""
    return " ".join(str(exc).split())


def first_line(exc: BaseException) -> str:
    """The first line of what PySpark prints for ``exc`` (after ``AnalysisException: `` / ``PythonException: ``)."""
    return next(line.strip() for line in str(exc).splitlines() if line.strip())


def test_a_df_write_line_commits_through_mpcommit(source, moto_backend) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    frame(source).write.format("mpcommit").mode("overwrite").options(**s3(be)).option("partitionBy", "dt").save(uri)
    frame(source, 100).write.format("mpcommit").mode("append").options(**s3(be)).option("partitionBy", "dt").save(uri)
    assert ids(be, bucket, "t") == list(range(30)) + list(range(100, 130))
    assert {k.split("/")[1] for k in data_keys(be.client, bucket, "t")} == {"dt=d1", "dt=d2"}
    assert last_commit(be, bucket, "t")["mode"] == "append"
    frame(source, 200, days=("d2",)).write.format("mpcommit").mode("overwrite").options(**s3(be)) \
        .options(partitionBy="dt", partitionOverwriteMode="dynamic").save(uri)
    assert ids(be, bucket, "t") == [i for i in range(30) if i % 2 == 0] + [i for i in range(100, 130) if i % 2 == 0] \
        + list(range(200, 230)), "d1 kept, d2 replaced"
    assert last_commit(be, bucket, "t")["mode"] == "overwrite-dynamic"
    assert_clean(be.client, bucket, "t")


def test_no_rows_through_the_source_leave_the_file_spark_leaves(source, moto_backend, tmp_path) -> None:  # noqa: ANN001
    """The third door of issue 27's empty result: df.write.format("mpcommit") of no rows leaves the one
    schema-only Parquet file Spark's own writer leaves, so spark.read finds the schema and no rows."""
    from tests.support.checks import read_object

    be, bucket = moto_backend, moto_backend.new_bucket()
    df = source.createDataFrame([(1, "a", 2.5)], "id long, name string, v double").filter("id < 0")
    df.write.format("mpcommit").mode("overwrite").options(**s3(be)).option("format", "parquet") \
        .save(f"s3://{bucket}/e")
    (key,) = data_keys(be.client, bucket, "e")
    assert key.endswith(".c000.snappy.parquet"), key
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / key.rsplit("/", 1)[1]).write_bytes(read_object(be.client, bucket, key))
    back = source.read.parquet(str(tmp_path / "e"))
    assert back.schema == df.schema and back.count() == 0
    assert_clean(be.client, bucket, "e")


def test_a_fresh_session_finds_the_source_with_no_register_call(source, moto_backend) -> None:  # noqa: ANN001
    """A new session has data sources of its own (not those registered in ``source``): only PySpark's look for
    modules named pyspark_* finds mpcommit there."""
    be, bucket = moto_backend, moto_backend.new_bucket()
    fresh = source.newSession()
    df = frame(fresh)
    df.write.format("mpcommit").mode("overwrite").option("format", "parquet").option("partitionBy", "dt") \
        .options(**s3(be)).save(f"s3://{bucket}/t")
    assert ids(be, bucket, "t") == list(range(30))
    # The format's options, the codec and maxRecordsPerFile by their PySpark names.
    df.write.format("mpcommit").mode("overwrite").options(**s3(be), format="json", compression="gzip",
                                                         partitionBy="dt", maxRecordsPerFile="4") \
        .save(f"s3://{bucket}/j")
    keys = data_keys(be.client, bucket, "j")
    assert keys and all(k.endswith(".json.gz") for k in keys), sorted(keys)[:3]
    assert len(keys) >= 30 // 4, "at most 4 rows a file"
    table = read_table(s3_filesystem(be.endpoint_url), bucket, "j", fmt="json", partitions=DT)
    assert sorted(table.column("id").to_pylist()) == list(range(30)) and table.num_rows == 30
    assert_clean(be.client, bucket, "j")


def test_what_spark_refuses_for_a_python_source_has_an_option_instead(source, moto_backend) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri, df = f"s3://{bucket}/t", frame(source)
    # Spark refuses these itself, before mpcommit sees the write (PySpark 4.3); its words are pinned here so that a
    # Spark that starts accepting them is noticed.
    for refused, words in ((lambda: df.write.format("mpcommit").options(**s3(be)).save(uri),
                            "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
                           (lambda: df.write.format("mpcommit").mode("ignore").options(**s3(be)).save(uri),
                            "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
                           (lambda: df.write.format("mpcommit").mode("append").partitionBy("dt").options(**s3(be))
                            .save(uri), "partitioning or clustering columns do not match")):
        with pytest.raises(Exception, match=words):
            refused()
    assert all_keys(be.client, bucket) == set()
    # What to write instead: mode errorifexists and ignore as an option beside Spark's mode append.
    df.write.format("mpcommit").mode("append").options(**s3(be), saveMode="errorifexists").save(uri)
    with pytest.raises(Exception, match="already holds data and mode is 'error'") as caught:
        df.write.format("mpcommit").mode("append").options(**s3(be), saveMode="errorifexists").save(uri)
    assert "Nothing was written" in error_text(caught.value)
    before = all_keys(be.client, bucket)
    frame(source, 500).write.format("mpcommit").mode("append").options(**s3(be), saveMode="ignore").save(uri)
    assert all_keys(be.client, bucket) == before, "ignore on existing data writes nothing, not even a record"
    assert ids(be, bucket, "t") == list(range(30))


def test_sql_insert_into_and_overwrite_a_view_commit_through_mpcommit(source, moto_backend) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    options = ", ".join(f"`{k}` '{v}'" for k, v in s3(be).items())
    source.sql(f"CREATE OR REPLACE TEMPORARY VIEW events (id BIGINT, name STRING, dt STRING) USING mpcommit "
               f"OPTIONS (path 's3://{bucket}/events', format 'parquet', partitionBy 'dt', {options})")
    source.sql("INSERT INTO events SELECT id, concat('n', id), IF(id % 2 = 0, 'd1', 'd2') FROM range(10)")
    source.sql("INSERT INTO events SELECT id, concat('n', id), 'd3' FROM range(100, 105)")
    assert ids(be, bucket, "events") == list(range(10)) + list(range(100, 105))
    source.sql("INSERT OVERWRITE events SELECT id, concat('n', id), 'd9' FROM range(200, 203)")
    assert ids(be, bucket, "events") == [200, 201, 202]
    assert {k.split("/")[1] for k in data_keys(be.client, bucket, "events")} == {"dt=d9"}
    assert last_commit(be, bucket, "events")["mode"] == "overwrite"
    assert_clean(be.client, bucket, "events")
    # A catalog table's OPTIONS do not reach a Python source's writer (Spark 4.3): refused, saying what works.
    table = f"mpc_{bucket.replace('-', '_')}"
    source.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, dt STRING) USING mpcommit OPTIONS "
               f"(path 's3://{bucket}/table', format 'parquet', partitionBy 'dt', {options})")
    try:
        with pytest.raises(Exception, match="no options at all") as caught:
            source.sql(f"INSERT INTO {table} SELECT 1, 'a', 'd1'")
        assert "CREATE TEMPORARY VIEW" in error_text(caught.value)
        assert all_keys(be.client, bucket, "table/") == set()
        # ... or the options on the statement.
        with_options = ", ".join(f"'{k}' = '{v}'" for k, v in
                                 {**s3(be), "path": f"s3://{bucket}/table", "partitionBy": "dt"}.items())
        source.sql(f"INSERT INTO {table} WITH ({with_options}) SELECT 1, 'a', 'd1'")
        assert ids(be, bucket, "table") == [1]
    finally:
        source.sql(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.parametrize("options,match", [
    ({"bogus": "1"}, r"parquet does not know option\(s\) 'bogus'"),
    ({"partitionby_cols": "dt"}, r"'partitionby_cols'.*did you mean 'partitionBy'\?"),  # issue 40
    ({"s3.bogus": "1"}, "unknown mpcommit option.*'s3.bogus'"),
    ({"format": "orc"}, "format 'orc': mpcommit writes parquet, csv, json"),
    ({"path": "hdfs://nn/t"}, "'hdfs://nn/t' is not an S3 URI"),
    ({"path": None}, "'path' is not specified"),
    ({"partitionBy": "nope"}, "partition column 'nope' is not a column"),
    ({"table": "db.t"}, "needs option catalog 'glue'"),
])
def test_bad_input_is_refused_before_any_task_and_leaves_nothing(source, moto_backend, options, match) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    given = {"path": f"s3://{bucket}/t", **s3(be), **options}
    w = frame(source).write.format("mpcommit").mode("append").options(**{k: v for k, v in given.items() if v})
    with pytest.raises(Exception, match=match) as caught:
        w.save()
    # Refused where Spark creates the writer: no Spark job ran. What the user reads first is mpcommit's refusal,
    # not a traceback (issue 38): Spark's own words, then mpcommit's error and its message, on the first line.
    first = first_line(caught.value)
    assert first.startswith("[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: mpcommit."), first
    assert re.search(match, first), first
    assert "Traceback" not in str(caught.value)
    assert all_keys(be.client, bucket) == set() and pending_uploads(be.client, bucket) == []


def test_a_failed_write_leaves_nothing_and_a_session_setting_it_cannot_see_is_refused(source, moto_backend) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    frame(source).write.format("mpcommit").mode("append").options(**s3(be), partitionBy="dt").save(uri)
    before = all_keys(be.client, bucket)
    failing = frame(source, 100).selectExpr("CASE WHEN id = 117 THEN raise_error('boom') ELSE id END AS id", "name",
                                            "dt")
    with pytest.raises(Exception, match="boom"):
        failing.write.format("mpcommit").mode("append").options(**s3(be), partitionBy="dt").save(uri)
    # The other task's files, and the failed task's uploads, are gone: the bucket is as it was, job records too.
    assert all_keys(be.client, bucket) == before
    assert ids(be, bucket, "t") == list(range(30))
    assert_clean(be.client, bucket, "t")
    with session_settings(source, {"spark.sql.parquet.compression.codec": "zstd"}):
        with pytest.raises(Exception, match=r"compression.codec=zstd.*\.option\('compression', 'zstd'\)") as caught:
            frame(source, 300).write.format("mpcommit").mode("append").options(**s3(be), partitionBy="dt").save(uri)
        # Refused in a task: PySpark's one line that a Python worker failed, then mpcommit's refusal, no traceback.
        lines = [line.strip() for line in str(caught.value).splitlines() if line.strip()]
        at = next(i for i, line in enumerate(lines) if "SessionSettingError: the session sets" in line)
        assert at <= 1 and not any("Traceback" in line for line in lines[:at]), lines[:12]
        assert ids(be, bucket, "t") == list(range(30))
        frame(source, 300).write.format("mpcommit").mode("append").options(**s3(be), partitionBy="dt",
                                                                          compression="zstd").save(uri)
    assert ids(be, bucket, "t") == list(range(30)) + list(range(300, 330))
    assert sum(k.endswith(".zstd.parquet") for k in data_keys(be.client, bucket, "t")) == 4
    assert_clean(be.client, bucket, "t")
