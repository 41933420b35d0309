"""What the randomized trials of processes that lose their job found (docs/RELIABILITY.md, "Randomized trials"),
each forced here as a test that fails on the code it was found in (6ccd5ba and c169efd fixed them).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from mpcommit import Job
from mpcommit.options import OrderSettings
from mpcommit.protocol import faults
from mpcommit.protocol.layout import Table
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol.recovery import RecoveryOutcome, recover
from mpcommit.store.s3 import S3Store
from tests.reliability.test_fences import ORDER, PausedJob, open_job, rows

#: The order collected often (every 5th place, keeping 10 ended ones), as in the pause trials.
OFTEN = OrderSettings(**{**ORDER, "tidy_every": 5})


def _append(backend: Any, bucket: str, tag: str) -> Any:
    job, ref = _written(backend, bucket, tag)
    return job.commit([ref])


def _written(backend: Any, bucket: str, tag: str) -> Any:
    """A job of s3://bucket/t with one task committed, its commit not begun."""
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, order=OFTEN)
    with job.spec.task(0, 0) as attempt:
        with attempt.create(partition="dt=0", ext="txt") as out:
            out.write(f"{tag} dt=0\n".encode())
            out.rows = 1
        return job, attempt.commit()


def _recover_while_the_other_commits(backend: Any, bucket: str, *, appends_after: int = 0) -> tuple[Any, Any, Any]:
    """Two jobs of s3://bucket/t written, their commits not begun; `recover --older-than 0` lists both, and after it
    acted on the first one, the other commits -- then ``appends_after`` appends. Returns (the late job's id, its
    report, recover's actions by job id)."""
    first, first_ref = _written(backend, bucket, "a")
    second, second_ref = _written(backend, bucket, "b")
    refs = {first.job_id: (first, first_ref), second.job_id: (second, second_ref)}
    committed: dict[str, Any] = {}

    def meanwhile(action: Any) -> None:
        if not committed:
            other = next(job_id for job_id in refs if job_id != action.job_id)
            job, ref = refs[other]
            committed[other] = job.commit([ref])
            for i in range(appends_after):
                _append(backend, bucket, f"c{i}")

    actions = recover(f"s3://{bucket}/t", s3=backend.options, older_than=0, order=OFTEN, on_action=meanwhile)
    [(late, report)] = committed.items()
    assert report.position is not None
    assert f"{'a' if late == first.job_id else 'b'} dt=0" in rows(backend, bucket)
    return late, report, {a.job_id: a for a in actions}


def test_a_recover_does_not_report_rolled_back_a_job_that_committed_after_it_listed_it(moto_backend):
    """`recover --older-than 0` lists the table's jobs, then acts on each in turn. A job that was writing when it
    was listed and that commits -- and removes its records, journal first -- before `recover` reaches it: the
    rollback's claim of the journal key then succeeds (the key is free again), no open place is found to end,
    nothing is left to abort, and `recover` reports the job rolled back ("aborted 0 uploads, removed 0 records")
    while every row of it is visible and its place ended committed."""
    late, _report, said = _recover_while_the_other_commits(moto_backend, moto_backend.new_bucket("mpc-finding"))
    assert said[late].action is not RecoveryOutcome.ROLLED_BACK, said[late]


def test_a_recover_does_not_report_rolled_back_a_job_that_committed_and_was_collected_after_it_listed_it(
        moto_backend):
    """Run 12 of the order trials (LocalStack, pause-driver seed 1156): as above, but before `recover` reaches the
    job that committed after it was listed, 16 more appends commit and the order's collection deletes its place --
    and with it the outcome that told the rollback the job had committed; its manifests went with its records.
    `recover` reported it rolled back (and, in the trial, wrote an end for its collected place). A job whose
    descriptor is gone ended before the claim: the claim is taken back, nothing is reported rolled back, no end
    is written."""
    bucket = moto_backend.new_bucket("mpc-finding")
    late, report, said = _recover_while_the_other_commits(moto_backend, bucket, appends_after=16)
    view = TableOrder(S3Store(moto_backend.options), Table(bucket, "t"), OFTEN).view()
    assert report.position <= view.through, "the collection covered its place"
    assert said[late].action is not RecoveryOutcome.ROLLED_BACK, said[late]
    assert report.position not in view.leftovers, "an end written for a place the collection had covered"


