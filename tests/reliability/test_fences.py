"""A process that lost its job must not act (SPEC I10): each scenario of the fencing review, forced.

The randomized order trials (test_order_trials.py) kill processes; these pause them -- SIGSTOP at a named commit
checkpoint, as a long GC, a suspended VM or a closed laptop lid would, every thread of the process frozen, its
heartbeat's too -- or cut their heartbeat off from the store while they go on, and meanwhile let another process
take the job over, finish it, and let later jobs commit until the order's collection forgets the places involved.
Then the paused process resumes. Before the fences, each of these ended with committed rows deleted and every
process reporting success. The outcome asserted each time: the table a serial run of the jobs in the order of
their places leaves, and the paused process saying that another one finished its job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mpcommit import Job
from mpcommit.errors import ConditionalWritesMissingError, JobStateError, TransientStoreError
from mpcommit.options import OrderSettings
from mpcommit.protocol import faults
from mpcommit.protocol.commit import JobCommitter
from mpcommit.protocol.layout import Table
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol.recovery import RecoveryOutcome, recover
from mpcommit.store.conditional import forget_answers
from mpcommit.store.s3 import S3Store
from tests.support.checks import pending_uploads
from tests.support.invariants import dataset, job_records

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 90
#: Death noticed within seconds, and the order collected after a few jobs: what makes each scenario short.
ORDER = {"heartbeat_seconds": 0.5, "lease_seconds": 3.0, "poll_seconds": 0.2, "keep_resolved": 10}
SETTINGS = OrderSettings(**ORDER)
#: Appends committed while the paused process is away: enough for the collection (every 25 places, keeping 10)
#: to clear the places that decide what the paused process may delete.
APPENDS = 30


# ---------------------------------------------------------------- a job in a process of its own, paused
class PausedJob:
    """tests/reliability/trial_job.py's write job in a process of its own, which SIGSTOPs itself at the given
    checkpoints (``MPCOMMIT_FAULT=point:k:stop,...``) and goes on when continued."""

    def __init__(self, backend: Any, bucket: str, *, name: str, mode: str, stops: str,
                 partitions: tuple[str, ...] = ("dt=0", "dt=1")):
        spec = {"role": "write", "endpoint": backend.endpoint_url, "bucket": bucket, "table": "t", "mode": mode,
                "po": "static", "order": ORDER, "name": name, "commit_threads": 2,
                "files": [{"task": i, "partition": p, "rows": 2} for i, p in enumerate(partitions)]}
        env = {**os.environ, "MPCOMMIT_FAULT": stops, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.trial_job", json.dumps(spec)],
                                     cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{time.time()}\n".encode())
        self.proc.stdin.close()
        self.proc.stdin = None  # communicate() must not flush it
        self.name = name

    def wait_stopped(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} ended instead of pausing: {self.proc.stderr.read().decode()[-3000:]}")
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
            time.sleep(0.05)
        pytest.fail(f"{self.name} never paused")

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def events(self) -> list[dict[str, Any]]:
        out, err = self.proc.communicate(timeout=TIMEOUT)
        events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        assert events and events[-1]["event"] == "end", err.decode()[-3000:]
        return events

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def open_job(backend: Any, bucket: str) -> str:
    """The job id of the one job whose place is open in the order of ``t``."""
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), SETTINGS)
    [place] = order.view().open
    return order.entry(place).job_id


def commit_lines(backend: Any, bucket: str, tag: str, *, mode: str = "append",
                 partitions: tuple[str, ...] = ("dt=0",), store: S3Store | None = None) -> Any:
    job = Job.create(f"s3://{bucket}/t", mode=mode, s3=backend.options, order=SETTINGS, store=store)
    results = []
    for task, partition in enumerate(partitions):
        with job.spec.task(task, 0) as attempt:
            with attempt.create(partition=partition, ext="txt") as out:
                out.write(f"{tag} {partition}\n".encode())
                out.rows = 1
            results.append(attempt.commit())
    return job.commit(results)


def rows(backend: Any, bucket: str) -> list[str]:
    return sorted(line for data in dataset(backend.client, bucket, "t").values()
                  for line in data.decode().splitlines())


def rows_of_trial_job(name: str, partitions: tuple[str, ...] = ("dt=0", "dt=1")) -> list[str]:
    return [f"{name} {p} t{i} r{r}" for i, p in enumerate(partitions) for r in range(2)]


def position_of(backend: Any, bucket: str, job_id: str) -> int:
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"), SETTINGS)
    found = order.find(job_id)
    assert found is not None
    return found.position


def collected(backend: Any, bucket: str, position: int) -> bool:
    """Whether the order's collection deleted the place at ``position``."""
    return TableOrder(S3Store(backend.options), Table(bucket, "t"), SETTINGS).entry(position) is None


