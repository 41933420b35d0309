"""One process of an order trial (tests/reliability/order_trials.py): a write job, a compaction or a `recover`
run on one table, started at a given moment, reporting how it ended.

The harness runs :func:`child` in a process forked by a multiprocessing fork server that imported this module
(and mpcommit) once, so a job's process starts in milliseconds instead of half a second of CPU; events go back
over a pipe. By hand, ``python -m tests.reliability.trial_job '<spec json>'`` does the same with events as JSON
lines on stdout and the start time read from stdin.

The process builds its S3 client first, says ``ready``, then waits for the wall-clock time (epoch seconds) at
which to start: the harness's random offsets are offsets between the jobs' starts, not between process
start-ups. Then:

- ``write``: ``Job.create`` (append, or a static or dynamic overwrite), one task per planned file, each writing
  its rows (every row names the job: ``NAME PARTITION tTASK rI``), then ``job.commit``;
- ``compact``: :func:`mpcommit.compaction.standalone.compact`, what ``mpcommit compact`` runs;
- ``recover``: :func:`mpcommit.protocol.recovery.recover`, what ``mpcommit jobs recover`` runs;
- ``appender``: ``count`` small appends one after another (a busy table's stream of jobs: what makes the order's
  collection run while another process is paused), each said with an ``appended`` event (its job id, position
  or error).

A job's destination is the table, or ``dest`` inside it (a partition's own URI, or a folder that is refused by
name); a file's ``partition`` is a path string or a ``{column: value}`` mapping, and its rows name the file's
``token`` (the folder the plan expects them in, without blanks) rather than the partition as given.

Both commands are called through their Python functions rather than the console script so that the trial's
:class:`~mpcommit.options.OrderSettings` (a heartbeat every 0.5 s, a 3 s lease) reach them: the CLI has no
option for them, and its 60 s lease would make every trial with a dead job wait a minute.

``MPCOMMIT_FAULT=point:k:kill`` (set by the harness in this process's environment) SIGKILLs it at that
checkpoint. Events: ``ready``, ``start``, ``created`` (the job id, as soon as the job exists), ``commit`` (a
write: ``job.commit`` is called; a compaction: its journal is written), then ``end`` with ``ok``, the position
in the order, and for a failure the exception's class (and its bases) and message. A killed process says no
``end``.

``mutant`` in the spec breaks the protocol on purpose in this process only (tests of the checker itself):
``no_replace`` (an overwrite deletes nothing), ``no_wait`` (an overwrite never waits for earlier jobs),
``no_conflict`` (a compaction never gives up), ``no_fence`` (a finisher never checks that it still holds its job:
:class:`~mpcommit.protocol.commit.fence.Hold`'s checks pass, and the later jobs are judged from any listing, whether
or not it shows the judge's own place open).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

# Imported here, not at the start: the harness's fork server imports this module once, and every process it
# forks for a job starts with them loaded (an interpreter and these imports cost ~0.5 s of CPU per process).
import mpcommit.compaction.standalone  # noqa: F401, E402
import mpcommit.protocol.recovery  # noqa: F401, E402
from mpcommit import Job  # noqa: F401, E402


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def row_text(name: str, partition: str, task: int, i: int) -> str:
    return f"{name} {partition} t{task} r{i}"


def file_rows(name: str, partition: str, task: int, rows: int) -> list[str]:
    return [row_text(name, partition, task, i) for i in range(rows)]


def options_for(endpoint: str, *, single_writer: bool = False) -> Any:
    from mpcommit import RetryPolicy, S3Options

    return S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test",
                     retry=RetryPolicy(max_attempts=6, initial_delay=0.05, max_delay=1.0), single_writer=single_writer)


def uri_of(spec: dict[str, Any]) -> str:
    """The job's destination: the table, or ``dest`` inside it."""
    return f"s3://{spec['bucket']}/{spec['table']}" + (f"/{spec['dest']}" if spec.get("dest") else "")


def order_settings(spec: dict[str, Any]) -> Any:
    from mpcommit.options import OrderSettings

    return OrderSettings(**spec["order"])


def write_job(spec: dict[str, Any], store: Any, say: Any = emit) -> dict[str, Any]:
    from mpcommit import WriterSettings

    uri = uri_of(spec)
    job = Job.create(uri, mode=spec["mode"], partition_overwrite=spec.get("po", "static"), s3=store.options,
                     store=store, order=order_settings(spec), writer=WriterSettings(upload_threads=2),
                     commit_threads=spec.get("commit_threads", 8))
    say("created", job_id=job.job_id)
    results = []
    for f in spec["files"]:
        with job.spec.task(f["task"], 0) as task:
            with task.create(partition=f["partition"], ext="txt") as out:
                token = f.get("token", f["partition"])
                text = "".join(line + "\n" for line in file_rows(spec["name"], token, f["task"], f["rows"]))
                out.write(text.encode())
                out.rows = f["rows"]
            results.append(task.commit())
    say("commit")
    try:
        report = job.commit(results)
    except BaseException:
        # Refused before its journal: an engine aborts such a job (its uploads and records go).
        from mpcommit.errors import CommitStateUnknownError

        exc = sys.exc_info()[1]
        if not isinstance(exc, CommitStateUnknownError):
            try:
                job.abort()
            except Exception as failed:  # noqa: BLE001 - reported with the failure
                say("abort_failed", error=type(failed).__name__, message=str(failed)[:500])
        raise
    return {"job_id": job.job_id, "position": report.position, "files": report.files,
            "deleted": report.deleted_objects, "finished_elsewhere": report.finished_elsewhere}


