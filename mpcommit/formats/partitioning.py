"""Dynamic partitioning of one task's rows: Arrow batches in, one file stream per Hive partition out.

A task keeps up to ``max_open_writers`` partition files open at once and writes each batch's rows straight
into them -- no sort, which is what data that mostly falls into one or a few partitions wants. When a task
meets more partitions than that, it does what Spark's ``DynamicPartitionDataConcurrentWriter`` does when it
runs out of concurrent writers: the rest of the task's rows for *new* partitions are set aside and written
afterwards sorted by partition, one file at a time. Here "set aside" is a spill to a local Arrow IPC file
with an index of which batches belong to which partition: every 8 MiB of set-aside rows are sorted once by
partition (a stable sort of small integer ids, so row order inside a partition is kept) and written as one
batch per partition. Rows for partitions that already have an open file keep going into it while they are a good
share of what arrives; once most of a batch is set aside, their rows are set aside with the rest (a take per open
file per batch cost more than the few rows it moved: issue 39), and each such file goes on with them at close,
before the other partitions: no partition gets a second file without need, and never more files are open at once.

A batch is routed whole, never split into its partitions in Python: each row's partition becomes a small
integer id in Arrow's and numpy's kernels (:class:`PartitionKeys`: only a value the task has not seen before
costs Python work), and the rows go to the open files and to the spill by id. Spark hands a task 10,000-row
batches, and a task whose rows are not sorted by partition holds every partition value in every batch: before,
a task of 1,250 interleaved partitions made 420,000 slices and as many Python steps, about 4 ms of CPU per
file it wrote (issue 39's profile).

The sorted write fills one file after another, but no round trip of a file waits on the next: the Spark
writer opens its files with ``TaskAttempt.create(background=True)``, so a file's upload is created as it opens
(a small file's create and only part on the task's own thread: :mod:`mpcommit.store.polled_http`) and its last part
uploads while the next file is written (before, each of the 1,000 files of a task cost two serial round trips, ~60 s on
S3; BENCHMARKS.md, "Task side at scale").

Memory bound of one task (the reason for all of the above)::

    peak ~= max_open_writers x (format buffer + multipart part buffers) + closing_bytes + one batch being split

* format buffer: Parquet collects up to ``row_group_bytes`` (16 MiB by default) of Arrow data per open
  file, and up to 256 KiB of encoded bytes before they go to the sink; CSV, JSON and text stream through (a few
  KiB of compressor state);
* multipart part buffers: one part filling plus ``max_parts_in_flight`` uploading, each at most the part
  size (8 MiB at first): ``part_size x (1 + max_parts_in_flight)`` = 24 MiB with the default settings.

* closing_bytes (``WriterSettings``, 32 MiB): what files closing in the background still hold (last parts and
  parts uploading), all of the task's together; a file's ``close`` waits for room beyond it.

Both buffers only grow as data arrives, so a small partition costs what it holds. With the defaults
(8 writers, Parquet) the worst case is about 8 x (16 + 24) + 32 MiB = 352 MiB, whatever the number of
partitions (360 MiB with the spill's buffer below; ``bench/bench_task_scale.py`` asserts it).
The spill adds a constant: rows set aside are gathered in an 8 MiB buffer before they go to a local file
(through a 256 KiB write buffer), and are read back one batch at a time (not memory-mapped: mapped pages that
were read would count in the worker's resident set until the whole spill is done).

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
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ProtocolError, UsageError
from ..protocol.layout import is_hidden_name, partition_path
from .base import FileFormat, FormatWriter, is_binary, is_nested

log = logging.getLogger(__name__)

#: Partition files a task keeps open at once before it falls back to the sorted (spilled) write.
DEFAULT_MAX_OPEN_WRITERS = 8
#: Rows set aside are gathered up to this many bytes before they go to the spill file.
SPILL_BUFFER_BYTES = 8 * 1024 * 1024
#: The spill file's write buffer (one per task, and only once it spills).
SPILL_WRITE_BUFFER_BYTES = 256 * 1024
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


# ---------------------------------------------------------------- partition keys -> path ids, a batch at a time
class _Codes:
    """Values of one Arrow type -> dense codes 0, 1, 2... in order of first appearance, worked out in Arrow's kernels:
    a batch's distinct values come from ``dictionary_encode`` and are looked up among the values known so far by
    ``index_in``, so that only a value never seen before costs Python work. Arrow's hashing decides equality (NaN
    equals NaN, as in Spark's grouping)."""

    def __init__(self) -> None:
        self.known: pa.Array | None = None
        self.values: list[Any] = []  # code -> the value as Python sees it (only new values are converted)

    def encode(self, array: pa.Array) -> tuple[np.ndarray, int]:
        """Each element's code, and how many codes this call added (the last ones of :attr:`values`)."""
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        if pa.types.is_string_view(array.type):  # no lookup kernels for views: the same strings, plainly laid out
            array = array.cast(pa.large_string())
        encoded = pc.dictionary_encode(array, null_encoding="encode")
        distinct, indices = encoded.dictionary, encoded.indices.to_numpy(zero_copy_only=False)
        before = len(self.values)
        if self.known is None:
            codes = np.full(len(distinct), -1, dtype=np.int64)
        else:
            found = pc.index_in(distinct, value_set=self.known, skip_nulls=False)
            codes = found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        new = np.flatnonzero(codes < 0)
        if len(new):
            codes[new] = np.arange(before, before + len(new), dtype=np.int64)
            fresh = distinct.take(pa.array(new))
            self.values.extend(fresh.to_pylist())
            self.known = fresh if self.known is None else pa.concat_arrays([self.known, fresh])
        return codes[indices], len(new)


