"""A small, schema-less reader and writer for the Thrift *compact* protocol.

Parquet stores its footer (``FileMetaData``) and its page indexes as Thrift compact-encoded structs.
To merge Parquet files we must change a handful of integers deep inside those structs while keeping
everything else (statistics, logical types, fields added by newer format versions that this code has
never heard of) exactly as the writer produced it. Generated Thrift classes would silently drop the
unknown fields, so this module decodes *generically*: a struct becomes an ordered list of
``(field id, wire type, value)`` triples, recursively, and nothing is interpreted.

Round trip: ``encode_struct(decode_struct(b)[0]) == b`` for anything a conforming writer produces.
The encoder remembers the two layout choices a writer can make for the same value (long-form
field headers and long-form list headers) so those survive too. What is normalised: non-minimal
varints (no known writer emits them), and booleans inside containers, which are written 1/2 as the
C++ and Java libraries do, so a false written as 0 comes back as 2 (Parquet has no ``list<bool>``,
so this never arises in Parquet metadata).

The wire format (Thrift's ``thrift-compact-protocol.md``), in brief:

* integers are ULEB128 varints; i16/i32/i64 are zigzag-encoded first; i8 is one raw byte;
* double is 8 bytes little-endian; binary (and string) is a varint length then the bytes;
  uuid is 16 raw bytes;
* a field header is one byte ``(id delta << 4) | type`` when the id is 1..15 above the previous
  field's id, otherwise ``type`` followed by the zigzag-varint id; a bool field stores its value
  in the type nibble (1 = true, 2 = false) and has no body; a 0 byte ends the struct;
* a list/set header is ``(size << 4) | elem type`` for size < 15, otherwise ``0xF0 | elem type``
  and a varint size; a map is ``0`` when empty, otherwise a varint size and ``(key << 4) | value``.
"""

from __future__ import annotations

import gc
import struct as _struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Union

from ..errors import MpcommitError

__all__ = [
    "CType",
    "Field",
    "Struct",
    "ThriftDecodeError",
    "ThriftError",
    "ThriftList",
    "ThriftMap",
    "decode_struct",
    "encode_struct",
    "gc_paused",
    "loads",
    "dumps",
]

DEFAULT_MAX_DEPTH = 64


class ThriftError(MpcommitError, ValueError):
    """A value that cannot be encoded in the compact protocol (out-of-range integer, bad type)."""


class ThriftDecodeError(ThriftError):
    """Bytes that are not a well-formed compact-protocol struct (truncated, bad type, too deep)."""


class CType(IntEnum):
    """Compact-protocol wire type codes.

    ``BOOL`` stands for both boolean codes: in field headers the code carries the value
    (1 = true, 2 = false); as a container element type either code means "bool".
    """

    BOOL = 1
    BOOL_FALSE = 2
    BYTE = 3
    I16 = 4
    I32 = 5
    I64 = 6
    DOUBLE = 7
    BINARY = 8
    LIST = 9
    SET = 10
    MAP = 11
    STRUCT = 12
    UUID = 13


Value = Union[bool, int, float, bytes, "ThriftList", "ThriftMap", "Struct"]

_INT_RANGES = {
    CType.BYTE: (-(1 << 7), (1 << 7) - 1),
    CType.I16: (-(1 << 15), (1 << 15) - 1),
    CType.I32: (-(1 << 31), (1 << 31) - 1),
    CType.I64: (-(1 << 63), (1 << 63) - 1),
}
_DOUBLE = _struct.Struct("<d")


@dataclass
class Field:
    """One field of a struct: its id, its wire type, its value.

    ``long_header`` records that the writer used the long header form although the short one was
    possible; it only matters for byte-identical re-encoding and is ignored by ``==``.
    """

    id: int
    type: CType
    value: Value
    long_header: bool = field(default=False, compare=False)


