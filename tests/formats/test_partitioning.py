"""Dynamic partitioning of a task's rows: splitting, Hive paths, the open-writer bound and the sorted fallback.

No server: files go into in-memory sinks that record when they were opened, closed or aborted.
"""

from __future__ import annotations

import datetime as dt
import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpcommit.errors import UsageError
from mpcommit.formats import make_format
from mpcommit.formats.partitioning import (
    PartitionedWriter,
    PartitionKeys,
    partition_value_text,
    resolve_partition_columns,
    split_batch,
    stable_order,
)
from mpcommit.protocol.layout import DEFAULT_PARTITION, parse_partition_path


class MemorySink(io.RawIOBase):
    """Stands in for the multipart writer: keeps the bytes, and tells its tracker how many files are open."""

    def __init__(self, tracker: "Tracker", path: str, ext: str):
        super().__init__()
        self.tracker, self.path, self.ext = tracker, path, ext
        self.data = bytearray()
        self.rows: int | None = None
        self.aborted = False
        self.finished = False

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # noqa: ANN001
        if self.tracker.fail_after_bytes is not None and self.tracker.bytes_written + len(b) > self.tracker.fail_after_bytes:
            raise OSError("injected write failure")
        self.tracker.bytes_written += len(b)
        self.data += bytes(b)
        return len(b)

    def tell(self) -> int:
        return len(self.data)

    def close(self) -> None:
        if not self.closed:
            self.finished = True
            self.tracker.open_now -= 1
        super().close()

    def abort(self) -> None:
        if not self.closed:
            self.aborted = True
            self.tracker.open_now -= 1
            super().close()


