"""Concurrent jobs on one table, ordered by the table's commit order (mpcommit.protocol.order), never by a clock.

Each race named in the concurrent-writers and adversarial reviews is forced here, one interleaving at a time,
through the protocol's checkpoints and progress hooks: two overwrites at once, an overwrite beside a compaction
(both ways round), the on-call night (an overwrite killed after its journal, its re-run, then `recover`),
recoveries racing each other and the job's own driver, a rollback racing the commit it rolls back, and a store
that ignores conditional writes. The outcome asserted each time: the table a serial run of the jobs that
reported success would leave, in the order of their places; a job that lost says so by name and left nothing.
tests/reliability/test_order_trials.py runs the same jobs at random offsets, in processes, many times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mpcommit import Job
from mpcommit.compaction.standalone import compact
from mpcommit.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    ConcurrentJobsRefusedError,
    JobRolledBackError,
    JobStateError,
)
from mpcommit.options import OrderSettings
from mpcommit.protocol import faults
from mpcommit.protocol.commit import JobCommitter
from mpcommit.protocol.layout import Table, parse_uri
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol.records.order import Outcome
from mpcommit.protocol.records.success import SuccessData
from mpcommit.protocol.recovery import RecoveryOutcome, recover
from mpcommit.store.conditional import conditional_writes, forget_answers
from mpcommit.store.s3 import S3Store
from tests.reliability import crash_driver as plan
from tests.support.checks import pending_uploads
from tests.support.invariants import check_aborted, check_committed, dataset, job_records

TIMEOUT = 60
#: Notices a dead job within seconds (the defaults wait a minute).
QUICK = OrderSettings(heartbeat_seconds=0.5, lease_seconds=3.0, poll_seconds=0.2)
DRIVER = Path(plan.__file__)


def write(job: Job, task_id: int, partition: str, text: str) -> object:
    with job.spec.task(task_id, 0) as task:
        with task.create(partition=partition, ext="txt") as out:
            out.write(text.encode())
            out.rows = text.count("\n")
        return task.commit()


def rows_of(job: Job, tag: str, partitions: tuple[str, ...] = ("dt=0", "dt=1")) -> list[object]:
    """One task per partition, two rows each, named by ``tag``."""
    return [write(job, i, p, f"{tag} {p} a\n{tag} {p} b\n") for i, p in enumerate(partitions)]


def lines(backend, bucket: str, prefix: str = "t") -> list[str]:
    return sorted(line for data in dataset(backend.client, bucket, prefix).values()
                  for line in data.decode().splitlines())


def expected(tag: str, partitions: tuple[str, ...] = ("dt=0", "dt=1")) -> list[str]:
    return sorted(f"{tag} {p} {r}" for p in partitions for r in "ab")


def success_of(backend, bucket: str, prefix: str = "t") -> SuccessData:
    body = backend.client.get_object(Bucket=bucket, Key=f"{prefix}/_SUCCESS")["Body"].read()
    return SuccessData.from_bytes(body, where="_SUCCESS")


def order_of(backend, bucket: str, prefix: str = "t") -> TableOrder:
    return TableOrder(S3Store(backend.options), Table(bucket, prefix))


class Pause:
    """A progress hook that holds a commit at ``step`` until released."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, step: str, done: int, total: int | None) -> None:
        if step == self.step:
            self.reached.set()
            assert self.release.wait(TIMEOUT), "never released"


def seed(backend, bucket: str) -> Job:
    old = Job.create(f"s3://{bucket}/t", s3=backend.options)
    old.commit(rows_of(old, "old"))
    return old


# ---------------------------------------------------------------- two overwrites
def test_two_overwrites_at_once_leave_the_later_ones_table_only(backend):
    """O1 takes the first place and pauses after its journal; O2, the second, waits for O1 to end instead of
    deleting by clock -- then replaces O1's files. Never both tables, never neither."""
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    pause = Pause("journal")
    o1 = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, progress=pause)
    o2 = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    r1, r2 = rows_of(o1, "o1"), rows_of(o2, "o2")
    with ThreadPoolExecutor(2) as pool:
        f1 = pool.submit(o1.commit, r1)
        assert pause.reached.wait(TIMEOUT)
        f2 = pool.submit(o2.commit, r2)
        time.sleep(2)
        assert not f2.done(), "the later overwrite must wait for the earlier one"
        pause.release.set()
        first, second = f1.result(TIMEOUT), f2.result(TIMEOUT)
    assert (first.position, second.position) == (2, 3)
    assert lines(backend, bucket) == expected("o2")
    check_committed(backend.client, bucket, "t", o2.job_id, {k: v for k, v in dataset(backend.client, bucket, "t").items()})
    assert success_of(backend, bucket).position == 3
    assert pending_uploads(backend.client, bucket, "t") == []


