"""What runs side by side in a merge: with a store's latency, every request made one after another costs a
round trip, so these are properties of the request path, tested without timing: a store whose requests wait
at a barrier for the others they should run beside (a serial path breaks the barrier and fails the test)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from mpcommit.compaction.executor import run_merge
from mpcommit.compaction.kinds import detect_kind
from mpcommit.compaction.merge_plan import PrefetchedReader, plan_sources, planning_reads, prepare
from mpcommit.compaction.parts import SourceObject
from mpcommit.compaction.standalone import compact
from mpcommit.sizing import MIN_PART_SIZE, MiB
from mpcommit.store.s3 import store_for

from .fakes import FakeStore, etag_of
from .test_formats import csv_of, lines_of, parquet_of

WAIT = 20.0  # seconds a barrier waits before it breaks: only a serial path ever waits that long


class GatedStore(FakeStore):
    """Requests that ``gated(operation, key, byte_range)`` picks wait at ``barrier`` until that many of them
    are in flight at once."""

    def __init__(self, parties: int, gated: Callable[[str, str, tuple[int, int] | None], bool], wait: float = WAIT):
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=wait)
        self.gated = gated

    def upload_part_copy(self, bucket, key, upload_id, number, **kw):  # type: ignore[override]
        if self.gated("copy", kw["source_key"], kw.get("byte_range")):
            self.barrier.wait()
        return super().upload_part_copy(bucket, key, upload_id, number, **kw)

    def get_object(self, bucket, key, *, byte_range=None, if_match=None):  # type: ignore[override]
        if self.gated("get", key, byte_range):
            self.barrier.wait()
        return super().get_object(bucket, key, byte_range=byte_range, if_match=if_match)


def _json_bin(store: FakeStore, sizes: list[int]) -> list[SourceObject]:
    out = []
    for i, size in enumerate(sizes):
        data = lines_of(f"s{i}", size, seed=i)
        store.put(f"t/s{i:02d}.json", data)
        out.append(SourceObject(f"t/s{i:02d}.json", etag_of(data), len(data)))
    return out


def test_copies_of_a_merge_run_side_by_side() -> None:
    # Three sources of 11 MiB: two 5.5 MiB copy parts each. All six must be in flight at once.
    store = GatedStore(6, lambda op, _key, _range: op == "copy")
    sources = _json_bin(store, [11 * MiB] * 3)
    task = prepare(store, "b", sources, detect_kind("x.json"), key="t/out.json")  # type: ignore[arg-type]
    assert sum(1 for _ in task.plan.parts) == 6
    pending = run_merge(store, "b", task)  # type: ignore[arg-type]
    assert store.complete(pending) == b"".join(store.objects[s.key] for s in sources)
    assert store.counts["upload_part_copy"] == 6


def test_the_barrier_breaks_when_copies_are_bounded_below_it() -> None:
    # The same merge with two copies at a time never has six in flight: the property above can fail.
    store = GatedStore(6, lambda op, _key, _range: op == "copy", wait=1.0)
    sources = _json_bin(store, [11 * MiB] * 3)
    task = prepare(store, "b", sources, detect_kind("x.json"), key="t/out.json")  # type: ignore[arg-type]
    with pytest.raises(threading.BrokenBarrierError):
        run_merge(store, "b", task, copy_threads=2)  # type: ignore[arg-type]
    assert store.uploads == {}  # aborted


def test_small_sources_stream_while_the_copies_run() -> None:
    # Every copy waits until the small sources have been fetched: on two part threads they would wait for
    # ever if the copies took the part threads (they run on a pool of their own).
    fetched = threading.Event()
    small_keys: set[str] = set()

    class Store(FakeStore):
        def upload_part_copy(self, *a, **kw):  # type: ignore[override]
            assert fetched.wait(WAIT), "the small sources were not fetched while the copies ran"
            return super().upload_part_copy(*a, **kw)

        def get_object(self, bucket, key, **kw):  # type: ignore[override]
            data = super().get_object(bucket, key, **kw)
            if key in small_keys:
                small_keys.discard(key)
                if not small_keys:
                    fetched.set()
            return data

    store = Store()
    sources = _json_bin(store, [6 * MiB, 6 * MiB, 7 * MiB, 1000, 2000])
    small_keys.update(s.key for s in sources if s.size < MIN_PART_SIZE)
    task = prepare(store, "b", sources, detect_kind("x.json"), key="t/out.json")  # type: ignore[arg-type]
    pending = run_merge(store, "b", task, threads=2)  # type: ignore[arg-type]
    assert store.complete(pending) == b"".join(store.objects[s.key] for s in sources)


def test_planning_reads_of_a_bin_run_side_by_side() -> None:
    # Five copyable sources: five 1-byte newline probes, all in flight at once.
    store = GatedStore(5, lambda op, _key, rng: op == "get" and rng is not None and rng[1] - rng[0] == 0)
    sources = _json_bin(store, [MIN_PART_SIZE + 10] * 5)
    prepare(store, "b", sources, detect_kind("x.json"), key="t/out.json")  # type: ignore[arg-type]
    assert store.counts["get_object"] == 5


@pytest.mark.parametrize("name, blobs", [
    ("x.json", lambda: [lines_of("a", MIN_PART_SIZE + 5), lines_of("b", 300), lines_of("c", 6 * MiB)[:-1]]),
    ("x.csv", lambda: [csv_of("id,a,b", "a", MIN_PART_SIZE + 5), csv_of("id,a,b", "b", 300)]),
    ("x.parquet", lambda: [parquet_of(0, 700_000), parquet_of(10_000_000, 200)]),
])
def test_planning_needs_no_read_beyond_the_prefetched_ones(name: str, blobs: Callable[[], list[bytes]]) -> None:
    kind = detect_kind(name)
    if name.endswith(".csv"):
        from dataclasses import replace

        kind = replace(kind, header=True)
    store = FakeStore()
    sources = []
    for i, data in enumerate(blobs()):
        store.put(f"k{i}", data)
        sources.append(SourceObject(f"k{i}", etag_of(data), len(data)))
    assert any(s.size >= MIN_PART_SIZE for s in sources)
    reads = planning_reads(sources, kind)
    assert reads, "a bin that copies has planning reads"
    reader = PrefetchedReader(lambda o, a, b: store.get_object("b", o.key, byte_range=(a, b - 1), if_match=o.etag))
    reader.prefetch(reads, threads=4)
    plan_sources(reader, sources, kind)
    assert reader.misses == 0


def test_a_compaction_commit_heads_its_sources_side_by_side(backend, bucket: str) -> None:
    """The commit checks each source of a compaction (pinned by ETag) before deleting it: six sources, six
    HEADs in flight at once."""
    keys = [f"t/s{i}.json" for i in range(6)]
    for i, key in enumerate(keys):
        backend.client.put_object(Bucket=bucket, Key=key, Body=lines_of(f"s{i}", 500, seed=i))
    store = store_for(backend.options)
    barrier = threading.Barrier(len(keys), timeout=WAIT)
    head = store.head_object

    def gated_head(b: str, key: str):  # type: ignore[no-untyped-def]
        if key in keys:
            barrier.wait()
        return head(b, key)

    store.head_object = gated_head  # type: ignore[method-assign]
    report = compact(f"s3://{bucket}/t", s3=backend.options, store=store)
    assert report.outcome.value == "committed" and len(report.merged) == 1
    assert not barrier.broken


def _small_stream(store: FakeStore, n: int, size: int = 1000):
    sources = _json_bin(store, [size] * n)
    task = prepare(store, "b", sources, detect_kind("x.json"), key="t/out.json")  # type: ignore[arg-type]
    assert not task.plan.parts and len(task.plan.stream) == n  # all of it streams
    return sources, task


def test_the_stream_keeps_32_small_sources_in_flight() -> None:
    # Each small source costs a round trip: 32 of them are fetched at once (8 before).
    gated = {f"t/s{i:02d}.json" for i in range(32)}  # the first 32: the barrier lets one group through
    store = GatedStore(32, lambda op, key, _range: op == "get" and key in gated)
    sources, task = _small_stream(store, 40)
    pending = run_merge(store, "b", task)  # type: ignore[arg-type]
    assert store.complete(pending) == b"".join(store.objects[s.key] for s in sources)


def test_the_stream_prefetch_is_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    from mpcommit.compaction import executor

    monkeypatch.setattr(executor, "PREFETCH_BYTES", 3000)  # three sources of about 1000 bytes
    # Four sources: unbounded, all four would be in flight and pass the barrier; bounded, it breaks.
    store = GatedStore(4, lambda op, _key, _range: op == "get", wait=1.0)
    _sources, task = _small_stream(store, 4)
    with pytest.raises(threading.BrokenBarrierError):
        run_merge(store, "b", task)  # type: ignore[arg-type]
