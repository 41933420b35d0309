"""Commit-time merge with the engine-neutral API: tasks stage small files, the driver merges them before
the commit, the journal (version 2) records the merged files, and recovery finishes exactly the same."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpcommit import Job, recover
from mpcommit.compaction import MergePolicy
from mpcommit.compaction.commit_merge import BinOutcome, StagingSink, merge_at_commit, plan_commit_merges
from mpcommit.errors import CommitStateUnknownError, ManifestCorruptError, ManifestVersionError, ProtocolError
from mpcommit.modes import PartitionOverwrite, WriteMode
from mpcommit.options import WriterSettings
from mpcommit.protocol import faults
from mpcommit.protocol.layout import Destination
from mpcommit.protocol.records.job import CommitJournal, MergedFile
from mpcommit.protocol.records.manifest import Part, PendingUpload
from mpcommit.sizing import MiB
from tests.support.checks import all_keys, pending_uploads, read_object, visible_keys
from tests.support.jobs import write_task

from .test_formats import lines_of, parquet_of

LIMIT = 5 * MiB  # files below this are staged (one part of the writer's schedule)
SETTINGS = WriterSettings(initial_part_size=LIMIT)


def staged(task, partition: str) -> StagingSink:  # noqa: ANN001
    """Task files go through staging sinks: small ones are staged, for the commit-time merge."""
    return StagingSink(task, partition, "json", limit=LIMIT)


def ids_under(backend, bucket: str, prefix: str) -> list[str]:
    out = []
    for key in visible_keys(backend.client, bucket, prefix):
        out += [json.loads(l)["id"] for l in read_object(backend.client, bucket, key).splitlines() if l.strip()]
    return sorted(out)


def dataset(n_tasks: int = 3) -> dict[int, list[tuple[str, bytes]]]:
    """Per task, its (partition, JSON lines) files."""
    tasks = {}
    for t in range(n_tasks):
        tasks[t] = [(p, lines_of(f"{p}-{t}", 2000 + t, seed=t)) for p in ("dt=1", "dt=2")]
    big = lines_of("big", LIMIT + 1000, seed=99)  # over one part: a multipart upload, counted, never merged
    tasks[0].append(("dt=1", big))
    return tasks


def expected_ids(tasks) -> list[str]:
    return sorted(json.loads(l)["id"] for files in tasks.values() for _p, d in files for l in d.splitlines())


def test_staging_sink_stages_small_files_and_streams_big_ones(backend, bucket) -> None:
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    with job.spec.task(0) as task:
        small = StagingSink(task, "p=1", "json", limit=LIMIT)
        small.write(b'{"id": "a"}\n')
        small.rows = 1
        small.close()
        big = StagingSink(task, "p=1", "json", limit=LIMIT)
        big.write(b"x" * (LIMIT + 1))
        big.close()
        dropped = StagingSink(task, "p=1", "json", limit=LIMIT)
        dropped.write(b"y" * (LIMIT + 1))
        dropped.abort()
        result = task.commit()
    assert small.staged and not big.staged
    m = result.manifest
    assert [s.rows for s in m.staged] == [1] and len(m.uploads) == 1 and m.uploads[0].size == LIMIT + 1
    assert len(pending_uploads(backend.client, bucket, "t")) == 1  # the dropped one was aborted
    job.commit([result])
    assert len(visible_keys(backend.client, bucket, "t")) == 2


def test_small_partitions_are_merged_before_anything_is_visible(backend, bucket) -> None:
    tasks = dataset()
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    results = [write_task(job, t, files, open_file=staged) for t, files in tasks.items()]
    merges = merge_at_commit(job, results, MergePolicy(small_file_avg=4 * MiB, target_size=64 * MiB))
    # dt=1 has a big file too, but its average is still small; both partitions merge their staged files
    assert len(merges.merged) == 2 and merges.source_files == 6 and not merges.skipped
    assert visible_keys(backend.client, bucket, "t") == set(), "nothing visible before the commit"
    report = job.commit(results, merged=merges.merged)
    keys = visible_keys(backend.client, bucket, "t")
    assert len(keys) == 3 and set(report.filenames) == keys  # two merged files and the big one
    assert ids_under(backend, bucket, "t") == expected_ids(tasks)
    assert report.rows == len(expected_ids(tasks))
    assert {m.upload.key for m in merges.merged} <= keys
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not [k for k in all_keys(backend.client, bucket, "t") if "/_temporary/" in k]


def test_large_average_partitions_are_moved_in_as_they_are(backend, bucket) -> None:
    tasks = dataset()
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    results = [write_task(job, t, files, open_file=staged) for t, files in tasks.items()]
    merges = merge_at_commit(job, results, MergePolicy(small_file_avg=2000, target_size=64 * MiB))
    assert merges.merged == ()
    job.commit(results, merged=merges.merged)
    assert len(visible_keys(backend.client, bucket, "t")) == 7
    assert ids_under(backend, bucket, "t") == expected_ids(tasks)


def test_a_bin_that_fails_is_moved_in_unmerged(backend, bucket) -> None:
    tasks = dataset(2)
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    results = [write_task(job, t, files, open_file=staged) for t, files in tasks.items()]

    def failing_runner(jobs):
        return [BinOutcome(j.key, None, "boom") for j in jobs]

    merges = merge_at_commit(job, results, MergePolicy(4 * MiB, 64 * MiB), runner=failing_runner)
    assert merges.merged == () and len(merges.skipped) == 2
    job.commit(results, merged=merges.merged)
    assert ids_under(backend, bucket, "t") == expected_ids(tasks)

    job2 = Job.create(f"s3://{bucket}/u", s3=backend.options, writer=SETTINGS)
    results2 = [write_task(job2, t, files, open_file=staged) for t, files in tasks.items()]

    def broken_stage(jobs):
        raise RuntimeError("executor lost")

    merges2 = merge_at_commit(job2, results2, MergePolicy(4 * MiB, 64 * MiB), runner=broken_stage)
    assert merges2.merged == () and all("executor lost" in why for _k, why in merges2.skipped)
    job2.commit(results2)
    assert ids_under(backend, bucket, "u") == expected_ids(tasks)


def test_parquet_staged_files_are_rewritten(backend, bucket) -> None:
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    results = []
    for t in range(4):
        with job.spec.task(t) as task:
            task.stage("", "snappy.parquet", parquet_of(t * 100, 100, compression="snappy"), rows=100)
            results.append(task.commit())
    merges = merge_at_commit(job, results, MergePolicy())
    job.commit(results, merged=merges.merged)
    (key,) = visible_keys(backend.client, bucket, "t")
    table = pq.read_table(pa.BufferReader(read_object(backend.client, bucket, key)))
    assert sorted(table.column("id").to_pylist()) == list(range(400))


# ------------------------------------------------------------------ crashes and recovery
@pytest.mark.parametrize("point", ["commit.after_journal", "commit.after_complete", "commit.before_success",
                                   "commit.during_cleanup"])
@pytest.mark.ci_on("localstack")
def test_crash_after_the_journal_then_recover(backend, bucket, point: str) -> None:
    tasks = dataset()
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    results = [write_task(job, t, files, open_file=staged) for t, files in tasks.items()]
    merges = merge_at_commit(job, results, MergePolicy(4 * MiB, 64 * MiB))
    with faults.installed(faults.fail_at(point, 1)):
        with pytest.raises((CommitStateUnknownError, faults.InjectedFault)):
            job.commit(results, merged=merges.merged)
    recover(f"s3://{bucket}/t", s3=backend.options)
    keys = visible_keys(backend.client, bucket, "t")
    assert keys == {m.upload.key for m in merges.merged} | {
        u.key for r in results for u in r.manifest.uploads}, "exactly the merged files and the big one"
    assert ids_under(backend, bucket, "t") == expected_ids(tasks)
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not [k for k in all_keys(backend.client, bucket, "t") if "/_temporary/" in k]


def test_driver_dies_before_the_journal_then_rollback(backend, bucket) -> None:
    tasks = dataset(2)
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    results = [write_task(job, t, files, open_file=staged) for t, files in tasks.items()]
    merges = merge_at_commit(job, results, MergePolicy(4 * MiB, 64 * MiB))
    assert merges.merged and pending_uploads(backend.client, bucket, "t")
    # the driver is gone: nothing journaled; a rollback aborts the merges too (their keys carry the job id)
    (action,) = recover(f"s3://{bucket}/t", s3=backend.options, job_id=job.job_id)
    assert action.action == "rolled_back"
    assert pending_uploads(backend.client, bucket, "t") == [] and all_keys(backend.client, bucket, "t") == set()


# ------------------------------------------------------------------ validation and the journal record
def test_commit_refuses_merges_that_do_not_match_the_winners(backend, bucket) -> None:
    tasks = dataset(2)
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SETTINGS)
    results = [write_task(job, t, files, open_file=staged) for t, files in tasks.items()]
    merges = merge_at_commit(job, results, MergePolicy(4 * MiB, 64 * MiB))
    m = merges.merged[0]
    stranger = MergedFile(m.upload, m.sources + (m.sources[0].replace("c000", "c099"),))
    with pytest.raises(ProtocolError, match="not a staged file"):
        job.commit(results, merged=[stranger, *merges.merged[1:]])
    assert visible_keys(backend.client, bucket, "t") == set()
    (action,) = recover(f"s3://{bucket}/t", s3=backend.options, job_id=job.job_id)  # not committed: roll back
    assert action.action == "rolled_back"
    assert pending_uploads(backend.client, bucket, "t") == [] and all_keys(backend.client, bucket, "t") == set()


def _journal(merged=()) -> CommitJournal:
    return CommitJournal(job_id=JOB, bucket="b", prefix="t", mode=WriteMode.APPEND,
                         partition_overwrite=PartitionOverwrite.STATIC, started_ms=1,
                         winners=(f"t/_temporary/mpcommit/{JOB}/tasks/task-00000-a0-x.json",), merged=tuple(merged))


JOB = "123e4567-e89b-42d3-a456-426614174000"
DEST = Destination("b", "t")


def _merged(key: str = f"t/part-00000-{JOB}.c000.json", sources=(f"t/part-00000-{JOB}.c000.json",)) -> MergedFile:
    return MergedFile(PendingUpload(key, "u1", (Part(1, '"e"', 10, "crc"),), 10, rows=3, partition=""), tuple(sources))


def test_journal_versions() -> None:
    plain = _journal()
    assert json.loads(plain.to_bytes())["version"] == 1  # unchanged for commits without merges
    assert CommitJournal.from_bytes(plain.to_bytes(), where="x", destination=DEST, job_id=JOB) == plain
    with_merges = _journal([_merged()])
    doc = json.loads(with_merges.to_bytes())
    assert doc["version"] == 2 and doc["merged"][0]["sources"] == [f"t/part-00000-{JOB}.c000.json"]
    assert CommitJournal.from_bytes(with_merges.to_bytes(), where="x", destination=DEST, job_id=JOB) == with_merges
    doc["version"] = 1
    with pytest.raises(ManifestCorruptError, match="version 1"):
        CommitJournal.from_bytes(json.dumps(doc).encode(), where="x", destination=DEST, job_id=JOB)
    doc["version"] = 4
    with pytest.raises(ManifestVersionError):
        CommitJournal.from_bytes(json.dumps(doc).encode(), where="x", destination=DEST, job_id=JOB)


@pytest.mark.parametrize("bad", [
    _merged(key="elsewhere/part-00000-x.json"),
    _merged(key=f"t/_hidden/part-00000-{JOB}.c000.json"),
    _merged(key="t/part-00000-223e4567-e89b-42d3-a456-426614174000.c000.json"),
    _merged(sources=("t/somebody-elses.json",)),
    _merged(sources=()),
])
def test_journal_refuses_merges_outside_the_job(bad: MergedFile) -> None:
    doc = json.loads(_journal([_merged()]).to_bytes())
    doc["merged"] = [bad.to_json()]
    with pytest.raises(Exception, match="refused|no sources"):
        CommitJournal.from_bytes(json.dumps(doc).encode(), where="x", destination=DEST, job_id=JOB)


def test_plan_commit_merges_counts_uploads_but_merges_only_staged() -> None:
    from mpcommit.options import S3Options
    from mpcommit.protocol.records.manifest import StagedFile, TaskManifest

    staged = tuple(StagedFile(f"t/p=1/part-0000{i}-{JOB}.c000.csv", f"t/_temporary/mpcommit/{JOB}/staged/x/{i}",
                              100, f'"e{i}"', rows=2, partition="p=1") for i in range(3))
    upload = PendingUpload(f"t/p=1/part-00009-{JOB}.c000.csv", "u", (Part(1, '"e"', 10**6),), 10**6, partition="p=1")
    m = TaskManifest(JOB, "b", "t", 0, 0, "n", 1, uploads=(upload,), staged=staged)
    (job,) = plan_commit_merges([m], MergePolicy(small_file_avg=10**6, target_size=10**7), s3=S3Options(), csv_header=True)
    assert job.final_keys == tuple(s.key for s in staged) and job.key == staged[0].key
    assert [s.key for s in job.sources] == [s.staged_key for s in staged] and job.rows == 6
    assert job.kind.header is True
    assert plan_commit_merges([m], MergePolicy(small_file_avg=10**5, target_size=10**7), s3=S3Options()) == []
