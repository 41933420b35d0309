"""The commit protocol against real servers (moto and LocalStack), checked with an independent client.

Each test writes through mpcommit and then looks only at what a reader of the bucket sees: visible keys,
their bytes, and the multipart uploads still pending.
"""

from __future__ import annotations

import pytest

from mpcommit import Job
from mpcommit.errors import (
    CommitStateUnknownError,
    DestinationExistsError,
    DuplicateTaskResultError,
    JobStateError,
    ManifestError,
)
from mpcommit.modes import CommitOutcome
from mpcommit.options import WriterSettings
from mpcommit.protocol import faults
from mpcommit.protocol.inventory import list_jobs
from mpcommit.protocol.recovery import recover
from mpcommit.sizing import MiB
from tests.support.checks import all_keys, pending_uploads, read_object, visible_keys
from tests.support.jobs import write_task

SMALL_PARTS = WriterSettings(initial_part_size=5 * MiB, max_parts_in_flight=2, upload_threads=2)


def contents(backend, bucket, prefix):
    return {k: read_object(backend.client, bucket, k) for k in visible_keys(backend.client, bucket, prefix)}


def test_nothing_is_visible_after_task_commit(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    write_task(job, 0, {"dt=1": b"a\n"})
    assert visible_keys(backend.client, bucket, "t") == set()
    assert len(pending_uploads(backend.client, bucket, "t")) == 1


def test_exact_content_after_job_commit(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SMALL_PARTS)
    big = bytes(range(256)) * (48 * 1024)  # 12 MiB: three parts at 5 MiB
    refs = [
        write_task(job, 0, {"dt=1": b"one\n", "dt=2": b"two\n"}),
        write_task(job, 1, {"dt=1": big}),
        write_task(job, 2, {"": b""}),  # a zero-byte file
    ]
    report = job.commit(refs)
    assert report.outcome is CommitOutcome.COMMITTED
    seen = contents(backend, bucket, "t")
    assert sorted(seen.values()) == sorted([b"one\n", b"two\n", big, b""])
    assert all(job.job_id in k for k in seen)
    assert set(report.filenames) == set(seen)
    assert report.bytes == sum(map(len, seen.values()))
    assert report.partitions == ("dt=1", "dt=2")
    assert pending_uploads(backend.client, bucket, "t") == []
    # The hidden prefix is gone; _SUCCESS names exactly the committed files.
    from mpcommit.protocol.records.success import SuccessData

    success = SuccessData.from_bytes(read_object(backend.client, bucket, "t/_SUCCESS"), where="test")
    assert success.job_id == job.job_id and set(success.filenames) == set(seen)
    assert not any(k.startswith("t/_temporary/") for k in _all(backend, bucket, "t"))


def _all(backend, bucket, prefix):
    from tests.support.checks import all_keys

    return all_keys(backend.client, bucket, prefix)


def test_two_committed_attempts_of_one_task_only_the_chosen_one_is_visible(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    first = write_task(job, 0, {"dt=1": b"attempt zero\n"})
    second = write_task(job, 0, {"dt=1": b"attempt one\n"}, attempt=1)
    report = job.commit([second])
    assert list(contents(backend, bucket, "t").values()) == [b"attempt one\n"]
    assert report.aborted_uploads >= 1
    assert pending_uploads(backend.client, bucket, "t") == []
    assert first.manifest_key != second.manifest_key


def test_an_attempt_that_wrote_but_never_committed_is_aborted(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    write_task(job, 0, {"dt=1": b"crashed\n"}, commit=False)
    winner = write_task(job, 0, {"dt=1": b"retried\n"}, attempt=1)
    assert len(pending_uploads(backend.client, bucket, "t")) == 2
    job.commit([winner])
    assert list(contents(backend, bucket, "t").values()) == [b"retried\n"]
    assert pending_uploads(backend.client, bucket, "t") == []


def test_an_exception_inside_the_task_aborts_its_uploads(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    with pytest.raises(RuntimeError, match="boom"):
        with job.spec.task(0, 0) as task:
            with task.create(partition="dt=1", ext="txt") as out:
                out.write(b"partial")
            with task.create(partition="dt=2", ext="txt") as out:
                out.write(b"partial")
                raise RuntimeError("boom")
    assert pending_uploads(backend.client, bucket, "t") == []


def test_abort_with_work_leaves_nothing(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    write_task(job, 0, {"dt=1": b"x\n"})
    write_task(job, 1, {"dt=1": b"y\n"}, commit=False)
    report = job.abort()
    assert report.aborted_uploads == 2
    assert _all(backend, bucket, "t") == set()
    assert pending_uploads(backend.client, bucket, "t") == []


def test_abort_without_work_and_double_abort(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    assert job.abort().aborted_uploads == 0
    again = Job.open(f"s3://{bucket}/t", job.job_id, s3=backend.options) if _all(backend, bucket, "t") else None
    assert again is None  # the first abort removed the job's records
    assert job.abort().aborted_uploads == 0  # aborting again is harmless
    assert _all(backend, bucket, "t") == set()


def test_commit_after_abort_is_refused(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ref = write_task(job, 0, {"": b"x"})
    job.abort()
    with pytest.raises(JobStateError, match="was already aborted; create a new job"):
        job.commit([ref])
    assert visible_keys(backend.client, bucket, "t") == set()


def test_a_second_commit_is_refused_in_plain_words(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ref = write_task(job, 0, {"": b"x"})
    job.commit([ref])
    with pytest.raises(JobStateError, match="was already committed; create a new job"):
        job.commit([ref])


def test_a_result_passed_twice_for_one_task_is_refused_and_nothing_happens(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    a = write_task(job, 0, {"": b"a"})
    b = write_task(job, 0, {"": b"b"}, attempt=1)
    with pytest.raises(DuplicateTaskResultError, match="task 0"):
        job.commit([a, b])
    assert visible_keys(backend.client, bucket, "t") == set()
    assert len(pending_uploads(backend.client, bucket, "t")) == 2  # nothing aborted either


@pytest.mark.parametrize("k", [1, 3])
def test_commit_failing_midway_then_recover_equals_an_uninterrupted_commit(backend, bucket, k):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, commit_threads=1)
    refs = [write_task(job, t, {f"dt={t % 2}": f"task {t}\n".encode()}) for t in range(5)]
    write_task(job, 0, {"dt=0": b"loser\n"}, attempt=1)
    with faults.installed(faults.fail_at("commit.after_complete", k)):
        with pytest.raises(CommitStateUnknownError, match="recover"):
            job.commit(refs)
    assert [s.state.value for s in list_jobs(job.store, job.destination)] == ["committing"]
    actions = recover(job.destination, store=job.store)
    assert [a.action for a in actions] == ["finished"]
    assert sorted(contents(backend, bucket, "t").values()) == sorted(f"task {t}\n".encode() for t in range(5))
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not any("_temporary" in k for k in _all(backend, bucket, "t"))


def _seed(backend, bucket, prefix, files):
    for key, data in files.items():
        backend.client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=data)


def test_overwrite_replaces_everything_only_after_the_new_files_are_complete(backend, bucket):
    _seed(backend, bucket, "t", {"dt=1/old.txt": b"old1", "dt=2/old.txt": b"old2"})
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    ref = write_task(job, 0, {"dt=1": b"new1"})
    with faults.installed(faults.fail_at("commit.before_delete_batch", 1)):
        with pytest.raises(CommitStateUnknownError):
            job.commit([ref])
    # I5: the old data is still whole when the commit fails before deleting it.
    seen = contents(backend, bucket, "t")
    assert {b"old1", b"old2", b"new1"} == set(seen.values())
    recover(job.destination, store=job.store)
    assert set(contents(backend, bucket, "t").values()) == {b"new1"}


def test_overwrite_looks_at_the_old_data_while_completing_and_deletes_only_after(backend, bucket, monkeypatch):
    """The overwrite's first listing of the replaced scope runs beside the completes (not after them), and the
    old files still go only once every new file is complete (I5)."""
    import threading
    import time

    _seed(backend, bucket, "t", {"dt=1/old.txt": b"old1", "dt=2/old.txt": b"old2"})
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    refs = [write_task(job, t, {f"dt={t}": b"new%d" % t}) for t in range(4)]
    events: list[tuple[str, float]] = []
    lock = threading.Lock()
    store = job.store
    complete, start_complete, list_objects, delete_objects = (
        store.complete_multipart_upload, store.start_complete, store.list_objects, store.delete_objects)

    def slow_complete(*args, **kwargs):
        time.sleep(0.3)
        out = complete(*args, **kwargs)
        with lock:
            events.append(("completed", time.monotonic()))
        return out

    def slow_start(bucket_name, key, upload_id, parts, done):  # the CRT transport: started, answered later
        def completed(etag, error):
            with lock:
                events.append(("completed", time.monotonic()))
            done(etag, error)

        timer = threading.Timer(0.3, start_complete, (bucket_name, key, upload_id, parts, completed))
        timer.start()
        return True

    def recording_list(bucket_name, prefix, *args, **kwargs):
        if prefix == "t/":
            with lock:
                events.append(("listed scope", time.monotonic()))
        return list_objects(bucket_name, prefix, *args, **kwargs)

    def recording_delete(*args, **kwargs):
        with lock:
            events.append(("delete", time.monotonic()))
        return delete_objects(*args, **kwargs)

    # On the instance, through monkeypatch: stores are shared between jobs of the same options.
    monkeypatch.setattr(store, "complete_multipart_upload", slow_complete)
    monkeypatch.setattr(store, "start_complete", slow_start)
    monkeypatch.setattr(store, "list_objects", recording_list)
    monkeypatch.setattr(store, "delete_objects", recording_delete)
    report = job.commit(refs)
    last_complete = max(t for e, t in events if e == "completed")
    scope_listings = [t for e, t in events if e == "listed scope"]
    # Before the journal (the listable check), beside the completes (the first look), after them (the decision).
    assert any(t < last_complete for t in scope_listings[1:]), events
    assert min(t for e, t in events if e == "delete") > last_complete
    assert report.deleted_objects == 2
    assert sorted(contents(backend, bucket, "t").values()) == [b"new0", b"new1", b"new2", b"new3"]


def test_an_overwrite_of_a_fresh_destination_lists_it_once_after_the_journal(backend, bucket, monkeypatch):
    """Nothing older in the scope at the first look: no second listing and no journal look-up after the
    completes (a first write pays for one listing of its own new files, not three)."""
    job = Job.create(f"s3://{bucket}/fresh", mode="overwrite", s3=backend.options)
    refs = [write_task(job, t, {f"dt={t}": b"new%d" % t}) for t in range(3)]
    calls: list[str] = []
    list_objects = job.store.list_objects

    def recording_list(bucket_name, prefix, *args, **kwargs):
        calls.append(prefix)
        return list_objects(bucket_name, prefix, *args, **kwargs)

    monkeypatch.setattr(job.store, "list_objects", recording_list)
    report = job.commit(refs)
    assert report.deleted_objects == 0 and len(report.filenames) == 3
    # The listable check before the journal, then the first look; no look for committing jobs.
    assert calls.count("fresh/") == 2, calls
    assert job.destination.hidden_root not in calls, calls
    assert sorted(contents(backend, bucket, "fresh").values()) == [b"new0", b"new1", b"new2"]


def test_dynamic_overwrite_replaces_only_the_partitions_written(backend, bucket):
    _seed(backend, bucket, "t", {"dt=1/old.txt": b"old1", "dt=2/old.txt": b"old2"})
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", partition_overwrite="dynamic", s3=backend.options)
    report = job.commit([write_task(job, 0, {"dt=1": b"new1", "dt=3": b"new3"})])
    assert report.deleted_objects == 1
    seen = contents(backend, bucket, "t")
    assert {k.split("/")[1]: v for k, v in seen.items()} == {"dt=1": b"new1", "dt=2": b"old2", "dt=3": b"new3"}


def test_dynamic_overwrite_failing_before_deletes_keeps_old_partition_whole(backend, bucket):
    _seed(backend, bucket, "t", {"dt=1/old.txt": b"old1"})
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", partition_overwrite="dynamic", s3=backend.options)
    ref = write_task(job, 0, {"dt=1": b"new1"})
    with faults.installed(faults.fail_at("commit.after_journal")):
        with pytest.raises(CommitStateUnknownError):
            job.commit([ref])
    assert read_object(backend.client, bucket, "t/dt=1/old.txt") == b"old1"
    recover(job.destination, store=job.store)
    assert set(contents(backend, bucket, "t").values()) == {b"new1"}


def test_an_overwrite_of_a_bucket_root_is_refused_unless_asked_for(backend, bucket):
    from mpcommit.errors import UsageError

    for key in ("other-table/part-0.txt", "t/x.txt"):
        backend.client.put_object(Bucket=bucket, Key=key, Body=b"keep me")
    for uri in (f"s3://{bucket}", f"s3://{bucket}/"):
        with pytest.raises(UsageError, match=r"root of the bucket.*every object in bucket.*other tables' data.*"
                                             r"overwrite_bucket_root=True") as info:
            Job.create(uri, mode="overwrite", s3=backend.options)
        assert "Nothing was written" in str(info.value)
    assert all_keys(backend.client, bucket) == {"other-table/part-0.txt", "t/x.txt"}, "not even a job record"

    # A dynamic overwrite of partition folders only replaces those; of files at the root, the whole bucket.
    job = Job.create(f"s3://{bucket}", mode="overwrite", partition_overwrite="dynamic", s3=backend.options)
    job.commit([write_task(job, 0, {"dt=1": b"new1"})])
    assert read_object(backend.client, bucket, "other-table/part-0.txt") == b"keep me"
    job = Job.create(f"s3://{bucket}", mode="overwrite", partition_overwrite="dynamic", s3=backend.options)
    with pytest.raises(UsageError, match="dynamic overwrite of unpartitioned data"):
        job.commit([write_task(job, 0, {"": b"root"})])
    job.abort()
    assert read_object(backend.client, bucket, "other-table/part-0.txt") == b"keep me"
    assert pending_uploads(backend.client, bucket, "") == []

    # Said explicitly, it does what an overwrite does: only the new data is left.
    job = Job.create(f"s3://{bucket}", mode="overwrite", s3=backend.options, overwrite_bucket_root=True)
    report = job.commit([write_task(job, 0, {"": b"only"})])
    assert {k for k in visible_keys(backend.client, bucket, "") if k != "_SUCCESS"} == set(report.filenames)


def test_error_mode_refuses_existing_destination_before_any_upload(backend, bucket):
    _seed(backend, bucket, "t", {"x.txt": b"x"})
    with pytest.raises(DestinationExistsError, match="already holds data"):
        Job.create(f"s3://{bucket}/t", mode="error", s3=backend.options)
    assert _all(backend, bucket, "t") == {"t/x.txt"}
    Job.create(f"s3://{bucket}/fresh", mode="errorifexists", s3=backend.options).abort()


def test_ignore_mode_on_existing_destination_commits_nothing(backend, bucket):
    _seed(backend, bucket, "t", {"x.txt": b"x"})
    job = Job.create(f"s3://{bucket}/t", mode="ignore", s3=backend.options)
    assert job.ignored
    report = job.commit([write_task(job, 0, {"": b"new"})])
    assert report.ignored and report.outcome is CommitOutcome.NOT_COMMITTED
    assert _all(backend, bucket, "t") == {"t/x.txt"}
    assert pending_uploads(backend.client, bucket, "t") == []


def test_two_jobs_on_one_destination_do_not_touch_each_others_uploads(backend, bucket):
    a = Job.create(f"s3://{bucket}/t", s3=backend.options)
    b = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ra = write_task(a, 0, {"dt=1": b"a\n"})
    write_task(b, 0, {"dt=1": b"b\n"})
    a.commit([ra])
    still = pending_uploads(backend.client, bucket, "t")
    assert len(still) == 1 and b.job_id in still[0][0]
    b.abort()
    assert list(contents(backend, bucket, "t").values()) == [b"a\n"]


def test_sibling_prefixes_are_independent(backend, bucket):
    one = Job.create(f"s3://{bucket}/data1", s3=backend.options)
    ten = Job.create(f"s3://{bucket}/data10", mode="overwrite", s3=backend.options)
    r10 = write_task(ten, 0, {"": b"ten"})
    r1 = write_task(one, 0, {"": b"one"})
    one.commit([r1])  # must not abort data10's pending upload
    assert len(pending_uploads(backend.client, bucket, "data10")) == 1
    ten.commit([r10])  # static overwrite of data10 must not delete data1's file
    assert list(contents(backend, bucket, "data1").values()) == [b"one"]
    assert list(contents(backend, bucket, "data10").values()) == [b"ten"]


def test_a_manifest_from_another_job_is_refused(backend, bucket):
    a = Job.create(f"s3://{bucket}/t", s3=backend.options)
    b = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ref_b = write_task(b, 0, {"": b"b"})
    with pytest.raises(ManifestError, match="job"):
        a.commit([ref_b])
    assert visible_keys(backend.client, bucket, "t") == set()


def test_a_tampered_manifest_is_refused_before_anything_is_completed(backend, bucket):
    import dataclasses

    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ref = write_task(job, 0, {"": b"x"})
    upload = ref.manifest.uploads[0]
    evil = dataclasses.replace(upload, key=f"other/part-00000-{job.job_id}.c000.txt")
    bad = dataclasses.replace(ref, manifest=dataclasses.replace(ref.manifest, uploads=(evil,)))
    with pytest.raises(ManifestError, match="outside"):
        job.commit([bad])
    assert visible_keys(backend.client, bucket, "") == set()
    assert len(pending_uploads(backend.client, bucket, "t")) == 1


def test_committing_n_files_costs_n_completes_and_a_bounded_number_of_other_calls(backend, bucket):
    from mpcommit.store.conditional import conditional_writes, forget_answers

    from mpcommit.options import OrderSettings

    # The driver's heartbeat beats on a thread of its own every few seconds; on a loaded machine one may land
    # in the counted window, so it beats once an hour here.
    job = Job.create(f"s3://{bucket}/t", s3=backend.options,
                     order=OrderSettings(heartbeat_seconds=3600, lease_seconds=7200))
    n = 40
    refs = [write_task(job, t, {"": b"%d" % t}) for t in range(n)]
    # The store's conditional writes are probed once per bucket and process: a handful of requests, once.
    forget_answers()
    job.store.reset_counts()
    assert conditional_writes(job.store, bucket, "t/").create_only
    probe = job.store.request_counts()
    assert sum(probe.values()) <= 8, probe
    job.store.reset_counts()
    job.commit(refs)
    counts = job.store.request_counts()
    assert counts.pop("complete_multipart_upload") == n
    # The commit of old: journal + _SUCCESS puts, task listing, upload listing, cleanup listing and deletes.
    # The table's commit order adds a constant four: its listing, the place (a put), the descriptor's HEAD after
    # the journal is claimed, the end of the place (a put), and _SUCCESS is read before it is replaced. The
    # finishing turn adds its put, and the fence one beat of the heartbeat with it (protocol/commit/fence.py).
    assert sum(counts.values()) <= 15, counts
    assert counts.get("get_object", 0) <= 1  # _SUCCESS only: inline manifests are not re-read


def test_a_missing_bucket_is_a_clear_error_before_anything_is_written(backend):
    from mpcommit.errors import NoSuchBucketError

    with pytest.raises(NoSuchBucketError, match="does not exist"):
        Job.create("s3://mpc-no-such-bucket-xyz/t", s3=backend.options)


def test_an_endpoint_nothing_listens_on_fails_at_once_and_says_so():
    import socket

    from mpcommit.errors import EndpointUnreachableError, TransientStoreError
    from mpcommit.options import RetryPolicy, S3Options
    from mpcommit.store.s3 import S3Store

    with socket.socket() as probe:  # a port nothing listens on: bound, then released
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = S3Options(endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1", access_key_id="a",
                        secret_access_key="b", retry=RetryPolicy(max_attempts=5, initial_delay=0.5, max_delay=1))
    store = S3Store(options)
    with pytest.raises(EndpointUnreachableError) as info:
        Job.create("s3://bkt/t", s3=options, store=store)
    message = str(info.value)
    assert not isinstance(info.value, TransientStoreError)
    assert store.request_counts() == {"head_bucket": 1}, "no retries on a connection refused by a fresh endpoint"
    assert message.count("could not reach the endpoint") == 1 and "connection refused" in message
    # The Python API's setting, not the command line's flag.
    assert f"http://127.0.0.1:{port}" in message and "S3Options(endpoint_url=...)" in message
    assert "--endpoint-url" not in message
    assert "slow down" not in message and "throttl" not in message and "max_attempts" not in message


def test_a_refused_commit_can_still_be_aborted(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    a = write_task(job, 0, {"": b"a"})
    b = write_task(job, 0, {"": b"b"}, attempt=1)
    with pytest.raises(DuplicateTaskResultError):
        job.commit([a, b])
    assert job.abort().aborted_uploads == 2
    assert pending_uploads(backend.client, bucket, "t") == []


def test_a_commit_of_unknown_outcome_cannot_be_aborted(backend, bucket):
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ref = write_task(job, 0, {"": b"a"})
    with faults.installed(faults.fail_at("commit.after_journal")):
        with pytest.raises(CommitStateUnknownError):
            job.commit([ref])
    with pytest.raises(JobStateError, match="recover"):
        job.abort()
    recover(job.destination, store=job.store)
    assert list(contents(backend, bucket, "t").values()) == [b"a"]


def test_a_commit_with_no_threads_runs_every_request_on_the_callers_thread(moto_backend, monkeypatch):
    """commit_threads=0: the commit context hands every step to the caller's thread, so a failure test can run
    the job commit serially; the result is the same commit."""
    import threading

    backend = moto_backend
    bucket = backend.new_bucket()
    old = Job.create(f"s3://{bucket}/t", s3=backend.options)
    old.commit([write_task(old, 0, {"dt=1": b"old\n"})])
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, commit_threads=0)
    refs = [write_task(job, t, {f"dt={t}": b"x\n" * (t + 1)}) for t in range(6)]
    store = job.store
    threads: set[int] = set()
    for name in ("complete_multipart_upload", "list_objects", "delete_objects", "list_multipart_uploads",
                 "get_object", "put_object", "head_object"):
        original = getattr(store, name)

        def spy(*args, __original=original, **kwargs):
            threads.add(threading.get_ident())
            return __original(*args, **kwargs)

        monkeypatch.setattr(store, name, spy)  # the store is shared by the session's tests: undone afterwards
    report = job.commit(refs)
    assert report.outcome is CommitOutcome.COMMITTED and report.files == 6
    assert threads == {threading.get_ident()}
    assert contents(backend, bucket, "t") == {k: read_object(backend.client, bucket, k) for k in report.filenames}



def test_an_overwrites_listings_hold_only_the_older_files(backend, bucket, monkeypatch):
    """The scope's listings keep page by page only what the overwrite acts on: the check before the journal
    keeps nothing (it only looks for other tables), the look for older files never holds the job's own files,
    which appear in the scope as they complete (a million of them would be held till the listing ended)."""
    from types import SimpleNamespace

    from mpcommit.protocol.commit.context import CommitContext
    from mpcommit.protocol.commit.replacing import Replacer

    old = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    old.commit([write_task(old, t, {f"dt={t}": b"old%d" % t}) for t in range(2)])
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    refs = [write_task(job, t, {f"dt={t}": b"new%d" % t}) for t in range(3)]
    returned: list[list[str]] = []
    list_objects = job.store.list_objects

    def recording_list(bucket_name, prefix, *args, **kwargs):
        found = list_objects(bucket_name, prefix, *args, **kwargs)
        if prefix == "t/":
            returned.append([o.key for o in found])
        return found

    monkeypatch.setattr(job.store, "list_objects", recording_list)
    report = job.commit(refs)
    assert report.deleted_objects == 2
    assert returned[0] == [], "the check before the journal held the scope's listing"
    # The look again now that the job's own files are all visible, as a look beside the last completes sees them.
    returned.clear()
    with CommitContext(4) as context:
        replacer = Replacer(job.store, job.destination, job.job_id, context, lambda *a: None)
        older = replacer.older_objects(SimpleNamespace(replace=("",)), SimpleNamespace(position=1),
                                       SimpleNamespace(jobs_after=lambda position: set()))
    assert older == [] and returned == [[]], returned
    assert sorted(contents(backend, bucket, "t").values()) == [b"new0", b"new1", b"new2"]
