"""A compaction's check of its sources before it completes its merged files (``Replacer.check_sources``), on real
servers: a directory of many sources costs a listing of its own children in the sources' key range, not a HEAD per
source, and says exactly what the HEADs said -- a source is there only if listed with the journal's ETag; a
source changed or missing puts its directory among the ``gone`` ones, whose merged files are never completed."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from mpcommit.protocol.commit import replacing
from mpcommit.protocol.commit.context import CommitContext
from mpcommit.protocol.commit.replacing import Replacer
from mpcommit.protocol.layout import parse_uri
from mpcommit.protocol.records.job import DeleteEntry
from mpcommit.store.s3 import S3Store


def put_all(backend, bucket: str, objects: dict[str, bytes]) -> dict[str, str]:
    """Put every object; their ETags, as S3 answered the PUTs (what a listing and a HEAD show too)."""
    with ThreadPoolExecutor(16) as pool:
        answers = pool.map(lambda kv: backend.client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items())
        return {key: answer["ETag"] for key, answer in zip(objects, answers)}


class Recording:
    """The store's requests as they leave it: (operation, parameters)."""

    def __init__(self, store: S3Store):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        real = store._call

        def call(operation: str, **kwargs: Any) -> Any:
            self.calls.append((operation, kwargs))
            return real(operation, **kwargs)

        store._call = call  # type: ignore[method-assign]

    def counts(self) -> Counter[str]:
        return Counter(op for op, _ in self.calls)


def check(backend, bucket: str, sources: dict[str, str], *, merged: tuple[str, ...] = (),
          threads: int = 8) -> tuple[list[str], frozenset[str], Counter[str], Recording]:
    """check_sources over a journal deleting ``sources`` (key -> ETag pinned), on a fresh store whose requests are
    counted; ``merged``: the keys of the job's merged files (not completed: no object)."""
    store = S3Store(backend.options)
    recording = Recording(store)
    journal = SimpleNamespace(delete=tuple(DeleteEntry(k, e) for k, e in sources.items()))
    manifest = SimpleNamespace(uploads=[SimpleNamespace(key=k, size=1, parts=()) for k in merged])
    with CommitContext(threads) as context:
        replacer = Replacer(store, parse_uri(f"s3://{bucket}/t"), "job", context, lambda *_: None)
        kept, gone = replacer.check_sources(journal, lambda: iter([manifest]))  # type: ignore[arg-type]
    return kept, gone, Counter(store.request_counts()), recording


@pytest.mark.ci_on("localstack")
def test_a_directory_of_many_sources_costs_one_listing_not_a_head_each(backend) -> None:
    """200 sources in dt=1 among other files before, between (a sub-folder of 1,100 files in the middle of their
    key range) and after them: one ListObjectsV2 page. dt=2's three sources: three HEADs."""
    bucket = backend.new_bucket("mpc-srccheck")
    sources = {f"t/dt=1/part-{i:05d}.json": b"%d\n" % i for i in range(200)}
    others = {f"t/dt=1/a-before-{i}.json": b"x" for i in range(5)} | {f"t/dt=1/zz-after-{i}.json": b"x" for i in range(5)}
    others |= {f"t/dt=1/part-00100.d/x{i:04d}": b"x" for i in range(1100)}
    few = {f"t/dt=2/part-{i:05d}.json": b"%d\n" % i for i in range(3)}
    etags = put_all(backend, bucket, sources | others | few)
    pinned = {k: etags[k] for k in [*sources, *few]}
    kept, gone, counts, recording = check(backend, bucket, pinned)
    assert sorted(kept) == sorted(pinned) and gone == frozenset()
    assert counts == {"list_objects_v2": 1, "head_object": 3}, counts
    (op, params), = [(op, p) for op, p in recording.calls if op == "list_objects_v2"]
    # The prefix the sources share (not the files before or after them), its sub-folders one name each.
    assert params["Prefix"] == "t/dt=1/part-00" and params["Delimiter"] == "/"


@pytest.mark.ci_on("localstack")
def test_sources_at_a_table_root_never_list_its_partitions(backend) -> None:
    """Sources in the table's root folder, named on both sides of its partition folders (dt=..., 1,200 files in
    all): their listing is of the root's own children, one page, never of every partition below it."""
    bucket = backend.new_bucket("mpc-srccheck")
    sources = {f"t/{c}-{i:03d}.json": b"%d\n" % i for c in "az" for i in range(20)}
    partitions = {f"t/dt={d}/part-{i:04d}.json": b"x" for d in range(3) for i in range(400)}
    etags = put_all(backend, bucket, sources | partitions)
    kept, gone, counts, recording = check(backend, bucket, {k: etags[k] for k in sources})
    assert sorted(kept) == sorted(sources) and gone == frozenset()
    assert counts == {"list_objects_v2": 1}, counts
    (op, params), = [(op, p) for op, p in recording.calls if op == "list_objects_v2"]
    assert params["Prefix"] == "t/" and params["Delimiter"] == "/"


