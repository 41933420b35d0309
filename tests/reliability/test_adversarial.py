"""The adversarial review's ways to leave half a job, each reproduced and each now closed.

One job at a time and the project's own tools, acting on another scope than the job's (a partition, a parent
folder), trusting what a journal says, or on keys XML cannot carry. Each case is the review's script in test
form; docs/RELIABILITY.md lists them in its hostile-input table. The rollback racing a live commit (case 4) and
the reused job id (case 7) are in test_table_order.py, beside the commit order that closes them.
"""

from __future__ import annotations

import threading
import time

import orjson
import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError
from mpcommit.operations.uploads import UploadScope, cleanup
from mpcommit.options import OrderSettings
from mpcommit.protocol import faults
from mpcommit.protocol.layout import JobPaths, parse_uri
from mpcommit.protocol.recovery import RecoveryOutcome, recover
from mpcommit.store.s3 import S3Store
from tests.support.cli import cli
from tests.support.checks import pending_uploads
from tests.support.invariants import dataset

#: A driver that beats once, at creation: its job's liveness then rests on its uploads and records alone.
ONE_BEAT = OrderSettings(heartbeat_seconds=3600, lease_seconds=7200)


def write(job: Job, task_id: int, partition: str, text: str, *, commit: bool = True):  # noqa: ANN201
    with job.spec.task(task_id, 0) as task:
        with task.create(partition=partition, ext="csv") as out:
            out.write(text.encode())
        if not commit:
            task._uploads.clear()  # leave the upload pending, as a task still running would
            return None
        return task.commit()


def interrupted(backend, bucket: str, prefix: str, *, point: str = "commit.after_complete", index: int = 1) -> Job:
    """A job on ``prefix`` whose commit stopped at ``point``: it holds a journal (and maybe visible files)."""
    # Serial completes: the fault stops them after exactly ``index`` files, the rest still pending.
    job = Job.create(f"s3://{bucket}/{prefix}", s3=backend.options, commit_threads=0)
    refs = [write(job, t, f"dt={t % 2}", f"{t},x\n") for t in range(4)]
    with faults.installed(faults.fail_at(point, index)), pytest.raises(CommitStateUnknownError):
        job.commit(refs)
    return job


# ---------------------------------------------------------------- case 1
def test_a_partition_scoped_cleanup_judges_a_job_by_all_of_its_activity(localstack_backend):
    """A job wrote dt=1's file (closed, pending), then a few seconds later began dt=2's. A cleanup of only
    s3://B/t/dt=1 with an age under that gap once saw only the dt=1 upload and the old records, took the job for
    idle and aborted its dt=1 file: its commit then failed with dt=2 visible. The job's sign of life is now any of
    its uploads under its whole destination (and its driver's heartbeat). LocalStack: moto stamps every upload
    with one fixed date, so ages cannot be judged there.

    Margins: ages are judged by the store's clock, learnt from a Date header (1 s resolution, off by up to
    half the learning round trip), against stamps that may be whole seconds: up to ~2.5 s of error. A CI run
    under load once judged the just-begun dt=2 upload over 2 s old with a 3 s gap and a 2 s age; the gap (7 s)
    and the age (4 s) now leave that error on both sides."""
    backend = localstack_backend
    bucket = backend.new_bucket("mpc-adv")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, order=ONE_BEAT)
    with job.spec.task(0, 0) as task:
        with task.create(partition="dt=1", ext="csv") as out:
            out.write(b"1,x\n")
        time.sleep(7)
        late = task.create(partition="dt=2", ext="csv")  # its upload starts now
        late.write(b"2,y\n")
        store = S3Store(backend.options)
        report = cleanup(store, UploadScope.parse(f"s3://{bucket}/t/dt=1"), older_than=4)
        assert report.ok and not report.aborted, report.to_json()
        [kept] = report.plan.protected
        assert job.job_id in kept.reason and "may still be writing" in kept.reason
        late.close()
        ref = task.commit()
    job.commit([ref])
    assert sorted(dataset(backend.client, bucket, "t").values()) == [b"1,x\n", b"2,y\n"]


