"""Races the order trials found (tests/reliability/order_trials.py), each forced here into the one interleaving
that shows it, so that it is reproduced on every run rather than in a few trials out of hundreds.

Found: two processes rolling back one job at once. A dead job in the commit order is rolled back by whoever
notices first -- every later overwrite waiting for it takes it over (TableOrder.wait_for_earlier), and `jobs
abort` or `recover --job` may be run beside them. One rollback lists the job's task manifests, the other
removes them, and the first then fails reading a manifest that is gone (NoSuchKeyError). Inside an overwrite's
wait that failure escaped the take-over, after the overwrite's own journal: its commit failed with
CommitStateUnknownError although nothing was wrong, and the job that reported failure was committed later by
`recover`. (Trials: moto oncall seed 10 and mixed seed 16 of the first long run.)
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpcommit import Job
from mpcommit.protocol.commit import JobCommitter
from mpcommit.protocol.commit.manifests import ManifestReader
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol.layout import Table
from mpcommit.store.s3 import S3Store
from tests.reliability.test_table_order import QUICK, TIMEOUT, expected, kill_overwrite, lines, rows_of, seed
from tests.support.checks import all_keys, pending_uploads
from tests.support.invariants import job_records


class HoldManifestReads:
    """Holds the reads of ``job``'s task manifests made on the thread named ``thread`` until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, thread: str, job: str):
        self.reached = threading.Event()
        self.release = threading.Event()
        original = ManifestReader.read

        def read(reader: ManifestReader, key: str):  # noqa: ANN202
            if threading.current_thread().name == thread and reader.job_id == job:
                self.reached.set()
                assert self.release.wait(TIMEOUT), "never released"
            return original(reader, key)

        monkeypatch.setattr(ManifestReader, "read", read)


def _named(name: str, fn, *args):  # noqa: ANN001, ANN202
    threading.current_thread().name = name
    return fn(*args)


def test_two_rollbacks_of_one_job_at_once_both_end_it(backend, monkeypatch):
    """`jobs abort` and `recover --job` (or two waiters taking over a dead job) roll one job back at once: the
    first has listed the job's task manifests when the second removes them. Both must end the job; neither may
    fail on a manifest the other removed."""
    bucket = backend.new_bucket("mpc-races")
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    rows_of(job, "j")
    hold = HoldManifestReads(monkeypatch, "first", job.job_id)
    store = S3Store(backend.options)
    with ThreadPoolExecutor(1) as pool:
        committer = JobCommitter(store, job.destination, job.job_id)
        first = pool.submit(_named, "first", lambda: committer.rollback(reason="first"))
        assert hold.reached.wait(TIMEOUT)
        second = JobCommitter(store, job.destination, job.job_id).rollback(reason="second")
        assert not job_records(backend.client, bucket, "t", job.job_id)
        hold.release.set()
        report = first.result(TIMEOUT)
    assert second.aborted_uploads == 2 and report.aborted_uploads == 0
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not job_records(backend.client, bucket, "t", job.job_id)


def test_two_overwrites_taking_over_one_dead_job_both_commit(backend, monkeypatch):
    """The trials' case: Y is SIGKILLed holding its place (no journal); Z1 and Z2, overwrites after it, both
    wait for it and both take it over once its heartbeat is silent for the lease. Forced: both enter the
    take-over; Z1 lists Y's task manifests; Z2 rolls Y back to the end; then Z1 reads. Z1 must go on and commit
    (as does Z2): the table is the later place's, and both report success."""
    bucket = backend.new_bucket("mpc-races")
    seed(backend, bucket)
    y = kill_overwrite(backend, bucket, "commit.after_place:1")
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), QUICK)
    y_place = order.find(y)
    assert y_place is not None and order.outcome(y_place.position) is None
    hold = HoldManifestReads(monkeypatch, "z1", y)
    arrived = {"z1": threading.Event(), "z2": threading.Event()}
    recover_job = JobCommitter.recover_job

    def both_take_over(committer: JobCommitter, *, reason: str):  # noqa: ANN202
        name = threading.current_thread().name
        if committer.job_id == y and name in arrived:
            arrived[name].set()
            if name == "z1":  # both are taking Y over before either acts
                assert arrived["z2"].wait(TIMEOUT), "Z2 never took Y over"
            else:  # Z2 acts once Z1 has listed Y's manifests and is about to read one
                assert hold.reached.wait(TIMEOUT)
        return recover_job(committer, reason=reason)

    monkeypatch.setattr(JobCommitter, "recover_job", both_take_over)
    z1 = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    z2 = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    r1, r2 = rows_of(z1, "z1"), rows_of(z2, "z2")
    with ThreadPoolExecutor(2) as pool:
        f1 = pool.submit(_named, "z1", z1.commit, r1)
        f2 = pool.submit(_named, "z2", z2.commit, r2)
        assert hold.reached.wait(TIMEOUT), "Z1 never read Y's manifests"
        for _ in range(int(TIMEOUT / 0.1)):  # Z2 rolls Y back to the end: its records are gone
            if not job_records(backend.client, bucket, "t", y):
                break
            time.sleep(0.1)
        else:
            pytest.fail("Z2 never finished rolling Y back")
        hold.release.set()
        first = f1.result(TIMEOUT)
        second = f2.result(TIMEOUT)
    assert {first.position, second.position} == {y_place.position + 1, y_place.position + 2}
    assert lines(backend, bucket) == expected("z2" if second.position > first.position else "z1")
    assert order.outcome(y_place.position).outcome.value == "rolled_back"
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not [k for k in all_keys(backend.client, bucket, "t") if "/_temporary/" in k]
