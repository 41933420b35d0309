"""The CSV encoder against what Spark 4.3's own ``df.write.csv`` wrote for the same values and options
(``data/spark_csv_golden.json``), against a per-value transcription of Spark's writer rules on random values,
and the few places where it writes what reads back rather than what Spark writes. No server, no Spark."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mpcommit.errors import UsageError
from mpcommit.formats import make_format
from mpcommit.formats.csv_encoding import CsvQuoting
from mpcommit.formats.java_text import DateTimePattern, java_floating_text

GOLDEN = json.loads((Path(__file__).parent / "data" / "spark_csv_golden.json").read_text())
#: Spark trims whitespace when writing unless told not to; so does mpcommit (see csv_encoding).
SPARK_TRIM = {"ignoreLeadingWhiteSpace": "true", "ignoreTrailingWhiteSpace": "true"}
KEEP = {"ignoreLeadingWhiteSpace": "false", "ignoreTrailingWhiteSpace": "false"}


def encode(options: dict[str, Any], batch: pa.RecordBatch) -> str:
    fmt = make_format("csv", options)
    fmt.check_schema(batch.schema)
    out = io.BytesIO()
    writer = fmt.open(out, batch.schema)
    writer.write(batch)
    writer.close()
    return out.getvalue().decode()


def strings_batch(values: list[str | None]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(len(values)), pa.int32()), "s": pa.array(values, pa.string())})


def as_spark_writes(options: dict[str, str]) -> dict[str, str]:
    """The options under which mpcommit must write Spark's bytes: the same ones (both trim by default)."""
    return options


# ---------------------------------------------------------------- Spark's bytes
#: Cases where mpcommit writes something else on purpose, because Spark's bytes do not read back (asserted below).
DELIBERATE = {"quote_single", "quote_single_escape_bs", "f_quote_single_nullv", "lineSep_crlf", "f_crlf"}
#: Cases that keep whitespace (ignore*WhiteSpace=false): Spark leaves it bare, mpcommit quotes it.
KEPT_WHITESPACE = {"notrim": {15: " lead", 16: "trail ", 17: " both ", 18: "\ttab", 32: " "}}
KEPT_WHITESPACE["c2e_hash_notrim"] = KEPT_WHITESPACE["notrim"]


@pytest.mark.parametrize("case", [c for c in GOLDEN["strings"] if c["name"] not in DELIBERATE], ids=lambda c: c["name"])
def test_strings_as_spark_writes_them(case: dict[str, Any]) -> None:
    expected = case["spark"]
    for row, value in KEPT_WHITESPACE.get(case["name"], {}).items():
        # Kept whitespace is quoted here, so that readers that trim unquoted fields keep it too.
        expected = expected.replace(f"\n{row},{value}\n", f'\n{row},"{value}"\n')
    assert encode(as_spark_writes(case["options"]), strings_batch(case["values"])) == expected


@pytest.mark.parametrize("case", GOLDEN["headers"]["cases"], ids=lambda c: c["name"])
def test_header_names_are_quoted_like_values(case: dict[str, Any]) -> None:
    columns = GOLDEN["headers"]["columns"]
    batch = pa.record_batch([pa.array([i + 1], pa.int32()) for i in range(len(columns))], names=columns)
    got = encode(as_spark_writes(case["options"]), batch)
    if "ignoreLeadingWhiteSpace" in case["options"]:
        # Kept whitespace is quoted here, so that readers that trim keep it too (Spark leaves it bare).
        assert got == case["spark"].replace(", lead,", '," lead",')
    else:
        assert got == case["spark"]


def test_empty_string_is_two_of_the_configured_quote() -> None:
    # Spark writes `""` whatever the quote, which reads back as the two characters `""` when quote is `'`.
    case = next(c for c in GOLDEN["strings"] if c["name"] == "f_quote_single_nullv")
    got = encode(as_spark_writes(case["options"]), strings_batch(case["values"]))
    assert got == case["spark"].replace('\n15,""\n', "\n15,''\n")


def test_crlf_line_separator_leaves_line_breaks_in_values_alone() -> None:
    # Spark turns a value's \n into \r\n under lineSep=\r\n (it then reads back as \r\n); the value is kept here.
    case = next(c for c in GOLDEN["strings"] if c["name"] == "f_crlf")
    got = encode(case["options"], strings_batch(case["values"]))
    assert got == case["spark"].replace("line\r\nbreak", "line\nbreak").replace("crlf\r\r\nx", "crlf\r\nx")


def test_whitespace_is_trimmed_as_spark_does_unless_kept_and_then_quoted() -> None:
    values = [" lead", "trail ", " both ", "\ttab", " ", "in side", "x\x00"]
    trimmed = '0,lead\n1,trail\n2,both\n3,tab\n4,""\n5,in side\n6,x\x00\n'  # Spark's own bytes
    assert encode({}, strings_batch(values)) == trimmed, "Spark's default: trimmed"
    assert encode(SPARK_TRIM, strings_batch(values)) == trimmed
    kept = encode(KEEP, strings_batch(values))
    assert kept == '0," lead"\n1,"trail "\n2," both "\n3,"\ttab"\n4," "\n5,in side\n6,x\x00\n'
    assert encode({"ignoreTrailingWhiteSpace": "false"}, strings_batch(values)).splitlines()[:2] == ["0,lead", '1,"trail "']