@dataclass
class ThriftList:
    """A list (or, with ``is_set``, a set) of values of one wire type.

    ``elem_type`` keeps the raw code the writer used (a bool list may say 1 or 2).
    """

    elem_type: CType
    items: list[Any]
    is_set: bool = False
    long_header: bool = field(default=False, compare=False)

    @property
    def ctype(self) -> CType:
        """The field type to use for a field holding this container."""
        return CType.SET if self.is_set else CType.LIST


@dataclass
class ThriftMap:
    """A map as an ordered list of ``(key, value)`` pairs (wire order is preserved)."""

    key_type: CType
    value_type: CType
    items: list[tuple[Any, Any]]


@dataclass
class Struct:
    """A decoded struct: its fields in wire order (normally ascending ids), unknown ones included."""

    fields: list[Field] = field(default_factory=list)

    def field(self, fid: int) -> Field | None:
        """The field with id ``fid``, or None when absent."""
        for f in self.fields:
            if f.id == fid:
                return f
        return None

    def get(self, fid: int, default: Any = None) -> Any:
        """The value of field ``fid``, or ``default`` when absent."""
        f = self.field(fid)
        return default if f is None else f.value

    def __contains__(self, fid: object) -> bool:
        return any(f.id == fid for f in self.fields)

    def set(self, fid: int, ctype: CType, value: Value) -> None:
        """Set field ``fid``: replace its value in place, or insert it before the first larger id."""
        f = self.field(fid)
        if f is not None:
            f.type = ctype
            f.value = value
            return
        pos = next((i for i, g in enumerate(self.fields) if g.id > fid), len(self.fields))
        self.fields.insert(pos, Field(fid, ctype, value))

    def remove(self, fid: int) -> None:
        """Remove field ``fid`` if present."""
        self.fields = [f for f in self.fields if f.id != fid]

    def copy(self) -> Struct:
        """A shallow copy: new ``Field`` objects (so ``set``/``remove`` leave the original alone),
        shared values (copy a nested struct too before changing it)."""
        return Struct([Field(f.id, f.type, f.value, f.long_header) for f in self.fields])


# ---------------------------------------------------------------------------------------- decoding
@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small acyclic objects.

    Decoding a large footer allocates hundreds of thousands of objects; each allocation burst
    triggers collections that rescan everything built so far, which makes decoding several times
    slower. Nothing built here forms cycles, so deferring collection loses nothing. GC is turned back
    on only if it was on: concurrent users can at worst re-enable it a little early.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_CTYPE_OF = {int(c): c for c in CType}  # faster than calling CType(code) per value
_BYTE, _I16, _I32, _I64, _DBL, _BIN = 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT, _UUID = 9, 10, 11, 12, 13
_ZIGZAG_BITS = {_I16: 16, _I32: 32, _I64: 64}


