"""The job inventory: `jobs list` (the jobs of one destination) and `uploads abort` (the jobs owning pending
uploads found under any prefix) read one and the same status for a job, whatever its state (invariant I6
depends on their agreeing). Protocol logic: moto only."""

from __future__ import annotations

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError
from mpcommit.modes import JobState
from mpcommit.operations.uploads import UploadScope, list_uploads
from mpcommit.protocol import faults
from mpcommit.protocol.inventory import find_owning_jobs, list_jobs


def _write(job: Job, task_id: int, partition: str, attempt: int = 0):
    with job.spec.task(task_id, attempt) as task:
        with task.create(partition=partition, ext="txt") as out:
            out.write(f"{job.job_id} {task_id}\n".encode())
        return task.commit()


def test_jobs_list_and_the_owners_of_pending_uploads_agree_on_every_state(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket("mpc-inventory")
    uri = f"s3://{bucket}/t"

    committed = Job.create(uri, s3=backend.options)
    zombie = committed.spec.task(0, 0)  # started before the commit, writes after it: a pending upload remains
    committed.commit([_write(committed, 0, "dt=1", attempt=1)])
    with zombie:
        with zombie.create(partition="dt=1", ext="txt") as out:
            out.write(b"zombie\n")
        zombie.commit()

    committing = Job.create(uri, s3=backend.options)
    result = _write(committing, 0, "dt=2")
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(CommitStateUnknownError):
        committing.commit([result])

    writing = Job.create(uri, s3=backend.options)
    _write(writing, 0, "dt=3")

    store = writing.store
    listed = {s.job_id: s for s in list_jobs(store, writing.destination)}
    assert {j: s.state for j, s in listed.items()} == {
        committed.job_id: JobState.COMMITTED, committing.job_id: JobState.COMMITTING, writing.job_id: JobState.WRITING,
    }
    # A scope that is one partition of the table finds the jobs by their records above it, just the same.
    for scope in (f"s3://{bucket}/t", f"s3://{bucket}/t/dt=2"):
        uploads = list_uploads(store, UploadScope.parse(scope), sizes=False)
        owners = find_owning_jobs(store, bucket, uploads, threads=4)
        assert owners and set(owners) == {u.job_id for u in uploads}
        for job_id, owner in owners.items():
            mine = listed[job_id]
            assert (owner.destination, owner.state, owner.records, owner.created_ms, owner.mode) == \
                (mine.destination, mine.state, mine.records, mine.created_ms, mine.mode)
