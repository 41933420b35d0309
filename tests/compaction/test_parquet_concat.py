"""Parquet concatenation by row-group copy with a rewritten footer, and the Thrift compact codec under it.

Sources are written by pyarrow in memory; merged files are read back by pyarrow and compared with the
concatenation of the sources' tables. Page indexes and bloom filters, which pyarrow writes but cannot
read back from Python, are checked by decoding them here and following their offsets into the file.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpcommit.compaction.parquet_concat import (
    FOOTER_TAIL,
    ConcatPlan,
    ParquetConcatError,
    ParquetEncryptedError,
    ParquetFooter,
    ParquetFooterError,
    ParquetSchemaMismatchError,
    assemble_locally,
    concat_footers,
    concat_local,
    parse_footer_length,
    read_footer,
)
from mpcommit.compaction.thrift_compact import (
    CType,
    Field,
    Struct,
    ThriftDecodeError,
    ThriftError,
    ThriftList,
    ThriftMap,
    decode_struct,
    dumps,
    loads,
)
from mpcommit.errors import MpcommitError


# ---------------------------------------------------------------------------------------- helpers
def write(table: pa.Table, **kwargs) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kwargs)
    return buf.getvalue()


def footer_of(data: bytes, name: str = "f") -> ParquetFooter:
    return read_footer(lambda s, e: data[s:e], len(data), name=name)


def raw_footer(data: bytes) -> bytes:
    n = struct.unpack("<I", data[-8:-4])[0]
    return data[-8 - n : -8]


def replace_raw_footer(data: bytes, new: bytes) -> bytes:
    """The same file with its FileMetaData bytes replaced by ``new``."""
    n = struct.unpack("<I", data[-8:-4])[0]
    return data[: -8 - n] + new + struct.pack("<I", len(new)) + b"PAR1"


def with_footer(data: bytes, mutate) -> bytes:
    """The same file with its FileMetaData decoded, passed to ``mutate``, and re-encoded."""
    md = loads(raw_footer(data))
    mutate(md)
    return replace_raw_footer(data, dumps(md))


def read(data: bytes, **kwargs) -> pa.Table:
    return pq.read_table(io.BytesIO(data), **kwargs)


def make_table(start: int, n: int) -> pa.Table:
    """A table with nulls, strings, doubles, timestamps, a list and a struct column."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"name-{i % 13}" for i in ids], pa.string()),
            "score": pa.array([None if i % 5 == 0 else i * 0.5 for i in ids], pa.float64()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "tags": pa.array(
                [None if i % 11 == 0 else [f"t{j}" for j in range(i % 4)] for i in ids], pa.list_(pa.string())
            ),
            "pt": pa.array([{"x": i % 3, "y": None if i % 2 else str(i)} for i in ids],
                           pa.struct([("x", pa.int32()), ("y", pa.string())])),
            "flag": pa.array([i % 3 == 0 for i in ids], pa.bool_()),
        }
    )


# Options that vary per source: dictionary on/off, compression, statistics, data page version,
# page index, bloom filters, checksums; the schema stays the same.
SOURCE_OPTIONS = [
    dict(row_group_size=300, use_dictionary=True, compression="snappy", write_page_index=True,
         max_rows_per_page=64, bloom_filter_options={"id": {"ndv": 1000, "fpp": 0.05}, "name": {"ndv": 50}},
         write_page_checksum=True),
    dict(row_group_size=250, use_dictionary=False, compression="zstd", write_statistics=False,
         write_page_index=True, data_page_version="2.0", max_rows_per_page=100, write_page_checksum=True),
    dict(row_group_size=1000, compression={"id": "gzip", "name": "none", "score": "zstd", "ts": "snappy",
         "tags.list.element": "gzip", "pt.x": "none", "pt.y": "zstd", "flag": "snappy"}),
    dict(row_group_size=120, use_dictionary=["name"], compression="none", write_page_index=True,
         max_rows_per_page=50, bloom_filter_options={"id": True}),
]
SIZES = [700, 600, 450, 260]


def empty_file(schema: pa.Schema) -> bytes:
    """A valid file with zero row groups."""
    buf = io.BytesIO()
    pq.ParquetWriter(buf, schema).close()
    return buf.getvalue()


