"""Before appending: do the new rows' column types match the table's existing files?

Spark's path writes append whatever they are given; a table whose files disagree on a column's type then fails
or coerces when read (Spark takes one file's schema; ``mergeSchema`` refuses incompatible types). Here one
existing data file is looked at before any task runs -- a Parquet footer (its column types) or a CSV header (its
column names) -- found with at most one short listing per partition level, one HEAD and one or two ranged GETs,
never a listing of the table. Its columns are compared with the write's by name, in Spark's type names
(``bigint``, ``decimal(10,2)``, ``timestamp``...): types that differ are reported, columns only on one side are
not (adding a column is ordinary schema evolution). JSON Lines and text files carry no schema: not checked.

``schema_mismatch`` of :func:`~mpcommit.spark.write` and :func:`~mpcommit.spark.writer`: ``"warn"`` (the
default, a :class:`SchemaMismatchWarning`), ``"error"`` (:class:`SchemaMismatchError` before anything is
written) or ``"ignore"`` (no look at all).
"""

from __future__ import annotations

import bz2
import logging
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import MpcommitError, UsageError
from ..formats.base import FileFormat
from ..formats.csv import CsvFormat
from ..formats.parquet import ParquetFormat
from ..protocol.layout import Destination, is_hidden_name
from ..store.s3 import S3Store

log = logging.getLogger(__name__)

#: Names listed per directory level while looking for one existing data file.
_LISTING_LIMIT = 1000
#: The first read of a Parquet file's tail (most footers fit) and of a CSV file's head.
_TAIL_BYTES = 64 * 1024
_HEAD_BYTES = 64 * 1024


class SchemaMismatch(str, Enum):
    """What a write does when its column types differ from the table's existing files."""

    WARN = "warn"
    ERROR = "error"
    IGNORE = "ignore"

    @classmethod
    def parse(cls, value: "str | SchemaMismatch") -> "SchemaMismatch":
        if isinstance(value, SchemaMismatch):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise UsageError(f"schema_mismatch must be 'warn', 'error' or 'ignore', got {value!r}") from None


class SchemaMismatchError(UsageError):
    """The write's column types differ from the table's existing files (``schema_mismatch="error"``)."""


class SchemaMismatchWarning(UserWarning):
    """The write's column types differ from the table's existing files (``schema_mismatch="warn"``)."""


@dataclass(frozen=True)
class Difference:
    column: str
    table: str
    write: str


def check_existing_files(store: S3Store, destination: Destination, fmt: FileFormat, file_schema: pa.Schema, *,
                         partition_levels: int, policy: SchemaMismatch) -> list[Difference]:
    """Compare ``file_schema`` (the write's files' columns) with one existing data file of the table, and warn or
    raise by ``policy``; return the differences found. ``partition_levels``: how many directory levels down the
    table's files lie (the write's partition columns)."""
    if policy is SchemaMismatch.IGNORE or not isinstance(fmt, (ParquetFormat, CsvFormat)):
        return []
    if isinstance(fmt, CsvFormat) and not fmt.header:
        return []  # files without a header say nothing about their columns
    what = "column types" if isinstance(fmt, ParquetFormat) else "CSV header"
    try:
        key = _one_data_file(store, destination, fmt, partition_levels)
        if key is None:
            return []
        if isinstance(fmt, ParquetFormat):
            differences = type_differences(_footer_types(store, destination.bucket, key), spark_types(file_schema))
        else:
            differences = _header_difference(store, destination.bucket, key, fmt, file_schema)
    except (MpcommitError, OSError, ValueError, pa.ArrowException, zlib.error) as exc:
        # A look that fails must not fail the write: the check is advice about readers, not a precondition.
        log.warning("could not compare this write's %s with the files of %s (%s); writing without the check",
                    what, destination.uri, exc)
        return []
    if not differences:
        return []
    listed = "; ".join(f"column {d.column!r}: {d.table} in the table, {d.write} in this write" if d.column else
                       f"the table's files start with {d.table}, this write's with {d.write}" for d in differences)
    message = (f"the {what} of this write differ from the table's existing files (looked at "
               f"s3://{destination.bucket}/{key}): {listed}. Readers of {destination.uri} may then fail or coerce. ")
    if policy is SchemaMismatch.ERROR:
        raise SchemaMismatchError(message + "Cast the columns to the table's types first, or overwrite the table. "
                                  "Nothing was written.")
    warnings.warn(message + "Cast the columns to the table's types, or pass schema_mismatch='error' to refuse such "
                  "writes.", SchemaMismatchWarning, stacklevel=3)
    return differences


# ---------------------------------------------------------------- pure: Spark's type names
def spark_type_name(t: pa.DataType) -> str:
    """The Spark SQL type an Arrow type is read as (``bigint``, ``decimal(10,2)``, ``array<string>``...)."""
    if pa.types.is_dictionary(t):
        return spark_type_name(t.value_type)
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{t.field(i).name}:{spark_type_name(t.field(i).type)}"
                                    for i in range(t.num_fields)) + ">"
    if pa.types.is_map(t):
        return f"map<{spark_type_name(t.key_type)},{spark_type_name(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or (
            hasattr(pa.types, "is_list_view") and (pa.types.is_list_view(t) or pa.types.is_large_list_view(t))):
        return f"array<{spark_type_name(t.value_type)}>"
    for test, name in _SIMPLE:
        if test(t):
            return name
    return str(t)


