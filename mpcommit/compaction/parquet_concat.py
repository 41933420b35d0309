"""Merge Parquet files with identical schemas by concatenating their row groups and writing a new footer.

A Parquet file is ``PAR1``, column-chunk pages (grouped in row groups), optionally bloom filters and
page indexes, then the footer: a Thrift compact-encoded ``FileMetaData``, its length as 4 bytes little
endian, and ``PAR1`` again. Pages carry no absolute positions; only the footer (and the OffsetIndex, see
below) do. So files can be merged without decoding any data:

    merged = PAR1
           + source_1[4 : footer_start_1]
           + source_2[4 : footer_start_2]
           + ...
           + [rewritten OffsetIndexes]  + new FileMetaData + len + PAR1

The byte ranges are copied unchanged (server-side, with UploadPartCopy, by the S3 executor); this
module only plans the copy and builds the new tail (``concat_footers``). Every absolute offset in the
footer of source *i* moves by ``delta_i = (output position of its range) - (start of its range)``:

* ``RowGroup.file_offset``;
* ``ColumnChunk.file_offset`` (deprecated; current writers put 0 there, which stays 0);
* ``ColumnMetaData.data_page_offset``, ``index_page_offset``, ``dictionary_page_offset``,
  ``bloom_filter_offset``;
* ``ColumnChunk.offset_index_offset`` and ``column_index_offset``.

Page indexes. A ColumnIndex holds only min/max values and null counts, so it stays valid where it was
copied. An OffsetIndex, however, lists the absolute file offset of every data page
(``PageLocation.offset``): a copied OffsetIndex points into the wrong bytes. So, for every source that
moves (``delta != 0``), the OffsetIndexes are decoded, their page offsets shifted, re-encoded (the
varints may grow) and placed in the new tail just before the footer; the stale copies in the data
range become dead bytes. This needs the OffsetIndex bytes of those sources: ``read_footer`` fetches
them (they usually sit right before the footer, inside the first tail read). Alternatively
``page_index="drop"`` removes every page-index reference from the merged footer.

Bloom filters hold no offsets and are kept (their offsets shifted). The merged footer keeps the schema,
column orders, key/value metadata (e.g. ``ARROW:schema``) and ``created_by`` of the first source.

Refused, with a ``ParquetConcatError`` naming the file: encrypted files (``PARE`` magic, or a plaintext
footer carrying encryption fields), unreadable or inconsistent footers, column chunks stored in
another file (``file_path``), and sources whose schema or column orders differ from the first's.
"""

from __future__ import annotations

import struct as _struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from ..errors import MpcommitError
from .thrift_compact import (
    CType,
    Struct,
    ThriftDecodeError,
    ThriftError,
    ThriftList,
    decode_struct,
    dumps,
    gc_paused,
    loads,
)

__all__ = [
    "FOOTER_TAIL",
    "MAGIC",
    "MAGIC_ENCRYPTED",
    "DEFAULT_TAIL_READ",
    "ConcatPlan",
    "ParquetConcatError",
    "ParquetEncryptedError",
    "ParquetFooter",
    "ParquetFooterError",
    "ParquetSchemaMismatchError",
    "Piece",
    "assemble_locally",
    "concat_footers",
    "concat_local",
    "parse_footer_length",
    "read_footer",
]

MAGIC = b"PAR1"
MAGIC_ENCRYPTED = b"PARE"  # files written in encrypted-footer mode end with this instead of PAR1
FOOTER_TAIL = 8  # 4-byte little-endian footer length + 4-byte magic
DEFAULT_TAIL_READ = 64 * 1024  # first read of a file's tail: usually holds footer and page indexes
MAX_ROW_GROUPS = (1 << 15) - 1  # RowGroup.ordinal is an i16
_U32 = _struct.Struct("<I")

