"""Persisted records: round trips and the refusals of invariant I7. Pure, no server."""

import dataclasses

import orjson
import pytest

from mpcommit.errors import ManifestCorruptError, ManifestScopeError, ManifestVersionError
from mpcommit.modes import PartitionOverwrite, WriteMode
from mpcommit.protocol.layout import JobPaths, new_job_id, parse_uri
from mpcommit.protocol.records import (
    CommitJournal,
    DeleteEntry,
    JobDescriptor,
    Part,
    PendingUpload,
    SuccessData,
    TaskManifest,
    TaskResult,
)

DEST = parse_uri("s3://bkt/table")
#: Fixed ids, so that the parametrized cases below are named the same in every process collecting them (xdist).
JOB = "d759644e-1568-430a-8670-b6416c279f1c"
OTHER_JOB = "a42877b8-0787-489b-acc8-14a56447aac3"


def upload(key=None, parts=(Part(1, '"%s"' % ("a" * 32), 3, "AAAAAA=="),), size=3):
    return PendingUpload(key=key or f"table/dt=1/part-00000-{JOB}.c000.csv", upload_id="u1", parts=parts, size=size, rows=1, partition="dt=1")


def manifest(**changes):
    m = TaskManifest(job_id=JOB, bucket="bkt", prefix="table", task_id=0, attempt=0, nonce="n", created_ms=1, uploads=(upload(),))
    return dataclasses.replace(m, **changes)


def load(m_or_bytes):
    data = m_or_bytes if isinstance(m_or_bytes, bytes) else m_or_bytes.to_bytes()
    return TaskManifest.from_bytes(data, where="test", destination=DEST, job_id=JOB)


def test_manifest_round_trip():
    m = manifest()
    assert load(m) == m


@pytest.mark.parametrize(
    "key,fragment",
    [
        (f"table/../other/part-00000-{JOB}.c000.csv", "outside"),
        (f"/table/part-00000-{JOB}.c000.csv", "outside"),
        (f"other/part-00000-{JOB}.c000.csv", "outside"),
        (f"table10/part-00000-{JOB}.c000.csv", "outside"),
        ("table/part-00000-notthejob.c000.csv", "does not carry job id"),
        (f"table/part-00000-{OTHER_JOB}.c000.csv", "does not carry job id"),
        (f"table/_temporary/mpcommit/{JOB}/x", "hidden"),
    ],
)
def test_keys_outside_the_destination_or_job_are_refused(key, fragment):
    with pytest.raises(ManifestScopeError, match=fragment):
        load(manifest(uploads=(upload(key=key),)))


def test_another_bucket_or_job_is_refused():
    with pytest.raises(ManifestScopeError, match="bucket"):
        load(manifest(bucket="other"))
    with pytest.raises(ManifestScopeError, match="belongs to job"):
        load(manifest(job_id=new_job_id()))


def test_unknown_version_is_refused():
    obj = orjson.loads(manifest().to_bytes())
    obj["version"] = 99
    with pytest.raises(ManifestVersionError, match="version 99"):
        load(orjson.dumps(obj))


@pytest.mark.parametrize("cut", [1, 10, 50, -1])
def test_truncated_json_is_refused(cut):
    data = manifest().to_bytes()
    with pytest.raises(ManifestCorruptError):
        load(data[:cut])


def test_wrong_types_and_duplicates_are_refused():
    obj = orjson.loads(manifest().to_bytes())
    obj["taskId"] = "seven"
    with pytest.raises(ManifestCorruptError, match="taskId"):
        load(orjson.dumps(obj))
    with pytest.raises(ManifestCorruptError, match="twice"):
        load(manifest(uploads=(upload(), upload())))
    gap = (Part(1, "e", 5 << 20), Part(3, "e", 1))
    with pytest.raises(ManifestCorruptError, match="without gaps"):
        load(manifest(uploads=(upload(parts=gap, size=(5 << 20) + 1),)))
    with pytest.raises(ManifestCorruptError, match="add up"):
        load(manifest(uploads=(upload(size=4),)))


def test_task_result_round_trip_with_inline_manifest():
    r = TaskResult(job_id=JOB, task_id=0, attempt=1, manifest_key=JobPaths(DEST, JOB).task_manifest(0, 1, "n"),
                   manifest=manifest(), files=1, bytes=3, rows=1, partitions=("dt=1",))
    assert TaskResult.from_bytes(r.to_bytes(), destination=DEST, job_id=JOB) == r