def test_a_recover_does_not_report_rolled_back_a_job_interrupted_in_its_cleanup(moto_backend):
    """A commit that stops during its cleanup has committed: its place ended committed, its files are visible,
    `_SUCCESS` written, its journal deleted first -- only records are left. Once a later job rewrites `_SUCCESS`,
    `jobs list` shows it as writing (docs: Known limitations), and `recover --older-than 0` rolls it back: the
    rollback's claim of the free journal key succeeds, and it reports the committed job "rolled back"."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-finding")
    job, ref = _written(backend, bucket, "a")
    with faults.installed(faults.fail_at("commit.during_cleanup")), pytest.raises(Exception):
        job.commit([ref])
    _append(backend, bucket, "b")
    actions = {a.job_id: a for a in recover(f"s3://{bucket}/t", s3=backend.options, older_than=0, order=OFTEN)}
    assert rows(backend, bucket) == ["a dt=0", "b dt=0"]
    assert actions[job.job_id].action is not RecoveryOutcome.ROLLED_BACK, actions[job.job_id]


def test_a_driver_rolled_back_while_paused_writes_no_end_after_its_place_was_collected(moto_backend):
    """SPEC I10: a process that lost its job records nothing more for it. An overwrite pauses right after taking
    its place; the collecting job takes the silent place over (a rollback: it has no journal) and, appends later,
    collects it. The driver goes on: its journal claim finds the rollback (JobRolledBackError, by name, nothing
    visible) -- and it then ends its place, rolled back, writing `<position>.done` under a checkpoint that covers
    it. The stray changes no decision (a covered place is ended whatever records are left, and the next
    collection deletes it), but it is a record written by a process that had lost its job."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-finding")
    _append(backend, bucket, "old")
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), OFTEN)
    o = PausedJob(backend, bucket, name="o", mode="overwrite", stops="commit.after_place:1:stop")
    try:
        o.wait_stopped()
        position = order.find(open_job(backend, bucket)).position
        time.sleep(OFTEN.lease_seconds + 1)  # silent for a lease, by the store's clock (1 s resolution)
        for i in range(16):
            _append(backend, bucket, f"a{i}")
        assert order.view().through >= position, "the collection must have covered its place"
        assert order.outcome(position) is None
        o.resume()
        end = o.events()[-1]
    finally:
        o.kill()
    assert end["error"] == "JobRolledBackError", end
    assert order.outcome(position) is None, "an end was written for a place the collection had covered"


def test_a_recover_does_not_report_rolled_back_a_job_interrupted_in_its_cleanup_once_its_place_is_collected(
        moto_backend):
    """The same as the last but one, with enough appends after it that the collection has covered its place: no
    place of it is left to say how it ended, and its rollback still must not say "rolled back" of committed rows,
    nor delete any."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-finding")
    job, ref = _written(backend, bucket, "a")
    with faults.installed(faults.fail_at("commit.during_cleanup")), pytest.raises(Exception):
        job.commit([ref])
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), OFTEN)
    for i in range(16):
        _append(backend, bucket, f"b{i}")
    assert order.find(job.job_id, ended_too=True) is None, "the collection must have covered its place"
    actions = {a.job_id: a for a in recover(f"s3://{bucket}/t", s3=backend.options, older_than=0, order=OFTEN)}
    assert rows(backend, bucket) == sorted(["a dt=0"] + [f"b{i} dt=0" for i in range(16)])
    assert actions[job.job_id].action is not RecoveryOutcome.ROLLED_BACK, actions[job.job_id]


@pytest.mark.parametrize("partition", ["dt=1", "dt=x%2Fy"])
def test_a_partition_destinations_job_interrupted_in_its_cleanup_is_seen_and_cleaned_from_the_table(backend,
                                                                                                   partition):
    """Run 12 of the order trials (LocalStack, depths, seed 1064): a static overwrite of `s3://b/t/dt=x%2Fy` killed
    during its cleanup -- committed, its place ended, its uploads all complete -- left its records under
    `t/dt=x%2Fy/_temporary/mpcommit/JOB/`, and neither `jobs list` nor `recover` of `s3://b/t` saw them: the table
    looked for the jobs of its partition destinations only among open places and pending uploads. They are found
    among the order's ended places too, and cleaned."""
    from mpcommit.protocol.inventory import list_table_jobs
    from mpcommit.protocol.layout import parse_uri

    bucket = backend.new_bucket("mpc-finding")
    _append(backend, bucket, "old")
    job = Job.create(f"s3://{bucket}/t/{partition}", mode="overwrite", s3=backend.options, order=OFTEN)
    with job.spec.task(0, 0) as attempt:
        with attempt.create(ext="txt") as out:
            out.write(b"new\n")
            out.rows = 1
        ref = attempt.commit()
    with faults.installed(faults.fail_at("commit.during_cleanup")), pytest.raises(Exception):
        job.commit([ref])
    hidden = f"t/{partition}/_temporary/mpcommit/{job.job_id}/"
    assert backend.client.list_objects_v2(Bucket=bucket, Prefix=hidden).get("KeyCount", 0) > 0
    store = S3Store(backend.options)
    listed = {s.job_id for s in list_table_jobs(store, parse_uri(f"s3://{bucket}/t"), order=OFTEN)}
    assert job.job_id in listed
    actions = {a.job_id: a for a in recover(f"s3://{bucket}/t", s3=backend.options, older_than=0, order=OFTEN)}
    assert actions[job.job_id].action is not RecoveryOutcome.ROLLED_BACK, actions[job.job_id]
    assert backend.client.list_objects_v2(Bucket=bucket, Prefix=hidden).get("KeyCount", 0) == 0
    assert sorted(rows(backend, bucket)) == ["new", "old dt=0"]


