"""Parquet files assembled from many small batches -- what a task writing interleaved partitions hands each file --
come out byte for byte as pyarrow writes them straight from those batches: the writer's savings (issue 39: a row
group's columns combined into one chunk each where that cannot move a page boundary, pyarrow's output gathered
before it reaches the sink) change the CPU, never the bytes. No server."""

from __future__ import annotations

import decimal
import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpcommit.formats import ParquetFormat
from mpcommit.formats import parquet as parquet_module
from mpcommit.formats.parquet import WRITE_BUFFER_BYTES, TimestampType, dictionary_columns


class Sink(io.RawIOBase):
    """Stands in for the multipart writer: keeps the bytes and counts the write calls."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.writes = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.writes += 1
        self.data += bytes(b)
        return memoryview(b).nbytes

    def tell(self) -> int:
        return len(self.data)


def column(kind: str, rows: int, rng: np.random.Generator) -> pa.Array:
    """``rows`` values of one kind; about half the kinds have few distinct values, so that dictionaries pay."""
    few = rng.integers(0, 5, rows)
    nulls = rng.random(rows) < 0.2
    if kind == "int8":
        return pa.array(few.astype(np.int8))
    if kind == "int32":
        return pa.array(rng.integers(-2**31, 2**31, rows).astype(np.int32), mask=nulls)
    if kind == "int64":
        return pa.array(np.arange(rows, dtype=np.int64) * 7919 + int(rng.integers(1000)))
    if kind == "double":
        return pa.array(rng.random(rows))
    if kind == "few_doubles":
        return pa.array(few / 2.0, mask=nulls)
    if kind == "bool":
        return pa.array(few > 2, mask=nulls)
    if kind == "string":
        return pa.array([f"v{x}" * int(x) for x in few], pa.string(), mask=nulls)
    if kind == "large_string":
        return pa.array([f"{x:x}" for x in rng.integers(0, 2**40, rows)], pa.large_string())
    if kind == "ts_zoned":
        return pa.array(rng.integers(0, 2**40, rows), pa.timestamp("us", tz="UTC"))
    if kind == "ts_ntz":
        return pa.array(few * 1_000_000, pa.timestamp("ns"), mask=nulls)
    if kind == "decimal":
        return pa.array([None if n else decimal.Decimal(int(x) * 125) / 100 for x, n in zip(few, nulls)],
                        pa.decimal128(10, 2))
    if kind == "date":
        return pa.array(few.astype(np.int32), pa.date32())
    if kind == "list":
        sizes = rng.integers(0, 4, rows)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        return pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 3, int(offsets[-1])).astype(np.int8)))
    if kind == "struct":
        return pa.StructArray.from_arrays([pa.array(few.astype(np.int32)), pa.array([str(x) for x in few], pa.string())],
                                          names=["a", "b"])
    if kind == "dictionary":
        return pa.array([f"d{x}" for x in few], pa.string()).dictionary_encode()
    raise AssertionError(kind)


KINDS = ["int8", "int32", "int64", "double", "few_doubles", "bool", "string", "large_string", "ts_zoned", "ts_ntz",
         "decimal", "date", "list", "struct", "dictionary"]


def batches_of(kinds: list[str], sizes: list[int], seed: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    names = [f"c{i}_{k}" for i, k in enumerate(kinds)]
    return [pa.record_batch([column(k, n, rng) for k in kinds], names=names) for n in sizes]


def written(fmt: ParquetFormat, batches: list[pa.RecordBatch]) -> Sink:
    sink = Sink()
    writer = fmt.open(sink, batches[0].schema)
    for b in batches:
        writer.write(b)
    writer.close()
    return sink


def plain_write(fmt: ParquetFormat, batches: list[pa.RecordBatch], groups: list[int]) -> bytes:
    """The file as pyarrow writes it from ``batches`` as they came, straight into a Python sink: each row group
    (``groups``: its rows) a table of its batches, as many chunks as batches, the first one deciding the
    dictionaries -- the writer's file before issue 39's item 3."""
    schema = batches[0].schema
    sink = Sink()
    writer = None
    pending, rows = list(batches), 0
    for group in groups:
        taken = []
        while rows < group:
            taken.append(pending.pop(0))
            rows += taken[-1].num_rows
        assert rows == group, "row groups end where a batch ends"
        rows = 0
        table = pa.Table.from_batches(taken, schema=schema)
        file_schema = fmt.file_schema(schema)
        if not file_schema.equals(schema):
            table = table.cast(file_schema, safe=False)
        if writer is None:
            writer = pq.ParquetWriter(sink, file_schema, compression=fmt._codec, use_dictionary=dictionary_columns(table),
                                      use_deprecated_int96_timestamps=fmt.int96_for(schema), store_schema=False)
        writer.write_table(table, row_group_size=max(1, table.num_rows))
    assert writer is not None
    writer.close()
    return bytes(sink.data)


def row_groups(data: bytes) -> list[int]:
    meta = pq.read_metadata(pa.BufferReader(data))
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=6),
    sizes=st.lists(st.integers(0, 400), min_size=1, max_size=30).filter(lambda s: sum(s) > 0),
    seed=st.integers(0, 2**32 - 1),
    row_group_bytes=st.sampled_from([2_000, 30_000, 16 * 1024 * 1024]),
    compression=st.sampled_from(["snappy", "none", "zstd"]),
    timestamps=st.sampled_from(list(TimestampType)),
)
def test_a_file_of_many_batches_has_the_bytes_of_the_plain_write(kinds: list[str], sizes: list[int], seed: int,
                                                                row_group_bytes: int, compression: str,
                                                                timestamps: TimestampType) -> None:
    batches = batches_of(kinds, sizes, seed)
    fmt = ParquetFormat(compression=compression, row_group_bytes=row_group_bytes, timestamp_type=timestamps)
    data = bytes(written(fmt, batches).data)
    assert data == plain_write(fmt, [b for b in batches if b.num_rows], row_groups(data))
    back = pq.read_table(pa.BufferReader(data))
    assert back.num_rows == sum(sizes)


def test_pieces_are_combined_and_the_bytes_kept_for_a_small_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case issue 39 measured: a 2,700-row file of an id and four doubles in 18 pieces -- combined (else the
    bytes test above would not see the combining at all), and the same bytes as the plain write."""
    asked = []
    real = parquet_module._one_page_per_column

    def spy(table: pa.Table, bound: int) -> bool:
        asked.append((table.column(0).num_chunks, real(table, bound)))
        return asked[-1][1]

    monkeypatch.setattr(parquet_module, "_one_page_per_column", spy)
    batches = batches_of(["int64", "double", "double", "double", "double"], [150] * 18, seed=3)
    fmt = ParquetFormat()
    data = bytes(written(fmt, batches).data)
    assert asked == [(18, True)]
    assert data == plain_write(fmt, batches, [2_700])


