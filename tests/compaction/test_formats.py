"""Per-format merge rules, run through the real planner and executor against an in-memory store that
enforces S3's multipart rules (tests/compaction/fakes.py). The same merges run against real servers in
test_standalone.py."""

from __future__ import annotations

import base64
import bz2
import csv
import gzip
import io
import json
import lzma
import random
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpcommit.compaction.assemblers import LinesSpec
from mpcommit.compaction.errors import (
    MergePlanError,
    MixedSchemaError,
    SourceChangedError,
    UnreadableSourceError,
    UnsupportedFormatError,
)
from mpcommit.compaction.executor import MergeTask, run_merge
from mpcommit.compaction.kinds import Compression, FileKind, Format, detect_kind
from mpcommit.compaction.lines import LineJoiner, first_record_end
from mpcommit.compaction.merge_plan import prepare
from mpcommit.compaction.parts import Range, SourceObject, Transform, plan_parts
from mpcommit.sizing import MIN_PART_SIZE, MiB
from mpcommit.pool import SerialExecutor

from .fakes import FakeStore, etag_of

BIG = MIN_PART_SIZE + 12345  # just over the copy threshold


def lines_of(prefix: str, size: int, *, seed: int = 0) -> bytes:
    """JSON lines of about ``size`` bytes (random padding, so that compression does not shrink them much)."""
    rnd = random.Random(seed)
    out = bytearray()
    i = 0
    while len(out) < size:
        pad = base64.b64encode(rnd.getrandbits(576).to_bytes(72, "big")).decode()
        out += json.dumps({"id": f"{prefix}-{i}", "pad": pad}).encode() + b"\n"
        i += 1
    return bytes(out)


def objects(store: FakeStore, keys: list[str]) -> list[SourceObject]:
    return [SourceObject(k, etag_of(store.objects[k]), len(store.objects[k])) for k in keys]


def merge(store: FakeStore, keys: list[str], kind: FileKind, out: str = "t/out") -> tuple[bytes, object]:
    task = prepare(store, "b", objects(store, keys), kind, key=out)  # type: ignore[arg-type]
    pending = run_merge(store, "b", task, pool=SerialExecutor())  # type: ignore[arg-type]
    return store.complete(pending), pending


def json_ids(data: bytes) -> list[str]:
    return sorted(json.loads(line)["id"] for line in data.splitlines() if line.strip())


# ------------------------------------------------------------------ detection
@pytest.mark.parametrize(
    ("name", "forced", "expected"),
    [
        ("part-00000-x.c000.snappy.parquet", None, (Format.PARQUET, Compression.NONE, "snappy.parquet")),
        ("part-00000-uuid-c000.parquet", None, (Format.PARQUET, Compression.NONE, "parquet")),
        ("a.json", None, (Format.JSON, Compression.NONE, "json")),
        ("a.c000.json.gz", None, (Format.JSON, Compression.GZIP, "json.gz")),
        ("a.jsonl.zst", None, (Format.JSON, Compression.ZSTD, "jsonl.zst")),
        ("a.txt.bz2", None, (Format.TEXT, Compression.BZIP2, "txt.bz2")),
        ("a.csv.deflate", None, (Format.CSV, Compression.DEFLATE, "csv.deflate")),
        ("a.csv.snappy", None, (Format.CSV, Compression.SNAPPY, "csv.snappy")),
        ("data", "json", (Format.JSON, Compression.NONE, "json")),
        ("data.gz", "text", (Format.TEXT, Compression.GZIP, "txt.gz")),
    ],
)
def test_detect_kind(name: str, forced: str | None, expected: tuple) -> None:
    kind = detect_kind(name, forced)
    assert kind is not None and (kind.format, kind.compression, kind.ext) == expected


def test_detect_kind_unknown_and_csv_header() -> None:
    assert detect_kind("README") is None and detect_kind("x.parquet.gz") is None and detect_kind("a.bin") is None
    assert detect_kind("a.csv").header is None  # cannot tell from the name
    assert detect_kind("a.csv", "csv").header is False
    assert detect_kind("a.csv", "csv-header").header is True
    assert detect_kind("a.csv", "csv-header").group != detect_kind("a.csv", "csv").group
    with pytest.raises(Exception, match="unknown format"):
        detect_kind("a", "avro")


def test_first_record_end_honours_quotes() -> None:
    assert first_record_end(b'a,b\n1,2\n', final=False) == 4
    assert first_record_end(b'"a\nb",c\r\n1\n', final=False) == 9
    assert first_record_end(b'"a\nb', final=False) is None
    assert first_record_end(b"a,b", final=True) == 3


