"""The job commit with its completes spread over worker processes (``commit_processes``), on real servers."""

from __future__ import annotations

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError
from mpcommit.modes import CommitOutcome
from mpcommit.protocol.records.success import SuccessData
from tests.support.checks import pending_uploads, read_object, visible_keys
from tests.support.jobs import write_task


def test_completes_in_two_processes_commit_exactly_the_winners(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, commit_processes=2, commit_threads=4)
    refs = [write_task(job, t, {f"dt={t % 3}": f"task {t}\n".encode(), "": f"root {t}\n".encode()}) for t in range(6)]
    write_task(job, 0, {"dt=0": b"loser\n"}, attempt=1)  # a losing attempt: aborted, never visible
    report = job.commit(refs)
    assert report.outcome is CommitOutcome.COMMITTED and report.files == 12
    seen = {k: read_object(backend.client, bucket, k) for k in visible_keys(backend.client, bucket, "t")}
    assert set(report.filenames) == set(seen)
    assert sorted(seen.values()) == sorted([f"task {t}\n".encode() for t in range(6)] + [f"root {t}\n".encode() for t in range(6)])
    assert pending_uploads(backend.client, bucket, "t") == []
    success = SuccessData.from_bytes(read_object(backend.client, bucket, "t/_SUCCESS"), where="test")
    assert sorted(success.filenames) == sorted(seen) and success.rows == 12
    assert success.partition_stats is not None and success.partition_stats["dt=0"].files == 2


def test_a_failure_in_a_worker_process_leaves_the_outcome_unknown(backend, bucket):
    import dataclasses

    from mpcommit.options import RetryPolicy

    impatient = dataclasses.replace(backend.options, retry=RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.002))
    job = Job.create(f"s3://{bucket}/t", s3=impatient, commit_processes=2, commit_threads=2)
    refs = [write_task(job, t, {"": f"task {t}\n".encode()}) for t in range(3)]
    victim = refs[1].manifest.uploads[0]
    backend.client.abort_multipart_upload(Bucket=bucket, Key=victim.key, UploadId=victim.upload_id)
    with pytest.raises(CommitStateUnknownError, match="commit worker process failed|no longer pending"):
        job.commit(refs)
    assert "_SUCCESS" not in {k.rsplit("/", 1)[-1] for k in visible_keys(backend.client, bucket, "t")}
