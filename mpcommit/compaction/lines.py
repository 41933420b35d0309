"""Line rules of text merges: every source ends with a newline, and a CSV's header appears once.

CSV records may hold quoted newlines, so the end of a header record is found by :func:`first_record_end`, not
by the first newline.
"""

from __future__ import annotations

from ..sizing import MiB
from .errors import MixedSchemaError, UnreadableSourceError

#: The longest CSV header line accepted.
MAX_HEADER = 1 * MiB


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


def record_text(record: bytes) -> bytes:
    return record.rstrip(b"\r\n")


class LineJoiner:
    """Joins line-oriented sources: a newline after any source that lacks one, and CSV headers.

    ``header``: None for no header; else ``b""`` to keep the first source's header and strip (and compare)
    every later one, or the expected header record to strip from every source.
    """

    def __init__(self, header: bytes | None = None):
        self._expected = None if header in (None, b"") else record_text(header)
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
        text = record_text(record)
        if self._expected is None:
            if not record:
                return b""  # an empty source has no header: the next one provides it
            self._expected = text
            if self._keep_first:
                return record if record.endswith(b"\n") else record + b"\n"
            return b""
        if text != self._expected and record:
            raise MixedSchemaError(
                f"{self._name}: CSV header {show_record(text)} differs from {show_record(self._expected)}; merge skipped"
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


def show_record(text: bytes) -> str:
    shown = text[:80].decode("utf-8", "replace")
    return repr(shown + ("..." if len(text) > 80 else ""))
