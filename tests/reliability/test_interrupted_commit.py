"""An interrupted commit next to an overwrite or a compaction of the same destination (found by the soak).

A job J whose driver died after completing some of its files is "committing": its journal says what to
finish, and ``recover`` finishes it by completing every winner upload again (an upload already completed is
recognised by its object's multipart ETag). If meanwhile an overwrite O replaced the destination, or a
compaction merged J's visible files, J's completed objects are gone: ``recover`` then took them for uploads
aborted by an orphan cleanup ("its data is lost") and failed for ever -- J stayed committing, part of its files
visible, the rest pending, its records never removed (the soak: 7 such jobs in 60 s).

What must happen instead: the jobs take effect in the order of their places in the table's commit order. J took
its place first, so an overwrite after it waits for it -- and, J's driver being dead (its heartbeat silent for a
lease), finishes J itself -- then replaces J's files with the rest; a compaction after it leaves J's files alone
(they are not its to merge while J is open) and ``recover`` finishes J.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpcommit import Job
from mpcommit.compaction.standalone import compact
from mpcommit.errors import CommitStateUnknownError
from mpcommit.options import OrderSettings
from mpcommit.protocol import faults
from mpcommit.protocol.commit import replacing
from mpcommit.protocol.recovery import recover
from tests.reliability import crash_driver as plan
from tests.support.checks import all_keys, pending_uploads
from tests.support.invariants import check_committed, dataset, job_records

DRIVER = Path(plan.__file__)
#: A commit order that notices a dead job within seconds (the defaults wait a minute).
QUICK = OrderSettings(heartbeat_seconds=0.5, lease_seconds=3.0, poll_seconds=0.2)
J_FILES = plan.expected({t: 0 for t in range(plan.TASKS)})  # what J commits: 6 files under t/dt=0 and t/dt=1


def _write(job: Job, task_id: int) -> object:
    with job.spec.task(task_id, 0) as task:
        with task.create(partition=f"dt={task_id % 2}", ext="txt") as out:
            out.write(f"{job.job_id[:8]} task {task_id}\n".encode())
        return task.commit()


def _files(job: Job, tasks: range) -> dict[str, bytes]:
    return {f"t/dt={t % 2}/part-{t:05d}-{job.job_id}.c000.txt": f"{job.job_id[:8]} task {t}\n".encode() for t in tasks}


def _interrupted(backend, bucket: str) -> str:
    """J (crash_driver's job, as an append) is SIGKILLed after completing the first of its 6 files."""
    env = {**os.environ, "MPCOMMIT_FAULT": "commit.after_complete:1:kill"}
    args = {"role": "job", "endpoint": backend.endpoint_url, "bucket": bucket, "mode": "append"}
    done = subprocess.run([sys.executable, str(DRIVER), json.dumps(args)], env=env, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    visible = [k for k in dataset(backend.client, bucket, "t") if plan.JOB_ID in k]
    assert len(visible) == 1, visible  # one of J's files visible, five pending
    return plan.JOB_ID


@pytest.mark.ci_on("localstack")
def test_an_overwrite_after_an_interrupted_commit_finishes_it_first_then_replaces_it(backend):
    bucket = backend.new_bucket("mpc-inter")
    backend.client.put_object(Bucket=bucket, Key="t/dt=0/old.txt", Body=b"old\n")
    j = _interrupted(backend, bucket)
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    report = o.commit([_write(o, 0)])
    assert report.timings["wait"] >= QUICK.lease_seconds  # it waited for J's heartbeat to fall silent
    # J first (finished by O, its records gone), then O: only O's file is left, nothing pending.
    check_committed(backend.client, bucket, "t", o.job_id, _files(o, range(1)))
    assert not job_records(backend.client, bucket, "t", j)
    assert recover(f"s3://{bucket}/t", s3=backend.options) == []


def test_a_compaction_leaves_an_interrupted_commit_whole_and_recover_finishes_it(backend):
    bucket = backend.new_bucket("mpc-inter")
    done = Job.create(f"s3://{bucket}/t", mode="append", s3=backend.options)
    done.commit([_write(done, t) for t in range(4)])  # two small files in each of dt=0 and dt=1
    j = _interrupted(backend, bucket)

    report = compact(f"s3://{bucket}/t", s3=backend.options)
    merged = {key for b in report.merged for key in b.sources}
    assert merged == set(_files(done, range(4))), "the compaction merged the finished job's files, not J's"

    actions = recover(f"s3://{bucket}/t", s3=backend.options)
    assert [(a.job_id, a.action) for a in actions] == [(j, "finished")], actions
    seen = dataset(backend.client, bucket, "t")
    assert {k: v for k, v in seen.items() if j in k} == J_FILES
    merged_lines = b"".join(v for k, v in seen.items() if j not in k).splitlines()
    assert sorted(merged_lines) == sorted(b"".join(_files(done, range(4)).values()).splitlines())
    assert pending_uploads(backend.client, bucket, "t") == [] and not job_records(backend.client, bucket, "t", j)


# ---------------------------------------------------------------- an interrupted compaction next to an overwrite
def _two_jobs_in_two_partitions(backend, bucket: str) -> list[Job]:
    jobs = []
    for _ in range(2):
        job = Job.create(f"s3://{bucket}/t", mode="append", s3=backend.options)
        job.commit([_write(job, t) for t in range(2)])  # task 0 -> dt=0, task 1 -> dt=1
        jobs.append(job)
    return jobs


def _lines(backend, bucket: str) -> list[bytes]:
    return sorted(b"".join(dataset(backend.client, bucket, "t").values()).splitlines())


@pytest.mark.ci_on("localstack")
@pytest.mark.parametrize("check", ["head", "list"])
@pytest.mark.parametrize("point", ["commit.after_journal", "commit.after_complete"])
def test_an_overwrite_between_an_interrupted_compaction_and_its_recovery(backend, point, check, monkeypatch):
    """The compaction of dt=0 and dt=1 is interrupted right after its journal (nothing merged visible yet) or after
    its completes (both merged files visible next to their sources); then a dynamic overwrite replaces dt=0 --
    its sources, and the merged file if visible. Recovery must neither resurrect dt=0's old rows (complete a
    merged file whose sources are gone) nor fail for ever on the merged file the overwrite deleted (it used to:
    dt=1 then kept its merged file *and* its sources, every row twice). ``check``: the sources' check before
    the completes by a HEAD each, or by a listing of each directory (what a directory of many sources gets)."""
    monkeypatch.setattr(replacing, "LIST_SOURCES_AT", 10**9 if check == "head" else 1)
    bucket = backend.new_bucket("mpc-inter")
    old = _two_jobs_in_two_partitions(backend, bucket)
    with faults.installed(faults.fail_at(point, 1)), pytest.raises(CommitStateUnknownError):
        compact(f"s3://{bucket}/t", s3=backend.options, bin_threads=1, threads=1)
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", partition_overwrite="dynamic", s3=backend.options,
                   order=QUICK)
    # The compaction holds the earlier place and its driver is gone: the overwrite finishes it, then replaces dt=0.
    o.commit([_write(o, 0)])

    actions = recover(f"s3://{bucket}/t", s3=backend.options)
    assert actions == [], actions
    # dt=0: only the overwrite's row; dt=1: the two old rows once each, in the merged file (sources deleted).
    want = sorted([f"{o.job_id[:8]} task 0".encode()] + [f"{j.job_id[:8]} task 1".encode() for j in old])
    assert _lines(backend, bucket) == want
    seen = dataset(backend.client, bucket, "t")
    assert not any(j.job_id in key for j in old for key in seen if key.startswith("t/dt=1/")), sorted(seen)
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not any(key.startswith("t/_temporary/") for key in all_keys(backend.client, bucket, "t"))
