"""Small Parquet files merged by rewriting: each source, fetched whole, is read with pyarrow and written into
one file of large row groups. Used when no source is big enough to be copied (otherwise row groups are
concatenated under a new footer: :mod:`.parquet_concat`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..sizing import MiB
from .codecs import Sink
from .errors import MixedSchemaError, UnreadableSourceError
from .parts import Range, Transform

#: The rewrite writes a row group once this many bytes of Arrow data have accumulated.
REWRITE_ROW_GROUP_BYTES = 64 * MiB


@dataclass(frozen=True)
class ParquetRewriteSpec:
    """Small Parquet sources, each fetched whole, rewritten through pyarrow into large row groups."""

    transform: ClassVar[Transform] = Transform.PARQUET
    row_group_bytes: int = REWRITE_ROW_GROUP_BYTES

    def new(self) -> "ParquetRewriter":
        return ParquetRewriter(self.row_group_bytes)


class ParquetRewriter:
    """Reads each source with pyarrow and writes one file: the first source's schema (and key/value
    metadata, e.g. Spark's), its compression codec, INT96 timestamps kept when the source had them."""

    def __init__(self, row_group_bytes: int):
        self._row_group_bytes = row_group_bytes
        self._sink = Sink()
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
