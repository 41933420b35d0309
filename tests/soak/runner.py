"""A plain-Python job driver for the soak: runs one mpcommit job after another until told to stop, and is
killed at random (by the soak, from outside, or by itself at a commit checkpoint it drew).

Usage: ``python -m tests.soak.runner '<json>'`` with ``name``, ``endpoint``, ``bucket``, ``dests``, ``seed``,
``log``, ``stop`` (a file: finish the current job and exit when it exists) and ``kill_rate`` (the share of
jobs that kill themselves at a commit point). With ``one``: a single job at ``start_at`` (epoch seconds), of
``mode``/``po`` when given, its files in ``partitions`` when given, then exit (the soak's overwrites beside
compactions).

Every row it writes names itself -- ``RUN t=TASK a=ATTEMPT k=VALUE f=FILE i=LINE`` -- so that the checker can
attribute any visible line to the job, task and attempt that wrote it, wherever compaction moved it. The log
(JSON lines, flushed before each step is taken, so that a SIGKILL loses nothing that happened) says for every
job: ``start`` (job id, destination, mode, chosen before ``Job.create``), ``commit_start`` (with the rows each
task's committed attempt wrote), and how it ended (``committed``, ``unknown`` -- the commit failed after its
journal --, ``aborted``, ``refused``, ``ignored``), or nothing when the process was killed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from mpcommit import Job, RetryPolicy, S3Options, WriterSettings
from mpcommit.errors import CommitStateUnknownError, DestinationExistsError
from mpcommit.protocol import faults

PARTITIONS = ("a", "b", "c", "d")
#: (mode, partition overwrite) and how often each is drawn.
MODES = ((("append", "static"), 30), (("overwrite", "static"), 12), (("overwrite", "dynamic"), 25),
         (("error", "static"), 8), (("ignore", "static"), 8))
#: Where a job that kills itself dies: just before its commit starts, or at one of the commit's checkpoints.
KILL_POINTS = ("before_journal", "commit.after_journal", "commit.after_complete:1", "commit.after_complete:2",
               "commit.before_delete_batch:1", "commit.before_success:1", "commit.after_success:1",
               "commit.during_cleanup:1")
SMALL = WriterSettings(initial_part_size=5 << 20, max_parts_in_flight=1, upload_threads=2)


def line(run: str, task: int, attempt: int, value: str, file: int, i: int) -> str:
    return f"{run} t={task} a={attempt} k={value} f={file} i={i}\n"


class Runner:
    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.rng = random.Random(cfg["seed"])
        self.log_file = open(cfg["log"], "a", buffering=1)
        self.options = S3Options(endpoint_url=cfg["endpoint"], region="us-east-1", access_key_id="test",
                                 secret_access_key="test",
                                 retry=RetryPolicy(max_attempts=6, initial_delay=0.05, max_delay=1.0))
        self.kill_point: str | None = None
        self._hook = faults.installed(self._checkpoint)
        self._hook.__enter__()

    def log(self, event: str, **fields: Any) -> None:
        self.log_file.write(json.dumps({"ev": event, "t": int(time.time() * 1000), **fields}) + "\n")
        self.log_file.flush()

    def _checkpoint(self, name: str, index: int) -> None:
        if self.kill_point and self.kill_point in (name, f"{name}:{index}"):
            self.log("self_kill", point=self.kill_point)
            os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------ one job
    def run_one(self, n: int) -> None:
        rng = self.rng
        run = f"{self.cfg['name']}-{n}"
        job_id = str(uuid.uuid4())
        dest = rng.choices(self.cfg["dests"], weights=self.cfg.get("dest_weights"))[0]
        (mode, overwrite) = rng.choices([m for m, _ in MODES], weights=[w for _, w in MODES])[0]
        if self.cfg.get("mode"):  # a one-shot job of a given mode (the soak's overwrite beside a compaction)
            mode, overwrite = self.cfg["mode"], self.cfg.get("po", "static")
        tasks = rng.randint(1, 4)
        self.log("start", run=run, job=job_id, dest=dest, mode=mode, po=overwrite, kind="py")
        try:
            job = Job.create(f"s3://{self.cfg['bucket']}/{dest}", mode=mode, partition_overwrite=overwrite,
                             s3=self.options, writer=SMALL, job_id=job_id, commit_threads=4)
        except DestinationExistsError:
            self.log("refused", run=run)
            return
        except Exception as exc:  # noqa: BLE001 - e.g. retries exhausted: its descriptor may or may not exist
            self.log("unknown", run=run, error=type(exc).__name__, message=str(exc)[:300])
            return
        if job.ignored:
            job.commit([])
            self.log("ignored", run=run)
            return
        results, rows = [], {}
        try:
            for task in range(tasks):
                result, files = self.task(job, run, task)
                results.append(result)
                rows[task] = {"attempt": result.attempt, "files": files}
        except Exception as exc:  # noqa: BLE001 - a failed write: the job is rolled back, as an engine would
            self.roll_back(job, run, exc)
            return
        self.kill_point = rng.choice(KILL_POINTS) if rng.random() < self.cfg.get("kill_rate", 0.0) else None
        self.log("commit_start", run=run, rows=rows, kill=self.kill_point)
        if self.kill_point == "before_journal":
            self._checkpoint("before_journal", 1)
        try:
            report = job.commit(results)
        except CommitStateUnknownError as exc:
            self.log("unknown", run=run, message=str(exc)[:300])
            return
        except Exception as exc:  # noqa: BLE001 - not committed (failed before its journal): roll back
            self.roll_back(job, run, exc)
            return
        finally:
            self.kill_point = None
        self.log("committed", run=run, files=len(report.filenames), aborted=report.aborted_uploads,
                 deleted=report.deleted_objects)

    def roll_back(self, job: Job, run: str, exc: Exception) -> None:
        try:
            job.abort()
        except Exception as failed:  # noqa: BLE001 - what is left is an orphan for `recover --older-than`
            self.log("unknown", run=run, error=type(exc).__name__, abort_error=str(failed)[:300])
            return
        self.log("aborted", run=run, error=type(exc).__name__, message=str(exc)[:300])

    def task(self, job: Job, run: str, task: int) -> tuple[Any, list[list[Any]]]:
        """Attempts of one task: maybe one that fails, maybe one that dies (uploads left, never committed), the
        winner, maybe a loser that commits too. Returns the winner's result and the files it wrote."""
        rng = self.rng
        attempt = 0
        if rng.random() < 0.15:  # fails mid-write: its scope aborts what it uploaded
            try:
                with job.spec.task(task, attempt) as t:
                    self.write_files(t, run, task, attempt)
                    raise RuntimeError("injected task failure")
            except RuntimeError:
                pass
            attempt += 1
        if rng.random() < 0.15:  # dies: its uploads stay pending until the job commit aborts them
            dead = job.spec.task(task, attempt)
            self.write_files(dead, run, task, attempt)
            attempt += 1
        with job.spec.task(task, attempt) as t:
            files = self.write_files(t, run, task, attempt)
            result = t.commit()
        if rng.random() < 0.2:  # a duplicate that commits too: a loser the driver must abort
            with job.spec.task(task, attempt + 1) as t:
                self.write_files(t, run, task, attempt + 1)
                t.commit()
        return result, files

    def write_files(self, t: Any, run: str, task: int, attempt: int) -> list[list[Any]]:
        # The same choices for every attempt of a task, as a deterministic engine would make: seeded by the task.
        rng = random.Random(f"{run}/{task}")
        files = []
        among = self.cfg.get("partitions") or PARTITIONS
        for number, value in enumerate(sorted(rng.sample(among, rng.randint(1, min(2, len(among)))))):
            lines = rng.randint(1, 30)
            with t.create(partition=f"k={value}", ext="txt") as out:
                out.write("".join(line(run, task, attempt, value, number, i) for i in range(lines)).encode())
                out.rows = lines
            files.append([value, number, lines])
        return files

    def loop(self) -> None:
        stop = Path(self.cfg["stop"])
        n = int(self.cfg.get("first", 0))
        if self.cfg.get("one"):  # one job, started at the given time, then exit
            delay = float(self.cfg.get("start_at", 0)) - time.time()
            if delay > 0:
                time.sleep(delay)
            self.run_one(n)
            return
        while not stop.exists():
            self.run_one(n)
            n += 1


if __name__ == "__main__":
    Runner(json.loads(sys.argv[1])).loop()