def said_finished_elsewhere(events: list[dict[str, Any]]) -> None:
    end = events[-1]
    assert end["ok"] and end["finished_elsewhere"], end


# ---------------------------------------------------------------- the scenarios
def test_a_paused_overwrite_taken_over_and_collected_deletes_no_later_append(backend):
    """Scenario 1. Overwrite O takes its place; append S commits after it; O lists the scope it replaces (S's
    file in it) and pauses. `recover` finds O silent for a lease, takes it over and finishes it; appends go on
    until the order's collection clears S's place. O resumes: before the fences it judged S older from the
    places that were left and deleted S's file, reporting success."""
    bucket = backend.new_bucket("mpc-fence")
    commit_lines(backend, bucket, "old", partitions=("dt=0", "dt=1"))
    o = PausedJob(backend, bucket, name="o", mode="overwrite",
                  stops="commit.after_place:1:stop,commit.after_replace_listing:1:stop")
    try:
        o.wait_stopped()
        o_id = open_job(backend, bucket)
        s = commit_lines(backend, bucket, "s")
        o.resume()
        o.wait_stopped()
        [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=o_id, order=SETTINGS)
        assert action.action is RecoveryOutcome.FINISHED and not action.report.finished_elsewhere, action
        later = [commit_lines(backend, bucket, f"a{i}") for i in range(APPENDS)]
        assert collected(backend, bucket, s.position), "the collection must have cleared S's place"
        o.resume()
        events = o.events()
    finally:
        o.kill()
    assert rows(backend, bucket) == sorted(rows_of_trial_job("o") + ["s dt=0"] + [f"a{i} dt=0" for i in
                                                                                  range(APPENDS)])
    said_finished_elsewhere(events)
    assert all(r.position > s.position for r in later)
    assert not job_records(backend.client, bucket, "t", o_id) and pending_uploads(backend.client, bucket, "t") == []


def test_a_driver_paused_before_its_turn_finds_its_job_finished_and_takes_no_turn(backend):
    """Scenario 2, default pace and no lease to wait for: O pauses right after its journal; an ordinary
    `recover` (a cron) finishes O; appends commit until the collection clears their places. Before the fences
    O took the finishing turn again (the finished job's records were gone, so its create succeeded), listed the
    table afresh and deleted every append whose place was cleared."""
    bucket = backend.new_bucket("mpc-fence")
    commit_lines(backend, bucket, "old", partitions=("dt=0", "dt=1"))
    o = PausedJob(backend, bucket, name="o", mode="overwrite", stops="commit.after_journal:1:stop")
    try:
        o.wait_stopped()
        o_id = open_job(backend, bucket)
        o_position = position_of(backend, bucket, o_id)
        [action] = recover(f"s3://{bucket}/t", s3=backend.options, order=SETTINGS)
        assert (action.job_id, action.action) == (o_id, RecoveryOutcome.FINISHED), action
        for i in range(APPENDS):
            commit_lines(backend, bucket, f"a{i}")
        assert collected(backend, bucket, o_position + 1)
        o.resume()
        events = o.events()
    finally:
        o.kill()
    assert rows(backend, bucket) == sorted(rows_of_trial_job("o") + [f"a{i} dt=0" for i in range(APPENDS)])
    said_finished_elsewhere(events)
    assert not job_records(backend.client, bucket, "t", o_id), "no turn or heartbeat of a finished job left"


