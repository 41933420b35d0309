"""Plain text, as Spark's ``text`` format writes it: one string column, one line per row.

As in Spark, the data must be exactly one string column (partition columns aside); a null row is an empty
line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError
from .base import TEXT_COMPRESSION, FileFormat, FormatWriter, Options, is_string, open_text_stream


@dataclass(frozen=True)
class TextFormat(FileFormat):
    """Text lines; options ``compression`` and ``lineSep``."""

    name = "text"
    content_type = "text/plain; charset=utf-8"

    compression: str = "none"
    line_sep: str = "\n"

    def __post_init__(self) -> None:
        if self.compression not in TEXT_COMPRESSION:
            raise UsageError(f"text does not support compression {self.compression!r}")
        if not self.line_sep:
            raise UsageError("text option 'lineSep' must not be empty")

    @classmethod
    def from_options(cls, options: Options) -> "TextFormat":
        return cls(
            compression=options.compression(choices=TEXT_COMPRESSION, default="none"),
            line_sep=options.text("lineSep", default="\n"),
        )

    @property
    def extension(self) -> str:
        return f"txt{TEXT_COMPRESSION[self.compression][1]}"

    def check_schema(self, schema: pa.Schema) -> None:
        if len(schema) != 1:
            raise UsageError(
                f"text holds exactly one string column (besides partition columns), got {len(schema)}: "
                f"{', '.join(schema.names)}. Combine them first (e.g. concat_ws or to_json). Nothing was written."
            )
        field = schema.field(0)
        if not is_string(field.type):
            raise UsageError(
                f"text holds one string column, but {field.name!r} is {field.type}: cast it to string first. "
                "Nothing was written."
            )

    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        return _TextFileWriter(sink, self)


class _TextFileWriter(FormatWriter):
    def __init__(self, sink: BinaryIO, fmt: TextFormat):
        self._stream = open_text_stream(sink, TEXT_COMPRESSION[fmt.compression][0])
        self._eol = fmt.line_sep
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        lines = pc.fill_null(batch.column(0), "").to_pylist()
        self._stream.write((self._eol.join(lines) + self._eol).encode("utf-8"))
        self.rows += batch.num_rows

    def close(self) -> None:
        self._stream.close()