def test_line_joiner() -> None:
    j = LineJoiner(b"")  # keep the first header
    out = b""
    for name, chunks in (("e", [b""]), ("a", [b"h1,h2\n1,", b"2"]), ("b", [b"h1,h2\r\n3,4\n"]), ("c", [b"h1,h2"])):
        j.start(name)
        for i, c in enumerate(chunks):
            out += j.data(c, final=i == len(chunks) - 1)
        out += j.end()
    assert out == b"h1,h2\n1,2\n3,4\n"
    j = LineJoiner(b"h1,h2\n")
    j.start("x")
    with pytest.raises(MixedSchemaError, match="differs"):
        j.data(b"h1,h3\n5,6\n", final=True)


# ------------------------------------------------------------------ JSON Lines and text
def test_json_lines_mixed_sizes_copied_and_fetched() -> None:
    store = FakeStore()
    big1 = lines_of("b1", BIG, seed=1)
    big2 = lines_of("b2", BIG + 7, seed=2).rstrip(b"\n")  # a copied source lacking its final newline
    small1 = lines_of("s1", 3000, seed=3).rstrip(b"\n")  # a fetched one lacking it
    small2 = lines_of("s2", MIN_PART_SIZE, seed=4)[: MIN_PART_SIZE - 1]
    small2 = small2[: small2.rindex(b"\n") + 1]  # whole lines, just under the copy threshold: fetched
    keys = {"t/a.json": small1, "t/b.json": big1, "t/c.json": b"", "t/d.json": big2, "t/e.json": small2}
    for k, v in keys.items():
        store.put(k, v)
    out, pending = merge(store, list(keys), FileKind(Format.JSON, ext="json"))
    assert json_ids(out) == sorted(json_ids(big1) + json_ids(big2) + json_ids(small1) + json_ids(small2))
    assert out.endswith(b"\n") and b"\n\n" not in out
    # Copied server-side: both big sources whole. Downloaded: the small ones, and one byte per big one
    # (is its last byte a newline?).
    assert store.copied == len(big1) + len(big2)
    assert store.downloaded == len(small1) + len(small2) + 2
    assert store.counts["upload_part_copy"] == 2


def test_text_lines_all_small_one_part() -> None:
    store = FakeStore()
    data = {f"t/p{i}.txt": f"line {i}a\nline {i}b".encode() for i in range(5)}
    for k, v in data.items():
        store.put(k, v)
    out, pending = merge(store, sorted(data), FileKind(Format.TEXT, ext="txt"))
    assert out.decode().splitlines() == [f"line {i}{s}" for i in range(5) for s in "ab"]
    assert len(pending.parts) == 1 and store.counts["upload_part_copy"] == 0


# ------------------------------------------------------------------ CSV
def csv_of(header: str, prefix: str, size: int) -> bytes:
    rows = [header]
    total = len(header) + 1
    n = 0
    while total < size:
        rows.append(f'{prefix}-{n},"quoted, with comma",{n * 7}')
        total += len(rows[-1]) + 1
        n += 1
    return ("\n".join(rows) + "\n").encode()


def csv_rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode())))


def test_csv_with_header_one_header_and_every_row() -> None:
    store = FakeStore()
    header = "id,text,n"
    parts = {
        "t/1.csv": csv_of(header, "s1", 500),
        "t/2.csv": csv_of(header, "b1", BIG),
        "t/3.csv": csv_of(header, "s2", 800).rstrip(b"\n"),
        "t/4.csv": csv_of(header, "b2", BIG + 100).rstrip(b"\n"),
        "t/5.csv": (header + "\n").encode(),  # a header and no rows
    }
    for k, v in parts.items():
        store.put(k, v)
    out, _ = merge(store, sorted(parts), FileKind(Format.CSV, ext="csv", header=True))
    rows = csv_rows(out)
    assert rows[0] == header.split(",") and rows.count(header.split(",")) == 1
    expected = [r for v in parts.values() for r in csv_rows(v)[1:]]
    assert sorted(map(tuple, rows[1:])) == sorted(map(tuple, expected))
    big = len(parts["t/2.csv"]) + len(parts["t/4.csv"])
    header_len = len(header) + 1
    assert store.copied == big - header_len  # one of the two big ones is copied without its header
    # fetched: the small ones whole; of each big one its head (4 KiB) and its last byte
    assert store.downloaded == len(parts["t/1.csv"]) + len(parts["t/3.csv"]) + len(parts["t/5.csv"]) + 2 * (4096 + 1)


