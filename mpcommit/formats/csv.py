"""CSV as PySpark's DataFrameWriter writes it, with Spark's option names and defaults.

Fields are laid out by :mod:`mpcommit.formats.csv_encoding` (Spark's quoting and backslash escaping, measured
on Spark 4.3, so that ``spark.read.csv`` with the same options reads back exactly the rows written) and values
printed by :mod:`mpcommit.formats.java_text` (doubles as ``1.0E20``, decimals as ``BigDecimal`` prints them,
timestamps as ``2024-06-15T01:02:03.456Z`` in the session time zone). Both are vectorised with pyarrow.compute.

Options (case-insensitive, as in Spark): ``header``, ``sep``/``delimiter`` (one or more characters), ``quote``,
``escape``, ``escapeQuotes``, ``quoteAll``, ``charToEscapeQuoteEscaping``, ``nullValue``, ``emptyValue``,
``lineSep`` (one or two characters), ``ignoreLeadingWhiteSpace``/``ignoreTrailingWhiteSpace``,
``timestampFormat``, ``timestampNTZFormat``, ``dateFormat``, ``timeZone``, ``encoding``/``charset`` (UTF-8 only),
``compression``. Whitespace at either end of a string is trimmed, as Spark's writer trims it by default;
``ignoreLeadingWhiteSpace=false`` and ``ignoreTrailingWhiteSpace=false`` keep it (and quote the value, so that
readers that trim unquoted fields keep it too). Like Spark, CSV refuses nested types, binary data and intervals
(a CSV field holds one plain value).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO

import pyarrow as pa

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
)
from .csv_encoding import CsvQuoting, join_rows
from .java_text import (
    DEFAULT_DATE_FORMAT,
    DEFAULT_TIMESTAMP_FORMAT,
    DEFAULT_TIMESTAMP_NTZ_FORMAT,
    DateTimePattern,
    arrow_time_zone,
    java_decimal_text,
    java_floating_text,
)

#: Rows encoded at once: bounds the text of one step (and keeps 32-bit string offsets far from overflowing).
CHUNK_ROWS = 32_768

_UTF8_NAMES = {"utf-8", "utf8"}


@dataclass(frozen=True)
class CsvFormat(FileFormat):
    """CSV; PySpark's writer options (see the module's docstring)."""

    name = "csv"
    content_type = "text/csv"

    header: bool = False
    sep: str = ","
    line_sep: str = "\n"
    null_value: str = ""
    #: None: Spark's default, an empty quoted field.
    empty_value: str | None = None
    quote: str = '"'
    escape: str = "\\"
    escape_quotes: bool = True
    quote_all: bool = False
    #: None: Spark's default (the escape character when it differs from the quote, else none); "\u0000": none.
    char_to_escape_quote_escaping: str | None = None
    #: Spark's writer defaults: trim whitespace at either end of a value.
    ignore_leading_white_space: bool = True
    ignore_trailing_white_space: bool = True
    timestamp_format: str = DEFAULT_TIMESTAMP_FORMAT
    timestamp_ntz_format: str = DEFAULT_TIMESTAMP_NTZ_FORMAT
    date_format: str = DEFAULT_DATE_FORMAT
    #: Java time zone id for timestamps; None: each column's own (Spark hands Python the session time zone).
    time_zone: str | None = None
    compression: str = "none"
    _quoting: CsvQuoting = field(init=False, repr=False, compare=False)
    _patterns: tuple[DateTimePattern, DateTimePattern, DateTimePattern] = field(init=False, repr=False, compare=False)
    _zone: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_characters()
        if self.compression not in TEXT_COMPRESSION:
            raise UsageError(f"csv does not support compression {self.compression!r}")
        ee = self.char_to_escape_quote_escaping
        if ee is None:
            ee = self.escape if self.escape != self.quote else None
        elif ee == "\0":
            ee = None
        quoting = CsvQuoting(
            sep=self.sep, quote=self.quote, escape=self.escape, escape_escape=ee, line_sep=self.line_sep,
            escape_quotes=self.escape_quotes, quote_all=self.quote_all, trim_leading=self.ignore_leading_white_space,
            trim_trailing=self.ignore_trailing_white_space, null_value=self.null_value, empty_value=self.empty_value,
        )
        patterns = (
            DateTimePattern(self.timestamp_format, kind="timestamp", option="timestampFormat"),
            DateTimePattern(self.timestamp_ntz_format, kind="timestamp_ntz", option="timestampNTZFormat"),
            DateTimePattern(self.date_format, kind="date", option="dateFormat"),
        )
        object.__setattr__(self, "_quoting", quoting)
        object.__setattr__(self, "_patterns", patterns)
        object.__setattr__(self, "_zone", arrow_time_zone(self.time_zone) if self.time_zone is not None else None)

    def _check_characters(self) -> None:
        def one(option: str, value: str) -> None:
            if len(value) != 1:
                hint = (" (Spark writes an empty one as a NUL character that no reader takes for it)"
                        if value == "" else "")
                raise UsageError(f"csv option {option!r} must be one character, got {value!r}{hint}")

        one("quote", self.quote)
        one("escape", self.escape)
        if self.char_to_escape_quote_escaping is not None:
            one("charToEscapeQuoteEscaping", self.char_to_escape_quote_escaping)
        if not self.sep or self.quote in self.sep or "\n" in self.sep or "\r" in self.sep:
            raise UsageError(f"csv option 'sep' must be one or more characters other than the quote or a line break, "
                             f"got {self.sep!r}")
        if not 1 <= len(self.line_sep) <= 2 or self.quote in self.line_sep or set(self.line_sep) & set(self.sep):
            raise UsageError(f"csv option 'lineSep' must be one or two characters, neither the quote nor the "
                             f"separator (\\n, \\r\\n or \\r as a rule), got {self.line_sep!r}")

    @classmethod
    def from_options(cls, options: Options) -> "CsvFormat":
        encoding = options.text("encoding", "charset", default="UTF-8")
        if encoding.strip().lower() not in _UTF8_NAMES:
            raise UsageError(
                f"csv option 'encoding' {encoding!r} is not supported: mpcommit writes CSV in UTF-8 only (Spark's "
                "default, which its reader expects); leave the option out, or convert the files afterwards"
            )
        return cls(
            header=options.flag("header", default=False),
            sep=options.text("sep", "delimiter", default=","),
            line_sep=options.text("lineSep", default="\n"),
            null_value=options.text("nullValue", default=""),
            empty_value=options.optional_text("emptyValue"),
            quote=options.text("quote", default='"'),
            escape=options.text("escape", default="\\"),
            escape_quotes=options.flag("escapeQuotes", default=True),
            quote_all=options.flag("quoteAll", default=False),
            char_to_escape_quote_escaping=options.optional_text("charToEscapeQuoteEscaping"),
            ignore_leading_white_space=options.flag("ignoreLeadingWhiteSpace", default=True),
            ignore_trailing_white_space=options.flag("ignoreTrailingWhiteSpace", default=True),
            timestamp_format=options.text("timestampFormat", default=DEFAULT_TIMESTAMP_FORMAT),
            timestamp_ntz_format=options.text("timestampNTZFormat", default=DEFAULT_TIMESTAMP_NTZ_FORMAT),
            date_format=options.text("dateFormat", default=DEFAULT_DATE_FORMAT),
            time_zone=options.optional_text("timeZone"),
            compression=options.compression(choices=TEXT_COMPRESSION, default="none"),
        )

    @property
    def extension(self) -> str:
        return f"csv{TEXT_COMPRESSION[self.compression][1]}"

    def check_schema(self, schema: pa.Schema) -> None:
        if len(schema) == 0:
            raise UsageError("csv needs at least one column to write. Nothing was written.")
        refuse_types(schema, fmt="csv", refuse=is_nested, why="CSV fields hold plain values, not structs, arrays or maps")
        refuse_types(schema, fmt="csv", refuse=is_binary, why="CSV is text and cannot carry arbitrary bytes")
        refuse_types(schema, fmt="csv", refuse=is_interval, why="intervals have no CSV text form that reads back")
        refuse_types(schema, fmt="csv", refuse=lambda t: not _has_text_form(t),
                     why="mpcommit's CSV writer has no text form for this type")
        if self._zone is None:
            for f in schema:
                t = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
                if pa.types.is_timestamp(t) and t.tz is not None:
                    arrow_time_zone(t.tz)  # a zone pyarrow cannot resolve fails here, not in a task

    # ------------------------------------------------------------ encoding
    def header_bytes(self, schema: pa.Schema) -> bytes:
        """The header line (column names laid out like values)."""
        names = self._quoting.fields(pa.array(schema.names, pa.string()))
        return join_rows([names.slice(i, 1) for i in range(len(names))], sep=self.sep,
                         line_sep=self.line_sep).to_pybytes()

    def encode(self, batch: pa.RecordBatch) -> list[pa.Buffer]:
        """The CSV text of ``batch``'s rows, UTF-8 encoded, in one buffer per chunk of rows."""
        out = []
        for start in range(0, batch.num_rows, CHUNK_ROWS):
            chunk = batch.slice(start, CHUNK_ROWS)
            fields = [self._quoting.fields(self.value_text(column), alphabet=self._alphabet(column.type))
                      for column in chunk.columns]
            out.append(join_rows(fields, sep=self.sep, line_sep=self.line_sep))
        return out

    def _alphabet(self, t: pa.DataType) -> set[str] | None:
        """The characters a value of type ``t`` can print as, when that is a short list (None: any)."""
        if pa.types.is_dictionary(t):
            return self._alphabet(t.value_type)
        if pa.types.is_integer(t):
            return set("-0123456789")
        if pa.types.is_boolean(t):
            return set("truefals")
        if pa.types.is_decimal(t):
            return set("-0123456789.E+")
        if pa.types.is_floating(t):
            return set("-0123456789.EInfityNa")
        if pa.types.is_null(t):
            return set()
        if pa.types.is_timestamp(t):
            return self._patterns[0 if t.tz is not None else 1].alphabet
        if pa.types.is_date(t):
            return set("-0123456789") if self.date_format == DEFAULT_DATE_FORMAT else self._patterns[2].alphabet
        return None

    def value_text(self, values: pa.Array) -> pa.Array:
        """Each value as Spark's CSV writer prints it, before quoting (nulls stay null)."""
        t = values.type
        if pa.types.is_dictionary(t):
            return self.value_text(values.dictionary_decode())
        if is_string(t):
            return values if pa.types.is_string(t) else values.cast(pa.string())
        if pa.types.is_null(t):
            return pa.nulls(len(values), pa.string())
        if pa.types.is_floating(t):
            return java_floating_text(values)
        if pa.types.is_decimal(t):
            return java_decimal_text(values)
        if pa.types.is_timestamp(t):
            if t.tz is None:
                return self._patterns[1].format(values)
            return self._patterns[0].format(values, zone=self._zone)
        if pa.types.is_date(t):
            if self.date_format == DEFAULT_DATE_FORMAT:
                return values.cast(pa.string())  # Arrow's cast writes yyyy-MM-dd
            return self._patterns[2].format(values)
        return values.cast(pa.string())  # integers, booleans (true/false), times

    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        return _CsvFileWriter(sink, schema, self)


def _has_text_form(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _has_text_form(t.value_type)
    return (
        is_string(t) or pa.types.is_null(t) or pa.types.is_boolean(t) or pa.types.is_integer(t)
        or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_timestamp(t) or pa.types.is_date(t)
        or pa.types.is_time(t)
    )


class _CsvFileWriter(FormatWriter):
    def __init__(self, sink: BinaryIO, schema: pa.Schema, fmt: CsvFormat):
        self._stream = open_text_stream(sink, TEXT_COMPRESSION[fmt.compression][0])
        self._fmt = fmt
        self.rows = 0
        if fmt.header:
            self._stream.write(fmt.header_bytes(schema))

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            for chunk in self._fmt.encode(batch):
                self._stream.write(chunk)
            self.rows += batch.num_rows

    def close(self) -> None:
        self._stream.close()  # the compressor's trailer; the multipart writer below stays open