# Field ids from parquet.thrift (apache/parquet-format).
# FileMetaData
_FMD_VERSION = 1
_FMD_SCHEMA = 2
_FMD_NUM_ROWS = 3
_FMD_ROW_GROUPS = 4
_FMD_COLUMN_ORDERS = 7
_FMD_ENCRYPTION_ALGORITHM = 8
_FMD_FOOTER_SIGNING_KEY_METADATA = 9
# RowGroup
_RG_COLUMNS = 1
_RG_NUM_ROWS = 3
_RG_FILE_OFFSET = 5
_RG_ORDINAL = 7
# ColumnChunk
_CC_FILE_PATH = 1
_CC_FILE_OFFSET = 2
_CC_META_DATA = 3
_CC_OFFSET_INDEX_OFFSET = 4
_CC_OFFSET_INDEX_LENGTH = 5
_CC_COLUMN_INDEX_OFFSET = 6
_CC_COLUMN_INDEX_LENGTH = 7
_CC_CRYPTO_METADATA = 8
_CC_ENCRYPTED_COLUMN_METADATA = 9
_CC_PAGE_INDEX_FIELDS = (
    _CC_OFFSET_INDEX_OFFSET,
    _CC_OFFSET_INDEX_LENGTH,
    _CC_COLUMN_INDEX_OFFSET,
    _CC_COLUMN_INDEX_LENGTH,
)
# ColumnMetaData
_CMD_PATH_IN_SCHEMA = 3
_CMD_TOTAL_COMPRESSED_SIZE = 7
_CMD_DATA_PAGE_OFFSET = 9
_CMD_INDEX_PAGE_OFFSET = 10
_CMD_DICTIONARY_PAGE_OFFSET = 11
_CMD_BLOOM_FILTER_OFFSET = 14
_CMD_BLOOM_FILTER_LENGTH = 15
_CMD_SHIFTED = (_CMD_DATA_PAGE_OFFSET, _CMD_INDEX_PAGE_OFFSET, _CMD_DICTIONARY_PAGE_OFFSET, _CMD_BLOOM_FILTER_OFFSET)
# OffsetIndex / PageLocation
_OI_PAGE_LOCATIONS = 1
_PL_OFFSET = 1
# SchemaElement, for error messages only
_SCHEMA_ELEMENT_FIELDS = {
    1: "type",
    2: "type_length",
    3: "repetition_type",
    4: "name",
    5: "num_children",
    6: "converted_type",
    7: "scale",
    8: "precision",
    9: "field_id",
    10: "logicalType",
}


# ---------------------------------------------------------------------------------------- errors
class ParquetConcatError(MpcommitError):
    """Parquet files that cannot be merged by row-group concatenation."""


class ParquetFooterError(ParquetConcatError):
    """A file whose footer cannot be read: not Parquet, truncated, corrupt, or inconsistent offsets."""


class ParquetEncryptedError(ParquetConcatError):
    """An encrypted Parquet file: its footer (or column metadata) cannot be rewritten without the keys."""


class ParquetSchemaMismatchError(ParquetConcatError):
    """A source whose schema or column orders differ from the first source's."""


# ---------------------------------------------------------------------------------------- footer
def parse_footer_length(tail8: bytes, *, name: str = "<parquet file>") -> int:
    """The FileMetaData length stored in a file's last 8 bytes; checks the closing magic.

    Raises ``ParquetEncryptedError`` for ``PARE`` (encrypted footer), ``ParquetFooterError`` otherwise.
    """
    if len(tail8) != FOOTER_TAIL:
        raise ParquetFooterError(f"{name}: expected the last {FOOTER_TAIL} bytes of the file, got {len(tail8)}")
    magic = bytes(tail8[4:])
    if magic == MAGIC_ENCRYPTED:
        raise ParquetEncryptedError(f"{name}: encrypted Parquet footer (PARE magic); cannot merge encrypted files")
    if magic != MAGIC:
        raise ParquetFooterError(f"{name}: not a Parquet file (ends with {magic!r}, expected {MAGIC!r})")
    return _U32.unpack(tail8[:4])[0]


def _int_field(s: Struct, fid: int, what: str, name: str, *, required: bool = True) -> int | None:
    f = s.field(fid)
    if f is None:
        if required:
            raise ParquetFooterError(f"{name}: footer lacks {what}")
        return None
    if f.type not in (CType.I16, CType.I32, CType.I64):
        raise ParquetFooterError(f"{name}: footer field {what} has wire type {f.type.name}, expected an integer")
    return f.value