def test_an_earlier_overwrite_finishing_last_keeps_the_later_jobs_files(backend):
    """O holds the earlier place and pauses after its journal; A (append, later place) commits entirely, then O
    goes on: O deletes only what jobs before it made visible -- A's files stay, and _SUCCESS stays A's."""
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    pause = Pause("journal")
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, progress=pause)
    a = Job.create(f"s3://{bucket}/t", s3=backend.options)
    ro, ra = rows_of(o, "o"), rows_of(a, "a")
    with ThreadPoolExecutor(1) as pool:
        fo = pool.submit(o.commit, ro)
        assert pause.reached.wait(TIMEOUT)
        a.commit(ra)
        pause.release.set()
        fo.result(TIMEOUT)
    assert lines(backend, bucket) == sorted(expected("o") + expected("a"))
    assert success_of(backend, bucket).job_id == a.job_id  # the later job's, though O finished last


# ---------------------------------------------------------------- an overwrite beside a compaction
def small_appends(backend, bucket: str, n: int = 4) -> None:
    for i in range(n):
        job = Job.create(f"s3://{bucket}/t", s3=backend.options)
        job.commit(rows_of(job, f"old{i}"))


def test_a_compaction_whose_sources_an_overwrite_replaced_first_gives_up(backend, monkeypatch):
    """The new user's first-week schedule: `mpcommit compact` lists and merges the old files; an overwrite
    replaces them all and ends before the compaction takes its place. The compaction must not complete merged
    files of rows the overwrite removed: it fails naming the overwrite, aborts what it merged, and the table is
    the overwrite's alone."""
    bucket = backend.new_bucket("mpc-order")
    small_appends(backend, bucket)
    ready, release = threading.Event(), threading.Event()
    result: dict[str, object] = {}
    take = TableOrder.take

    def held_take(order, proto):  # noqa: ANN001
        # Its files are merged and checked; before it takes its place, the overwrite runs from start to end.
        if threading.current_thread().name == "compaction":
            ready.set()
            assert release.wait(TIMEOUT)
        return take(order, proto)

    monkeypatch.setattr(TableOrder, "take", held_take)

    def run_compaction() -> None:
        try:
            result["report"] = compact(f"s3://{bucket}/t", s3=backend.options)
        except Exception as exc:  # noqa: BLE001 - inspected below
            result["error"] = exc

    thread = threading.Thread(target=run_compaction, name="compaction")
    thread.start()
    assert ready.wait(TIMEOUT)
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    o.commit(rows_of(o, "new"))
    release.set()
    thread.join(TIMEOUT)
    error = result.get("error")
    assert isinstance(error, CommitConflictError), result
    assert error.other_job_id == o.job_id and o.job_id in str(error)
    assert lines(backend, bucket) == expected("new")
    assert pending_uploads(backend.client, bucket, "t") == []
    assert not [k for k in dataset(backend.client, bucket, "t") if o.job_id not in k]
    assert not any("/_temporary/" in k for k in backend.client.list_objects_v2(Bucket=bucket).get("Contents", [])
                   if isinstance(k, str))
    # Its place ended as rolled back, with the reason.
    order = order_of(backend, bucket)
    view = order.view()
    assert not view.open
    ends = [order.outcome(p) for p in view.positions]
    assert sorted(e.outcome.value for e in ends if e) == ["committed"] * 5 + ["rolled_back"]