class Brownout(S3Store):
    """The store as one process sees it while its writes of heartbeats fail (a brownout that spares the rest)."""

    def __init__(self, options: Any):
        super().__init__(options)
        self.on = threading.Event()

    def put_object(self, bucket, key, body, **kw):  # noqa: ANN001, ANN003, ANN201
        if key.endswith("/alive.json") and self.on.is_set():
            raise TransientStoreError("503 SlowDown (the test's brownout)", operation="put_object", key=key)
        return super().put_object(bucket, key, body, **kw)


class HoldOnce:
    """A fault hook that holds the first thread reaching ``point`` (of those named ``thread``, when given) until
    released, and counts that thread's later arrivals."""

    def __init__(self, point: str, thread: str = ""):
        self.point, self.thread = point, thread
        self.reached, self.release = threading.Event(), threading.Event()
        self.after_release = 0  # checkpoints of this thread's commit reached after the release

    def __call__(self, name: str, index: int) -> None:
        here = threading.current_thread().name.startswith(self.thread)
        if name == self.point and here and not self.reached.is_set():
            self.reached.set()
            assert self.release.wait(TIMEOUT), "never released"
        elif name == self.point and here and self.release.is_set():
            self.after_release += 1


def run_in_thread(name: str, fn: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def body() -> None:
        try:
            result["report"] = fn(*args)
        except Exception as exc:  # noqa: BLE001 - inspected by the test
            result["error"] = exc

    thread = threading.Thread(target=body, name=name)
    thread.start()
    return thread, result


def test_a_live_overwrite_whose_heartbeat_failed_during_a_slow_listing_deletes_nothing_later(backend):
    """Scenario 3, no pause: O's heartbeat writes fail for longer than the lease (a brownout of the store for O)
    while O goes on, its listing of what it replaces slow; `recover` takes O for dead, finishes it, appends commit
    and the collection runs; the brownout ends and O's listing returns. Before the fences, O's heartbeat had
    given up after three failed beats and O deleted the appends whose places were cleared."""
    bucket = backend.new_bucket("mpc-fence")
    commit_lines(backend, bucket, "old", partitions=("dt=0", "dt=1"))
    store = Brownout(backend.options)
    # The first to reach each point is O: S is an append (no listing), and `recover` starts later.
    after_place, listing = HoldOnce("commit.after_place"), HoldOnce("commit.after_replace_listing")
    with faults.installed(after_place), faults.installed(listing):
        thread, result = run_in_thread("o", lambda: commit_lines(backend, bucket, "o", mode="overwrite",
                                                                 partitions=("dt=0", "dt=1"), store=store))
        assert after_place.reached.wait(TIMEOUT)
        o_id = open_job(backend, bucket)
        s = commit_lines(backend, bucket, "s")
        after_place.release.set()
        assert listing.reached.wait(TIMEOUT)
        store.on.set()
        [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=o_id, order=SETTINGS)
        assert action.action is RecoveryOutcome.FINISHED and not action.report.finished_elsewhere, action
        for i in range(APPENDS):
            commit_lines(backend, bucket, f"a{i}")
        assert collected(backend, bucket, s.position)
        store.on.clear()
        listing.release.set()
        thread.join(TIMEOUT)
    assert "error" not in result, result
    assert rows(backend, bucket) == sorted(["o dt=0", "o dt=1", "s dt=0"] + [f"a{i} dt=0" for i in range(APPENDS)])
    assert result["report"].finished_elsewhere


def test_a_live_driver_taken_over_mid_completes_completes_nothing_more(backend):
    """Scenario 3's variant without a slow listing: O completes its files one at a time when its heartbeat
    writes start failing; `recover` takes it for dead and completes the rest. When O goes on it must not
    complete the same uploads beside the taker (LocalStack makes two completes of one upload non-atomic)."""
    bucket = backend.new_bucket("mpc-fence")
    commit_lines(backend, bucket, "old", partitions=("dt=0", "dt=1"))
    store = Brownout(backend.options)
    partitions = tuple(f"dt={i}" for i in range(6))
    job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=backend.options, order=SETTINGS, store=store,
                     commit_threads=0)
    results = []
    for task, partition in enumerate(partitions):
        with job.spec.task(task, 0) as attempt:
            with attempt.create(partition=partition, ext="txt") as out:
                out.write(f"o {partition}\n".encode())
                out.rows = 1
            results.append(attempt.commit())
    first = HoldOnce("commit.after_complete", "o")
    with faults.installed(first):
        thread, result = run_in_thread("o", job.commit, results)
        assert first.reached.wait(TIMEOUT)
        store.on.set()
        [action] = recover(f"s3://{bucket}/t", s3=backend.options, job_id=job.job_id, order=SETTINGS)
        assert action.action is RecoveryOutcome.FINISHED and not action.report.finished_elsewhere, action
        store.on.clear()
        first.release.set()
        thread.join(TIMEOUT)
    assert first.after_release == 0, f"O completed {first.after_release} more files after it lost its job"
    assert "error" not in result, result
    assert result["report"].finished_elsewhere
    assert rows(backend, bucket) == sorted(f"o {p}" for p in partitions)


