"""A stateful property test: hypothesis interleaves task attempts of several jobs (committed, duplicated, failed,
killed, committed with the result lost), job commits (some crashing at a checkpoint), aborts, recovers, zombie
attempts that write after their job finished, and orphan cleanup; after every step the independent checker
compares the bucket with a model of what must be visible and pending.

One interleaving is left out on purpose: a new commit while an overwrite is left half-committed. Its later
recovery removes what is older than its journal to S3's 1 s Last-Modified resolution, which no model can predict
(tests/reliability/test_concurrency.py pins those orderings down deterministically).

Runs against moto, derandomized, with a modest number of examples to fit the CI budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError, JobStateError
from mpcommit.operations.uploads import UploadScope, cleanup
from mpcommit.protocol import faults
from mpcommit.protocol.layout import Destination
from mpcommit.protocol.recovery import recover
from tests.support.checks import is_hidden, read_object
from tests.support.invariants import bucket_state

TASKS = 3
MAX_JOBS = 4
MODES = ("append", "overwrite-static", "overwrite-dynamic")
CRASHES = [None, ("commit.after_journal", 1), ("commit.after_complete", 1), ("commit.after_complete", 2),
           ("commit.before_delete_batch", 1), ("commit.before_success", 1), ("commit.after_success", 1),
           ("commit.during_cleanup", 1)]
SIBLING = {"t2/keep.txt": b"sibling\n"}
OLD = {f"t/dt={p}/old.txt": f"old {p}\n".encode() for p in range(3)}  # what the first overwrite replaces


@dataclass
class ModelJob:
    job: Job
    tag: str
    mode: str
    state: str = "writing"  # writing | committing | committed | aborted
    results: dict[int, list] = field(default_factory=dict)  # task -> committed TaskResults
    pending: int = 0  # uploads of this job that must be pending now
    attempts: dict[int, int] = field(default_factory=dict)
    intended: dict[str, bytes] = field(default_factory=dict)  # committing: what the journal makes visible
    doomed: set[str] = field(default_factory=set)  # committing: what the journal removes
    leftover_records: bool = False  # records of a finished job: a zombie's, or of an interrupted cleanup

    @property
    def overwrite(self) -> bool:
        return self.mode.startswith("overwrite")


def files_of(tag: str, task_id: int, attempt: int) -> list[tuple[str, bytes]]:
    first = (f"dt={task_id % 2}", f"{tag} t{task_id} a{attempt} first\n".encode())
    return [first, ("dt=2", f"{tag} t{task_id} a{attempt} second\n".encode())] if task_id == 2 else [first]


def keys_of(mj: ModelJob, task_id: int, attempt: int) -> dict[str, bytes]:
    # A task's files in distinct partition directories: each is its directory's c000, as in Spark.
    return {f"t/{p}/part-{task_id:05d}-{mj.job.job_id}.c000.txt": data for p, data in files_of(mj.tag, task_id, attempt)}


def make_machine(backend):
    class CommitMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.client = backend.client
            self.bucket = backend.new_bucket("mpc-prop")
            for key, data in {**SIBLING, **OLD}.items():
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
            self.foreign = (f"t2/part-00000-{'0' * 8}-0000-4000-8000-{'0' * 12}.c000.txt", None)
            self.foreign = (self.foreign[0], self.client.create_multipart_upload(Bucket=self.bucket, Key=self.foreign[0])["UploadId"])
            self.jobs: list[ModelJob] = []
            self.visible: dict[str, bytes] = dict(OLD)
            self._bodies: dict[tuple[str, str], bytes] = {}
            self.success_job: str | None = None
            self.uri = f"s3://{self.bucket}/t"
            self._sibling_etags = {k: self.client.head_object(Bucket=self.bucket, Key=k)["ETag"] for k in SIBLING}

        # ------------------------------------------------------------ helpers
        def _jobs(self, *states: str) -> list[ModelJob]:
            return [j for j in self.jobs if j.state in states]

        def _write(self, mj: ModelJob, task_id: int, kind: str):
            attempt = mj.attempts.get(task_id, 0)
            mj.attempts[task_id] = attempt + 1
            task = mj.job.spec.task(task_id, attempt)
            if kind == "killed":  # a process killed after writing: no manifest, no abort -- uploads stay pending
                for partition, data in files_of(mj.tag, task_id, attempt):
                    with task.create(partition=partition, ext="txt") as out:
                        out.write(data)
                mj.pending += len(files_of(mj.tag, task_id, attempt))
                return None
            with pytest.raises(RuntimeError) if kind == "failed" else _nothing():
                with task:
                    for partition, data in files_of(mj.tag, task_id, attempt):
                        with task.create(partition=partition, ext="txt") as out:
                            out.write(data)
                    if kind == "failed":
                        raise RuntimeError("task failed")
                    result = task.commit()
            if kind == "failed":
                return None
            mj.pending += len(files_of(mj.tag, task_id, attempt))
            return result

        def _replace(self, mj: ModelJob, partitions: set[str]) -> set[str]:
            if mj.mode == "append":
                return set()
            if mj.mode == "overwrite-static":
                return set(self.visible)
            return {k for k in self.visible if k.split("/")[1] in partitions}

        def _finish(self, mj: ModelJob) -> None:
            for key in mj.doomed:
                self.visible.pop(key, None)
            self.visible.update(mj.intended)
            mj.state, mj.pending, mj.intended, mj.doomed = "committed", 0, {}, set()
            self.success_job = mj.job.job_id

        # ------------------------------------------------------------ rules
        @initialize(first=st.sampled_from(MODES), second=st.sampled_from(MODES))
        def two_jobs(self, first: str, second: str) -> None:
            self.new_job(first)
            self.new_job(second)

        @precondition(lambda self: len(self.jobs) < MAX_JOBS)
        @rule(mode=st.sampled_from(MODES))
        def new_job(self, mode: str) -> None:
            overwrite, _, how = mode.partition("-")
            job = Job.create(self.uri, mode=overwrite, partition_overwrite=how or "static", s3=backend.options,
                             commit_threads=2)
            self.jobs.append(ModelJob(job, f"j{len(self.jobs)}", mode))

        @precondition(lambda self: any(j.state == "writing" for j in self.jobs))
        @rule(data=st.data(), task_id=st.integers(0, TASKS - 1),
              kind=st.sampled_from(["ok", "ok", "failed", "killed", "result-lost"]))
        def attempt(self, data, task_id: int, kind: str) -> None:
            mj = data.draw(st.sampled_from(self._jobs("writing")), label="job")
            result = self._write(mj, task_id, kind)
            if kind == "ok":
                mj.results.setdefault(task_id, []).append(result)

        @precondition(lambda self: any(j.state == "writing" for j in self.jobs)
                      and not any(j.state == "committing" and j.overwrite for j in self.jobs))
        @rule(data=st.data(), crash=st.sampled_from(CRASHES))
        def commit(self, data, crash) -> None:
            candidates = [j for j in self._jobs("writing") if not (j.overwrite and self._jobs("committing"))]
            if not candidates:
                return
            mj = data.draw(st.sampled_from(candidates), label="job")
            chosen = {t: data.draw(st.sampled_from(rs), label=f"winner of task {t}")
                      for t, rs in sorted(mj.results.items()) if data.draw(st.booleans(), label=f"commit task {t}")}
            intended: dict[str, bytes] = {}
            for t, r in chosen.items():
                intended.update(keys_of(mj, t, r.attempt))
            partitions = {k.split("/")[1] for k in intended}
            mj.intended, mj.doomed = intended, self._replace(mj, partitions) if intended or mj.mode == "overwrite-static" else set()
            if mj.mode == "overwrite-dynamic" and not intended:
                mj.doomed = set()
            try:
                if crash is None:
                    mj.job.commit(list(chosen.values()))
                else:
                    with faults.installed(faults.fail_at(*crash)):
                        mj.job.commit(list(chosen.values()))
            except CommitStateUnknownError:
                if crash == ("commit.during_cleanup", 1):
                    # _SUCCESS is written and the journal deleted: committed, with records left behind. Once a
                    # later job rewrites _SUCCESS, list_jobs can no longer tell it from a writing job.
                    self._finish(mj)
                    mj.leftover_records = True
                else:
                    mj.state = "committing"
                return
            self._finish(mj)

        @precondition(lambda self: any(j.state == "committing" for j in self.jobs))
        @rule()
        def recover_all(self) -> None:
            named = self.success_job  # the job _SUCCESS names when recover lists the jobs
            actions = {a.job_id: a.action for a in recover(Destination(self.bucket, "t"), store=self.jobs[0].job.store)}
            for mj in self._jobs("writing"):
                assert actions.get(mj.job.job_id) == "skipped", actions
            for mj in self._jobs("committed"):
                if mj.job.job_id == named and mj.leftover_records:
                    assert actions.get(mj.job.job_id) == "finished", actions
                    mj.leftover_records, mj.pending = False, 0  # a committed job's leftovers are cleaned
            for mj in sorted(self._jobs("committing"), key=lambda j: j.job.job_id):
                assert actions.get(mj.job.job_id) == "finished", actions
                self._finish(mj)

        @precondition(lambda self: any(j.state != "committing" for j in self.jobs))
        @rule(data=st.data())
        def abort(self, data) -> None:
            mj = data.draw(st.sampled_from([j for j in self.jobs if j.state != "committing"]), label="job")
            # From the driver's own Job, or from another process (an operator) that reopens the job.
            elsewhere = mj.state == "writing" and data.draw(st.booleans(), label="elsewhere")
            job = Job.open(self.uri, mj.job.job_id, s3=backend.options) if elsewhere else mj.job
            if mj.state == "committed":
                with pytest.raises(JobStateError):
                    job.abort()
                return
            job.abort()
            mj.state, mj.pending, mj.leftover_records = "aborted", 0, False

        @precondition(lambda self: any(j.state == "committing" for j in self.jobs))
        @rule(data=st.data())
        def abort_half_committed(self, data) -> None:
            """An operator reopens a job whose commit was interrupted and tries to roll it back: refused (the
            commit may be partly visible; only recover may finish it), and nothing changes."""
            mj = data.draw(st.sampled_from(self._jobs("committing")), label="job")
            with pytest.raises(JobStateError, match="recover"):
                Job.open(self.uri, mj.job.job_id, s3=backend.options).abort()

        @precondition(lambda self: any(j.state in ("committed", "aborted") for j in self.jobs))
        @rule(data=st.data(), task_id=st.integers(0, TASKS - 1))
        def zombie(self, data, task_id: int) -> None:
            """An attempt that keeps writing (and commits its task) after its job committed or was aborted."""
            mj = data.draw(st.sampled_from(self._jobs("committed", "aborted")), label="job")
            self._write(mj, task_id, "ok")
            mj.leftover_records = True

        @precondition(lambda self: any(j.state in ("committed", "aborted") and (j.pending or j.leftover_records)
                                       for j in self.jobs))
        @rule(data=st.data())
        def orphan_cleanup(self, data) -> None:
            mj = data.draw(st.sampled_from([j for j in self._jobs("committed", "aborted") if j.pending or j.leftover_records]))
            report = cleanup(mj.job.store, UploadScope.parse(self.uri), job_id=mj.job.job_id)
            assert len(report.aborted) == mj.pending and report.ok
            recover(Destination(self.bucket, "t"), store=mj.job.store, job_id=mj.job.job_id)
            mj.pending, mj.leftover_records = 0, False

        # ------------------------------------------------------------ invariants, after every step
        def _snapshot(self):
            """One listing of the objects and one of the uploads; bodies read only for objects not seen before."""
            state = bucket_state(self.client, self.bucket)
            seen = {}
            for key, etag in state.objects.items():
                if key.startswith("t/") and not is_hidden(key[2:]):
                    if (key, etag) not in self._bodies:
                        self._bodies[(key, etag)] = read_object(self.client, self.bucket, key)
                    seen[key] = self._bodies[(key, etag)]
            return state, seen

        @invariant()
        def bucket_matches_the_model(self) -> None:
            state, seen = self._snapshot()
            committing = self._jobs("committing")
            if not committing:
                assert seen == self.visible  # I1, I2, I3, I4, I5 at rest
            else:
                # A commit left half done: between the model before and after it, never both incomplete (I5).
                intended = {k: v for mj in committing for k, v in mj.intended.items()}
                doomed = set().union(*(mj.doomed for mj in committing))
                assert all(seen.get(k) == v for k, v in self.visible.items() if k not in doomed)
                assert all(k in self.visible or intended.get(k) == v for k, v in seen.items())
                if any(k not in seen for k in doomed if k not in intended):
                    assert all(seen.get(k) == v for k, v in intended.items()), "old data removed before new complete"
            for mj in self.jobs:
                if mj.state == "committing":
                    continue
                pending = sorted(state.uploads_of(mj.job.job_id))
                assert len(pending) == mj.pending, (mj.tag, mj.state, pending)  # I2, I3, I6
                if mj.state in ("committed", "aborted"):
                    records = {k for k in state.objects if k.startswith(f"t/_temporary/mpcommit/{mj.job.job_id}/")}
                    assert bool(records) == mj.leftover_records, (mj.tag, mj.state, sorted(records))
            # Nothing outside the destination was touched (I6).
            assert {k: state.objects[k] for k in SIBLING} == self._sibling_etags
            assert self.foreign in state.uploads

    return CommitMachine


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_interleavings_of_attempts_commits_aborts_recovers_and_zombies(moto_backend):
    machine = make_machine(moto_backend)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=12, stateful_step_count=12, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck),
    ))