@pytest.fixture(scope="module")
def sources():
    tables, datas = [], []
    start = 0
    for n, opts in zip(SIZES, SOURCE_OPTIONS):
        t = make_table(start, n)
        start += n
        tables.append(t)
        datas.append(write(t, **opts))
    # An empty file in the middle: contributes no bytes and no row groups.
    tables.insert(2, tables[0].schema.empty_table())
    datas.insert(2, empty_file(tables[0].schema))
    return tables, datas


@pytest.fixture(scope="module")
def merged(sources):
    tables, datas = sources
    footers = [footer_of(d, f"part-{i}.parquet") for i, d in enumerate(datas)]
    plan = concat_footers(footers)
    return plan, footers, assemble_locally(plan, datas)


def chunk_map(footers):
    """(source index, source row group index) for each row group of the merged file."""
    return [(i, r) for i, f in enumerate(footers) for r in range(f.num_row_groups)]


def check_page_indexes(merged_bytes: bytes, footers, datas) -> int:
    """Follow every page-index and bloom-filter reference of the merged file; compare with the sources.

    Returns the number of data pages checked through OffsetIndexes.
    """
    mf = footer_of(merged_bytes, "merged")
    pages = 0
    for (i, r), mrg in zip(chunk_map(footers), mf.row_groups):
        srg = footers[i].row_groups[r]
        for mcc, scc in zip(mrg.get(1).items, srg.get(1).items):
            mcmd, scmd = mcc.get(3), scc.get(3)
            delta = mcmd.get(9) - scmd.get(9)  # data_page_offset moved by the source's shift
            # ColumnIndex: copied unchanged (holds no offsets).
            assert (mcc.get(6) is None) == (scc.get(6) is None)
            if scc.get(6) is not None:
                assert mcc.get(6) == scc.get(6) + delta and mcc.get(7) == scc.get(7)
                n = scc.get(7)
                assert merged_bytes[mcc.get(6) : mcc.get(6) + n] == datas[i][scc.get(6) : scc.get(6) + n]
            # Bloom filter: copied unchanged.
            assert (mcmd.get(14) is None) == (scmd.get(14) is None)
            if scmd.get(14) is not None:
                assert mcmd.get(14) == scmd.get(14) + delta
                n = scmd.get(15)
                assert merged_bytes[mcmd.get(14) : mcmd.get(14) + n] == datas[i][scmd.get(14) : scmd.get(14) + n]
            # OffsetIndex: every page location points at a data page header in the merged file.
            assert (mcc.get(4) is None) == (scc.get(4) is None)
            if scc.get(4) is None:
                continue
            m_oi = loads(merged_bytes[mcc.get(4) : mcc.get(4) + mcc.get(5)])
            s_oi = loads(datas[i][scc.get(4) : scc.get(4) + scc.get(5)])
            m_locs, s_locs = m_oi.get(1).items, s_oi.get(1).items
            assert len(m_locs) == len(s_locs) > 0
            assert m_locs[0].get(1) == mcmd.get(9)  # the first data page
            for ml, sl in zip(m_locs, s_locs):
                assert ml.get(1) == sl.get(1) + delta
                assert ml.get(2) == sl.get(2) and ml.get(3) == sl.get(3)
                header, end = decode_struct(merged_bytes, ml.get(1))
                assert header.get(1) in (0, 3)  # DATA_PAGE or DATA_PAGE_V2
                assert end - ml.get(1) + header.get(3) == ml.get(2)  # header + compressed page
                size = ml.get(2)
                assert merged_bytes[ml.get(1) : ml.get(1) + size] == datas[i][sl.get(1) : sl.get(1) + size]
                pages += 1
            assert m_oi.get(2) == s_oi.get(2)  # unencoded byte array sizes, if any
    return pages


