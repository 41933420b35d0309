"""The CSV cases Spark's own reader must read back as written: hostile values of every type, the rows built from
them, the writer options tried, and the rows Spark should return for each. Shared by tests/spark (files read back
locally) and tests/interop (read over s3a://)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

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
