"""One table, one order (issue 41): what an order entry covers, folders that are tables inside tables, and
partition spellings -- each case of the review forced, with no pause and no fault. Before the fixes each ended
with committed rows deleted or deleted rows brought back, every job reporting success.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mpcommit import Job
from mpcommit.compaction.standalone import compact
from mpcommit.errors import CommitConflictError, CommitFailedError, UsageError
from mpcommit.options import OrderSettings
from mpcommit.protocol import faults
from mpcommit.protocol.inventory import list_table_jobs
from mpcommit.protocol.layout import Table, parse_uri
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol.recovery import RecoveryOutcome, recover
from mpcommit.store.s3 import S3Store
from tests.reliability.test_fences import HoldOnce, run_in_thread
from tests.support.checks import pending_uploads
from tests.support.invariants import dataset

TIMEOUT = 90
QUICK = OrderSettings(heartbeat_seconds=0.5, lease_seconds=3.0, poll_seconds=0.2)


def commit(backend: Any, uri: str, tag: str, partitions: tuple[Any, ...] = ("dt=0",), *, mode: str = "append",
           po: str = "static", files_per_partition: int = 1) -> Any:
    job = Job.create(uri, mode=mode, partition_overwrite=po, s3=backend.options, order=QUICK)
    results = []
    for partition in partitions:
        for n in range(files_per_partition):
            task = len(results)
            with job.spec.task(task, 0) as attempt:
                with attempt.create(partition=partition, ext="txt") as out:
                    out.write(f"{tag} {n}\n".encode())
                    out.rows = 1
                results.append(attempt.commit())
    return job.commit(results)


def rows(backend: Any, bucket: str, prefix: str = "t") -> list[str]:
    return sorted(f"{key[len(prefix) + 1:].rsplit('/', 1)[0] if '/' in key[len(prefix) + 1:] else ''}: {line}"
                  for key, data in dataset(backend.client, bucket, prefix).items()
                  for line in data.decode().splitlines())


# ---------------------------------------------------------------- what an entry covers
def test_a_static_overwrite_waiting_beside_a_compaction_makes_it_give_up(backend):
    """Case 1: the daily static overwrite S of the table writes only today's partition (dt=1) and waits, as a
    whole-table overwrite must, for an earlier append E; meanwhile `mpcommit compact` merges dt=2's old files.
    S's place said it touched dt=1 only, so the compaction did not see that S replaces dt=2 too: both succeeded
    and dt=2's old rows came back in the merged file. S's place now covers its whole destination."""
    bucket = backend.new_bucket("mpc-scope")
    uri = f"s3://{bucket}/t"
    for i in range(4):
        commit(backend, uri, f"old{i}", ("dt=2",))
    hold = HoldOnce("commit.after_turn")
    with faults.installed(hold):
        e_thread, e = run_in_thread("e", lambda: commit(backend, uri, "e", ("dt=0",)))
        assert hold.reached.wait(TIMEOUT)  # E holds its place, committing
        s_thread, s = run_in_thread("s", lambda: commit(backend, uri, "s", ("dt=1",), mode="overwrite"))
        order = TableOrder(S3Store(backend.options), Table(bucket, "t"))
        for _ in range(int(TIMEOUT / 0.1)):  # S has its place: it waits for E
            if len(order.view().open) == 2:
                break
            threading.Event().wait(0.1)
        with pytest.raises(CommitConflictError, match="overwrite"):
            compact(uri, s3=backend.options, order_settings=QUICK)
        hold.release.set()
        e_thread.join(TIMEOUT)
        s_thread.join(TIMEOUT)
    assert "error" not in e and "error" not in s, (e, s)
    assert rows(backend, bucket) == ["dt=1: s 0"]
    assert pending_uploads(backend.client, bucket, "t") == []


# ---------------------------------------------------------------- tables inside tables
def test_a_destination_inside_another_table_is_refused_by_name(backend):
    """Case 2, the way in: a folder of a table that is not a col=value partition would be a table of its own,
    with an order the enclosing table's jobs never read."""
    bucket = backend.new_bucket("mpc-scope")
    commit(backend, f"s3://{bucket}/t", "t")
    for inside in ("t/sub", "t/dt=0/sub", "t/a/b"):
        with pytest.raises(UsageError, match=f"lies inside the table s3://{bucket}/t.*Nothing was written"):
            Job.create(f"s3://{bucket}/{inside}", s3=backend.options)
    # A partition of it by its own URI is the same table: allowed, one order.
    report = commit(backend, f"s3://{bucket}/t/dt=5", "p", ("",))
    assert report.position == 2
    assert not [k for k in dataset(backend.client, bucket, "t") if "/sub/" in k or "/a/" in k]


