"""File formats: Arrow batches in, bytes out that independent readers (pyarrow, gzip, json) read back. No server."""

from __future__ import annotations

import base64
import bz2
import datetime as dt
import decimal
import gzip
import io
import json
import pickle

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq
import pytest

from mpcommit.errors import UsageError
from mpcommit.formats import CsvFormat, JsonFormat, ParquetFormat, TextFormat, make_format

UTC = dt.timezone.utc


class Sink(io.RawIOBase):
    """A binary file object standing in for the multipart writer: records bytes and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # noqa: ANN001
        self.data += bytes(b)
        return len(b)

    def tell(self) -> int:
        return len(self.data)


def write_file(fmt, batches, schema=None) -> tuple[bytes, int]:  # noqa: ANN001
    sink = Sink()
    schema = schema or batches[0].schema
    fmt.check_schema(schema)
    writer = fmt.open(sink, schema)
    for b in batches:
        writer.write(b)
    writer.close()
    assert not sink.closed, "a format writer must leave the multipart writer open: closing it is the caller's"
    return bytes(sink.data), writer.rows


def sample_batch() -> pa.RecordBatch:
    return pa.record_batch({
        "id": pa.array([1, 2, 3, None], pa.int64()),
        "name": ["plain", "comma, \"quoted\"\nnewline", "", None],
        "uni": ["grüße", "日本", "emoji 🙂", None],
        "ts": pa.array([dt.datetime(2024, 6, 15, 10, 30, tzinfo=UTC), dt.datetime(2024, 6, 14, 0, 0, 0, 123000, tzinfo=UTC),
                        None, dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2024, 6, 15), None, dt.date(2024, 1, 1), dt.date(1970, 1, 1)], pa.date32()),
        "amount": pa.array([decimal.Decimal("1.50"), decimal.Decimal("-0.01"), None, decimal.Decimal("12345678.99")],
                           pa.decimal128(10, 2)),
        "ok": [True, False, None, True],
        "x": [1.5, -0.0, None, 1e300],
    })


# ---------------------------------------------------------------- extensions and options
@pytest.mark.parametrize("name,options,ext", [
    ("parquet", None, "snappy.parquet"),
    ("parquet", {"compression": "zstd"}, "zstd.parquet"),
    ("parquet", {"compression": "gzip"}, "gz.parquet"),
    ("parquet", {"compression": "none"}, "parquet"),
    ("parquet", {"compression": "uncompressed"}, "parquet"),
    ("csv", None, "csv"),
    ("csv", {"compression": "gzip"}, "csv.gz"),
    ("csv", {"COMPRESSION": "bzip2"}, "csv.bz2"),
    ("json", None, "json"),
    ("json", {"codec": "gzip"}, "json.gz"),
    ("json", {"compression": "zstd"}, "json.zst"),
    ("text", None, "txt"),
    ("text", {"compression": "gzip"}, "txt.gz"),
    ("PARQUET", None, "snappy.parquet"),
])
def test_extension(name: str, options: dict | None, ext: str) -> None:
    assert make_format(name, options).extension == ext


@pytest.mark.parametrize("name,options,message", [
    ("orc", None, "unsupported format 'orc'"),
    ("delta", None, "unsupported format"),
    ("parquet", {"compression": "lzo"}, "does not support compression 'lzo'"),
    ("csv", {"compression": "snappy"}, "does not support compression 'snappy'"),
    ("csv", {"headr": "true"}, "does not know option(s) 'headr'"),
    ("csv", {"headr": "true", "delimitr": ";"}, "did you mean 'header' for 'headr', 'delimiter' for 'delimitr'"),
    ("csv", {"header": "maybe"}, "must be true or false"),
    ("csv", {"sep": ""}, "must be one or more characters"),
    ("csv", {"quote": ""}, "must be one character"),
    ("csv", {"escape": "ab"}, "must be one character"),
    ("csv", {"lineSep": "abc"}, "one or two characters"),
    ("csv", {"encoding": "UTF-16"}, "'UTF-16' is not supported: mpcommit writes CSV in UTF-8 only"),
    ("csv", {"charset": "ISO-8859-1"}, "UTF-8 only"),
    ("csv", {"timestampFormat": "yyyy-MM-dd zzz"}, "pattern letter 'z'"),
    ("csv", {"dateFormat": "yyyy-MM-dd HH"}, "a time of day"),
    ("csv", {"timestampNTZFormat": "yyyy-MM-dd XXX"}, "a time zone offset"),
    ("csv", {"timeZone": "Mars/Olympus"}, "not in pyarrow's time zone database"),
    ("csv", {"sep": ";", "delimiter": ","}, "mean the same"),
    ("csv", {"header": "true", "HEADER": "false"}, "given twice"),
    ("parquet", {"parquet.block.size": "-1"}, "must be an integer >= 1"),
    ("text", {"lineSep": ""}, "must not be empty"),
    ("json", {"header": "true"}, "does not know option(s) 'header'"),
])
def test_bad_format_or_option_is_a_usage_error(name: str, options: dict | None, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_format(name, options)


def test_options_take_pyspark_spellings_and_values() -> None:
    fmt = make_format("csv", {"Header": True, "SEP": "|", "lineSep": "\r\n", "nullValue": "NULL", "quoteAll": "yes"})
    assert fmt == CsvFormat(header=True, sep="|", line_sep="\r\n", null_value="NULL", quote_all=True)
    assert make_format("csv", {"delimiter": "\t"}).sep == "\t"


@pytest.mark.parametrize("fmt", [ParquetFormat(), CsvFormat(header=True, compression="gzip"), JsonFormat(), TextFormat()])
def test_formats_are_small_picklable_values(fmt) -> None:  # noqa: ANN001
    again = pickle.loads(pickle.dumps(fmt))
    assert again == fmt and again.extension == fmt.extension


# ---------------------------------------------------------------- parquet
@pytest.mark.parametrize("compression", ["snappy", "zstd", "gzip", "none"])
def test_parquet_round_trip_keeps_rows_and_types(compression: str) -> None:
    batch = sample_batch()
    nested = pa.record_batch({
        "tags": pa.array([["a", "b"], [], None, ["c"]], pa.list_(pa.string())),
        "attrs": pa.array([{"k": 1}, None, {"k": None}, {"k": 4}], pa.struct([("k", pa.int32())])),
        "m": pa.array([[("a", 1)], None, [], [("b", 2), ("c", 3)]], pa.map_(pa.string(), pa.int64())),
        "raw": pa.array([b"\x00\x01", None, b"", b"\xff"], pa.binary()),
    })
    combined = pa.RecordBatch.from_arrays(batch.columns + nested.columns, names=batch.schema.names + nested.schema.names)
    data, rows = write_file(make_format("parquet", {"compression": compression}), [combined, combined])
    table = pq.read_table(pa.BufferReader(data))
    assert rows == 8
    assert table.schema.equals(combined.schema)
    assert table.to_pylist() == combined.to_pylist() * 2
    codec = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0).column(0).compression
    assert codec.lower() == {"none": "uncompressed"}.get(compression, compression)


def test_parquet_collects_batches_into_row_groups_of_the_configured_size() -> None:
    batch = pa.record_batch({"v": pa.array(range(10_000), pa.int64())})  # 80,000 bytes of Arrow data
    fmt = make_format("parquet", {"parquet.block.size": str(3 * batch.nbytes)})
    sink = Sink()
    writer = fmt.open(sink, batch.schema)
    peak = 0
    for _ in range(10):
        writer.write(batch)
        peak = max(peak, writer.buffered_bytes)
    writer.close()
    meta = pq.ParquetFile(pa.BufferReader(bytes(sink.data))).metadata
    # 10 batches in groups of 3: 3 + 3 + 3 + 1 -- not one row group per batch (pyarrow's write_batch default).
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [30_000, 30_000, 30_000, 10_000]
    assert peak < 3 * batch.nbytes, "the format buffer must be flushed when it reaches the row group size"
    assert writer.buffered_bytes == 0


def _dictionary_encoded(data: bytes) -> dict[str, bool]:
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0)
    return {meta.column(i).path_in_schema: any("DICTIONARY" in e for e in meta.column(i).encodings)
            for i in range(meta.num_columns)}


def test_parquet_drops_dictionaries_that_do_not_pay_as_parquet_mr_does() -> None:
    """Unique ids and random doubles are written plain (pyarrow alone gives them a dictionary that only adds
    bytes); repeated values, categories and nested columns keep theirs; every row reads back."""
    import numpy as np

    rows = 26_843  # one of the real-peers benchmark's 1,000 files
    rng = np.random.default_rng(7)
    batch = pa.record_batch({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "r": pa.array(rng.random(rows)),
        "few": pa.array(rng.integers(0, 10, rows, dtype=np.int32)),
        "cat": pa.array(rng.choice(["red", "green", "blue"], rows)),
        "uuid": pa.array([f"{i:032x}" for i in range(rows)]),
        "ts": pa.array(np.full(rows, 1_700_000_000_000_000, dtype=np.int64), pa.timestamp("us", tz="UTC")),
        "attrs": pa.array([{"k": int(i % 3)} for i in range(rows)], pa.struct([("k", pa.int32())])),
    })
    data, _ = write_file(make_format("parquet"), [batch])
    assert _dictionary_encoded(data) == {"id": False, "r": False, "few": True, "cat": True, "uuid": False,
                                         "ts": True, "attrs.k": True}
    assert pq.read_table(pa.BufferReader(data)).to_pylist() == pa.Table.from_batches([batch]).to_pylist()
    plain_buf = io.BytesIO()
    pq.write_table(pa.Table.from_batches([batch]), plain_buf, compression="snappy")  # pyarrow's defaults
    assert len(data) < 0.9 * len(plain_buf.getvalue())


def test_parquet_with_every_dictionary_kept_and_no_rows() -> None:
    """All columns worth a dictionary: pyarrow's default; no rows at all: a valid file with the schema."""
    batch = pa.record_batch({"few": pa.array([1, 2] * 500, pa.int64()), "s": ["a", "b"] * 500})
    data, _ = write_file(make_format("parquet"), [batch])
    assert _dictionary_encoded(data) == {"few": True, "s": True}
    empty, rows = write_file(make_format("parquet"), [], schema=batch.schema)
    assert rows == 0 and pq.read_table(pa.BufferReader(empty)).schema.equals(batch.schema)


