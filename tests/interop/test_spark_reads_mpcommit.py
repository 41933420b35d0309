"""Spark reads what mpcommit writes: the same DataFrame written by ``mpcommit.spark.write`` and by Spark's own
``df.write``, then read back by ``spark.read`` over ``s3a://``.

For each format the two tables must agree on what a Spark user sees: the partition folders (Spark's escaping of
``/``, ``=``, ``%``, ...; null and "" in ``__HIVE_DEFAULT_PARTITION__``), the file extensions, the schema Spark
infers (partition column types included), and the rows. Read with the DataFrame's own schema, mpcommit's table
gives back exactly the rows written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from typing import Any

import pytest

from mpcommit.spark import write
from tests.support.backends import Backend
from tests.support.backends import on_backends
from tests.support.checks import visible_keys

pytestmark = [pytest.mark.spark, pytest.mark.s3a,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

#: Partition values Spark escapes or treats specially, and two it leaves alone.
KEYS = ["with space", "a/b", "x=y", "50%", "ünïcødé 日本", "", None, "plain", "#h:?*", "q'\"\\"]

#: How each format is written and read: (writer options, reader options), the same for mpcommit and Spark.
FORMATS = {
    "parquet": ({}, {}),
    "csv": ({"header": "true"}, {"header": "true", "inferSchema": "true"}),
    "json": ({}, {}),
    "text": ({}, {}),
}


def source_frame(spark: Any, fmt: str) -> Any:
    """Rows over every partition value, with values whose text forms differ between writers (blanks at either end
    of a string: both CSV writers trim them by default)."""
    rows = []
    for i in range(len(KEYS) * 6):
        k, n = KEYS[i % len(KEYS)], 1 + (i // len(KEYS)) % 2
        if fmt == "text":
            rows.append((f"line {i}: {k}, \"quoted\"" if i % 7 else "", k, n))
            continue
        x = [0.1, -2.5e20, float("nan"), float("inf"), -0.0, None][i % 6]
        s = ["plain", 'with, comma and "quotes"', "", None, "ünï 日本", "back\\slash", 'both \\"', "end,\\",
             "  padded\t"][i % 9]
        rows.append((i, x, float(i // 3), i % 3 == 0 if i % 4 else None, dt.date(2024, 1, 1 + i % 28),
                     dt.datetime(2024, 3, 1, 12, 30, i % 60, 123000 * (i % 3)) if i % 5 else None,
                     decimal.Decimal(i) / 8, s, k, n))
    schema = ("value string, k string, n int" if fmt == "text" else
              "id long, x double, w double, flag boolean, day date, ts timestamp, d decimal(10,3), s string, k string, n int")
    return spark.createDataFrame(rows, schema).repartition(3)


def layout(client: Any, bucket: str, prefix: str) -> tuple[set[str], set[str]]:
    """(partition folders, file extensions) of the data files under ``prefix``."""
    folders, extensions = set(), set()
    for key in visible_keys(client, bucket, prefix):
        if key.endswith("/"):
            continue  # S3A's directory markers: not data
        folder, name = key[len(prefix) + 1:].rsplit("/", 1)
        folders.add(folder)
        extensions.add(name.split(".", 2)[-1])  # part-00000-<id>.c000.EXT
    return folders, extensions


def comparable(rows: list[Any]) -> list[tuple]:
    """Rows as sortable tuples; NaN made equal to itself."""
    def norm(v: Any) -> Any:
        return ("NaN",) if isinstance(v, float) and math.isnan(v) else v
    return sorted((tuple(norm(v) for v in row) for row in rows), key=repr)


@pytest.mark.parametrize("s3a_backend,fmt", on_backends(list(FORMATS), moto=("parquet",), go=("parquet",)),
                         indirect=["s3a_backend"])
@pytest.mark.ci_on("localstack", "versitygw")  # moto's case (S3A beside moto in one process's GIL, ~20 s): long tier
def test_spark_reads_an_mpcommit_table_as_it_reads_its_own(s3a_spark, s3a_backend: Backend, s3a_bucket: str,
                                                          fmt: str) -> None:
    spark, bucket, backend = s3a_spark, s3a_bucket, s3a_backend
    write_options, read_options = FORMATS[fmt]
    df = source_frame(spark, fmt)

    write(df, f"s3a://{bucket}/mpcommit", fmt, mode="overwrite", partition_by=["k", "n"], options=write_options,
          s3=backend.options)
    df.write.format(fmt).options(**write_options).partitionBy("k", "n").save(f"s3a://{bucket}/spark")

    ours, theirs = layout(backend.client, bucket, "mpcommit"), layout(backend.client, bucket, "spark")
    assert ours[0] == theirs[0], "partition folders"
    assert "k=__HIVE_DEFAULT_PARTITION__/n=1" in ours[0] and "k=a%2Fb/n=1" in ours[0]
    assert ours[1] == theirs[1], "file extensions"

    mine = spark.read.format(fmt).options(**read_options).load(f"s3a://{bucket}/mpcommit")
    spark_own = spark.read.format(fmt).options(**read_options).load(f"s3a://{bucket}/spark")
    assert mine.schema == spark_own.schema
    if fmt == "json":
        # x holds NaN and infinities, which JSON can only quote: Spark infers strings for it, and the finite
        # numbers are spelled -2.5e+20 by mpcommit, -2.5E20 by Spark (see mpcommit/formats/json.py). The values:
        assert dict(mine.dtypes)["x"] == "string"
        mine, spark_own = (t.withColumn("x", t["x"].cast("double")) for t in (mine, spark_own))
    assert comparable(mine.collect()) == comparable(spark_own.collect())

    # Read with the written DataFrame's own types: exactly the rows written. "" and null share a partition and
    # read back as null, and Spark's CSV reader takes a "" field for null: so in Spark's own tables too.
    typed = spark.read.format(fmt).options(**read_options).schema(df.schema).load(f"s3a://{bucket}/mpcommit")
    # CSV trims blanks at either end of a string, as Spark's own CSV writer does by default.
    empty_is_null = {"k"} | ({"s"} if fmt == "csv" else set())
    trimmed = (lambda v: v.strip("".join(chr(c) for c in range(1, 33))) if isinstance(v, str) else v) \
        if fmt == "csv" else (lambda v: v)
    expected = [tuple(None if (name in empty_is_null and v == "") else (trimmed(v) if name == "s" else v)
                      for name, v in zip(df.columns, row)) for row in df.collect()]
    assert comparable(typed.select(*df.columns).collect()) == comparable(expected)


@pytest.mark.parametrize("s3a_backend,fmt", on_backends(list(FORMATS)), indirect=["s3a_backend"])
def test_an_empty_result_leaves_what_sparks_writer_leaves(s3a_spark, s3a_backend: Backend, s3a_bucket: str,
                                                          fmt: str) -> None:
    """No rows: the same files as Spark's df.write (one schema-only Parquet file, a header-only CSV, an empty JSON or
    text file), and spark.read of the table gives the schema and zero rows -- through write() and writer()."""
    from mpcommit.spark import writer

    spark, bucket, backend = s3a_spark, s3a_bucket, s3a_backend
    write_options, read_options = FORMATS[fmt]
    df = source_frame(spark, fmt).drop("k", "n").filter("false")
    write(df, f"s3a://{bucket}/mpcommit", fmt, mode="overwrite", options=write_options, s3=backend.options)
    writer(df, s3=backend.options).mode("overwrite").options(**write_options).format(fmt) \
        .save(f"s3a://{bucket}/fluent")
    df.write.format(fmt).options(**write_options).save(f"s3a://{bucket}/spark")

    def files(prefix: str) -> list[tuple[str, bytes]]:
        """(task, cNNN and extension, bytes) of each data file: part-00000-JOBID.c000.EXT, part-00000-UUID-c000.EXT."""
        keys = sorted(k for k in visible_keys(backend.client, bucket, prefix) if not k.endswith("/"))
        names = [re.sub(r"^part-(\d{5})-.+[.-](c\d{3})\.", r"\1 \2 ", k.rsplit("/", 1)[1]) for k in keys]
        return [(name, backend.client.get_object(Bucket=bucket, Key=k)["Body"].read()) for name, k in zip(names, keys)]

    theirs = files("spark")
    assert len(theirs) == 1 and theirs[0][0].startswith("00000 c000 "), theirs
    for prefix in ("mpcommit", "fluent"):
        ours = files(prefix)
        assert [name for name, _ in ours] == [name for name, _ in theirs], prefix
        if fmt != "parquet":  # Parquet's footers name their writer; the other formats' bytes are Spark's
            assert [data for _, data in ours] == [data for _, data in theirs], prefix
        table = spark.read.format(fmt).options(**read_options).load(f"s3a://{bucket}/{prefix}")
        assert table.schema == spark.read.format(fmt).options(**read_options).load(f"s3a://{bucket}/spark").schema
        assert table.count() == 0
        if fmt == "parquet":
            assert table.schema == df.schema