# ---------------------------------------------------------------- Spark's writer rules, value by value
def reference_field(value: str | None, q: CsvQuoting) -> str:
    """One field as univocity's CsvWriter lays it out (as Spark configures it: input not escaped, unquoted values
    not escaped), with mpcommit's two deliberate changes: kept whitespace is quoted, an empty string is two quotes."""
    if value is None:
        return q.null_text
    if q.trim_leading:
        value = value.lstrip("".join(chr(c) for c in range(1, 33)))
    if q.trim_trailing:
        value = value.rstrip("".join(chr(c) for c in range(1, 33)))
    if value == "":
        return q.quote * 2 if q.empty_value is None else q.empty_value
    triggers = set(q.sep if len(q.sep) == 1 else "") | set("\n\r") | set(q.line_sep) | ({q.quote} if q.escape_quotes else set())
    quoted = (q.quote_all or value.startswith(q.quote) or any(c in triggers for c in value)
              or (len(q.sep) > 1 and q.sep in value)
              or (not q.trim_leading and value[0] <= " " and value[0] != "\0")
              or (not q.trim_trailing and value[-1] <= " " and value[-1] != "\0"))
    if not quoted:
        return value
    out = []
    for c in value:
        if c == q.quote:
            out.append(q.escape + c)
        elif c == q.escape and q.escape_escape is not None:
            out.append(q.escape_escape + c)
        else:
            out.append(c)
    return q.quote + "".join(out) + q.quote


QUOTINGS = [
    CsvQuoting(),
    CsvQuoting(escape='"', escape_escape=None),
    CsvQuoting(escape_quotes=False),
    CsvQuoting(quote_all=True, null_value="NULL"),
    CsvQuoting(quote="'", trim_leading=True, trim_trailing=True),
    CsvQuoting(escape_escape="#", sep=";"),
    CsvQuoting(escape_escape='"'),  # the odd one: the escape's escape is the quote itself
    CsvQuoting(escape="#", escape_escape="#", sep="||", line_sep="\r\n"),
    CsvQuoting(sep="\t", line_sep="|", empty_value="EMPTY"),
]
ALPHABET = ['"', "'", "\\", "#", ",", ";", "|", "\t", "\n", "\r", " ", "a", "b", "ü", "😀", "\0"]


@pytest.mark.parametrize("quoting", QUOTINGS, ids=repr)
def test_vectorised_fields_equal_the_rules_value_by_value(quoting: CsvQuoting) -> None:
    rng = random.Random(16)
    values: list[str | None] = [None, "", " ", '"', "\\", "a"]
    values += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
    got = quoting.fields(pa.array(values, pa.string())).to_pylist()
    want = [reference_field(v, quoting) for v in values]
    assert got == want