def _list_of_structs(s: Struct, fid: int, what: str, name: str, *, required: bool = True) -> list[Struct] | None:
    f = s.field(fid)
    if f is None:
        if required:
            raise ParquetFooterError(f"{name}: footer lacks {what}")
        return None
    if not isinstance(f.value, ThriftList) or f.value.elem_type != CType.STRUCT:
        raise ParquetFooterError(f"{name}: footer field {what} is not a list of structs")
    return f.value.items


def _column_label(cmd: Struct) -> str:
    path = cmd.get(_CMD_PATH_IN_SCHEMA)
    if isinstance(path, ThriftList):
        return ".".join(p.decode("utf-8", "replace") for p in path.items if isinstance(p, bytes))
    return "?"


@dataclass(frozen=True)
class ParquetFooter:
    """The decoded footer of one source file, with what is needed to plan a merge.

    ``metadata`` is the decoded ``FileMetaData`` (treat as read-only; ``concat_footers`` copies what
    it changes). ``offset_index_bytes``, when loaded, holds the source's bytes
    ``[offset_index_span[0], offset_index_span[1])``: the OffsetIndexes, needed to move the file.
    """

    name: str
    file_size: int
    footer_len: int
    metadata: Struct
    offset_index_bytes: bytes | None = None

    @classmethod
    def parse(cls, footer_bytes: bytes, *, file_size: int, name: str) -> ParquetFooter:
        """Parse a footer from the last bytes of a file.

        ``footer_bytes`` is any suffix of the file at least ``footer_len + 8`` bytes long (the
        FileMetaData, its length and the closing magic); the whole file also works, in which case
        the leading magic is checked too. ``file_size`` is the size of the whole file.
        """
        footer_bytes = bytes(footer_bytes)
        if file_size < len(MAGIC) + FOOTER_TAIL:
            raise ParquetFooterError(f"{name}: {file_size} bytes is too small for a Parquet file")
        if len(footer_bytes) > file_size:
            raise ParquetFooterError(f"{name}: got {len(footer_bytes)} footer bytes for a {file_size}-byte file")
        footer_len = parse_footer_length(footer_bytes[-FOOTER_TAIL:], name=name)
        footer_start = file_size - FOOTER_TAIL - footer_len
        if footer_start < len(MAGIC):
            raise ParquetFooterError(
                f"{name}: footer length {footer_len} does not fit in a {file_size}-byte file (corrupt footer)"
            )
        if len(footer_bytes) < footer_len + FOOTER_TAIL:
            raise ParquetFooterError(
                f"{name}: need the last {footer_len + FOOTER_TAIL} bytes of the file, got {len(footer_bytes)}"
            )
        if len(footer_bytes) == file_size and footer_bytes[: len(MAGIC)] != MAGIC:
            raise ParquetFooterError(f"{name}: not a Parquet file (starts with {footer_bytes[:4]!r})")
        raw = footer_bytes[len(footer_bytes) - FOOTER_TAIL - footer_len : len(footer_bytes) - FOOTER_TAIL]
        try:
            metadata, end = decode_struct(raw)
        except ThriftDecodeError as e:
            raise ParquetFooterError(f"{name}: unreadable footer (FileMetaData of {footer_len} bytes): {e}") from e
        if _FMD_ENCRYPTION_ALGORITHM in metadata or _FMD_FOOTER_SIGNING_KEY_METADATA in metadata:
            # Plaintext-footer encryption mode: the FileMetaData is followed by a signature (hence
            # checked before the trailing bytes), which would not survive a rewrite; and the
            # columns cannot be read without keys anyway.
            raise ParquetEncryptedError(f"{name}: encrypted Parquet file (plaintext footer mode); cannot merge")
        if end != len(raw):
            # Unknown trailing bytes would be lost in the rewritten footer: refuse rather than guess.
            raise ParquetFooterError(
                f"{name}: unreadable footer: {len(raw) - end} unexpected bytes after the FileMetaData"
            )
        footer = cls(name=name, file_size=file_size, footer_len=footer_len, metadata=metadata)
        footer._validate()
        return footer

    # -- derived values
    @property
    def footer_start(self) -> int:
        """Offset of the serialized FileMetaData: everything before it (after the magic) is data."""
        return self.file_size - FOOTER_TAIL - self.footer_len

    @property
    def data_range(self) -> tuple[int, int]:
        """``(4, footer_start)``: row groups plus any bloom filters and page indexes after them."""
        return (len(MAGIC), self.footer_start)

    @property
    def num_rows(self) -> int:
        return self.metadata.get(_FMD_NUM_ROWS)

    @property
    def row_groups(self) -> list[Struct]:
        return self.metadata.get(_FMD_ROW_GROUPS).items

    @property
    def num_row_groups(self) -> int:
        return len(self.row_groups)

    def _chunks(self):
        for rg in self.row_groups:
            yield from rg.get(_RG_COLUMNS).items

    @cached_property
    def offset_index_span(self) -> tuple[int, int] | None:
        """The smallest byte range holding every OffsetIndex of the file, or None when there is none."""
        lo = hi = None
        for cc in self._chunks():
            off = cc.get(_CC_OFFSET_INDEX_OFFSET)
            if off is None:
                continue
            end = off + cc.get(_CC_OFFSET_INDEX_LENGTH)
            lo = off if lo is None else min(lo, off)
            hi = end if hi is None else max(hi, end)
        return None if lo is None else (lo, hi)

    def with_offset_indexes(self, blob: bytes) -> ParquetFooter:
        """A copy holding ``blob``: the source's bytes over ``offset_index_span``."""
        span = self.offset_index_span
        if span is None:
            raise ParquetConcatError(f"{self.name}: the file has no offset index")
        if len(blob) != span[1] - span[0]:
            raise ParquetConcatError(
                f"{self.name}: offset index bytes {span[0]}..{span[1]} are {span[1] - span[0]} bytes, got {len(blob)}"
            )
        return replace(self, offset_index_bytes=bytes(blob))

    # -- validation
    def _validate(self) -> None:
        """Check what the merge relies on, so that a bad source fails here, named, not in a reader later."""
        name, md = self.name, self.metadata
        _int_field(md, _FMD_VERSION, "version", name)
        if not _list_of_structs(md, _FMD_SCHEMA, "schema", name):
            raise ParquetFooterError(f"{name}: footer has an empty schema")
        num_rows = _int_field(md, _FMD_NUM_ROWS, "num_rows", name)
        if num_rows < 0:
            raise ParquetFooterError(f"{name}: negative num_rows {num_rows}")
        _list_of_structs(md, _FMD_COLUMN_ORDERS, "column_orders", name, required=False)
        for r, rg in enumerate(_list_of_structs(md, _FMD_ROW_GROUPS, "row_groups", name)):
            columns = _list_of_structs(rg, _RG_COLUMNS, f"row_groups[{r}].columns", name)
            _int_field(rg, _RG_NUM_ROWS, f"row_groups[{r}].num_rows", name)
            _int_field(rg, _RG_FILE_OFFSET, f"row_groups[{r}].file_offset", name, required=False)
            for c, cc in enumerate(columns):
                self._validate_chunk(r, c, cc)

    def _validate_chunk(self, r: int, c: int, cc: Struct) -> None:
        name = self.name
        where = f"row group {r} column {c}"
        if _CC_CRYPTO_METADATA in cc or _CC_ENCRYPTED_COLUMN_METADATA in cc:
            raise ParquetEncryptedError(f"{name}: {where} is encrypted; cannot merge encrypted files")
        if cc.get(_CC_FILE_PATH) is not None:
            raise ParquetConcatError(
                f"{name}: {where} is stored in another file ({cc.get(_CC_FILE_PATH)!r}); not supported"
            )
        _int_field(cc, _CC_FILE_OFFSET, f"{where} file_offset", name, required=False)
        cmd = cc.get(_CC_META_DATA)
        if not isinstance(cmd, Struct):
            raise ParquetFooterError(f"{name}: {where} has no column metadata")
        where = f"row group {r} column {_column_label(cmd)!r}"

        def optional(s: Struct, fid: int, what: str) -> int | None:
            return _int_field(s, fid, f"{where} {what}", name, required=False)

        data = _int_field(cmd, _CMD_DATA_PAGE_OFFSET, f"{where} data_page_offset", name)
        size = _int_field(cmd, _CMD_TOTAL_COMPRESSED_SIZE, f"{where} total_compressed_size", name)
        # The chunk starts at its first page: the dictionary (or legacy index) page when there is
        # one. Offsets <= 0 mean "unset": some writers put 0 in dictionary_page_offset for "no
        # dictionary", and pyarrow writes data_page_offset 0 for an empty row group's chunk (no data
        # page, perhaps a dictionary page). A chunk with no page at all has size 0: nothing to check.
        offsets = [data, optional(cmd, _CMD_DICTIONARY_PAGE_OFFSET, "dictionary_page_offset"),
                   optional(cmd, _CMD_INDEX_PAGE_OFFSET, "index_page_offset")]
        if size != 0:
            start = min((o for o in offsets if o is not None and o > 0), default=0)
            self._check_range(where, "column chunk", start, size)
            if data > 0 and not start <= data < start + size:
                raise ParquetFooterError(
                    f"{name}: {where}: data page offset {data} lies outside its column chunk "
                    f"{start}..{start + size} (corrupt footer)"
                )
        bloom = optional(cmd, _CMD_BLOOM_FILTER_OFFSET, "bloom_filter_offset")
        if bloom is not None and bloom > 0:
            # bloom_filter_length is optional (added in format 2.10): then check the offset alone.
            blen = optional(cmd, _CMD_BLOOM_FILTER_LENGTH, "bloom_filter_length")
            self._check_range(where, "bloom filter", bloom, blen or 1)
        for off_fid, len_fid, label in (
            (_CC_OFFSET_INDEX_OFFSET, _CC_OFFSET_INDEX_LENGTH, "offset index"),
            (_CC_COLUMN_INDEX_OFFSET, _CC_COLUMN_INDEX_LENGTH, "column index"),
        ):
            off, length = optional(cc, off_fid, f"{label} offset"), optional(cc, len_fid, f"{label} length")
            if off is None:
                continue
            if length is None:
                raise ParquetFooterError(f"{name}: {where} has a {label} offset but no length")
            self._check_range(where, label, off, length)

    def _check_range(self, where: str, what: str, start: int, length: int) -> None:
        # Everything the footer points at must lie in the copied range [4, footer_start); anything
        # else would not be carried into the merged file.
        lo, hi = self.data_range
        if length < 0 or start < lo or start + length > hi:
            raise ParquetFooterError(
                f"{self.name}: {where}: {what} at bytes {start}..{start + length} lies outside the data "
                f"range {lo}..{hi} (corrupt footer)"
            )