def _zombie_place(backend: Any, bucket: str, txn: Any) -> tuple[Any, int]:
    """A job of s3://bucket/t whose place in the order is open while its records are gone: it took the place after
    a rollback had run to its end (a driver paused between its last check and its place). (job, position)"""
    from mpcommit.protocol.records.order import OrderEntry, Purpose

    job = Job.create(f"s3://{bucket}/t", s3=backend.options, order=OFTEN, txn=txn)
    job.abort()  # rolled back to its end: records gone, its heartbeat stopped
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), OFTEN)
    entry = order.take(OrderEntry(position=1, job_id=job.job_id, bucket=bucket, table="t", destination="",
                                  purpose=Purpose.WRITE, mode=job.descriptor.mode,
                                  partition_overwrite=job.descriptor.partition_overwrite, touches=("dt=0",),
                                  replaces=(), created_ms=int(time.time() * 1000), hostname="zombie", txn=txn))
    return job, entry.position


def test_a_place_taken_after_its_jobs_rollback_ended_is_ended_by_the_job_that_waits_for_it(moto_backend):
    """Found by the streaming replay trials (2026-11-28, at the ledger): an attempt rolled back by its replay while
    paused went on to take a place, then found its journal key claimed. No rollback could end that place -- the
    rollback had ended before it existed, and a take-over found the job's records gone and took it for ended --
    so a later version of its application waited for it for ever. The take-over now ends such a place (the job
    can never claim its journal), and a job refused at its journal ends its own place."""
    from mpcommit import Txn

    backend = moto_backend
    bucket = backend.new_bucket("mpc-finding")
    zombie, position = _zombie_place(backend, bucket, Txn("app", 1))
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), OFTEN)
    assert order.ended(position) is None
    waits = OrderSettings(**{**ORDER, "max_wait_seconds": 6 * OFTEN.lease_seconds})
    later = Job.create(f"s3://{bucket}/t", s3=backend.options, order=waits, txn=Txn("app", 2))
    with later.spec.task(0, 0) as attempt:
        with attempt.create(partition="dt=0", ext="txt") as out:
            out.write(b"v2 dt=0\n")
            out.rows = 1
        ref = attempt.commit()
    report = later.commit([ref])  # waited for the silent place, took it over, ended it
    assert report.position is not None and report.duplicate_of is None
    ended = order.ended(position)
    assert ended is not None and ended.outcome.value == "rolled_back", ended
    assert rows(backend, bucket) == ["v2 dt=0"]


def test_a_job_refused_at_its_journal_ends_the_place_it_took_after_its_rollback(moto_backend, monkeypatch):
    from mpcommit import Txn
    from mpcommit.errors import JobRolledBackError
    from mpcommit.protocol.commit import JobCommitter
    from mpcommit.protocol.commit.work import JobWork

    backend = moto_backend
    bucket = backend.new_bucket("mpc-finding")
    job, ref = _written(backend, bucket, "a")
    real = JobWork.take_place

    def rolled_back_first(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        JobCommitter(S3Store(backend.options), job.destination, job.job_id).rollback(reason="by its replay")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JobWork, "take_place", rolled_back_first)
    job.txn = Txn("app", 1)
    with pytest.raises(JobRolledBackError):
        job.commit([ref])
    monkeypatch.undo()
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), OFTEN)
    [position] = order.view().positions
    ended = order.ended(position)
    assert ended is not None and ended.outcome.value == "rolled_back", "its own place, ended by the refused job"