@pytest.mark.parametrize("partition", ["sub", "dt=a/b", "dt=1/x"])
def test_a_partition_path_that_is_not_col_value_folders_is_refused(moto_backend, partition):
    """Case 2, the other way round: an append to t with the partition `sub` (or `dt=a/b`) wrote into what an
    overwrite of s3://B/t/sub took for its own table, each in an order of its own."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-scope")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    with job.spec.task(0, 0) as attempt, pytest.raises(UsageError, match="is not a col=value folder"):
        attempt.create(partition=partition, ext="txt")
    job.abort()
    assert pending_uploads(backend.client, bucket, "t") == []


def test_an_overwrite_of_a_table_leaves_a_nested_tables_files_even_when_it_commits_during_the_wait(
        backend, monkeypatch):
    """Case 2: an overwrite O of t waits for an earlier job E of t; a job N of the folder t/sub, a table of its own,
    is created and commits during that wait. O checked for nested jobs once, before its wait, then deleted N's
    files. A job of t/sub is refused now while t has an order (above); here that refusal is set aside, standing
    for a nested table made before (or in the instant of) t's first place: what O deletes must still leave out
    every key under a nested table's root, from the listing O makes after its wait."""
    import mpcommit.protocol.job as job_module

    bucket = backend.new_bucket("mpc-scope")
    commit(backend, f"s3://{bucket}/t", "old", ("dt=0",))
    hold = HoldOnce("commit.after_turn")
    with faults.installed(hold):
        e_thread, e = run_in_thread("e", lambda: commit(backend, f"s3://{bucket}/t", "e", ("dt=1",)))
        assert hold.reached.wait(TIMEOUT)
        o_thread, o = run_in_thread("o", lambda: commit(backend, f"s3://{bucket}/t", "o", ("dt=0",),
                                                        mode="overwrite"))
        order = TableOrder(S3Store(backend.options), Table(bucket, "t"))
        for _ in range(int(TIMEOUT / 0.1)):  # O has its place: it waits for E
            if len(order.view().open) == 2 or "error" in o:
                break
            threading.Event().wait(0.1)
        monkeypatch.setattr(job_module, "refuse_inside_another_table", lambda store, destination: None)
        commit(backend, f"s3://{bucket}/t/sub", "n", ("dt=0",), files_per_partition=3)
        hold.release.set()
        e_thread.join(TIMEOUT)
        o_thread.join(TIMEOUT)
    assert "error" not in o and "error" not in e, (o, e)
    assert rows(backend, bucket, "t/sub") == ["dt=0: n 0", "dt=0: n 1", "dt=0: n 2"]
    assert [r for r in rows(backend, bucket) if not r.startswith("sub/")] == ["dt=0: o 0"]


def test_a_compaction_of_a_table_leaves_a_nested_table_alone(backend):
    """Case 5: compacting t merged the idle nested table t/sub's files too -- outside t/sub's order, so that an
    overwrite of t/sub between the compaction's check and its completes left old rows beside new."""
    bucket = backend.new_bucket("mpc-scope")
    for i in range(3):
        commit(backend, f"s3://{bucket}/t/sub", f"n{i}", ("dt=0",))
    for i in range(3):
        commit(backend, f"s3://{bucket}/t", f"t{i}", ("dt=0",))
    nested_before = set(dataset(backend.client, bucket, "t/sub"))
    report = compact(f"s3://{bucket}/t", s3=backend.options)
    assert sum(len(b.sources) for b in report.merged) == 3
    assert set(dataset(backend.client, bucket, "t/sub")) == nested_before


