"""What a commit keeps per file (mpcommit.protocol.commit.committed): keys spilled to a local temporary file past
SPILL_AT and merged back sorted, a large report's names compressed, upload ids as digests -- and a commit that spills
writing exactly the _SUCCESS and report a commit that does not spill writes, its temporary files closed however
it ends."""

from __future__ import annotations

import dataclasses
import random
import tempfile

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError
from mpcommit.modes import CommitOutcome
from mpcommit.protocol import faults
from mpcommit.protocol.commit import committed
from mpcommit.protocol.commit.committed import CommittedKeys, FileNames, UploadIds
from mpcommit.protocol.records.success import PartitionStats, SuccessData
from tests.support.checks import read_object, visible_keys
from tests.support.jobs import write_task

ODD_KEYS = ["t/a", "t/\u00e9t\u00e9/x", 't/q"uote', "t/new\nline", "t/back\\slash", "t/\U0001f600", "t/Z", "t/ ",
            "t/tab\tx", "t/\x01ctl"]


def _keys(n: int, seed: int = 1) -> list[str]:
    keys = [f"t/dt={i % 7}/part-{i:05d}.parquet" for i in range(n)] + ODD_KEYS
    random.Random(seed).shuffle(keys)
    return keys


@pytest.mark.parametrize("spill_at", [1, 2, 3, 7, 1000])
def test_keys_come_back_sorted_whether_spilled_or_not(spill_at):
    keys = _keys(50)
    with CommittedKeys(spill_at=spill_at) as held:
        for k in keys:
            held.add(k)
        assert len(held) == len(keys)
        assert held.spilled is (spill_at < len(keys))
        assert list(held.sorted_keys()) == sorted(keys)
        names = held.names()
    assert tuple(names) == tuple(sorted(keys)) and len(names) == len(keys)
    assert isinstance(names, FileNames if spill_at < len(keys) else tuple)


def test_a_run_larger_than_the_read_buffer(monkeypatch):
    monkeypatch.setattr(committed, "RUN_BUFFER", 7)  # every line split across reads
    keys = _keys(40)
    held = CommittedKeys(spill_at=9)
    for k in keys:
        held.add(k)
    assert list(held.sorted_keys()) == sorted(keys)
    held.close()


def test_the_temporary_file_is_closed_by_names_and_by_close(monkeypatch):
    made = _record_temporary_files(monkeypatch)
    held = CommittedKeys(spill_at=2)
    for k in _keys(5):
        held.add(k)
    assert len(made) == 1 and not made[0].closed
    held.names()
    assert made[0].closed
    with CommittedKeys(spill_at=2) as other:
        for k in _keys(5):
            other.add(k)
        assert len(made) == 2 and not made[1].closed
    assert made[1].closed


def test_file_names_behave_as_the_tuple():
    keys = tuple(sorted(_keys(30)))
    names = FileNames.of(keys)
    assert len(names) == len(keys) and tuple(names) == keys and list(names) == list(keys)
    assert names == keys and keys == names and names == list(keys) and names != keys[:-1]
    assert names == FileNames.of(iter(keys)) and names != FileNames.of(keys[1:])
    assert names[0] == keys[0] and names[-1] == keys[-1] and names[17] == keys[17]
    assert names[:10] == keys[:10] and names[5:] == keys[5:] and names[::-1] == keys[::-1] and names[3:9:2] == keys[3:9:2]
    assert keys[4] in names and "t/absent" not in names and names.index(keys[8]) == 8
    assert list(reversed(names)) == list(reversed(keys))
    with pytest.raises(IndexError):
        names[len(keys)]
    assert "30" not in repr(names) or "keys" in repr(names)
    assert FileNames.of([]) == () and len(FileNames.of([])) == 0 and list(FileNames.of([])) == []
    with pytest.raises(ValueError):
        FileNames.of(keys, count=len(keys) + 1)


def test_file_names_are_smaller_than_the_strings():
    keys = [f"warehouse/events/dt=2024-01-{i % 28:02d}/part-{i:05d}-4f1c2b7a.c000.zstd.parquet" for i in range(20_000)]
    names = FileNames.of(sorted(keys))
    assert names.compressed_bytes < 10 * len(keys)  # the strings: ~70 bytes of text each, more as objects


@pytest.mark.parametrize("names", [(), ("t/a",), tuple(sorted(ODD_KEYS))])
@pytest.mark.parametrize("extra", [{}, {"partition_stats": {"": PartitionStats(1, 2, None), "dt=1": PartitionStats(3, 4, 5)},
                                       "merged_from": 3, "position": 12, "purpose": "compact"}])
def test_success_written_a_few_names_at_a_time_is_byte_identical(names, extra):
    import io

    for filenames in (names, FileNames.of(names)):
        success = SuccessData(job_id="j\u00e9", mode="append", filenames=filenames, bytes=7, rows=None,
                              partitions=("dt=1",), timings={"complete": 0.25, "total": 1.0}, hostname='h"\n',
                              **extra)
        out = io.BytesIO()
        success.write_to(out)
        assert out.getvalue() == success.to_bytes()
        assert SuccessData.from_bytes(out.getvalue(), where="test") == success