def test_an_overwrite_after_a_compaction_waits_for_it_then_replaces_its_merged_files(backend):
    """The other way round: the compaction holds the earlier place (paused after its journal); the overwrite
    waits for it, then replaces everything, the merged files included."""
    bucket = backend.new_bucket("mpc-order")
    small_appends(backend, bucket)
    pause = Pause("commit.journal")
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(r=compact(f"s3://{bucket}/t", s3=backend.options,
                                                                      progress=pause)))
    thread.start()
    assert pause.reached.wait(TIMEOUT)
    o = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    with ThreadPoolExecutor(1) as pool:
        fo = pool.submit(o.commit, rows_of(o, "new"))
        time.sleep(1.5)
        assert not fo.done()
        pause.release.set()
        thread.join(TIMEOUT)
        fo.result(TIMEOUT)
    assert result["r"].outcome.value == "committed"
    assert lines(backend, bucket) == expected("new")
    assert pending_uploads(backend.client, bucket, "t") == []


# ---------------------------------------------------------------- the on-call night
def kill_overwrite(backend, bucket: str, point: str) -> str:
    """crash_driver's job, as an overwrite, SIGKILLed at ``point``."""
    env = {**os.environ, "MPCOMMIT_FAULT": f"{point}:kill"}
    args = {"role": "job", "endpoint": backend.endpoint_url, "bucket": bucket, "mode": "overwrite"}
    done = subprocess.run([sys.executable, str(DRIVER), json.dumps(args)], env=env, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    return plan.JOB_ID


@pytest.mark.ci_on("localstack")
@pytest.mark.parametrize("point", ["commit.after_journal:1", "commit.after_complete:2"])
def test_the_on_call_night_a_killed_overwrite_its_rerun_and_recover(backend, point):
    """Y (overwrite) is SIGKILLed after its journal (or two files into its completes); the scheduler re-runs the
    job as Z; then on-call runs `recover`, as `jobs list` advises. Z waits for Y's heartbeat to fall silent,
    finishes Y itself, then replaces Y's files: the table is Z's alone, `recover` finds nothing to do, and
    _SUCCESS tells the truth -- Z's files are the whole table."""
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    y = kill_overwrite(backend, bucket, point)
    z = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=QUICK)
    report = z.commit(rows_of(z, "z"))
    assert report.timings["wait"] >= QUICK.lease_seconds
    assert lines(backend, bucket) == expected("z")
    assert recover(f"s3://{bucket}/t", s3=backend.options) == []
    success = success_of(backend, bucket)
    assert success.job_id == z.job_id and set(success.filenames) == set(dataset(backend.client, bucket, "t"))
    assert pending_uploads(backend.client, bucket, "t") == [] and not job_records(backend.client, bucket, "t", y)


def test_recover_first_then_the_rerun_replaces_what_recover_finished(backend):
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    y = kill_overwrite(backend, bucket, "commit.after_journal:1")
    [action] = recover(f"s3://{bucket}/t", s3=backend.options)
    assert (action.job_id, action.action) == (y, RecoveryOutcome.FINISHED)
    z = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    z.commit(rows_of(z, "z"))
    assert lines(backend, bucket) == expected("z")


# ---------------------------------------------------------------- recoveries racing each other and the driver
@pytest.mark.ci_on("localstack")
def test_recoveries_racing_each_other_end_with_one_finisher(backend):
    """Three `recover` runs at once on a job killed mid-commit: one finishes it, the others say another process
    did (none fails); the table is the job's, once."""
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    y = kill_overwrite(backend, bucket, "commit.after_complete:1")
    gate = threading.Barrier(3, timeout=TIMEOUT)
    slow = threading.Event()

    def slow_completes(name: str, index: int) -> None:
        if name == "commit.after_complete" and not slow.is_set():
            time.sleep(0.3)  # keep the three finishers overlapping

    def one() -> list:
        gate.wait()
        return recover(f"s3://{bucket}/t", s3=backend.options, job_id=y)

    with faults.installed(slow_completes), ThreadPoolExecutor(3) as pool:
        results = [f.result(TIMEOUT) for f in [pool.submit(one) for _ in range(3)]]
    actions = [a for found in results for a in found]
    assert actions and all(a.action is RecoveryOutcome.FINISHED for a in actions), [(a.action, a.detail) for a in actions]
    finished_here = [a for a in actions if a.report is not None and not a.report.finished_elsewhere]
    assert len(finished_here) == 1, [(a.action, a.detail) for a in actions]  # the others took turns and waited
    assert sum("another process" in a.detail for a in actions) == len(actions) - 1
    check_committed(backend.client, bucket, "t", y, plan.expected({t: 0 for t in range(plan.TASKS)}))