def test_without_conditional_writes_nothing_runs_unless_one_writer_is_stated(moto_backend):
    """Scenario 4: on a store that accepts If-None-Match and writes anyway, `jobs abort` and the job's driver
    could both claim the journal key; the rollback then silently replaced the journal of a commit that had
    completed half its files, and every tool said "nothing of it is visible". No claim is ever raced now: such
    a store runs nothing until the user states that each table has one job at a time."""
    from dataclasses import replace

    from tests.reliability.test_table_order import IgnoringStore

    backend = moto_backend
    bucket = backend.new_bucket("mpc-fence")
    forget_answers()
    try:
        stated = replace(backend.options, single_writer=True)
        job = Job.create(f"s3://{bucket}/t", s3=stated, store=IgnoringStore(stated))
        with job.spec.task(0, 0) as attempt:
            with attempt.create(partition="dt=0", ext="txt") as out:
                out.write(b"j\n")
            ref = attempt.commit()
        unstated = IgnoringStore(backend.options)
        with pytest.raises(ConditionalWritesMissingError, match="does not honour conditional writes"):
            JobCommitter(unstated, job.destination, job.job_id).rollback(reason="`mpcommit jobs abort`")
        [action] = recover(f"s3://{bucket}/t", store=unstated, job_id=job.job_id)
        assert action.action is RecoveryOutcome.FAILED and "single_writer=True" in action.detail, action
        job.commit([ref])
        assert rows(backend, bucket) == ["j"]
        # "Nothing of it is visible" is checked there, not assumed: a rolled-back job's file that a commit beside
        # the rollback completed (the race such a store cannot stop) is found and deleted.
        other = Job.create(f"s3://{bucket}/t", s3=stated, store=IgnoringStore(stated))
        with other.spec.task(0, 0) as attempt:
            with attempt.create(partition="dt=1", ext="txt") as out:
                out.write(b"half\n")
            half = attempt.commit()
        [upload] = half.manifest.uploads
        backend.client.complete_multipart_upload(
            Bucket=bucket, Key=upload.key, UploadId=upload.upload_id,
            MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in upload.parts]})
        assert "half" in " ".join(rows(backend, bucket))
        JobCommitter(IgnoringStore(stated), other.destination, other.job_id).rollback(reason="`mpcommit jobs abort`")
        assert rows(backend, bucket) == ["j"]
    finally:
        forget_answers()


