"""A job's in-line manifests are bounded (issue 25, driver memory): each task carries its manifest in its result
only within its share of the job's in-line budget, and the driver decodes in-line manifests only while the budget
lasts; every other result names its stored manifest, which the commit streams -- and the commit places exactly the
same files either way."""

from __future__ import annotations

import pytest

from mpcommit import Job
from mpcommit.errors import ManifestCorruptError
from mpcommit.modes import CommitOutcome
from mpcommit.protocol.records import manifest as manifest_module
from mpcommit.protocol.records.base import dumps, loads_object
from mpcommit.protocol.records.manifest import (INLINE_BUDGET_PARTS, INLINE_MAX_PARTS, InlineBudget, TaskResult,
                                                inline_parts_per_task)
from tests.support.checks import visible_keys
from tests.support.jobs import write_task


def test_a_tasks_share_of_the_budget():
    assert inline_parts_per_task(None) == INLINE_MAX_PARTS
    assert inline_parts_per_task(0) == INLINE_MAX_PARTS
    assert inline_parts_per_task(1) == INLINE_MAX_PARTS  # never more than one result may carry
    assert inline_parts_per_task(1_000) == INLINE_BUDGET_PARTS // 1_000 == 20
    assert inline_parts_per_task(10 * INLINE_BUDGET_PARTS) == 0  # only empty manifests then
    for tasks in (1, 7, 78, 79, 1_000, 10_000, 1_000_000):
        assert tasks * inline_parts_per_task(tasks) <= max(INLINE_BUDGET_PARTS, INLINE_MAX_PARTS)


def test_the_budget_is_spent_once():
    budget = InlineBudget(10)
    assert budget.take(4) and budget.take(6)
    assert not budget.take(1) and budget.take(0)
    assert budget.dropped == 1 and budget.left == 0


def test_a_task_carries_its_manifest_only_within_its_share(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    files = {f"dt={p}": b"x\n" for p in range(3)}  # three one-part files
    within = write_task(job, 0, files)
    assert within.manifest is not None  # the default share, 256 parts
    with job.spec.task(1, 0) as task:
        for p in range(3):
            out = task.create(f"dt={p}", "txt")
            out.write(b"y\n")
            out.close()
        beyond = task.commit(inline_parts=2)
    assert beyond.manifest is None and beyond.files == 3
    stored = backend.client.get_object(Bucket=bucket, Key=beyond.manifest_key)["Body"].read()
    assert len(loads_object(stored, what="m", where="t")["uploads"]) == 3  # named, and there in the store
    with job.spec.task(2, 0) as task:
        exactly = task.commit(inline_parts=0)  # an empty manifest costs nothing
    assert exactly.manifest is not None



def test_the_driver_decodes_in_line_manifests_while_its_budget_lasts(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    results = [write_task(job, t, {f"dt={p}": b"r\n" for p in range(4)}) for t in range(5)]  # 4 parts each
    assert all(r.manifest is not None for r in results)
    budget = InlineBudget(10)
    decoded = [TaskResult.from_bytes(r.to_bytes(), destination=job.destination, job_id=job.job_id, budget=budget)
               for r in results]
    assert [d.manifest is not None for d in decoded] == [True, True, False, False, False]
    assert budget.dropped == 3
    assert [d.manifest_key for d in decoded] == [r.manifest_key for r in results]
    assert [(d.files, d.rows, d.partitions) for d in decoded] == [(r.files, r.rows, r.partitions) for r in results]
    # Without a budget every in-line manifest is decoded, as before.
    assert all(TaskResult.from_bytes(r.to_bytes(), destination=job.destination, job_id=job.job_id).manifest
               for r in results)


def test_a_malformed_in_line_manifest_is_refused_while_there_is_room(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    result = write_task(job, 0, {"": b"r\n"})
    obj = loads_object(result.to_bytes(), what="r", where="t")
    obj["manifest"]["uploads"][0]["parts"] = "not a list"
    with pytest.raises(ManifestCorruptError):
        TaskResult.from_bytes(dumps(obj), destination=job.destination, job_id=job.job_id, budget=InlineBudget(10))


@pytest.mark.parametrize("budget", [0, 9, 10_000])
def test_a_commit_places_the_same_files_whatever_was_carried_in_line(backend, bucket, budget):
    job = Job.create(f"s3://{bucket}/b{budget}", s3=backend.options)
    results = [write_task(job, t, {f"dt={p}": f"{t}-{p}\n".encode() for p in range(3)}) for t in range(6)]
    spent = InlineBudget(budget)
    handed = [TaskResult.from_bytes(r.to_bytes(), destination=job.destination, job_id=job.job_id, budget=spent)
              for r in results]
    assert sum(h.manifest is None for h in handed) == {0: 6, 9: 3, 10_000: 0}[budget]
    report = job.commit(handed)
    assert report.outcome is CommitOutcome.COMMITTED and report.files == 18 and report.rows == 18
    keys = visible_keys(backend.client, bucket, f"b{budget}") - {f"b{budget}/_SUCCESS"}
    assert sorted(keys) == sorted(u.key for r in results for u in r.manifest.uploads)
    assert not backend.client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_the_budget_is_read_when_used(monkeypatch):
    monkeypatch.setattr(manifest_module, "INLINE_BUDGET_PARTS", 12)
    assert InlineBudget().left == 12 and inline_parts_per_task(4) == 3