def test_upload_ids_answer_membership():
    ours = [f"upload-{i}-{'x' * (i % 50)}" for i in range(5000)]
    ids = UploadIds()
    assert "upload-1-x" not in ids
    for u in ours:
        ids.add(u)
    assert len(ids) == len(ours)
    assert all(u in ids for u in ours)
    assert not any(f"other-{i}" in ids for i in range(5000))
    ids.add("late")  # added after a lookup: seen too
    assert "late" in ids and 3 not in ids
    ids.clear()
    assert "late" not in ids and len(ids) == 0


# ---------------------------------------------------------------- a commit that spills
def _record_temporary_files(monkeypatch):
    made = []
    real = tempfile.TemporaryFile

    def recording(*args, **kwargs):
        f = real(*args, **kwargs)
        made.append(f)
        return f

    monkeypatch.setattr(tempfile, "TemporaryFile", recording)
    return made


def _job_of(backend, bucket, prefix, tasks=6):
    job = Job.create(f"s3://{bucket}/{prefix}", s3=backend.options)
    refs = [write_task(job, t, {f"dt={p}": f"{t}-{p}\n".encode() for p in range(5)}) for t in range(tasks)]
    return job, refs


def test_a_commit_that_spills_writes_the_same_success_and_report(backend, bucket, monkeypatch):
    job, refs = _job_of(backend, bucket, "plain")
    plain = job.commit(refs)
    plain_success = read_object(backend.client, bucket, "plain/_SUCCESS")
    assert isinstance(plain.filenames, tuple)

    made = _record_temporary_files(monkeypatch)
    monkeypatch.setattr(committed, "SPILL_AT", 4)
    job, refs = _job_of(backend, bucket, "spilled")
    report = job.commit(refs)
    data = read_object(backend.client, bucket, "spilled/_SUCCESS")

    assert report.outcome is CommitOutcome.COMMITTED and isinstance(report.filenames, FileNames)
    assert len(made) == 2, "the keys' runs and _SUCCESS's body went through temporary files"
    assert all(f.closed for f in made)
    # Byte for byte what the non-spilling path serialises for the same content, names sorted and whole.
    success = SuccessData.from_bytes(data, where="test")
    assert success.to_bytes() == data
    keys = visible_keys(backend.client, bucket, "spilled") - {"spilled/_SUCCESS"}
    assert list(success.filenames) == sorted(keys) and list(report.filenames) == sorted(keys) and len(keys) == 30
    # The same report and _SUCCESS as the commit that held everything, but for the job's id and the prefix.
    before = SuccessData.from_bytes(plain_success, where="test")

    def same(names, job_id, prefix):
        return [n.replace(job_id, "JOB").replace(prefix, "P", 1) for n in names]

    assert same(success.filenames, job.job_id, "spilled/") == same(before.filenames, plain.job_id, "plain/")
    assert same(report.filenames, job.job_id, "spilled/") == same(plain.filenames, plain.job_id, "plain/")
    for field in ("bytes", "rows", "partitions", "partition_stats", "files", "mode", "purpose", "position"):
        assert getattr(success, field) == getattr(before, field), field
    for field in ("bytes", "rows", "partitions", "partition_stats", "files", "aborted_uploads", "deleted_objects"):
        assert getattr(report, field) == getattr(plain, field), field


@pytest.mark.parametrize("point", ["commit.after_complete", "commit.before_success"])
def test_temporary_files_are_closed_when_the_commit_fails(backend, bucket, monkeypatch, point):
    made = _record_temporary_files(monkeypatch)
    monkeypatch.setattr(committed, "SPILL_AT", 4)
    job, refs = _job_of(backend, bucket, "t")
    with faults.installed(faults.fail_at(point, 20 if point == "commit.after_complete" else 1)):
        with pytest.raises(CommitStateUnknownError):
            job.commit(refs)
    assert made and all(f.closed for f in made)


def test_the_success_body_file_is_closed_when_its_put_fails(backend, bucket, monkeypatch):
    from mpcommit.store.s3 import S3Store

    made = _record_temporary_files(monkeypatch)
    monkeypatch.setattr(committed, "SPILL_AT", 4)
    job, refs = _job_of(backend, bucket, "t")
    real = S3Store.put_object

    def failing(self, bucket_, key, body, **kw):
        if key.endswith("_SUCCESS"):
            assert not isinstance(body, bytes), "a large _SUCCESS is sent from its file"
            raise OSError("injected: the PUT of _SUCCESS broke off")
        return real(self, bucket_, key, body, **kw)

    monkeypatch.setattr(S3Store, "put_object", failing)
    with pytest.raises(CommitStateUnknownError):
        job.commit(refs)
    assert len(made) == 2 and all(f.closed for f in made)


