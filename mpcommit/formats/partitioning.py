"""Dynamic partitioning of one task's rows: Arrow batches in, one file stream per Hive partition out.

A task keeps up to ``max_open_writers`` partition files open at once and writes each batch's rows straight
into them -- no sort, which is what data that mostly falls into one or a few partitions wants. When a task
meets more partitions than that, it does what Spark's ``DynamicPartitionDataConcurrentWriter`` does when it
runs out of concurrent writers: the rest of the task's rows for *new* partitions are set aside and written
afterwards sorted by partition, one file at a time. Here "set aside" is a spill to a local Arrow IPC file
with an index of which batches belong to which partition, so the sort is a bucketing by partition path that
never compares rows (row order inside a partition is kept, as a stable sort would). Rows for partitions that
already have an open file keep going into it, so no partition gets a second file without need.

The sorted write fills one file after another, but no round trip of a file waits on the next: the Spark
writer opens its files with ``TaskAttempt.create(background=True)``, so a file's upload is created while its
first part fills and its last part uploads while the next file is written (before, each of the 1,000 files of a
task cost two serial round trips, ~60 s on S3; BENCHMARKS.md, "Task side at scale").

Memory bound of one task (the reason for all of the above)::

    peak ~= max_open_writers x (format buffer + multipart part buffers) + closing_bytes + one batch being split

* format buffer: Parquet collects up to ``row_group_bytes`` (16 MiB by default) of Arrow data per open
  file; CSV, JSON and text stream through (a few KiB of compressor state);
* multipart part buffers: one part filling plus ``max_parts_in_flight`` uploading, each at most the part
  size (8 MiB at first): ``part_size x (1 + max_parts_in_flight)`` = 24 MiB with the default settings.

* closing_bytes (``WriterSettings``, 32 MiB): what files closing in the background still hold (last parts and
  parts uploading), all of the task's together; a file's ``close`` waits for room beyond it.

Both buffers only grow as data arrives, so a small partition costs what it holds. With the defaults
(8 writers, Parquet) the worst case is about 8 x (16 + 24) + 32 MiB = 352 MiB, whatever the number of
partitions (360 MiB with the spill's buffer below; ``bench/bench_task_scale.py`` asserts it).
The spill adds a constant: rows set aside are gathered in an 8 MiB buffer before they go to a local file,
and are read back one batch at a time (not memory-mapped: mapped pages that were read would count in the
worker's resident set until the whole spill is done).

Measured with ``python -m bench.partition_memory`` (one task, Parquet, 12 MiB of random doubles per
partition, partitions interleaved batch by batch; parts discarded instead of uploaded). Peak resident memory
above the worker's baseline, and the most Arrow itself held:

    48 partitions, all open             913 MiB   (Arrow 613 MiB)
    16 partitions, 8 open + fallback    231 MiB   (Arrow 136 MiB)
    48 partitions, 8 open + fallback    284 MiB   (Arrow 135 MiB)
    96 partitions, 8 open + fallback    319 MiB   (Arrow 136 MiB)

Arrow's share stays flat with the number of partitions; the rest is Python's part buffers and what the
allocator keeps (96 partitions: 277 MiB with ``ARROW_DEFAULT_MEMORY_POOL=system`` instead of mimalloc), and
varies by some tens of MiB from run to run.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ..errors import ProtocolError, UsageError
from ..protocol.layout import is_hidden_name, partition_path
from .base import FileFormat, FormatWriter, is_binary, is_nested

log = logging.getLogger(__name__)

#: Partition files a task keeps open at once before it falls back to the sorted (spilled) write.
DEFAULT_MAX_OPEN_WRITERS = 8
#: Rows set aside are gathered up to this many bytes before they go to the spill file.
SPILL_BUFFER_BYTES = 8 * 1024 * 1024
#: Partition paths a task remembers (about 100 bytes each); past this, the cache starts over.
_PATH_CACHE_ENTRIES = 100_000


class Sink(Protocol):
    """The binary file object a partition file is written into (a :class:`~mpcommit.protocol.writer.MultipartWriter`)."""

    rows: int | None

    def write(self, data: Any) -> int: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...


#: Opens the sink of a new file: (partition path, file extension) -> sink.
OpenSink = Callable[[str, str], Sink]


# ---------------------------------------------------------------- partition columns
def resolve_partition_columns(schema: pa.Schema, partition_by: str | Sequence[str] | None) -> tuple[str, ...]:
    """Check ``partition_by`` against ``schema`` and return the columns' names as the schema spells them.

    Names match exactly, or else ignoring case when that is unambiguous (Spark's default resolution).
    Refused, with UsageError: data with duplicate column names, unknown or repeated partition columns, partitioning by every column (no data would be
    left in the files), nested or binary columns (no path form), and names starting with ``_`` or ``.``
    (readers skip such directories, so the data would silently vanish from the table).
    """
    names = schema.names
    folded_names = [n.lower() for n in names]
    duplicates = sorted({n for n in names if folded_names.count(n.lower()) > 1})
    if duplicates:
        # Spark refuses to save such data too: files and readers could not tell the columns apart.
        raise UsageError(f"the data has duplicate column(s) {', '.join(duplicates)} (names ignore case); rename them first")
    if partition_by is None:
        return ()
    wanted = [partition_by] if isinstance(partition_by, str) else list(partition_by)
    resolved: list[str] = []
    for col in wanted:
        if not isinstance(col, str) or not col:
            raise UsageError(f"partition columns must be non-empty column names, got {col!r}")
        if col in names:
            name = col
        else:
            folded = [n for n in names if n.lower() == col.lower()]
            if len(folded) != 1:
                raise UsageError(
                    f"partition column {col!r} is not a column of the data (columns: {', '.join(names)}). "
                    "Nothing was written."
                )
            name = folded[0]
        if name in resolved:
            raise UsageError(f"partition column {name!r} is given twice")
        if is_hidden_name(name):
            raise UsageError(
                f"partition column {name!r} starts with '_' or '.': readers skip such directories, so its data "
                "would be invisible. Rename the column first."
            )
        t = schema.field(name).type
        if is_nested(t) or is_binary(t):
            raise UsageError(f"cannot partition by {name!r} of type {t}: partition values must be plain values")
        resolved.append(name)
    if resolved and len(resolved) == len(names):
        raise UsageError("cannot use all columns for partitioning: no data would be left in the files")
    return tuple(resolved)


def data_schema(schema: pa.Schema, partition_columns: Sequence[str]) -> pa.Schema:
    """The schema of the files: ``schema`` without the partition columns (their values are in the path)."""
    drop = set(partition_columns)
    return pa.schema([f for f in schema if f.name not in drop], metadata=schema.metadata)


def partition_value_text(value: Any) -> Any:
    """A partition value as Spark casts it to a string for the path (timestamps without a ``T`` or zone,
    fractions only when non-zero); other values are left to :func:`mpcommit.protocol.layout.partition_path`."""
    if isinstance(value, _dt.datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


# ---------------------------------------------------------------- splitting one batch
def split_batch(batch: pa.RecordBatch, partition_columns: Sequence[str], *,
                paths: dict[tuple, str] | None = None) -> list[tuple[str, pa.RecordBatch]]:
    """Group the rows of ``batch`` by partition: ``[(partition path, rows without the partition columns)]``,
    in the order the partitions first appear. Row order inside each group is kept. Values that map to the
    same path (null and the empty string both go to ``__HIVE_DEFAULT_PARTITION__``) form one group.

    A batch spread over many partitions (Spark hands a task 10,000 rows that may hold thousands of values)
    is reordered once, group after group, and cut into zero-copy slices: one ``take`` per batch, not one
    per partition. ``paths``: a cache of partition values -> path that the caller keeps across batches, so
    that each distinct key's path is built once per task.
    """
    columns = list(partition_columns)
    data = batch.select([n for n in batch.schema.names if n not in set(columns)])
    if not columns:
        return [("", data)] if batch.num_rows else []
    if batch.num_rows == 0:
        return []
    keys = pa.table([batch.column(c) for c in columns] + [pa.array(range(batch.num_rows), pa.int64())],
                    names=[f"k{i}" for i in range(len(columns))] + ["row"])
    # use_threads=False keeps groups in order of first appearance, and each group's rows in their order.
    groups = keys.group_by([f"k{i}" for i in range(len(columns))], use_threads=False).aggregate([("row", "list")])
    key_values = [groups.column(f"k{i}").to_pylist() for i in range(len(columns))]
    if groups.num_rows == 1:
        path = partition_path(columns, [partition_value_text(v[0]) for v in key_values])
        return [(path, data)]
    row_lists = groups.column("row_list").combine_chunks()
    cache = paths if paths is not None else {}
    group_paths = []
    for key in zip(*key_values):
        path = cache.get(key)
        if path is None:
            path = partition_path(columns, [partition_value_text(v) for v in key])
            if len(cache) >= _PATH_CACHE_ENTRIES:
                cache.clear()
            cache[key] = path
        group_paths.append(path)
    if len(set(group_paths)) < len(group_paths):  # values that share a path: gather each path's rows in row order
        return _split_by_shared_paths(data, group_paths, row_lists)
    ordered = data.take(row_lists.values)  # every group's rows contiguous, groups in order of first appearance
    offsets = row_lists.offsets.to_pylist()
    return [(path, ordered.slice(offsets[g], offsets[g + 1] - offsets[g])) for g, path in enumerate(group_paths)]


def _compact(rows: pa.RecordBatch) -> pa.RecordBatch:
    """A slice of a split batch as a batch of its own. An open file's writer keeps the pieces it is given
    until a row group fills, and a slice would keep its whole batch alive with it: a partition that gets a
    few rows of every batch would hold every batch until its file closes."""
    return rows.take(pa.array(np.arange(rows.num_rows)))


def _split_by_shared_paths(data: pa.RecordBatch, paths: list[str], row_lists: pa.ListArray) -> list[tuple[str, pa.RecordBatch]]:
    by_path: dict[str, list[pa.Array]] = {}
    for g, path in enumerate(paths):
        by_path.setdefault(path, []).append(row_lists[g].values)
    out: list[tuple[str, pa.RecordBatch]] = []
    for path, index_lists in by_path.items():
        if len(index_lists) == 1:
            indices = index_lists[0]
        else:
            indices = pa.array(sorted(i for lst in index_lists for i in lst.to_pylist()), pa.int64())
        out.append((path, data.take(indices)))
    return out


# ---------------------------------------------------------------- the task's partition writers
@dataclass
class WriteStats:
    """What a :class:`PartitionedWriter` wrote, and how close it came to its memory bound."""

    files: int = 0
    rows: int = 0
    partitions: set[str] = field(default_factory=set)
    #: The most partition files that were open at the same time (never above ``max_open_writers``).
    max_open: int = 0
    #: Rows set aside for the sorted write after the open-writer limit was reached.
    spilled_rows: int = 0
    spilled_bytes: int = 0
    spilled_partitions: int = 0


class _Output:
    """One partition's current file; rolls over to a new file after ``max_records`` rows."""

    def __init__(self, owner: "PartitionedWriter", path: str):
        self.owner = owner
        self.path = path
        self.sink: Sink | None = None
        self.writer: FormatWriter | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        limit = self.owner.max_records_per_file
        offset, n = 0, batch.num_rows
        while offset < n:
            if self.writer is None:
                self._open()
            assert self.writer is not None
            take = n - offset if not limit else min(n - offset, limit - self.writer.rows)
            self.writer.write(batch if take == n else batch.slice(offset, take))
            offset += take
            if limit and self.writer.rows >= limit:
                self.close_file()

    def _open(self) -> None:
        fmt = self.owner.format
        self.sink = self.owner.open_sink(self.path, fmt.extension)
        self.writer = fmt.open(self.sink, self.owner.schema)  # type: ignore[arg-type]

    def close_file(self) -> None:
        if self.writer is None or self.sink is None:
            return
        writer, sink = self.writer, self.sink
        self.writer = self.sink = None
        writer.close()
        sink.rows = writer.rows
        sink.close()
        stats = self.owner.stats
        stats.files += 1
        stats.rows += writer.rows
        stats.partitions.add(self.path)

    def abort(self) -> None:
        sink, self.sink, self.writer = self.sink, None, None
        if sink is not None:
            try:
                sink.abort()
            except Exception as exc:  # noqa: BLE001 - already failing; the job commit aborts leftovers by job id
                log.warning("could not abort a partition file of %r: %s", self.path, exc)


class _Spill:
    """Batches set aside on local disk, indexed by partition path, read back one batch at a time.

    Pieces arriving for the same partition are gathered in a small buffer (``buffer_bytes`` in all) and
    written as one batch per partition when it fills: a task spread over many partitions would otherwise
    spill countless tiny batches, whose index and per-batch overhead grow with the data.
    """

    def __init__(self, schema: pa.Schema, directory: str | None, *, buffer_bytes: int = SPILL_BUFFER_BYTES):
        self._dir = tempfile.mkdtemp(prefix="mpcommit-spill-", dir=directory)
        self._file = os.path.join(self._dir, "spill.arrow")
        self._writer: Any = pa.ipc.new_file(self._file, schema)
        self._index: dict[str, list[int]] = {}
        self._count = 0
        self._buffer: dict[str, list[pa.RecordBatch]] = {}
        self._buffered = 0
        self._buffer_bytes = buffer_bytes

    def add(self, path: str, batch: pa.RecordBatch, nbytes: int) -> None:
        self._buffer.setdefault(path, []).append(batch)
        self._index.setdefault(path, [])
        self._buffered += nbytes
        if self._buffered >= self._buffer_bytes:
            self._flush()

    def _flush(self) -> None:
        for path, pieces in self._buffer.items():
            self._writer.write_batch(pa.concat_batches(pieces) if len(pieces) > 1 else pieces[0])
            self._index[path].append(self._count)
            self._count += 1
        self._buffer, self._buffered = {}, 0

    @property
    def partitions(self) -> int:
        return len(self._index)

    def replay(self) -> Iterator[tuple[str, Iterator[pa.RecordBatch]]]:
        """Each spilled partition, in path order, with its batches in the order they arrived."""
        self._flush()
        self._writer.close()
        # Read into fresh buffers rather than memory-mapping: every page of a mapping that is read stays in
        # the process's resident set until unmapped, so a mapped replay would grow RSS to the whole spill.
        with pa.OSFile(self._file, "rb") as source:
            reader = pa.ipc.open_file(source)
            for path in sorted(self._index):
                yield path, (reader.get_batch(i) for i in self._index[path])

    def cleanup(self) -> None:
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - closed already, or failing; the directory goes anyway
            pass
        shutil.rmtree(self._dir, ignore_errors=True)


class PartitionedWriter:
    """Writes one task's batches as files per Hive partition, with at most ``max_open_writers`` open.

    Feed batches with :meth:`write`, then :meth:`close` to finish every file (including the spilled,
    sorted rest); on any failure call :meth:`abort`. The first batch's schema is checked against the format
    before the first file is opened, so that a type the format cannot hold fails before any upload.
    Files are opened through ``open_sink(partition path, extension)`` and closed (never aborted) once
    complete, with their row count set on the sink.
    """

    def __init__(
        self,
        *,
        fmt: FileFormat,
        open_sink: OpenSink,
        partition_columns: Sequence[str] = (),
        max_open_writers: int = DEFAULT_MAX_OPEN_WRITERS,
        max_records_per_file: int = 0,
        spill_dir: str | None = None,
        spill_buffer_bytes: int = SPILL_BUFFER_BYTES,
    ):
        if not isinstance(max_open_writers, int) or max_open_writers < 1:
            raise UsageError(f"max_open_writers must be an integer of at least 1, got {max_open_writers!r}")
        if not isinstance(max_records_per_file, int) or max_records_per_file < 0:
            raise UsageError(f"maxRecordsPerFile must be 0 (no limit) or more, got {max_records_per_file!r}")
        self.format = fmt
        self.open_sink = open_sink
        self.partition_columns = tuple(partition_columns)
        self.max_open_writers = max_open_writers
        self.max_records_per_file = max_records_per_file
        self.spill_dir = spill_dir
        self.spill_buffer_bytes = spill_buffer_bytes
        self.stats = WriteStats()
        self.schema: pa.Schema | None = None
        self._input_schema: pa.Schema | None = None
        self._outputs: dict[str, _Output] = {}
        self._spill: _Spill | None = None
        self._paths: dict[tuple, str] = {}
        self._done = False

    def _start(self, schema: pa.Schema) -> None:
        missing = [c for c in self.partition_columns if c not in schema.names]
        if missing:
            raise UsageError(f"partition column(s) {', '.join(missing)} missing from the data ({', '.join(schema.names)})")
        self._input_schema = schema
        self.schema = data_schema(schema, self.partition_columns)
        self.format.check_schema(self.schema)

    def write(self, batch: pa.RecordBatch) -> None:
        if self._done:
            raise ProtocolError("write after close or abort of a PartitionedWriter")
        if self._input_schema is None:
            self._start(batch.schema)
        elif not batch.schema.equals(self._input_schema):
            raise ProtocolError(f"batch schema changed within one task:\n{batch.schema}\nafter\n{self._input_schema}")
        groups = split_batch(batch, self.partition_columns, paths=self._paths)
        # Bytes of a group, as its share of the batch's rows: asking each of thousands of slices for its
        # nbytes costs more than splitting the batch. An overestimate (the partition columns are counted).
        row_bytes = batch.nbytes / max(1, batch.num_rows)
        for path, rows in groups:
            output = self._outputs.get(path)
            if output is None:
                if self._spill is None and len(self._outputs) < self.max_open_writers:
                    output = self._outputs[path] = _Output(self, path)
                    self.stats.max_open = max(self.stats.max_open, len(self._outputs))
                else:
                    self._set_aside(path, rows, int(rows.num_rows * row_bytes))
                    continue
            output.write(_compact(rows) if len(groups) > 1 else rows)

    def _set_aside(self, path: str, rows: pa.RecordBatch, nbytes: int) -> None:
        if self._spill is None:
            assert self.schema is not None
            log.info("task met more than %d partitions; writing the rest sorted by partition", self.max_open_writers)
            self._spill = _Spill(self.schema, self.spill_dir, buffer_bytes=self.spill_buffer_bytes)
        self._spill.add(path, rows, nbytes)
        self.stats.spilled_rows += rows.num_rows
        self.stats.spilled_bytes += nbytes

    def close(self) -> WriteStats:
        """Finish every open file, then write the spilled partitions one file at a time, in path order."""
        if self._done:
            return self.stats
        self._done = True
        try:
            for output in list(self._outputs.values()):
                output.close_file()
            self._outputs.clear()
            if self._spill is not None:
                self.stats.spilled_partitions = self._spill.partitions
                for path, batches in self._spill.replay():
                    output = self._outputs[path] = _Output(self, path)
                    for rows in batches:
                        output.write(rows)
                    output.close_file()
                    del self._outputs[path]
        except BaseException:
            self._abort_outputs()
            raise
        finally:
            if self._spill is not None:
                self._spill.cleanup()
        return self.stats

    def abort(self) -> None:
        """Abort every file still open and drop the spill. Never raises."""
        self._done = True
        self._abort_outputs()
        if self._spill is not None:
            self._spill.cleanup()

    def _abort_outputs(self) -> None:
        for output in self._outputs.values():
            output.abort()
        self._outputs.clear()
