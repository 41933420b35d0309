"""Concurrent jobs on one destination and on sibling prefixes, and zombie attempts that write after their job
committed. Interleavings are forced with the per-job progress hook (called right after the journal is written),
so that every documented outcome is reproduced exactly, not by chance.

Documented outcome (docs/RELIABILITY.md): two appends both land. An overwrite never touches another job's pending
uploads or records; jobs take effect in the order of their places in the table's commit order (created with
conditional writes, never judged by a clock): an overwrite waits for the jobs before it that touch what it
replaces, then removes exactly their files; a job after it keeps all of its files, however the two commits
interleave. The table afterwards equals a serial run of the jobs in that order.

On LocalStack only the cases whose outcome once depended on the server run (Last-Modified semantics, the answer to
a part sent to an aborted upload); the others are protocol logic, run on moto. tests/reliability/test_table_order.py
holds the races the order was built for.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpcommit import Job
from mpcommit.errors import MpcommitError, NoSuchUploadError
from mpcommit.modes import JobState
from mpcommit.options import OrderSettings
from mpcommit.operations.uploads import UploadScope, cleanup, list_uploads
from mpcommit.protocol.layout import Destination, job_id_of_key
from mpcommit.protocol.inventory import list_jobs
from mpcommit.protocol.recovery import recover
from mpcommit.sizing import MiB
from tests.reliability.crash_driver import SMALL_PARTS
from tests.support.checks import pending_uploads
from tests.support.invariants import (
    bucket_state,
    check_aborted,
    check_committed,
    check_others_untouched,
    dataset,
    job_records,
    job_uploads,
)

TIMEOUT = 60
#: A commit order that notices a dead job within a few seconds (the defaults wait a minute).
QUICK = OrderSettings(heartbeat_seconds=0.5, lease_seconds=3.0, poll_seconds=0.2)


def write(job: Job, task_id: int, attempt: int = 0, tag: str = "") -> object:
    with job.spec.task(task_id, attempt) as task:
        with task.create(partition=f"dt={task_id % 2}", ext="txt") as out:
            out.write(f"{tag or job.job_id[:8]} task {task_id} attempt {attempt}\n".encode())
        return task.commit()


def files_of(job: Job, tasks: range, attempt: int = 0, tag: str = "") -> dict[str, bytes]:
    root = job.destination.root
    return {f"{root}dt={t % 2}/part-{t:05d}-{job.job_id}.c000.txt":
            f"{tag or job.job_id[:8]} task {t} attempt {attempt}\n".encode() for t in tasks}


class PauseAfterJournal:
    """A progress hook that holds the commit right after its journal is written until released."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, step: str, done: int, total: int) -> None:
        if step == "journal":
            self.reached.set()
            assert self.release.wait(TIMEOUT), "never released"


def _seed(backend, bucket: str, files: dict[str, bytes]) -> None:
    for key, data in files.items():
        backend.client.put_object(Bucket=bucket, Key=key, Body=data)


def _next_second() -> None:
    """Wait for the wall clock to enter a new second: S3's Last-Modified has 1 s resolution."""
    start = int(time.time())
    while int(time.time()) == start:
        time.sleep(0.01)


