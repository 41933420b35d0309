"""The parts of a merge upload: which bytes are copied server-side and which pass through the client.

Pure planning over sizes; nothing is read or written here. S3's rules for a multipart upload: parts of
5 MiB to 5 GiB, except the last, which may be smaller; at most 10,000 parts; at most 5 TiB in all.
A merged file is an ordered list of *segments*: byte ranges of source objects and literal bytes (a CSV
header, a Parquet footer, a newline). The plan makes every upload legal while never downloading what can
be copied:

* a source range of at least 5 MiB is *copyable*: it becomes UploadPartCopy parts (pinned by the source's
  ETag) of ``copy_part_size`` to twice that (the last piece of a range joins the one before it), at most
  5 GiB each. A server-side copy runs at the store's copy rate per request (Hadoop measured 6-10 MB/s for
  one copy), so a merge's copy time is that of its largest part when the parts run side by side, and small
  parts keep it short; more parts only cost more requests, which are cheap;
* smaller ranges and literals are fetched and packed into upload parts of at least 5 MiB, or into the
  final part, which may be smaller.

Whatever follows the last copyable range is the *stream*: it is packed into parts while the merge runs
(:func:`pack_stream`), so that formats may transform those pieces (strip a CSV header, add a missing
newline) without the plan knowing the exact result. Between copyable ranges every byte counts exactly, so
only untransformed pieces may sit there. When small pieces there add up to less than 5 MiB, the plan borrows
the missing bytes from the front of the next copyable range (fetching them); :func:`arrange` orders a
merge's units so that this happens only when a format leaves no other choice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ..sizing import MAX_OBJECT_SIZE, MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE, MiB
from .errors import MergePlanError

#: Upload parts (of fetched bytes) are filled to about this size before they are sent.
DEFAULT_UPLOAD_PART_SIZE = 8 * MiB
#: Copied ranges are cut into UploadPartCopy parts of this size to twice it: S3's smallest part, so that as many
#: copies as possible run side by side (each costs one request; S3 bills a copy part as one PUT).
DEFAULT_COPY_PART_SIZE = MIN_PART_SIZE


@dataclass(frozen=True, order=True)
class SourceObject:
    """A source object, pinned by the ETag it had when the merge was planned."""

    key: str
    etag: str
    size: int


class Transform(str, Enum):
    """What a merge's assembler does to the fetched bytes of a stream range (the merge runs the assembler
    whose transform it is; a range without one is used as it is)."""

    LINES = "lines"            # line-oriented text: a newline added where a source lacks one, one CSV header
    MEMBERS = "members"        # gzip/bzip2 fetched whole: checked, a newline member added where needed
    RECOMPRESS = "recompress"  # decompressed, joined line by line, compressed again into one stream
    PARQUET = "parquet"        # small Parquet files read and rewritten into large row groups


@dataclass(frozen=True)
class Range:
    """Bytes ``[start, end)`` of ``source``. ``transform`` (stream only) names what the merge's
    assembler does to the fetched bytes; None means they are used as they are."""

    source: SourceObject
    start: int
    end: int
    transform: Transform | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end <= self.source.size:
            raise MergePlanError(
                f"range {self.start}..{self.end} lies outside {self.source.key!r} ({self.source.size} bytes)"
            )

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class LiteralBytes:
    """Bytes produced by the merge itself (a header, a footer, a separator)."""

    data: bytes = field(repr=False)

    @property
    def length(self) -> int:
        return len(self.data)


Segment = Range | LiteralBytes


@dataclass(frozen=True)
class CopyPart:
    """UploadPartCopy of ``source[start, end)``."""

    number: int
    source: SourceObject
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class UploadPart:
    """UploadPart of the concatenation of ``pieces`` (fetched ranges and literals), sized exactly."""

    number: int
    pieces: tuple[Segment, ...]

    @property
    def size(self) -> int:
        return sum(p.length for p in self.pieces)


@dataclass(frozen=True)
class PartPlan:
    """Numbered parts, then the stream (packed into the parts after them while merging).

    ``stream_estimate`` is the stream's size before transforms (literals exact, ranges as planned).
    ``borrowed`` counts bytes fetched from copyable ranges to make a part legal (0 unless forced).
    """

    parts: tuple[CopyPart | UploadPart, ...]
    stream: tuple[Segment, ...]
    upload_part_size: int
    borrowed: int = 0

    @property
    def copied_bytes(self) -> int:
        return sum(p.size for p in self.parts if isinstance(p, CopyPart))

    @property
    def fetched_bytes(self) -> int:
        """Bytes the merge reads through the client (before transforms)."""
        fixed = sum(x.length for p in self.parts if isinstance(p, UploadPart) for x in p.pieces if isinstance(x, Range))
        return fixed + sum(x.length for x in self.stream if isinstance(x, Range))

    @property
    def stream_estimate(self) -> int:
        return sum(x.length for x in self.stream)

    @property
    def stream_parts_estimate(self) -> int:
        """How many parts the stream takes (at most; exact when no transform changes a size)."""
        return max(1, math.ceil(self.stream_estimate / self.upload_part_size)) if self.stream else 0


def is_copyable(segment: Segment) -> bool:
    """A source range that can be a part of its own (UploadPartCopy): at least 5 MiB, used as it is."""
    return isinstance(segment, Range) and segment.transform is None and segment.length >= MIN_PART_SIZE


def copy_splits(start: int, end: int, part_size: int = MAX_PART_SIZE) -> list[tuple[int, int]]:
    """Split a copyable range into parts of nearly equal sizes, each at least ``part_size`` (or the whole
    range, when it is smaller) and at most 5 GiB: as many as ``part_size`` allows, so that they can be copied
    side by side."""
    length = end - start
    if length < MIN_PART_SIZE:
        raise MergePlanError(f"a range of {length} bytes is too small to be copied as a part")
    if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
        raise MergePlanError(f"copy parts must be between 5 MiB and 5 GiB, got {part_size}")
    count = max(math.ceil(length / MAX_PART_SIZE), length // part_size, 1)
    base, extra = divmod(length, count)
    out = []
    pos = start
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append((pos, pos + size))
        pos += size
    return out


def plan_parts(segments: Sequence[Segment], *, upload_part_size: int = DEFAULT_UPLOAD_PART_SIZE,
               copy_part_size: int = DEFAULT_COPY_PART_SIZE) -> PartPlan:
    """Plan the parts of the merged object ``segments`` (in order): see the module docstring.

    Raises MergePlanError when the object would exceed 5 TiB or 10,000 parts (the upload and copy part sizes
    grow before that happens), or when a transformed range sits before a copyable one.
    """
    if not MIN_PART_SIZE <= copy_part_size <= MAX_PART_SIZE:
        raise MergePlanError(f"copy_part_size must be between 5 MiB and 5 GiB, got {copy_part_size}")
    if not MIN_PART_SIZE <= upload_part_size <= MAX_PART_SIZE - MIN_PART_SIZE:
        raise MergePlanError(f"upload_part_size must be between 5 MiB and 5 GiB - 5 MiB, got {upload_part_size}")
    total = sum(s.length for s in segments)
    if total > MAX_OBJECT_SIZE:
        raise MergePlanError(f"the merged object would be {total} bytes, more than S3's 5 TiB limit")
    size, copy_size = upload_part_size, copy_part_size
    while True:
        plan = _plan_once(segments, size, copy_size)
        if len(plan.parts) + plan.stream_parts_estimate <= MAX_PARTS:
            return plan
        if copy_size * 2 <= MAX_PART_SIZE and copy_size < size:
            copy_size *= 2
            continue
        if size * 2 > MAX_PART_SIZE - MIN_PART_SIZE:
            raise MergePlanError(
                f"the merged object needs more than {MAX_PARTS} parts even with {size}-byte parts; merge fewer files"
            )
        size *= 2
        copy_size = min(max(copy_size, size), MAX_PART_SIZE)


def _plan_once(segments: Sequence[Segment], upload_part_size: int, copy_part_size: int) -> PartPlan:
    last_copy = max((i for i, s in enumerate(segments) if is_copyable(s)), default=-1)
    parts: list[CopyPart | UploadPart] = []
    buffer: list[Segment] = []
    buffered = 0
    borrowed = 0

    def flush() -> None:
        nonlocal buffer, buffered
        if buffer:
            parts.append(UploadPart(len(parts) + 1, tuple(buffer)))
            buffer, buffered = [], 0

    def add(piece: Segment) -> None:
        nonlocal buffered
        if isinstance(piece, LiteralBytes) and buffered + piece.length > upload_part_size:
            # A big literal (a Parquet footer) is cut so that no upload part grows past the part size.
            data = piece.data
            while data:
                take = min(len(data), max(upload_part_size - buffered, 1))
                buffer.append(LiteralBytes(data[:take]))
                buffered += take
                data = data[take:]
                if buffered >= upload_part_size:
                    flush()
            return
        buffer.append(piece)
        buffered += piece.length
        if buffered >= upload_part_size:
            flush()

    for index, seg in enumerate(segments[: last_copy + 1]):
        if isinstance(seg, Range) and seg.transform is not None:
            raise MergePlanError(
                f"a transformed range of {seg.source.key!r} comes before a copied range; transformed pieces must "
                "follow every copied one"
            )
        if not is_copyable(seg):
            if seg.length:
                add(seg)
            continue
        assert isinstance(seg, Range)
        start = seg.start
        if 0 < buffered < MIN_PART_SIZE and parts and isinstance(parts[-1], UploadPart):
            # The small pieces follow an upload part (flushed at the part size): they join it.
            last = parts.pop()
            parts.append(UploadPart(last.number, last.pieces + tuple(buffer)))
            buffer, buffered = [], 0
        if 0 < buffered < MIN_PART_SIZE:
            # The small pieces before this range cannot be a part of their own: borrow the missing bytes from
            # the front of this range -- or take all of it when what would remain is too small to copy.
            need = MIN_PART_SIZE - buffered
            if seg.length - need >= MIN_PART_SIZE:
                buffer.append(Range(seg.source, start, start + need))
                buffered += need
                borrowed += need
                start += need
            else:
                borrowed += seg.length
                add(seg)
                continue
        flush()
        for lo, hi in copy_splits(start, seg.end, copy_part_size):
            parts.append(CopyPart(len(parts) + 1, seg.source, lo, hi))
    # Pieces buffered after the last copy (a newline after it) open the stream.
    stream = tuple(buffer) + tuple(s for s in segments[last_copy + 1 :] if s.length)
    return PartPlan(tuple(parts), stream, upload_part_size, borrowed)


def arrange(units: Sequence[Sequence[Segment]]) -> list[Sequence[Segment]]:
    """Order merge units (each a run of segments that must stay together, e.g. a source and the newline
    after it) so that no small piece lands between two copyable ranges unless it must:

    1. units that end with a copyable range (nothing small after them);
    2. units that contain a copyable range but end with small pieces (at most one of these is free: the
       rest force a borrow);
    3. units with nothing copyable: they form the stream.

    Stable within each class, so the given order (by key) decides ties.
    """

    def rank(unit: Sequence[Segment]) -> int:
        nonempty = [s for s in unit if s.length]
        if not any(is_copyable(s) for s in nonempty):
            return 2
        return 0 if is_copyable(nonempty[-1]) else 1

    return sorted(units, key=rank)


def pack_stream(chunks: Iterable[bytes], part_size: int) -> Iterator[bytes]:
    """Pack a stream of byte chunks into part bodies of exactly ``part_size`` bytes, then one final body
    with the rest (smaller, never empty). An empty stream yields nothing."""
    if part_size < MIN_PART_SIZE:
        raise MergePlanError(f"stream parts must be at least 5 MiB, got {part_size}")
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= part_size:
            yield bytes(buffer[:part_size])
            del buffer[:part_size]
    if buffer:
        yield bytes(buffer)
