"""Per-format rules: how the files of one bin become one file that readers see as exactly their rows.

* JSON Lines, text, CSV without a header: byte concatenation; every source must end with a newline, so a
  newline is added after one that does not (copied sources are checked with a 1-byte read).
* CSV with a header: one header in the output. The first copied source is copied whole (its header is the
  output's); the ranges of the other copied sources start after their header line (found with a small read
  of their first bytes); fetched sources lose theirs in the stream. Every header must be the same.
* gzip and bzip2: members and streams concatenate (RFC 1952; bzip2, Hadoop, Python and pyarrow read all of
  them). Fetched sources are decompressed to check them and to add a missing final newline (as a member of
  its own). Copied sources are trusted to end with a newline, as every line-oriented writer makes them:
  checking would mean downloading them.
* deflate (zlib), xz, zstd, lz4: readers differ on whether they read past the first stream or frame (Python's
  zlib and zstandard stop, zstd's CLI goes on), so files of these are decompressed and recompressed into a
  single stream rather than concatenated into something common readers truncate. Compressed CSV with a
  header is recompressed too (a copied member cannot lose its header line). Snappy and other Hadoop block
  codecs are refused.
* Parquet: chosen per bin. When a source is big enough to be copied, row groups are concatenated and the
  footer rewritten (``parquet_concat``: offsets shifted, schemas must be identical); otherwise every source
  must be downloaded anyway and they are rewritten through pyarrow into large row groups.

Everything here is planning (pure) plus the reads that planning needs (:func:`prepare`); the bytes move in
:mod:`.executor`, which calls the assemblers defined here on the fetched pieces.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import UsageError
from ..sizing import MIN_PART_SIZE, MiB
from ..store.s3 import S3Store
from .errors import (
    MergeError,
    MixedSchemaError,
    UnreadableSourceError,
    UnsupportedFormatError,
)
from .executor import MergeStats, MergeTask, fetch_range
from .parts import DEFAULT_UPLOAD_PART_SIZE, Literal, Range, Segment, SourceObject, arrange, plan_parts

#: The longest CSV header line accepted.
MAX_HEADER = 1 * MiB
#: First read of a CSV source's head, doubled until the header line is found (small: it counts against the
#: bytes that pass through the client for a copied source).
HEADER_PROBE = 4 * 1024
#: First read of a Parquet footer (doubled by ``read_footer`` when the footer is longer).
FOOTER_PROBE = 16 * 1024
#: Big sources are streamed through recompression in pieces of this size.
STREAM_CHUNK = 8 * MiB
#: The Parquet rewrite writes a row group once this many bytes of Arrow data have accumulated.
REWRITE_ROW_GROUP_BYTES = 64 * MiB
#: zstd and lz4 have no incremental codec in the standard library: a source is decompressed whole, so
#: sources bigger than this are refused rather than risk the memory.
MAX_WHOLE_SOURCE = 512 * MiB


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


# ---------------------------------------------------------------------------------------- line rules
def first_record_end(data: bytes, *, final: bool) -> int | None:
    """Where the first CSV record of ``data`` ends (after its newline), honouring quoted newlines. None when
    more bytes are needed; at the end of the file (``final``) the whole of it is the record."""
    quoted = False
    for i, byte in enumerate(data):
        if byte == 0x22:  # '"'; an escaped quote ("") toggles twice, which is what it should do
            quoted = not quoted
        elif byte == 0x0A and not quoted:
            return i + 1
    return len(data) if final else None


def _record_text(record: bytes) -> bytes:
    return record.rstrip(b"\r\n")


class LineJoiner:
    """Joins line-oriented sources: a newline after any source that lacks one, and CSV headers.

    ``header``: None for no header; else ``b""`` to keep the first source's header and strip (and compare)
    every later one, or the expected header record to strip from every source.
    """

    def __init__(self, header: bytes | None = None):
        self._expected = None if header in (None, b"") else _record_text(header)
        self._keep_first = header == b""
        self._has_header = header is not None
        self._pending: bytearray | None = None
        self._name = ""
        self._last = b"\n"
        self._any = False

    def start(self, name: str) -> None:
        self._name = name
        self._last = b"\n"
        self._any = False
        self._pending = bytearray() if self._has_header else None

    def data(self, chunk: bytes, *, final: bool = False) -> bytes:
        if self._pending is not None:
            self._pending += chunk
            end = first_record_end(bytes(self._pending), final=final)
            if end is None:
                if len(self._pending) > MAX_HEADER:
                    raise UnreadableSourceError(f"{self._name}: no end of the header line in the first {MAX_HEADER} bytes")
                return b""
            record, rest = bytes(self._pending[:end]), bytes(self._pending[end:])
            self._pending = None
            chunk = self._header(record) + rest
        if chunk:
            self._any = True
            self._last = chunk[-1:]
        return chunk

    def _header(self, record: bytes) -> bytes:
        text = _record_text(record)
        if self._expected is None:
            if not record:
                return b""  # an empty source has no header: the next one provides it
            self._expected = text
            if self._keep_first:
                return record if record.endswith(b"\n") else record + b"\n"
            return b""
        if text != self._expected and record:
            raise MixedSchemaError(
                f"{self._name}: CSV header {_show(text)} differs from {_show(self._expected)}; merge skipped"
            )
        return b""

    def end(self) -> bytes:
        if self._pending is not None:
            out = self.data(b"", final=True)
        else:
            out = b""
        if self._any and self._last != b"\n":
            self._last = b"\n"
            return out + b"\n"
        return out


def _show(text: bytes) -> str:
    shown = text[:80].decode("utf-8", "replace")
    return repr(shown + ("..." if len(text) > 80 else ""))


# ---------------------------------------------------------------------------------------- assemblers
@dataclass(frozen=True)
class LinesSpec:
    """Stream pieces with transform ``"lines"``: whole uncompressed sources (or consecutive pieces of one)."""

    header: bytes | None = None

    def new(self) -> "LinesAssembler":
        return LinesAssembler(self.header)


class LinesAssembler:
    def __init__(self, header: bytes | None):
        self._joiner = LineJoiner(header)

    def feed(self, piece: Range, data: bytes) -> bytes:
        if piece.transform is None:
            return data
        if piece.start == 0:
            self._joiner.start(piece.source.key)
        out = self._joiner.data(data, final=piece.end == piece.source.size)
        if piece.end == piece.source.size:
            out += self._joiner.end()
        return out

    def finish(self) -> bytes:
        return b""


_NEWLINE_MEMBER = {Compression.GZIP: lambda: _gzip_compress(b"\n"), Compression.BZIP2: lambda: bz2.compress(b"\n")}


def _gzip_compress(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


@dataclass(frozen=True)
class MembersSpec:
    """gzip/bzip2 sources fetched whole: checked by decompressing them, a newline member added when the
    decompressed text does not end with one."""

    compression: Compression

    def new(self) -> "MembersAssembler":
        return MembersAssembler(self.compression)


class MembersAssembler:
    def __init__(self, compression: Compression):
        self._compression = compression

    def feed(self, piece: Range, data: bytes) -> bytes:
        if piece.transform is None or not data:
            return data
        text = _decompress_all(self._compression, data, piece.source.key)
        if text and not text.endswith(b"\n"):
            return data + _NEWLINE_MEMBER[self._compression]()
        return data

    def finish(self) -> bytes:
        return b""


def _decompress_all(compression: Compression, data: bytes, name: str) -> bytes:
    """Every member/stream of ``data``; raises UnreadableSourceError for corrupt or truncated input."""
    try:
        if compression is Compression.BZIP2:
            return bz2.decompress(data)
        if compression is Compression.GZIP:
            out = bytearray()
            rest = data
            while rest:
                d = zlib.decompressobj(31)
                out += d.decompress(rest)
                if not d.eof:
                    raise zlib.error("truncated gzip member")
                rest = d.unused_data
            return bytes(out)
    except (OSError, ValueError, EOFError, zlib.error) as exc:
        raise UnreadableSourceError(f"{name}: not a readable {compression.value} file ({exc}); merge skipped") from exc
    raise AssertionError(compression)


class _Decoder:
    """Incremental decompression of one source."""

    def __init__(self, compression: Compression, name: str):
        self._compression = compression
        self._name = name
        self._whole = bytearray()
        self._d: Any = self._new()

    def _new(self) -> Any:
        c = self._compression
        if c is Compression.GZIP:
            return zlib.decompressobj(31)
        if c is Compression.DEFLATE:
            return zlib.decompressobj(15)
        if c is Compression.BZIP2:
            return bz2.BZ2Decompressor()
        if c is Compression.XZ:
            return lzma.LZMADecompressor(lzma.FORMAT_AUTO)
        return None  # zstd, lz4: decompressed whole at the end

    def data(self, chunk: bytes) -> bytes:
        try:
            if self._d is None:
                self._whole += chunk
                if len(self._whole) > MAX_WHOLE_SOURCE:
                    raise UnsupportedFormatError(
                        f"{self._name}: {self._compression.value} sources over {MAX_WHOLE_SOURCE} bytes are not merged"
                    )
                return b""
            out = bytearray()
            while chunk:
                if self._d.eof:
                    # The next member/stream of a multi-member file.
                    chunk = self._d.unused_data + chunk
                    self._d = self._new()
                    continue
                out += self._d.decompress(chunk)
                chunk = b""
                if self._d.eof and self._d.unused_data:
                    chunk = self._d.unused_data
                    self._d = self._new()
            return bytes(out)
        except (OSError, ValueError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise UnreadableSourceError(
                f"{self._name}: not a readable {self._compression.value} file ({exc}); merge skipped"
            ) from exc

    def end(self) -> bytes:
        if self._d is None:
            import pyarrow as pa

            codec = "zstd" if self._compression is Compression.ZSTD else "lz4"
            try:
                with pa.CompressedInputStream(pa.BufferReader(bytes(self._whole)), codec) as stream:
                    return stream.read()
            except (OSError, pa.ArrowException) as exc:
                raise UnreadableSourceError(
                    f"{self._name}: not a readable {self._compression.value} file ({exc}); merge skipped"
                ) from exc
        if not self._d.eof:
            raise UnreadableSourceError(f"{self._name}: the {self._compression.value} data is truncated; merge skipped")
        return b""


class _Encoder:
    def __init__(self, compression: Compression):
        self._compression = compression
        self._sink: _Sink | None = None
        if compression is Compression.GZIP:
            self._c: Any = zlib.compressobj(6, zlib.DEFLATED, 31)
        elif compression is Compression.DEFLATE:
            self._c = zlib.compressobj(6, zlib.DEFLATED, 15)
        elif compression is Compression.BZIP2:
            self._c = bz2.BZ2Compressor()
        elif compression is Compression.XZ:
            self._c = lzma.LZMACompressor(lzma.FORMAT_XZ)
        else:
            import pyarrow as pa

            self._sink = _Sink()
            codec = "zstd" if compression is Compression.ZSTD else "lz4"
            self._c = pa.CompressedOutputStream(pa.PythonFile(self._sink, mode="w"), codec)

    def data(self, chunk: bytes) -> bytes:
        if self._sink is not None:
            self._c.write(chunk)
            return self._sink.drain()
        return self._c.compress(chunk)

    def finish(self) -> bytes:
        if self._sink is not None:
            self._c.close()
            return self._sink.drain()
        return self._c.flush()


class _Sink:
    """A write-only file object whose contents are taken away as they come (pyarrow writes into it)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.closed = False

    def write(self, data: Any) -> int:
        self._buffer += bytes(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return len(self._buffer)

    def drain(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out


@dataclass(frozen=True)
class RecompressSpec:
    """Sources decompressed (in pieces), joined line by line, and compressed again into one stream."""

    compression: Compression
    header: bytes | None = None

    def new(self) -> "RecompressAssembler":
        return RecompressAssembler(self.compression, self.header)


class RecompressAssembler:
    def __init__(self, compression: Compression, header: bytes | None):
        self._compression = compression
        self._joiner = LineJoiner(header)
        self._encoder = _Encoder(compression)
        self._decoder: _Decoder | None = None

    def feed(self, piece: Range, data: bytes) -> bytes:
        if piece.start == 0:
            self._decoder = _Decoder(self._compression, piece.source.key)
            self._joiner.start(piece.source.key)
        assert self._decoder is not None
        text = self._decoder.data(data)
        final = piece.end == piece.source.size
        if final:
            text += self._decoder.end()
        out = self._joiner.data(text, final=final)
        if final:
            out += self._joiner.end()
        return self._encoder.data(out)

    def finish(self) -> bytes:
        return self._encoder.finish()


@dataclass(frozen=True)
class ParquetRewriteSpec:
    """Small Parquet sources, each fetched whole, rewritten through pyarrow into large row groups."""

    row_group_bytes: int = REWRITE_ROW_GROUP_BYTES

    def new(self) -> "ParquetRewriter":
        return ParquetRewriter(self.row_group_bytes)


class ParquetRewriter:
    """Reads each source with pyarrow and writes one file: the first source's schema (and key/value
    metadata, e.g. Spark's), its compression codec, INT96 timestamps kept when the source had them."""

    def __init__(self, row_group_bytes: int):
        self._row_group_bytes = row_group_bytes
        self._sink = _Sink()
        self._writer: Any = None
        self._schema: Any = None
        self._first = ""
        self._tables: list[Any] = []
        self._held = 0
        self.rows = 0

    def feed(self, piece: Range, data: bytes) -> bytes:
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = piece.source.key
        try:
            pf = pq.ParquetFile(pa.BufferReader(data))
            table = pf.read()
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise UnreadableSourceError(f"{name}: not a readable Parquet file ({exc}); merge skipped") from exc
        if self._writer is None:
            self._schema = table.schema
            self._first = name
            self._writer = pq.ParquetWriter(pa.PythonFile(self._sink, mode="w"), table.schema, **_writer_options(pf))
        elif not table.schema.equals(self._schema, check_metadata=False):
            raise MixedSchemaError(
                f"{name}: Parquet schema differs from {self._first}'s ({_schema_difference(self._schema, table.schema)}); "
                "merge skipped"
            )
        self.rows += table.num_rows
        self._tables.append(table.replace_schema_metadata(self._schema.metadata))
        self._held += table.nbytes
        if self._held >= self._row_group_bytes:
            self._write()
        return self._sink.drain()

    def _write(self) -> None:
        import pyarrow as pa

        if self._tables:
            table = pa.concat_tables(self._tables)
            self._writer.write_table(table, row_group_size=max(1, table.num_rows))
            self._tables, self._held = [], 0

    def finish(self) -> bytes:
        if self._writer is None:
            return b""
        self._write()
        self._writer.close()
        return self._sink.drain()


def _writer_options(pf: Any) -> dict[str, Any]:
    """Write like the source: its codec, and INT96 timestamps when it used them (Spark's default), so that
    readers of the table see the same types in merged and unmerged files."""
    opts: dict[str, Any] = {}
    md = pf.metadata
    if md.num_row_groups and md.num_columns:
        codec = md.row_group(0).column(0).compression.lower()
        opts["compression"] = "none" if codec == "uncompressed" else codec
    schema = pf.schema
    if any(schema.column(i).physical_type == "INT96" for i in range(len(schema))):
        opts["use_deprecated_int96_timestamps"] = True
    return opts


def _schema_difference(a: Any, b: Any) -> str:
    names_a, names_b = a.names, b.names
    if names_a != names_b:
        return f"columns {names_b} instead of {names_a}"
    for field_a, field_b in zip(a, b):
        if not field_a.equals(field_b):
            return f"column {field_a.name!r} is {field_b.type}{'' if field_b.nullable else ' not null'} instead of {field_a.type}"
    return "metadata differs"


# ---------------------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class LineSource:
    """A line-oriented source as planning needs it: whether it ends with a newline (None: not checked,
    it is fetched anyway) and, for CSV with a header, where its header record ends and what it says."""

    obj: SourceObject
    ends_with_newline: bool | None = None
    header_end: int | None = None
    header: bytes | None = None


def plan_lines(sources: Sequence[LineSource], *, header: bool,
               compression: Compression = Compression.NONE) -> tuple[list[Segment], Any]:
    """Segments and assembler of a byte-concatenation merge (uncompressed, or gzip/bzip2 without a header).

    Copyable sources are copied (CSV: from after the header, except the first one copied); everything else
    is fetched whole and joined by the assembler. Raises MixedSchemaError when headers differ."""
    if header and compression is not Compression.NONE:
        raise UnsupportedFormatError("compressed CSV with a header is recompressed, not concatenated")
    copy_ok = [s for s in sources if s.obj.size >= MIN_PART_SIZE]
    expected: bytes | None = None
    if header:
        for s in copy_ok:
            if s.header is None or s.header_end is None:
                raise AssertionError(f"header of copyable {s.obj.key} not probed")
            text = _record_text(s.header)
            if expected is None:
                expected = text
            elif text != expected:
                raise MixedSchemaError(
                    f"{s.obj.key}: CSV header {_show(text)} differs from {_show(expected)}; merge skipped"
                )
    transform = "lines" if compression is Compression.NONE else "members"
    units: list[list[Segment]] = []
    for s in sources:
        if s.obj.size == 0:
            continue
        if s.obj.size < MIN_PART_SIZE:
            units.append([Range(s.obj, 0, s.obj.size, transform)])
            continue
        unit: list[Segment] = [Range(s.obj, s.header_end if header else 0, s.obj.size)]  # type: ignore[arg-type]
        if compression is Compression.NONE and s.ends_with_newline is False:
            unit.append(Literal(b"\n"))
        units.append(unit)
    ordered = [list(u) for u in arrange(units)]
    if header and copy_ok:
        # One copied source keeps its header, and leads: its header is the output's.
        lead_at = next(i for i, u in enumerate(ordered) if isinstance(u[0], Range) and u[0].transform is None)
        lead = ordered.pop(lead_at)
        head = lead[0]
        assert isinstance(head, Range)
        ordered.insert(0, [Range(head.source, 0, head.end)] + lead[1:])
    segments = [seg for unit in ordered for seg in unit]
    if compression is Compression.NONE:
        spec: Any = LinesSpec(header=None if not header else (expected + b"\n" if expected is not None else b""))
    else:
        spec = MembersSpec(compression)
    return segments, spec


def plan_recompress(sources: Sequence[SourceObject], *, compression: Compression, header: bool) -> tuple[list[Segment], Any]:
    """Every source fetched (in pieces), decompressed, joined and compressed again."""
    segments: list[Segment] = []
    for obj in sources:
        for start in range(0, obj.size, STREAM_CHUNK):
            segments.append(Range(obj, start, min(obj.size, start + STREAM_CHUNK), "recompress"))
    return segments, RecompressSpec(compression, b"" if header else None)


def plan_parquet_concat(footers: Sequence[Any], objects: Sequence[SourceObject]) -> tuple[list[Segment], int]:
    """Segments of a row-group concatenation: sources ordered copyable first, so that the output's leading
    magic comes with the first copy and no small piece sits between copies; then the new footer."""
    from .parquet_concat import ParquetConcatError, ParquetSchemaMismatchError, concat_footers

    order = sorted(range(len(objects)), key=lambda i: (0 if footers[i].data_range[1] - 4 >= MIN_PART_SIZE else 1, objects[i].key))
    ordered_footers = [footers[i] for i in order]
    ordered_objects = [objects[i] for i in order]
    lead_copy = ordered_footers[0].data_range[1] >= MIN_PART_SIZE
    try:
        plan = concat_footers(ordered_footers, copy_leading_magic=lead_copy)
    except ParquetSchemaMismatchError as exc:
        raise MixedSchemaError(f"{exc}; merge skipped") from exc
    except ParquetConcatError as exc:
        raise UnsupportedFormatError(f"{exc}; merge skipped") from exc
    segments: list[Segment] = [Literal(plan.head)] if plan.head else []
    for piece in plan.pieces:
        segments.append(Range(ordered_objects[piece.source_index], piece.start, piece.end))
    segments.append(Literal(plan.tail))
    return segments, plan.num_rows


# ---------------------------------------------------------------------------------------- preparing a bin
Reader = Callable[[SourceObject, int, int], bytes]


def prepare(
    store: S3Store,
    bucket: str,
    sources: Sequence[SourceObject],
    kind: FileKind,
    *,
    key: str,
    partition: str = "",
    rows: int | None = None,
    stats: MergeStats | None = None,
    upload_part_size: int = DEFAULT_UPLOAD_PART_SIZE,
) -> MergeTask:
    """Read what planning needs (headers, last bytes, footers: small ranged reads pinned by ETag) and plan
    the merge of ``sources`` (in this order where the format allows) into ``key``.

    Raises a MergeError subclass naming the file for anything that keeps the bin from being merged."""

    def read(obj: SourceObject, start: int, end: int) -> bytes:
        return fetch_range(store, bucket, Range(obj, start, end), stats)

    segments, spec, planned_rows = plan_sources(read, sources, kind)
    plan = plan_parts(segments, upload_part_size=upload_part_size)
    return MergeTask(key=key, plan=plan, assembler=spec, partition=partition,
                     rows=planned_rows if planned_rows is not None else rows,
                     sources=tuple(s.key for s in sources))


def plan_sources(read: Reader, sources: Sequence[SourceObject], kind: FileKind) -> tuple[list[Segment], Any, int | None]:
    """The segments, assembler spec and (when known) row count of a merge; ``read(obj, start, end)`` gets
    the bytes planning needs. Separate from :func:`prepare` so that it can be tested on bytes in memory."""
    if not sources:
        raise MergeError("nothing to merge")
    if kind.format is Format.PARQUET:
        return _plan_parquet(read, sources)
    if not kind.compression.supported:
        raise UnsupportedFormatError(
            f"{sources[0].key}: {kind.compression.value}-compressed files (Hadoop's block codec) cannot be merged"
        )
    header = kind.header
    if kind.format is Format.CSV and header is None:
        header = _probe_header_presence(read, sources, kind.compression)
    header = bool(header) and kind.format is Format.CSV
    if not kind.compression.concatenates or (header and kind.compression is not Compression.NONE):
        segments, spec = plan_recompress(sources, compression=kind.compression, header=header)
        return segments, spec, None
    line_sources = []
    for obj in sources:
        if obj.size < MIN_PART_SIZE or obj.size == 0:
            line_sources.append(LineSource(obj))
            continue
        ends = None
        if kind.compression is Compression.NONE:
            ends = read(obj, obj.size - 1, obj.size) == b"\n"
        header_end = header_bytes = None
        if header:
            header_end, header_bytes = _probe_header(read, obj)
        line_sources.append(LineSource(obj, ends, header_end, header_bytes))
    segments, spec = plan_lines(line_sources, header=header, compression=kind.compression)
    return segments, spec, None


def _probe_header(read: Reader, obj: SourceObject) -> tuple[int, bytes]:
    size = HEADER_PROBE
    while True:
        head = read(obj, 0, min(obj.size, size))
        end = first_record_end(head, final=len(head) == obj.size)
        if end is not None:
            return end, head[:end]
        if size >= MAX_HEADER:
            raise UnreadableSourceError(f"{obj.key}: no end of the header line in the first {MAX_HEADER} bytes")
        size *= 4


def _first_record(read: Reader, obj: SourceObject, compression: Compression) -> bytes:
    """The first CSV record of a source, decompressing only as much of it as needed."""
    if compression is Compression.NONE:
        return _probe_header(read, obj)[1]
    if compression in (Compression.ZSTD, Compression.LZ4):
        raise UnsupportedFormatError(
            f"{obj.key}: cannot tell whether these {compression.value}-compressed CSV files have a header: "
            "say which with --format csv-header or --format csv"
        )
    decoder = _Decoder(compression, obj.key)
    text = b""
    pos, size = 0, HEADER_PROBE
    while pos < obj.size:
        chunk = read(obj, pos, min(obj.size, pos + size))
        pos += len(chunk)
        text += decoder.data(chunk)
        end = first_record_end(text, final=False)
        if end is not None:
            return text[:end]
        if len(text) > MAX_HEADER:
            raise UnreadableSourceError(f"{obj.key}: no end of the first line in the first {MAX_HEADER} bytes")
        size *= 4
    text += decoder.end()
    return text[: first_record_end(text, final=True)]


def _probe_header_presence(read: Reader, sources: Sequence[SourceObject], compression: Compression) -> bool:
    """The name said CSV but not whether the files have a header. When every file starts with the same
    line, that line may be a header (to keep once) or data (to keep in every file): refuse to guess."""
    firsts = set()
    for obj in sources:
        if obj.size == 0:
            continue
        firsts.add(_record_text(_first_record(read, obj, compression)))
    if len(firsts) == 1 and sum(1 for o in sources if o.size) > 1:
        raise UnsupportedFormatError(
            f"{sources[0].key} and the other CSV files of its partition all start with the same line "
            f"{_show(next(iter(firsts)))}: a header or data? Say which with --format csv-header or --format csv"
        )
    return False


def _plan_parquet(read: Reader, sources: Sequence[SourceObject]) -> tuple[list[Segment], Any, int | None]:
    from .parquet_concat import ParquetConcatError, ParquetEncryptedError, read_footer

    if not any(s.size >= MIN_PART_SIZE for s in sources):
        # Every source is downloaded anyway: rewrite them into large row groups.
        segments = [Range(s, 0, s.size, "parquet") for s in sources]
        return segments, ParquetRewriteSpec(), None
    footers = []
    for obj in sources:
        try:
            footers.append(read_footer(lambda a, b, o=obj: read(o, a, b), obj.size, name=obj.key,
                                       initial_read=min(FOOTER_PROBE, obj.size)))
        except ParquetEncryptedError as exc:
            raise UnsupportedFormatError(f"{exc}; merge skipped") from exc
        except ParquetConcatError as exc:
            raise UnreadableSourceError(f"{exc}; merge skipped") from exc
    segments, rows = plan_parquet_concat(footers, sources)
    return segments, None, rows