# ---------------------------------------------------------------------------------------- thrift codec
def test_thrift_round_trip_is_byte_identical_on_pyarrow_footers_and_page_indexes(sources, merged):
    _, datas = sources
    plan, _, merged_bytes = merged
    for data in [*datas, merged_bytes]:
        raw = raw_footer(data)
        assert dumps(loads(raw)) == raw
        f = footer_of(data)
        for rg in f.row_groups:
            for cc in rg.get(1).items:
                for off_fid, len_fid in ((4, 5), (6, 7)):  # offset index, column index
                    if cc.get(off_fid) is not None:
                        blob = data[cc.get(off_fid) : cc.get(off_fid) + cc.get(len_fid)]
                        assert dumps(loads(blob)) == blob
    assert dumps(plan.metadata) == raw_footer(merged_bytes)


def test_thrift_preserves_unusual_layouts():
    # Long-form field header where a short one would do, negative and large ids, a long-form list
    # header for a short list, a bool list, a set, a map, a double, a uuid, an empty struct.
    s = Struct([
        Field(-3, CType.I32, -7),
        Field(1, CType.I64, 1 << 62, long_header=True),
        Field(2, CType.BOOL, True),
        Field(3, CType.BOOL, False, long_header=True),
        Field(40, CType.LIST, ThriftList(CType.BOOL, [True, False, True])),
        Field(41, CType.LIST, ThriftList(CType.I16, [1, -2, 3], long_header=True)),
        Field(42, CType.SET, ThriftList(CType.BINARY, [b"a", b""], is_set=True)),
        Field(43, CType.MAP, ThriftMap(CType.BINARY, CType.STRUCT, [(b"k", Struct([Field(1, CType.DOUBLE, 1.5)]))])),
        Field(44, CType.MAP, ThriftMap(CType.BINARY, CType.BINARY, [])),
        Field(45, CType.UUID, bytes(range(16))),
        Field(46, CType.BYTE, -128),
        Field(47, CType.STRUCT, Struct()),
        Field(48, CType.LIST, ThriftList(CType.I32, list(range(20)))),
    ])
    raw = dumps(s)
    back = loads(raw)
    assert back == s
    assert dumps(back) == raw
    assert back.field(1).long_header and back.field(3).long_header and back.field(41).value.long_header
    # Booleans in lists written with 0 for false (allowed by the spec) still decode.
    assert loads(bytes([0x19, 0x21, 0x01, 0x00, 0x00])).get(1).items == [True, False]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "end of data"),
        (b"\x15", "end of data"),  # i32 field without its value
        (b"\x1e\x00", "unknown field type"),
        (b"\x19\xf5\xff\xff\xff\x0f\x00", "exceeds"),  # a list claiming 4 billion elements
        (b"\x16" + b"\xff" * 11, "varint"),
        (b"\x15\x80\x80\x80\x80\x20\x00", "out of range"),  # i32 value beyond 32 bits
        (b"\x1c" * 100 + b"\x00" * 101, "nested deeper"),
        (b"\x15\x02\x00\x00", "trailing"),
    ],
)
def test_thrift_rejects_malformed_input(raw, message):
    with pytest.raises(ThriftDecodeError, match=message):
        loads(raw)


def test_thrift_encoder_checks_values():
    with pytest.raises(ThriftError, match="out of range"):
        dumps(Struct([Field(1, CType.I16, 1 << 15)]))
    with pytest.raises(ThriftError, match="must be bytes"):
        dumps(Struct([Field(1, CType.BINARY, "text")]))
    assert issubclass(ThriftDecodeError, MpcommitError)


_SCALARS = {
    CType.BOOL: st.booleans(),
    CType.BYTE: st.integers(-128, 127),
    CType.I16: st.integers(-(1 << 15), (1 << 15) - 1),
    CType.I32: st.integers(-(1 << 31), (1 << 31) - 1),
    CType.I64: st.integers(-(1 << 63), (1 << 63) - 1),
    CType.DOUBLE: st.floats(allow_nan=False),
    CType.BINARY: st.binary(max_size=20),
    CType.UUID: st.binary(min_size=16, max_size=16),
}
_CONTAINERS = [CType.LIST, CType.SET, CType.MAP, CType.STRUCT]