def hold_turn(backend, bucket: str, job_id: str, *, hostname: str, pid: int) -> None:
    """A finishing turn left by a `recover` that died while it held it."""
    from mpcommit.protocol.records.liveness import Holder, TurnRecord

    key = f"t/_temporary/mpcommit/{job_id}/finishing.json"
    backend.client.put_object(Bucket=bucket, Key=key,
                              Body=TurnRecord(job_id, Holder(hostname, pid, "recover")).to_bytes())


def test_a_turn_left_by_a_killed_recover_on_this_host_is_taken_at_once(backend):
    """The on-call engineer's `recover` was killed mid-finish and is run again on the same host: the turn's
    process no longer runs, so the new run finishes the job without waiting a lease."""
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    y = kill_overwrite(backend, bucket, "commit.after_complete:1")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    hold_turn(backend, bucket, y, hostname=__import__("socket").gethostname(), pid=int(gone.stdout))
    slow = OrderSettings(heartbeat_seconds=5, lease_seconds=60, poll_seconds=0.2)
    t0 = time.monotonic()
    [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=y, order=slow)
    assert action.action is RecoveryOutcome.FINISHED and not action.report.finished_elsewhere, action
    assert time.monotonic() - t0 < 30
    check_committed(backend.client, bucket, "t", y, plan.expected({t: 0 for t in range(plan.TASKS)}))


@pytest.mark.ci_on("localstack")
def test_a_turn_held_elsewhere_is_waited_for_until_its_heartbeat_is_silent_for_a_lease(backend):
    """A turn held by another host's `recover` is not taken while the job's heartbeat might still change; once it
    stays the same for a lease, the holder is taken for dead and this run finishes the job."""
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    y = kill_overwrite(backend, bucket, "commit.after_complete:1")
    hold_turn(backend, bucket, y, hostname="another-host.example", pid=1)
    t0 = time.monotonic()
    [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=y, order=QUICK)
    assert time.monotonic() - t0 >= QUICK.lease_seconds
    assert action.action is RecoveryOutcome.FINISHED and not action.report.finished_elsewhere, action
    check_committed(backend.client, bucket, "t", y, plan.expected({t: 0 for t in range(plan.TASKS)}))


def test_a_driver_whose_commit_fails_gives_its_turn_back_at_once(backend):
    """The driver holds its commit's finishing turn; when the commit fails after its journal (here an injected
    fault after the first complete) it gives the turn back, so that `recover` finishes the job at once instead
    of waiting a lease for a holder that is alive -- also on a store that cannot make a delete conditional
    (LocalStack answers NotImplemented: the turn is deleted while it still holds the driver's bytes)."""
    from mpcommit.errors import CommitStateUnknownError

    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    slow = OrderSettings(heartbeat_seconds=5, lease_seconds=60, poll_seconds=0.2)
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=slow)
    refs = rows_of(job, "new")
    with faults.installed(faults.fail_at("commit.after_complete", 1)), pytest.raises(CommitStateUnknownError):
        job.commit(refs)
    assert not [k for k in job_records(backend.client, bucket, "t", job.job_id) if k.endswith("/finishing.json")]
    t0 = time.monotonic()
    [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=job.job_id, order=slow)
    assert time.monotonic() - t0 < 20
    assert action.action is RecoveryOutcome.FINISHED and not action.report.finished_elsewhere, action
    assert lines(backend, bucket) == expected("new")


def test_a_turn_given_back_is_deleted_only_while_it_is_still_this_process_s(backend):
    """A finisher taken for gone (its heartbeat silent a lease) may find its turn taken over when it gives it
    back: the other finisher's turn stays."""
    from mpcommit.protocol.commit.turn import FinisherTurn
    from mpcommit.protocol.heartbeat import Heartbeat
    from mpcommit.protocol.layout import JobPaths

    bucket = backend.new_bucket("mpc-order")
    paths = JobPaths(parse_uri(f"s3://{bucket}/t"), "0d0d0d0d-0000-4000-8000-000000000001")
    store = S3Store(backend.options)
    heartbeat = Heartbeat(store, paths, QUICK.heartbeat_seconds, role="recover")
    mine = FinisherTurn(store, paths, QUICK, heartbeat)
    assert mine.take(ended=lambda: False)
    mine.release()
    assert store.head_object(bucket, paths.finishing) is None, "given back"
    assert mine.take(ended=lambda: False)
    backend.client.put_object(Bucket=bucket, Key=paths.finishing, Body=b'{"taken": "over"}')
    mine.release()
    assert backend.client.get_object(Bucket=bucket, Key=paths.finishing)["Body"].read() == b'{"taken": "over"}'
    heartbeat.stop()