@pytest.mark.parametrize(("distinct", "dtype"), [
    (d, t) for d in (1, 10, 1_000, 20_000, 131_072) for t in ("int64", "int32", "int16", "float64", "float32")
    if not (t == "int16" and d > 32_767)  # more distinct values than an int16 holds
])
def test_parquet_distinct_estimate_is_within_three_percent(distinct: int, dtype: str) -> None:
    import numpy as np

    from mpcommit.formats.parquet import _distinct_estimate

    rng = np.random.default_rng(distinct)
    values = rng.permutation(np.arange(131_072) % distinct).astype(dtype)
    column = pa.chunked_array([pa.array(values)])
    exact = len(np.unique(values))
    assert abs(_distinct_estimate(column, np.dtype(dtype).itemsize) - exact) <= max(1, 0.03 * exact)


def test_parquet_row_groups_of_slices_are_cut_by_their_own_bytes() -> None:
    """Slices of one large batch carry its whole buffers: the row groups are still cut by the slices' own data."""
    big = pa.record_batch({"v": pa.array(range(100_000), pa.int64())})
    slices = [big.slice(i * 10_000, 10_000) for i in range(10)]
    fmt = make_format("parquet", {"parquet.block.size": str(3 * slices[0].nbytes)})
    sink = Sink()
    writer = fmt.open(sink, big.schema)
    for piece in slices:
        writer.write(piece)
    writer.close()
    meta = pq.ParquetFile(pa.BufferReader(bytes(sink.data))).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [30_000, 30_000, 30_000, 10_000]