@st.composite
def thrift_values(draw, ctype, depth):
    if ctype in _SCALARS:
        return draw(_SCALARS[ctype])
    types = list(_SCALARS) + (_CONTAINERS if depth > 0 else [])
    if ctype in (CType.LIST, CType.SET):
        elem = draw(st.sampled_from(types))
        items = draw(st.lists(thrift_values(elem, depth - 1), max_size=17))
        return ThriftList(elem, items, is_set=ctype == CType.SET, long_header=draw(st.booleans()))
    if ctype == CType.MAP:
        kt, vt = draw(st.sampled_from(types)), draw(st.sampled_from(types))
        pairs = st.tuples(thrift_values(kt, depth - 1), thrift_values(vt, depth - 1))
        items = draw(st.lists(pairs, min_size=1, max_size=4))
        return ThriftMap(kt, vt, items)
    return draw(thrift_structs(depth - 1))


@st.composite
def thrift_structs(draw, depth=3):
    ids = draw(st.lists(st.integers(-40, 200), unique=True, max_size=6))
    types = list(_SCALARS) + (_CONTAINERS if depth > 0 else [])
    fields = []
    for fid in ids:
        ctype = draw(st.sampled_from(types))
        fields.append(Field(fid, ctype, draw(thrift_values(ctype, depth)), long_header=draw(st.booleans())))
    return Struct(fields)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(thrift_structs(depth=2))
def test_thrift_round_trip_property(s):
    raw = dumps(s)
    back = loads(raw)
    assert back == s
    assert dumps(back) == raw


# ---------------------------------------------------------------------------------------- merging
def test_merged_file_reads_back_as_the_concatenation(sources, merged):
    tables, datas = sources
    plan, footers, merged_bytes = merged
    expected = pa.concat_tables(tables)
    assert read(merged_bytes).equals(expected)
    # Page checksums (written for two sources) still verify: page bytes are unchanged.
    assert read(merged_bytes, page_checksum_verification=True).equals(expected)

    md = pq.ParquetFile(io.BytesIO(merged_bytes)).metadata
    assert md.num_rows == plan.num_rows == sum(SIZES)
    assert md.num_row_groups == plan.num_row_groups == sum(f.num_row_groups for f in footers)
    assert len(merged_bytes) == plan.total_size
    first_md = pq.ParquetFile(io.BytesIO(datas[0])).metadata
    assert md.metadata == first_md.metadata  # key/value metadata, ARROW:schema included
    assert md.created_by == first_md.created_by
    assert md.schema.equals(first_md.schema)

    pf = pq.ParquetFile(io.BytesIO(merged_bytes))
    for k, (i, r) in enumerate(chunk_map(footers)):
        src = pq.ParquetFile(io.BytesIO(datas[i]))
        assert pf.read_row_group(k).equals(src.read_row_group(r))
        mrg, srg = md.row_group(k), src.metadata.row_group(r)
        for attr in ("num_rows", "total_byte_size", "sorting_columns"):
            assert getattr(mrg, attr) == getattr(srg, attr), attr
        delta = plan.pieces[[p.source_index for p in plan.pieces].index(i)].out_offset - 4
        for j in range(mrg.num_columns):
            mc, sc = mrg.column(j), srg.column(j)
            for attr in ("compression", "encodings", "num_values", "total_compressed_size", "total_uncompressed_size",
                         "has_offset_index", "has_column_index", "has_dictionary_page", "bloom_filter_length",
                         "path_in_schema", "file_offset"):
                assert getattr(mc, attr) == getattr(sc, attr), attr
            assert mc.is_stats_set == sc.is_stats_set
            if sc.is_stats_set:
                assert mc.statistics.to_dict() == sc.statistics.to_dict()
            assert mc.data_page_offset == sc.data_page_offset + delta
            if sc.has_dictionary_page:
                assert mc.dictionary_page_offset == sc.dictionary_page_offset + delta
            if sc.bloom_filter_offset is not None:
                assert mc.bloom_filter_offset == sc.bloom_filter_offset + delta
            start = mc.dictionary_page_offset if mc.has_dictionary_page else mc.data_page_offset
            s_start = sc.dictionary_page_offset if sc.has_dictionary_page else sc.data_page_offset
            size = mc.total_compressed_size
            assert merged_bytes[start : start + size] == datas[i][s_start : s_start + size]


