"""`jobs recover` reads each record it decides from once per job per decision (issue 37, item 6).

Every request of a recovery goes through the store's one funnel; these tests record the GETs there, by key, while
``recover`` finishes several interrupted commits, and count what each job's records cost.
"""

from __future__ import annotations

import time

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError
from mpcommit.options import OrderSettings
from mpcommit.protocol import faults
from mpcommit.protocol.commit import JobCommitter
from mpcommit.protocol.inventory import list_table_jobs
from mpcommit.protocol.layout import JobPaths, parse_uri, table_of
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol.recovery import _recover_one, recover
from mpcommit.protocol.records.job import CommitJournal
from mpcommit.store.s3 import S3Store
from tests.support.checks import visible_keys
from tests.support.invariants import job_records
from tests.support.jobs import write_task

#: Heartbeats that never beat inside the counted window (a loaded machine would add beats at random).
QUIET = OrderSettings(heartbeat_seconds=3600, lease_seconds=7200)


class Recording:
    """Every request the store sends, as (operation, key), in order."""

    def __init__(self, store: S3Store, monkeypatch: pytest.MonkeyPatch):
        self.requests: list[tuple[str, str]] = []
        call = store._call

        def recorded(operation, *args, **kwargs):
            self.requests.append((operation, kwargs.get("key", "")))
            return call(operation, *args, **kwargs)

        monkeypatch.setattr(store, "_call", recorded)

    def reads(self, key: str) -> int:
        return sum(1 for op, k in self.requests if op == "get_object" and k == key)

    def count(self, operation: str, key: str) -> int:
        return sum(1 for op, k in self.requests if op == operation and k == key)


def _interrupted_after_journal(backend, uri: str, n: int) -> list[Job]:
    """``n`` appends to one table, each of whose drivers failed right after claiming its journal."""
    jobs = []
    for i in range(n):
        job = Job.create(uri, s3=backend.options, order=QUIET, commit_threads=0)
        results = [write_task(job, t, {f"dt={t}": b"job %d task %d\n" % (i, t)}) for t in range(2)]
        with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(CommitStateUnknownError):
            job.commit(results)
        jobs.append(job)
    return jobs


def test_recover_reads_each_journaled_jobs_records_once(moto_backend, monkeypatch):
    bucket = moto_backend.new_bucket("mpc-reads")
    uri = f"s3://{bucket}/t"
    n = 3
    jobs = _interrupted_after_journal(moto_backend, uri, n)
    store = S3Store(moto_backend.options)
    recording = Recording(store, monkeypatch)

    actions = recover(uri, store=store, threads=0, order=QUIET)

    assert sorted((a.job_id, a.action) for a in actions) == sorted((j.job_id, "finished") for j in jobs), actions
    dest = parse_uri(uri)
    order = TableOrder(store, table_of(dest))
    for position, job in enumerate(jobs, start=1):
        paths = JobPaths(dest, job.job_id)
        # The journal is read and parsed once, by the listing that finds the job committing; the finisher,
        # once it holds the job's finishing turn, only asks whether that very journal is still there.
        assert recording.reads(paths.journal) == 1, (job.job_id, recording.requests)
        assert recording.reads(paths.descriptor) == 1
        # Its place in the order: its entry once; its end (not there yet, and an absence is never cached) asked
        # for twice -- by the turn as it is taken, and again after it, as a pause may lie between -- then written.
        assert recording.reads(order.entry_key(position)) == 1, recording.requests
        assert recording.reads(order.outcome_key(position)) == 2, recording.requests
        assert recording.count("put_object", order.outcome_key(position)) == 1
    assert len(visible_keys(moto_backend.client, bucket, "t")) == 2 * n  # every file of every job
    # The listing's, then two per finish: an end not yet there is judged against the order's checkpoint.
    assert recording.count("list_objects_v2", order.table.order_root) == 1 + 2 * n


def test_a_journal_listed_before_its_job_ended_elsewhere_is_only_tidied(moto_backend):
    """``recover`` acts on the journal its listing read: a job finished by another process since is found ended
    once the finisher holds its turn, reported so, and what that look left behind is removed."""
    bucket = moto_backend.new_bucket("mpc-reads")
    uri = f"s3://{bucket}/t"
    (job,) = _interrupted_after_journal(moto_backend, uri, 1)
    store = S3Store(moto_backend.options)
    (status,) = list_table_jobs(store, parse_uri(uri), order=QUIET)
    assert isinstance(status.claim, CommitJournal) and status.claim_etag

    (other,) = recover(uri, s3=moto_backend.options, order=QUIET)  # another process finishes it meanwhile
    assert other.action == "finished" and "committed 2 files" in other.detail
    committer = JobCommitter(store, status.destination, status.job_id, threads=0, order=QUIET)
    action = _recover_one(committer, status, named=False, older_than=None, now=time.time(), dry_run=False)

    assert action.action == "finished" and "finished by another process" in action.detail, action
    assert not job_records(moto_backend.client, bucket, "t", job.job_id)
    assert len(visible_keys(moto_backend.client, bucket, "t")) == 2