def test_a_changed_or_missing_source_still_marks_its_directory_gone(backend) -> None:
    """In listed directories: a source overwritten (another ETag) in dt=1, the first and the last source of dt=2
    deleted (the edges of the listed range), a source pinned with a stale ETag in dt=3; dt=4 untouched. Each of
    dt=1..3 is gone; every source still as merged is kept, dt=4's all."""
    bucket = backend.new_bucket("mpc-srccheck")
    n = 20  # a directory listed: at least LIST_SOURCES_AT sources
    sources = {f"t/dt={d}/part-{i:05d}.json": b"%d %d\n" % (d, i) for d in range(1, 5) for i in range(n)}
    etags = put_all(backend, bucket, sources)
    changed = "t/dt=1/part-00003.json"
    backend.client.put_object(Bucket=bucket, Key=changed, Body=b"rewritten\n")
    removed = [f"t/dt=2/part-{0:05d}.json", f"t/dt=2/part-{n - 1:05d}.json"]
    for key in removed:
        backend.client.delete_object(Bucket=bucket, Key=key)
    stale = "t/dt=3/part-00007.json"
    pinned = dict(etags) | {stale: '"00000000000000000000000000000000"'}
    kept, gone, counts, _ = check(backend, bucket, pinned, merged=("t/dt=1/merged.json",))
    assert gone == frozenset({"t/dt=1", "t/dt=2", "t/dt=3"})
    assert sorted(kept) == sorted(set(sources) - {changed, stale, *removed})
    # One listing per directory, and the HEAD of the merged file (not complete: the gone directories stay gone).
    assert counts == {"list_objects_v2": 4, "head_object": 1}, counts


@pytest.mark.ci_on("localstack")
def test_sources_spread_thin_among_other_files_are_headed_past_the_page_budget(backend) -> None:
    """20 sources, one before 1,200 other files and 19 after them: the listing reads its one page (one per
    SOURCES_PER_PAGE sources) and stops; the 19 sources past that page get a HEAD each, and a missing one among
    them still counts."""
    bucket = backend.new_bucket("mpc-srccheck")
    sources = {"t/dt=1/a-first.json": b"1\n"} | {f"t/dt=1/z-{i:03d}.json": b"%d\n" % i for i in range(19)}
    others = {f"t/dt=1/m-{i:04d}.json": b"x" for i in range(1200)}
    etags = put_all(backend, bucket, sources | others)
    backend.client.delete_object(Bucket=bucket, Key="t/dt=1/z-005.json")
    kept, gone, counts, _ = check(backend, bucket, {k: etags[k] for k in sources}, merged=("t/dt=1/merged.json",))
    assert gone == frozenset({"t/dt=1"})
    assert sorted(kept) == sorted(set(sources) - {"t/dt=1/z-005.json"})
    assert counts == {"list_objects_v2": 1, "head_object": 19 + 1}, counts


@pytest.mark.parametrize("threads", [0, 8])
def test_listing_and_heads_agree(backend, monkeypatch, threads: int) -> None:
    """The same journal checked by HEADs alone and by listings alone gives the same answer (serially too)."""
    bucket = backend.new_bucket("mpc-srccheck")
    sources = {f"t/dt={d}/p-{i:03d}.json": b"%d\n" % i for d in range(3) for i in range(20)}
    etags = put_all(backend, bucket, sources)
    backend.client.delete_object(Bucket=bucket, Key="t/dt=0/p-003.json")
    backend.client.put_object(Bucket=bucket, Key="t/dt=1/p-010.json", Body=b"other\n")
    answers = []
    for at in (10**9, 1):
        monkeypatch.setattr(replacing, "LIST_SOURCES_AT", at)
        kept, gone, counts, _ = check(backend, bucket, etags, merged=("t/dt=0/m.json",), threads=threads)
        answers.append((sorted(kept), gone))
        assert counts["list_objects_v2"] == (0 if at > 1 else 3), counts
    assert answers[0] == answers[1] and answers[0][1] == frozenset({"t/dt=0", "t/dt=1"})


@pytest.mark.ci_on("localstack")
def test_a_directory_of_more_sources_than_a_page_costs_a_listing_page_per_thousand(backend) -> None:
    """1,100 sources: two pages, read to the end of the range, and no HEAD."""
    bucket = backend.new_bucket("mpc-srccheck")
    sources = {f"t/plain/part-{i:05d}.json": b"%d\n" % i for i in range(1100)}
    etags = put_all(backend, bucket, sources)
    backend.client.delete_object(Bucket=bucket, Key="t/plain/part-01099.json")  # the last, on the last page
    kept, gone, counts, _ = check(backend, bucket, etags, merged=("t/plain/merged.json",))
    assert gone == frozenset({"t/plain"}) and sorted(kept) == sorted(set(sources) - {"t/plain/part-01099.json"})
    assert counts == {"list_objects_v2": 2, "head_object": 1}, counts  # and the merged file's HEAD


def test_a_listing_the_server_cannot_page_consistently_falls_back_to_a_head_each(backend, monkeypatch) -> None:
    """A folder whose listing is inconsistent (both ways, I8) is checked by HEADs: the same answer, never a
    commit -- or a recovery -- that fails for ever on that server's paging."""
    from mpcommit.errors import InconsistentListingError
    from mpcommit.store.values import ObjectRange

    bucket = backend.new_bucket("mpc-srccheck")
    sources = {f"t/dt=1/p-{i:03d}.json": b"%d\n" % i for i in range(20)}
    etags = put_all(backend, bucket, sources)
    backend.client.delete_object(Bucket=bucket, Key="t/dt=1/p-004.json")

    def inconsistent(self, bucket, prefix, **_kw) -> ObjectRange:  # noqa: ANN001
        raise InconsistentListingError("pages lost", operation="list_objects_v2", code="InconsistentListing",
                                       bucket=bucket, key=prefix)

    monkeypatch.setattr(S3Store, "list_child_range", inconsistent)
    kept, gone, counts, _ = check(backend, bucket, etags, merged=("t/dt=1/m.json",))
    assert gone == frozenset({"t/dt=1"}) and sorted(kept) == sorted(set(sources) - {"t/dt=1/p-004.json"})
    assert counts == {"head_object": 20 + 1}, counts