def read_footer(
    read_range: Callable[[int, int], bytes],
    file_size: int,
    *,
    name: str,
    initial_read: int = DEFAULT_TAIL_READ,
    load_offset_indexes: bool = True,
) -> ParquetFooter:
    """Read and parse a file's footer through ``read_range(start, end)`` (end exclusive).

    Fetches the last ``initial_read`` bytes first; when the footer is longer, fetches the missing
    front of it. With ``load_offset_indexes``, also gets the OffsetIndex bytes that moving the file
    requires, from the bytes already read when they are there (the usual case: writers put page
    indexes right before the footer), else with one more read.
    """
    if file_size < len(MAGIC) + FOOTER_TAIL:
        raise ParquetFooterError(f"{name}: {file_size} bytes is too small for a Parquet file")
    if initial_read < FOOTER_TAIL:
        raise ValueError(f"initial_read must be at least {FOOTER_TAIL}")

    def fetch(start: int, end: int) -> bytes:
        data = read_range(start, end)
        if len(data) != end - start:
            raise ParquetFooterError(
                f"{name}: reading bytes {start}..{end} returned {len(data)} bytes (file changed or shorter?)"
            )
        return bytes(data)

    tail = fetch(max(0, file_size - initial_read), file_size)
    footer_len = parse_footer_length(tail[-FOOTER_TAIL:], name=name)
    need = footer_len + FOOTER_TAIL
    if len(tail) < need <= file_size - len(MAGIC):
        tail = fetch(file_size - need, file_size - len(tail)) + tail
    footer = ParquetFooter.parse(tail, file_size=file_size, name=name)
    span = footer.offset_index_span
    if load_offset_indexes and span is not None:
        tail_start = file_size - len(tail)
        lo, hi = span
        if lo >= tail_start:
            blob = tail[lo - tail_start : hi - tail_start]
        else:
            blob = fetch(lo, min(hi, tail_start)) + tail[: max(0, hi - tail_start)]
        footer = footer.with_offset_indexes(blob)
    return footer