class Tracker:
    def __init__(self, fail_after_bytes: int | None = None):
        self.sinks: list[MemorySink] = []
        self.open_now = 0
        self.peak_open = 0
        self.bytes_written = 0
        self.fail_after_bytes = fail_after_bytes

    def open(self, path: str, ext: str) -> MemorySink:
        sink = MemorySink(self, path, ext)
        self.sinks.append(sink)
        self.open_now += 1
        self.peak_open = max(self.peak_open, self.open_now)
        return sink

    def rows_by_partition(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for s in self.sinks:
            assert s.finished and not s.aborted
            table = pq.read_table(pa.BufferReader(bytes(s.data)))
            assert table.num_rows == s.rows, "the sink's row count must be the file's"
            out.setdefault(s.path, []).extend(table.to_pylist())
        return out


def batch_of(keys: list, start: int = 0, name: str = "k") -> pa.RecordBatch:
    # Typed explicitly: a batch of only nulls would otherwise be inferred as Arrow's null type.
    return pa.record_batch({name: pa.array(keys, pa.string()), "seq": pa.array(range(start, start + len(keys)), pa.int64())})


# ---------------------------------------------------------------- split_batch
def test_split_groups_rows_by_partition_in_order_of_first_appearance() -> None:
    groups = split_batch(batch_of(["b", "a", "b", "c", "a"]), ["k"])
    assert [(p, g.column("seq").to_pylist()) for p, g in groups] == [("k=b", [0, 2]), ("k=a", [1, 4]), ("k=c", [3])]
    assert all(g.schema.names == ["seq"] for _, g in groups), "partition columns are left out of the files"


def test_split_null_and_empty_string_share_the_default_partition_in_row_order() -> None:
    groups = split_batch(batch_of(["", "x", None, "", None]), ["k"])
    assert [(p, g.column("seq").to_pylist()) for p, g in groups] == [
        (f"k={DEFAULT_PARTITION}", [0, 2, 3, 4]), ("k=x", [1])]


def test_split_escapes_values_as_hive_does() -> None:
    values = ["a/b", "x=y", "50%", "with space", "grüße 日本", "c:d", "#?*"]
    groups = split_batch(batch_of(values), ["k"])
    paths = [p for p, _ in groups]
    assert paths == ["k=a%2Fb", "k=x%3Dy", "k=50%25", "k=with space", "k=grüße 日本", "k=c%3Ad", "k=%23%3F%2A"]
    assert [parse_partition_path(p)["k"] for p in paths] == values


def test_split_by_several_columns_and_typed_values() -> None:
    batch = pa.record_batch({
        "day": pa.array([dt.date(2024, 6, 15), dt.date(2024, 6, 14), dt.date(2024, 6, 15)], pa.date32()),
        "hour": pa.array([10, 23, 10], pa.int32()),
        "flag": [True, False, True],
        "v": [1, 2, 3],
    })
    groups = split_batch(batch, ["day", "hour", "flag"])
    assert [(p, g.column("v").to_pylist()) for p, g in groups] == [
        ("day=2024-06-15/hour=10/flag=true", [1, 3]), ("day=2024-06-14/hour=23/flag=false", [2])]


def test_split_timestamps_render_like_spark_partition_values() -> None:
    utc = dt.timezone.utc
    assert partition_value_text(dt.datetime(2024, 6, 15, 10, 0, tzinfo=utc)) == "2024-06-15 10:00:00"
    assert partition_value_text(dt.datetime(2024, 6, 15, 10, 0, 0, 500000, tzinfo=utc)) == "2024-06-15 10:00:00.5"
    batch = pa.record_batch({"ts": pa.array([dt.datetime(2024, 6, 15, 10, 0, tzinfo=utc)], pa.timestamp("us", tz="UTC")),
                             "v": [1]})
    assert split_batch(batch, ["ts"])[0][0] == "ts=2024-06-15 10%3A00%3A00"


def test_split_without_partition_columns_is_the_whole_batch() -> None:
    batch = batch_of(["a", "b"])
    [(path, rows)] = split_batch(batch, [])
    assert path == "" and rows.num_rows == 2
    assert split_batch(batch.slice(0, 0), ["k"]) == []


# ---------------------------------------------------------------- partition columns
SCHEMA = pa.schema([("Day", pa.date32()), ("country", pa.string()), ("v", pa.int64()),
                    ("tags", pa.list_(pa.string())), ("raw", pa.binary()), ("_hidden", pa.string())])


def test_a_batch_of_many_partitions_is_reordered_once_and_sliced() -> None:
    """Spark hands a task 10,000 rows that may hold thousands of partition values: split_batch makes one take for
    the batch and a zero-copy slice per partition; the task's keys remember each path, built once."""
    import numpy as np

    ids = np.arange(10_000, dtype=np.int64)
    batch = pa.record_batch({"id": ids, "p": (ids % 2_500).astype(np.int32)})
    keys = PartitionKeys(["p"])
    groups = split_batch(batch, ["p"], keys=keys)
    assert [path for path, _ in groups] == [f"p={v}" for v in range(2_500)]
    assert all(rows.column(0).to_pylist() == list(range(v, 10_000, 2_500)) for v, (_, rows) in enumerate(groups))
    starts = [rows.column(0).buffers()[1].address + rows.column(0).offset * 8 for _, rows in groups]
    assert starts == [starts[0] + 4 * 8 * g for g in range(2_500)], "each partition's rows from one reordered batch"
    assert len(keys.paths) == 2_500 and split_batch(batch, ["p"], keys=keys)[7][0] == "p=7"
    assert len(keys.paths) == 2_500, "a key seen before keeps its path"


def test_path_ids_come_whole_batches_at_a_time_with_paths_built_once_per_key() -> None:
    import numpy as np

    keys = PartitionKeys(["k"])
    first = keys.path_ids(batch_of(["b", None, "a", "", "b"]))
    assert keys.paths == ["k=b", f"k={DEFAULT_PARTITION}", "k=a"]
    assert first.tolist() == [0, 1, 2, 1, 0], "null and the empty string share one path and its id"
    assert keys.path_ids(batch_of(["a", "c", "b"])).tolist() == [2, 3, 0]
    assert keys.paths[3] == "k=c"
    floats = PartitionKeys(["x"])
    nan = float("nan")
    got = floats.path_ids(pa.record_batch({"x": [nan, 1.5, nan]})).tolist()
    assert got == [0, 1, 0] and floats.path_ids(pa.record_batch({"x": [nan]})).tolist() == [0], "NaN is one partition"
    # Several columns: every combination its own id, whatever the order the values first came in.
    multi = PartitionKeys(["a", "b"])
    ids = multi.path_ids(pa.record_batch({"a": [1, 1, 2, 2, 1], "b": ["x", "y", "x", "y", "x"]}))
    assert ids.tolist() == [0, 1, 2, 3, 0] and multi.paths == ["a=1/b=x", "a=1/b=y", "a=2/b=x", "a=2/b=y"]
    # Past max_keys the codes start over; the paths and their ids stay.
    small = PartitionKeys(["p"], max_keys=3)
    for start in range(0, 20, 5):
        small.path_ids(pa.record_batch({"p": np.arange(start, start + 5)}))
    assert small.paths == [f"p={v}" for v in range(20)]
    assert small.path_ids(pa.record_batch({"p": [3, 19]})).tolist() == [3, 19]


def test_string_views_are_looked_up_as_strings() -> None:
    keys = PartitionKeys(["k"])
    for values in (["a", "b", "a"], ["b", "c"]):
        ids = keys.path_ids(pa.record_batch({"k": pa.array(values, pa.string_view())}))
    assert ids.tolist() == [1, 2] and keys.paths == ["k=a", "k=b", "k=c"]


def test_interleaved_partitions_go_to_the_spill_a_batch_at_a_time(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Every batch holds 500 partitions: the writer hands its rows to the spill as one piece per batch, never one per
    partition -- the two open files' rows too (0.4% of each batch: a take apiece would cost more than they are
    worth), which those files take up again at close, after the rows they had."""
    import numpy as np

    from mpcommit.formats import partitioning

    pieces: list[int] = []
    real_add = partitioning._Spill.add
    monkeypatch.setattr(partitioning._Spill, "add", lambda self, rows, ids, n: (pieces.append(rows.num_rows),
                                                                                   real_add(self, rows, ids, n)))
    tracker = Tracker()
    w = PartitionedWriter(fmt=make_format("parquet"), open_sink=tracker.open, partition_columns=["p"],
                          max_open_writers=2, spill_dir=str(tmp_path))
    written: list[pa.RecordBatch] = []
    real_write = partitioning._Output.write
    monkeypatch.setattr(partitioning._Output, "write", lambda self, b: (written.append(b), real_write(self, b)))
    for start in range(0, 20_000, 5_000):
        ids = np.arange(start, start + 5_000, dtype=np.int64)
        w.write(pa.record_batch({"id": ids, "p": (ids % 500).astype(np.int32)}))
    assert pieces == [5_000] * 4 and written == []
    stats = w.close()
    assert stats.files == 500 and stats.spilled_partitions == 500 and stats.max_open == 2
    got = tracker.rows_by_partition()
    assert [r["id"] for r in got["p=7"]] == list(range(7, 20_000, 500))


def test_open_files_stream_while_they_hold_most_rows_and_go_on_from_the_spill_after(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Two partitions stream straight to their files, one compact copy of their rows per batch (a slice would pin
    the batch); when later batches spread over many partitions, everything is set aside and the two files go on
    with their rows from the spill -- one file each, rows in arrival order, never more than two files open."""
    import numpy as np

    from mpcommit.formats import partitioning

    written: list[pa.RecordBatch] = []
    real_write = partitioning._Output.write
    monkeypatch.setattr(partitioning._Output, "write", lambda self, b: (written.append(b), real_write(self, b)))
    tracker = Tracker()
    w = PartitionedWriter(fmt=make_format("parquet"), open_sink=tracker.open, partition_columns=["p"],
                          max_open_writers=2, spill_dir=str(tmp_path))
    # 3 batches of two partitions and one row in ten of a third (set aside: 10% of each batch), then 2 of 50.
    for start in range(0, 3_000, 1_000):
        ids = np.arange(start, start + 1_000, dtype=np.int64)
        w.write(pa.record_batch({"id": ids, "p": np.where(ids % 10 == 9, 2, ids % 2).astype(np.int32)}))
    streamed = list(written)
    assert len(streamed) == 6 and all(b.column(0).buffers()[1].size <= 500 * 8 for b in streamed), "compact copies"
    for start in range(3_000, 5_000, 1_000):
        ids = np.arange(start, start + 1_000, dtype=np.int64)
        w.write(pa.record_batch({"id": ids, "p": (ids % 50).astype(np.int32)}))
    assert len(written) == 6, "spread batches are set aside whole"
    stats = w.close()
    assert stats.files == 50 and tracker.peak_open == 2 and stats.max_open == 2
    got = tracker.rows_by_partition()
    assert [r["id"] for r in got["p=0"]] == list(range(0, 3_000, 2)) + list(range(3_000, 5_000, 50))
    assert [r["id"] for r in got["p=1"]] == [i for i in range(1, 3_000, 2) if i % 10 != 9] + list(range(3_001, 5_000, 50))
    assert [r["id"] for r in got["p=2"]] == list(range(9, 3_000, 10)) + list(range(3_002, 5_000, 50))
    assert len({s.path for s in tracker.sinks}) == 50


def test_partition_columns_resolve_like_spark() -> None:
    assert resolve_partition_columns(SCHEMA, None) == ()
    assert resolve_partition_columns(SCHEMA, "country") == ("country",)
    assert resolve_partition_columns(SCHEMA, ["day", "COUNTRY"]) == ("Day", "country")  # case-insensitive


@pytest.mark.parametrize("partition_by,message", [
    (["nope"], "partition column 'nope' is not a column of the data"),
    (["country", "Country"], "given twice"),
    (["tags"], "cannot partition by 'tags'"),
    (["raw"], "cannot partition by 'raw'"),
    (["_hidden"], "starts with '_'"),
    ([""], "non-empty column names"),
    ([["v"]], "non-empty column names"),
])
def test_bad_partition_columns_are_usage_errors(partition_by, message: str) -> None:  # noqa: ANN001
    with pytest.raises(UsageError, match=message):
        resolve_partition_columns(SCHEMA, partition_by)


def test_duplicate_column_names_are_refused_even_without_partitioning() -> None:
    schema = pa.schema([("id", pa.int64()), ("ID", pa.int64()), ("v", pa.string())])
    with pytest.raises(UsageError, match="duplicate column.*ID, id"):
        resolve_partition_columns(schema, None)


def test_partitioning_by_every_column_is_refused() -> None:
    with pytest.raises(UsageError, match="all columns"):
        resolve_partition_columns(pa.schema([("a", pa.int32()), ("b", pa.int32())]), ["a", "b"])


# ---------------------------------------------------------------- PartitionedWriter
def test_mostly_one_partition_streams_without_spilling(tmp_path) -> None:  # noqa: ANN001
    tracker = Tracker()
    w = PartitionedWriter(fmt=make_format("parquet"), open_sink=tracker.open, partition_columns=["k"],
                          max_open_writers=4, spill_dir=str(tmp_path))
    for i in range(20):
        w.write(batch_of(["today"] * 98 + ["yesterday", "2 days ago"], start=i * 100))
    stats = w.close()
    assert stats.spilled_rows == 0 and stats.max_open == 3
    assert stats.rows == 2000 and stats.files == 3
    assert sorted(stats.partitions) == ["k=2 days ago", "k=today", "k=yesterday"]
    assert len(tracker.rows_by_partition()["k=today"]) == 1960


def test_more_partitions_than_open_writers_falls_back_to_sorted_writes(tmp_path) -> None:  # noqa: ANN001
    tracker = Tracker()
    # A tiny spill buffer, so that set-aside rows go to disk many times before the sorted write.
    w = PartitionedWriter(fmt=make_format("parquet"), open_sink=tracker.open, partition_columns=["k"],
                          max_open_writers=3, spill_dir=str(tmp_path), spill_buffer_bytes=500)
    keys = [f"p{i % 37:02d}" for i in range(37 * 20)]  # 37 partitions, interleaved row by row
    for start in range(0, len(keys), 100):
        w.write(batch_of(keys[start:start + 100], start=start))
    stats = w.close()
    # Never more than 3 files open at once, whatever the number of partitions (here one: all from the spill) ...
    assert tracker.peak_open == 1 and stats.max_open == 3
    # ... yet one file per partition, each written from the spill in path order: the three writers opened by the
    # first batch had 3 of its 100 rows, so its rows and every later batch's were set aside.
    assert stats.files == 37 and len({s.path for s in tracker.sinks}) == 37
    assert stats.spilled_partitions == 37 and stats.spilled_rows == 37 * 20
    assert [s.path for s in tracker.sinks] == sorted(s.path for s in tracker.sinks)
    got = tracker.rows_by_partition()
    for i in range(37):
        seqs = [r["seq"] for r in got[f"k=p{i:02d}"]]
        assert seqs == [j for j in range(len(keys)) if j % 37 == i], "rows kept in arrival order per partition"
    assert os.listdir(tmp_path) == [], "the spill is removed once written"


def test_max_records_per_file_rolls_files(tmp_path) -> None:  # noqa: ANN001
    tracker = Tracker()
    w = PartitionedWriter(fmt=make_format("parquet"), open_sink=tracker.open, partition_columns=["k"],
                          max_open_writers=1, max_records_per_file=7, spill_dir=str(tmp_path))
    w.write(batch_of(["a"] * 10 + ["b"] * 15))
    w.write(batch_of(["a"] * 5, start=25))
    stats = w.close()
    assert [(s.path, s.rows) for s in tracker.sinks] == [("k=a", 7), ("k=a", 7), ("k=a", 1), ("k=b", 7), ("k=b", 7),
                                                         ("k=b", 1)]
    assert stats.files == 6 and stats.rows == 30
    assert tracker.peak_open == 1


def test_schema_the_format_cannot_hold_fails_before_any_file_is_opened() -> None:
    tracker = Tracker()
    w = PartitionedWriter(fmt=make_format("csv"), open_sink=tracker.open, partition_columns=["k"])
    batch = pa.record_batch({"k": ["a"], "tags": pa.array([["x"]], pa.list_(pa.string()))})
    with pytest.raises(UsageError, match="csv cannot hold column 'tags'"):
        w.write(batch)
    assert tracker.sinks == []


def test_partition_columns_may_hold_what_the_format_cannot() -> None:
    # The files never contain the partition columns, so only the data columns are checked.
    tracker = Tracker()
    w = PartitionedWriter(fmt=make_format("text"), open_sink=tracker.open, partition_columns=["n"])
    w.write(pa.record_batch({"n": [1, 2, 1], "line": ["a", "b", "c"]}))
    w.close()
    assert {s.path: bytes(s.data) for s in tracker.sinks} == {"n=1": b"a\nc\n", "n=2": b"b\n"}


def test_failure_aborts_open_files_and_removes_the_spill(tmp_path) -> None:  # noqa: ANN001
    tracker = Tracker(fail_after_bytes=2_000)
    w = PartitionedWriter(fmt=make_format("csv"), open_sink=tracker.open, partition_columns=["k"],
                          max_open_writers=2, spill_dir=str(tmp_path))
    with pytest.raises(OSError, match="injected"):
        for start in range(0, 5000, 100):
            w.write(batch_of([f"p{i % 5}" for i in range(start, start + 100)], start=start))
        w.close()
    w.abort()
    assert tracker.open_now == 0 and any(s.aborted for s in tracker.sinks)
    assert not any(s.finished for s in tracker.sinks)
    assert os.listdir(tmp_path) == []


def test_bounds_are_checked() -> None:
    with pytest.raises(UsageError, match="max_open_writers"):
        PartitionedWriter(fmt=make_format("csv"), open_sink=Tracker().open, max_open_writers=0)
    with pytest.raises(UsageError, match="maxRecordsPerFile"):
        PartitionedWriter(fmt=make_format("csv"), open_sink=Tracker().open, max_records_per_file=-1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.sampled_from(["a", "b", "", None, "c/d", "e=f", "ü", "x y", "%"]), min_size=0, max_size=120),
    batch_size=st.integers(1, 40),
    max_open=st.integers(1, 5),
    max_records=st.integers(0, 9),
    spill_buffer=st.integers(1, 400),
)
def test_every_row_lands_once_in_its_partition_in_order(keys, batch_size, max_open, max_records, spill_buffer,  # noqa: ANN001
                                                        tmp_path) -> None:  # noqa: ANN001
    tracker = Tracker()
    w = PartitionedWriter(fmt=make_format("parquet"), open_sink=tracker.open, partition_columns=["k"],
                          max_open_writers=max_open, max_records_per_file=max_records, spill_dir=str(tmp_path),
                          spill_buffer_bytes=spill_buffer)
    for start in range(0, len(keys), batch_size):
        w.write(batch_of(keys[start:start + batch_size], start=start))
    stats = w.close()
    assert tracker.peak_open <= max_open
    expected: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        path = split_batch(batch_of([k]), ["k"])[0][0]
        expected.setdefault(path, []).append(i)
    got = {p: [r["seq"] for r in rows] for p, rows in tracker.rows_by_partition().items()}
    assert got == expected
    assert stats.rows == len(keys)
    if max_records:
        assert all(s.rows <= max_records for s in tracker.sinks)


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(0, 70_000), max_size=3_000), small=st.booleans())
def test_stable_order_sorts_ids_keeping_equal_ones_in_order(ids: list[int], small: bool) -> None:
    """The spill's and the split's reordering: the ids sorted, equal ids in the order they came, whether the ids
    fit the 16-bit radix sort or not."""
    import numpy as np

    values = np.array([i % 300 if small else i for i in ids], dtype=np.int64)
    order = stable_order(values)
    assert sorted(range(len(values)), key=lambda i: (values[i], i)) == order.tolist()
