"""The job commit's requests under its adaptive window, on every server (versitygw too: the proxy keeps the
client's signatures valid): many completes in flight from the committing thread alone (the CRT transport), and
SlowDown on completes, deletes and aborts absorbed by sending each refused request again -- once per refusal --
on either transport."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from mpcommit import Job, RetryPolicy
from mpcommit.modes import CommitOutcome
from tests.support.checks import pending_uploads, read_object, visible_keys
from tests.support.jobs import write_task
from tests.support.s3_network import NONE, Fault, FaultPlan, FaultRule, S3Network

QUICK = RetryPolicy(max_attempts=8, initial_delay=0.001, max_delay=0.01)


def test_the_commit_keeps_more_completes_in_flight_than_threads_without_a_thread_each(backend, monkeypatch):
    """commit_threads=2, yet the window grows past 2 while the store answers as fast as before: the completes
    are started from the committing thread and answered on the transport's own, not one thread each."""
    bucket = backend.new_bucket()
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, commit_threads=2)
    refs = [write_task(job, t, {f"dt={t % 3}/f={i}": b"x\n" for i in range(8)}) for t in range(10)]
    store = job.store
    start_complete = store.start_complete
    lock = threading.Lock()
    starters: set[int] = set()
    in_flight = most = 0

    def counting_start(bucket_name, key, upload_id, parts, done):
        nonlocal in_flight, most
        starters.add(threading.get_ident())

        def answered(etag, error):
            nonlocal in_flight
            with lock:
                in_flight -= 1
            # A store 20 ms away: an answer comes back on a timer thread, as on the transport's event loop.
            threading.Timer(0.02, done, (etag, error)).start()

        with lock:
            in_flight += 1
            most = max(most, in_flight)
        return start_complete(bucket_name, key, upload_id, parts, answered)

    monkeypatch.setattr(store, "start_complete", counting_start)
    report = job.commit(refs)
    assert report.outcome is CommitOutcome.COMMITTED and report.files == 80
    assert starters == {threading.get_ident()}
    assert most > 2, most
    assert pending_uploads(backend.client, bucket, "t") == []


@pytest.mark.ci_on("localstack", "versitygw")
@pytest.mark.parametrize("transport", ["crt", "boto3"])
def test_slowdowns_on_completes_deletes_and_aborts_are_absorbed_each_refused_request_sent_again(backend, transport):
    """An overwrite through a store that answers SlowDown to a third of its completes, DeleteObjects and aborts:
    committed as without it, every refused request sent again once per refusal, nothing else repeated."""
    bucket = backend.new_bucket()
    for i in range(30):
        backend.client.put_object(Bucket=bucket, Key=f"t/dt={i % 3}/old-{i}.txt", Body=b"old\n")
    slow_down = FaultRule(0.35, (Fault.SLOW_DOWN,))
    rules = {"CompleteMultipartUpload": slow_down, "DeleteObjects": slow_down, "AbortMultipartUpload": slow_down}
    faults = FaultPlan(rules, seed=7, max_consecutive=3)
    with S3Network(backend.endpoint_url, NONE, faults=faults, lifetime=300) as proxy:
        options = dataclasses.replace(backend.options, endpoint_url=proxy.endpoint_url, retry=QUICK,
                                      complete_transport=transport)
        job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=options, commit_threads=4)
        refs = [write_task(job, t, {f"dt={t % 3}/f={i}": b"new %d %d\n" % (t, i) for i in range(4)}) for t in range(10)]
        for t in range(10):  # a losing attempt of each task: its uploads are the leftovers to abort
            write_task(job, t, {f"dt={t % 3}/f={i}": b"loser\n" for i in range(3)}, attempt=1, commit=False)
        # Small DeleteObjects batches, so that the deletes are many requests too.
        import mpcommit.protocol.commit.replacing as replacing

        batch = replacing.DELETE_BATCH
        replacing.DELETE_BATCH = 4
        try:
            before = proxy.requests()
            report = job.commit(refs)
        finally:
            replacing.DELETE_BATCH = batch
        after, faulted = proxy.requests(), proxy.faulted()
        sent = {k: after[k] - before[k] for k in rules}
        refused = {k: faulted[k][Fault.SLOW_DOWN] for k in rules}
    assert report.outcome is CommitOutcome.COMMITTED and report.files == 40
    assert report.deleted_objects == 30 and report.aborted_uploads == 30
    assert all(refused[k] > 0 for k in rules), refused
    # One request per file and per leftover -- plus exactly one more per refusal. (DeleteObjects also removes the
    # job's records, outside the window: only its refusals are counted here.)
    assert sent["CompleteMultipartUpload"] == 40 + refused["CompleteMultipartUpload"]
    assert sent["AbortMultipartUpload"] == 30 + refused["AbortMultipartUpload"]
    seen = {k: read_object(backend.client, bucket, k) for k in visible_keys(backend.client, bucket, "t")}
    assert sorted(seen.values()) == sorted(b"new %d %d\n" % (t, i) for t in range(10) for i in range(4))
    assert pending_uploads(backend.client, bucket, "t") == []