def test_two_appends_committing_at_the_same_time_both_land(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket("mpc-conc")
    _seed(backend, bucket, {"t/dt=0/old.txt": b"old\n"})
    a = Job.create(f"s3://{bucket}/t", s3=backend.options, commit_threads=4)
    b = Job.create(f"s3://{bucket}/t", s3=backend.options, commit_threads=4)
    ra = [write(a, t) for t in range(6)] + [write(a, 0, 1)]  # a committed loser too
    rb = [write(b, t) for t in range(6)]
    barrier = threading.Barrier(2)

    def commit(job, refs):
        barrier.wait(TIMEOUT)
        return job.commit(refs[:6])

    with ThreadPoolExecutor(2) as pool:
        reports = [f.result(TIMEOUT) for f in [pool.submit(commit, a, ra), pool.submit(commit, b, rb)]]
    assert all(r.files == 6 for r in reports)
    want = {"t/dt=0/old.txt": b"old\n", **files_of(a, range(6)), **files_of(b, range(6))}
    assert dataset(backend.client, bucket, "t") == want
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not job_records(backend.client, bucket, "t", a.job_id) and not job_records(backend.client, bucket, "t", b.job_id)


def test_an_overwrite_after_an_append_paused_between_journal_and_completes_waits_for_it(backend):
    """A holds the earlier place and pauses after its journal; O (overwrite, the later place) never touches A's
    pending uploads or records, waits until A has ended, then replaces A's files with the rest: the table is a
    serial A-then-O, whatever the timing."""
    bucket = backend.new_bucket("mpc-conc")
    _seed(backend, bucket, {"t/dt=0/old.txt": b"old\n"})
    pause = PauseAfterJournal()
    a = Job.create(f"s3://{bucket}/t", s3=backend.options, progress=pause)
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    ra, ro = [write(a, t) for t in range(3)], [write(o, t) for t in range(3)]
    with ThreadPoolExecutor(2) as pool:
        fa = pool.submit(a.commit, ra)
        assert pause.reached.wait(TIMEOUT)
        before = bucket_state(backend.client, bucket)
        fo = pool.submit(o.commit, ro)
        time.sleep(2)  # O had time to overtake A, were it not waiting for it
        assert not fo.done()
        # I6: while waiting, O changed nothing of A's (only its own place and records).
        check_others_untouched(before, bucket_state(backend.client, bucket), job_ids=[o.job_id],
                               may_write=lambda k: "/_mpcommit/" in k)
        assert len(job_uploads(backend.client, bucket, a.job_id, "t")) == 3
        pause.release.set()
        fa.result(TIMEOUT)
        fo.result(TIMEOUT)
    check_committed(backend.client, bucket, "t", o.job_id, files_of(o, range(3)))


def test_an_overwrite_that_outwaits_its_max_wait_fails_before_its_journal_naming_the_live_job(backend):
    """A holds the earlier place, alive (its heartbeat beats) and paused after its journal; O, an overwrite allowed
    to wait 1.5 s, waits before its own journal and fails with WaitedTooLongError naming A: nothing of O is
    visible, its place ended, its abort leaves nothing, and it can be run again. A then commits, and O's rerun
    after it: a serial A-then-O. (Until 2026-11-28 the wait was after O's journal, and O stopped with
    CommitStateUnknownError, finished later by `recover`.)"""
    from mpcommit.errors import WaitedTooLongError

    bucket = backend.new_bucket("mpc-conc")
    _seed(backend, bucket, {"t/dt=0/old.txt": b"old\n"})
    pause = PauseAfterJournal()
    a = Job.create(f"s3://{bucket}/t", s3=backend.options, progress=pause, order=QUICK)
    patient = OrderSettings(heartbeat_seconds=0.5, lease_seconds=3.0, poll_seconds=0.2, max_wait_seconds=1.5)
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=patient)
    ra, ro = [write(a, t) for t in range(2)], [write(o, t) for t in range(2)]
    with ThreadPoolExecutor(1) as pool:
        fa = pool.submit(a.commit, ra)
        assert pause.reached.wait(TIMEOUT)
        before = dataset(backend.client, bucket, "t")
        started = time.monotonic()
        with pytest.raises(WaitedTooLongError, match=f"waited .* for job {a.job_id}.*nothing of .* is visible"):
            o.commit(ro)
        assert time.monotonic() - started >= 1.5
        assert dataset(backend.client, bucket, "t") == before
        assert o.abort().aborted_uploads == 2
        check_aborted(backend.client, bucket, "t", o.job_id)
        pause.release.set()
        fa.result(TIMEOUT)
    assert dataset(backend.client, bucket, "t") == {**before, **files_of(a, range(2))}
    again = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    again.commit([write(again, t) for t in range(2)])
    check_committed(backend.client, bucket, "t", again.job_id, files_of(again, range(2)))


def test_a_versioned_write_that_outwaits_its_max_wait_before_its_journal_fails_naming_the_job_and_leaves_nothing(
        backend):
    """Version 2 of an application waits, before its journal, for version 1's live commit (paused after its
    journal, its heartbeat beating); allowed 1.5 s, it fails with WaitedTooLongError -- a CommitFailedError --
    naming version 1's job, with nothing of it visible, and its abort leaves nothing. Version 1 then commits, and
    version 2 can be written again."""
    from mpcommit import Txn
    from mpcommit.errors import WaitedTooLongError

    bucket = backend.new_bucket("mpc-conc")
    pause = PauseAfterJournal()
    first = Job.create(f"s3://{bucket}/t", s3=backend.options, progress=pause, order=QUICK, txn=Txn("daily", 1))
    patient = OrderSettings(heartbeat_seconds=0.5, lease_seconds=3.0, poll_seconds=0.2, max_wait_seconds=1.5)
    second = Job.create(f"s3://{bucket}/t", s3=backend.options, order=patient, txn=Txn("daily", 2))
    r1, r2 = [write(first, 0)], [write(second, 0)]
    with ThreadPoolExecutor(1) as pool:
        f1 = pool.submit(first.commit, r1)
        assert pause.reached.wait(TIMEOUT)
        with pytest.raises(WaitedTooLongError, match=f"waited .* for job {first.job_id}.*nothing of .* is visible"):
            second.commit(r2)
        assert second.abort().aborted_uploads == 1  # refused before its journal: the caller may abort, as Spark's doors do
        check_aborted(backend.client, bucket, "t", second.job_id)
        pause.release.set()
        f1.result(TIMEOUT)
    check_committed(backend.client, bucket, "t", first.job_id, files_of(first, range(1)))
    again = Job.create(f"s3://{bucket}/t", s3=backend.options, order=QUICK, txn=Txn("daily", 2))
    again.commit([write(again, 0)])
    assert dataset(backend.client, bucket, "t") == {**files_of(first, range(1)), **files_of(again, range(1))}