def test_a_half_finished_job_of_a_nested_table_is_finished_by_its_own_recover(backend):
    """Case 3: a job of the nested table killed in its commit, then an overwrite of the enclosing table: `jobs
    recover` of the nested table failed every time (the overwrite had deleted some of its completed files). The
    overwrite leaves them now, and the nested table's own recover finishes its job whole."""
    bucket = backend.new_bucket("mpc-scope")
    job = Job.create(f"s3://{bucket}/t/sub", s3=backend.options, order=QUICK)
    results = []
    for task in range(4):
        with job.spec.task(task, 0) as attempt:
            with attempt.create(partition="dt=0", ext="txt") as out:
                out.write(f"n {task}\n".encode())
            results.append(attempt.commit())
    with faults.installed(faults.fail_at("commit.after_complete", 2)), pytest.raises(Exception):
        job.commit(results)
    # While it is half-finished, an overwrite of t refuses by name, deleting nothing.
    with pytest.raises(CommitFailedError, match="holds another table.*job in flight"):
        commit(backend, f"s3://{bucket}/t", "o", ("dt=0",), mode="overwrite")
    [action] = recover(f"s3://{bucket}/t/sub", s3=backend.options, order=QUICK)
    assert action.action is RecoveryOutcome.FINISHED, action
    assert rows(backend, bucket, "t/sub") == [f"dt=0: n {t}" for t in range(4)]
    commit(backend, f"s3://{bucket}/t", "o", ("dt=0",), mode="overwrite")
    assert rows(backend, bucket, "t/sub") == [f"dt=0: n {t}" for t in range(4)]
    assert [r for r in rows(backend, bucket) if not r.startswith("sub/")] == ["dt=0: o 0"]


# ---------------------------------------------------------------- one spelling per partition
@pytest.mark.parametrize(("given", "values"), [("dt=a=b", {"dt": "a=b"}), ("dt=a%3db", {"dt": "a=b"}),
                                               ("dt=c%20d", {"dt": "c d"}), ("dt=%5F_x", {"dt": "__x"})])
def test_a_partition_given_as_a_path_is_the_partition_its_values_name(backend, given, values):
    """Case 4: appends to `dt=a=b`, `dt=a%3db`, `dt=c%20d`, `dt=%5F_x` were taken verbatim, so dynamic overwrites
    of the same values neither replaced them nor were ordered against them."""
    bucket = backend.new_bucket("mpc-scope")
    uri = f"s3://{bucket}/t"
    old = commit(backend, uri, "old", (given,))
    new = commit(backend, uri, "new", (values,), mode="overwrite", po="dynamic")
    assert old.partitions == new.partitions
    assert [line.split(": ", 1)[1] for line in rows(backend, bucket)] == ["new 0"]
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"))
    assert order.entry(new.position).overlaps(order.entry(old.position).touches)