def test_csv_header_mismatch_skips_the_bin_and_aborts() -> None:
    store = FakeStore()
    store.put("t/1.csv", csv_of("id,text,n", "a", BIG))
    store.put("t/2.csv", csv_of("id,text,m", "b", 300))
    with pytest.raises(MixedSchemaError, match="differs"):
        merge(store, ["t/1.csv", "t/2.csv"], FileKind(Format.CSV, ext="csv", header=True))
    assert store.uploads == {} and len(store.aborted) == 1
    store.put("t/2.csv", csv_of("id,text,m", "b", BIG))  # both big: found while planning, nothing uploaded
    with pytest.raises(MixedSchemaError):
        merge(store, ["t/1.csv", "t/2.csv"], FileKind(Format.CSV, ext="csv", header=True))
    assert store.counts["create_multipart_upload"] == 1


def test_csv_header_unknown_refuses_to_guess() -> None:
    store = FakeStore()
    store.put("t/1.csv", b"a,b\n1,2\n")
    store.put("t/2.csv", b"a,b\n3,4\n")
    with pytest.raises(UnsupportedFormatError, match="csv-header"):
        merge(store, ["t/1.csv", "t/2.csv"], FileKind(Format.CSV, ext="csv", header=None))
    store.put("t/2.csv", b"5,6\n3,4\n")  # different first lines: no header, plain concatenation
    out, _ = merge(store, ["t/1.csv", "t/2.csv"], FileKind(Format.CSV, ext="csv", header=None))
    assert out == b"a,b\n1,2\n5,6\n3,4\n"


# ------------------------------------------------------------------ compressed line files
def test_gzip_members_concatenate() -> None:
    store = FakeStore()
    big_text = lines_of("g", 9 * MiB, seed=7)
    big = gzip.compress(big_text, 1)
    assert len(big) >= MIN_PART_SIZE
    small1_text = b'{"id": "x-1"}\n{"id": "x-2"}'  # no final newline: a newline member is added
    store.put("t/a.json.gz", big)
    store.put("t/b.json.gz", gzip.compress(small1_text))
    store.put("t/c.json.gz", gzip.compress(b'{"id": "y-1"}\n') + gzip.compress(b'{"id": "y-2"}\n'))
    out, _ = merge(store, ["t/a.json.gz", "t/b.json.gz", "t/c.json.gz"], FileKind(Format.JSON, Compression.GZIP, "json.gz"))
    assert json_ids(gzip.decompress(out)) == sorted(json_ids(big_text) + ["x-1", "x-2", "y-1", "y-2"])
    assert store.copied == len(big)
    store.put("t/d.json.gz", b"\x1f\x8b\x08garbage")
    with pytest.raises(UnreadableSourceError, match="d.json.gz"):
        merge(store, ["t/b.json.gz", "t/d.json.gz"], FileKind(Format.JSON, Compression.GZIP, "json.gz"))
    assert store.uploads == {}


def test_bzip2_streams_concatenate() -> None:
    store = FakeStore()
    store.put("t/a.txt.bz2", bz2.compress(b"one\ntwo"))
    store.put("t/b.txt.bz2", bz2.compress(b"three\n"))
    out, _ = merge(store, ["t/a.txt.bz2", "t/b.txt.bz2"], FileKind(Format.TEXT, Compression.BZIP2, "txt.bz2"))
    assert bz2.decompress(out) == b"one\ntwo\nthree\n"


def _single_stream(compression: Compression, data: bytes) -> bytes:
    """Decompress ONE stream/frame, as readers that stop at the first one do; fail if anything follows."""
    if compression is Compression.DEFLATE:
        d = zlib.decompressobj()
        out = d.decompress(data)
        assert d.eof and not d.unused_data
        return out
    if compression is Compression.XZ:
        d = lzma.LZMADecompressor()
        out = d.decompress(data)
        assert d.eof and not d.unused_data
        return out
    if compression is Compression.GZIP:
        d = zlib.decompressobj(31)
        out = d.decompress(data)
        assert d.eof and not d.unused_data
        return out
    codec = {Compression.ZSTD: "zstd", Compression.LZ4: "lz4"}[compression]
    return pa.CompressedInputStream(pa.BufferReader(data), codec).read()