def test_plan_layout_and_ordinals(sources, merged):
    _, datas = sources
    plan, footers, merged_bytes = merged
    assert isinstance(plan, ConcatPlan)
    assert plan.head == b"PAR1"
    assert plan.tail.endswith(b"PAR1")
    # One piece per non-empty source, [4, footer_start), contiguous from offset 4.
    assert [p.source_index for p in plan.pieces] == [0, 1, 3, 4]
    pos = 4
    for p in plan.pieces:
        assert (p.start, p.end) == footers[p.source_index].data_range
        assert p.out_offset == pos
        pos += p.length
    assert plan.data_end == pos
    mf = footer_of(merged_bytes, "merged")
    assert mf.footer_len == parse_footer_length(merged_bytes[-FOOTER_TAIL:])
    assert [rg.get(7) for rg in mf.row_groups] == list(range(plan.num_row_groups))
    assert mf.num_rows == plan.num_rows
    # Row group file offsets were shifted too.
    for (i, r), rg in zip(chunk_map(footers), mf.row_groups):
        src_rg = footers[i].row_groups[r]
        if src_rg.get(5) is not None:
            first_page_delta = rg.get(1).items[0].get(3).get(9) - src_rg.get(1).items[0].get(3).get(9)
            assert rg.get(5) - src_rg.get(5) == first_page_delta


def test_page_indexes_and_bloom_filters_stay_valid(sources, merged):
    _, datas = sources
    _, footers, merged_bytes = merged
    assert check_page_indexes(merged_bytes, footers, datas) > 50


def test_dropping_page_indexes(sources):
    tables, datas = sources
    footers = [ParquetFooter.parse(d, file_size=len(d), name=f"p{i}") for i, d in enumerate(datas)]
    # Without the OffsetIndex bytes, moved sources cannot keep a valid page index ...
    with pytest.raises(ParquetConcatError, match="page_index='drop'"):
        concat_footers(footers)
    # ... unless page indexes are dropped.
    plan = concat_footers(footers, page_index="drop")
    merged_bytes = assemble_locally(plan, datas)
    assert read(merged_bytes).equals(pa.concat_tables(tables))
    md = pq.ParquetFile(io.BytesIO(merged_bytes)).metadata
    assert not any(md.row_group(k).column(j).has_offset_index or md.row_group(k).column(j).has_column_index
                   for k in range(md.num_row_groups) for j in range(md.num_columns))


def test_copy_leading_magic_gives_the_same_bytes(sources, merged):
    _, datas = sources
    plan, footers, merged_bytes = merged
    plan2 = concat_footers(footers, copy_leading_magic=True)
    assert plan2.head == b"" and plan2.pieces[0].start == 0 and plan2.pieces[0].out_offset == 0
    assert assemble_locally(plan2, datas) == merged_bytes


def test_read_footer_fetches_only_the_tail(sources):
    _, datas = sources
    data = datas[0]
    calls = []

    def read_range(s, e):
        calls.append((s, e))
        return data[s:e]

    assert len(data) < 64 * 1024
    full = read_footer(read_range, len(data), name="a")
    assert calls == [(0, len(data))]  # footer and offset indexes come with the first read
    calls.clear()
    small = read_footer(read_range, len(data), name="a", initial_read=16)
    # tail, rest of the footer, then the offset indexes (outside the 16 bytes first read)
    assert len(calls) == 3 and all(e <= len(data) for _, e in calls)
    assert calls[0] == (len(data) - 16, len(data))
    assert small.metadata == full.metadata and small.offset_index_bytes == full.offset_index_bytes
    lo, hi = full.offset_index_span
    assert full.offset_index_bytes == data[lo:hi]
    # A reader returning short data is reported, not silently used.
    with pytest.raises(ParquetFooterError, match="returned"):
        read_footer(lambda s, e: data[s : e - 1], len(data), name="short")


def test_concat_local_and_single_source(sources):
    tables, datas = sources
    assert read(concat_local(datas[:1])).equals(tables[0])
    out = concat_local([datas[1], datas[0]], names=["b", "a"])
    assert read(out).equals(pa.concat_tables([tables[1], tables[0]]))
    # Merging a merged file again works too.
    twice = concat_local([out, datas[3]])
    assert read(twice).equals(pa.concat_tables([tables[1], tables[0], tables[3]]))
    with pytest.raises(ParquetConcatError, match="nothing to concatenate"):
        concat_footers([])