def test_journal_round_trip_and_scope():
    paths = JobPaths(DEST, JOB)
    j = CommitJournal(job_id=JOB, bucket="bkt", prefix="table", mode=WriteMode.OVERWRITE,
                      partition_overwrite=PartitionOverwrite.DYNAMIC, started_ms=5,
                      winners=(paths.task_manifest(0, 0, "n"),), replace=("dt=1",), position=7)
    assert CommitJournal.from_bytes(j.to_bytes(), where="t", destination=DEST, job_id=JOB) == j
    bad = dataclasses.replace(j, winners=("table/_temporary/mpcommit/other/tasks/x.json",))
    with pytest.raises(ManifestScopeError, match="not a manifest"):
        CommitJournal.from_bytes(bad.to_bytes(), where="t", destination=DEST, job_id=JOB)
    compaction = CommitJournal(job_id=JOB, bucket="bkt", prefix="table", mode=WriteMode.APPEND,
                               partition_overwrite=PartitionOverwrite.STATIC, started_ms=5,
                               winners=(paths.task_manifest(0, 0, "n"),), purpose="compact",
                               delete=(DeleteEntry("table/dt=1/old.csv", '"e"'),), position=8)
    assert CommitJournal.from_bytes(compaction.to_bytes(), where="t", destination=DEST, job_id=JOB) == compaction
    outside = dataclasses.replace(compaction, delete=(DeleteEntry("elsewhere/x", '"e"'),))
    with pytest.raises(ManifestScopeError, match="outside"):
        CommitJournal.from_bytes(outside.to_bytes(), where="t", destination=DEST, job_id=JOB)


@pytest.mark.parametrize("purpose, key, why", [
    # Only a compaction deletes named objects: a write job's journal that names one is forged.
    ("write", "table/dt=1/old.csv", "deletes no named objects"),
    # Another job's journal or the table's _SUCCESS are hidden keys, never data: deleting them could roll that
    # job back or hide a commit (the adversarial review's case 5).
    ("compact", "table/_temporary/mpcommit/0b9c5e8e-8a5e-4c1e-9b7e-1d2f3a4b5c6d/journal.json", "hidden key"),
    ("compact", "table/_SUCCESS", "hidden key"),
    ("compact", "table/_mpcommit/order/00000000000000000001", "hidden key"),
])
def test_a_journal_whose_delete_list_is_not_a_compactions_data_files_is_refused(purpose, key, why):
    forged = CommitJournal(job_id=JOB, bucket="bkt", prefix="table", mode=WriteMode.APPEND,
                           partition_overwrite=PartitionOverwrite.STATIC, started_ms=5,
                           winners=(JobPaths(DEST, JOB).task_manifest(0, 0, "n"),), purpose=purpose,
                           delete=(DeleteEntry(key, '"e"'),), position=3)
    with pytest.raises(ManifestScopeError, match=why):
        CommitJournal.from_bytes(forged.to_bytes(), where="t", destination=DEST, job_id=JOB)


def test_descriptor_round_trip():
    d = JobDescriptor(job_id=JOB, bucket="bkt", prefix="table", mode=WriteMode.APPEND,
                      partition_overwrite=PartitionOverwrite.STATIC, created_ms=1, hostname="h")
    assert JobDescriptor.from_bytes(d.to_bytes(), where="t", destination=DEST, job_id=JOB) == d
    with pytest.raises(ManifestScopeError):
        JobDescriptor.from_bytes(d.to_bytes(), where="t", destination=parse_uri("s3://bkt/other"), job_id=JOB)


def test_success_has_the_spec_fields():
    s = SuccessData(job_id=JOB, mode="append", filenames=("table/a",), bytes=3, rows=1, partitions=("dt=1",),
                    timings={"commit": 0.1}, hostname="h")
    obj = orjson.loads(s.to_bytes())
    for field in ("name", "committer", "timestamp", "date", "hostname", "jobId", "mode", "filenames", "files",
                  "bytes", "rows", "partitions", "timings"):
        assert field in obj
    assert obj["name"] == "mpcommit.SuccessData/1" and obj["committer"] == "mpcommit" and obj["files"] == 1
    assert SuccessData.from_bytes(s.to_bytes(), where="t") == s


def test_success_of_a_compaction_says_how_many_files_it_merged():
    s = SuccessData(job_id=JOB, mode="append", filenames=("table/m",), bytes=3, rows=1, partitions=(), purpose="compact",
                    merged_from=12)
    assert orjson.loads(s.to_bytes())["mergedFrom"] == 12
    assert SuccessData.from_bytes(s.to_bytes(), where="t") == s
    plain = SuccessData(job_id=JOB, mode="append", filenames=(), bytes=0, rows=0, partitions=())
    assert "mergedFrom" not in orjson.loads(plain.to_bytes())
    assert SuccessData.from_bytes(plain.to_bytes(), where="t").merged_from is None
