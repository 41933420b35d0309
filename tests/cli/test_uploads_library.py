"""mpcommit.operations.uploads against moto, in process: live jobs are protected, vanished uploads are not errors,
cancelling stops cleanly. (moto reports every upload as initiated in 2010, so every upload is "old" here:
exactly the situation in which only the job records keep a live job's uploads alive.)"""

from __future__ import annotations

import threading

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError, JobStateError
from mpcommit.operations.uploads import AbortOutcome, UploadScope, cleanup, list_uploads
from mpcommit.protocol import faults
from mpcommit.protocol.recovery import recover
from mpcommit.store.s3 import S3Store
from tests.support.checks import pending_uploads, visible_keys
from tests.support.jobs import lines_of_partitions, write_task

from tests.support.cli import data_key, start_uploads

HOUR = 3600.0


def committing_job(uri: str, options) -> Job:  # noqa: ANN001
    """A job whose commit stopped right after its journal: its uploads are the data being committed."""
    job = Job.create(uri, s3=options)
    result = write_task(job, 0, lines_of_partitions(0, ["dt=1", "dt=2"]))
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(CommitStateUnknownError):
        job.commit([result])
    return job


def test_a_live_job_and_a_committing_job_survive_a_cleanup_of_their_prefix(moto_backend):
    backend, client = moto_backend, moto_backend.client
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    live = Job.create(uri, s3=backend.options)
    write_task(live, 0, lines_of_partitions(0, ["dt=1", "dt=2"]))
    stuck = committing_job(uri, backend.options)
    orphans = start_uploads(client, bucket, [data_key("t", partition="dt=1"), "t/not-from-mpcommit.bin"])
    sibling = start_uploads(client, bucket, [data_key("t2")])
    store = S3Store(backend.options)

    report = cleanup(store, UploadScope.parse(uri), older_than=HOUR)

    assert report.ok and not report.cancelled
    assert sorted((r.upload.key, r.upload.upload_id) for r in report.aborted) == sorted(orphans)
    protected = {p.upload.job_id: p.reason for p in report.plan.protected}
    assert set(protected) == {live.job_id, stuck.job_id}
    assert "may still be writing" in protected[live.job_id] and "jobs recover" in protected[stuck.job_id]
    left = set(pending_uploads(client, bucket, "t"))
    assert {k for k, _ in left} == {k for k, _ in left if live.job_id in k or stuck.job_id in k}
    assert len(left) == 4 and set(sibling) <= set(pending_uploads(client, bucket, "t2"))
    # The committing job's uploads were kept, so recover can still finish it.
    actions = recover(uri, store=store, job_id=stuck.job_id)
    assert [a.action for a in actions] == ["finished"], actions
    assert len([k for k in visible_keys(client, bucket, "t") if stuck.job_id in k]) == 2


def test_live_jobs_are_found_from_any_scope_above_or_below_their_destination(moto_backend):
    backend, client = moto_backend, moto_backend.client
    bucket = backend.new_bucket()
    live = Job.create(f"s3://{bucket}/warehouse/t1", s3=backend.options)
    write_task(live, 0, lines_of_partitions(0, ["dt=1/country=DE"]))
    store = S3Store(backend.options)
    for scope in (f"s3://{bucket}", f"s3://{bucket}/warehouse", f"s3://{bucket}/warehouse/t1/dt=1"):
        report = cleanup(store, UploadScope.parse(scope), older_than=HOUR, dry_run=True)
        assert report.plan.selected == () and len(report.plan.protected) == 1, scope
    assert len(pending_uploads(client, bucket, "warehouse")) == 1


def test_naming_a_job_aborts_it_even_if_live_but_never_a_committing_one(moto_backend):
    backend, client = moto_backend, moto_backend.client
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    live = Job.create(uri, s3=backend.options)
    write_task(live, 0, lines_of_partitions(0, ["dt=1", "dt=2"]))
    stuck = committing_job(uri, backend.options)
    store = S3Store(backend.options)
    with pytest.raises(JobStateError, match="jobs recover"):
        cleanup(store, UploadScope.parse(uri), job_id=stuck.job_id)
    report = cleanup(store, UploadScope.parse(uri), job_id=live.job_id)
    assert len(report.aborted) == 2 and report.ok
    assert {k for k, _ in pending_uploads(client, bucket, "t")} == {k for k, _ in pending_uploads(client, bucket, "t")
                                                                    if stuck.job_id in k}


def test_uploads_that_vanish_between_list_and_abort_are_reported_not_failed(moto_backend):
    backend, client = moto_backend, moto_backend.client
    bucket = backend.new_bucket()
    started = start_uploads(client, bucket, [f"t/f{i}" for i in range(6)], with_part=True)

    def another_cleaner_runs(plan) -> bool:  # noqa: ANN001 - called between planning and aborting
        assert plan.selected_bytes == 6 * 1000
        for key, upload_id in started[:2]:
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        return True

    report = cleanup(S3Store(backend.options), UploadScope.parse(f"s3://{bucket}/t"), older_than=60,
                     confirm=another_cleaner_runs)
    assert report.ok
    assert len(report.aborted) == 4 and report.bytes_freed == 4 * 1000
    assert sorted(r.upload.key for r in report.vanished) == ["t/f0", "t/f1"]
    assert pending_uploads(client, bucket, "t") == []


def test_a_job_that_starts_committing_after_the_plan_is_skipped(moto_backend):
    backend, client = moto_backend, moto_backend.client
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    job = Job.create(uri, s3=backend.options)
    write_task(job, 0, lines_of_partitions(0, ["dt=1"]))

    def commit_starts(plan) -> bool:  # noqa: ANN001
        # Selected as dead (threshold 0); then its driver writes the journal before we abort.
        assert [u.job_id for u in plan.selected] == [job.job_id]
        client.put_object(Bucket=bucket, Key=job.spec.paths.journal, Body=b"{}")
        return True

    report = cleanup(S3Store(backend.options), UploadScope.parse(uri), older_than=0.0, confirm=commit_starts)
    assert [r.outcome for r in report.results] == [AbortOutcome.SKIPPED]
    assert len(pending_uploads(client, bucket, "t")) == 1


def test_cancelling_stops_cleanly_and_reports_what_was_done(moto_backend):
    backend, client = moto_backend, moto_backend.client
    bucket = backend.new_bucket()
    start_uploads(client, bucket, [f"t/f{i:03d}" for i in range(150)])
    cancel = threading.Event()
    seen = []

    def on_result(result) -> None:  # noqa: ANN001
        seen.append(result)
        if len(seen) == 10:
            cancel.set()

    report = cleanup(S3Store(backend.options), UploadScope.parse(f"s3://{bucket}/t"), older_than=60, threads=2,
                     cancel=cancel, on_result=on_result)
    assert report.cancelled and not report.ok
    assert 10 <= len(report.aborted) < 150
    assert len(report.aborted) + len(report.not_done) == 150
    assert len(pending_uploads(client, bucket, "t")) == len(report.not_done)


def test_list_reports_parts_and_bytes_held(moto_backend):
    backend, client = moto_backend, moto_backend.client
    bucket = backend.new_bucket()
    key, upload_id = start_uploads(client, bucket, ["t/a"], with_part=True)[0]
    client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=2, Body=b"y" * 500)
    start_uploads(client, bucket, ["t/b"])
    found = list_uploads(S3Store(backend.options), UploadScope.parse(f"s3://{bucket}/t"))
    assert [(u.key, u.parts, u.bytes) for u in found] == [("t/a", 2, 1500), ("t/b", 0, 0)]