class PartitionKeys:
    """A task's partition values -> the ids of their Hive paths, a whole batch at a time (:meth:`path_ids`).

    Each column's values get codes (:class:`_Codes`); with several columns, each (codes so far, next column's code)
    pair gets a code of its own the same way, so the last column's pairs name the whole key. Only a key never seen
    before costs Python work (its path is built once); a batch's rows are never visited one by one, nor its
    partitions one by one. Keys that give the same path (null and the empty string both go to
    ``__HIVE_DEFAULT_PARTITION__``) share its id. Past ``max_keys`` distinct keys the codes start over (a task
    spread over millions of values would otherwise keep them all); the paths and their ids stay."""

    def __init__(self, columns: Sequence[str], *, max_keys: int = _PATH_CACHE_ENTRIES):
        self.columns = tuple(columns)
        self.max_keys = max_keys
        #: path id -> path
        self.paths: list[str] = []
        self._ids: dict[str, int] = {}
        self._start_over()

    def _start_over(self) -> None:
        self._columns = [_Codes() for _ in self.columns]
        self._pairs = [_Codes() for _ in self.columns[1:]]
        self._key_path = np.zeros(0, dtype=np.int64)  # key code -> path id

    def path_ids(self, batch: pa.RecordBatch) -> np.ndarray:
        """The path id of every row of ``batch`` (new keys get their paths in order of first appearance)."""
        if len(self._key_path) > self.max_keys:
            self._start_over()
        codes, added = self._columns[0].encode(batch.column(self.columns[0]))
        chain = [added]
        for i, name in enumerate(self.columns[1:]):
            column_codes, _ = self._columns[i + 1].encode(batch.column(name))
            # Codes are below 2**31 (a batch's rows bound what one call adds), so a pair fits one int64.
            codes, added = self._pairs[i].encode(pa.array((codes << 32) | column_codes))
            chain.append(added)
        if added:
            self._key_path = np.concatenate([self._key_path, self._new_paths(added)])
        return self._key_path[codes]

    def _new_paths(self, added: int) -> np.ndarray:
        last = self._pairs[-1] if self._pairs else self._columns[0]
        out = np.empty(added, dtype=np.int64)
        for i, key in enumerate(last.values[len(last.values) - added:]):
            path = partition_path(self.columns, [partition_value_text(v) for v in self._values_of(key)])
            found = self._ids.get(path)
            if found is None:
                found = self._ids[path] = len(self.paths)
                self.paths.append(path)
            out[i] = found
        return out

    def _values_of(self, key: Any) -> list[Any]:
        """The column values of a key code of the last registry (a value, or a pair of codes walked back)."""
        if not self._pairs:
            return [key]
        values = []
        for i in range(len(self._pairs) - 1, -1, -1):
            previous, code = key >> 32, key & 0xFFFFFFFF
            values.append(self._columns[i + 1].values[code])
            key = self._pairs[i - 1].values[previous] if i else self._columns[0].values[previous]
        values.append(key)
        return values[::-1]