def _append_during_paused_overwrite(backend, *, before_journal: range, after_journal: range):
    """O (overwrite) pauses right after its journal; A (append) wrote tasks ``before_journal`` before it and
    writes tasks ``after_journal`` in a later second, then commits entirely; O resumes. Returns (o, a, bucket)."""
    bucket = backend.new_bucket("mpc-conc")
    _seed(backend, bucket, {"t/dt=0/old.txt": b"old\n", "t/dt=1/old.txt": b"old\n"})
    pause = PauseAfterJournal()
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, progress=pause)
    a = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ro = [write(o, t) for t in range(3)]
    ra = [write(a, t) for t in before_journal]
    with ThreadPoolExecutor(1) as pool:
        fo = pool.submit(o.commit, ro)
        assert pause.reached.wait(TIMEOUT)
        _next_second()
        ra += [write(a, t) for t in after_journal]
        before = bucket_state(backend.client, bucket)
        a.commit(ra)
        check_others_untouched(before, bucket_state(backend.client, bucket), job_ids=[a.job_id],
                               may_write=lambda k: k == "t/_SUCCESS")
        pause.release.set()
        fo.result(TIMEOUT)
    return o, a, bucket


@pytest.mark.parametrize("before_journal, after_journal", [(range(0), range(3)), (range(3), range(0)),
                                                           (range(1), range(1, 3))],
                         ids=["wrote-after", "wrote-before", "straddling"])
def test_an_append_committed_while_an_earlier_overwrite_is_paused_survives_it_whole(backend, before_journal,
                                                                                    after_journal):
    """A commits entirely while O (the earlier place) is paused after its journal: A took the later place, so O
    keeps every file of A -- whether A's uploads started before O's journal, after it, or on both sides (on S3
    and LocalStack a multipart object is stamped with its upload's start, on moto with its completion: the
    clock no longer decides anything). The table is a serial O-then-A."""
    o, a, bucket = _append_during_paused_overwrite(backend, before_journal=before_journal, after_journal=after_journal)
    # _SUCCESS describes the later job, whichever finished last.
    check_committed(backend.client, bucket, "t", a.job_id, files_of(a, range(3)), other=files_of(o, range(3)))


def test_an_append_committed_before_an_overwrite_started_is_replaced(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket("mpc-conc")
    a = Job.create(f"s3://{bucket}/t", s3=backend.options)
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    ra, ro = [write(a, t) for t in range(2)], [write(o, t) for t in range(2)]
    a.commit(ra)
    _next_second()
    o.commit(ro)
    check_committed(backend.client, bucket, "t", o.job_id, files_of(o, range(2)))


def test_jobs_on_sibling_prefixes_committing_at_once_stay_apart(moto_backend):
    backend = moto_backend
    """data, data1 and data10 (each a prefix of the next as a string): overwrites and an append committing
    together, while each has another job's pending upload; nobody touches another prefix."""
    bucket = backend.new_bucket("mpc-conc")
    names = ("data", "data1", "data10")
    _seed(backend, bucket, {f"{n}/dt=0/old.txt": b"old\n" for n in names})
    jobs = {n: Job.create(f"s3://{bucket}/{n}", mode="append" if n == "data1" else "overwrite", s3=backend.options)
            for n in names}
    bystanders = {n: Job.create(f"s3://{bucket}/{n}", s3=backend.options) for n in names}
    for n in names:
        write(bystanders[n], 0)
    refs = {n: [write(jobs[n], t, tag=n) for t in range(3)] for n in names}
    before = bucket_state(backend.client, bucket)
    barrier = threading.Barrier(3)

    def commit(n):
        barrier.wait(TIMEOUT)
        return jobs[n].commit(refs[n])

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(commit, names, timeout=TIMEOUT))
    for n in names:
        other = {f"{n}/dt=0/old.txt": b"old\n"} if n == "data1" else {}
        check_committed(backend.client, bucket, n, jobs[n].job_id, files_of(jobs[n], range(3), tag=n), other=other)
        assert len(job_uploads(backend.client, bucket, bystanders[n].job_id, n)) == 1
    check_others_untouched(before, bucket_state(backend.client, bucket), job_ids=[j.job_id for j in jobs.values()],
                           may_delete=lambda k: k.endswith("/old.txt") and not k.startswith("data1/"),
                           may_write=lambda k: k.endswith("/_SUCCESS"))