# ---------------------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class Piece:
    """Copy bytes ``[start, end)`` of source ``source_index`` to output offset ``out_offset``."""

    source_index: int
    start: int
    end: int
    out_offset: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ConcatPlan:
    """How to build the merged file: ``head + pieces (in order) + tail``.

    ``tail`` is the rewritten OffsetIndexes (if any), the new FileMetaData, its length and ``PAR1``.
    ``source_sizes`` are the sizes the footers were read from: check them (or better, the ETags)
    before copying, since a changed source would make the new footer wrong.
    """

    pieces: list[Piece]
    head: bytes
    tail: bytes
    total_size: int
    num_rows: int
    num_row_groups: int
    metadata: Struct
    source_names: tuple[str, ...]
    source_sizes: tuple[int, ...]

    @property
    def data_end(self) -> int:
        """Output offset where the tail begins."""
        return self.total_size - len(self.tail)


def _describe_schema_difference(a: list[Struct], b: list[Struct]) -> str:
    if len(a) != len(b):
        return f"{len(b)} schema elements instead of {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x == y:
            continue
        label = x.get(4, b"?").decode("utf-8", "replace")
        diffs = []
        for fid in sorted({f.id for f in x.fields} | {f.id for f in y.fields}):
            vx, vy = x.get(fid), y.get(fid)
            if vx != vy:
                fname = _SCHEMA_ELEMENT_FIELDS.get(fid, f"field {fid}")
                diffs.append(f"{fname} {_short(vy)} instead of {_short(vx)}")
        return f"schema element {i} ({label!r}): " + ", ".join(diffs)
    return "schema differs"  # not reached: the lists compare unequal