def test_empty_row_groups_between_sources():
    # pyarrow writes an empty table as one row group whose chunks have data_page_offset 0 (no data
    # page) and, with dictionary encoding, a dictionary page: 0 must stay 0, the rest must move.
    t = pa.table({"i": pa.array(range(10), pa.int64()), "s": pa.array([str(x) for x in range(10)])})
    datas = [write(t, write_page_index=True), write(t.slice(0, 0), write_page_index=True),
             write(t, use_dictionary=False, write_page_index=True)]
    merged_bytes = concat_local(datas)
    assert read(merged_bytes).equals(pa.concat_tables([t, t]))
    md = pq.ParquetFile(io.BytesIO(merged_bytes)).metadata
    assert md.num_row_groups == 3 and md.row_group(1).num_rows == 0
    assert md.row_group(1).column(0).data_page_offset == 0
    source_dict = pq.ParquetFile(io.BytesIO(datas[1])).metadata.row_group(0).column(0).dictionary_page_offset
    assert md.row_group(1).column(0).dictionary_page_offset > source_dict


def test_assemble_locally_checks_source_sizes(sources, merged):
    _, datas = sources
    plan, _, _ = merged
    changed = list(datas)
    changed[1] = changed[1] + b"x"
    with pytest.raises(ParquetConcatError, match="part-1.parquet"):
        assemble_locally(plan, changed)


# ---------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("other", "message"),
    [
        (pa.table({"a": pa.array([1, 2], pa.int32()), "s": ["x", "y"]}), r"'a'.*type"),
        (pa.table({"a": pa.array([1, 2], pa.int64()), "t": ["x", "y"]}), r"'s'.*name 't' instead of 's'"),
        (pa.table({"a": pa.array([1, 2], pa.int64()), "s": pa.array(["x", "y"], pa.large_string())}), None),
        (pa.table({"a": pa.array([1, 2], pa.int64())}), "schema elements"),
        (pa.Table.from_arrays([pa.array([1, 2], pa.int64()), pa.array(["x", "y"])],
                              schema=pa.schema([pa.field("a", pa.int64(), nullable=False), ("s", pa.string())])),
         "repetition_type"),
    ],
)
def test_mixed_schemas_are_refused(other, message):
    base = write(pa.table({"a": pa.array([1, 2], pa.int64()), "s": ["x", "y"]}))
    odd = write(other)
    footers = [footer_of(base, "good.parquet"), footer_of(odd, "odd.parquet")]
    if message is None:
        # large_string and string are the same Parquet schema: only ARROW:schema differs, and the
        # first file's wins. The data still reads back.
        assert read(concat_local([base, odd])).num_rows == 4
        return
    with pytest.raises(ParquetSchemaMismatchError, match="odd.parquet.*good.parquet") as exc:
        concat_footers(footers)
    assert exc.match(message)
    assert isinstance(exc.value, MpcommitError)


def test_different_column_orders_are_refused():
    t = pa.table({"a": [1, 2]})
    base = write(t)
    no_orders = with_footer(base, lambda md: md.remove(7))
    with pytest.raises(ParquetSchemaMismatchError, match="column orders"):
        concat_footers([footer_of(base, "a"), footer_of(no_orders, "b")])


def _encrypted(plaintext_footer: bool) -> bytes:
    pe = pytest.importorskip("pyarrow.parquet.encryption")

    class Kms(pe.KmsClient):
        def __init__(self, config):
            pe.KmsClient.__init__(self)

        def wrap_key(self, key_bytes, master_key_identifier):
            return base64.b64encode(key_bytes)

        def unwrap_key(self, wrapped_key, master_key_identifier):
            return base64.b64decode(wrapped_key)

    config = pe.EncryptionConfiguration(footer_key="f", column_keys={"c": ["a"]}, plaintext_footer=plaintext_footer)
    props = pe.CryptoFactory(Kms).file_encryption_properties(pe.KmsConnectionConfig(), config)
    return write(pa.table({"a": [1, 2, 3]}), encryption_properties=props)


@pytest.mark.parametrize("plaintext_footer", [False, True])
def test_encrypted_files_are_refused(plaintext_footer):
    data = _encrypted(plaintext_footer)
    with pytest.raises(ParquetEncryptedError, match="enc.parquet.*encrypted"):
        footer_of(data, "enc.parquet")


