"""CSV through pyarrow's streaming CSV writer, with Spark's option names and defaults.

Spark's defaults apply: no header line unless ``header`` is true, ``,`` between fields, ``\\n`` after each
row, nulls as empty fields and empty strings as ``""`` (so they read back apart). One difference: pyarrow
quotes every string value, where Spark quotes only those that need it; CSV readers take both alike.
Like Spark, CSV refuses nested types, binary data and intervals (a CSV field holds one plain value).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.csv as pcsv

from ..errors import UsageError
from .base import (
    TEXT_COMPRESSION,
    FileFormat,
    FormatWriter,
    Options,
    is_binary,
    is_interval,
    is_nested,
    open_text_stream,
    refuse_types,
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

    def _write_options(self) -> Any:
        return pcsv.WriteOptions(
            include_header=self.header, delimiter=self.sep, eol=self.line_sep, null_string=self.null_value,
            quoting_style="all_valid" if self.quote_all else "needed",
        )

    def check_schema(self, schema: pa.Schema) -> None:
        refuse_types(schema, fmt="csv", refuse=is_nested, why="CSV fields hold plain values, not structs, arrays or maps")
        refuse_types(schema, fmt="csv", refuse=is_binary, why="CSV is text and cannot carry arbitrary bytes")
        refuse_types(schema, fmt="csv", refuse=is_interval, why="intervals have no CSV text form that reads back")
        # Whatever else pyarrow cannot format, it says so when the writer is built.
        try:
            pcsv.CSVWriter(pa.BufferOutputStream(), schema, write_options=self._write_options()).close()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UsageError(f"csv cannot hold this schema: {exc}. Nothing was written.") from None

    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        return _CsvFileWriter(sink, schema, self)


class _CsvFileWriter(FormatWriter):
    def __init__(self, sink: BinaryIO, schema: pa.Schema, fmt: CsvFormat):
        self._stream = open_text_stream(sink, TEXT_COMPRESSION[fmt.compression][0])
        self._writer = pcsv.CSVWriter(self._stream, schema, write_options=fmt._write_options())
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._writer.write_batch(batch)
            self.rows += batch.num_rows

    def close(self) -> None:
        self._writer.close()
        self._stream.close()  # the compressor's trailer; the multipart writer below stays open