def _short(v: object) -> str:
    if isinstance(v, bytes):
        return repr(v.decode("utf-8", "replace"))
    if isinstance(v, Struct):
        return "{" + ", ".join(f"{f.id}: {_short(f.value)}" for f in v.fields) + "}"
    return "absent" if v is None else repr(v)


def _check_compatible(first: ParquetFooter, other: ParquetFooter) -> None:
    a, b = first.metadata, other.metadata
    sa, sb = a.get(_FMD_SCHEMA).items, b.get(_FMD_SCHEMA).items
    if sa != sb:
        raise ParquetSchemaMismatchError(
            f"{other.name}: schema differs from {first.name}'s: {_describe_schema_difference(sa, sb)}"
        )
    # Column orders say how min/max statistics were computed; mixing them would misread statistics.
    if a.get(_FMD_COLUMN_ORDERS) != b.get(_FMD_COLUMN_ORDERS):
        oa, ob = a.get(_FMD_COLUMN_ORDERS), b.get(_FMD_COLUMN_ORDERS)
        raise ParquetSchemaMismatchError(
            f"{other.name}: column orders differ from {first.name}'s "
            f"({'absent' if ob is None else len(ob.items)} vs {'absent' if oa is None else len(oa.items)} entries"
            f"{'' if oa is None or ob is None else ', different values'})"
        )


def _shift(s: Struct, fid: int, delta: int) -> None:
    # Offsets <= 0 are "unset" sentinels (ColumnChunk.file_offset = 0 per the spec, dictionary
    # page offset 0 from some writers): position 0 is the magic, so no real offset is ever 0.
    f = s.field(fid)
    if f is not None and f.value > 0:
        f.value += delta