def _compress(compression: Compression, data: bytes) -> bytes:
    if compression is Compression.DEFLATE:
        return zlib.compress(data)
    if compression is Compression.XZ:
        return lzma.compress(data, preset=1)  # the default (6) took ~10 s for the 9 MiB source; any xz will do
    if compression is Compression.GZIP:
        return gzip.compress(data)
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, {Compression.ZSTD: "zstd", Compression.LZ4: "lz4"}[compression]) as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("compression", [Compression.DEFLATE, Compression.XZ, Compression.ZSTD, Compression.LZ4])
def test_first_frame_codecs_are_recompressed_into_one_stream(compression: Compression) -> None:
    store = FakeStore()
    texts = [b"a\nb", b"c\n", b"", lines_of("r", 9 * MiB, seed=3)]  # the last one spans several stream chunks
    keys = []
    for i, text in enumerate(texts):
        keys.append(f"t/{i}.txt.{compression.value}")
        store.put(keys[-1], _compress(compression, text))
    out, _ = merge(store, keys, FileKind(Format.TEXT, compression, f"txt.{compression.value}"))
    assert _single_stream(compression, out) == b"a\nb\nc\n" + texts[3]
    assert store.copied == 0


def test_compressed_csv_with_header_is_recompressed() -> None:
    store = FakeStore()
    header = "id,text,n"
    big_text = csv_of(header, "b", 12 * MiB)
    store.put("t/1.csv.gz", gzip.compress(big_text, 1))
    store.put("t/2.csv.gz", gzip.compress(csv_of(header, "s", 300)))
    out, _ = merge(store, ["t/1.csv.gz", "t/2.csv.gz"], FileKind(Format.CSV, Compression.GZIP, "csv.gz", header=True))
    rows = csv_rows(_single_stream(Compression.GZIP, out))
    assert rows.count(header.split(",")) == 1 and rows[0] == header.split(",")
    assert len(rows) == len(csv_rows(big_text)) + len(csv_rows(csv_of(header, "s", 300))) - 1


def test_snappy_text_is_refused() -> None:
    store = FakeStore()
    store.put("t/a.txt.snappy", b"x")
    store.put("t/b.txt.snappy", b"y")
    with pytest.raises(UnsupportedFormatError, match="snappy"):
        merge(store, ["t/a.txt.snappy", "t/b.txt.snappy"], FileKind(Format.TEXT, Compression.SNAPPY, "txt.snappy"))


# ------------------------------------------------------------------ Parquet
def parquet_of(start: int, rows: int, *, compression: str = "none", schema_variant: int = 0, **kw) -> bytes:
    rnd = random.Random(start)
    cols = {"id": pa.array(range(start, start + rows), pa.int64()),
            "v": pa.array([rnd.getrandbits(62) for _ in range(rows)], pa.int64())}
    if schema_variant:
        cols["extra"] = pa.array(["x"] * rows)
    sink = io.BytesIO()
    pq.write_table(pa.table(cols), sink, compression=compression, **kw)
    return sink.getvalue()


def test_parquet_concat_copies_big_sources_and_shifts_the_footer() -> None:
    store = FakeStore()
    big1 = parquet_of(0, 400_000, row_group_size=150_000)
    big2 = parquet_of(1_000_000, 350_000, write_page_index=True)
    small = parquet_of(5_000_000, 1000)
    assert len(big1) >= MIN_PART_SIZE + 100 and len(big2) >= MIN_PART_SIZE + 100
    for k, v in (("t/a.parquet", small), ("t/b.parquet", big1), ("t/c.parquet", big2)):
        store.put(k, v)
    out, pending = merge(store, ["t/a.parquet", "t/b.parquet", "t/c.parquet"], FileKind(Format.PARQUET, ext="parquet"))
    table = pq.read_table(pa.BufferReader(out))
    expected = pa.concat_tables([pq.read_table(pa.BufferReader(b)) for b in (big1, big2, small)])
    assert table.num_rows == expected.num_rows == pending.rows
    assert sorted(table.column("id").to_pylist()) == sorted(expected.column("id").to_pylist())
    assert table.sort_by("id").equals(expected.sort_by("id"))
    md = pq.ParquetFile(pa.BufferReader(out)).metadata
    assert md.num_row_groups == 3 + 1 + 1
    # every big byte but the footers was copied; through the client: the footer reads and the small file
    assert store.copied >= len(big1) + len(big2) - 2 * 64 * 1024
    assert store.downloaded < len(small) * 2 + 2 * 16 * 1024 + 64 * 1024