# ---------------------------------------------------------------- a rollback racing the commit it rolls back
def test_a_rollback_that_claims_the_journal_first_stops_the_commit_whole(backend):
    """The adversarial review's case 4: the driver holds its place, a rollback (`recover --older-than`, `jobs
    abort`) claims the job's journal key first. The commit stops with JobRolledBackError before any file is
    visible; the rollback aborts everything; no records, no place left open."""
    bucket = backend.new_bucket("mpc-order")
    old = dataset(backend.client, bucket, "t")
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options)
    refs = rows_of(job, "j")

    def rollback_now(name: str, _index: int) -> None:
        if name == "commit.after_place":
            JobCommitter(S3Store(backend.options), job.destination, job.job_id).rollback(reason="test")

    with faults.installed(rollback_now), pytest.raises(JobRolledBackError, match="rolled back by another process"):
        job.commit(refs)
    check_aborted(backend.client, bucket, "t", job.job_id, before=old)
    assert not order_of(backend, bucket).view().open


def test_a_rollback_after_the_journal_is_claimed_is_refused_and_the_commit_finishes(backend):
    bucket = backend.new_bucket("mpc-order")
    pause = Pause("journal")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, progress=pause)
    refs = rows_of(job, "j")
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(job.commit, refs)
        assert pause.reached.wait(TIMEOUT)
        with pytest.raises(JobStateError, match="committing"):
            JobCommitter(S3Store(backend.options), job.destination, job.job_id).rollback(reason="test")
        [action] = recover(f"s3://{bucket}/t", s3=backend.options, older_than=0, dry_run=True)
        assert action.action is RecoveryOutcome.WOULD_FINISH
        pause.release.set()
        fut.result(TIMEOUT)
    assert lines(backend, bucket) == expected("j")


def test_a_commit_that_starts_after_a_finished_rollback_finds_its_records_gone(moto_backend):
    """The rollback ran to its end (its claim removed with the records) before the driver claimed its journal:
    the driver's claim succeeds, but its descriptor is gone -- it stops, nothing visible."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-order")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    refs = rows_of(job, "j")
    JobCommitter(S3Store(backend.options), job.destination, job.job_id).rollback(reason="test")
    with pytest.raises(JobRolledBackError, match="records are gone"):
        job.commit(refs)
    check_aborted(backend.client, bucket, "t", job.job_id)


# ---------------------------------------------------------------- a store that ignores conditional writes
class IgnoringStore(S3Store):
    """A store that accepts If-None-Match / If-Match and writes anyway, as some S3-compatible stores do."""

    def put_object(self, bucket, key, body, *, if_none_match=False, if_match=None, content_type="application/json"):
        return super().put_object(bucket, key, body, content_type=content_type)


def test_a_store_that_ignores_conditional_writes_refuses_concurrent_destructive_jobs(moto_backend):
    """Without conditional writes nothing can be ordered: no job runs until the user states that each table has
    one job at a time; and even then a destructive job refuses to run beside another one it can see."""
    from dataclasses import replace

    from mpcommit.errors import ConditionalWritesMissingError

    backend = moto_backend
    bucket = backend.new_bucket("mpc-order")
    forget_answers()
    unstated = IgnoringStore(backend.options)
    found = conditional_writes(unstated, bucket, "t/")
    assert not found.create_only and "accepted a write" in found.detail
    with pytest.raises(ConditionalWritesMissingError, match="single_writer=True.*Nothing was written"):
        Job.create(f"s3://{bucket}/t", mode="append", s3=backend.options, store=unstated)
    assert not backend.client.list_objects_v2(Bucket=bucket).get("Contents")
    store = IgnoringStore(replace(backend.options, single_writer=True))
    pause = Pause("journal")
    o1 = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, store=store, progress=pause)
    o2 = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, store=store)
    r1, r2 = rows_of(o1, "o1"), rows_of(o2, "o2")
    with ThreadPoolExecutor(1) as pool:
        f1 = pool.submit(o1.commit, r1)
        assert pause.reached.wait(TIMEOUT)
        with pytest.raises(ConcurrentJobsRefusedError, match=f"does not honour conditional writes.*{o1.job_id}"):
            o2.commit(r2)
        pause.release.set()
        f1.result(TIMEOUT)
    o2.abort()
    assert lines(backend, bucket) == expected("o1")
    check_aborted(backend.client, bucket, "t", o2.job_id)
    # Alone, a destructive job runs on such a store; stating the answer skips the probe.
    o3 = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, store=store)
    o3.commit(rows_of(o3, "o3"))
    assert lines(backend, bucket) == expected("o3")
    forget_answers()


def test_conditional_writes_can_be_stated_instead_of_probed(moto_backend):
    from dataclasses import replace

    backend = moto_backend
    bucket = backend.new_bucket("mpc-order")
    store = S3Store(replace(backend.options, conditional_writes=False))
    store.reset_counts()
    found = conditional_writes(store, bucket, "t/")
    assert (found.create_only, found.source) == (False, "stated") and store.request_counts() == {}


# ---------------------------------------------------------------- the order's own bookkeeping
def test_old_places_are_cleared_so_the_order_stays_short(moto_backend):
    """A table with many jobs lists a few hundred order records, not one per job ever run."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-order")
    settings = OrderSettings(keep_resolved=10)
    for i in range(60):
        job = Job.create(f"s3://{bucket}/t", s3=backend.options, order=settings)
        job.commit([write(job, 0, "dt=0", f"{i}\n")])
    view = order_of(backend, bucket).view()
    assert view.highest == 60 and len(view.positions) <= 10 + 25 and not view.open
    assert len(lines(backend, bucket)) == 60