# ---------------------------------------------------------------- cases 2 and 3
@pytest.mark.parametrize("where", ["wh", "wh/t/dt=1"], ids=["parent", "partition"])
def test_jobs_abort_on_another_scope_refuses_a_committing_job(moto_backend, where):
    """`jobs abort s3://B/wh --job J` (a folder holding J's table) and `.../wh/t/dt=1` (a partition of it) used to
    look for J's records only under the URI given, find none, and abort J's pending uploads: 2 of 4 files
    visible for ever. Both now find J where its records are and refuse, as `jobs abort s3://B/wh/t` does."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-adv")
    job = interrupted(backend, bucket, "wh/t")
    before = (dataset(backend.client, bucket, "wh/t"), pending_uploads(backend.client, bucket, "wh/t"))
    result = cli(backend)("jobs", "abort", f"s3://{bucket}/{where}", "--job", job.job_id, "--yes")
    assert result.returncode == 1 and "is committing" in result.stderr and "Traceback" not in result.stderr, result
    assert (dataset(backend.client, bucket, "wh/t"), pending_uploads(backend.client, bucket, "wh/t")) == before
    [action] = recover(f"s3://{bucket}/wh/t", s3=backend.options)
    assert action.action is RecoveryOutcome.FINISHED
    assert len(dataset(backend.client, bucket, "wh/t")) == 4


def test_compact_on_a_folder_holding_a_table_is_refused_and_on_a_partition_spares_a_committing_job(moto_backend):
    """`compact s3://B/wh` merged (and deleted) an interrupted job's visible files in the table wh/t: recover then
    failed for ever. A folder holding another table is now refused by name; a partition of the table leaves
    the committing job's files alone."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-adv")
    done = Job.create(f"s3://{bucket}/wh/t", s3=backend.options)
    done.commit([write(done, t, "dt=1", f"old{t},o\n") for t in range(4)])
    job = interrupted(backend, bucket, "wh/t", index=3)  # 3 of its 4 files visible
    mpcommit = cli(backend)
    refused = mpcommit("compact", f"s3://{bucket}/wh")
    assert refused.returncode == 2 and "holds another table" in refused.stderr, refused
    assert f"s3://{bucket}/wh/t" in refused.stderr
    partition = mpcommit("compact", f"s3://{bucket}/wh/t/dt=1", "--json")
    assert partition.returncode == 0, partition
    merged = [s for b in partition.json()["bins"] for s in b["sources"]]
    assert merged and not any(job.job_id in key for key in merged)
    [action] = recover(f"s3://{bucket}/wh/t", s3=backend.options)
    assert action.action is RecoveryOutcome.FINISHED, action
    lines = sorted(l for v in dataset(backend.client, bucket, "wh/t").values() for l in v.decode().splitlines())
    assert lines == sorted([f"old{t},o" for t in range(4)] + [f"{t},x" for t in range(4)])


# ---------------------------------------------------------------- cases 5 and 6
def _rewrite(backend, bucket: str, key: str, change) -> None:  # noqa: ANN001
    obj = orjson.loads(backend.client.get_object(Bucket=bucket, Key=key)["Body"].read())
    change(obj)
    backend.client.put_object(Bucket=bucket, Key=key, Body=orjson.dumps(obj))


def test_a_journal_that_names_other_keys_to_delete_is_refused_and_deletes_nothing(moto_backend):
    """Job A's journal (a write) gains delete entries naming job B's journal and the table's _SUCCESS: `recover
    --job A` used to delete them. A write journal deletes no named objects, and no journal a hidden key."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-adv")
    first = Job.create(f"s3://{bucket}/t", s3=backend.options)
    first.commit([write(first, 0, "dt=0", "0,f\n")])
    b = interrupted(backend, bucket, "t", point="commit.after_journal")
    a = interrupted(backend, bucket, "t", point="commit.after_journal")
    b_journal = JobPaths(parse_uri(f"s3://{bucket}/t"), b.job_id).journal
    forged = [{"key": b_journal, "etag": '"x"'}, {"key": "t/_SUCCESS", "etag": '"x"'}]
    _rewrite(backend, bucket, JobPaths(a.destination, a.job_id).journal, lambda j: j.update(delete=forged))
    [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=a.job_id)
    assert action.action is RecoveryOutcome.FAILED and "deletes no named objects" in action.detail, action
    keys = {o["Key"] for o in backend.client.list_objects_v2(Bucket=bucket, Prefix="t/")["Contents"]}
    assert b_journal in keys and "t/_SUCCESS" in keys


def test_recover_validates_every_manifest_before_it_completes_anything(moto_backend):
    """Interrupted right after its journal (nothing visible); one of its stored manifests then has an unknown
    version. Recover used to complete the other files before reaching it -- partly visible for ever. Now it
    refuses before the first complete."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-adv")
    job = interrupted(backend, bucket, "t", point="commit.after_journal")
    manifests = [o["Key"] for o in backend.client.list_objects_v2(
        Bucket=bucket, Prefix=JobPaths(job.destination, job.job_id).tasks)["Contents"]]
    _rewrite(backend, bucket, sorted(manifests)[-1], lambda m: m.update(version=99))
    [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=job.job_id)
    assert action.action is RecoveryOutcome.FAILED and "version 99" in action.detail, action
    assert dataset(backend.client, bucket, "t") == {}
    assert len(pending_uploads(backend.client, bucket, "t")) == 4


