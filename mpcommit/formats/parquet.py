"""Parquet through pyarrow, row groups assembled from the batches a task receives.

pyarrow's ``ParquetWriter.write_batch`` turns every call into its own row group; Spark hands a Python task
batches of 10,000 rows, which would make row groups far too small to scan well. The writer therefore
collects batches until they hold ``row_group_bytes`` of Arrow memory and writes them as one row group: that
buffer is the format's share of a task's memory (see :mod:`mpcommit.formats.partitioning` for the whole bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
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
#: In-memory (Arrow) bytes collected per row group. Spark's ``parquet.block.size`` (128 MB) counts encoded
#: bytes that parquet-mr buffers per open file; 16 MiB of Arrow data keeps many open partition writers
#: affordable in a Python worker while still giving row groups of a few MiB compressed.
DEFAULT_ROW_GROUP_BYTES = 16 * MiB


@dataclass(frozen=True)
class ParquetFormat(FileFormat):
    """Parquet, snappy-compressed by default (``compression``: none, snappy, gzip, zstd, brotli, lz4_raw)."""

    name = "parquet"
    content_type = "application/vnd.apache.parquet"

    compression: str = "snappy"
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES

    def __post_init__(self) -> None:
        if self.compression not in PARQUET_COMPRESSION:
            raise UsageError(
                f"parquet does not support compression {self.compression!r}: use one of "
                f"{', '.join(sorted(PARQUET_COMPRESSION))}"
            )
        if self.row_group_bytes < 1:
            raise UsageError("parquet row group size must be at least 1 byte")

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

    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        return _ParquetFileWriter(sink, schema, codec=self._codec, row_group_bytes=self.row_group_bytes)


class _ParquetFileWriter(FormatWriter):
    def __init__(self, sink: BinaryIO, schema: pa.Schema, *, codec: str, row_group_bytes: int):
        self._schema = schema
        self._row_group_bytes = row_group_bytes
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self.rows = 0
        # Writes the leading magic bytes at once; the footer goes out on close.
        self._writer: Any = pq.ParquetWriter(sink, schema, compression=codec)

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self._pending_bytes >= self._row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self._schema)
        self._pending, self._pending_bytes = [], 0
        # One call, one row group: row_group_size as large as the table keeps pyarrow from splitting it.
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))

    def close(self) -> None:
        self._flush()
        self._writer.close()

    @property
    def buffered_bytes(self) -> int:
        return self._pending_bytes