@pytest.mark.parametrize("rows", [1, 300, 2_700, 4_096])
def test_parquet_small_files_judge_dictionaries_as_an_exact_count_per_column_would(rows: int) -> None:
    """A small file's fixed-width columns are counted together, by their bits; the decisions are the ones an exact
    count of each column (Arrow's count_distinct: bitwise, 0.0 and -0.0 apart) gives."""
    import math

    import numpy as np
    import pyarrow.compute as pc

    from mpcommit.formats.parquet import dictionary_columns

    rng = np.random.default_rng(rows)
    zeros = np.where(rng.random(rows) < 0.5, 0.0, -0.0)
    table = pa.table({
        "id": np.arange(rows, dtype=np.int64), "x": rng.random(rows), "few": rng.integers(0, 7, rows).astype(np.int8),
        "half": (np.arange(rows) // 2).astype(np.int32), "signed_zeros": zeros,
        "nan": np.where(rng.random(rows) < 0.5, np.nan, 1.0), "ts": pa.array(np.arange(rows) % 5, pa.timestamp("ms")),
        "with_nulls": pa.array([None if i % 3 else i % 4 for i in range(rows)], pa.int64()),
        "s": pa.array([str(i % 3) for i in range(rows)]),
    })

    def pays(name: str) -> bool:
        column = table.column(name)
        values = len(column) - column.null_count
        if values == 0:
            return True
        if pa.types.is_string(column.type):
            return True  # decided by the variable-width path, not under test here
        distinct = pc.count_distinct(column, mode="only_valid").as_py()
        width = column.type.bit_width // 8
        return distinct * width + values * max(1, math.ceil(math.log2(max(distinct, 2)))) / 8 < values * width

    chosen = dictionary_columns(table)
    kept = set(table.schema.names) if chosen is True else set(chosen)
    assert {n for n in table.schema.names if n != "s" and pays(n)} == kept - {"s"}
    assert ("few" in kept) == (rows >= 300) and "id" not in kept


def test_parquet_refuses_types_without_a_parquet_form() -> None:
    schema = pa.schema([("ok", pa.int64()), ("iv", pa.month_day_nano_interval())])
    with pytest.raises(UsageError, match="parquet cannot hold column 'iv'"):
        make_format("parquet").check_schema(schema)


# ---------------------------------------------------------------- csv
def csv_types(batch: pa.RecordBatch) -> pcsv.ConvertOptions:
    return pcsv.ConvertOptions(column_types=batch.schema, strings_can_be_null=True, quoted_strings_can_be_null=False)


#: Spark's CSV dialect: a backslash escapes a quote (or itself) inside quotes; no doubled quotes.
SPARK_CSV = pcsv.ParseOptions(escape_char="\\", double_quote=False, newlines_in_values=True)


@pytest.mark.parametrize("compression,decompress", [("none", lambda b: b), ("gzip", gzip.decompress),
                                                    ("bzip2", bz2.decompress)])
def test_csv_round_trip_with_header(compression: str, decompress) -> None:  # noqa: ANN001
    batch = sample_batch().drop_columns(["x"])  # 1e300 formatting aside, floats are covered below
    data, rows = write_file(make_format("csv", {"header": "true", "compression": compression}), [batch, batch])
    plain = decompress(data)
    assert rows == 8
    assert plain.startswith(b'id,name,uni,ts,day,amount,ok\n'), "Spark quotes header names only when they need it"
    assert b'"comma, \\"quoted\\"\nnewline"' in plain and b"2024-06-14T00:00:00.123Z" in plain
    table = pcsv.read_csv(io.BytesIO(plain), parse_options=SPARK_CSV, convert_options=csv_types(batch))
    assert table.to_pylist() == batch.to_pylist() * 2


def test_csv_defaults_are_sparks_no_header_comma_quote_when_needed() -> None:
    batch = pa.record_batch({"a": [1, None], "b": ["x,y", ""]})
    data, _ = write_file(make_format("csv"), [batch])
    # A null is an empty field, an empty string a quoted one, so that they read back apart.
    assert data == b'1,"x,y"\n,""\n'


def test_csv_separator_line_separator_and_null_value() -> None:
    batch = pa.record_batch({"a": [1, None], "b": ["x;y", "z"]})
    data, _ = write_file(make_format("csv", {"sep": ";", "lineSep": "\r\n", "nullValue": "NULL"}), [batch])
    assert data == b'1;"x;y"\r\nNULL;z\r\n'


def test_csv_quotes_and_backslashes_are_escaped_as_sparks_reader_expects() -> None:
    values = ['say "hi"', "back\\slash", 'both \\"', "a,b\\", "line\nbreak", "cr\rx", "", None, " pad "]
    batch = pa.record_batch({"s": values})
    data, _ = write_file(make_format("csv"), [batch])
    # Quoted only where needed; inside quotes \" and \\ (Spark's escape default), never RFC 4180's "". Unquoted
    # fields are taken as they are (a backslash there escapes nothing). tests/interop reads these back with Spark.
    # Whitespace at either end is trimmed, as Spark's writer trims it by default (see csv_encoding).
    assert data.decode() == ('"say \\"hi\\""\nback\\slash\n"both \\\\\\""\n"a,b\\\\"\n"line\nbreak"\n"cr\rx"\n""\n\n'
                             'pad\n')


def test_csv_floats_are_spelled_as_spark_reads_them() -> None:
    batch = pa.record_batch({"x": pa.array([2.0, -0.0, 0.5, 1e20, float("nan"), float("inf"), float("-inf"), None]),
                             "f": pa.array([3.0, 1.5, None, None, None, None, None, None], pa.float32())})
    data, _ = write_file(make_format("csv"), [batch])
    # Whole numbers keep ".0" (else Spark's inferSchema makes an integer column); nan/inf and exponents as Java
    # spells them (Double.toString, as Spark's writer does).
    assert data.decode().splitlines() == ["2.0,3.0", "-0.0,1.5", "0.5,", "1.0E20,", "NaN,", "Infinity,", "-Infinity,", ","]


def test_csv_quote_all_quotes_every_value_and_the_null_value() -> None:
    data, _ = write_file(make_format("csv", {"quoteAll": "true", "header": "true"}),
                         [pa.record_batch({"a": [1, None], "b": ['x"', "y"]})])
    # As Spark 4.3 writes it: quoteAll quotes nullValue too (an empty one as ""), which its reader takes for null.
    assert data == b'"a","b"\n"1","x\\""\n"","y"\n'


def test_csv_zstd_stream_is_a_complete_zstd_frame() -> None:
    batch = pa.record_batch({"a": list(range(1000))})
    data, _ = write_file(make_format("csv", {"compression": "zstd"}), [batch])
    # No zstd module in the standard library of 3.11: pyarrow's reader, a separate code path from its writer.
    text = pa.CompressedInputStream(pa.BufferReader(data), "zstd").read()
    assert text.decode().split() == [str(i) for i in range(1000)]


@pytest.mark.parametrize("column,type_,why", [
    ("tags", pa.list_(pa.string()), "not structs, arrays or maps"),
    ("attrs", pa.struct([("k", pa.int32())]), "not structs, arrays or maps"),
    ("m", pa.map_(pa.string(), pa.int64()), "not structs, arrays or maps"),
    ("raw", pa.binary(), "cannot carry arbitrary bytes"),
    ("wait", pa.duration("us"), "intervals"),
])
def test_csv_refuses_types_it_cannot_hold(column: str, type_: pa.DataType, why: str) -> None:
    schema = pa.schema([("id", pa.int64()), (column, type_)])
    with pytest.raises(UsageError, match=f"csv cannot hold column '{column}'.*{why}"):
        make_format("csv").check_schema(schema)


# ---------------------------------------------------------------- json lines
def test_json_lines_values_as_spark_writes_them() -> None:
    batch = pa.record_batch({
        "id": [1, None],
        "ts": pa.array([dt.datetime(2024, 6, 15, 10, 30, 0, 500, tzinfo=UTC), None], pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2024, 6, 15), None], pa.date32()),
        "amount": pa.array([decimal.Decimal("1.50"), None], pa.decimal128(10, 2)),
        "raw": pa.array([b"\x00\xff", None], pa.binary()),
        "m": pa.array([[("a", 1)], None], pa.map_(pa.string(), pa.int64())),
        "s": pa.array([{"k": None, "j": 2}, None], pa.struct([("k", pa.int32()), ("j", pa.int32())])),
        "f": [float("nan"), float("-inf")],
    })
    data, rows = write_file(make_format("json"), [batch])
    lines = data.decode().splitlines()
    assert rows == 2 and len(lines) == 2 and data.endswith(b"\n")
    assert lines[0] == ('{"id":1,"ts":"2024-06-15T10:30:00.000500Z","day":"2024-06-15","amount":1.50,'
                        f'"raw":"{base64.b64encode(bytes([0, 255])).decode()}","m":{{"a":1}},"s":{{"j":2}},"f":"NaN"}}')
    # ignoreNullFields (Spark's default): null fields are left out, also inside structs.
    assert json.loads(lines[1]) == {"f": "-Infinity"}


