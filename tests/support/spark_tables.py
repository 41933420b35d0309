"""Reading what a Spark write committed, with readers independent of mpcommit (pyarrow's C++ S3 client)."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from mpcommit.protocol.commit import CommitReport
from tests.support.checks import all_keys, list_objects, pending_uploads, visible_keys

#: Marks of every Spark test module: the ``spark`` marker, and quiet about pyspark's pandas-version warning.
SPARK_MARKS = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

#: Marks a test of the doors built on PySpark 4's Python Data Source API (the data source; the sink too).
PYSPARK4 = pytest.mark.pyspark4
#: Marks a test of the streaming sink, which needs PySpark's Arrow stream writer (4.1 and later).
STREAM_SINK = pytest.mark.stream_sink


def door_missing(marker: str) -> str | None:
    """Why the tests marked ``marker`` (``pyspark4``, ``stream_sink``) cannot run with the installed PySpark, or None
    when they can -- or when there is no PySpark at all, which the Spark tests say themselves."""
    try:
        from mpcommit.spark import compat

        found = compat.pyspark_version()
    except ImportError:
        return None
    where = f"this is PySpark {found[0]}.{found[1]}, where mpcommit refuses it by name (tests/spark/test_versions.py)"
    if found < compat.DATA_SOURCE_MIN:
        return f"needs PySpark 4's Python Data Source API (the mpcommit data source and streaming sink); {where}"
    if marker == "stream_sink" and compat.stream_writer_base() is None:
        return f"needs PySpark's Arrow stream writer (DataSourceStreamArrowWriter, the streaming sink's); {where}"
    return None


def to_arrow(df: Any) -> pa.Table:
    """``df``'s rows as an Arrow table: ``DataFrame.toArrow()`` (PySpark 4), or on PySpark 3.5, which lacks it, the
    batches its ``toPandas`` collects through Arrow."""
    if hasattr(type(df), "toArrow"):
        return df.toArrow()
    batches = df._collect_as_arrow()  # noqa: SLF001 - PySpark 3.5's toArrow in all but name
    if batches:
        return pa.Table.from_batches(batches)
    from mpcommit.spark.compat import to_arrow_schema

    return to_arrow_schema(df.schema, time_zone=df.sparkSession.conf.get("spark.sql.session.timeZone"),
                           large_var_types=False).empty_table()


def s3_filesystem(endpoint_url: str) -> Any:
    """pyarrow's S3 filesystem on one endpoint (the harness's credentials); paths are ``bucket/key``."""
    from urllib.parse import urlsplit

    from pyarrow import fs

    return fs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1", scheme="http",
                           endpoint_override=urlsplit(endpoint_url).netloc)


def read_table(fs: Any, bucket: str, prefix: str, *, fmt: Any = "parquet", partitions: pa.Schema | None = None,
               schema: pa.Schema | None = None) -> pa.Table:
    """The table under ``bucket/prefix`` as pyarrow's dataset reader sees it (Hive partitions decoded). Parquet's
    INT96 timestamps (Spark's default, and so the Spark writer's) are read in microseconds, not pyarrow's default
    nanoseconds, which overflow outside 1677-2262; INT96 has no time zone, so they read back without one."""
    if fmt == "parquet":
        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
    partitioning = ds.partitioning(partitions, flavor="hive") if partitions is not None else None
    dataset = ds.dataset(f"{bucket}/{prefix}", filesystem=fs, format=fmt, partitioning=partitioning, schema=schema)
    return dataset.to_table()


def sorted_rows(table: pa.Table, by: str = "id", columns: list[str] | None = None) -> list[dict]:
    table = table.select(columns) if columns else table
    return table.sort_by(by).to_pylist()


def data_keys(client: Any, bucket: str, prefix: str) -> set[str]:
    """Visible data files (no _SUCCESS, nothing hidden)."""
    return visible_keys(client, bucket, prefix)


def assert_clean(client: Any, bucket: str, prefix: str) -> None:
    """No pending upload and no job records left behind."""
    assert pending_uploads(client, bucket, prefix) == []
    left = all_keys(client, bucket, f"{prefix}/_temporary/", exact_prefix=True)
    assert not left, f"job records left: {sorted(left)[:10]}"


#: A job id (a UUID), as every data key carries it.
JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def files(client: Any, bucket: str, prefix: str) -> list[tuple[str, int]]:
    """(relative key, size) of every object under ``prefix``, job ids replaced by JOB (several jobs' files may be
    there), _SUCCESS and the table's commit order left out (they carry times, host names and job ids; their
    fields are compared through the report)."""
    out = []
    for o in list_objects(client, bucket, f"{prefix}/"):
        relative = o["Key"][len(prefix) + 1:]
        if relative != "_SUCCESS" and not relative.startswith("_mpcommit/"):
            out.append((JOB_ID.sub("JOB", relative), o["Size"]))
    return sorted(out)


def partition_dirs(client: Any, bucket: str, prefix: str) -> set[str]:
    return {o["Key"].split("/")[1] for o in list_objects(client, bucket, f"{prefix}/") if "/dt=" in o["Key"]}


def same_report(a: CommitReport, b: CommitReport) -> dict[str, Any]:
    """The report's fields that do not depend on the job id or on time, with the job id taken out of names."""
    def fields(r: CommitReport) -> dict[str, Any]:
        return {
            "mode": r.mode, "outcome": r.outcome, "files": r.files, "bytes": r.bytes, "rows": r.rows,
            "partitions": r.partitions, "aborted_uploads": r.aborted_uploads, "deleted_objects": r.deleted_objects,
            "ignored": r.ignored, "partition_stats": dict(r.partition_stats),
            "filenames": sorted(f.split("/", 1)[1].replace(r.job_id, "JOB") for f in r.filenames),
            "timings": sorted(r.timings),
        }
    assert fields(a) == fields(b)
    return fields(a)
