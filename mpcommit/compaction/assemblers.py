"""The assemblers of text merges: what the merge does to the fetched pieces of its stream, by
:class:`~.parts.Transform`. A spec is the small, picklable description that travels with the merge (to a
Spark executor too); ``new()`` makes the assembler that runs it.

* ``LINES``: uncompressed text and CSV, joined line by line (:class:`~.lines.LineJoiner`);
* ``MEMBERS``: gzip/bzip2 sources fetched whole, checked by decompressing them, a newline member added
  where the text does not end with one;
* ``RECOMPRESS``: sources decompressed in pieces, joined line by line, compressed again into one stream.

Parquet's rewrite is :mod:`.parquet_rewrite`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .codecs import Decoder, Encoder, decompress_all, newline_member
from .kinds import Compression
from .lines import LineJoiner
from .parts import Range, Transform


@dataclass(frozen=True)
class LinesSpec:
    """Whole uncompressed sources (or consecutive pieces of one), joined line by line."""

    transform: ClassVar[Transform] = Transform.LINES
    header: bytes | None = None

    def new(self) -> "LinesAssembler":
        return LinesAssembler(self.header)


class LinesAssembler:
    def __init__(self, header: bytes | None):
        self._joiner = LineJoiner(header)

    def feed(self, piece: Range, data: bytes) -> bytes:
        if piece.start == 0:
            self._joiner.start(piece.source.key)
        out = self._joiner.data(data, final=piece.end == piece.source.size)
        if piece.end == piece.source.size:
            out += self._joiner.end()
        return out

    def finish(self) -> bytes:
        return b""



@dataclass(frozen=True)
class MembersSpec:
    """gzip/bzip2 sources fetched whole: checked by decompressing them, a newline member added when the
    decompressed text does not end with one."""

    transform: ClassVar[Transform] = Transform.MEMBERS
    compression: Compression

    def new(self) -> "MembersAssembler":
        return MembersAssembler(self.compression)


class MembersAssembler:
    def __init__(self, compression: Compression):
        self._compression = compression

    def feed(self, piece: Range, data: bytes) -> bytes:
        if not data:
            return data
        text = decompress_all(self._compression, data, piece.source.key)
        if text and not text.endswith(b"\n"):
            return data + newline_member(self._compression)
        return data

    def finish(self) -> bytes:
        return b""



@dataclass(frozen=True)
class RecompressSpec:
    """Sources decompressed (in pieces), joined line by line, and compressed again into one stream."""

    transform: ClassVar[Transform] = Transform.RECOMPRESS
    compression: Compression
    header: bytes | None = None

    def new(self) -> "RecompressAssembler":
        return RecompressAssembler(self.compression, self.header)


class RecompressAssembler:
    def __init__(self, compression: Compression, header: bytes | None):
        self._compression = compression
        self._joiner = LineJoiner(header)
        self._encoder = Encoder(compression)
        self._decoder: Decoder | None = None

    def feed(self, piece: Range, data: bytes) -> bytes:
        if piece.start == 0:
            self._decoder = Decoder(self._compression, piece.source.key)
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