def first_appearances(ids: np.ndarray) -> np.ndarray:
    """The distinct values of ``ids`` in order of first appearance."""
    distinct, first = np.unique(ids, return_index=True)
    return distinct[np.argsort(first, kind="stable")]


def stable_order(ids: np.ndarray) -> np.ndarray:
    """The indices that sort ``ids`` (small non-negative integers: path ids, ranks), equal ids in their order.
    Ids that fit 16 bits are sorted as such: numpy sorts 16-bit keys by radix, 2 ms for a spill buffer's 200,000
    rows where the same ids as int64 took 15 ms by merge sort (issue 39)."""
    if len(ids) and int(ids.max()) < 1 << 16:
        ids = ids.astype(np.uint16)
    return np.argsort(ids, kind="stable")


def split_batch(batch: pa.RecordBatch, partition_columns: Sequence[str], *,
                keys: PartitionKeys | None = None) -> list[tuple[str, pa.RecordBatch]]:
    """Group the rows of ``batch`` by partition: ``[(partition path, rows without the partition columns)]``,
    in the order the partitions first appear. Row order inside each group is kept. Values that map to the
    same path (null and the empty string both go to ``__HIVE_DEFAULT_PARTITION__``) form one group.

    The batch is reordered once (one stable sort of its rows' path ids, one ``take``) and cut into zero-copy slices.
    ``keys``: the task's :class:`PartitionKeys`, kept across batches (each distinct key's path is built once).
    :class:`PartitionedWriter` does not split a batch into all its partitions: it routes rows by path id."""
    columns = list(partition_columns)
    data = batch.select([n for n in batch.schema.names if n not in set(columns)])
    if not columns:
        return [("", data)] if batch.num_rows else []
    if batch.num_rows == 0:
        return []
    keys = keys if keys is not None else PartitionKeys(columns)
    ids = keys.path_ids(batch)
    order = first_appearances(ids)
    if len(order) == 1:
        return [(keys.paths[order[0]], data)]
    rank = np.empty(int(ids.max()) + 1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    ranks = rank[ids]
    ordered = data.take(pa.array(stable_order(ranks)))
    bounds = np.concatenate([[0], np.cumsum(np.bincount(ranks, minlength=len(order)))])
    return [(keys.paths[pid], ordered.slice(int(bounds[g]), int(bounds[g + 1] - bounds[g])))
            for g, pid in enumerate(order)]


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
    """Rows set aside on local disk, indexed by partition, read back one partition at a time.

    Rows arrive as whole pieces of batches with their rows' path ids, and are gathered in a small buffer
    (``buffer_bytes`` in all). When it fills, its rows are sorted by path id once (a stable sort: each partition's
    rows keep their order) and written as one Arrow batch per partition, zero-copy slices of the sorted rows: the
    per-partition work is per buffer, not per incoming batch (a task spread over 1,250 partitions gets 1,250 of
    them in every 10,000-row batch).
    """

    def __init__(self, schema: pa.Schema, directory: str | None, paths: Sequence[str], *,
                 buffer_bytes: int = SPILL_BUFFER_BYTES):
        self._dir = tempfile.mkdtemp(prefix="mpcommit-spill-", dir=directory)
        self._file = os.path.join(self._dir, "spill.arrow")
        # Buffered: a flush writes one small batch per partition, each a handful of buffers, and unbuffered every
        # buffer was a write call of its own (issue 39: 0.9 -> 0.4 s of CPU for a task of 1,250 partitions). No
        # threads: batches this small cost more to hand to Arrow's pool than to write.
        self._out = pa.BufferedOutputStream(pa.OSFile(self._file, "wb"), SPILL_WRITE_BUFFER_BYTES)
        self._writer: Any = pa.ipc.new_file(self._out, schema, options=pa.ipc.IpcWriteOptions(use_threads=False))
        self._paths = paths  # path id -> path (the task's PartitionKeys.paths, which only grows)
        self._index: dict[int, list[int]] = {}
        self._count = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffer_ids: list[np.ndarray] = []
        self._buffered = 0
        self._buffer_bytes = buffer_bytes

    def add(self, rows: pa.RecordBatch, path_ids: np.ndarray, nbytes: int) -> None:
        self._buffer.append(rows)
        self._buffer_ids.append(path_ids)
        self._buffered += nbytes
        if self._buffered >= self._buffer_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        rows = pa.concat_batches(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        ids = np.concatenate(self._buffer_ids) if len(self._buffer_ids) > 1 else self._buffer_ids[0]
        self._buffer, self._buffer_ids, self._buffered = [], [], 0
        order = stable_order(ids)
        ids = ids[order]
        rows = rows.take(pa.array(order))
        starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        ends = np.append(starts[1:], len(ids))
        for start, end in zip(starts.tolist(), ends.tolist()):
            self._writer.write_batch(rows.slice(start, end - start))
            self._index.setdefault(int(ids[start]), []).append(self._count)
            self._count += 1

    @property
    def partitions(self) -> int:
        """Partitions set aside (what is still buffered goes to disk first)."""
        return len(self.paths())

    def paths(self) -> set[str]:
        """The paths of the partitions set aside (what is still buffered goes to disk first)."""
        self._flush()
        return {self._paths[i] for i in self._index}

    def replay(self, first: Collection[str] = ()) -> Iterator[tuple[str, Iterator[pa.RecordBatch]]]:
        """Each spilled partition with its rows in the order they arrived: the paths in ``first`` (files still
        open, whose rows go on from the spill), then the others, each group in path order."""
        self._flush()
        self._writer.close()
        self._out.close()
        # Read into fresh buffers rather than memory-mapping: every page of a mapping that is read stays in
        # the process's resident set until unmapped, so a mapped replay would grow RSS to the whole spill.
        with pa.OSFile(self._file, "rb") as source:
            reader = pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(use_threads=False))
            for path_id in sorted(self._index, key=lambda i: (self._paths[i] not in first, self._paths[i])):
                yield self._paths[path_id], (reader.get_batch(i) for i in self._index[path_id])

    def cleanup(self) -> None:
        for closing in (self._writer, self._out):
            try:
                closing.close()
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
        self._keys = PartitionKeys(self.partition_columns)
        #: path id -> index of its open output in ``_open``, -1 for none (grows with the task's paths)
        self._slot = np.zeros(0, dtype=np.int64)
        self._open: list[_Output] = []
        self._open_ids: list[int] = []  # the path id of each output in ``_open``
        self._data_columns: list[int] = []
        self._done = False

    def _start(self, schema: pa.Schema) -> None:
        missing = [c for c in self.partition_columns if c not in schema.names]
        if missing:
            raise UsageError(f"partition column(s) {', '.join(missing)} missing from the data ({', '.join(schema.names)})")
        self._input_schema = schema
        self.schema = data_schema(schema, self.partition_columns)
        self.format.check_schema(self.schema)
        self._data_columns = [i for i, n in enumerate(schema.names) if n not in set(self.partition_columns)]

    def write(self, batch: pa.RecordBatch) -> None:
        if self._done:
            raise ProtocolError("write after close or abort of a PartitionedWriter")
        if self._input_schema is None:
            self._start(batch.schema)
        elif not batch.schema.equals(self._input_schema):
            raise ProtocolError(f"batch schema changed within one task:\n{batch.schema}\nafter\n{self._input_schema}")
        if batch.num_rows == 0:
            return
        data = batch.select(self._data_columns)
        if not self.partition_columns:
            self._output_for("").write(data)
            return
        # Rows are routed by their partition's path id, all in numpy and Arrow: a batch spread over a thousand
        # partitions is neither split into a thousand pieces nor walked partition by partition here.
        ids = self._keys.path_ids(batch)
        if len(self._slot) < len(self._keys.paths):
            self._slot = np.concatenate([self._slot, np.full(len(self._keys.paths) - len(self._slot), -1, np.int64)])
        slots = self._slot[ids]
        closed = slots < 0
        if self._spill is None and len(self._open) < self.max_open_writers and closed.any():
            # Partitions new to this task open files while there is room, in order of first appearance.
            for path_id in first_appearances(ids[closed])[: self.max_open_writers - len(self._open)].tolist():
                self._slot[path_id] = len(self._open)
                self._open.append(self._output_for(self._keys.paths[path_id]))
                self._open_ids.append(path_id)
            slots = self._slot[ids]
            closed = slots < 0
        counts = np.bincount(slots + 1, minlength=len(self._open) + 1)
        n = batch.num_rows
        if counts[0] and 4 * (n - counts[0]) < n:
            # Most rows are set aside already: the open files' rows join them, from this batch on (their files stay
            # open and go on with those rows at close). Routing the few rows of each open file cost a take apiece,
            # ~30 us whatever its rows -- a task of 125 interleaved partitions spent 10% of its CPU on them (issue 39).
            # A file that streams most of the rows keeps streaming them.
            self._slot[self._open_ids] = -1
            self._open, self._open_ids = [], []
            self._set_aside(data, ids, batch.nbytes)
            return
        for slot in np.flatnonzero(counts[1:]).tolist():
            rows = data if counts[slot + 1] == n else data.take(pa.array(np.flatnonzero(slots == slot)))
            self._open[slot].write(rows)  # a take, never a slice: an open file keeps its pieces until a row group fills
        if counts[0]:
            picked = np.flatnonzero(closed) if counts[0] < n else None
            # Bytes as the rows' share of the batch (an overestimate: the partition columns are counted).
            self._set_aside(data if picked is None else data.take(pa.array(picked)),
                            ids if picked is None else ids[picked], int(counts[0] * batch.nbytes / n))

    def _output_for(self, path: str) -> "_Output":
        output = self._outputs.get(path)
        if output is None:
            output = self._outputs[path] = _Output(self, path)
            self.stats.max_open = max(self.stats.max_open, len(self._outputs))
        return output

    def _set_aside(self, rows: pa.RecordBatch, path_ids: np.ndarray, nbytes: int) -> None:
        if self._spill is None:
            assert self.schema is not None
            log.info("task met more than %d partitions; writing the rest sorted by partition", self.max_open_writers)
            self._spill = _Spill(self.schema, self.spill_dir, self._keys.paths, buffer_bytes=self.spill_buffer_bytes)
        self._spill.add(rows, path_ids, nbytes)
        self.stats.spilled_rows += rows.num_rows
        self.stats.spilled_bytes += nbytes

    def close(self) -> WriteStats:
        """Finish every open file, then write the spilled partitions one file at a time, in path order (files still
        open whose later rows were set aside first: they go on with them)."""
        if self._done:
            return self.stats
        self._done = True
        try:
            spilled = self._spill.paths() if self._spill is not None else set()
            for path in [path for path in self._outputs if path not in spilled]:  # every row of theirs written
                self._outputs.pop(path).close_file()
            self._open.clear()
            if self._spill is not None:
                self.stats.spilled_partitions = len(spilled)
                # Files still open (their later rows set aside) go on first, so that no more are open at once.
                for path, batches in self._spill.replay(first=set(self._outputs)):
                    output = self._outputs.pop(path, None) or _Output(self, path)
                    self._outputs[path] = output
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
        self._open.clear()