# ---------------------------------------------------------------- values as the JVM prints them
def types_batch(time_zone: str = "UTC") -> pa.RecordBatch:
    """The DataFrame of the golden 'types' cases, as Spark hands it to Python."""
    utc = dt.timezone.utc
    ts = [dt.datetime(2024, 6, 15, 1, 2, 3, 456789, tzinfo=utc), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
          dt.datetime(2024, 1, 1, tzinfo=utc), dt.datetime(1900, 1, 1, 0, 0, 0, 1000, tzinfo=utc), dt.datetime(1, 1, 1, tzinfo=utc),
          dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc), dt.datetime(2024, 3, 31, 1, 30, tzinfo=utc)]
    dbl = [0.0, -0.0, 1.0, 0.1, 1e20, 1e-5, 1e7, 9999999.0, 0.001, 0.00099, 123456789.123, math.nan, math.inf, -math.inf,
           1.7976931348623157e308, 5e-324, 100.0, 1e21, 1e22, 12345678.9, 2.5e-7, 1e16, -1.5e-3, 1 / 3]
    n = len(dbl)
    pad = [None] * (n - len(ts))
    D = decimal.Decimal
    return pa.record_batch([
        pa.array(range(n), pa.int32()),
        pa.array(ts + pad, pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us", tz=time_zone)),
        pa.array([t.replace(tzinfo=None) for t in ts] + pad, pa.timestamp("us")),
        pa.array([t.date() for t in ts] + pad, pa.date32()),
        pa.array(dbl, pa.float64()),
        pa.array(dbl, pa.float32()),
        pa.array([D(i * 12345) / 100 for i in range(n)], pa.decimal128(10, 2)),
        pa.array([(D(i) / 10**12).quantize(D(1).scaleb(-12)) for i in range(n)], pa.decimal128(20, 12)),
        pa.array([D(i) * 10**20 for i in range(n)], pa.decimal128(38, 0)),
        pa.array([(i % 2 == 0) if i % 5 else None for i in range(n)], pa.bool_()),
        pa.array([i - 5 for i in range(n)], pa.int16()),
        pa.array([i * 10**12 for i in range(n)], pa.int64()),
    ], names=["id", "ts", "ntz", "d", "dbl", "f", "dec", "dsmall", "dbig", "b", "sh", "l"])


def float32(text: str) -> float:
    return struct.unpack("f", struct.pack("f", float(text.replace('"', ""))))[0]


@pytest.mark.parametrize("case", GOLDEN["types"], ids=lambda c: c["name"])
def test_types_as_spark_writes_them(case: dict[str, Any]) -> None:
    got = encode(case["options"], types_batch()).split("\n")
    want = case["spark"].split("\n")
    assert len(got) == len(want)
    for ours, spark in zip(got, want):
        ours_fields, spark_fields = ours.split(","), spark.split(",")
        for column, (a, b) in enumerate(zip(ours_fields, spark_fields)):
            if a == b:
                continue
            # Java 17's Float.toString is not always the shortest text, and Double.MIN_VALUE prints as 4.9E-324:
            # both read back to the very same number.
            assert column in (4, 5), f"column {column}: {a!r} != Spark's {b!r}"
            assert (float32(a) == float32(b)) if column == 5 else (float(a.strip('"')) == float(b.strip('"')))


def test_doubles_in_javas_layout() -> None:
    values = [0.0, -0.0, 1.0, 100.0, 0.001, 0.00099, 1e7, 9999999.0, 1e20, 1.5e300, 2.5e-7, 1.7e12, 123456789.0,
              -1e-4, math.nan, math.inf, -math.inf, None]
    assert java_floating_text(pa.array(values, pa.float64())).to_pylist() == [
        "0.0", "-0.0", "1.0", "100.0", "0.001", "9.9E-4", "1.0E7", "9999999.0", "1.0E20", "1.5E300", "2.5E-7",
        "1.7E12", "1.23456789E8", "-1.0E-4", "NaN", "Infinity", "-Infinity", None,
    ]
    rng = random.Random(7)
    randoms = [rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30) for _ in range(2000)]
    assert [float(t) for t in java_floating_text(pa.array(randoms)).to_pylist()] == randoms  # read back exactly


@pytest.mark.parametrize("pattern,kind,zone,expected", [
    ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timestamp", "UTC", "2024-06-15T01:02:03.456Z"),
    ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timestamp", "Asia/Kolkata", "2024-06-15T06:32:03.456+05:30"),
    ("yyyy-MM-dd HH:mm:ss.SSSSSS Z", "timestamp", "UTC", "2024-06-15 01:02:03.456789 +0000"),
    ("yy-M-d H:m:s.S X x xx xxx XX", "timestamp", "America/Los_Angeles", "24-6-14 18:2:3.4 -07 -07 -0700 -07:00 -0700"),
    ("EEE, d MMM yyyy hh:mm a", "timestamp", "UTC", "Sat, 15 Jun 2024 01:02 AM"),
    ("'day' D 'of' yyyy '(''quoted'')'", "timestamp", "UTC", "day 167 of 2024 ('quoted')"),
    ("yyyy-MM-dd'T'HH:mm:ss[.SSS][XXX]", "timestamp_ntz", None, "2024-06-15T01:02:03.456"),
])
def test_date_time_patterns(pattern: str, kind: str, zone: str | None, expected: str) -> None:
    instant = dt.datetime(2024, 6, 15, 1, 2, 3, 456789, tzinfo=dt.timezone.utc)
    if kind == "timestamp":
        values = pa.array([instant, None], pa.timestamp("us", tz="UTC"))
    else:
        values = pa.array([instant.replace(tzinfo=None), None], pa.timestamp("us"))
    formatted = DateTimePattern(pattern, kind=kind, option="timestampFormat").format(values, zone=zone)
    assert formatted.to_pylist() == [expected, None]


def test_time_zone_option_and_the_columns_own_zone() -> None:
    batch = pa.record_batch({"ts": pa.array([dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)],
                                            pa.timestamp("us", tz="Europe/Paris"))})
    assert encode({}, batch) == "2024-01-01T13:00:00.000+01:00\n"  # Spark hands Python the session time zone
    assert encode({"timeZone": "America/New_York"}, batch) == "2024-01-01T07:00:00.000-05:00\n"
    assert encode({"timeZone": "GMT+08:00"}, batch) == "2024-01-01T20:00:00.000+08:00\n"
    # A session time zone spelt the Java way reaches Python as the column's zone.
    java_zone = pa.record_batch({"ts": batch.column(0).cast(pa.timestamp("us", tz="GMT+08:00"))})
    assert encode({}, java_zone) == "2024-01-01T20:00:00.000+08:00\n"
    assert encode({}, pa.record_batch({"ts": batch.column(0).cast(pa.timestamp("us", tz="Etc/UTC"))})) == (
        "2024-01-01T12:00:00.000Z\n")


def test_a_schema_without_columns_is_refused() -> None:
    with pytest.raises(UsageError, match="at least one column"):
        make_format("csv").check_schema(pa.schema([]))