def test_a_job_id_the_destination_knows_is_refused(moto_backend):
    """The adversarial review's case 7: a deterministic id reused for a second run would complete over the
    first run's files or adopt them."""
    from mpcommit.errors import UsageError

    backend = moto_backend
    bucket = backend.new_bucket("mpc-order")
    first = Job.create(f"s3://{bucket}/t", s3=backend.options, job_id=plan.JOB_ID)
    first.commit([write(first, 0, "dt=0", "first\n")])
    with pytest.raises(UsageError, match=f"job id {plan.JOB_ID} is already known"):
        Job.create(f"s3://{bucket}/t", s3=backend.options, job_id=plan.JOB_ID)
    live = Job.create(f"s3://{bucket}/t", s3=backend.options, job_id=plan.OTHER_JOB_ID)
    write(live, 0, "dt=0", "live\n")
    with pytest.raises(UsageError, match="already known"):
        Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, job_id=plan.OTHER_JOB_ID)
    assert lines(backend, bucket) == ["first"]


def test_a_partition_uri_and_the_whole_table_share_one_order(moto_backend):
    """A job writing s3://b/t/dt=0 takes its place in the order of table s3://b/t, so an overwrite of the table
    and an overwrite of the partition by its own URI are ordered against each other."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-order")
    seed(backend, bucket)
    part = Job.create(f"s3://{bucket}/t/dt=0", mode="overwrite", s3=backend.options)
    report = part.commit([write(part, 0, "", "part dt=0 a\n")])
    assert report.position == 2
    assert order_of(backend, bucket).entry(2).destination == "dt=0"
    assert lines(backend, bucket) == sorted(["old dt=1 a", "old dt=1 b", "part dt=0 a"])
    assert parse_uri(f"s3://{bucket}/t/dt=0").prefix == "t/dt=0"


def test_an_interrupted_job_holds_its_place_until_it_is_finished(moto_backend):
    """Killed after its journal, a job's place stays open: it is what makes later overwrites wait for it."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-order")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(CommitStateUnknownError):
        job.commit(rows_of(job, "j"))
    order = order_of(backend, bucket)
    assert order.view().open == [1] and order.entry(1).job_id == job.job_id
    recover(f"s3://{bucket}/t", s3=backend.options)
    assert order.view().open == [] and order.outcome(1).outcome is Outcome.COMMITTED