# ---------------------------------------------------------------- results handed over to the commit
def _alive_at_success(job, results):
    """Commit; how many of the results' in-line manifests are still alive just before _SUCCESS is written."""
    import gc
    import weakref

    refs = [weakref.ref(r.manifest) for r in results if r.manifest is not None]
    assert refs, "small manifests travel in-line"
    alive = []

    def look(name, _index):
        if name == "commit.before_success":
            gc.collect()
            alive.append(sum(r() is not None for r in refs))

    with faults.installed(look):
        report = job.commit(results)
    assert report.outcome is CommitOutcome.COMMITTED
    return alive[0], len(refs)


def test_handed_over_results_let_their_inline_manifests_go_once_placed(backend, bucket):
    from mpcommit.protocol.commit.committed import HandedOverResults

    job, refs = _job_of(backend, bucket, "t")
    handed = HandedOverResults(refs)
    del refs
    alive, of = _alive_at_success(job, handed)
    assert alive == 0 and of == 6
    assert handed == [], "the commit emptied the results handed to it"


def test_results_kept_by_the_caller_stay_whole(backend, bucket):
    job, refs = _job_of(backend, bucket, "t")
    alive, of = _alive_at_success(job, refs)
    assert alive == of == 6 and len(refs) == 6 and all(r.manifest is not None for r in refs)


def test_handed_over_results_refused_before_the_journal_stay_whole(backend, bucket):
    from mpcommit.errors import DuplicateTaskResultError
    from mpcommit.protocol.commit.committed import HandedOverResults

    job, refs = _job_of(backend, bucket, "t", tasks=2)
    handed = HandedOverResults(refs + refs[:1])
    with pytest.raises(DuplicateTaskResultError):
        job.commit(handed)
    assert len(handed) == 3


# ---------------------------------------------------------------- a large _SUCCESS read without its names
def _success(names, **extra):
    from mpcommit.protocol.records.success import PartitionStats

    return SuccessData(job_id="j", mode="append", filenames=tuple(names), bytes=1, rows=2, partitions=("",),
                       partition_stats={"": PartitionStats(len(names), 2, 3)}, **extra)


@pytest.mark.parametrize("size", [1, 2, 5, 13, 64, 1 << 16])
@pytest.mark.parametrize("names", [(), ("t/a",), tuple(sorted(ODD_KEYS + ['t/]"],x', "t/\\", "t/,"]))])
def test_a_success_read_as_a_stream_skips_its_names(size, names):
    from mpcommit.protocol.records.success import success_without_names

    data = _success(names, position=9).to_bytes()
    got, count = success_without_names((data[i:i + size] for i in range(0, len(data), size)), where="t")
    assert count == len(names)
    assert got == dataclasses.replace(SuccessData.from_bytes(data, where="t"), filenames=())


@pytest.mark.parametrize("cut", [20, 200, -30])
def test_a_truncated_or_foreign_success_is_refused_by_name(cut):
    from mpcommit.errors import ManifestCorruptError
    from mpcommit.protocol.records.success import success_without_names

    data = _success([f"t/p{i}" for i in range(20)]).to_bytes()
    with pytest.raises(ManifestCorruptError):
        success_without_names([data[:cut]], where="t")
    with pytest.raises(ManifestCorruptError):  # S3A's _SUCCESS: another kind
        success_without_names([b'{"name":"org.apache.hadoop.fs.s3a.commit.files.SuccessData/1","filenames":["/a"]}'],
                              where="t")


def test_a_later_commit_reads_a_large_success_as_a_stream(backend, bucket, monkeypatch):
    """The second commit of a table whose _SUCCESS spilled reads the old one as a stream (never decoded whole)
    and replaces it; the stream read's chunks are small."""
    from mpcommit.protocol.records import success as success_module
    from mpcommit.store.s3 import S3Store

    monkeypatch.setattr(committed, "SPILL_AT", 4)
    job, refs = _job_of(backend, bucket, "t")
    job.commit(refs)
    seen = []
    real_read = S3Store.read_object_and_etag

    def small_chunks(self, bucket_, key, consume, chunk_size=1 << 20):
        seen.append(key)
        return real_read(self, bucket_, key, consume, chunk_size=64)

    decoded = []
    real_from_bytes = success_module.SuccessData.from_bytes.__func__

    def from_bytes(cls, data, *, where):
        decoded.append(len(data))
        return real_from_bytes(cls, data, where=where)

    monkeypatch.setattr(S3Store, "read_object_and_etag", small_chunks)
    monkeypatch.setattr(success_module.SuccessData, "from_bytes", classmethod(from_bytes))
    old = read_object(backend.client, bucket, "t/_SUCCESS")
    job, refs = _job_of(backend, bucket, "t")
    report = job.commit(refs)
    assert seen == ["t/_SUCCESS"]
    assert decoded and max(decoded) < len(old) / 2, "the old _SUCCESS was decoded with its names"
    new = SuccessData.from_bytes.__func__(SuccessData, read_object(backend.client, bucket, "t/_SUCCESS"), where="t")
    assert new.job_id == report.job_id and new.position > 1 and len(new.filenames) == 30