_SIMPLE = [
    (pa.types.is_int8, "tinyint"), (pa.types.is_int16, "smallint"), (pa.types.is_int32, "int"),
    (pa.types.is_int64, "bigint"), (pa.types.is_uint8, "smallint"), (pa.types.is_uint16, "int"),
    (pa.types.is_uint32, "bigint"), (pa.types.is_uint64, "decimal(20,0)"), (pa.types.is_float16, "float"),
    (pa.types.is_float32, "float"), (pa.types.is_float64, "double"), (pa.types.is_boolean, "boolean"),
    (pa.types.is_date, "date"), (pa.types.is_null, "void"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t), "string"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
     or pa.types.is_fixed_size_binary(t), "binary"),
]


def spark_types(schema: pa.Schema) -> dict[str, str]:
    return {f.name: spark_type_name(f.type) for f in schema}


def type_differences(table: dict[str, str], write: dict[str, str]) -> list[Difference]:
    """Columns in both (names matched as Spark matches them: exactly, else ignoring case) whose types differ."""
    folded = {name.lower(): name for name in table}
    out = []
    for name, written in write.items():
        existing = name if name in table else folded.get(name.lower())
        if existing is not None and table[existing] != written:
            out.append(Difference(name, table[existing], written))
    return out


# ---------------------------------------------------------------- reading one existing file
def _one_data_file(store: S3Store, destination: Destination, fmt: FileFormat, levels: int) -> str | None:
    """One visible data file of the table in ``fmt``, found by walking down the first visible directory at
    each partition level; None for a table with none there."""
    suffixes = (".parquet",) if isinstance(fmt, ParquetFormat) else (".csv", ".csv.gz", ".csv.bz2")
    prefix = destination.root
    for level in range(levels + 1):
        names = store.list_children(destination.bucket, prefix, limit=_LISTING_LIMIT)
        visible = [n for n in names if not is_hidden_name(n)]
        files = [n for n in visible if not n.endswith("/") and n.lower().endswith(suffixes)]
        if files:
            return prefix + files[0]
        folders = [n for n in visible if n.endswith("/")]
        if not folders or level == levels:
            return None
        prefix += folders[0]
    return None


def _footer_types(store: S3Store, bucket: str, key: str) -> dict[str, str]:
    """The Spark types of a Parquet file's top-level columns, from its footer (INT96 columns are ``timestamp``:
    pyarrow reads them without a time zone, Spark as TIMESTAMP)."""
    info = store.head_object(bucket, key)
    if info is None or info.size < 12:
        return {}
    tail = store.get_object(bucket, key, byte_range=(max(0, info.size - _TAIL_BYTES), info.size - 1))
    length = int.from_bytes(tail[-8:-4], "little")
    if tail[-4:] != b"PAR1" or length + 8 > info.size:
        return {}
    if length + 8 > len(tail):
        tail = store.get_object(bucket, key, byte_range=(info.size - length - 8, info.size - 1))
    footer = tail[-(length + 8):]
    # A stand-in file: the magic, then the footer. Nothing but the footer is read.
    schema = pq.read_schema(pa.BufferReader(b"PAR1" + footer))
    parquet = pq.read_metadata(pa.BufferReader(b"PAR1" + footer)).schema
    int96 = {parquet.column(i).path for i in range(len(parquet)) if parquet.column(i).physical_type == "INT96"}
    return {f.name: "timestamp" if f.name in int96 else spark_type_name(f.type) for f in schema}


def _header_difference(store: S3Store, bucket: str, key: str, fmt: CsvFormat,
                       file_schema: pa.Schema) -> list[Difference]:
    head = store.get_object(bucket, key, byte_range=(0, _HEAD_BYTES - 1))
    if key.lower().endswith(".gz"):
        head = zlib.decompressobj(wbits=31).decompress(head, _HEAD_BYTES)
    elif key.lower().endswith(".bz2"):
        try:
            head = bz2.BZ2Decompressor().decompress(head, _HEAD_BYTES)
        except (OSError, EOFError):
            return []
    theirs = _first_line(head, fmt.line_sep)
    ours = _first_line(fmt.header_bytes(file_schema), fmt.line_sep)
    if theirs is None or ours is None or theirs == ours:
        return []
    return [Difference("", repr(theirs), repr(ours))]


def _first_line(data: bytes, line_sep: str) -> str | None:
    end = data.find(line_sep.encode())
    if end < 0:
        return None
    return data[:end].decode("utf-8", errors="replace")


__all__: Sequence[str] = ["SchemaMismatch", "SchemaMismatchError", "SchemaMismatchWarning", "check_existing_files"]
