"""CSV written by ``mpcommit.spark.write`` and read back by Spark's own ``spark.read.csv`` with the same options:
the same rows. And, where Spark's writer is deterministic, the very bytes Spark's ``df.write.csv`` writes.

Here the committed object is fetched with boto3 into a local folder and Spark reads that (the bytes are the
committed ones; only the transport differs); tests/interop/test_csv_on_s3a.py reads the same cases over s3a://.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path
from typing import Any

import pytest

from mpcommit.spark import write
from tests.spark.support import SPARK_MARKS, assert_clean, data_keys
from tests.support.checks import read_object
from tests.support.spark_s3a import session_settings

pytestmark = SPARK_MARKS

#: Values that broke CSV readers before: quotes, backslashes alone / before a quote / at the end, separators,
#: line breaks, whitespace at either end, unicode, NUL, and strings that look like the options' own values.
STRINGS = [
    "plain", 'q"x', '"', '""', "a\\b", "\\", 'a\\"b', "end\\", '\\"', "a,b", "a;b", "a|b", "a||b", "a\\,b",
    "line\nbreak", "crlf\r\nx", "cr\rx", None, "", " lead", "trail ", " both ", "\ttab", " ", ' "x',
    "ünïcødé ☃ 😀 x\u2028y", "'single'", "it's", "'", "#hash", "x\x00y", '"start', 'end"', "\\\\", 'a\\\\"b', "NULL",
]
UTC = dt.timezone.utc
TIMESTAMPS = [dt.datetime(2024, 6, 15, 1, 2, 3, 456000, tzinfo=UTC), dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
              dt.datetime(2024, 3, 10, 10, 30, tzinfo=UTC), dt.datetime(2024, 11, 3, 9, 0, 0, 1000, tzinfo=UTC), None]
DOUBLES = [0.0, -0.0, 0.1, 1e20, 1e-5, 1e7, 9999999.0, 9.9e-4, 1.7e12, 1 / 3, 1.7976931348623157e308, math.nan,
           math.inf, -math.inf, None]
#: float32 values whose Java 17 text is the shortest one too (Java 17 writes 2.5e10f as 2.49999995E10).
FLOATS = [0.1, 1.5, -3.25, 1e-5, 65536.0, None]
DECIMALS = [decimal.Decimal(v) for v in ("0", "1E-12", "0.000000100000", "1.5", "-123.456000000000")] + [None]
SCHEMA = ("id int, s string, ts timestamp, ntz timestamp_ntz, d date, dbl double, f float, dec decimal(20,12), "
          "b boolean, l long")


def make_rows() -> list[tuple]:
    rows = []
    for i, s in enumerate(STRINGS):
        ts = TIMESTAMPS[i % len(TIMESTAMPS)]
        rows.append((
            i, s, ts, ts.replace(tzinfo=None) if ts else None, ts.date() if ts else None, DOUBLES[i % len(DOUBLES)],
            FLOATS[i % len(FLOATS)], DECIMALS[i % len(DECIMALS)], None if i % 3 == 0 else i % 2 == 0,
            None if i % 7 == 0 else (i - 20) * 10**12,
        ))
    return rows


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


def comparable(row: Any) -> list[Any]:
    return ["NaN" if isinstance(v, float) and math.isnan(v) else v for v in row]


def expected(frame: Any, options: dict[str, str]) -> list[list[Any]]:
    """The rows as written, changed only where no CSV text can carry the difference: a value equal to nullValue
    (an empty string too, when nullValue is empty) reads back as null; whitespace at either end is trimmed unless
    the option keeping it is given (Spark's writer defaults)."""
    null_value = options.get("nullValue", "")
    trim = "".join(chr(c) for c in range(1, 33))
    rows = []
    for row in frame.collect():
        values = comparable(row)
        s = values[1]
        if s is not None and options.get("ignoreLeadingWhiteSpace") != "false":
            s = s.lstrip(trim)
        if s is not None and options.get("ignoreTrailingWhiteSpace") != "false":
            s = s.rstrip(trim)
        values[1] = None if s == null_value else s
        rows.append(values)
    return sorted(rows, key=lambda r: r[0])


ROUND_TRIPS = [
    {},
    {"header": "true", "sep": ";", "nullValue": "\\N"},
    {"escape": '"', "nullValue": "NULL"},
    {"quoteAll": "true", "nullValue": "\\N"},
    {"escapeQuotes": "false", "nullValue": "\\N"},
    {"quote": "'", "nullValue": "\\N"},
    {"sep": "||", "lineSep": "\r\n", "nullValue": "\\N"},
    {"timestampFormat": "dd/MM/yyyy HH:mm:ss.SSS XXX", "timestampNTZFormat": "yyyy-MM-dd HH:mm:ss.SSS",
     "dateFormat": "dd.MM.yyyy", "timeZone": "America/Los_Angeles", "nullValue": "\\N"},
    {"ignoreLeadingWhiteSpace": "false", "ignoreTrailingWhiteSpace": "false", "nullValue": "\\N"},
]


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
