"""How the sources of one bin become one file, per format: the segments to copy or fetch (:mod:`.parts`), the
assembler to run on the fetched ones, and the row count when known in advance.

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
:mod:`.executor`, which runs the assemblers (:mod:`.assemblers`, :mod:`.parquet_rewrite`) on the fetched pieces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..sizing import MIN_PART_SIZE, MiB
from ..pool import run_bounded
from ..store.s3 import S3Store
from .assemblers import LinesSpec, MembersSpec, RecompressSpec
from .codecs import Decoder
from .errors import MergeError, MixedSchemaError, UnreadableSourceError, UnsupportedFormatError
from .executor import AssemblerSpec, MergeStats, MergeTask, fetch_range
from .kinds import Compression, FileKind, Format
from .lines import MAX_HEADER, first_record_end, record_text, show_record
from .parquet_rewrite import ParquetRewriteSpec
from .parts import (DEFAULT_COPY_PART_SIZE, DEFAULT_UPLOAD_PART_SIZE, LiteralBytes, Range, Segment, SourceObject,
                    Transform, arrange, plan_parts)

if TYPE_CHECKING:
    from .parquet_concat import ParquetFooter

#: First read of a CSV source's head, doubled until the header line is found (small: it counts against the
#: bytes that pass through the client for a copied source).
HEADER_PROBE = 4 * 1024
#: First read of a Parquet footer (doubled by ``read_footer`` when the footer is longer).
FOOTER_PROBE = 16 * 1024
#: Big sources are streamed through recompression in pieces of this size.
STREAM_CHUNK = 8 * MiB
#: Planning reads of one bin in flight at once (each a small ranged GET).
PLANNING_READ_THREADS = 16
#: Bytes of planning reads fetched ahead and held at once (Parquet footers: 16 KiB each); reads beyond it are
#: made when planning comes to them.
PREFETCH_BUDGET = 32 * MiB


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
               compression: Compression = Compression.NONE) -> tuple[list[Segment], AssemblerSpec]:
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
            text = record_text(s.header)
            if expected is None:
                expected = text
            elif text != expected:
                raise MixedSchemaError(
                    f"{s.obj.key}: CSV header {show_record(text)} differs from {show_record(expected)}; merge skipped"
                )
    transform = Transform.LINES if compression is Compression.NONE else Transform.MEMBERS
    units: list[list[Segment]] = []
    for s in sources:
        if s.obj.size == 0:
            continue
        if s.obj.size < MIN_PART_SIZE:
            units.append([Range(s.obj, 0, s.obj.size, transform)])
            continue
        unit: list[Segment] = [Range(s.obj, s.header_end if header else 0, s.obj.size)]  # type: ignore[arg-type]
        if compression is Compression.NONE and s.ends_with_newline is False:
            unit.append(LiteralBytes(b"\n"))
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
    spec: AssemblerSpec
    if compression is Compression.NONE:
        spec = LinesSpec(header=None if not header else (expected + b"\n" if expected is not None else b""))
    else:
        spec = MembersSpec(compression)
    return segments, spec


def plan_recompress(sources: Sequence[SourceObject], *, compression: Compression,
                    header: bool) -> tuple[list[Segment], AssemblerSpec]:
    """Every source fetched (in pieces), decompressed, joined and compressed again."""
    segments: list[Segment] = []
    for obj in sources:
        for start in range(0, obj.size, STREAM_CHUNK):
            segments.append(Range(obj, start, min(obj.size, start + STREAM_CHUNK), Transform.RECOMPRESS))
    return segments, RecompressSpec(compression, b"" if header else None)


def plan_parquet_concat(footers: Sequence[ParquetFooter],
                        objects: Sequence[SourceObject]) -> tuple[list[Segment], int]:
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
    segments: list[Segment] = [LiteralBytes(plan.head)] if plan.head else []
    for piece in plan.pieces:
        segments.append(Range(ordered_objects[piece.source_index], piece.start, piece.end))
    segments.append(LiteralBytes(plan.tail))
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
    copy_part_size: int = DEFAULT_COPY_PART_SIZE,
    pool: Executor | None = None,
    threads: int = PLANNING_READ_THREADS,
) -> MergeTask:
    """Read what planning needs (headers, last bytes, footers: small ranged reads pinned by ETag) and plan
    the merge of ``sources`` (in this order where the format allows) into ``key``.

    The reads planning is known to need (:func:`planning_reads`) are made side by side first, on ``pool`` or
    on ``threads`` threads of its own: with a store's latency, one after another they would cost a round trip
    per source. Raises a MergeError subclass naming the file for anything that keeps the bin from being merged."""

    def fetch(obj: SourceObject, start: int, end: int) -> bytes:
        return fetch_range(store, bucket, Range(obj, start, end), stats)

    read = PrefetchedReader(fetch)
    read.prefetch(planning_reads(sources, kind), threads=threads, executor=pool)
    segments, spec, planned_rows = plan_sources(read, sources, kind)
    plan = plan_parts(segments, upload_part_size=upload_part_size, copy_part_size=copy_part_size)
    return MergeTask(key=key, plan=plan, assembler=spec, partition=partition,
                     rows=planned_rows if planned_rows is not None else rows,
                     sources=tuple(s.key for s in sources))


class PrefetchedReader:
    """A :data:`Reader` that answers from ranges fetched ahead (side by side) when they hold the bytes asked
    for, and reads through ``fetch`` otherwise. ``misses`` counts the reads that were not prefetched."""

    def __init__(self, fetch: Reader):
        self._fetch = fetch
        self._have: dict[SourceObject, list[tuple[int, bytes]]] = {}
        self._lock = threading.Lock()
        self.misses = 0

    def prefetch(self, reads: Sequence[tuple[SourceObject, int, int]], *, threads: int,
                 executor: Executor | None = None) -> None:
        """Fetch ``reads`` (object, start, end), at most ``threads`` at once; the first failure is raised
        (a source changed: the bin is skipped, as it would have been on its first read)."""
        budget, take = PREFETCH_BUDGET, []
        for r in reads:
            budget -= r[2] - r[1]
            if budget < 0:
                break
            take.append(r)
        if not take:
            return

        def keep(item: tuple[SourceObject, int, int], data: bytes) -> None:
            self._have.setdefault(item[0], []).append((item[1], data))

        run_bounded(lambda r: self._fetch(*r), take, threads=min(threads, len(take)), executor=executor,
                    on_result=keep)

    def __call__(self, obj: SourceObject, start: int, end: int) -> bytes:
        held = self._have.get(obj, [])
        for i, (at, data) in enumerate(held):
            if at <= start and end <= at + len(data):
                if start == at and end == at + len(data):
                    del held[i]  # planning reads each range once: let it go
                return data[start - at : end - at]
        with self._lock:
            self.misses += 1
        return self._fetch(obj, start, end)


def planning_reads(sources: Sequence[SourceObject], kind: FileKind) -> list[tuple[SourceObject, int, int]]:
    """The first reads :func:`plan_sources` makes for ``sources`` of ``kind``, so that they can be made side by
    side: the last byte of each copyable uncompressed line source (does it end with a newline?), the head of
    each CSV source (its header), the tail of each Parquet source (its footer) when a bin copies. Further
    reads (a longer header or footer) are made when planning needs them."""
    if kind.format is Format.PARQUET:
        if not any(s.size >= MIN_PART_SIZE for s in sources):
            return []
        return [(s, max(0, s.size - min(FOOTER_PROBE, s.size)), s.size) for s in sources if s.size]
    if not kind.compression.supported:
        return []
    reads: list[tuple[SourceObject, int, int]] = []
    if kind.format is Format.CSV and (kind.header is None or kind.header):
        if kind.header is None and kind.compression in (Compression.ZSTD, Compression.LZ4):
            return []
        heads = sources if kind.header is None else [s for s in sources if s.size >= MIN_PART_SIZE]
        if kind.header and kind.compression is not Compression.NONE:
            heads = []  # recompressed: nothing to probe
        reads += [(s, 0, min(s.size, HEADER_PROBE)) for s in heads if s.size]
    if kind.compression is Compression.NONE:
        reads += [(s, s.size - 1, s.size) for s in sources if s.size >= MIN_PART_SIZE]
    return reads


def plan_sources(read: Reader, sources: Sequence[SourceObject],
                 kind: FileKind) -> tuple[list[Segment], AssemblerSpec | None, int | None]:
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
    decoder = Decoder(compression, obj.key)
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
        firsts.add(record_text(_first_record(read, obj, compression)))
    if len(firsts) == 1 and sum(1 for o in sources if o.size) > 1:
        raise UnsupportedFormatError(
            f"{sources[0].key} and the other CSV files of its partition all start with the same line "
            f"{show_record(next(iter(firsts)))}: a header or data? Say which with --format csv-header or --format csv"
        )
    return False


def _plan_parquet(read: Reader, sources: Sequence[SourceObject]) -> tuple[list[Segment], AssemblerSpec | None, int | None]:
    from .parquet_concat import ParquetConcatError, ParquetEncryptedError, read_footer

    if not any(s.size >= MIN_PART_SIZE for s in sources):
        # Every source is downloaded anyway: rewrite them into large row groups.
        segments = [Range(s, 0, s.size, Transform.PARQUET) for s in sources]
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

