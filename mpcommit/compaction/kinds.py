"""What a data file is, from its name: format (Parquet, JSON Lines, text, CSV), whole-file compression, and
the suffix a merged file gets. Files merge only with files of their own kind (:attr:`FileKind.group`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..errors import UsageError


class Format(str, Enum):
    PARQUET = "parquet"
    JSON = "json"
    TEXT = "text"
    CSV = "csv"
    CSV_HEADER = "csv-header"

    @classmethod
    def parse(cls, value: "str | Format") -> "Format":
        if isinstance(value, Format):
            return value
        text = str(value).strip().lower()
        aliases = {"jsonl": "json", "ndjson": "json", "txt": "text", "csv+header": "csv-header",
                   "csv_header": "csv-header"}
        try:
            return cls(aliases.get(text, text))
        except ValueError:
            raise UsageError(
                f"unknown format {value!r}: use parquet, json (JSON Lines), text, csv or csv-header"
            ) from None


class Compression(str, Enum):
    """Whole-file compression of a line-oriented file, named by its file suffix."""

    NONE = ""
    GZIP = "gz"
    BZIP2 = "bz2"
    DEFLATE = "deflate"
    XZ = "xz"
    ZSTD = "zst"
    LZ4 = "lz4"
    SNAPPY = "snappy"

    @property
    def concatenates(self) -> bool:
        """True when the concatenation of compressed files is read back whole by common readers."""
        return self in (Compression.NONE, Compression.GZIP, Compression.BZIP2)

    @property
    def supported(self) -> bool:
        return self is not Compression.SNAPPY


_COMPRESSION_SUFFIXES = {
    "gz": Compression.GZIP, "gzip": Compression.GZIP, "bz2": Compression.BZIP2, "deflate": Compression.DEFLATE,
    "xz": Compression.XZ, "zst": Compression.ZSTD, "zstd": Compression.ZSTD, "lz4": Compression.LZ4,
    "snappy": Compression.SNAPPY,
}
_FORMAT_SUFFIXES = {
    "parquet": Format.PARQUET, "json": Format.JSON, "jsonl": Format.JSON, "ndjson": Format.JSON,
    "csv": Format.CSV, "txt": Format.TEXT, "text": Format.TEXT,
}
_PARQUET_CODECS = {"snappy", "gz", "gzip", "zstd", "zst", "lz4", "brotli", "lzo", "uncompressed", "none"}


@dataclass(frozen=True)
class FileKind:
    """What a data file is. ``header`` (CSV only): True, False, or None when the name cannot tell and the
    files must be looked at. ``ext`` is the suffix merged files get (e.g. ``snappy.parquet``, ``json.gz``)."""

    format: Format
    compression: Compression = Compression.NONE
    ext: str = ""
    header: bool | None = False

    @property
    def group(self) -> str:
        """Files merge only within one group."""
        header = {True: "+header", False: "", None: "+header?"}[self.header] if self.format is Format.CSV else ""
        comp = f".{self.compression.value}" if self.compression is not Compression.NONE else ""
        return f"{self.format.value}{header}{comp}"


def detect_kind(name: str, forced: Format | str | None = None) -> FileKind | None:
    """The kind of a data file from its name (``part-...c000.snappy.parquet``, ``x.json.gz``), or None when
    the name says nothing known. ``forced`` (``--format``) decides the format; compression still comes from
    the suffix. A CSV's header cannot be told from its name: unless forced, it is None (looked at later)."""
    base = name.rsplit("/", 1)[-1]
    tokens = base.lower().split(".")[1:]
    compression = Compression.NONE
    if tokens and tokens[-1] in _COMPRESSION_SUFFIXES:
        compression = _COMPRESSION_SUFFIXES[tokens[-1]]
    body = tokens[:-1] if compression is not Compression.NONE else tokens
    detected = _FORMAT_SUFFIXES.get(body[-1]) if body else None
    if forced is not None:
        fmt = Format.parse(forced)
    elif detected is not None:
        fmt = detected
    else:
        return None
    if fmt is Format.PARQUET:
        # Parquet compresses inside the file: a trailing codec name (x.parquet.gz) is not Parquet at all.
        if compression is not Compression.NONE:
            return None if forced is None else FileKind(fmt, Compression.NONE, _ext(base, 2), None)
        ext_tokens = 2 if len(tokens) >= 2 and tokens[-2] in _PARQUET_CODECS else 1
        return FileKind(fmt, Compression.NONE, _ext(base, ext_tokens) if detected else "parquet", None)
    header: bool | None
    if fmt is Format.CSV_HEADER:
        fmt, header = Format.CSV, True
    elif fmt is Format.CSV:
        header = False if forced is not None else None
    else:
        header = None
    default_ext = {Format.JSON: "json", Format.TEXT: "txt", Format.CSV: "csv"}[fmt]
    comp_ext = f".{compression.value}" if compression is not Compression.NONE else ""
    ext = _ext(base, 2 if comp_ext else 1) if detected is not None else default_ext + comp_ext
    return FileKind(fmt, compression, ext, header)


def _ext(base: str, tokens: int) -> str:
    return ".".join(base.split(".")[-tokens:])

