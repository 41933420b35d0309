"""CSV as Spark writes it and reads it back, with Spark's option names and defaults.

Spark's defaults apply: no header line unless ``header`` is true, ``,`` between fields, ``\\n`` after each
row, nulls as empty fields and empty strings as ``""``. A field is quoted only when it holds the separator, a
quote or a line break (or is empty); inside quotes a quote is written ``\\"`` and a backslash ``\\\\``, Spark's
``escape`` default -- its reader does not take RFC 4180's doubled quotes (``""``) unless told to, and reads
them as part of the text. Floating-point numbers are spelled as Java spells them where it matters to Spark's
reader: ``NaN``, ``Infinity``, ``-Infinity`` (Spark reads pyarrow's ``nan``/``inf`` as null) and whole numbers
with ``.0`` (else ``inferSchema`` takes the column for an integer one). Timestamps are written as Spark writes
them (see :func:`~.base.spark_timestamp_text`: microseconds kept where Spark keeps only milliseconds); other
values in pyarrow's text forms, which Spark reads as the same values. Fields are formatted column by column with Arrow compute functions, not row by row in Python.
Like Spark, CSV refuses nested types, binary data and intervals (a CSV field holds one plain value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError
from .base import (
    TEXT_COMPRESSION,
    FileFormat,
    FormatWriter,
    Options,
    is_binary,
    is_interval,
    is_nested,
    is_string,
    open_text_stream,
    refuse_types,
    spark_timestamp_text,
)


@dataclass(frozen=True)
class CsvFormat(FileFormat):
    """CSV; options ``header``, ``sep`` (``delimiter``), ``lineSep``, ``nullValue``, ``quoteAll``, ``compression``."""

    name = "csv"
    content_type = "text/csv"

    header: bool = False
    sep: str = ","
    line_sep: str = "\n"
    null_value: str = ""
    quote_all: bool = False
    compression: str = "none"

    def __post_init__(self) -> None:
        if len(self.sep) != 1 or self.sep in '"\r\n':
            raise UsageError(f"csv option 'sep' must be one character other than a quote or line break, got {self.sep!r}")
        if self.line_sep not in ("\n", "\r\n", "\r"):
            raise UsageError(f"csv option 'lineSep' must be \\n, \\r\\n or \\r, got {self.line_sep!r}")
        if '"' in self.null_value or self.sep in self.null_value:
            raise UsageError(f"csv option 'nullValue' must not contain a quote or the separator, got {self.null_value!r}")
        if self.compression not in TEXT_COMPRESSION:
            raise UsageError(f"csv does not support compression {self.compression!r}")

    @classmethod
    def from_options(cls, options: Options) -> "CsvFormat":
        return cls(
            header=options.flag("header", default=False),
            sep=options.text("sep", "delimiter", default=","),
            line_sep=options.text("lineSep", default="\n"),
            null_value=options.text("nullValue", default=""),
            quote_all=options.flag("quoteAll", default=False),
            compression=options.compression(choices=TEXT_COMPRESSION, default="none"),
        )

    @property
    def extension(self) -> str:
        return f"csv{TEXT_COMPRESSION[self.compression][1]}"

    def check_schema(self, schema: pa.Schema) -> None:
        refuse_types(schema, fmt="csv", refuse=is_nested, why="CSV fields hold plain values, not structs, arrays or maps")
        refuse_types(schema, fmt="csv", refuse=is_binary, why="CSV is text and cannot carry arbitrary bytes")
        refuse_types(schema, fmt="csv", refuse=is_interval, why="intervals have no CSV text form that reads back")
        # Whatever else has no text form in Arrow says so when an empty batch is formatted.
        try:
            _fields(self, pa.RecordBatch.from_pylist([], schema=schema))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UsageError(f"csv cannot hold this schema: {exc}. Nothing was written.") from None

    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        return _CsvFileWriter(sink, schema, self)


class _CsvFileWriter(FormatWriter):
    def __init__(self, sink: BinaryIO, schema: pa.Schema, fmt: CsvFormat):
        self._stream = open_text_stream(sink, TEXT_COMPRESSION[fmt.compression][0])
        self._fmt = fmt
        self._eol = fmt.line_sep.encode()
        self.rows = 0
        if fmt.header:
            names = _quote(pa.array(schema.names, pa.string()), fmt)
            self._stream.write(fmt.sep.join(names.to_pylist()).encode() + self._eol)

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        fields = [pc.fill_null(f, self._fmt.null_value) for f in _fields(self._fmt, batch)]
        if fields:
            lines = pc.binary_join_element_wise(*fields, self._fmt.sep)
        else:
            lines = pa.array([""] * batch.num_rows, pa.string())  # only partition columns: one empty line a row
        text = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines), self._fmt.line_sep)
        self._stream.write(text[0].as_buffer())
        self._stream.write(self._eol)
        self.rows += batch.num_rows

    def close(self) -> None:
        self._stream.close()  # the compressor's trailer; the multipart writer below stays open


def _fields(fmt: CsvFormat, batch: pa.RecordBatch) -> list[pa.Array]:
    """Each column as the text of its CSV fields (nulls stay null)."""
    out = []
    for values in batch.columns:
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        if is_string(values.type):
            out.append(_quote(values.cast(pa.string()), fmt))
            continue
        if pa.types.is_floating(values.type):
            text = _float_text(values)
        elif pa.types.is_timestamp(values.type):
            text = spark_timestamp_text(values)
        else:
            text = pc.cast(values, pa.string())
        out.append(_quote(text, fmt) if fmt.quote_all else text)
    return out


def _float_text(values: pa.Array) -> pa.Array:
    text = pc.cast(values, pa.string())
    whole = pc.match_substring_regex(text, r"^-?[0-9]+$")
    text = pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)
    text = pc.if_else(pc.is_nan(values), "NaN", text)
    infinite = pc.is_inf(values)
    text = pc.if_else(pc.and_(infinite, pc.greater(values, 0)), "Infinity", text)
    return pc.if_else(pc.and_(infinite, pc.less(values, 0)), "-Infinity", text)


def _quote(text: pa.Array, fmt: CsvFormat) -> pa.Array:
    """Quote the fields that need it (all with ``quoteAll``), escaping as Spark's reader expects."""
    escaped = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
    quoted = pc.binary_join_element_wise('"', escaped, '"', "")
    if fmt.quote_all:
        return quoted
    needs = pc.or_(pc.match_substring_regex(text, f"[{re.escape(fmt.sep)}\"\r\n]"), pc.equal(pc.utf8_length(text), 0))
    return pc.if_else(needs, quoted, text)