def compact_job(spec: dict[str, Any], store: Any, say: Any = emit) -> dict[str, Any]:
    from mpcommit.compaction.standalone import compact

    said: list[str] = []

    def progress(step: str, _done: int, _total: int | None) -> None:
        if step.startswith("commit.") and not said:
            said.append(step)
            say("commit")  # its journal is written (the first step the commit reports)

    report = compact(uri_of(spec), s3=store.options, store=store,
                     order_settings=order_settings(spec), progress=progress)
    commit = report.commit
    return {"job_id": report.job_id, "outcome": report.outcome.value,
            "position": commit.position if commit is not None else None,
            "files_merged": sum(len(b.sources) for b in report.merged), "merged": len(report.merged),
            "skipped": [b.message[:300] for b in report.skipped]}


def recover_run(spec: dict[str, Any], store: Any, say: Any = emit) -> dict[str, Any]:
    from mpcommit.protocol.recovery import recover

    actions = recover(f"s3://{spec['bucket']}/{spec['table']}", s3=store.options, store=store,
                      job_id=spec.get("job_id"), older_than=spec.get("older_than"), order=order_settings(spec))
    return {"actions": [{"job_id": a.job_id, "action": a.action.value, "detail": a.detail[:500],
                         "position": a.report.position if a.report is not None else None,
                         "finished_elsewhere": bool(a.report and a.report.finished_elsewhere)}
                        for a in actions]}


def appender_run(spec: dict[str, Any], store: Any, say: Any = emit) -> dict[str, Any]:
    """``count`` appends of one small file each, one after another; each said on its own (``appended``). An
    append that fails is said and the loop goes on: the checker judges each."""
    done = 0
    for i in range(spec["count"]):
        one = {**spec, "name": f"{spec['name']}.{i}", "files": [spec["files"][i % len(spec["files"])]]}
        one["files"] = [{**one["files"][0], "task": 0}]
        try:
            result = write_job(one, store, say=lambda *a, **k: None)
        except Exception as exc:  # noqa: BLE001 - reported, judged by the checker
            say("appended", i=i, name=one["name"], ok=False, error=type(exc).__name__,
                job_id=getattr(exc, "job_id", None) or None, message=" ".join(str(exc).split())[:800])
            continue
        done += 1
        say("appended", i=i, name=one["name"], ok=True, **result)
    return {"appended": done}


def apply_mutant(name: str | None) -> None:
    """Break the protocol in this process on purpose, so that a test can show the checker catches it."""
    if not name:
        return
    if name == "no_replace":
        from mpcommit.protocol.commit.replacing import Replacer

        Replacer.older_objects = lambda self, journal, entry, order: []  # type: ignore[method-assign]
    elif name == "no_wait":
        from mpcommit.protocol.order import TableOrder

        TableOrder.wait_for_earlier = lambda self, me, paths, **kw: None  # type: ignore[method-assign]
    elif name == "no_conflict":
        from mpcommit.protocol.order import TableOrder

        TableOrder.conflict = lambda self, me, since: None  # type: ignore[method-assign]
    elif name == "no_fence":
        from mpcommit.protocol.commit.fence import Hold
        from mpcommit.protocol.order import TableOrder

        Hold.check = lambda self, step: None  # type: ignore[method-assign]
        Hold.check_if_stale = lambda self, step: None  # type: ignore[method-assign]

        def jobs_after(self: Any, position: int) -> set[str]:
            view = self.view()
            return {e.job_id for e in self.entries(p for p in view.positions if p > position)}

        TableOrder.jobs_after = jobs_after  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown mutant {name!r}")


ROLES = {"write": write_job, "compact": compact_job, "recover": recover_run, "appender": appender_run}


def run(spec: dict[str, Any], say: Any, wait_for_start: Any) -> int:
    """The process's life: open the client, say ``ready``, wait for the start time, run, say how it ended."""
    from mpcommit.store.s3 import store_for

    apply_mutant(spec.get("mutant"))
    store = store_for(options_for(spec["endpoint"], single_writer=bool(spec.get("single_writer"))))
    store.head_bucket(spec["bucket"])  # the client and its connection made before the start
    say("ready", pid=os.getpid())
    start_at = wait_for_start()
    if start_at is None:
        return 3  # the harness went away
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    say("start", late=round(max(0.0, -delay), 4))
    try:
        result = ROLES[spec["role"]](spec, store, say)
    except Exception as exc:  # noqa: BLE001 - reported, judged by the checker
        say("end", ok=False, error=type(exc).__name__, job_id=getattr(exc, "job_id", None) or None,
            bases=[c.__name__ for c in type(exc).__mro__[1:] if c not in (object, BaseException)],
            message=" ".join(str(exc).split())[:1500], traceback=traceback.format_exc()[-3000:])
        return 1
    say("end", ok=True, **result)
    return 0


def child(spec: dict[str, Any], fault: str | None, events: Any, go: Any, log: str) -> None:
    """The target of a process forked by the harness's fork server (which imported this module, and mpcommit
    with it, once): events go back over ``events``, the start time comes over ``go``, stdout and stderr go
    to ``log``. ``fault``: this process's MPCOMMIT_FAULT."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.pop("MPCOMMIT_FAULT", None)
    if fault:
        os.environ["MPCOMMIT_FAULT"] = fault

    def say(event: str, **fields: Any) -> None:
        events.send({"event": event, "t": time.time(), **fields})

    def wait_for_start() -> float | None:
        try:
            return float(go.recv())
        except (EOFError, OSError):
            return None

    code = run(spec, say, wait_for_start)
    events.close()
    sys.exit(code)


def main(argv: list[str]) -> int:
    """By hand: the spec as the argument, the start time on stdin, events on stdout."""
    spec = json.loads(argv[1])

    def wait_for_start() -> float | None:
        line = sys.stdin.readline()
        return float(line) if line else None

    return run(spec, emit, wait_for_start)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