def test_a_destination_whose_partition_folder_is_not_spelled_as_spark_spells_it_is_refused(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket("mpc-scope")
    with pytest.raises(UsageError, match=r"not spelled as Spark's writer spells it.*t/dt=a%3Db"):
        Job.create(f"s3://{bucket}/t/dt=a=b", s3=backend.options)
    Job.create(f"s3://{bucket}/t/dt=a%3Db", s3=backend.options).abort()


# ---------------------------------------------------------------- every job a tool can see
def test_jobs_of_a_tables_partition_destinations_are_listed_with_the_table(backend):
    """Case 6 (a near miss): a job of s3://B/t/dt=1 interrupted in its commit, or still writing, was not shown by
    `jobs list s3://B/t` ("No jobs"), although `jobs recover s3://B/t` finished it."""
    bucket = backend.new_bucket("mpc-scope")
    committing = Job.create(f"s3://{bucket}/t/dt=1", s3=backend.options, order=QUICK)
    with committing.spec.task(0, 0) as attempt:
        with attempt.create(partition="", ext="txt") as out:
            out.write(b"c\n")
        ref = attempt.commit()
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(Exception):
        committing.commit([ref])
    writing = Job.create(f"s3://{bucket}/t/dt=2", s3=backend.options, order=QUICK)
    with writing.spec.task(0, 0) as attempt:
        with attempt.create(partition="", ext="txt") as out:
            out.write(b"w\n")
        attempt.commit()
    store = S3Store(backend.options)
    found = {s.job_id: s for s in list_table_jobs(store, parse_uri(f"s3://{bucket}/t"))}
    assert set(found) == {committing.job_id, writing.job_id}
    assert found[committing.job_id].destination.prefix == "t/dt=1"
    writing.abort()
    [action] = recover(f"s3://{bucket}/t", s3=backend.options, order=QUICK)
    assert (action.job_id, action.action) == (committing.job_id, RecoveryOutcome.FINISHED)


# ---------------------------------------------------------------- one ledger: application versions
def txn_commit(backend: Any, bucket: str, app: str, version: int, tag: str, *, mode: str = "append") -> Any:
    from mpcommit import Txn

    job = Job.create(f"s3://{bucket}/t", mode=mode, s3=backend.options, order=QUICK, txn=Txn(app, version))
    results = []
    if not job.ignored:
        with job.spec.task(0, 0) as attempt:
            with attempt.create(partition="dt=0", ext="txt") as out:
                out.write(f"{tag}\n".encode())
            results.append(attempt.commit())
    return job.commit(results)


def test_a_rerun_of_a_committed_version_writes_nothing_and_says_so(backend):
    """The scheduler's re-run of a daily job that did commit (its driver died before it could say so), and a
    foreachBatch replaying a micro-batch: the same (application, version) is a no-op naming the commit that holds
    it; an older version is refused by name; a newer one commits."""
    from mpcommit.errors import TxnVersionError

    bucket = backend.new_bucket("mpc-txn")
    first = txn_commit(backend, bucket, "daily", 7, "run7")
    again = txn_commit(backend, bucket, "daily", 7, "run7-again")
    assert again.duplicate_of is not None and again.duplicate_of.job_id == first.job_id, again
    assert "committed already" in str(again)
    with pytest.raises(TxnVersionError, match="older than version 7"):
        txn_commit(backend, bucket, "daily", 6, "run6")
    txn_commit(backend, bucket, "other-app", 1, "other")
    txn_commit(backend, bucket, "daily", 8, "run8")
    assert [r.split(": ", 1)[1] for r in rows(backend, bucket)] == ["other", "run7", "run8"]
    assert pending_uploads(backend.client, bucket, "t") == []


def test_two_runs_of_one_version_at_once_commit_it_once(backend):
    """Both runs passed the check at creation (nothing committed yet) and commit at once: the later place waits
    for the earlier one of its application, then finds the version committed and writes nothing."""
    from mpcommit import Txn

    bucket = backend.new_bucket("mpc-txn")
    jobs = [Job.create(f"s3://{bucket}/t", s3=backend.options, order=QUICK, txn=Txn("daily", 1)) for _ in range(2)]
    results = []
    for i, job in enumerate(jobs):
        with job.spec.task(0, 0) as attempt:
            with attempt.create(partition="dt=0", ext="txt") as out:
                out.write(f"run{i}\n".encode())
            results.append([attempt.commit()])
    hold = HoldOnce("commit.after_turn")
    with faults.installed(hold):
        first_thread, first = run_in_thread("first", lambda: jobs[0].commit(results[0]))
        assert hold.reached.wait(TIMEOUT)
        second_thread, second = run_in_thread("second", lambda: jobs[1].commit(results[1]))
        threading.Event().wait(1.0)  # the second holds its place and waits for the first
        assert "report" not in second
        hold.release.set()
        first_thread.join(TIMEOUT)
        second_thread.join(TIMEOUT)
    assert second["report"].duplicate_of.job_id == jobs[0].job_id, second
    assert [r.split(": ", 1)[1] for r in rows(backend, bucket)] == ["run0"]
    assert pending_uploads(backend.client, bucket, "t") == []


def test_an_application_version_outlives_the_collection_of_its_place(moto_backend):
    """The order's collection deletes old places; the checkpoint keeps each application's newest version, so a
    replay long after is still recognised (before, the streaming sink refused: "cleared after many later jobs")."""
    from mpcommit import Txn

    backend = moto_backend
    bucket = backend.new_bucket("mpc-txn")
    settings = OrderSettings(keep_resolved=10)
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, order=settings, txn=Txn("stream-q", 41))
    with job.spec.task(0, 0) as attempt:
        with attempt.create(partition="dt=0", ext="txt") as out:
            out.write(b"batch41\n")
        ref = attempt.commit()
    first = job.commit([ref])
    for i in range(30):
        later = Job.create(f"s3://{bucket}/t", s3=backend.options, order=settings)
        with later.spec.task(0, 0) as attempt:
            with attempt.create(partition="dt=1", ext="txt") as out:
                out.write(f"a{i}\n".encode())
            ref = attempt.commit()
        later.commit([ref])
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"))
    assert order.entry(first.position) is None, "collected"
    assert order.txn_state("stream-q").newest.version == 41
    replay = Job.create(f"s3://{bucket}/t", s3=backend.options, txn=Txn("stream-q", 41))
    assert replay.ignored and replay.commit([]).duplicate_of.job_id == job.job_id