def test_json_keeps_null_fields_when_asked() -> None:
    batch = pa.record_batch({"a": [None], "s": pa.array([{"k": None}], pa.struct([("k", pa.int32())]))})
    data, _ = write_file(make_format("json", {"ignoreNullFields": "false"}), [batch])
    assert json.loads(data) == {"a": None, "s": {"k": None}}


def test_json_round_trip_through_pyarrows_reader_gzip() -> None:
    batch = sample_batch().drop_columns(["amount"])  # pyarrow's JSON reader has no decimal parsing
    data, _ = write_file(make_format("json", {"compression": "gzip", "ignoreNullFields": "false"}), [batch] * 3)
    # pyarrow's JSON reader parses timestamps but not dates: read the day as text and cast it.
    as_read = batch.schema.set(batch.schema.get_field_index("day"), pa.field("day", pa.string()))
    table = pjson.read_json(io.BytesIO(gzip.decompress(data)), parse_options=pjson.ParseOptions(explicit_schema=as_read))
    table = table.set_column(table.schema.get_field_index("day"), "day", table.column("day").cast(pa.date32()))
    assert table.to_pylist() == batch.to_pylist() * 3


def test_json_refuses_intervals_even_nested() -> None:
    schema = pa.schema([("s", pa.struct([("wait", pa.duration("s"))]))])
    with pytest.raises(UsageError, match="json cannot hold column 's'"):
        make_format("json").check_schema(schema)


