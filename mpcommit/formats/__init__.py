"""Engine-neutral file formats: Arrow record batches in, one streamed file out.

``make_format("csv", {"header": "true"})`` gives a frozen, picklable :class:`FileFormat` that knows its file
extension (``csv``, ``snappy.parquet``, ``json.gz`` ...), refuses schemas it cannot hold before anything is
uploaded, and opens a writer over a binary file object (the multipart writer) that counts rows and keeps
memory bounded. Option names are PySpark's (``compression``, ``header``, ``sep`` ...), matched ignoring case.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from .base import FileFormat, FormatWriter, Options
from .csv import CsvFormat
from .json import JsonFormat
from .parquet import ParquetFormat
from .text import TextFormat

FORMATS: dict[str, type[Any]] = {
    "parquet": ParquetFormat,
    "csv": CsvFormat,
    "json": JsonFormat,
    "text": TextFormat,
}

__all__ = [
    "FORMATS", "CsvFormat", "FileFormat", "FormatWriter", "JsonFormat", "Options", "ParquetFormat", "TextFormat",
    "make_format",
]


def make_format(name: str, options: Mapping[str, Any] | None = None) -> FileFormat:
    """The format ``name`` (parquet, csv, json, text) configured by ``options``; UsageError for anything else."""
    if not isinstance(name, str) or name.strip().lower() not in FORMATS:
        raise UsageError(f"unsupported format {name!r}: use one of {', '.join(FORMATS)}")
    key = name.strip().lower()
    reader = Options(options, what=key)
    fmt: FileFormat = FORMATS[key].from_options(reader)
    reader.finish()
    return fmt
