"""Whole-file compression, streamed: decoders that read every member or stream of a source, encoders that
write one stream, and the newline member that ends a gzip/bzip2 source lacking one.

zstd and lz4 have no incremental codec in the standard library; pyarrow's streams serve instead (decoding
then holds a source whole, within :data:`MAX_WHOLE_SOURCE`).
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from typing import Any

from ..sizing import MiB
from .errors import UnreadableSourceError, UnsupportedFormatError
from .kinds import Compression

#: zstd and lz4 have no incremental codec in the standard library: a source is decompressed whole, so
#: sources bigger than this are refused rather than risk the memory.
MAX_WHOLE_SOURCE = 512 * MiB


def newline_member(compression: Compression) -> bytes:
    """A gzip member or bzip2 stream holding one newline: appended, it ends a source that lacked one."""
    if compression is Compression.GZIP:
        return _gzip_compress(b"\n")
    if compression is Compression.BZIP2:
        return bz2.compress(b"\n")
    raise AssertionError(compression)


def _gzip_compress(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def decompress_all(compression: Compression, data: bytes, name: str) -> bytes:
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


class Decoder:
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


class Encoder:
    def __init__(self, compression: Compression):
        self._compression = compression
        self._sink: Sink | None = None
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

            self._sink = Sink()
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


class Sink:
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