def test_pieces_of_a_file_above_a_quarter_page_in_all_are_combined_when_each_column_is_below() -> None:
    """A 6,700-row file of an id and four doubles (a 1,000-file job's, issue 39): 268 KB of Arrow data in all, too
    much for the whole table's bound, 54 KB a column -- a page is one column's, so the pieces are combined, and the
    bytes are the plain write's."""
    batches = batches_of(["int64", "double", "double", "double", "double"], [80] * 83 + [60], seed=4)
    table = pa.Table.from_batches(batches)
    bound = sum(b.get_total_buffer_size() for b in batches)
    assert 4 * bound >= parquet_module._PAGE_MAX_BYTES
    assert parquet_module._one_page_per_column(table, bound)
    fmt = ParquetFormat()
    assert bytes(written(fmt, batches).data) == plain_write(fmt, batches, [table.num_rows])


@pytest.mark.parametrize("kinds,sizes,why", [
    (["int64", "double"], [9_000] * 3, "as many rows as a page may hold"),
    (["string"], [200] * 2, None),
    (["dictionary", "int8"], [100] * 3, "Arrow dictionaries, each chunk its own"),
    (["large_string", "int64"], [4_000] * 4, "Arrow bytes near a page's limit"),
])
def test_pieces_stay_apart_where_combining_could_move_a_page(kinds: list[str], sizes: list[int],
                                                             why: str | None) -> None:
    batches = batches_of(kinds, sizes, seed=1)
    table = pa.Table.from_batches(batches)
    bound = sum(b.get_total_buffer_size() for b in batches)
    assert parquet_module._one_page_per_column(table, bound) is (why is None), why