def _rewrite_offset_index(footer: ParquetFooter, cc: Struct, delta: int, where: str) -> bytes:
    """The chunk's OffsetIndex with every PageLocation.offset moved by ``delta``, re-encoded."""
    lo, _ = footer.offset_index_span  # cached: computed once per footer
    off, length = cc.get(_CC_OFFSET_INDEX_OFFSET), cc.get(_CC_OFFSET_INDEX_LENGTH)
    raw = footer.offset_index_bytes[off - lo : off - lo + length]
    try:
        index = loads(raw)
    except ThriftDecodeError as e:
        raise ParquetFooterError(f"{footer.name}: {where}: unreadable offset index at byte {off}: {e}") from e
    locations = index.get(_OI_PAGE_LOCATIONS)
    if not isinstance(locations, ThriftList) or locations.elem_type != CType.STRUCT:
        raise ParquetFooterError(f"{footer.name}: {where}: offset index at byte {off} has no page locations")
    for loc in locations.items:
        page = loc.field(_PL_OFFSET)
        if page is None or page.type != CType.I64:
            raise ParquetFooterError(f"{footer.name}: {where}: offset index at byte {off} has a bad page location")
        page.value += delta
    return dumps(index)


def _moved_row_group(
    f: ParquetFooter, r: int, source_rg: Struct, delta: int, page_index: str, index_area: bytearray, index_base: int
) -> Struct:
    """A copy of ``source_rg`` with every offset moved by ``delta``.

    Rewritten OffsetIndexes are appended to ``index_area``, which will start at ``index_base`` in the
    output. Only the structs on the way to a changed field are copied; statistics, encodings and the
    like are shared with the source footer, which stays untouched.
    """
    rg = source_rg.copy()
    # RowGroup.file_offset is known to be wrong in files from some writers (PARQUET-2078); a
    # uniform shift keeps it exactly as (in)consistent as it was, so readers' fix-ups still apply.
    _shift(rg, _RG_FILE_OFFSET, delta)
    source_columns = rg.get(_RG_COLUMNS)
    columns = []
    for source_cc in source_columns.items:
        cc = source_cc.copy()
        cmd = cc.get(_CC_META_DATA).copy()
        cc.set(_CC_META_DATA, CType.STRUCT, cmd)
        _shift(cc, _CC_FILE_OFFSET, delta)
        for fid in _CMD_SHIFTED:
            _shift(cmd, fid, delta)
        if page_index == "drop":
            for fid in _CC_PAGE_INDEX_FIELDS:
                cc.remove(fid)
        else:
            _shift(cc, _CC_COLUMN_INDEX_OFFSET, delta)  # a ColumnIndex holds no offsets: stays valid
            if cc.get(_CC_OFFSET_INDEX_OFFSET) is not None and delta != 0:
                where = f"row group {r} column {_column_label(cmd)!r}"
                rewritten = _rewrite_offset_index(f, cc, delta, where)
                cc.set(_CC_OFFSET_INDEX_OFFSET, CType.I64, index_base + len(index_area))
                cc.set(_CC_OFFSET_INDEX_LENGTH, CType.I32, len(rewritten))
                index_area += rewritten
        columns.append(cc)
    rg.set(_RG_COLUMNS, CType.LIST, replace(source_columns, items=columns))
    return rg