class _Reader:
    """Decoding state. Written for speed (a big footer has a million values): locals over
    attributes, plain ints over enum members, one dispatch per value."""

    __slots__ = ("buf", "pos", "end", "max_depth")

    def __init__(self, buf: bytes, pos: int, end: int, max_depth: int):
        self.buf = buf
        self.pos = pos
        self.end = end
        self.max_depth = max_depth

    def fail(self, what: str) -> ThriftDecodeError:
        return ThriftDecodeError(f"{what} at byte {self.pos}")

    def byte(self) -> int:
        pos = self.pos
        if pos >= self.end:
            raise self.fail("unexpected end of data")
        self.pos = pos + 1
        return self.buf[pos]

    def take(self, n: int) -> bytes:
        pos = self.pos
        if pos + n > self.end:
            raise self.fail(f"unexpected end of data (need {n} bytes, {self.end - pos} left)")
        self.pos = pos + n
        return self.buf[pos : pos + n]

    def varint(self) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        result = shift = 0
        while pos < end:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return result
            shift += 7
            if shift > 63:
                self.pos = pos
                raise self.fail("varint longer than 10 bytes")
        self.pos = pos
        raise self.fail("unexpected end of data")

    def zigzag(self, bits: int) -> int:
        n = self.varint()
        value = (n >> 1) ^ -(n & 1)
        if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
            raise self.fail(f"integer {value} out of range for i{bits}")
        return value

    def size(self, what: str) -> int:
        n = self.varint()
        # Every element takes at least one byte, so a size beyond the remaining bytes is corrupt;
        # checking here keeps a damaged footer from asking for a gigantic allocation.
        if n > self.end - self.pos:
            raise self.fail(f"{what} size {n} exceeds the {self.end - self.pos} remaining bytes")
        return n

    def value(self, ctype: int, depth: int) -> Any:
        bits = _ZIGZAG_BITS.get(ctype)
        if bits is not None:
            return self.zigzag(bits)
        if ctype == _BIN:
            return self.take(self.size("binary"))
        if ctype >= _LIST and ctype <= _STRUCT:
            if depth >= self.max_depth:
                raise self.fail(f"containers nested deeper than {self.max_depth}")
            if ctype == _STRUCT:
                return self.struct(depth)
            if ctype == _MAP:
                return self.map(depth)
            return self.list(ctype == _SET, depth)
        if ctype == _BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if ctype == _DBL:
            return _DOUBLE.unpack(self.take(8))[0]
        if ctype == _UUID:
            return self.take(16)
        if ctype == CType.BOOL or ctype == CType.BOOL_FALSE:
            # Only reached for container elements: one byte, 1 = true (0 or 2 = false).
            b = self.byte()
            if b > 2:
                raise self.fail(f"invalid boolean byte {b}")
            return b == 1
        raise self.fail(f"unknown compact type {ctype}")

    def list(self, is_set: bool, depth: int) -> ThriftList:
        header = self.byte()
        elem = _CTYPE_OF.get(header & 0x0F)
        if elem is None:
            raise self.fail(f"unknown list element type {header & 0x0F}")
        n = header >> 4
        long_header = n == 15
        if long_header:
            n = self.size("list")
        value = self.value
        items = [value(elem, depth + 1) for _ in range(n)]
        return ThriftList(elem, items, is_set, long_header and n < 15)

    def map(self, depth: int) -> ThriftMap:
        n = self.size("map")
        if n == 0:
            return ThriftMap(CType.BINARY, CType.BINARY, [])
        kv = self.byte()
        kt, vt = _CTYPE_OF.get(kv >> 4), _CTYPE_OF.get(kv & 0x0F)
        if kt is None or vt is None:
            raise self.fail(f"unknown map element types {kv >> 4}, {kv & 0x0F}")
        value = self.value
        items = [(value(kt, depth + 1), value(vt, depth + 1)) for _ in range(n)]
        return ThriftMap(kt, vt, items)

    def struct(self, depth: int) -> Struct:
        fields: list[Field] = []
        append = fields.append
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return Struct(fields)
            ctype = _CTYPE_OF.get(header & 0x0F)
            delta = header >> 4
            if delta:
                fid = last + delta
                long_header = False
            else:
                fid = self.zigzag(16)
                long_header = 0 < fid - last <= 15
            if ctype is None:
                raise self.fail(f"unknown field type {header & 0x0F} (field {fid})")
            if ctype == CType.BOOL or ctype == CType.BOOL_FALSE:
                append(Field(fid, CType.BOOL, ctype == CType.BOOL, long_header))
            else:
                append(Field(fid, ctype, self.value(ctype, depth + 1), long_header))
            last = fid