def test_hostile_order_records_are_ignored_by_name(moto_backend, caplog, monkeypatch):
    """Scenario 5: a well-formed entry at position 2**64-1 and an empty key named with Arabic-Indic digits under
    the order made every later job fail with a raw TypeError or ValueError, and `recover` crash."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-fence")
    root = "t/_mpcommit/order/"
    huge = 2**64 - 1
    entry = {"kind": "mpcommit.OrderEntry", "version": 1, "position": huge, "jobId": "x", "bucket": bucket,
             "table": "t", "destination": "", "purpose": "write", "mode": "append", "partitionOverwrite": "static",
             "touches": [""], "replaces": [], "created": 0, "hostname": "h"}
    backend.client.put_object(Bucket=bucket, Key=f"{root}{huge:020d}", Body=json.dumps(entry).encode())
    arabic = "".join(chr(0x0660 + int(d)) for d in f"{7:020d}")
    backend.client.put_object(Bucket=bucket, Key=f"{root}{arabic}", Body=b"")
    report = commit_lines(backend, bucket, "j")
    assert report.position == 1
    assert rows(backend, bucket) == ["j dt=0"]
    order = TableOrder(S3Store(backend.options), Table(bucket, "t"))
    assert sorted(order.view().strays) == sorted([f"{root}{huge:020d}", f"{root}{arabic}"])
    import mpcommit.protocol.order as order_module

    order_module._WARNED.clear()  # warned once per table and process: this test wants to see it
    with caplog.at_level("WARNING", logger="mpcommit.protocol.order"):
        assert recover(f"s3://{bucket}/t", s3=backend.options) == []
    assert f"s3://{bucket}/{root}{huge:020d}" in caplog.text and "Remove them" in caplog.text
    import mpcommit.operations.doctor as doctor
    from mpcommit.protocol.layout import parse_uri

    monkeypatch.setattr(doctor, "run_probes", lambda *a, **k: [])  # the store's probes are tests/stores' business
    diagnosis = doctor.diagnose(S3Store(backend.options), parse_uri(f"s3://{bucket}/t"))
    assert sorted(diagnosis.order_strays) == sorted(f"s3://{bucket}/{k}" for k in order.view().strays)


@pytest.mark.ci_on("localstack")
def test_a_dead_append_does_not_stop_the_order_from_being_collected(backend):
    """Scenario 6: an append killed after taking its place is never waited for (appends do not wait), so before
    this its open place kept the order from being collected for ever: two records more per job, every job
    listing all of them. The collection now takes a place silent for a lease over, as a waiting overwrite would."""
    bucket = backend.new_bucket("mpc-fence")
    dead = PausedJob(backend, bucket, name="dead", mode="append", stops="commit.after_place:1:kill")
    dead.proc.wait(TIMEOUT)
    dead_id = open_job(backend, bucket)
    time.sleep(SETTINGS.lease_seconds + 1)  # silent for a lease, by the store's clock (1 s resolution)
    for i in range(APPENDS + 10):
        commit_lines(backend, bucket, f"a{i}")
    view = TableOrder(S3Store(backend.options), Table(bucket, "t"), SETTINGS).view()
    assert not view.open
    assert len(view.positions) <= SETTINGS.keep_resolved + 25
    assert not job_records(backend.client, bucket, "t", dead_id)
    assert pending_uploads(backend.client, bucket, "t") == []
    assert rows(backend, bucket) == sorted(f"a{i} dt=0" for i in range(APPENDS + 10))


def test_a_rollback_refuses_a_job_whose_commit_began(moto_backend):
    """The barrier the fences build on: once a journal exists, no rollback (an abort, a take-over of a job
    whose heartbeat went silent before its journal) may proceed."""
    backend = moto_backend
    bucket = backend.new_bucket("mpc-fence")
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    with job.spec.task(0, 0) as attempt:
        with attempt.create(partition="dt=0", ext="txt") as out:
            out.write(b"j\n")
        ref = attempt.commit()
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(Exception):
        job.commit([ref])
    with pytest.raises(JobStateError, match="is committing"):
        JobCommitter(S3Store(backend.options), job.destination, job.job_id).rollback(reason="test")