def concat_footers(
    footers: Sequence[ParquetFooter],
    *,
    page_index: Literal["rewrite", "drop"] = "rewrite",
    copy_leading_magic: bool = False,
) -> ConcatPlan:
    """Plan the merge of ``footers``' files, in order, into one Parquet file.

    ``page_index``: ``"rewrite"`` keeps page indexes valid (needs the OffsetIndex bytes of every
    source that moves, see ``read_footer``); ``"drop"`` removes page-index references instead.
    ``copy_leading_magic``: start the first piece at byte 0 of the first source (its ``PAR1``) and
    leave ``head`` empty, so that no separate 4-byte part is needed.

    Raises ``ParquetSchemaMismatchError`` when a schema or the column orders differ from the first
    source's, ``ParquetConcatError`` for other sources that cannot be merged.
    """
    if not footers:
        raise ParquetConcatError("nothing to concatenate: no source files")
    if page_index not in ("rewrite", "drop"):
        raise ValueError(f"page_index must be 'rewrite' or 'drop', not {page_index!r}")
    first = footers[0]
    for other in footers[1:]:
        _check_compatible(first, other)

    head = b"" if copy_leading_magic else MAGIC
    pieces: list[Piece] = []
    deltas: list[int] = []
    pos = len(head)
    for i, f in enumerate(footers):
        start, end = f.data_range
        if copy_leading_magic and i == 0:
            start = 0
        deltas.append(pos - start)
        if end > start:  # an empty file (no row groups) contributes nothing
            pieces.append(Piece(i, start, end, pos))
            pos += end - start
    data_end = pos

    index_area = bytearray()  # rewritten OffsetIndexes, written at data_end
    row_groups: list[Struct] = []
    for f, delta in zip(footers, deltas):
        if page_index == "rewrite" and delta != 0 and f.offset_index_span is not None and f.offset_index_bytes is None:
            raise ParquetConcatError(
                f"{f.name}: its offset index must be rewritten but its bytes were not loaded; read the "
                "footer with read_footer(load_offset_indexes=True), or merge with page_index='drop'"
            )
        with gc_paused():  # many small objects, no cycles: see gc_paused
            for r, source_rg in enumerate(f.row_groups):
                row_groups.append(_moved_row_group(f, r, source_rg, delta, page_index, index_area, data_end))

    if len(row_groups) > MAX_ROW_GROUPS:
        raise ParquetConcatError(
            f"the merged file would have {len(row_groups)} row groups; Parquet numbers them with an i16 "
            f"(at most {MAX_ROW_GROUPS}): merge fewer files at once"
        )
    for ordinal, rg in enumerate(row_groups):
        rg.set(_RG_ORDINAL, CType.I16, ordinal)

    num_rows = sum(f.num_rows for f in footers)
    # The first source's FileMetaData, with the merged row groups and row count. The format version
    # is the highest of the sources', since the merged file holds pages from all of them.
    metadata = first.metadata.copy()
    metadata.set(_FMD_VERSION, CType.I32, max(f.metadata.get(_FMD_VERSION) for f in footers))
    metadata.set(_FMD_NUM_ROWS, CType.I64, num_rows)
    metadata.set(_FMD_ROW_GROUPS, CType.LIST, ThriftList(CType.STRUCT, row_groups))
    try:
        encoded = dumps(metadata)
    except ThriftError as e:  # e.g. an offset beyond i64: not a realistic file, but say so clearly
        raise ParquetConcatError(f"cannot encode the merged footer: {e}") from e
    if len(encoded) > 0xFFFFFFFF:
        raise ParquetConcatError(f"the merged footer would be {len(encoded)} bytes, more than Parquet allows")
    tail = bytes(index_area) + encoded + _U32.pack(len(encoded)) + MAGIC
    return ConcatPlan(
        pieces=pieces,
        head=head,
        tail=tail,
        total_size=data_end + len(tail),
        num_rows=num_rows,
        num_row_groups=len(row_groups),
        metadata=metadata,
        source_names=tuple(f.name for f in footers),
        source_sizes=tuple(f.file_size for f in footers),
    )


# ---------------------------------------------------------------------------------------- local execution
def assemble_locally(plan: ConcatPlan, sources: Sequence[bytes]) -> bytes:
    """Build the merged file in memory from the sources' full contents (tests, local fallback)."""
    if len(sources) != len(plan.source_sizes):
        raise ValueError(f"the plan has {len(plan.source_sizes)} sources, got {len(sources)}")
    for name, size, data in zip(plan.source_names, plan.source_sizes, sources):
        if len(data) != size:
            raise ParquetConcatError(f"{name}: is {len(data)} bytes, but the plan was made for {size} bytes")
    out = bytearray(plan.head)
    for p in plan.pieces:
        assert len(out) == p.out_offset, "pieces must be contiguous"
        out += memoryview(sources[p.source_index])[p.start : p.end]
    out += plan.tail
    assert len(out) == plan.total_size
    return bytes(out)


def concat_local(
    sources: Sequence[bytes],
    names: Sequence[str] | None = None,
    *,
    page_index: Literal["rewrite", "drop"] = "rewrite",
) -> bytes:
    """Merge whole Parquet files held in memory; returns the merged file's bytes."""
    names = list(names) if names is not None else [f"source[{i}]" for i in range(len(sources))]
    if len(names) != len(sources):
        raise ValueError(f"{len(sources)} sources but {len(names)} names")
    footers = [
        read_footer(lambda s, e, d=data: d[s:e], len(data), name=name, initial_read=len(data))
        for data, name in zip(sources, names)
    ]
    return assemble_locally(concat_footers(footers, page_index=page_index), sources)