def decode_struct(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> tuple[Struct, int]:
    """Decode one struct starting at ``buf[pos]``; return it and the position just after it.

    Reads no further than ``end`` (default: the end of ``buf``). Raises ``ThriftDecodeError`` on
    truncated or malformed input, or nesting deeper than ``max_depth``.
    """
    end = len(buf) if end is None else min(end, len(buf))
    r = _Reader(buf if isinstance(buf, bytes) else bytes(buf), pos, end, max_depth)
    with gc_paused():
        s = r.struct(0)
    return s, r.pos


def loads(buf: bytes | bytearray | memoryview, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Struct:
    """Decode a buffer holding exactly one struct; trailing bytes are an error."""
    s, end = decode_struct(buf, max_depth=max_depth)
    if end != len(buf):
        raise ThriftDecodeError(f"{len(buf) - end} trailing bytes after the struct (it ends at byte {end})")
    return s


# ---------------------------------------------------------------------------------------- encoding
# Like the decoder, written for speed: plain int comparisons, integers inlined.
def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_int(out: bytearray, n: Any, ctype: int) -> None:
    """A zigzag varint (i16/i32/i64) or a raw byte (i8), range-checked."""
    lo, hi = _INT_RANGES[ctype]
    if type(n) is not int and (isinstance(n, bool) or not isinstance(n, int)):
        raise ThriftError(f"{CType(ctype).name} value must be an int, not {type(n).__name__}")
    if not lo <= n <= hi:
        raise ThriftError(f"{n} out of range for {CType(ctype).name}")
    if ctype == _BYTE:
        out.append(n & 0xFF)
        return
    z = (n << 1) ^ (n >> 63)  # non-negative for any n in the i64 range
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _write_value(out: bytearray, ctype: int, v: Any) -> None:
    if ctype in _INT_RANGES:
        _write_int(out, v, ctype)
    elif ctype == _BIN:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            raise ThriftError(f"BINARY value must be bytes, not {type(v).__name__}")
        _varint(out, len(v))
        out += v
    elif ctype == _STRUCT:
        _write_struct(out, v)
    elif ctype == _LIST or ctype == _SET:
        _write_list(out, v)
    elif ctype == _MAP:
        _write_map(out, v)
    elif ctype == _DBL:
        out += _DOUBLE.pack(v)
    elif ctype == _UUID:
        if len(v) != 16:
            raise ThriftError(f"UUID value must be 16 bytes, not {len(v)}")
        out += v
    elif ctype == CType.BOOL or ctype == CType.BOOL_FALSE:
        out.append(1 if v else 2)
    else:
        raise ThriftError(f"unknown compact type {ctype}")


def _write_list(out: bytearray, lst: ThriftList) -> None:
    if not isinstance(lst, ThriftList):
        raise ThriftError(f"LIST/SET value must be a ThriftList, not {type(lst).__name__}")
    n = len(lst.items)
    elem = lst.elem_type
    if n < 15 and not lst.long_header:
        out.append((n << 4) | elem)
    else:
        out.append(0xF0 | elem)
        _varint(out, n)
    for item in lst.items:
        _write_value(out, elem, item)


def _write_map(out: bytearray, m: ThriftMap) -> None:
    if not isinstance(m, ThriftMap):
        raise ThriftError(f"MAP value must be a ThriftMap, not {type(m).__name__}")
    if not m.items:
        out.append(0)
        return
    _varint(out, len(m.items))
    out.append((m.key_type << 4) | m.value_type)
    for k, v in m.items:
        _write_value(out, m.key_type, k)
        _write_value(out, m.value_type, v)


def _write_struct(out: bytearray, s: Struct) -> None:
    if not isinstance(s, Struct):
        raise ThriftError(f"STRUCT value must be a Struct, not {type(s).__name__}")
    last = 0
    for f in s.fields:
        ctype, fid = f.type, f.id
        is_bool = ctype == CType.BOOL or ctype == CType.BOOL_FALSE
        wire = (CType.BOOL if f.value else CType.BOOL_FALSE) if is_bool else ctype
        delta = fid - last
        if 0 < delta <= 15 and not f.long_header:
            out.append((delta << 4) | wire)
        else:
            out.append(wire)
            _write_int(out, fid, _I16)
        if not is_bool:
            _write_value(out, ctype, f.value)
        last = fid
    out.append(0)


def encode_struct(s: Struct) -> bytes:
    """Encode a struct (fields in list order, as decoded) in the compact protocol."""
    out = bytearray()
    _write_struct(out, s)
    return bytes(out)


dumps = encode_struct