def test_a_small_file_reaches_its_sink_in_one_write() -> None:
    """pyarrow writes a page header, a page, ... each a call into Python; gathered first, a file below the buffer
    is one write of the sink (a larger one's pages of a MiB go on as they are: never more writes than before)."""
    for batches, one in [(batches_of(["int64", "double", "string"], [300] * 10, seed=2), True),
                         (batches_of(["double"] * 4, [20_000] * 10, seed=2), False)]:
        fmt = ParquetFormat(compression="none")
        sink = written(fmt, batches)
        before = Sink()
        plain = pq.ParquetWriter(before, batches[0].schema, compression="none", store_schema=False)
        plain.write_table(pa.Table.from_batches(batches))
        plain.close()
        assert (sink.writes == 1) is one and (len(sink.data) < WRITE_BUFFER_BYTES) is one
        assert before.writes > 1 and sink.writes <= before.writes


def test_a_file_without_rows_is_written_and_its_sink_left_open() -> None:
    sink = Sink()
    writer = ParquetFormat().open(sink, pa.schema([("a", pa.int64())]))
    writer.close()
    assert not sink.closed
    assert pq.read_table(pa.BufferReader(bytes(sink.data))).num_rows == 0


NUMERIC = {"int8": pa.int8(), "uint16": pa.uint16(), "int32": pa.int32(), "float32": pa.float32(),
           "int64": pa.int64(), "float64": pa.float64(), "date32": pa.date32(), "ts": pa.timestamp("ms"),
           "float16": pa.float16()}