def test_parquet_small_files_are_rewritten_into_one_row_group() -> None:
    store = FakeStore()
    keys = []
    for i in range(6):
        keys.append(f"t/{i}.snappy.parquet")
        store.put(keys[-1], parquet_of(i * 100, 100, compression="snappy", row_group_size=30))
    out, pending = merge(store, keys, FileKind(Format.PARQUET, ext="snappy.parquet"))
    pf = pq.ParquetFile(pa.BufferReader(out))
    assert pf.metadata.num_row_groups == 1 and pf.metadata.num_rows == 600 == pending.rows
    assert pf.metadata.row_group(0).column(0).compression == "SNAPPY"
    assert pf.read().column("id").to_pylist() == list(range(600))


def test_parquet_mixed_schemas_are_refused_both_ways() -> None:
    store = FakeStore()
    store.put("t/a.parquet", parquet_of(0, 10))
    store.put("t/b.parquet", parquet_of(10, 10, schema_variant=1))
    with pytest.raises(MixedSchemaError, match="b.parquet"):
        merge(store, ["t/a.parquet", "t/b.parquet"], FileKind(Format.PARQUET, ext="parquet"))
    assert store.uploads == {}
    store.put("t/c.parquet", parquet_of(100, 400_000))
    with pytest.raises(MixedSchemaError, match="schema"):
        merge(store, ["t/b.parquet", "t/c.parquet"], FileKind(Format.PARQUET, ext="parquet"))
    assert store.uploads == {}


def test_unreadable_parquet_is_named() -> None:
    store = FakeStore()
    store.put("t/a.parquet", parquet_of(0, 10))
    store.put("t/bad.parquet", b"PAR1 this is not parquet at all PAR1")
    with pytest.raises(UnreadableSourceError, match="bad.parquet"):
        merge(store, ["t/a.parquet", "t/bad.parquet"], FileKind(Format.PARQUET, ext="parquet"))
    store.put("t/big.parquet", parquet_of(0, 400_000))
    with pytest.raises(UnreadableSourceError, match="bad.parquet"):
        merge(store, ["t/big.parquet", "t/bad.parquet"], FileKind(Format.PARQUET, ext="parquet"))
    assert store.uploads == {}


# ------------------------------------------------------------------ sources that change
def test_source_changed_after_planning_aborts_the_merge() -> None:
    store = FakeStore()
    store.put("t/a.json", lines_of("a", BIG))
    store.put("t/b.json", lines_of("b", 100))
    task = prepare(store, "b", objects(store, ["t/a.json", "t/b.json"]), FileKind(Format.JSON, ext="json"), key="t/out")  # type: ignore[arg-type]
    store.put("t/a.json", lines_of("a2", BIG))  # rewritten meanwhile: the copy's ETag pin fails
    with pytest.raises(SourceChangedError, match="a.json"):
        run_merge(store, "b", task, pool=SerialExecutor())  # type: ignore[arg-type]
    assert store.uploads == {} and store.aborted
    del store.objects["t/b.json"]  # deleted meanwhile: the ranged read fails
    task = prepare(store, "b", objects(store, ["t/a.json"]) + [SourceObject("t/b.json", '"x"', 100)],
                   FileKind(Format.JSON, ext="json"), key="t/out")  # type: ignore[arg-type]
    with pytest.raises(SourceChangedError, match="b.json"):
        run_merge(store, "b", task, pool=SerialExecutor())  # type: ignore[arg-type]
    assert store.uploads == {}


# ------------------------------------------------------------------ transforms
def test_each_stream_range_goes_to_the_assembler_of_its_transform() -> None:
    """The merge dispatches on a range's transform: untransformed bytes as they are, the assembler's own
    transform through it, any other refused (a planning error) with the upload aborted."""
    store = FakeStore()
    store.put("t/a.json", b'{"id": "a"}')  # no final newline: the lines assembler adds it
    store.put("t/b.json", b'{"id": "b"}\n')
    a, b = objects(store, ["t/a.json", "t/b.json"])
    stream = (Range(a, 0, a.size, Transform.LINES), Range(b, 0, b.size))
    task = MergeTask(key="t/out", plan=plan_parts(list(stream)), assembler=LinesSpec())
    assert store.complete(run_merge(store, "b", task, pool=SerialExecutor())) == b'{"id": "a"}\n{"id": "b"}\n'  # type: ignore[arg-type]

    wrong = MergeTask(key="t/out", plan=plan_parts([Range(a, 0, a.size, Transform.RECOMPRESS)]), assembler=LinesSpec())
    with pytest.raises(MergePlanError, match="recompress range of 't/a.json'.*assembler does lines"):
        run_merge(store, "b", wrong, pool=SerialExecutor())  # type: ignore[arg-type]
    assert store.uploads == {}