# ---------------------------------------------------------------- zombies
def test_a_zombie_writing_after_its_job_committed_never_becomes_visible_and_is_cleaned(moto_backend):
    backend = moto_backend
    """Attempt 0 of task 0 lost to attempt 1 but keeps running after the job committed: it writes to the very
    key of the committed file and even commits its task. Nothing it writes is ever visible; the orphan listing
    attributes its upload to the job, and the cleanup aborts it and removes its records."""
    bucket = backend.new_bucket("mpc-zombie")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    zombie = job.spec.task(0, 0)  # started before the commit, never chosen
    winner = write(job, 0, 1)
    job.commit([winner])
    committed = files_of(job, range(1), attempt=1)
    with zombie:
        with zombie.create(partition="dt=0", ext="txt") as out:
            out.write(b"zombie\n")
        zombie.commit()
    assert dataset(backend.client, bucket, "t") == committed  # same key, still the winner's bytes
    (upload,) = pending_uploads(backend.client, bucket, "t")
    assert upload[0] in committed  # the zombie's upload sits at the committed key
    # Found by the orphan listing, attributed to the (committed) job.
    scope = UploadScope.parse(f"s3://{bucket}/t")
    (found,) = list_uploads(job.store, scope, sizes=False)
    assert (found.key, found.upload_id, found.job_id) == (*upload, job.job_id)
    assert job_id_of_key(Destination(bucket, "t"), found.key) == job.job_id
    (status,) = list_jobs(job.store, job.destination)
    assert status.state is JobState.COMMITTED and status.pending_uploads == 1
    report = cleanup(job.store, scope, job_id=job.job_id)
    assert [r.upload.upload_id for r in report.aborted] == [upload[1]]
    # `recover` cleans the zombie's records of the committed job; the data never changed.
    assert [a.action for a in recover(job.destination, store=job.store)] == ["finished"]
    check_committed(backend.client, bucket, "t", job.job_id, committed)


def test_a_zombie_mid_upload_when_its_job_commits_fails_on_its_next_part(backend):
    """A loser still streaming when the job commits: the commit aborts its upload (it carries the job's id),
    and the zombie's next part fails with NoSuchUpload -- it can never complete anything."""
    bucket = backend.new_bucket("mpc-zombie")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, writer=SMALL_PARTS)
    zombie = job.spec.task(1, 0)
    out = zombie.create(partition="dt=1", ext="bin")
    out.write(b"z" * MiB)  # buffered, not yet a part
    report = job.commit([write(job, 0)])
    assert report.aborted_uploads == 1
    with pytest.raises(MpcommitError) as info:
        with zombie:
            out.write(b"z" * (5 * MiB))  # fills part 1: sent to an upload that no longer exists
            out.close()
    if backend.name == "localstack":  # as S3 answers; moto answers UploadPart on an aborted upload with a 500
        assert isinstance(info.value, NoSuchUploadError), repr(info.value)
    check_committed(backend.client, bucket, "t", job.job_id, files_of(job, range(1)))


def test_a_zombie_writing_after_its_job_was_aborted_is_cleaned_by_job_id(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket("mpc-zombie")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    write(job, 0)
    job.abort()
    write(job, 0, 1)  # a zombie of the aborted job commits its task: upload + manifest reappear
    assert dataset(backend.client, bucket, "t") == {}
    (status,) = list_jobs(job.store, job.destination)
    assert status.state is JobState.WRITING and status.pending_uploads == 1
    report = cleanup(job.store, UploadScope.parse(f"s3://{bucket}/t"), job_id=job.job_id)
    assert len(report.aborted) == 1
    # The cleanup stopped the job's commit for good and finished its rollback: nothing is left to recover.
    assert recover(job.destination, store=job.store, job_id=job.job_id) == []
    check_aborted(backend.client, bucket, "t", job.job_id)