def _bad_offset(md: Struct) -> None:
    cmd = md.get(4).items[0].get(1).items[0].get(3)
    cmd.set(9, CType.I64, 10**9)


def _bad_size(md: Struct) -> None:
    cmd = md.get(4).items[0].get(1).items[1].get(3)
    cmd.set(7, CType.I64, 10**6)


@pytest.mark.parametrize(
    ("corrupt", "error", "message"),
    [
        (lambda d: b"this is certainly not a parquet file", ParquetFooterError, "not a Parquet file"),
        (lambda d: b"PAR1PAR1", ParquetFooterError, "too small"),
        (lambda d: d[:-4] + b"PARE", ParquetEncryptedError, "PARE"),
        (lambda d: d[:-8] + struct.pack("<I", len(d)) + b"PAR1", ParquetFooterError, "does not fit"),
        (lambda d: replace_raw_footer(d, b"\xff" * len(raw_footer(d))), ParquetFooterError, "unreadable"),
        (lambda d: replace_raw_footer(d, raw_footer(d) + b"\x00"), ParquetFooterError, "unexpected bytes"),
        (lambda d: b"XXXX" + d[4:], ParquetFooterError, "starts with"),
        (lambda d: with_footer(d, _bad_offset), ParquetFooterError, "outside its column chunk"),
        (lambda d: with_footer(d, _bad_size), ParquetFooterError, "outside the data range"),
        (lambda d: with_footer(d, lambda md: md.get(4).items[0].get(1).items[0].set(1, CType.BINARY, b"x.parquet")),
         ParquetConcatError, "another file"),
        (lambda d: with_footer(d, lambda md: md.remove(2)), ParquetFooterError, "lacks schema"),
    ],
)
def test_corrupt_or_unsupported_footers_are_refused(corrupt, error, message):
    data = corrupt(write(pa.table({"a": [1, 2, 3], "s": ["x", None, "z"]}), write_page_index=True))
    with pytest.raises(error, match=message) as exc:
        footer_of(data, "bad.parquet")
    assert "bad.parquet" in str(exc.value)
    assert isinstance(exc.value, ParquetConcatError)


def test_footer_parse_needs_the_whole_footer():
    data = write(pa.table({"a": [1, 2, 3]}))
    with pytest.raises(ParquetFooterError, match="need the last"):
        ParquetFooter.parse(data[-20:], file_size=len(data), name="x")
    f = ParquetFooter.parse(data[-(len(raw_footer(data)) + 8) :], file_size=len(data), name="x")
    assert f.num_rows == 3 and f.data_range == (4, len(data) - 8 - len(raw_footer(data)))


# ---------------------------------------------------------------------------------------- property
@st.composite
def split_tables(draw):
    n = draw(st.integers(0, 60))
    ints = draw(st.lists(st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40)), min_size=n, max_size=n))
    strs = draw(st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=n, max_size=n))
    table = pa.table({"i": pa.array(ints, pa.int64()), "s": pa.array(strs, pa.string())})
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    bounds = [0, *cuts, n]
    parts = [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]
    opts = [
        dict(
            row_group_size=draw(st.integers(1, 25)),
            use_dictionary=draw(st.booleans()),
            write_page_index=draw(st.booleans()),
            compression=draw(st.sampled_from(["none", "snappy", "zstd"])),
            max_rows_per_page=draw(st.integers(1, 10)),
            write_statistics=draw(st.booleans()),
        )
        for _ in parts
    ]
    return table, parts, opts


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_tables())
def test_concat_property(case):
    table, parts, opts = case
    datas = [write(p, **o) for p, o in zip(parts, opts)]
    footers = [footer_of(d, f"p{i}") for i, d in enumerate(datas)]
    plan = concat_footers(footers)
    merged_bytes = assemble_locally(plan, datas)
    assert read(merged_bytes).equals(table)
    assert pq.ParquetFile(io.BytesIO(merged_bytes)).metadata.num_row_groups == sum(f.num_row_groups for f in footers)
    check_page_indexes(merged_bytes, footers, datas)