# ---------------------------------------------------------------- text
def test_text_writes_one_line_per_row_and_null_as_empty_line() -> None:
    batch = pa.record_batch({"value": ["first", None, "", "ünï"]})
    data, rows = write_file(make_format("text"), [batch, batch.slice(0, 1)])
    assert rows == 5
    assert data == "first\n\n\nünï\nfirst\n".encode()
    data, _ = write_file(make_format("text", {"lineSep": "|", "compression": "gzip"}), [batch])
    assert gzip.decompress(data) == "first|||ünï|".encode()


@pytest.mark.parametrize("schema,message", [
    (pa.schema([("a", pa.string()), ("b", pa.string())]), "exactly one string column .* got 2: a, b"),
    (pa.schema([("n", pa.int64())]), "'n' is int64: cast it to string"),
])
def test_text_refuses_anything_but_one_string_column(schema: pa.Schema, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        make_format("text").check_schema(schema)


# ---------------------------------------------------------------- timestamps in the text formats
def test_timestamps_are_written_as_spark_writes_them_keeping_microseconds() -> None:
    from mpcommit.formats.base import spark_timestamp_text

    moments = [dt.datetime(2024, 3, 1, 12, 30, 1, 123000), dt.datetime(2024, 3, 1, 12, 30, 1),
               dt.datetime(2024, 3, 1, 12, 30, 1, 123456), dt.datetime(1969, 12, 31, 23, 59, 59, 999999), None]
    zoned = pa.array(moments, pa.timestamp("us", tz="UTC"))
    assert spark_timestamp_text(zoned).to_pylist() == [
        "2024-03-01T12:30:01.123Z", "2024-03-01T12:30:01.000Z", "2024-03-01T12:30:01.123456Z",
        "1969-12-31T23:59:59.999999Z", None]
    # Another zone: the same instants, written in UTC.
    assert spark_timestamp_text(zoned.cast(pa.timestamp("us", tz="Asia/Kolkata"))).to_pylist()[0] == "2024-03-01T12:30:01.123Z"
    # Without a zone (Spark's TIMESTAMP_NTZ): no suffix. Whole seconds: still .SSS.
    assert spark_timestamp_text(pa.array(moments[:2], pa.timestamp("s"))).to_pylist() == [
        "2024-03-01T12:30:01.000", "2024-03-01T12:30:01.000"]
    batch = pa.record_batch({"ts": zoned})
    csv_data, _ = write_file(make_format("csv"), [batch])
    json_data, _ = write_file(make_format("json"), [batch])
    assert csv_data.decode().splitlines()[0] == "2024-03-01T12:30:01.123Z"
    assert json_data.decode().splitlines()[0] == '{"ts":"2024-03-01T12:30:01.123Z"}'


def _parquet_columns(fmt, batch):  # noqa: ANN001, ANN202
    data, _ = write_file(fmt, [batch])
    meta = pq.read_metadata(pa.BufferReader(data)).schema
    return {meta.column(i).name: (meta.column(i).physical_type, str(meta.column(i).logical_type))
            for i in range(len(meta))}, data


def test_parquet_timestamp_types_as_sparks_output_timestamp_type() -> None:
    from mpcommit.formats.parquet import ParquetFormat, TimestampType

    ts = dt.datetime(2024, 3, 1, 12, 30, 1, 123456)
    zoned = pa.record_batch({"ts": pa.array([ts], pa.timestamp("us", tz="UTC"))})
    columns, _ = _parquet_columns(ParquetFormat(timestamp_type="int96"), zoned)
    assert columns["ts"][0] == "INT96"
    columns, data = _parquet_columns(ParquetFormat(timestamp_type=TimestampType.TIMESTAMP_MILLIS), zoned)
    assert columns["ts"][0] == "INT64" and "milliseconds" in columns["ts"][1]
    assert pq.read_table(pa.BufferReader(data)).column("ts")[0].as_py() == ts.replace(microsecond=123000,
                                                                                       tzinfo=dt.timezone.utc)
    # INT96 is all or nothing in pyarrow and would make TIMESTAMP_NTZ a zoned timestamp: both stay INT64 then.
    both = pa.record_batch({"ts": pa.array([ts], pa.timestamp("us", tz="UTC")), "ntz": pa.array([ts], pa.timestamp("us"))})
    columns, _ = _parquet_columns(ParquetFormat(timestamp_type="INT96"), both)
    assert [c[0] for c in columns.values()] == ["INT64", "INT64"]
    assert "isAdjustedToUTC=false" in columns["ntz"][1] and "isAdjustedToUTC=true" in columns["ts"][1]
    with pytest.raises(UsageError, match="outputTimestampType must be INT96, TIMESTAMP_MICROS or TIMESTAMP_MILLIS"):
        ParquetFormat(timestamp_type="INT64")


@pytest.mark.parametrize("timestamp_type,read_as", [
    ("INT96", pa.timestamp("ns")),  # Spark's default; what pyarrow and polars make of Spark's own INT96 files
    ("TIMESTAMP_MICROS", pa.timestamp("us", tz="UTC")),
    ("TIMESTAMP_MILLIS", pa.timestamp("ms", tz="UTC")),
])
def test_parquet_footer_lets_readers_type_timestamps_as_in_sparks_files(timestamp_type: str,
                                                                        read_as: pa.DataType) -> None:
    """Spark hands Python its timestamps in the session's zone (here Europe/Paris); Spark's writer puts no
    ``ARROW:schema`` in the footer, so other readers type a column from its Parquet type alone. mpcommit's files
    must do the same: with the Arrow schema in the footer, pyarrow read an INT64 column in the session's zone
    where Spark's file gives UTC, and polars an INT96 one as ``Datetime(us, 'Etc/UTC')`` where Spark's gives
    ``Datetime(ns)``, so a concat of the two tables failed (issue 40)."""
    from mpcommit.formats.parquet import ParquetFormat

    instant = dt.datetime(2024, 3, 1, 12, 30, 1, 123000, tzinfo=UTC)
    zoned = pa.array([instant], pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us", tz="Europe/Paris"))
    data, _ = write_file(ParquetFormat(timestamp_type=timestamp_type), [pa.record_batch({"ts": zoned})])
    column = pq.read_table(pa.BufferReader(data)).column("ts")
    assert column.type == read_as
    assert column.cast(pa.timestamp("us", tz="UTC")).to_pylist() == [instant]
    # pyarrow types INT96 from the Parquet type alone; polars takes the Arrow schema when there is one.
    assert b"ARROW:schema" not in (pq.read_metadata(pa.BufferReader(data)).metadata or {})
