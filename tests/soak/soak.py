"""The soak: a bounded run of everything at once on one bucket, with an independent check after every job.

    python -m tests.soak.soak                    # 10 minutes (make soak)
    python -m tests.soak.soak --minutes 60       # longer
    python -m tests.soak.soak --seconds 60 --no-spark

LocalStack sits behind a fault-injecting proxy (5% of requests answered 503 SlowDown or 500, or dropped before
or after the server applied them; 2% delayed by a latency spike). Through it, at the same time:

- plain-Python job drivers (``tests/soak/runner.py``, one process each) run jobs on overlapping (``data``) and
  sibling (``data1``, ``data10``: string prefixes of each other) destinations in every mode -- append, static
  and dynamic overwrite, error, ignore -- with failed, dead and duplicate task attempts;
- a Spark driver on the standalone cluster does the same with ``mpcommit.spark.write``;
- cleaners (``mpcommit uploads abort --older-than``), compactions (``mpcommit compact``) and recovers
  (``mpcommit jobs recover --older-than``) run beside them, as an operator's cron would;
- every 15 s or so a compaction and an overwrite of some of the same destination's partitions start together:
  the overwrite from 1.5 s before the compaction to 6 s after it (a one-shot runner: dynamic mostly, static now
  and then), issue 22's first schedule;
- drivers die: the soak SIGKILLs a random driver (a Python runner, the Spark driver, a compaction) now and
  then, and some jobs kill themselves at a commit checkpoint they drew.

The checker (``tests/soak/checker.py``) reads LocalStack directly after every job (a round starts whenever a
job has ended) and once more at the end, after every job was recovered or rolled back and every orphan cleaned;
at the end it also replays each destination's commit order (the jobs whose place ended committed, in order)
and requires exactly the rows that leaves.
The report (printed, and written as JSON) gives jobs, files, faults, kills and violations.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.support.cluster_apps import DriverApp, cli
from tests.soak.checker import (
    COMPACTION_RECOVERY_STUCK,
    JobLog,
    Reader,
    check,
    check_order_model,
    read_order,
    settle_fates,
)
from tests.support.s3_network import NONE, FaultPlan, FaultRule, S3Network
from tests.support.spark_cluster import StandaloneCluster

REPO = Path(__file__).resolve().parents[2]
DESTS = ("data", "data1", "data10")
DEST_WEIGHTS = (6, 2, 2)
SPARK_MODES = ((("append", "static"), 35), (("overwrite", "static"), 15), (("overwrite", "dynamic"), 25),
               (("error", "static"), 10), (("ignore", "static"), 10))
#: Where a driver that kills itself dies (a Spark driver: at these checkpoints of mpcommit.protocol.faults).
SPARK_KILL_POINTS = ("before_journal", ["commit.after_journal", 1], ["commit.after_complete", 1],
                     ["commit.after_complete", 3], ["commit.before_delete_batch", 1], ["commit.before_success", 1],
                     ["commit.during_cleanup", 1])
COMPACT_KILL_POINTS = ("commit.after_journal:1", "commit.after_complete:1", "commit.before_delete_batch:1",
                       "commit.before_success:1")


@dataclass
class Settings:
    seconds: float = 600.0
    runners: int = 2
    spark: bool = True
    seed: int = 20261123
    fault_rate: float = 0.05
    spike_rate: float = 0.02
    spike_max: float = 1.5  # seconds
    kill_every: float = 25.0  # mean seconds between two SIGKILLs from outside
    self_kill_rate: float = 0.12  # share of Python jobs that kill their driver at a commit checkpoint
    spark_kill_rate: float = 0.2  # share of Spark writes whose driver dies at a commit checkpoint
    clean_every: float = 9.0
    clean_age: float = 45.0
    recover_every: float = 11.0
    recover_age: float = 60.0
    compact_every: float = 13.0
    compact_kill_rate: float = 0.25
    #: An overwrite of some partitions and `mpcommit compact` of the same destination, started together.
    clash_every: float = 15.0
    #: The overwrite starts up to this much before the compaction, or up to ``clash_after`` after it (a
    #: compaction takes seconds to list and merge: later overwrites meet it at its commit, or wait for it).
    clash_window: float = 1.5
    clash_after: float = 6.0


@dataclass
class SparkWrite:
    run: str
    dest: str
    mode: str
    po: str
    start: int
    flags: Path
    tasks: int
    rows: int
    kill: Any = None
    end: int | None = None
    outcome: str = "running"  # committed, not_committed, unknown, killed


class Soak:
    def __init__(self, settings: Settings, *, upstream: str, raw_client: Any, bucket: str, workdir: Path,
                 cluster: StandaloneCluster | None):
        self.s = settings
        self.client = raw_client
        self.bucket = bucket
        self.dir = workdir
        self.cluster = cluster
        self.rng = random.Random(settings.seed)
        # The fault proxy, plus latency spikes: a share of requests waits up to ``spike_max`` seconds first.
        faults = FaultPlan(default=FaultRule(settings.fault_rate), seed=settings.seed, max_consecutive=3,
                           max_faults=None, spike_rate=settings.spike_rate, spike_max=settings.spike_max)
        # Every request that changed the store, for the forensics of a violation (which request removed a key).
        workdir.mkdir(parents=True, exist_ok=True)
        self.proxy = S3Network(upstream, NONE, faults=faults, lifetime=settings.seconds + 3600,
                               trail=str(workdir / "proxy-trail.jsonl"))
        self.proxy_stats: dict[str, Any] = {}
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.kills: Counter[str] = Counter()
        self.ops: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []  # recovers, cleaners, compactions
        self.recovered: dict[str, tuple[str, int]] = {}  # job id -> (last action, ms)
        self.runner_logs: list[Path] = []
        self.runner_procs: dict[int, subprocess.Popen] = {}
        self.runner_by_name: dict[str, subprocess.Popen] = {}
        self.spark_writes: list[SparkWrite] = []
        self.spark_app: DriverApp | None = None
        self.compacting: dict[str, subprocess.Popen] = {}
        self.clash_compacting: dict[str, subprocess.Popen] = {}
        self.clashes = 0
        self.violations: list[str] = []
        self.known: dict[str, list[str]] = defaultdict(list)
        self.notes: Counter[str] = Counter()
        self.rounds = 0
        self.order_notes: dict[str, Any] = {}
        self.reader = Reader(raw_client, bucket)
        self.started = 0.0

    @property
    def endpoint(self) -> str:
        return self.proxy.endpoint_url

    def note(self, kind: str, **fields: Any) -> None:
        event = {"kind": kind, "t": int(time.time() * 1000), **fields}
        with self.lock:
            self.events.append(event)
            with open(self.dir / "events.jsonl", "a") as f:
                f.write(json.dumps(event) + "\n")

    def pick_dest(self, rng: random.Random) -> str:
        return rng.choices(DESTS, weights=DEST_WEIGHTS)[0]

    # ------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        self.proxy.start()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        threads = [threading.Thread(target=t, name=t.__name__, daemon=True) for t in (
            self._python_drivers, self._killer, self._cleaner, self._recoverer, self._compactor, self._clasher,
            self._checker)]
        if self.s.spark and self.cluster is not None:
            threads.append(threading.Thread(target=self._spark_driver, name="spark", daemon=True))
        for t in threads:
            t.start()
        self.stopping.wait(self.s.seconds)
        self.stopping.set()
        (self.dir / "stop").touch()
        for t in threads:
            t.join(timeout=600)
        return self._finish()

    # ------------------------------------------------------------ plain-Python drivers
    def _python_drivers(self) -> None:
        generations = [0] * self.s.runners
        while not self.stopping.is_set():
            for slot in range(self.s.runners):
                proc = self.runner_procs.get(slot)
                if proc is None or proc.poll() is not None:
                    if proc is not None and proc.returncode != 0:
                        self.ops[f"python driver exited {proc.returncode}"] += 1
                    generations[slot] += 1
                    self._start_runner(slot, generations[slot])
            time.sleep(0.3)
        deadline = time.monotonic() + 180  # each finishes the job it is in
        for proc in list(self.runner_procs.values()):
            try:
                proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.kills["python driver (did not stop)"] += 1

    def _start_runner(self, slot: int, generation: int) -> None:
        name = f"p{slot}.{generation}"
        log = self.dir / f"{name}.log"
        self.runner_logs.append(log)
        cfg = {"name": name, "endpoint": self.endpoint, "bucket": self.bucket, "dests": list(DESTS),
               "dest_weights": list(DEST_WEIGHTS), "seed": f"{self.s.seed}/{name}", "log": str(log),
               "stop": str(self.dir / "stop"), "kill_rate": self.s.self_kill_rate}
        with open(self.dir / f"{name}.stderr", "ab") as err:
            self.runner_procs[slot] = self.runner_by_name[name] = subprocess.Popen(
                [sys.executable, "-m", "tests.soak.runner", json.dumps(cfg)], cwd=REPO, stdout=subprocess.DEVNULL,
                stderr=err, stdin=subprocess.DEVNULL)

    # ------------------------------------------------------------ the Spark driver
    def _spark_driver(self) -> None:
        assert self.cluster is not None
        rng = random.Random(f"{self.s.seed}/spark")
        generation, n = 0, 0
        while not self.stopping.is_set():
            if self.spark_app is None or self.spark_app.process.poll() is not None:
                generation += 1
                try:
                    self.spark_app = DriverApp(self.cluster, f"soak-{os.getpid()}-{generation}", executor_cores=2,
                                               cores_max=2)
                except AssertionError as exc:
                    self.ops["spark driver failed to start"] += 1
                    self.note("spark_start_failed", error=str(exc)[:300])
                    self.spark_app = None
                    time.sleep(5)
                    continue
                self.ops["spark applications started"] += 1
            n += 1
            run = f"s{generation}-{n}"
            (mode, po) = rng.choices([m for m, _ in SPARK_MODES], weights=[w for _, w in SPARK_MODES])[0]
            kill = rng.choice(SPARK_KILL_POINTS) if rng.random() < self.s.spark_kill_rate else None
            w = SparkWrite(run, self.pick_dest(rng), mode, po, int(time.time() * 1000), self.dir / "spark" / run,
                           tasks=2, rows=rng.randint(200, 1500), kill=kill)
            with self.lock:
                self.spark_writes.append(w)
            args = {"dir": str(w.flags), "endpoint": self.endpoint, "bucket": self.bucket, "prefix": w.dest,
                    "tasks": w.tasks, "rows": w.rows, "mode": mode, "partition_overwrite": po, "label": run,
                    "commit_threads": 4, **({"block": kill, "kill": True} if kill else {})}
            try:
                out = self.spark_app.call("write", args=args, timeout=600)
            except AssertionError:  # the driver died: killed from outside, or by itself at its kill point
                w.outcome, w.end = "killed", None
                if kill and (w.flags / "commit_start.json").exists():
                    self.kills[f"spark driver, by itself at {_point_name(kill)}"] += 1
                self.spark_app = None
                continue
            w.end = int(time.time() * 1000)
            if "report" in out:
                w.outcome = "not_committed" if out["report"].get("ignored") else "committed"
                self.ops["spark files committed"] += out["report"]["files"]
            elif out.get("error") == "CommitStateUnknownError":
                w.outcome = "unknown"
            else:
                w.outcome = "not_committed"
                self.ops[f"spark write failed: {out.get('error')}"] += 1
                self.note("spark_failed", run=run, error=out.get("error"), message=out.get("message", "")[:500])
        if self.spark_app is not None:
            self.spark_app.close()

    # ------------------------------------------------------------ SIGKILL from outside
    def _killer(self) -> None:
        rng = random.Random(f"{self.s.seed}/killer")
        while not self.stopping.wait(rng.expovariate(1 / self.s.kill_every)):
            targets: list[tuple[str, int]] = [("python driver", p.pid) for p in self.runner_procs.values()
                                              if p.poll() is None]
            # A Spark driver costs a new application (a JVM and its executors): killed less often.
            if self.spark_app is not None and self.spark_app.process.poll() is None and rng.random() < 0.3:
                targets.append(("spark driver", self.spark_app.pid))
            targets += [("compaction", p.pid) for p in list(self.compacting.values()) + list(
                self.clash_compacting.values()) if p.poll() is None]
            if not targets:
                continue
            what, pid = rng.choice(targets)
            try:
                os.kill(pid, signal.SIGKILL)
                self.kills[f"{what}, from outside"] += 1
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------ operators
    def _every(self, seconds: float, name: str) -> Any:
        rng = random.Random(f"{self.s.seed}/{name}")
        while not self.stopping.wait(rng.uniform(0.5, 1.5) * seconds):
            yield rng

    def _cleaner(self) -> None:
        for rng in self._every(self.s.clean_every, "cleaner"):
            dest = self.pick_dest(rng)
            done = cli(self.endpoint, "uploads", "abort", f"s3://{self.bucket}/{dest}", "--older-than",
                       f"{int(self.s.clean_age)}s", "--yes", "--json")
            self.ops["cleaner runs"] += 1
            try:
                report = json.loads(done.stdout)
                self.ops["uploads aborted by cleaners"] += report["aborted"]
                self.ops["uploads cleaners left alone (live jobs)"] += len(report["protected"])
                self.note("cleaner", dest=dest, aborted=report["aborted"], jobs=sorted(
                    {r["jobId"] for r in report["results"] if r["outcome"] == "aborted" and r["jobId"]}))
            except (ValueError, KeyError):
                self.ops[f"cleaner exit {done.returncode}"] += 1
                self.note("cleaner_failed", dest=dest, stderr=done.stderr[-500:])

    def _recoverer(self) -> None:
        for rng in self._every(self.s.recover_every, "recover"):
            self._recover(self.pick_dest(rng), f"{int(self.s.recover_age)}s")

    def _recover(self, dest: str, age: str) -> None:
        done = cli(self.endpoint, "jobs", "recover", f"s3://{self.bucket}/{dest}", "--older-than", age, "--json")
        self.ops["recover runs"] += 1
        now = int(time.time() * 1000)
        try:
            actions = json.loads(done.stdout)["actions"]
        except (ValueError, KeyError):
            self.ops[f"recover exit {done.returncode}"] += 1
            self.note("recover_failed", dest=dest, stderr=done.stderr[-500:])
            return
        for a in actions:
            self.ops[f"recover: {a['action']}"] += 1
            if a["action"] != "skipped":
                with self.lock:
                    self.recovered[a["jobId"]] = (a["action"], now)
                self.note("recover", dest=dest, job=a["jobId"], action=a["action"], detail=a["detail"][:1500])

    def _compactor(self) -> None:
        for rng in self._every(self.s.compact_every, "compact"):
            self._compact(self.pick_dest(rng), rng, self.compacting)

    def _compact(self, dest: str, rng: random.Random, registry: dict[str, subprocess.Popen],
                 label: str = "compaction") -> None:
        from tests.support.cli import cli_env, mpcommit_command

        fault = rng.choice(COMPACT_KILL_POINTS) + ":kill" if rng.random() < self.s.compact_kill_rate else None
        env = cli_env(**({"MPCOMMIT_FAULT": fault} if fault else {}))
        proc = subprocess.Popen([*mpcommit_command(), "--endpoint-url", self.endpoint, "compact",
                                 f"s3://{self.bucket}/{dest}", "--json"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        registry[dest] = proc
        self.note(f"{label}_start", dest=dest, fault=fault, pid=proc.pid)
        try:
            out, err = proc.communicate(timeout=600)
        finally:
            registry.pop(dest, None)
        if proc.returncode == -signal.SIGKILL:
            self.ops[f"{label}s killed"] += 1
            self.note(f"{label}_killed", dest=dest, fault=fault)
            if fault:
                self.kills[f"compaction, by itself at {fault.rsplit(':', 1)[0]}"] += 1
            return
        try:
            report = json.loads(out)
            self.ops[f"{label}: {report['outcome']}"] += 1
            self.ops[f"files merged by {label}s"] += report.get("filesMerged", 0)
            self.note(label, dest=dest, job=report.get("jobId"), outcome=report["outcome"])
        except (ValueError, KeyError):
            # A conflict with an overwrite that replaced its sources is a refusal by name (exit 1, no JSON).
            first = next((line for line in err.splitlines() if "error" in line.lower()), err[-200:])
            # CommitConflictError's message (the CLI prints messages, not classes): the sources changed under it.
            kind = "conflict" if "changed the files it was made from" in err or (
                "was not committed" in err and "Nothing of it is visible; run it again" in err) else f"exit {proc.returncode}"
            self.ops[f"{label}: {kind}"] += 1
            self.note(f"{label}_failed", dest=dest, why=kind, stderr=err[-800:], first=first[:300])

    # ------------------------------------------------------------ an overwrite beside a compaction
    def _clasher(self) -> None:
        """Every ``clash_every`` s or so: on one destination, `mpcommit compact` and a one-shot overwrite of some
        of its partitions (dynamic mostly; static now and then), the overwrite started from ``clash_window`` s
        before the compaction to ``clash_after`` s after it -- the schedule of issue 22's first report (a nightly
        compact beside a daily overwrite)."""
        n = 0
        for rng in self._every(self.s.clash_every, "clash"):
            n += 1
            dest = self.pick_dest(rng)
            po = "dynamic" if rng.random() < 0.75 else "static"
            partitions = sorted(rng.sample(("a", "b", "c", "d"), rng.randint(1, 2)))
            lead = rng.uniform(-self.s.clash_window, self.s.clash_after)  # the overwrite's start - compact's
            name = f"x{n}"
            log = self.dir / f"{name}.log"
            self.runner_logs.append(log)
            cfg = {"name": name, "endpoint": self.endpoint, "bucket": self.bucket, "dests": [dest],
                   "seed": f"{self.s.seed}/{name}", "log": str(log), "stop": str(self.dir / "stop"),
                   "kill_rate": self.s.self_kill_rate, "one": True, "mode": "overwrite", "po": po,
                   "partitions": partitions, "start_at": time.time() + 1.0 + max(0.0, lead)}
            with open(self.dir / f"{name}.stderr", "ab") as err:
                proc = subprocess.Popen([sys.executable, "-m", "tests.soak.runner", json.dumps(cfg)], cwd=REPO,
                                        stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
            self.runner_by_name[name] = proc
            self.clashes += 1
            self.note("clash", dest=dest, overwrite=name, po=po, partitions=partitions, lead=round(lead, 3))
            time.sleep(1.0 + max(0.0, -lead))  # the compaction's command starts `lead` s before the overwrite
            self._compact(dest, rng, self.clash_compacting, label="clash compaction")
            try:
                proc.wait(600)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, None):
                self.ops[f"clash overwrite exited {proc.returncode}"] += 1

    # ------------------------------------------------------------ the checker
    def jobs(self) -> dict[str, JobLog]:
        """Every job the logs know of, with what they say happened to it."""
        jobs: dict[str, JobLog] = {}
        for log in list(self.runner_logs):
            proc = self.runner_by_name.get(log.stem)
            proc_alive = proc is not None and proc.poll() is None
            for line in log.read_text().splitlines() if log.exists() else ():
                e = json.loads(line)
                if e["ev"] == "start":
                    jobs[e["run"]] = JobLog(e["run"], "py", e["dest"], e["mode"], e["po"], e["t"], job_id=e["job"])
                    continue
                job = jobs.get(e.get("run", ""))
                if job is None:
                    continue
                if e["ev"] == "commit_start":
                    job.commit_start, job.rows = e["t"], e["rows"]
                elif e["ev"] == "committed":
                    job.fate, job.end = "committed", e["t"]
                elif e["ev"] in ("aborted", "refused", "ignored"):
                    job.fate, job.end = "not_committed", e["t"]
                elif e["ev"] == "unknown":
                    job.fate = "unknown"
            if not proc_alive:
                for job in jobs.values():
                    if job.run.startswith(f"{log.stem}-") and job.fate == "running":
                        job.fate = "killed"
        with self.lock:
            writes = list(self.spark_writes)
            recovered = dict(self.recovered)
        for w in writes:
            job = JobLog(w.run, "spark", w.dest, w.mode, w.po, w.start, rows={"tasks": w.tasks, "rows": w.rows})
            for name, attr in (("job.json", "job_id"), ("commit_start.json", "commit_start")):
                try:
                    doc = json.loads((w.flags / name).read_text())
                except (OSError, ValueError):
                    continue
                setattr(job, attr, doc["jobId"] if attr == "job_id" else int(doc["at"] * 1000))
            job.fate, job.end = w.outcome, w.end
            jobs[w.run] = job
        for job in jobs.values():
            action = recovered.get(job.job_id or "")
            if action and action[0] == "finished" and job.fate in ("killed", "unknown", "running"):
                job.driver_still_running = job.fate == "running"
                job.fate, job.end = "committed", action[1]
        return jobs

    def _checker(self) -> None:
        ended = -1
        last = 0.0
        while not self.stopping.wait(1.0):
            jobs = self.jobs()
            now_ended = sum(1 for j in jobs.values() if j.fate != "running")
            if now_ended == ended and time.monotonic() - last < 15:
                continue
            ended, last = now_ended, time.monotonic()
            self._check_round(jobs)

    def _check_round(self, jobs: dict[str, JobLog]) -> None:
        snap = self.reader.snapshot()
        verdict = check(snap, jobs, final=False, compacting=set(self.compacting) | set(self.clash_compacting))
        self.rounds += 1
        for k, n in verdict.notes.items():
            self.notes[k] = max(self.notes[k], n)
        self._known(verdict.known)
        if verdict.violations:
            # A listing is not atomic: confirm on a fresh one, once no compaction of those destinations runs.
            deadline = time.monotonic() + 120
            while (self.compacting or self.clash_compacting) and time.monotonic() < deadline:
                time.sleep(0.5)
            again = check(self.reader.snapshot(), self.jobs(), final=False,
                          compacting=set(self.compacting) | set(self.clash_compacting))
            for problem in verdict.violations:
                if problem in again.violations and problem not in self.violations:
                    self.violations.append(problem)
                    self.note("violation", where="mid-run", problem=problem)

    def _known(self, found: dict[str, list[str]]) -> None:
        for issue, cases in found.items():
            for case in cases:
                if case not in self.known[issue]:
                    self.known[issue].append(case)
                    self.note("known_issue", issue=issue, case=case)

    # ------------------------------------------------------------ the end
    def _finish(self) -> dict[str, Any]:
        # Drivers have stopped: the last round sees them all ended; then no more faults for the cleanup.
        self._check_round(self.jobs())
        self.proxy.set_faults(None)
        for dest in DESTS:
            self._recover(dest, "0s")
            done = cli(self.endpoint, "uploads", "abort", f"s3://{self.bucket}/{dest}", "--older-than", "0s", "--yes",
                       "--json")
            if done.returncode == 0:
                self.ops["orphan uploads aborted at the end"] += json.loads(done.stdout)["aborted"]
        jobs = self.jobs()
        snap = self.reader.snapshot()
        orders = {dest: read_order(self.client, self.bucket, dest) for dest in DESTS}
        self.notes["fates settled by the commit order"] = settle_fates(jobs, orders)
        verdict = check(snap, jobs, final=True)
        for problem in verdict.violations:
            if problem not in self.violations:
                self.violations.append(problem)
        self._known(verdict.known)
        # The same end state against each destination's commit order, replayed (the trials' model).
        ordered = check_order_model(self.client, self.bucket, DESTS, snap, jobs)
        for problem in ordered.violations:
            if problem not in self.violations:
                self.violations.append(problem)
        self.order_notes = dict(ordered.notes)
        # Leftovers: of a write job they are a violation; of a compaction whose recovery failed because an
        # overwrite deleted its merged file, the known issue.
        writes = {j.job_id for j in jobs.values() if j.job_id}
        stuck = {job for job, (action, _t) in self.recovered.items() if action == "failed" and job not in writes}
        left = {_owner(key) for key, _u in snap.pending} | set(snap.records)
        for job in sorted(left):
            what = (f"job {job}: {sum(1 for k, _u in snap.pending if _owner(k) == job)} uploads pending and "
                    f"{len(snap.records.get(job, ()))} records left after the final recover and cleanup")
            if job in stuck:
                self._known({COMPACTION_RECOVERY_STUCK: [what]})
            else:
                self.violations.append(what)
        for k, n in verdict.notes.items():
            self.notes[k] = n
        if self.violations:
            self._forensics(snap)
        self.proxy_stats = self.proxy.stats()
        self.proxy.stop()
        return self.report(jobs)

    def _forensics(self, snap: Any) -> None:
        """What the objects named by the violations look like, for whoever reads the logs."""
        keys = sorted({k for v in self.violations for k in _KEY.findall(v)})[:40]
        out = {}
        for key in keys:
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=key)
                out[key] = {"lastModified": head["LastModified"].isoformat(), "etag": head["ETag"],
                            "size": head["ContentLength"]}
            except Exception as exc:  # noqa: BLE001 - gone since
                out[key] = {"error": str(exc)}
        (self.dir / "forensics.json").write_text(json.dumps(out, indent=1, sort_keys=True))
        # Each destination's commit order as it ended, and every visible key: with the proxy's trail, enough to
        # replay who wrote and who removed what.
        orders = {dest: read_order(self.client, self.bucket, dest) for dest in DESTS}
        (self.dir / "orders.json").write_text(json.dumps(orders, indent=1, sort_keys=True))
        (self.dir / "visible.json").write_text(json.dumps(sorted({w.obj for where in snap.rows.values()
                                                                  for w in where}), indent=1))

    def report(self, jobs: dict[str, JobLog]) -> dict[str, Any]:
        fates: dict[str, Counter[str]] = defaultdict(Counter)
        modes: Counter[str] = Counter()
        for j in jobs.values():
            fates[j.kind][j.fate] += 1
            modes[f"{j.kind} {j.mode}{'-dynamic' if j.po == 'dynamic' and j.mode == 'overwrite' else ''}"] += 1
        py_files = 0
        for log in self.runner_logs:
            for line in log.read_text().splitlines() if log.exists() else ():
                e = json.loads(line)
                if e["ev"] == "committed":
                    py_files += e["files"]
                elif e["ev"] == "self_kill":
                    self.kills[f"python driver, by itself at {e['point']}"] += 1
        injected = self.proxy_stats["faults"]
        faults: Counter[str] = Counter()
        for kinds in injected["faults"].values():
            faults.update(kinds)
        return {
            "settings": asdict(self.s),
            "seconds": round(time.time() - self.started, 1),
            "jobs": {kind: dict(c) for kind, c in fates.items()},
            "modes": dict(modes),
            "files committed": {"python": py_files, "spark": self.ops["spark files committed"]},
            "requests": self.proxy_stats["totals"]["requests"],
            "faults": dict(faults),
            "latency spikes": {"count": injected["spikes"], "seconds": round(injected["spike_seconds"], 1)},
            "kills": dict(self.kills),
            "operations": dict(self.ops),
            "checker rounds": self.rounds + 1,
            "overwrites beside compactions": self.clashes,
            "order model": self.order_notes,
            "notes": dict(self.notes),
            "known issues": {issue: len(cases) for issue, cases in self.known.items()},
            "known issue cases": {issue: cases[:10] for issue, cases in self.known.items()},
            "violations": list(self.violations),
        }


_KEY = re.compile(r"'((?:data|data1|data10)/[^']+)'")


def _owner(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1]
    return name[11:47] if name.startswith("part-") and len(name) > 47 else None


def _point_name(point: Any) -> str:
    return point if isinstance(point, str) else f"{point[0]}:{point[1]}"


def summary(report: dict[str, Any]) -> str:
    lines = [f"soak: {report['seconds']} s, {report['requests']} requests through the proxy"]
    for key in ("jobs", "modes", "files committed", "faults", "latency spikes", "kills", "operations", "notes",
                "known issues", "overwrites beside compactions", "order model"):
        lines.append(f"  {key}: {json.dumps(report[key], sort_keys=True)}")
    lines.append(f"  checker rounds: {report['checker rounds']}")
    lines.append(f"  violations: {len(report['violations'])}")
    lines += [f"    - {v}" for v in report["violations"][:30]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, help="overrides --minutes")
    parser.add_argument("--runners", type=int, default=2, help="plain-Python job drivers")
    parser.add_argument("--no-spark", action="store_true", help="no cluster, no Spark driver")
    parser.add_argument("--seed", type=int, default=Settings.seed)
    parser.add_argument("--report", type=Path, help="write the report as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) even without violations")
    a = parser.parse_args(argv)
    settings = Settings(seconds=a.seconds if a.seconds else a.minutes * 60, runners=a.runners, spark=not a.no_spark,
                        seed=a.seed)
    from tests.support.backends import raw_s3_client
    from tests.support.servers import start_localstack

    workdir = Path(tempfile.mkdtemp(prefix="mpcommit-soak-"))
    print(f"soak: work directory {workdir}", file=sys.stderr)
    server = start_localstack()
    cluster = None
    try:
        if settings.spark:
            cluster = StandaloneCluster(workdir / "cluster", workers=2, cores=2, memory="1g").start()
        client = raw_s3_client(server.endpoint_url)
        bucket = f"soak-{settings.seed}"
        client.create_bucket(Bucket=bucket)
        soak = Soak(settings, upstream=server.endpoint_url, raw_client=client, bucket=bucket, workdir=workdir / "run",
                    cluster=cluster)
        report = soak.run()
    finally:
        if cluster is not None:
            cluster.stop(keep=True)
        server.stop()
    text = summary(report)
    print(text)
    if a.report:
        a.report.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    if not report["violations"] and not a.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"soak: logs kept in {workdir}", file=sys.stderr)
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
