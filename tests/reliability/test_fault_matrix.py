"""The fault matrix: a failure at every checkpoint of the protocol, as a raised exception (in this process) and as
SIGKILL of a subprocess running the job, followed by ``recover`` or ``abort``; the result is checked with the
independent invariant checker (tests/support/invariants.py).

Every case runs in a scene that makes damage visible: old data in the destination (the job is an overwrite),
another job of the same destination with pending uploads and records, and sibling prefixes -- one of them with a
pending upload that even carries the job's id. The full matrix runs on moto; a representative subset on LocalStack
and on the Go servers selected (versitygw in `make test`; SeaweedFS with MPCOMMIT_TEST_BACKENDS).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError, JobRolledBackError, JobStateError
from mpcommit.protocol.commit import JobCommitter
from mpcommit.protocol.order import TableOrder
from mpcommit.protocol import faults
from mpcommit.protocol.records.manifest import TaskResult
from mpcommit.protocol.inventory import list_jobs
from mpcommit.protocol.recovery import recover
from tests.support.backends import selected_backends
from tests.reliability import crash_driver as plan
from tests.reliability.scene import (
    DELETE_BATCH,
    EXPECTED,
    OLD,
    Scene,
    is_old,
    is_success,
    make_scene,
    reference_bucket,
    run_job_in_process,
)
from tests.support.checks import pending_uploads
from tests.support.servers import GO_SERVERS
from tests.support.invariants import (
    bucket_state,
    check_aborted,
    check_committed,
    check_new_complete_or_old_whole,
    check_not_visible,
    check_others_untouched,
    check_same_result,
    check_unchanged,
    dataset,
    job_records,
    job_uploads,
)

DRIVER = Path(__file__).with_name("crash_driver.py")
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Point:
    name: str
    k: int = 1

    @property
    def id(self) -> str:
        return f"{self.name}:{self.k}"

    @property
    def worker(self) -> bool:
        return self.name.startswith(("writer.", "task."))


WORKER_POINTS = [Point("writer.created"), Point("writer.part_uploaded", 1), Point("writer.part_uploaded", 2),
                 Point("task.before_commit"), Point("task.after_commit")]
COMMIT_POINTS = [Point("commit.after_journal"), Point("commit.after_turn"), Point("commit.after_complete", 1),
                 Point("commit.after_complete", 3),
                 Point("commit.after_complete", plan.FILES), Point("commit.before_delete_batch", 1),
                 Point("commit.before_delete_batch", 2), Point("commit.before_success"), Point("commit.after_success"),
                 Point("commit.during_cleanup")]
ALL_POINTS = WORKER_POINTS + COMMIT_POINTS
#: The commit barrier's own points: a commit holding its place before its journal, a rollback holding the journal
#: key before it aborted anything (test_a_failure_at_the_commit_barrier, below).
BARRIER_POINTS = [Point("commit.after_place"), Point("rollback.after_claim")]
#: Points where tests/reliability/test_fences.py pauses a process, not where this matrix crashes one: a crash
#: between the replace listing, the judgement and the first delete batch is a crash before that batch, which
#: commit.before_delete_batch:1 covers; a crash while a job tidies the order (order.before_collect) comes after its
#: end, with nothing of it left to do.
PAUSE_POINTS = {"commit.after_replace_listing", "commit.before_replace", "order.before_collect"}
# Every checkpoint name of the protocol is in the matrix; the streaming sink's (stream.*) are killed at in
# tests/spark/test_stream_kills.py, around a real Spark driver.
assert {p.name for p in ALL_POINTS + BARRIER_POINTS} | PAUSE_POINTS == {
    p for p in faults.POINTS if not p.startswith("stream.")}

LOCALSTACK_SUBSET = {
    ("raise", "writer.part_uploaded:2"), ("kill", "task.after_commit:1"),
    ("raise", f"commit.after_complete:{plan.FILES}"), ("kill", "commit.after_complete:3"),
    ("kill", "commit.before_delete_batch:2"), ("kill", "commit.after_success:1"),
}


# After a kill, what abort finds differs only by whether a manifest was written: two points cover both.
KILL_THEN_ABORT = {"writer.part_uploaded:1", "task.after_commit:1"}


def _cases(follow_ups_worker: tuple[str, ...]) -> list:
    params = []
    for how in ("raise", "kill"):
        for p in ALL_POINTS:
            for follow in (follow_ups_worker if p.worker else ("recover",)):
                if how == "kill" and follow == "abort" and p.id not in KILL_THEN_ABORT:
                    continue
                params.append(pytest.param("moto", how, p, follow, id=f"moto-{how}-{p.id}-{follow}"))
                if (how, p.id) in LOCALSTACK_SUBSET:
                    params.append(pytest.param("localstack", how, p, follow, marks=pytest.mark.localstack,
                                               id=f"localstack-{how}-{p.id}-{follow}"))
                    # The same subset on a Go server: an S3 written apart from both Python emulators.
                    for go in [name for name in GO_SERVERS if name in selected_backends()]:
                        params.append(pytest.param(go, how, p, follow, marks=getattr(pytest.mark, go),
                                                   id=f"{go}-{how}-{p.id}-{follow}"))
    return params


def run_killed(scene: Scene, point: Point, args: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPCOMMIT_FAULT": f"{point.name}:{point.k}:kill", "PYTHONPATH": str(REPO)}
    payload = {"endpoint": scene.backend.endpoint_url, "bucket": scene.bucket, **args}
    proc = subprocess.run([sys.executable, str(DRIVER), json.dumps(payload)], env=env, capture_output=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == -9, f"expected SIGKILL at {point.id}, got {proc.returncode}: {proc.stderr.decode()[-2000:]}"
    return proc


# ---------------------------------------------------------------- worker-side points
def _fail_task_zero(scene: Scene, how: str, point: Point, job: Job) -> None:
    if how == "raise":
        with faults.installed(faults.fail_at(point.name, point.k)):
            with pytest.raises(faults.InjectedFault):
                plan.write_attempt(job.spec, 0, 0)
        if point.name != "task.after_commit":
            # The task scope aborted what it uploaded: the exception left nothing of attempt 0 pending.
            assert _uploads_of_task_zero(scene) == []
    else:
        run_killed(scene, point, {"role": "task", "task_id": 0, "attempt": 0})
        # A killed attempt leaves its uploads pending (nothing could abort them); a manifest only once committed.
        assert _uploads_of_task_zero(scene)
        manifests = {k for k in job_records(scene.client, scene.bucket, "t", plan.JOB_ID) if "/tasks/task-00000-" in k}
        assert len(manifests) == (1 if point.name == "task.after_commit" else 0), manifests


def _uploads_of_task_zero(scene: Scene) -> list[tuple[str, str]]:
    return [u for u in job_uploads(scene.client, scene.bucket, plan.JOB_ID, "t") if "/part-00000-" in u[0]]


@pytest.mark.ci_on("localstack")
@pytest.mark.parametrize("backend_name, how, point, follow_up", _cases(("retry", "abort")))
def test_fault_matrix(request, backend_name, how, point, follow_up):
    backend = request.getfixturevalue(f"{backend_name}_backend")
    scene = make_scene(backend)
    before = bucket_state(scene.client, scene.bucket)
    visible_before = dataset(scene.client, scene.bucket, "t")
    if point.worker:
        _worker_case(scene, how, point, follow_up, before, visible_before)
    else:
        _commit_case(scene, how, point, before, reference_bucket(backend))


def _worker_case(scene: Scene, how: str, point: Point, follow_up: str, before, visible_before) -> None:
    job = Job.create(f"s3://{scene.bucket}/t", mode="overwrite", s3=scene.backend.options, writer=plan.SMALL_PARTS,
                     job_id=plan.JOB_ID, commit_threads=1)
    others = [plan.write_attempt(job.spec, t, 0) for t in range(1, plan.TASKS)]
    _fail_task_zero(scene, how, point, job)
    check_not_visible(scene.client, scene.bucket, "t", plan.JOB_ID, before=visible_before)  # I1
    if follow_up == "retry":
        # The engine runs the task again; the driver commits the new attempt.
        report = job.commit([plan.write_attempt(job.spec, 0, 1), *others])
        expected = plan.expected({0: 1, 1: 0, 2: 0, 3: 0})
        assert set(report.filenames) == set(expected)
        check_committed(scene.client, scene.bucket, "t", plan.JOB_ID, expected)  # I2
    elif how == "raise":
        job.abort()  # the driver is alive and rolls back
        check_aborted(scene.client, scene.bucket, "t", plan.JOB_ID, before=visible_before)  # I3
    else:
        # The driver is gone too: an operator rolls the job back by name from another process.
        actions = {a.job_id: a.action for a in recover(scene.destination, s3=scene.backend.options, job_id=plan.JOB_ID)}
        assert actions == {plan.JOB_ID: "rolled_back"}
        check_aborted(scene.client, scene.bucket, "t", plan.JOB_ID, before=visible_before)  # I3
    # Only a committed overwrite may remove the old data; nothing else of anyone else changes.
    may_delete = is_old if follow_up == "retry" else (lambda _k: False)
    check_others_untouched(before, bucket_state(scene.client, scene.bucket), job_ids=[plan.JOB_ID],
                           may_delete=may_delete, may_write=is_success)  # I6


# ---------------------------------------------------------------- driver-side (commit) points
def _commit_case(scene: Scene, how: str, point: Point, before, reference: str) -> None:
    if how == "raise":
        with pytest.raises(CommitStateUnknownError, match="recover"):
            run_job_in_process(scene, (point.name, point.k))
    else:
        run_killed(scene, point, {"role": "job", "delete_batch": DELETE_BATCH})
    expected = EXPECTED
    # I5 at the moment of the crash: the old data is whole, or the new data is complete.
    held = check_new_complete_or_old_whole(scene.client, scene.bucket, "t", old=OLD, new=expected)
    # Completes run in a bounded window: the ones in flight when the k-th fails still finish.
    deletes_started = point.name in ("commit.before_success", "commit.after_success", "commit.during_cleanup") or (
        point.name == "commit.before_delete_batch" and point.k > 1)
    if deletes_started:
        assert held == "new complete"
    elif point.name == "commit.before_delete_batch":
        assert held == "both"
    else:
        assert held in ("old whole", "both")

    states = {s.job_id: s.state.value for s in list_jobs(scene.other.store, scene.destination)}
    journaled = point.name != "commit.during_cleanup"
    assert states == {plan.JOB_ID: "committing" if journaled else "committed", plan.OTHER_JOB_ID: "writing"}

    # abort: refused while the journal exists (the commit may be partly visible); changes nothing.
    crashed = bucket_state(scene.client, scene.bucket)
    job = Job.open(f"s3://{scene.bucket}/t", plan.JOB_ID, s3=scene.backend.options)
    if journaled:
        with pytest.raises(JobStateError, match="recover"):
            job.abort()
        check_unchanged(crashed, bucket_state(scene.client, scene.bucket), what="abort of a committing job")

    actions = {a.job_id: a.action for a in recover(scene.destination, store=scene.other.store)}
    assert actions == {plan.JOB_ID: "finished", plan.OTHER_JOB_ID: "skipped"}
    check_committed(scene.client, scene.bucket, "t", plan.JOB_ID, expected)  # I2 after recover
    check_same_result(scene.client, bucket=scene.bucket, prefix="t", reference_bucket=reference,
                      job_id=plan.JOB_ID)  # I4
    check_others_untouched(before, bucket_state(scene.client, scene.bucket), job_ids=[plan.JOB_ID],
                           may_delete=is_old, may_write=is_success)  # I6
    # The other job is still writing and can still commit its own work afterwards.
    assert len(pending_uploads(scene.client, scene.bucket, "t")) == 1


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failure_at_the_commit_barrier_leaves_nothing_and_recover_ends_it(moto_backend, how):
    """commit.after_place: the job holds its place in the table's order, its journal not yet claimed -- not
    committed, old data whole; `recover --job` rolls it back and ends its place (a raised failure ends the
    place at once). rollback.after_claim: a rollback holds the job's journal key and has aborted nothing -- the
    job can never commit; `recover` finishes the rollback."""
    scene = make_scene(moto_backend)
    before = bucket_state(scene.client, scene.bucket)
    visible_before = dataset(scene.client, scene.bucket, "t")
    order = TableOrder(scene.other.store, scene.destination_table)
    # A commit that stops at its place.
    if how == "raise":
        with pytest.raises(faults.InjectedFault):
            run_job_in_process(scene, ("commit.after_place", 1))
        assert not order.view().open  # ended at once: nobody waits for it
    else:
        run_killed(scene, Point("commit.after_place"), {"role": "job", "delete_batch": DELETE_BATCH})
        assert len(order.view().open) == 1  # open until someone ends it
    check_not_visible(scene.client, scene.bucket, "t", plan.JOB_ID, before=visible_before)  # I1
    actions = {a.job_id: a.action for a in recover(scene.destination, store=scene.other.store, job_id=plan.JOB_ID)}
    assert actions == {plan.JOB_ID: "rolled_back"}
    check_aborted(scene.client, scene.bucket, "t", plan.JOB_ID, before=visible_before)  # I3
    assert not order.view().open
    check_others_untouched(before, bucket_state(scene.client, scene.bucket), job_ids=[plan.JOB_ID],
                           may_write=is_success)  # I6

    # A rollback that stops right after its claim: the job can never commit, recover ends the rollback.
    job = Job.create(f"s3://{scene.bucket}/t", mode="overwrite", s3=scene.backend.options, writer=plan.SMALL_PARTS)
    refs = [plan.write_attempt(job.spec, t, 0) for t in range(plan.TASKS)]
    committer = JobCommitter(scene.other.store, job.destination, job.job_id)
    with faults.installed(faults.fail_at("rollback.after_claim")), pytest.raises(faults.InjectedFault):
        committer.rollback(reason="interrupted on purpose")
    [status] = [s for s in list_jobs(scene.other.store, scene.destination) if s.job_id == job.job_id]
    assert status.state.value == "rolling_back"
    with pytest.raises(JobRolledBackError):
        job.commit(refs)
    actions = {a.job_id: a.action for a in recover(scene.destination, store=scene.other.store, job_id=job.job_id)}
    assert actions == {job.job_id: "rolled_back"}
    check_aborted(scene.client, scene.bucket, "t", job.job_id, before=visible_before)


def test_the_reference_run_is_the_planned_dataset(moto_backend):
    """The plan's expected dataset is what an uninterrupted commit really produces (so the matrix compares
    against reality, not against the plan alone)."""
    ref = reference_bucket(moto_backend)
    check_committed(moto_backend.client, ref, "t", plan.JOB_ID, plan.expected({t: 0 for t in range(plan.TASKS)}))


def test_the_driver_script_writes_and_commits_a_task_when_no_fault_is_set(moto_backend):
    """The driver script really writes and commits a task when no fault is set (so a -9 exit is the kill)."""
    scene = make_scene(moto_backend)
    Job.create(f"s3://{scene.bucket}/t", s3=moto_backend.options, job_id=plan.JOB_ID)
    env = {k: v for k, v in os.environ.items() if k != "MPCOMMIT_FAULT"}
    payload = {"endpoint": moto_backend.endpoint_url, "bucket": scene.bucket, "role": "task", "task_id": 2, "attempt": 0}
    proc = subprocess.run([sys.executable, str(DRIVER), json.dumps(payload)], env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, timeout=120, cwd=REPO, check=True)
    result = TaskResult.from_bytes(proc.stdout, destination=scene.destination, job_id=plan.JOB_ID)
    assert result.task_id == 2 and result.files == 1


def test_the_i6_check_tells_a_live_jobs_own_heartbeat_from_anyone_elses_write(moto_backend):
    """Issue 40: on a busy machine a case ran longer than the scene's other job's heartbeat interval (10 s), its
    own beat rewrote its alive.json between the checker's two snapshots, and I6 blamed the job under test. Here
    the other job beats every 0.2 s, so that its own beats fall between the snapshots on any machine: they pass
    the check, while the same key written by another process, or by a second heartbeat of this one, fails it."""
    import time

    from mpcommit.options import OrderSettings
    from tests.support.invariants import InvariantViolation

    bucket = moto_backend.new_bucket("mpc-rel")
    client = moto_backend.client
    live = Job.create(f"s3://{bucket}/t", s3=moto_backend.options, order=OrderSettings(heartbeat_seconds=0.2))
    key = f"t/_temporary/mpcommit/{live.job_id}/alive.json"
    try:
        before = bucket_state(client, bucket)
        deadline = time.monotonic() + 60
        while (after := bucket_state(client, bucket)).objects[key] == before.objects[key]:
            assert time.monotonic() < deadline, "the job did not beat its heartbeat within a minute"
            time.sleep(0.1)
        check_others_untouched(before, after, job_ids=[plan.JOB_ID])  # its own beat: not the job under test's doing

        # Written by someone else, the job's next conditional beat fails and it stops beating: the key stays so.
        beat = json.loads(after.heartbeats[key])
        for body in ({**beat, "pid": beat["pid"] + 1, "beat": beat["beat"] + 1},  # another process
                     {**beat, "beat": 1}):  # a second heartbeat of this process (a recovery taking the job over)
            client.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())
            with pytest.raises(InvariantViolation, match=f"I6 violated: {key} .* was rewritten"):
                check_others_untouched(after, bucket_state(client, bucket), job_ids=[plan.JOB_ID])
    finally:
        live.abort()