@settings(max_examples=80, deadline=None)
@given(
    columns=st.lists(st.tuples(st.sampled_from(sorted(NUMERIC)), st.integers(1, 5000), st.booleans()),
                     min_size=1, max_size=6),
    sizes=st.lists(st.integers(1, 1500), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_dictionary_judge_decides_as_an_exact_count_of_each_column(
        columns: list[tuple[str, int, bool]], sizes: list[int], seed: int) -> None:
    """Whatever the widths, chunks and cardinalities: a column keeps its dictionary exactly when its distinct values
    (Arrow's count, by bits) make dictionary plus indices smaller than its plain values -- the columns counted
    together, per width, from their buffers in place. Above the exact count's size a column goes by the estimate,
    unless the lower bound on its distinct values already shows that its dictionary cannot pay."""
    import math

    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    rows = sum(sizes)
    arrays = {}
    for i, (kind, cardinality, nulls) in enumerate(columns):
        values = rng.integers(0, cardinality, rows)
        t = NUMERIC[kind]
        if kind == "float16":
            array = pa.array((values / 7).astype(np.float16), t)
        elif pa.types.is_floating(t):
            array = pa.array(values / 7).cast(t)
        elif kind == "date32":
            array = pa.array(values.astype(np.int32), t)
        elif kind == "ts":
            array = pa.array(values, t)
        else:
            array = pa.array(values % (2**7 if kind == "int8" else 2**16), pa.int64()).cast(t)
        if nulls:
            array = pa.array(array.to_pylist()[:-1] + [None], t)
        arrays[f"c{i}_{kind}"] = array
    whole = pa.table(arrays)
    bounds = np.cumsum([0, *sizes])
    table = pa.Table.from_batches([b for s, e in zip(bounds, bounds[1:]) for b in whole.slice(s, e - s).to_batches()])

    def pays(name: str) -> bool:
        column = whole.column(name).slice(0, parquet_module._JUDGED_VALUES)
        values = len(column) - column.null_count
        if values == 0:
            return True
        if column.null_count:
            return parquet_module._dictionary_pays(column)  # the estimate, not under test here
        width = column.type.bit_width // 8
        bits = pa.Array.from_buffers(pa.uint8() if width == 1 else getattr(pa, f"uint{8 * width}")(), len(column),
                                     column.combine_chunks().buffers())
        distinct = pc.count_distinct(bits).as_py()
        exact = distinct * width + values * max(1, math.ceil(math.log2(max(distinct, 2)))) / 8 < values * width
        if len(column) <= parquet_module._EXACT_UP_TO:
            return exact
        bound = parquet_module._distinct_at_least([bits.to_numpy()])[0]
        assert bound <= distinct
        if not parquet_module._pays(values, width, bound):
            assert not exact  # what the bound settles, it settles as the count would
            return False
        return parquet_module._dictionary_pays(column)  # the estimate, not under test here

    chosen = dictionary_columns(table)
    kept = set(table.schema.names) if chosen is True else set(chosen)
    assert kept == {name for name in table.schema.names if pays(name)}


@settings(max_examples=150, deadline=None)
@given(
    width=st.sampled_from([1, 2, 4, 8]),
    rows=st.integers(1, 20_000),
    cardinality=st.integers(1, 40_000),
    layout=st.sampled_from(["random", "runs", "strided", "sorted"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_distinct_bound_never_exceeds_the_count(width: int, rows: int, cardinality: int, layout: str,
                                                     seed: int) -> None:
    """The bound the dictionary judge settles most columns by is a lower bound on the distinct values whatever
    the values and their order: a bound above the count would take a paying dictionary away."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(f"<u{width}")
    top = min(cardinality, 2 ** (8 * width))
    if layout == "random":
        values = rng.integers(0, top, rows, dtype=np.uint64)
    elif layout == "runs":
        values = np.repeat(rng.integers(0, 2**63, top, dtype=np.uint64), -(-rows // top))[:rows]
    elif layout == "strided":
        values = (np.arange(rows, dtype=np.uint64) % top) * np.uint64(rng.integers(1, 2**20))
    else:
        values = np.sort(rng.integers(0, 2**63, top, dtype=np.uint64))[np.arange(rows) % top]
    values = values.astype(dtype)  # the column's bits, wrapped to its width
    other = rng.integers(0, 2**63, rows, dtype=np.uint64).astype(dtype)
    bounds = parquet_module._distinct_at_least([values, other])
    assert bounds[0] <= len(np.unique(values)) and bounds[1] <= len(np.unique(other))
    assert bounds[0] >= 1


@pytest.mark.parametrize("rows", [5_000, 6_700, 27_000, 131_072])
def test_the_distinct_bound_settles_columns_of_ids_and_measurements(rows: int) -> None:
    """What the bound is for: columns of unique ids (in runs, strided, shuffled) and of random doubles or floats
    are shown to have too many distinct values for a dictionary, without a count or an estimate."""
    rng = np.random.default_rng(rows)
    columns = {
        8: [np.arange(rows, dtype=np.uint64), np.arange(rows, dtype=np.uint64) * np.uint64(125) + np.uint64(3),
            rng.permutation(rows).astype(np.uint64), rng.random(rows).view(np.uint64),
            (rng.random(rows) * 1000).round(3).view(np.uint64)],
        4: [np.arange(rows, dtype=np.uint32), rng.random(rows).astype(np.float32).view(np.uint32)],
    }
    for width, same in columns.items():
        for values, bound in zip(same, parquet_module._distinct_at_least(same)):
            distinct = len(np.unique(values))
            assert bound >= 0.85 * distinct, (width, bound, distinct)
            assert not parquet_module._pays(rows, width, bound)
