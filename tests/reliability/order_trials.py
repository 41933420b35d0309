"""Randomized trials of concurrent jobs on one table, each job in a process of its own (SPEC.md I9, issue 22
item 6): writers (append, static and dynamic overwrite), compactions and `recover` runs started at random
offsets, one of them SIGKILLed in its commit, all through an S3-like network; then the end state is checked
against the table's commit order (tests/reliability/order_model.py).

    python -m tests.reliability.order_trials --server moto --pairing all --trials 200 --out results.jsonl
    python -m tests.reliability.order_trials --server localstack --pairing oncall --seed 1234 --trials 1  # replay

A trial: a fresh bucket; the table seeded with a few small appends (directly, before the race); then the
pairing's processes start -- each imports mpcommit and opens its client first, then all are given their start
times at once, so the seeded offsets are between the jobs' starts. A process that depends on another (the
re-run of a killed job, a recovery after it) starts at an offset after that one's exit. Every process reports
its outcome as JSON lines (tests/reliability/trial_job.py). Once all have ended: one ``recover --older-than 0``
(so killed jobs are finished or rolled back), then the checker. One JSON line per trial records the plan, what
each process said, the order, the verdict and the timing; a trial's seed replays its plan (the interleaving
itself depends on the machine: that is what the many trials are for).

The network: tests/support/s3_network.py's proxy with the ``s3`` profile (30 ms to first byte, 80 ms for
CompleteMultipartUpload, 40 ms + 1 ms/key for DeleteObjects, 50 ms for copies) between the processes and the
server. Without it a loopback server answers in microseconds and the commit phases of two jobs rarely overlap.

Pairings (:data:`PAIRINGS`):

- ``overwrite-overwrite``: two overwrites (each static or dynamic) at once;
- ``overwrite-append``: an overwrite beside two appends;
- ``overwrite-compact``: several small appends, then an overwrite and ``compact`` started together (the
  issue's first scenario);
- ``oncall``: a live overwrite; an overwrite Y SIGKILLed at a commit checkpoint; its re-run Z started after Y
  died; a ``recover`` after Y died (the on-call night);
- ``recoveries``: an overwrite whose driver lives, another one SIGKILLed after its journal, and three
  ``recover`` runs racing each other and the live driver;
- ``mixed``: all of it at once -- two overwrites, an append, a compaction, a job SIGKILLed in its commit (an
  overwrite, an append or a second compaction) and a ``recover`` after it died.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.reliability import order_model, trial_job  # noqa: E402
from tests.reliability.trial_job import write_job  # noqa: E402

TABLE = "t"
PARTITIONS = ("dt=0", "dt=1", "dt=2")
#: Death is noticed within seconds (the defaults wait a minute): every process and the final recover use it.
ORDER = {"heartbeat_seconds": 0.5, "lease_seconds": 3.0, "poll_seconds": 0.2}
#: Starts are drawn from [0, WINDOW) seconds: about one job's length through the S3-like network.
WINDOW = 1.5
#: Where a killed job dies (checkpoints of mpcommit.protocol.faults; ``k`` counts completes / delete batches).
KILL_POINTS = ("commit.after_place:1", "commit.after_journal:1", "commit.after_complete:1", "commit.after_complete:2",
               "commit.before_delete_batch:1", "commit.before_success:1", "commit.after_success:1",
               "commit.during_cleanup:1")
#: For recoveries to race over: points after the journal.
JOURNALED_KILL_POINTS = KILL_POINTS[1:]
PROCESS_TIMEOUT = 180.0
RESULTS = REPO / "tests" / "reliability" / "results"


@dataclass
class Proc:
    """One process of a trial."""

    name: str
    role: str  # write | compact | recover
    offset: float  # seconds after the trial's start (or after ``after`` exited)
    mode: str = "append"
    po: str = "static"
    files: list[dict[str, Any]] = field(default_factory=list)
    kill: str | None = None
    after: str | None = None
    older_than: float | None = None

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "mode": self.mode, "po": self.po, "files": self.files}


@dataclass
class TrialPlan:
    pairing: str
    seed: int
    seeds: list[Proc]
    procs: list[Proc]
    mutant: str | None = None

    def describe(self) -> str:
        parts = []
        for p in self.procs:
            what = p.role if p.role != "write" else (p.mode if p.mode == "append" else f"{p.po}-overwrite")
            when = f"+{p.offset:.2f}s" + (f" after {p.after}" if p.after else "")
            parts.append(f"{p.name}={what}{' kill@' + p.kill if p.kill else ''} {when}")
        return f"{self.pairing} seed={self.seed}: " + ", ".join(parts)


# ---------------------------------------------------------------- plans
def _files(rng: random.Random, partitions: tuple[str, ...] | list[str], rows: tuple[int, int] = (1, 3)) -> list[dict]:
    return [{"task": i, "partition": p, "rows": rng.randint(*rows)} for i, p in enumerate(partitions)]


def _seed_jobs(rng: random.Random, n: int) -> list[Proc]:
    return [Proc(f"s{i}", "write", 0.0, "append", "static", _files(rng, PARTITIONS, (1, 2))) for i in range(n)]


def _overwrite(rng: random.Random, name: str, offset: float, *, kill: tuple[str, ...] = (), **kw: Any) -> Proc:
    """A static overwrite of two partitions, or a dynamic overwrite of one or two; ``kill``: points to draw its
    death from (a point it reaches: no ``after_complete:2`` for a job of one file)."""
    if rng.random() < 0.5:
        proc = Proc(name, "write", offset, "overwrite", "static", _files(rng, rng.sample(PARTITIONS, 2)), **kw)
    else:
        chosen = sorted(rng.sample(PARTITIONS, rng.randint(1, 2)))
        proc = Proc(name, "write", offset, "overwrite", "dynamic", _files(rng, chosen), **kw)
    if kill:
        proc.kill = _kill_point(rng, kill, len(proc.files))
    return proc


def _kill_point(rng: random.Random, points: tuple[str, ...], files: int) -> str:
    return rng.choice([p for p in points if not p.startswith("commit.after_complete:")
                       or int(p.rsplit(":", 1)[1]) <= files])


def _append(rng: random.Random, name: str, offset: float) -> Proc:
    return Proc(name, "write", offset, "append", "static", _files(rng, sorted(rng.sample(PARTITIONS, rng.randint(1, 2)))))


def plan_overwrite_overwrite(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    return _seed_jobs(rng, 2), [_overwrite(rng, "o1", rng.uniform(0, WINDOW)), _overwrite(rng, "o2", rng.uniform(0, WINDOW))]


def plan_overwrite_append(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    return _seed_jobs(rng, 2), [_overwrite(rng, "o", rng.uniform(0, WINDOW)), _append(rng, "a1", rng.uniform(0, WINDOW)),
                                _append(rng, "a2", rng.uniform(0, WINDOW))]


def plan_overwrite_compact(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    # "Several small appends, then an overwrite and `mpcommit compact` started at the same moment."
    return _seed_jobs(rng, 4), [_overwrite(rng, "o", rng.uniform(0, WINDOW)),
                                Proc("c", "compact", rng.uniform(0, WINDOW))]


def plan_oncall(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    y = _overwrite(rng, "y", 0.0, kill=KILL_POINTS)
    z = Proc("z", "write", rng.uniform(0, WINDOW), y.mode, y.po, [dict(f) for f in y.files], after="y")  # the re-run
    return _seed_jobs(rng, 2), [_overwrite(rng, "x", rng.uniform(0, WINDOW)), y, z,
                                Proc("r", "recover", rng.uniform(0, WINDOW), after="y")]


def plan_recoveries(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    return _seed_jobs(rng, 2), [
        _overwrite(rng, "j", 0.0), _overwrite(rng, "k", rng.uniform(0, WINDOW), kill=JOURNALED_KILL_POINTS),
        Proc("r1", "recover", rng.uniform(0.3, WINDOW + 0.5)),
        Proc("r2", "recover", rng.uniform(0, 0.5), after="k"), Proc("r3", "recover", rng.uniform(0, 0.5), after="k")]


def plan_mixed(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    """Everything at once: two overwrites, an append, a compaction, a job killed in its commit, a recovery."""
    which = rng.random()
    if which < 0.5:
        killed = _overwrite(rng, "k", rng.uniform(0, WINDOW), kill=KILL_POINTS)
    elif which < 0.7:  # an append deletes nothing: it dies at a point it reaches
        killed = Proc("k", "write", rng.uniform(0, WINDOW), "append", "static",
                      _files(rng, sorted(rng.sample(PARTITIONS, 2))),
                      kill=_kill_point(rng, tuple(p for p in KILL_POINTS if "delete" not in p), 2))
    else:  # a second compaction, killed (when it has something to merge)
        killed = Proc("k", "compact", rng.uniform(0, WINDOW), kill=_kill_point(rng, KILL_POINTS, 1))
    return _seed_jobs(rng, 3), [
        _overwrite(rng, "o1", rng.uniform(0, WINDOW)), _overwrite(rng, "o2", rng.uniform(0, WINDOW)),
        _append(rng, "a", rng.uniform(0, WINDOW)), Proc("c", "compact", rng.uniform(0, WINDOW)), killed,
        Proc("r", "recover", rng.uniform(0, WINDOW), after="k")]


PAIRINGS = {
    "overwrite-overwrite": plan_overwrite_overwrite,
    "overwrite-append": plan_overwrite_append,
    "overwrite-compact": plan_overwrite_compact,
    "oncall": plan_oncall,
    "recoveries": plan_recoveries,
    "mixed": plan_mixed,
}


def plan_trial(pairing: str, seed: int, mutant: str | None = None) -> TrialPlan:
    rng = random.Random(f"{pairing}/{seed}")
    seeds, procs = PAIRINGS[pairing](rng)
    return TrialPlan(pairing, seed, seeds, procs, mutant)


# ---------------------------------------------------------------- running one trial
_FORK_SERVER: Any = None
_FORK_LOCK = threading.Lock()
#: Held while a process starts and while a process's exit status is read. Process.start() polls every child
#: of this process (multiprocessing's _cleanup), and a fork server's child has one exit status to read: two
#: threads reading it at once leave one with EOF, which multiprocessing reports as exit code 255.
_EXIT_STATUS_LOCK = threading.Lock()


def fork_server() -> Any:
    """A multiprocessing context whose processes are forked from a server that imported trial_job (and
    mpcommit) once. The server is a fresh interpreter, not a fork of this process (which may run moto's
    threads). Each child runs this process's main module again, as multiprocessing does (under pytest,
    ``pytest.__main__``): the server imports it too, so that costs nothing per child."""
    global _FORK_SERVER
    with _FORK_LOCK:
        if _FORK_SERVER is None:
            import multiprocessing

            ctx = multiprocessing.get_context("forkserver")
            preload = ["tests.reliability.trial_job"]
            main_name = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
            if main_name and main_name != __name__ and main_name != "tests.reliability.order_trials":
                preload.append(main_name)  # (this module, run as __main__, is cheap to run again)
            ctx.set_forkserver_preload(preload)
            _FORK_SERVER = ctx
        return _FORK_SERVER


class Running:
    """One process of a trial: its events read on a thread, its start time sent when the harness says."""

    def __init__(self, proc: Proc, spec: dict[str, Any], log: Path):
        ctx = fork_server()
        self.proc = proc
        self.stderr = log
        self.events: list[dict[str, Any]] = []
        self.exit_time: float | None = None
        self.ready = threading.Event()
        self.exited = threading.Event()
        events_in, events_out = ctx.Pipe(duplex=False)
        go_in, go_out = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=trial_job.child, args=(spec, f"{proc.kill}:kill" if proc.kill else None,
                                                                 events_out, go_in, str(log)),
                                   name=f"trial-{proc.name}", daemon=True)
        with _EXIT_STATUS_LOCK:
            self.process.start()
        events_out.close()  # the child holds the only writing end: EOF when it dies
        go_in.close()
        self._events = events_in
        self._go = go_out
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                event = self._events.recv()
            except (EOFError, OSError):
                break
            self.events.append(event)
            if event.get("event") == "ready":
                self.ready.set()
        from multiprocessing.connection import wait

        wait([self.process.sentinel])
        with _EXIT_STATUS_LOCK:
            self.process.join()
        self.exit_time = time.time()
        self._events.close()
        self.exited.set()

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()

    def first(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == kind), None)

    def go(self, at: float) -> None:
        try:
            self._go.send(at)
        except (BrokenPipeError, OSError):
            pass
        finally:
            self._go.close()


class Harness:
    """Runs trials against one server, through one S3-like network proxy."""

    def __init__(self, server_url: str, network_url: str, client: Any, *, workdir: Path, server_name: str):
        self.server_url = server_url
        self.network_url = network_url
        self.client = client
        self.workdir = workdir
        self.server_name = server_name
        workdir.mkdir(parents=True, exist_ok=True)

    def _seed(self, bucket: str, seeds: list[Proc]) -> dict[str, dict[str, Any]]:
        from mpcommit.store.s3 import store_for
        from tests.reliability.trial_job import options_for

        store = store_for(options_for(self.server_url))
        out = {}
        for i, s in enumerate(seeds):
            spec = {**s.spec(), "bucket": bucket, "table": TABLE, "order": ORDER}
            result = write_job(spec, store, say=lambda *a, **k: None)
            out[s.name] = {**s.spec(), "role": "seed", "seq": i, "job_id": result["job_id"],
                           "report": {"ok": True, **result}}
        return out

    def run_many(self, plans: list[TrialPlan], parallel: int = 1) -> list[dict[str, Any]]:
        """Run ``plans``, up to ``parallel`` at once (each on a bucket of its own); records in plan order."""
        if parallel <= 1:
            return [self.run(p) for p in plans]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(parallel) as pool:
            return list(pool.map(self.run, plans))

    def run(self, plan: TrialPlan, *, keep_state: bool = False) -> dict[str, Any]:
        t_begin = time.monotonic()
        load_before = os.getloadavg()[0]
        bucket = f"ot-{plan.pairing[:12].strip('-')}-{plan.seed}-{uuid.uuid4().hex[:8]}"
        self.client.create_bucket(Bucket=bucket)
        jobs = self._seed(bucket, plan.seeds)
        trial_dir = self.workdir / bucket
        trial_dir.mkdir(parents=True, exist_ok=True)
        running: dict[str, Running] = {}
        for p in plan.procs:
            spec = {**p.spec(), "bucket": bucket, "table": TABLE, "endpoint": self.network_url, "order": ORDER,
                    "older_than": p.older_than, "mutant": plan.mutant}
            running[p.name] = Running(p, spec, trial_dir / f"{p.name}.log")
        for r in running.values():
            if not r.ready.wait(60):
                break
        t0 = time.time() + 0.05
        waiters = []
        for r in running.values():
            if r.proc.after is None:
                r.go(t0 + r.proc.offset)
            else:
                dep = running[r.proc.after]

                def later(r: Running = r, dep: Running = dep) -> None:
                    dep.exited.wait(PROCESS_TIMEOUT)
                    r.go(time.time() + r.proc.offset)

                waiters.append(threading.Thread(target=later, daemon=True))
                waiters[-1].start()
        deadline = time.monotonic() + PROCESS_TIMEOUT
        hung = set()
        for name, r in running.items():
            if not r.exited.wait(max(0.1, deadline - time.monotonic())):
                hung.add(name)
                r.kill()
                r.exited.wait(10)
        for t in waiters:
            t.join(5)
        t_race = time.time() - t0
        # Every process has ended: one recover finishes or rolls back what the killed ones left.
        final = self._final_recover(bucket)
        state = order_model.read_end_state(self.client, bucket, TABLE)
        for name, r in running.items():
            end = r.first("end")
            created = r.first("created")
            job_id = (created or {}).get("job_id") or (end or {}).get("job_id")
            killed = r.returncode == -9 and name not in hung
            jobs[name] = {**r.proc.spec(), "job_id": job_id, "kill": r.proc.kill, "killed": killed,
                          "hung": name in hung, "returncode": r.returncode,
                          "report": {k: v for k, v in end.items() if k not in ("event", "t", "traceback")} if end else None,
                          "recover_actions": (end or {}).get("actions")}
        jobs["final-recover"] = {"role": "final-recover", "recover_actions": final}
        verdict = order_model.check(state, jobs)
        record = self._record(plan, bucket, running, jobs, state, verdict, t0, t_race, t_begin, load_before)
        if keep_state:
            record["end_state"] = {"jobs": jobs, "state": state}
        if verdict.ok:
            self._drop(bucket)
            for r in running.values():
                r.stderr.unlink(missing_ok=True)
            try:
                trial_dir.rmdir()
            except OSError:
                pass
        else:
            (trial_dir / "end_state.json").write_text(json.dumps({"plan": _plan_json(plan), "jobs": jobs,
                                                                  "state": state, "verdict": verdict.violations},
                                                                 indent=1, default=str))
            for name, r in running.items():
                (trial_dir / f"{name}.events.json").write_text(json.dumps(r.events, indent=1))
        return record

    def _final_recover(self, bucket: str) -> list[dict[str, Any]]:
        from mpcommit.options import OrderSettings
        from mpcommit.protocol.recovery import recover
        from tests.reliability.trial_job import options_for

        actions = recover(f"s3://{bucket}/{TABLE}", s3=options_for(self.server_url), older_than=0,
                          order=OrderSettings(**ORDER))
        return [{"job_id": a.job_id, "action": a.action.value, "detail": a.detail[:500],
                 "position": a.report.position if a.report is not None else None,
                 "finished_elsewhere": bool(a.report and a.report.finished_elsewhere)} for a in actions]

    def _drop(self, bucket: str) -> None:
        from tests.support.checks import list_objects, pending_upload_entries

        try:
            for u in pending_upload_entries(self.client, bucket, ""):
                self.client.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
            keys = [o["Key"] for o in list_objects(self.client, bucket, "")]
            for i in range(0, len(keys), 1000):
                self.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
            self.client.delete_bucket(Bucket=bucket)
        except Exception:  # noqa: BLE001 - tidying only
            pass

    def _record(self, plan: TrialPlan, bucket: str, running: dict[str, Running], jobs: dict[str, Any],
                state: dict[str, Any], verdict: order_model.Verdict, t0: float, t_race: float, t_begin: float,
                load_before: float) -> dict[str, Any]:
        names = {j["job_id"]: n for n, j in jobs.items() if j.get("job_id")}
        procs = {}
        for name, r in running.items():
            start, end, commit = r.first("start"), r.first("end"), r.first("commit")
            j = jobs[name]
            if j["hung"]:
                outcome = "hung"
            elif j["killed"]:
                outcome = "killed"
            elif end is None:
                outcome = f"exit {r.returncode}"
            elif end.get("ok"):
                outcome = "ok" if r.proc.role != "compact" else f"ok:{end.get('outcome')}"
                if r.proc.kill:
                    outcome += " (kill point not reached)"
            else:
                outcome = end.get("error", "?")
            procs[name] = {
                "role": r.proc.role, "mode": r.proc.mode if r.proc.role == "write" else None,
                "po": r.proc.po if r.proc.role == "write" and r.proc.mode == "overwrite" else None,
                "offset": round(r.proc.offset, 3), "after": r.proc.after, "kill": r.proc.kill, "outcome": outcome,
                "position": (end or {}).get("position"),
                "t_start": round(start["t"] - t0, 3) if start else None,
                "t_commit": round(commit["t"] - t0, 3) if commit else None,
                "t_exit": round(r.exit_time - t0, 3) if r.exit_time else None,
            }
            if r.proc.role == "recover" and end and end.get("ok"):
                procs[name]["actions"] = [_action(a, names) for a in end.get("actions", [])]
            if end and not end.get("ok"):
                procs[name]["message"] = end.get("message", "")[:300]
            procs[name] = {k: v for k, v in procs[name].items() if v is not None}
        order = [f"{e['position']}:{names.get(e.get('jobId'), (e.get('jobId') or '?')[:8])}:"
                 f"{(e.get('outcome') or 'open')[0]}" for e in state["order"]]
        return {
            "pairing": plan.pairing, "server": self.server_name, "seed": plan.seed, "mutant": plan.mutant,
            "commits_overlapped": commits_overlapped(procs),
            "ok": verdict.ok, "violations": verdict.violations, "procs": procs, "order": order,
            "final_recover": [_action(a, names) for a in jobs["final-recover"]["recover_actions"]],
            "rows": {"visible": verdict.notes.get("visible rows"), "model": verdict.notes.get("model rows")},
            "race_seconds": round(t_race, 2), "trial_seconds": round(time.monotonic() - t_begin, 2),
            "load1": round(load_before, 2), "bucket": None if verdict.ok else bucket,
        }


def _action(a: dict[str, Any], names: dict[str, str]) -> str:
    """``job:action``, and for a job found finished: by this run, by another process (elsewhere), or already
    committed so that only its records were left (records)."""
    text = f"{names.get(a['job_id'], a['job_id'][:8])}:{a['action']}"
    if a["action"] == "finished" and (a.get("finished_elsewhere") or "another process" in a.get("detail", "")):
        text += " (elsewhere)"
    elif a["action"] == "finished" and a.get("position") is None:
        text += " (records)"  # committed already: only its records were left
    return text


def commits_overlapped(procs: dict[str, dict[str, Any]]) -> bool:
    """Whether two jobs overlapped in time where they can race: a write from its ``commit`` to its process's
    exit, a compaction from its start (its view of the order and its listing) to its exit."""
    spans = sorted((p["t_start"] if p["role"] == "compact" else p.get("t_commit"), p["t_exit"])
                   for p in procs.values() if p["role"] in ("write", "compact") and p.get("t_exit") is not None
                   and (p["t_start"] if p["role"] == "compact" else p.get("t_commit")) is not None)
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


def _plan_json(plan: TrialPlan) -> dict[str, Any]:
    return {"pairing": plan.pairing, "seed": plan.seed, "mutant": plan.mutant,
            "seeds": [asdict(s) for s in plan.seeds], "procs": [asdict(p) for p in plan.procs]}


# ---------------------------------------------------------------- servers and the command line
@contextlib.contextmanager
def atomic_conditional_writes_on_moto() -> Iterator[None]:
    """Make this process's moto decide conditional writes atomically, as S3 and LocalStack do.

    moto 5.2 checks ``If-None-Match: *`` (PutObject, CompleteMultipartUpload) and ``If-Match`` (PutObject) and
    then writes, with nothing held in between: two requests creating one key at once can both succeed
    (tests/reliability/test_order_races.py forces it). The table's commit order rests on exactly that
    guarantee, so on moto as it is two jobs can take one place -- the second long run's first moto failure
    (overwrite-append seed 2: two appends both at place 4). S3 guarantees it; LocalStack holds a lock across
    its check and write. This holds one lock across moto's, for conditional requests only."""
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    put, post = S3Response.put_object, S3Response._key_response_post

    def conditional(response: Any) -> bool:
        return bool(response.headers.get("If-None-Match") or response.headers.get("If-Match"))

    def put_object(self: Any) -> Any:
        if not conditional(self):
            return put(self)
        with lock:
            return put(self)

    def key_response_post(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not conditional(self):
            return post(self, *args, **kwargs)
        with lock:
            return post(self, *args, **kwargs)

    S3Response.put_object = put_object  # type: ignore[method-assign]
    S3Response._key_response_post = key_response_post  # type: ignore[method-assign]
    try:
        yield
    finally:
        S3Response.put_object = put  # type: ignore[method-assign]
        S3Response._key_response_post = post  # type: ignore[method-assign]

class Servers:
    """The server (moto in this process, LocalStack, or one of the Go servers tests/support/servers.py builds)
    and the S3-like network in front of it."""

    def __init__(self, name: str, *, moto_as_is: bool = False):
        self.name = name
        self.moto_as_is = moto_as_is
        self.server: Any = None
        self.network: Any = None
        self._atomic: Any = None

    def __enter__(self) -> "Servers":
        from tests.support.s3_network import S3_LIKE, S3Network
        from tests.support.servers import start_go_server, start_localstack, start_moto

        if self.name == "moto" and not self.moto_as_is:
            self._atomic = atomic_conditional_writes_on_moto()
            self._atomic.__enter__()
        self.server = (start_moto() if self.name == "moto" else start_localstack() if self.name == "localstack"
                       else start_go_server(self.name))
        self.network = S3Network(self.server.endpoint_url, S3_LIKE).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.network is not None:
            self.network.stop()
        if self.server is not None:
            self.server.stop()
        if self._atomic is not None:
            self._atomic.__exit__(None, None, None)

    def harness(self, workdir: Path) -> Harness:
        from tests.support.backends import raw_s3_client

        return Harness(self.server.endpoint_url, self.network.endpoint_url, raw_s3_client(self.server.endpoint_url),
                       workdir=workdir, server_name=self.name)


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    outcomes: Counter[str] = Counter()
    for r in records:
        for name, p in r["procs"].items():
            outcomes[f"{p['role']}{'/' + p['mode'] if p.get('mode') else ''}: {p['outcome']}"] += 1
    return {"trials": len(records), "passed": sum(1 for r in records if r["ok"]),
            "failed": sum(1 for r in records if not r["ok"]),
            "commits overlapped": sum(1 for r in records if r.get("commits_overlapped")),
            "outcomes": dict(sorted(outcomes.items()))}


def _line(record: dict[str, Any], plan: TrialPlan) -> str:
    mark = "ok  " if record["ok"] else "FAIL"
    procs = ", ".join(f"{n}:{p['outcome']}" + (f" [{' '.join(p['actions'])}]" if p.get("actions") else "")
                      for n, p in record["procs"].items())
    text = (f"{mark} {record['server']} {plan.describe()} | {record['trial_seconds']:.1f}s | order "
            f"{' '.join(record['order'])} | {procs}")
    return "\n".join([text, *(f"     - {v}" for v in record["violations"])])


def _git_commit() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.order_trials", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("moto", "localstack", "versitygw", "seaweedfs"), default="moto")
    parser.add_argument("--pairing", default="all", help=f"one of {', '.join(PAIRINGS)}, or all")
    parser.add_argument("--trials", type=int, default=200, help="per pairing")
    parser.add_argument("--seed", type=int, default=1, help="the first trial's seed; trial i uses seed + i")
    parser.add_argument("--out", type=Path, help="append one JSON line per trial here")
    parser.add_argument("--workdir", type=Path, help="where failing trials keep their logs and end state")
    parser.add_argument("--mutant", choices=("no_replace", "no_wait", "no_conflict"), help="break the protocol")
    parser.add_argument("--stop-after", type=float, help="stop starting trials after this many seconds")
    parser.add_argument("--parallel", type=int, default=1, help="trials at once (each on its own bucket)")
    parser.add_argument("--replace", action="store_true", help="empty --out first")
    parser.add_argument("--moto-as-is", action="store_true",
                        help="leave moto's conditional writes as they are (not atomic: see atomic_conditional_writes_on_moto)")
    a = parser.parse_args(argv)
    pairings = list(PAIRINGS) if a.pairing == "all" else a.pairing.split(",")
    for p in pairings:
        if p not in PAIRINGS:
            parser.error(f"unknown pairing {p!r}")
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="mpcommit-order-trials-"))
    print(f"order trials: {a.server}, pairings {', '.join(pairings)}, {a.trials} each from seed {a.seed}; "
          f"failing trials keep their logs in {workdir}", file=sys.stderr)
    if a.out and a.replace:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("")
    run_info = {"commit": _git_commit(), "date": time.strftime("%Y-%m-%d", time.gmtime()), "parallel": a.parallel,
                "moto_conditional_writes": "as is" if a.moto_as_is else "atomic"} if a.server == "moto" else {
        "commit": _git_commit(), "date": time.strftime("%Y-%m-%d", time.gmtime()), "parallel": a.parallel}
    records: list[dict[str, Any]] = []
    started = time.monotonic()
    plans = iter([plan_trial(pairing, a.seed + i, a.mutant) for i in range(a.trials) for pairing in pairings])
    lock = threading.Lock()

    def worker(harness: Harness) -> None:
        while True:
            with lock:
                if a.stop_after and time.monotonic() - started > a.stop_after:
                    return
                plan = next(plans, None)
            if plan is None:
                return
            try:
                record = harness.run(plan)
            except Exception as exc:  # noqa: BLE001 - the harness itself failed: a failed trial, said so
                record = {"pairing": plan.pairing, "server": a.server, "seed": plan.seed, "mutant": plan.mutant,
                          "ok": False, "violations": [f"harness error: {type(exc).__name__}: {exc}"], "procs": {},
                          "order": [], "trial_seconds": 0.0}
            record["run"] = run_info
            with lock:
                records.append(record)
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(json.dumps(record, sort_keys=True) + "\n")
                print(_line(record, plan), flush=True)

    with Servers(a.server, moto_as_is=a.moto_as_is) as servers:
        harness = servers.harness(workdir)
        threads = [threading.Thread(target=worker, args=(harness,)) for _ in range(max(1, a.parallel))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    summary = summarize(records)
    summary["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(summary, indent=1), file=sys.stderr)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