# ---------------------------------------------------------------- case 8
def test_an_overwrite_replaces_keys_xml_cannot_carry(backend):
    """Another tool left t/old\\x01file.csv (S3 takes it in the URL); DeleteObjects cannot carry it in XML (500
    "not well-formed" on LocalStack, every retry), so the overwrite never finished. Such keys now go one by one."""
    bucket = backend.new_bucket("mpc-adv")
    key = "t/old\x01file.csv"
    backend.client.put_object(Bucket=bucket, Key=key, Body=b"old\n")
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    report = job.commit([write(job, 0, "dt=0", "new\n")])
    assert report.deleted_objects == 1
    assert list(dataset(backend.client, bucket, "t").values()) == [b"new\n"]


# ---------------------------------------------------------------- case 9
def test_lifecycle_keeps_the_buckets_transition_size_setting(localstack_backend):
    """PutBucketLifecycleConfiguration without TransitionDefaultMinimumObjectSize resets it to
    all_storage_classes_128K: other tenants' transitions of objects under 128 KB silently stopped. It is read
    and passed back now (LocalStack keeps the setting; moto ignores it)."""
    backend = localstack_backend
    bucket = backend.new_bucket("mpc-adv")
    backend.client.put_bucket_lifecycle_configuration(
        Bucket=bucket, TransitionDefaultMinimumObjectSize="varies_by_storage_class",
        LifecycleConfiguration={"Rules": [{"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
                                           "Expiration": {"Days": 30}}]})
    result = cli(backend)("lifecycle", bucket, "--abort-incomplete-days", "7")
    assert result.returncode == 0, result
    after = backend.client.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert after["TransitionDefaultMinimumObjectSize"] == "varies_by_storage_class"
    assert {r["ID"] for r in after["Rules"]} == {"logs", "mpcommit-abort-incomplete-multipart-uploads"}


# ---------------------------------------------------------------- near misses
def test_a_listing_that_returns_keys_outside_its_prefix_is_refused(moto_backend, monkeypatch):
    """A server that mis-decodes a prefix would hand an overwrite another table's keys to delete: every listed
    key is checked against the prefix asked for."""
    from mpcommit.errors import InconsistentListingError

    backend = moto_backend
    bucket = backend.new_bucket("mpc-adv")
    backend.client.put_object(Bucket=bucket, Key="t/a.csv", Body=b"a\n")
    store = S3Store(backend.options)
    real = store._client.list_objects_v2

    def stray(**params):  # noqa: ANN003, ANN202
        page = real(**params)
        page.setdefault("Contents", []).append({"Key": "other-table/b.csv", "Size": 1, "ETag": '"e"'})
        page["KeyCount"] = len(page["Contents"])
        return page

    monkeypatch.setattr(store._client, "list_objects_v2", stray)
    with pytest.raises(InconsistentListingError, match="not under the prefix"):
        store.list_objects(bucket, "t/")


def test_a_cleanup_host_whose_clock_runs_ahead_judges_ages_by_the_stores_clock(localstack_backend, monkeypatch):
    """Ages are measured against the store's clock (the Date of its answers): a host clock a day ahead no longer
    makes a fresh job's uploads look a day old. (LocalStack: a server in another process, on the true clock;
    moto's in-process server would share the shifted one.)"""
    backend = localstack_backend
    bucket = backend.new_bucket("mpc-adv")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    write(job, 0, "dt=0", "0,x\n", commit=False)
    store = S3Store(backend.options)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 86400)
    report = cleanup(store, UploadScope.parse(f"s3://{bucket}/t"), older_than=3600)
    assert not report.aborted and report.ok, report.to_json()
    assert len(pending_uploads(backend.client, bucket, "t")) == 1
    threading.Event().wait(0)  # the job object stays referenced until here (its heartbeat)
    assert job.job_id
