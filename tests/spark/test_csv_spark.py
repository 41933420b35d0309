"""CSV written by ``mpcommit.spark.write`` and read back by Spark's own ``spark.read.csv`` with the same options:
the same rows. And, where Spark's writer is deterministic, the very bytes Spark's ``df.write.csv`` writes.

Here the committed object is fetched with boto3 into a local folder and Spark reads that (the bytes are the
committed ones; only the transport differs); tests/interop/test_csv_on_s3a.py reads the same cases over s3a://.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mpcommit.spark import write
from tests.support.spark_tables import SPARK_MARKS, assert_clean, data_keys
from tests.support.checks import read_object
from tests.support.csv_cases import ROUND_TRIPS, SCHEMA, STRINGS, comparable, expected, make_rows
from tests.support.spark_s3a import session_settings

pytestmark = SPARK_MARKS

@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    return spark.createDataFrame(make_rows(), SCHEMA).coalesce(1).cache()


@pytest.fixture
def store(moto_backend: Any) -> Any:
    return moto_backend


def committed_csv(store: Any, frame: Any, options: dict[str, str], folder: Path) -> Path:
    """Write ``frame`` through mpcommit to a fresh bucket; copy the one committed file into ``folder``."""
    bucket = store.new_bucket("csv-rt")
    report = write(frame, f"s3://{bucket}/t", format="csv", mode="overwrite", options=options, s3=store.options)
    keys = sorted(data_keys(store.client, bucket, "t"))
    assert len(keys) == 1 and report.rows == len(STRINGS)
    assert_clean(store.client, bucket, "t")
    folder.mkdir(parents=True)
    path = folder / "part-00000.csv"
    path.write_bytes(read_object(store.client, bucket, keys[0]))
    return path


def spark_rows(spark: Any, frame: Any, folder: Path, options: dict[str, str]) -> list[list[Any]]:
    back = spark.read.schema(frame.schema).options(**options).option("multiLine", "true").csv(str(folder))
    return sorted((comparable(r) for r in back.collect()), key=lambda r: r[0])


@pytest.mark.parametrize("options", ROUND_TRIPS, ids=lambda o: ",".join(f"{k}={v!r}" for k, v in o.items()) or "defaults")
def test_spark_reads_back_the_rows_written(spark, frame, store, tmp_path, options) -> None:  # noqa: ANN001
    folder = tmp_path / "ours"
    committed_csv(store, frame, options, folder)
    assert spark_rows(spark, frame, folder, options) == expected(frame, options)


def test_spark_reads_back_the_rows_written_in_another_session_time_zone(spark, frame, store, tmp_path) -> None:  # noqa: ANN001
    with session_settings(spark, {"spark.sql.session.timeZone": "America/Los_Angeles"}):
        folder = tmp_path / "ours"
        path = committed_csv(store, frame, {"nullValue": "\\N"}, folder)
        assert "2024-06-14T18:02:03.456-07:00" in path.read_text()  # the session's zone, as Spark writes it
        assert spark_rows(spark, frame, folder, {"nullValue": "\\N"}) == expected(frame, {"nullValue": "\\N"})


#: Option sets under which Spark's writer is compared byte for byte, each with its defaults (both trim whitespace
#: at either end of a value when writing).
SAME_BYTES = [
    {},
    {"escape": '"'},
    {"quoteAll": "true"},
    {"escapeQuotes": "false"},
    {"header": "true", "sep": "||", "nullValue": "\\N", "emptyValue": "EMPTY"},
    {"charToEscapeQuoteEscaping": "#", "lineSep": "\r"},
    {"timestampFormat": "yyyy-MM-dd HH:mm:ss.SSSSSS Z", "dateFormat": "dd/MM/yyyy", "timeZone": "Asia/Kolkata"},
]


@pytest.mark.parametrize("options", SAME_BYTES, ids=lambda o: ",".join(f"{k}={v!r}" for k, v in o.items()) or "defaults")
def test_the_bytes_spark_writes(spark, frame, store, tmp_path, options) -> None:  # noqa: ANN001
    ours = committed_csv(store, frame, options, tmp_path / "ours").read_bytes()
    frame.write.options(**options).csv(str(tmp_path / "spark"))
    (theirs,) = [p.read_bytes() for p in (tmp_path / "spark").glob("part-*")]
    assert ours == theirs
