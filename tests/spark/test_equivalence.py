"""One behaviour, three doors: the ``mpcommit`` data source writes what Spark's own writer writes, and the same files,
layout and report as ``writer(df)`` (and so ``write()``, which ``writer`` is a translation into).

For every format, partitioned or not, one DataFrame whose partition column holds hostile values (spaces, ``/``,
``=``, ``%``, unicode, empty, null) goes through each mode in turn -- errorifexists on a new table, append, ignore
on the existing table, overwrite (and, partitioned, a dynamic overwrite of some partitions) -- once through the data
source into S3 (moto) and once through Spark's own ``df.write`` into a local folder. After each step both tables
must hold the same rows, in the same partition folders, in as many files per folder. Rows are read file by file
with pyarrow (Parquet, CSV, JSON) or as lines (text), the folder names compared as written, undecoded.
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest

from mpcommit.spark import register, writer
from tests.support.spark_tables import PYSPARK4, SPARK_MARKS, files
from tests.support.checks import list_objects, read_object
from tests.spark.test_datasource import s3


#: slow: every format, mode and partitioning, 50 s on 2 quiet cores, 2 minutes under load.
pytestmark = [*SPARK_MARKS, pytest.mark.slow]

HOSTILE = ["a b", "a/b", "k=v", "50%", "ünï ☃", "", None]
FORMATS = {"parquet": {}, "csv": {"header": "true"}, "json": {}, "text": {}}


@pytest.fixture(scope="module")
def source(spark) -> Any:  # noqa: ANN001
    register(spark)
    return spark


def frame(spark: Any, fmt: str, start: int, values: list[str | None], *, partitioned: bool = True) -> Any:
    rows = [(start + i, f"n{start + i}", values[i % len(values)]) for i in range(3 * len(values))]
    df = spark.createDataFrame(rows, "id long, name string, k string").repartition(2, "id")
    if fmt != "text":
        return df
    # Text holds one string column; the partition column is beside it only when it becomes a folder.
    return df.selectExpr("concat(name, ':', id, ':', coalesce(k, 'null')) AS value", *(["k"] if partitioned else []))


def rows_of(fmt: str, data: bytes) -> list[tuple]:
    if fmt == "parquet":
        table = pq.read_table(io.BytesIO(data))
    elif fmt == "csv":
        table = pacsv.read_csv(io.BytesIO(data)) if data else None
    elif fmt == "json":
        table = pajson.read_json(io.BytesIO(data)) if data else None
    else:
        return [(line,) for line in data.decode().splitlines()]
    if table is None:
        return []
    return [tuple(sorted(r.items())) for r in table.to_pylist()]


def layout(fmt: str, objects: dict[str, bytes]) -> dict[str, Any]:
    """Per folder (as named, undecoded): file count and rows; data files only."""
    folders: dict[str, list] = {}
    for rel, data in objects.items():
        name = rel.rsplit("/", 1)[-1]
        if any(part.startswith(("_", ".")) for part in rel.split("/")) or name.endswith(".crc"):
            continue
        folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
        entry = folders.setdefault(folder, [0, Counter()])
        entry[0] += 1
        entry[1].update(rows_of(fmt, data))
    return {folder: (n, dict(rows)) for folder, (n, rows) in sorted(folders.items())}


def spark_layout(fmt: str, root: Path) -> dict[str, Any]:
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return layout(fmt, found)


def mpcommit_layout(fmt: str, backend: Any, bucket: str, prefix: str) -> dict[str, Any]:
    found = {o["Key"][len(prefix) + 1:]: read_object(backend.client, bucket, o["Key"])
             for o in list_objects(backend.client, bucket, f"{prefix}/")}
    return layout(fmt, found)


#: Cases CI runs: Parquet partitioned and text unpartitioned (the two ends: Arrow's writer with every hostile
#: folder name, and mpcommit's own line encoder); the long tier runs the other six. CI keeps CSV's bytes against
#: Spark's writer (test_csv_spark.py) and JSON through the data source, read back (test_datasource.py).
IN_CI = {("parquet", True), ("text", False)}


@pytest.mark.parametrize("fmt,partitioned", [
    pytest.param(fmt, partitioned, id=f"{fmt}-{'partitioned' if partitioned else 'unpartitioned'}",
                 marks=() if (fmt, partitioned) in IN_CI else pytest.mark.long)
    for fmt in FORMATS for partitioned in (True, False)])
@PYSPARK4
def test_the_data_source_writes_what_sparks_own_writer_writes(source, moto_backend, tmp_path, fmt,
                                                              partitioned) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    local = tmp_path / "spark"
    options = dict(FORMATS[fmt])
    steps: list[tuple[str, str | None, int, list[str | None]]] = [
        # (Spark's mode, the data source's saveMode beside mode append, first id, partition values)
        ("errorifexists", "errorifexists", 0, HOSTILE),
        ("append", None, 100, HOSTILE[:4]),
        ("ignore", "ignore", 200, HOSTILE),
        ("overwrite", None, 300, HOSTILE[2:]),
    ]
    if partitioned:
        steps.append(("overwrite-dynamic", None, 400, ["a/b", None]))
    for mode, save_mode, start, values in steps:
        df = frame(source, fmt, start, values, partitioned=partitioned)
        native = df.write.format(fmt).options(**options)
        ours = df.write.format("mpcommit").options(**options, **s3(be), format=fmt)
        if partitioned:
            native, ours = native.partitionBy("k"), ours.option("partitionBy", "k")
        if mode == "overwrite-dynamic":
            native = native.mode("overwrite").option("partitionOverwriteMode", "dynamic")
            ours = ours.mode("overwrite").option("partitionOverwriteMode", "dynamic")
        elif save_mode is not None:
            native, ours = native.mode(mode), ours.mode("append").option("saveMode", save_mode)
        else:
            native, ours = native.mode(mode), ours.mode(mode)
        if mode == "overwrite-dynamic":
            # What Spark's dynamic overwrite means: the table before, its written partitions replaced by what
            # Spark's writer writes for the data. (Spark's own dynamic overwrite in this test session kept the old
            # files of one of the two partitions it wrote, for every format, while a standalone PySpark 4.3
            # replaced them, as mpcommit does; unexplained, so its result is not the yardstick here.)
            fresh = tmp_path / "dynamic"
            df.write.format(fmt).options(**options).partitionBy("k").save(str(fresh))
            written = spark_layout(fmt, fresh)
            expected = {**{f: v for f, v in spark_layout(fmt, local).items() if f not in written}, **written}
        else:
            native.save(str(local))
            expected = spark_layout(fmt, local)
        ours.save(f"s3://{bucket}/t")
        got = mpcommit_layout(fmt, be, bucket, "t")
        if got != expected:
            print("SUCCESS", read_object(be.client, bucket, "t/_SUCCESS").decode()[:3000])
        assert got == expected, f"after {mode}: {json.dumps({'spark': list(expected), 'mpcommit': list(got)})}"
        if partitioned:
            assert set(expected) <= {f"k={v}" for v in ("a b", "a%2Fb", "k%3Dv", "50%25", "ünï ☃",
                                                        "__HIVE_DEFAULT_PARTITION__")}, "Hive's escaping"
    assert os.listdir(local)


@PYSPARK4
def test_the_data_source_and_writer_make_the_same_files_layout_and_report(source, moto_backend) -> None:  # noqa: ANN001
    be, bucket = moto_backend, moto_backend.new_bucket()
    for step, (mode, start) in enumerate((("overwrite", 0), ("append", 100))):
        df = frame(source, "csv", start, HOSTILE)
        df.write.format("mpcommit").mode(mode).options(**s3(be), format="csv", header="true", partitionBy="k",
                                                      compression="gzip").save(f"s3://{bucket}/source")
        report = writer(df, s3=be.options).mode(mode).partitionBy("k").option("compression", "gzip") \
            .csv(f"s3://{bucket}/writer", header=True)
        assert files(be.client, bucket, "source") == files(be.client, bucket, "writer"), f"step {step}"
        ours, theirs = (json.loads(read_object(be.client, bucket, f"{p}/_SUCCESS")) for p in ("source", "writer"))
        same = ("mode", "files", "bytes", "rows", "partitions", "partitionStats", "purpose")
        assert {k: ours.get(k) for k in same} == {k: theirs.get(k) for k in same}
        assert theirs["files"] == report.files and theirs["rows"] == report.rows == 3 * len(HOSTILE)
        assert sorted(f.split("/", 1)[1].replace(ours["jobId"], "JOB") for f in ours["filenames"]) == sorted(
            f.split("/", 1)[1].replace(theirs["jobId"], "JOB") for f in theirs["filenames"])
