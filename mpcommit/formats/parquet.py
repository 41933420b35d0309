"""Parquet through pyarrow, row groups assembled from the batches a task receives.

pyarrow's ``ParquetWriter.write_batch`` turns every call into its own row group; Spark hands a Python task
batches of 10,000 rows, which would make row groups far too small to scan well. The writer therefore
collects batches until they hold ``row_group_bytes`` of Arrow memory and writes them as one row group: that
buffer is the format's share of a task's memory (see :mod:`mpcommit.formats.partitioning` for the whole bound).

Dictionary encoding is chosen per column from the file's first row group, as parquet-mr (Spark's writer) chooses
it: a column keeps its dictionary only where dictionary plus indices come out smaller than the plain values.
pyarrow alone keeps a dictionary whenever it fits its page limit, so a column of unique doubles or ids in a
small file (a partition of a few tens of thousands of rows) gets one that only adds bytes: measured, 25% more
bytes than Spark's own files for the same rows (BENCHMARKS.md, real peers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import UsageError
from ..sizing import MiB
from .base import FileFormat, FormatWriter, Options

#: Spark's ``compression`` values -> (pyarrow codec, the infix Spark puts before ``.parquet``).
PARQUET_COMPRESSION: dict[str, tuple[str, str]] = {
    "none": ("none", ""),
    "snappy": ("snappy", "snappy."),
    "gzip": ("gzip", "gz."),
    "zstd": ("zstd", "zstd."),
    "brotli": ("brotli", "br."),
    "lz4_raw": ("lz4", "lz4raw."),
}

class TimestampType(str, Enum):
    """How timestamps with a time zone (Spark's TIMESTAMP) are stored: Spark's
    ``spark.sql.parquet.outputTimestampType``. Spark writes INT96 by default; pyarrow, INT64 microseconds."""

    INT96 = "INT96"
    TIMESTAMP_MICROS = "TIMESTAMP_MICROS"
    TIMESTAMP_MILLIS = "TIMESTAMP_MILLIS"

    @classmethod
    def parse(cls, value: "str | TimestampType") -> "TimestampType":
        if isinstance(value, TimestampType):
            return value
        try:
            return cls(str(value).strip().upper())
        except ValueError:
            raise UsageError(
                f"spark.sql.parquet.outputTimestampType must be INT96, TIMESTAMP_MICROS or TIMESTAMP_MILLIS, "
                f"got {value!r}"
            ) from None


#: What pyarrow's writer gathers of a file before the sink gets it (one such buffer per open file).
WRITE_BUFFER_BYTES = 256 * 1024
#: pyarrow's defaults (``ParquetWriter``: ``max_rows_per_page``, ``data_page_size``; ``dictionary_pagesize_limit``
#: is the same 1 MiB), which this module does not change: below both, a column chunk is one page.
_PAGE_MAX_ROWS = 20_000
_PAGE_MAX_BYTES = 1024 * 1024

#: In-memory (Arrow) bytes collected per row group. Spark's ``parquet.block.size`` (128 MB) counts encoded
#: bytes that parquet-mr buffers per open file; 16 MiB of Arrow data keeps many open partition writers
#: affordable in a Python worker while still giving row groups of a few MiB compressed.
DEFAULT_ROW_GROUP_BYTES = 16 * MiB


@dataclass(frozen=True)
class ParquetFormat(FileFormat):
    """Parquet, snappy-compressed by default (``compression``: none, snappy, gzip, zstd, brotli, lz4_raw).

    ``timestamp_type``: how timestamps with a time zone are stored (:class:`TimestampType`; the Spark writer
    passes the session's ``spark.sql.parquet.outputTimestampType``, INT96 unless set). Timestamps without a time
    zone (Spark's TIMESTAMP_NTZ) are INT64 microseconds, as Spark writes them; pyarrow writes INT96 for every
    timestamp column of a file or none, so a file that holds both kinds stores both as INT64 microseconds
    (:attr:`int96_for`), which Spark reads back as the same types."""

    name = "parquet"
    content_type = "application/vnd.apache.parquet"

    compression: str = "snappy"
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    timestamp_type: TimestampType = TimestampType.TIMESTAMP_MICROS

    def __post_init__(self) -> None:
        if self.compression not in PARQUET_COMPRESSION:
            raise UsageError(
                f"parquet does not support compression {self.compression!r}: use one of "
                f"{', '.join(sorted(PARQUET_COMPRESSION))}"
            )
        if self.row_group_bytes < 1:
            raise UsageError("parquet row group size must be at least 1 byte")
        object.__setattr__(self, "timestamp_type", TimestampType.parse(self.timestamp_type))

    @classmethod
    def from_options(cls, options: Options) -> "ParquetFormat":
        return cls(
            compression=options.compression(choices=PARQUET_COMPRESSION, default="snappy"),
            # Spark and Hadoop name the row group size so.
            row_group_bytes=options.integer("parquet.block.size", default=DEFAULT_ROW_GROUP_BYTES, minimum=1),
        )

    @property
    def extension(self) -> str:
        return f"{PARQUET_COMPRESSION[self.compression][1]}parquet"

    @property
    def _codec(self) -> str:
        return PARQUET_COMPRESSION[self.compression][0]

    def check_schema(self, schema: pa.Schema) -> None:
        # pyarrow knows best which Arrow types have a Parquet mapping: build the file schema in memory.
        for field in schema:
            try:
                pq.ParquetWriter(pa.BufferOutputStream(), pa.schema([field]), compression=self._codec).close()
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, TypeError) as exc:
                raise UsageError(
                    f"parquet cannot hold column {field.name!r} of type {field.type}: {exc}. "
                    "Cast it to a supported type first. Nothing was written."
                ) from None

    def int96_for(self, schema: pa.Schema) -> bool:
        """Whether a file of ``schema`` stores its timestamps as INT96: asked for, and no timestamp without a time
        zone that INT96 would turn into one with."""
        return self.timestamp_type is TimestampType.INT96 and not any(
            _has_timestamp(f.type, zoned=False) for f in schema)

    def file_schema(self, schema: pa.Schema) -> pa.Schema:
        """The Arrow schema written for ``schema``: zoned timestamps in milliseconds for TIMESTAMP_MILLIS (cut
        off, as Spark cuts them), else ``schema`` itself."""
        if self.timestamp_type is not TimestampType.TIMESTAMP_MILLIS:
            return schema
        return pa.schema([f.with_type(_zoned_in_millis(f.type)) for f in schema], metadata=schema.metadata)

    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        return _ParquetFileWriter(sink, schema, codec=self._codec, row_group_bytes=self.row_group_bytes,
                                  file_schema=self.file_schema(schema), int96=self.int96_for(schema))


def _has_timestamp(t: pa.DataType, *, zoned: bool) -> bool:
    """Whether ``t`` is, or holds, a timestamp with (``zoned``) or without a time zone."""
    if pa.types.is_timestamp(t):
        return (t.tz is not None) == zoned
    if pa.types.is_dictionary(t):
        return _has_timestamp(t.value_type, zoned=zoned)
    return any(_has_timestamp(t.field(i).type, zoned=zoned) for i in range(t.num_fields))


def _zoned_in_millis(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp that has a time zone in milliseconds."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("ms", tz=t.tz) if t.tz is not None and t.unit != "s" else t
    if not _has_timestamp(t, zoned=True):
        return t
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_zoned_in_millis(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_zoned_in_millis(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_zoned_in_millis(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_zoned_in_millis(t.key_type)),
                       t.item_field.with_type(_zoned_in_millis(t.item_type)))
    return t


class _ParquetFileWriter(FormatWriter):
    def __init__(self, sink: BinaryIO, schema: pa.Schema, *, codec: str, row_group_bytes: int,
                 file_schema: pa.Schema | None = None, int96: bool = False):
        self._schema = schema
        self._file_schema = file_schema if file_schema is not None else schema
        self._cast = not self._file_schema.equals(schema)
        self._int96 = int96
        self._row_group_bytes = row_group_bytes
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        #: Whether ``_pending_bytes`` is the Arrow data's exact size (else an upper bound, see :meth:`write`).
        self._exact = False
        self.rows = 0
        self._sink = sink
        self._codec = codec
        # Opened with the first row group, whose values decide each column's dictionary; the footer goes out
        # on close.
        self._writer: Any = None
        self._out: Any = None

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self.rows += batch.num_rows
        if self._exact:
            self._pending_bytes += batch.nbytes
        else:
            # The size of the batch's buffers bounds its data from above (a slice's are its whole batch's) at a
            # fiftieth of the cost of ``nbytes`` (14 us a batch here: a file of a few rows gets many small ones).
            # Only a bound that reaches a row group is replaced by the exact sizes, so row groups cut where before.
            self._pending_bytes += batch.get_total_buffer_size()
            if self._pending_bytes >= self._row_group_bytes:
                self._pending_bytes, self._exact = sum(b.nbytes for b in self._pending), True
        if self._pending_bytes >= self._row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self._schema)
        if len(self._pending) > 1 and _one_page_per_column(table, self._pending_bytes):
            # One chunk per column costs pyarrow less to encode and the dictionary judge less to read (issue 39: a
            # small file assembled from a task's interleaved batches arrives in ~20 pieces; 0.3 ms a file), and in
            # a column chunk that is one data page the bytes written do not depend on the chunks.
            table = table.combine_chunks()
        if self._cast:
            table = table.cast(self._file_schema, safe=False)  # sub-millisecond digits cut off, as Spark does
        self._pending, self._pending_bytes, self._exact = [], 0, False
        if self._writer is None:
            self._open(dictionary_columns(table))
        # One call, one row group: row_group_size as large as the table keeps pyarrow from splitting it.
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))

    def _open(self, use_dictionary: bool | list[str]) -> None:
        # pyarrow writes a file in pieces of a page header or a page each, and every write into a Python sink is a
        # call into Python (a small file: ~14 of them, each a trip through the multipart writer): gathered here
        # first, the sink gets one write per WRITE_BUFFER_BYTES. close() hands on the rest, leaving the sink open.
        self._out = pa.BufferedOutputStream(pa.PythonFile(self._sink, mode="w"), WRITE_BUFFER_BYTES)
        # No ARROW:schema in the footer (store_schema=False), as in Spark's files: other readers (pyarrow, polars)
        # type a column from it before its Parquet type, so an INT96 column came back as timestamp[us, <the
        # session's zone>] where Spark's own file gives timestamp[ns], and the two tables did not concat.
        self._writer = pq.ParquetWriter(self._out, self._file_schema, compression=self._codec,
                                        use_dictionary=use_dictionary, use_deprecated_int96_timestamps=self._int96,
                                        store_schema=False)

    def close(self) -> None:
        self._flush()
        if self._writer is None:  # no rows: a file with the schema and no row group
            self._open(True)
        self._writer.close()
        self._out.detach()  # the buffered rest into the sink, which stays open (its owner closes or aborts it)

    @property
    def buffered_bytes(self) -> int:
        return self._pending_bytes


def _one_page_per_column(table: pa.Table, nbytes_bound: int) -> bool:
    """Whether pyarrow writes each column chunk of ``table`` as one data page with its dictionary kept (or none
    asked for), whatever chunks the columns come in: fewer rows than a page may hold, a page's and a dictionary's
    size limits far above what the table holds (``nbytes_bound``: at least the table's Arrow bytes; a column's
    values encode to at most 1.5x their Arrow bytes, INT96 timestamps, and nested ones add levels: a margin of 4x),
    and no column of Arrow dictionaries (whose chunks may each have their own, which combining would merge).
    A page is one column's: where the whole table's bound is too large, each column's own bytes decide (a
    6,700-row file of an id and four doubles is 268 KB, each of its columns 54 KB; issue 39)."""
    if table.num_rows >= _PAGE_MAX_ROWS or _has_dictionaries(table.schema):
        return False
    return 4 * nbytes_bound < _PAGE_MAX_BYTES or 4 * max(c.nbytes for c in table.columns) < _PAGE_MAX_BYTES


@lru_cache(maxsize=64)
def _has_dictionaries(schema: pa.Schema) -> bool:
    return any(_has_dictionary(f.type) for f in schema)


def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def dictionary_columns(table: pa.Table) -> bool | list[str]:
    """The Parquet leaf columns worth a dictionary, judged on ``table`` (a file's first row group).

    A flat column of a fixed- or variable-width type keeps its dictionary when the dictionary plus the
    bit-packed indices are smaller than the plain values (parquet-mr's test at the end of a column's first
    page); nested columns and columns that are already dictionaries keep pyarrow's default (a dictionary)."""
    paths = _leaf_paths(table.schema)
    judged = _judged(table.schema)
    keep = [path for path in paths if path.split(".", 1)[0] not in judged]
    keep += _paying_dictionaries(table, [f.name for f in table.schema if f.name in judged])
    return True if len(keep) == len(paths) else keep


def _paying_dictionaries(table: pa.Table, names: list[str]) -> list[str]:
    """The columns among ``names`` whose dictionary pays (:func:`_pays` on their distinct values).

    The columns of 1, 2, 4 or 8-byte values without nulls -- nearly every column of a data file -- are read in
    place, all of one width together. Most of them are settled by a lower bound on their distinct values
    (:func:`_distinct_at_least`), cheaper than any count: a column of ids or measurements has nearly as many distinct
    values as rows, and a bound that high already shows a dictionary cannot pay (the judge cost a 6,700-row file of
    five such columns 0.49 ms, as much as encoding it; the bound 0.08 ms, issue 39). The rest are counted: exactly
    up to :data:`_EXACT_UP_TO` values (one sort per width, bits deciding equality as Arrow's counting does: 0.0 and
    -0.0 apart, NaNs by their payload), estimated above. Other columns are judged one by one."""
    paying = []
    widths = _value_widths(table.schema)
    fixed: dict[str, tuple[np.ndarray, int]] = {}
    for name in names:
        column = table.column(name)
        bits = _fixed_width_bits(column, widths[name])
        if bits is None:
            if _dictionary_pays(column.slice(0, _JUDGED_VALUES)):
                paying.append(name)
        else:
            fixed[name] = (bits, widths[name])
    if not fixed:
        return paying
    bounds = _distinct_at_least([bits for bits, _ in fixed.values()])
    # Not settled by its bound: the column may still pay.
    undecided = {name: entry for (name, entry), bound in zip(fixed.items(), bounds) if _pays(len(entry[0]), entry[1], bound)}
    counted = {name: entry for name, entry in undecided.items() if len(entry[0]) <= _EXACT_UP_TO}
    for width, same in _by_width(counted).items():
        matrix = np.sort(np.stack([counted[name][0] for name in same]), axis=1)
        distinct = 1 + np.count_nonzero(matrix[:, 1:] != matrix[:, :-1], axis=1)
        paying += [name for name, d in zip(same, distinct.tolist()) if _pays(len(counted[name][0]), width, d)]
    paying += [name for name in undecided if name not in counted
               and _dictionary_pays(table.column(name).slice(0, _JUDGED_VALUES))]
    return paying


def _by_width(columns: dict[str, tuple[np.ndarray, int]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for name, (_, width) in columns.items():
        out.setdefault(width, []).append(name)
    return out


def _distinct_at_least(columns: list[np.ndarray]) -> list[int]:
    """A lower bound on the distinct values of each of ``columns`` (unsigned integers, all of one length: the
    columns' bits).

    Equal values always land in the same bucket, so the buckets a column's values fill are never more than its
    distinct values, whatever the hash. With 4 buckets a value and a multiplicative hash (whose top bits depend
    on every bit of the value), a column of distinct values -- ids, runs, random measurements -- fills about 88%
    of as many buckets as it has values, enough to show that a dictionary of 8 or 4-byte values cannot pay. One
    column at a time through two reused buffers: a large temporary per column costs more in fresh pages than the
    hashing does."""
    n = len(columns[0])
    shift = max(10, (4 * n - 1).bit_length())
    hashed = np.empty(n, dtype=np.uint64)
    seen = np.empty(1 << shift, dtype=bool)
    bounds = []
    for bits in columns:
        np.multiply(bits, _SPREAD, out=hashed, dtype=np.uint64)  # wraps modulo 2**64, as a hash should
        hashed >>= np.uint64(64 - shift)
        seen.fill(False)
        seen[hashed.view(np.int64)] = True  # signed indices: numpy's fast path (unsigned: 2x slower)
        bounds.append(int(np.count_nonzero(seen)))
    return bounds


@lru_cache(maxsize=64)
def _value_widths(schema: pa.Schema) -> dict[str, int]:
    """Column -> the bytes of its values when 1, 2, 4 or 8 and whole (0 otherwise: variable-width, bits, wider)."""
    widths = {}
    for field in schema:
        try:
            bits = 0 if _is_variable_width(field.type) else field.type.bit_width
        except ValueError:  # no fixed width known to Arrow
            bits = 0
        widths[field.name] = bits // 8 if bits % 8 == 0 and bits // 8 in (1, 2, 4, 8) else 0
    return widths


def _fixed_width_bits(column: pa.ChunkedArray, width: int) -> np.ndarray | None:
    """The first :data:`_JUDGED_VALUES` values of a column of ``width``-byte values (0: not such a column) with no
    nulls, as unsigned integers of that width (a view of the column's buffer when it is one chunk), or None."""
    if not width or not len(column) or column.null_count:
        return None
    head = column if len(column) <= _JUDGED_VALUES else column.slice(0, _JUDGED_VALUES)
    array = head.chunk(0) if head.num_chunks == 1 else head.combine_chunks()
    return np.frombuffer(array.buffers()[1], dtype=f"<u{width}", count=len(array) + array.offset)[array.offset:]


def _pays(values: int, width: int, distinct: int) -> bool:
    """Dictionary plus bit-packed indices smaller than ``values`` plain values of ``width`` bytes."""
    index_bytes = values * max(1, math.ceil(math.log2(max(distinct, 2)))) / 8
    return distinct * width + index_bytes < values * width


@lru_cache(maxsize=64)
def _judged(schema: pa.Schema) -> frozenset[str]:
    """Top-level columns whose dictionary is decided from their values (flat, not boolean, not dictionary)."""
    return frozenset(
        f.name for f in schema
        if not pa.types.is_nested(f.type) and not pa.types.is_dictionary(f.type) and not pa.types.is_boolean(f.type)
        and not pa.types.is_null(f.type) and "." not in f.name
    )


#: Values a column's dictionary is judged on: parquet-mr's first page of doubles (1 MiB / 8).
_JUDGED_VALUES = 131072
#: Buckets of the distinct-value estimate (linear counting): within about 1% up to ~200,000 distinct values.
_BUCKETS = 1 << 16
#: Up to this many values an exact count is cheaper than the estimate's fixed cost (its 64 KiB of buckets).
_EXACT_UP_TO = 4096
#: The bound's hash: 2**64 over the golden ratio, odd (Knuth's multiplicative hashing).
_SPREAD = np.uint64(0x9E3779B97F4A7C15)
#: MurmurHash3's 64-bit finalizer: linear counting assumes values land in buckets as if at random, which a
#: plain multiplicative hash does not do for runs of ids (it spreads them too evenly: ~15% over-counted).
_MIX = (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53))


def _dictionary_pays(column: pa.ChunkedArray) -> bool:
    """Dictionary plus bit-packed indices smaller than the plain values, on the column's first values."""
    head = column.slice(0, _JUDGED_VALUES)
    values = len(head) - head.null_count
    if values == 0:
        return True
    type_ = head.type
    if _is_variable_width(type_):
        distinct = pc.count_distinct(head, mode="only_valid").as_py()
        # Plain BYTE_ARRAY: a 4-byte length before each value.
        plain = pc.sum(pc.binary_length(head)).as_py() + 4 * values
        dictionary = pc.sum(pc.binary_length(pc.unique(head.drop_null()))).as_py() + 4 * distinct
    else:
        try:
            width = type_.bit_width // 8
        except ValueError:  # a type without a fixed width known to Arrow: leave the choice to pyarrow
            return True
        return _pays(values, width, _distinct_estimate(head, width))
    index_bytes = values * max(1, math.ceil(math.log2(max(distinct, 2)))) / 8
    return dictionary + index_bytes < plain


def _distinct_estimate(column: pa.ChunkedArray, width: int) -> int:
    """Distinct valid values of a fixed-width column. Counting them exactly costs a hash table insert per
    value -- as much as pyarrow's dictionary encoding, twice what plain encoding costs -- so values of 1, 2,
    4 or 8 bytes are estimated by linear counting over their bits (a few numpy passes); wider ones are
    counted."""
    if width not in (1, 2, 4, 8) or len(column) <= _EXACT_UP_TO:
        return pc.count_distinct(column, mode="only_valid").as_py()
    array = (column.drop_null() if column.null_count else column).combine_chunks()
    bits = np.frombuffer(array.buffers()[1], dtype=f"<u{width}", count=len(array) + array.offset)[array.offset:]
    h = bits.astype(np.uint64)
    for multiplier in _MIX:
        h ^= h >> np.uint64(33)
        h *= multiplier
    h ^= h >> np.uint64(33)
    buckets = h >> np.uint64(64 - (_BUCKETS.bit_length() - 1))
    seen = np.zeros(_BUCKETS, dtype=bool)
    seen[buckets] = True
    empty = _BUCKETS - int(np.count_nonzero(seen))
    if empty == 0:
        return len(array)
    return min(len(array), round(-_BUCKETS * math.log(empty / _BUCKETS)))


def _is_variable_width(type_: pa.DataType) -> bool:
    return (pa.types.is_binary(type_) or pa.types.is_string(type_) or pa.types.is_large_binary(type_)
            or pa.types.is_large_string(type_) or pa.types.is_binary_view(type_) or pa.types.is_string_view(type_))


@lru_cache(maxsize=64)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """Parquet's names of the leaf columns of ``schema`` (``s.x``, ``l.list.element``), as ``use_dictionary``
    takes them: read from the footer of an empty file written in memory, so nesting is pyarrow's own."""
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, schema).close()
    meta = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    return tuple(meta.column(i).path for i in range(len(meta)))
