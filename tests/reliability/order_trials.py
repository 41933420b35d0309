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
import itertools
import json
import os
import random
import signal
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
    role: str  # write | compact | recover | appender
    offset: float  # seconds after the trial's start (or after ``after``)
    mode: str = "append"
    po: str = "static"
    files: list[dict[str, Any]] = field(default_factory=list)
    kill: str | None = None
    #: ``NAME`` (its exit), ``NAME@stopN`` (its N-th pause, or its exit), ``NAME@commit`` (its commit's start).
    after: str | None = None
    older_than: float | None = None
    #: The destination inside the table ("" for the table): a partition's own URI, or a folder refused by name.
    dest: str = ""
    #: Checkpoints where the process SIGSTOPs itself (``point:k:stop``, comma-separated), and for each pause when
    #: the harness continues it: ``{"after": NAME or None, "delay": seconds}`` (after NAME's exit, else after the
    #: pause).
    stop: str | None = None
    resume: list[dict[str, Any]] = field(default_factory=list)
    #: A network of its own, whose fault plan (``plan``, FaultPlan JSON) is put in force at its ``at`` event.
    network: dict[str, Any] | None = None
    #: The refusal it must end with (order_model.REFUSALS), if any.
    refuse: str | None = None
    single_writer: bool = False
    count: int = 0  # an appender's appends
    commit_threads: int = 8

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "mode": self.mode, "po": self.po, "files": self.files,
                "dest": self.dest, "count": self.count, "single_writer": self.single_writer,
                "commit_threads": self.commit_threads}

    @property
    def zombie(self) -> bool:
        """Paused or cut off from the store on purpose: it may lose its job to another process."""
        return bool(self.stop or self.network)


@dataclass
class TrialPlan:
    pairing: str
    seed: int
    seeds: list[Proc]
    procs: list[Proc]
    mutant: str | None = None
    #: OrderSettings for every process of the trial (the pause trials collect the order often).
    order: dict[str, Any] = field(default_factory=lambda: dict(ORDER))
    #: A network of the trial's own for all its processes: a FaultPlan (JSON) in force from the start.
    network: dict[str, Any] | None = None
    #: Watch the order while the trial runs (its collection deletes places the checker needs).
    watch: bool = False

    def describe(self) -> str:
        parts = []
        for p in self.procs:
            what = p.role if p.role != "write" else (p.mode if p.mode == "append" else f"{p.po}-overwrite")
            if p.dest:
                what += f"@{p.dest}"
            when = f"+{p.offset:.2f}s" + (f" after {p.after}" if p.after else "")
            extra = (f" kill@{p.kill}" if p.kill else "") + (f" stop@{p.stop}" if p.stop else "") + \
                (" brownout" if p.network else "") + (f" refuse:{p.refuse}" if p.refuse else "")
            parts.append(f"{p.name}={what}{extra} {when}")
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


def _append(rng: random.Random, name: str, offset: float, **kw: Any) -> Proc:
    return Proc(name, "write", offset, "append", "static", _files(rng, sorted(rng.sample(PARTITIONS, rng.randint(1, 2)))),
                **kw)


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


# ---------------------------------------------------------------- processes that lose their job (issue 36)
#: The pause trials' order: a lease of 3 s, and the collection at every 5th place keeping 10 ended ones, so that
#: the places a paused process's decisions rest on are collected while it is away.
PAUSE_ORDER = {**ORDER, "keep_resolved": 10, "tidy_every": 5}
#: Appends the appender commits while a process is paused: enough for the collection to clear the places
#: after the paused one (10 kept, collected every 5th place).
APPENDS = 12
#: Where a driver pauses (SIGSTOP), by kind: every named commit checkpoint it reaches.
DRIVER_PAUSES = {
    "overwrite": ("commit.after_place:1", "commit.after_journal:1", "commit.after_turn:1", "commit.after_complete:1",
                  "commit.after_replace_listing:1", "commit.before_replace:1", "commit.before_delete_batch:1",
                  "commit.before_success:1"),
    "append": ("commit.after_place:1", "commit.after_journal:1", "commit.after_turn:1", "commit.after_complete:1",
               "commit.before_success:1"),
    "compact": ("commit.after_place:1", "commit.after_journal:1", "commit.after_turn:1", "commit.after_complete:1",
                "commit.before_replace:1", "commit.before_delete_batch:1", "commit.before_success:1"),
}
#: Where the job a paused `recover` finishes dies: after its journal, before its end is recorded.
FINISHED_BY_RECOVER = ("commit.after_journal:1", "commit.after_complete:1", "commit.after_complete:2",
                       "commit.before_delete_batch:1", "commit.before_success:1")
#: Where a `recover` pauses: the checkpoints of a finish (it holds the turn from the first on).
RECOVER_PAUSES = ("commit.after_turn:1", "commit.after_complete:1", "commit.after_replace_listing:1",
                  "commit.before_replace:1", "commit.before_delete_batch:1", "commit.before_success:1")
#: Stops after which the scope an overwrite replaces has been listed: pausing first after the place too lets
#: an append commit between the overwrite's place and its listing (the first scenario of issue 36).
AFTER_LISTING = ("commit.after_replace_listing:1", "commit.before_replace:1", "commit.before_delete_batch:1")


def _hold(rng: random.Random, long_after: str) -> dict[str, Any]:
    """When a paused process goes on: mostly once ``long_after`` ended (a take-over and the collection happened
    meanwhile), else after a pause shorter than the lease or about it."""
    if rng.random() < 0.7:
        return {"after": long_after, "delay": round(rng.uniform(0.0, 0.5), 3)}
    return {"after": None, "delay": round(rng.uniform(0.2, 4.0), 3)}


def _meanwhile(rng: random.Random, after: str) -> list[Proc]:
    """What goes on while a process is paused: a `recover` (a cron's; sometimes one that rolls back idle jobs),
    the appender, and sometimes another overwrite (which waits for the paused job and takes it over)."""
    procs = [Proc("r", "recover", round(rng.uniform(0.0, 1.5), 3), after=after,
                  older_than=rng.choice([None, None, 0.0])),
             Proc("ap", "appender", round(rng.uniform(0.0, 1.0), 3), after=after, count=APPENDS,
                  files=_files(rng, PARTITIONS, (1, 1)))]
    if rng.random() < 0.35:
        procs.append(_overwrite(rng, "o2", round(rng.uniform(0.0, 2.0), 3), after=after))
    return procs


def plan_pause_driver(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    """A driver (an overwrite, an append or a compaction) pauses at a commit checkpoint; meanwhile a `recover`,
    the appender and maybe another overwrite; it goes on, mostly after the appender ended."""
    kind = rng.choices(("overwrite", "append", "compact"), (0.6, 0.2, 0.2))[0]
    point = rng.choice(DRIVER_PAUSES[kind])
    if kind == "overwrite":
        v = _overwrite(rng, "v", 0.0)
    elif kind == "append":
        v = _append(rng, "v", 0.0)
    else:
        v = Proc("v", "compact", 0.0)
    v.commit_threads = rng.choice((1, 8))
    stops = [point]
    if kind == "overwrite" and point in AFTER_LISTING and rng.random() < 0.5:
        stops = ["commit.after_place:1", point]
    v.stop = ",".join(f"{p}:stop" for p in stops)
    last = f"v@stop{len(stops)}"
    procs = [v]
    if len(stops) == 2:  # S commits in V's scope between V's place and its listing
        s = Proc("s", "write", round(rng.uniform(0.0, 0.3), 3), "append", "static",
                 _files(rng, sorted({f["partition"] for f in v.files})), after="v@stop1")
        v.resume = [{"after": "s", "delay": round(rng.uniform(0.0, 0.3), 3)}, _hold(rng, "ap")]
    else:
        s = _append(rng, "s", round(rng.uniform(0.0, WINDOW), 3))
        v.resume = [_hold(rng, "ap")]
    return _seed_jobs(rng, 2), [*procs, s, *_meanwhile(rng, last)]


def plan_pause_recover(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    """An overwrite dies after its journal; a `recover` that finishes it pauses at a checkpoint of the finish;
    meanwhile a second `recover` (which takes the job over after a lease), the appender and maybe another
    overwrite; the paused `recover` goes on, mostly after the appender ended."""
    k = _overwrite(rng, "k", 0.0, kill=FINISHED_BY_RECOVER)
    r1 = Proc("r1", "recover", round(rng.uniform(0.0, 0.3), 3), after="k", stop=f"{rng.choice(RECOVER_PAUSES)}:stop")
    r1.resume = [_hold(rng, "ap")]
    procs = [k, r1, _append(rng, "s", round(rng.uniform(0.0, WINDOW), 3))]
    return _seed_jobs(rng, 2), [*procs, *_meanwhile(rng, "r1@stop1")]


#: The heartbeat key: what a brownout refuses.
HEARTBEAT_KEY = r"/alive\.json$"
#: The driver's finishing turn: taken right after its journal.
FINISHING_TURN = r"^PutObject .*/finishing\.json$"
#: The listings of an overwrite's scope in the trials' table ("t/" or "t/dt=N/"), not of its hidden records.
SCOPE_LISTING = r"^t/(dt=[^/]*/)?$"


def plan_brownout(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    """No pause: an overwrite's heartbeat writes are refused (503) for longer than the lease, from a moment after
    its commit began, while its listing of the scope it replaces is slow -- a few seconds, or long enough for the
    collection to run meanwhile -- (or its completes are); a `recover` takes it for dead meanwhile, the appender
    and maybe another overwrite go on."""
    from tests.support.s3_network import Fault, FaultPlan, MatchRule

    v = _overwrite(rng, "v", 0.0)
    v.commit_threads = rng.choice((1, 8))
    # From a moment after its commit began, or a moment after it took its finishing turn (its journal written:
    # what a `recover` then takes over after a lease; the beat that goes with the turn landed), for longer than
    # the lease.
    trigger = FINISHING_TURN if rng.random() < 0.6 else None
    start = round(rng.uniform(0.3, 1.0) if trigger else rng.uniform(0.3, 1.2), 3)
    end = round(start + rng.uniform(3.5, 8.0), 3)
    rules = [MatchRule(("PutObject",), key=HEARTBEAT_KEY, start=start, end=end, fault=Fault.SLOW_DOWN,
                       trigger=trigger)]
    if rng.random() < 0.7:  # its listing slow: a few seconds, or for about as long as the appender runs
        delay = rng.uniform(3.0, 7.0) if rng.random() < 0.5 else rng.uniform(10.0, 25.0)
        rules.append(MatchRule(("ListObjectsV2",), key=SCOPE_LISTING, start=start, end=end, delay=round(delay, 3),
                               trigger=trigger))
    else:
        rules.append(MatchRule(("CompleteMultipartUpload",), start=start, end=end,
                               delay=round(rng.uniform(0.5, 1.5), 3), trigger=trigger))
    v.network = {"at": "commit", "plan": FaultPlan(matches=tuple(rules)).to_json()}
    meanwhile = _meanwhile(rng, "v@commit")
    meanwhile[0].offset = round(rng.uniform(1.5, 4.0), 3)  # the `recover`: mostly once V's journal is there
    return _seed_jobs(rng, 2), [v, _append(rng, "s", round(rng.uniform(0.0, WINDOW), 3)), *meanwhile]


def plan_no_conditions(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    """A store that ignores If-None-Match and If-Match (the trial's own network takes them out of every request):
    every job, `compact` and `recover` running at once is refused by name and changes nothing -- unless the
    processes state that the table has one writer at a time (S3Options(single_writer=True)); then they run one
    after another, one of them killed in its commit and finished by a `recover`."""
    if rng.random() < 0.7:
        procs = [_overwrite(rng, "o", round(rng.uniform(0.0, WINDOW), 3)),
                 _append(rng, "a", round(rng.uniform(0.0, WINDOW), 3)),
                 Proc("c", "compact", round(rng.uniform(0.0, WINDOW), 3)),
                 Proc("r", "recover", round(rng.uniform(0.0, WINDOW), 3), older_than=0.0)]
        for p in procs:
            p.refuse = "conditional"
        return _seed_jobs(rng, 2), procs
    a1 = _append(rng, "a1", 0.0)
    o = _overwrite(rng, "o", 0.1, after="a1", kill=JOURNALED_KILL_POINTS if rng.random() < 0.5 else ())
    r = Proc("r", "recover", 0.1, after="o", older_than=0.0)
    c = Proc("c", "compact", 0.1, after="r")
    a2 = _append(rng, "a2", 0.1, after="c")
    procs = [a1, o, r, c, a2]
    for p in procs:
        p.single_writer = True
    return _seed_jobs(rng, 2), procs


# ---------------------------------------------------------------- one table, one order (issue 41)
#: Partition values of the depth trials, and how each may be spelled as a path (besides ``{"dt": value}``).
DEPTH_VALUES = {
    "0": ("dt=0",),
    "a=b": ("dt=a=b", "dt=a%3db", "dt=a%3Db"),
    "c d": ("dt=c d", "dt=c%20d"),
    "5%": ("dt=5%25", "dt=5%"),
    "x/y": ("dt=x%2Fy", "dt=x%2fy"),
}
#: Jobs that must be refused by name: a folder of the table that is not a partition (a table inside the
#: table), a partition destination not spelled as Spark spells it, partition paths that are not col=value.
REFUSED = (("dest", "sub"), ("dest", "dt=0/sub"), ("dest", "dt=a=b"), ("partition", "sub"),
           ("partition", "dt=x/y"))


def _folder(value: str) -> str:
    return order_model.hive_folder([("dt", value)])


def _depth_files(rng: random.Random, values: list[str], rows: tuple[int, int] = (1, 2)) -> list[dict[str, Any]]:
    """One file per value, its partition given as a path (one of the value's spellings) or a mapping."""
    names = list(DEPTH_VALUES)
    out = []
    for i, value in enumerate(values):
        spelled: Any = rng.choice([*DEPTH_VALUES[value], {"dt": value}])
        out.append({"task": i, "partition": spelled, "folder": _folder(value), "token": f"p{names.index(value)}",
                    "rows": rng.randint(*rows)})
    return out


def _at_partition(rng: random.Random, name: str, offset: float, mode: str, value: str, **kw: Any) -> Proc:
    """A job given a partition's own URI (written as Spark spells it), writing straight into it."""
    folder = _folder(value)
    files = [{"task": 0, "partition": "", "folder": folder, "token": f"p{list(DEPTH_VALUES).index(value)}",
              "rows": rng.randint(1, 2)}]
    return Proc(name, "write", offset, mode, "static", files, dest=folder, **kw)


def plan_depths(rng: random.Random) -> tuple[list[Proc], list[Proc]]:
    """Destinations at several depths of one table: the table, its partitions by their own URIs, a folder that
    is a table inside it (refused by name); partition values holding '=', '/', '%' and blanks given as paths and
    as values; a static overwrite of the table writing one of the partitions it replaces, beside `compact`."""
    values = list(DEPTH_VALUES)
    seeds = [Proc(f"s{i}", "write", 0.0, "append", "static", _depth_files(rng, sorted(rng.sample(values, 3))))
             for i in range(3)]
    seeds.append(_at_partition(rng, "s3", 0.0, "append", rng.choice(values)))
    w = lambda: round(rng.uniform(0.0, WINDOW), 3)  # noqa: E731
    procs = [
        # the daily static overwrite: it writes one partition and replaces them all
        Proc("so", "write", w(), "overwrite", "static", _depth_files(rng, [rng.choice(values)])),
        Proc("c", "compact", w()),
        _at_partition(rng, "pa", w(), "append", rng.choice(values)),
        _at_partition(rng, "po", w(), "overwrite", rng.choice(values)),
        Proc("d", "write", w(), "overwrite", "dynamic", _depth_files(rng, sorted(rng.sample(values, rng.randint(1, 2))))),
        _append_depth(rng, "a", w()),
    ]
    how, what = rng.choice(REFUSED)
    if how == "dest":
        bad = Proc("bad", "write", w(), "append", "static",
                   [{"task": 0, "partition": "", "folder": what, "token": "px", "rows": 1}], dest=what, refuse="usage")
    else:
        bad = Proc("bad", "write", w(), "append", "static",
                   [{"task": 0, "partition": what, "folder": what, "token": "px", "rows": 1}], refuse="usage")
    procs.append(bad)
    if rng.random() < 0.4:  # one of the overwrites dies in its commit, and a `recover` finishes or rolls it back
        victim = rng.choice([p for p in procs if p.mode == "overwrite"])
        victim.kill = _kill_point(rng, KILL_POINTS, len(victim.files))
        procs.append(Proc("r", "recover", round(rng.uniform(0.0, 1.0), 3), after=victim.name))
    return seeds, procs


def _append_depth(rng: random.Random, name: str, offset: float) -> Proc:
    return Proc(name, "write", offset, "append", "static",
                _depth_files(rng, sorted(rng.sample(list(DEPTH_VALUES), rng.randint(1, 2)))))


PAIRINGS = {
    "overwrite-overwrite": plan_overwrite_overwrite,
    "overwrite-append": plan_overwrite_append,
    "overwrite-compact": plan_overwrite_compact,
    "oncall": plan_oncall,
    "recoveries": plan_recoveries,
    "mixed": plan_mixed,
    "pause-driver": plan_pause_driver,
    "pause-recover": plan_pause_recover,
    "brownout": plan_brownout,
    "no-conditions": plan_no_conditions,
    "depths": plan_depths,
}
#: The pairings of issues 36 and 41: they watch the order (it is collected under them).
NEW_PAIRINGS = ("pause-driver", "pause-recover", "brownout", "no-conditions", "depths")
#: Their OrderSettings.
PAIRING_ORDER = {"pause-driver": PAUSE_ORDER, "pause-recover": PAUSE_ORDER, "brownout": PAUSE_ORDER}


def plan_trial(pairing: str, seed: int, mutant: str | None = None) -> TrialPlan:
    rng = random.Random(f"{pairing}/{seed}")
    seeds, procs = PAIRINGS[pairing](rng)
    plan = TrialPlan(pairing, seed, seeds, procs, mutant, order=dict(PAIRING_ORDER.get(pairing, ORDER)),
                     watch=pairing in NEW_PAIRINGS)
    if pairing == "no-conditions":
        from tests.support.s3_network import FaultPlan, MatchRule

        plan.network = FaultPlan(matches=(MatchRule(strip_conditions=True),)).to_json()
    return plan


def plan_zombie_overwrite(seed: int = 1, mutant: str | None = None) -> TrialPlan:
    """Issue 36's first scenario as a trial, not drawn: overwrite V pauses after its place; append S commits in
    its scope; V goes on, lists the scope (S's file in it) and pauses again; a `recover` takes V over after a
    lease and finishes it; then the appender commits until the collection has cleared S's place; V goes on. With the
    fence V deletes nothing; without it (mutant ``no_fence``) V takes S for older and deletes S's rows."""
    rng = random.Random(f"zombie/{seed}")
    v = Proc("v", "write", 0.0, "overwrite", "static", _files(rng, ["dt=0", "dt=1"]), commit_threads=1,
             stop="commit.after_place:1:stop,commit.after_replace_listing:1:stop",
             resume=[{"after": "s", "delay": 0.1}, {"after": "ap", "delay": 0.2}])
    s = Proc("s", "write", 0.0, "append", "static", _files(rng, ["dt=0"]), after="v@stop1")
    r = Proc("r", "recover", 0.2, after="v@stop2")
    # The appender starts once `recover` has ended V's job: the collection cannot pass V's place before that, and
    # appends that all land while `recover` waits out V's lease leave S's place uncollected (the mutant then harms
    # nothing and goes uncaught -- it did, in full CI runs and in 2 of 3 rounds run alone).
    ap = Proc("ap", "appender", 0.2, after="r", count=APPENDS + 2, files=_files(rng, ["dt=2"], (1, 1)))
    return TrialPlan("pause-driver", seed, _seed_jobs(rng, 2), [v, s, r, ap], mutant, order=dict(PAUSE_ORDER),
                     watch=True)


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
    """One process of a trial: its events read on a thread, its start time sent when the harness says; its
    pauses watched and ended when its plan says."""

    def __init__(self, proc: Proc, spec: dict[str, Any], log: Path):
        ctx = fork_server()
        self.proc = proc
        self.stderr = log
        self.events: list[dict[str, Any]] = []
        self.exit_time: float | None = None
        self.ready = threading.Event()
        self.exited = threading.Event()
        self.committing = threading.Event()  # its commit began (or it ended)
        self.on_commit: list[Any] = []  # called once, on its ``commit`` event
        self.stops: list[float] = []  # when it paused
        self.resumes: list[float] = []  # when it was continued
        self._stopped: list[threading.Event] = []
        self._stopped_lock = threading.Lock()
        faults = ([f"{proc.kill}:kill"] if proc.kill else []) + ([proc.stop] if proc.stop else [])
        events_in, events_out = ctx.Pipe(duplex=False)
        go_in, go_out = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=trial_job.child, args=(spec, ",".join(faults) or None,
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
            elif event.get("event") == "commit" and not self.committing.is_set():
                self.committing.set()
                for call in self.on_commit:
                    threading.Thread(target=call, daemon=True).start()
        from multiprocessing.connection import wait

        wait([self.process.sentinel])
        with _EXIT_STATUS_LOCK:
            self.process.join()
        self.exit_time = time.time()
        self._events.close()
        self.committing.set()
        self.exited.set()

    def stopped(self, n: int) -> threading.Event:
        """Set at the process's ``n``-th pause (1-based), or when it ended without it."""
        with self._stopped_lock:
            while len(self._stopped) < n:
                self._stopped.append(threading.Event())
                if self.exited.is_set():
                    self._stopped[-1].set()
            return self._stopped[n - 1]

    def watch_pauses(self, running: dict[str, "Running"]) -> None:
        """Notice each pause (the process SIGSTOPped itself at a checkpoint) and continue it as the plan says:
        after another process's exit, and a delay. Runs on a thread of its own until the process ends."""
        n = 0
        pid = self.process.pid
        while not self.exited.is_set():
            if _state(pid) != "T":
                time.sleep(0.02)
                continue
            n += 1
            self.stops.append(time.time())
            self.stopped(n).set()
            how = self.proc.resume[n - 1] if n <= len(self.proc.resume) else {"after": None, "delay": 0.0}
            if how.get("after"):
                running[how["after"]].exited.wait(PROCESS_TIMEOUT)
            time.sleep(how.get("delay", 0.0))
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                break
            self.resumes.append(time.time())
            while not self.exited.is_set() and _state(pid) == "T":
                time.sleep(0.01)
        with self._stopped_lock:
            for event in self._stopped:
                event.set()

    def released(self, after: str, running: dict[str, "Running"]) -> None:
        """Wait for what ``after`` names: ``NAME`` (its exit), ``NAME@stopN``, ``NAME@commit``."""
        name, _, what = after.partition("@")
        other = running[name]
        if not what:
            other.exited.wait(PROCESS_TIMEOUT)
        elif what == "commit":
            other.committing.wait(PROCESS_TIMEOUT)
        else:
            other.stopped(int(what[len("stop"):])).wait(PROCESS_TIMEOUT)

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()
        try:
            os.kill(self.process.pid, signal.SIGCONT)
        except (ProcessLookupError, TypeError):
            pass

    def first(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == kind), None)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]

    def go(self, at: float) -> None:
        try:
            self._go.send(at)
        except (BrokenPipeError, OSError):
            pass
        finally:
            self._go.close()


def _state(pid: int | None) -> str:
    """A process's state letter from /proc (T: stopped); "" once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


class OrderWatcher:
    """Polls a trial's commit order while it runs (order_model.OrderWatch), on a thread of its own."""

    def __init__(self, client: Any, bucket: str, every: float = 0.5):
        self.client, self.bucket, self.every = client, bucket, every
        self.watch = order_model.OrderWatch()
        self.errors = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.poll()
            if self._stop.wait(self.every):
                return

    def poll(self) -> None:
        try:
            self.watch.see(order_model.read_order(self.client, self.bucket, TABLE), time.time())
            self.watch.see_journals(order_model.read_journals(self.client, self.bucket, TABLE, self.watch.journals))
        except Exception:  # noqa: BLE001 - a listing that raced a collection: the next poll sees it
            self.errors += 1

    def start(self) -> "OrderWatcher":
        self.thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self.thread.join(30)
        self.poll()
        return {**self.watch.to_json(), "errors": self.errors}


class Harness:
    """Runs trials against one server, through one S3-like network proxy."""

    def __init__(self, server_url: str, network_url: str, client: Any, *, workdir: Path, server_name: str):
        self.server_url = server_url
        self.network_url = network_url
        self.client = client
        self.workdir = workdir
        self.server_name = server_name
        workdir.mkdir(parents=True, exist_ok=True)

    def _seed(self, bucket: str, seeds: list[Proc], order: dict[str, Any]) -> dict[str, dict[str, Any]]:
        from mpcommit.store.s3 import store_for
        from tests.reliability.trial_job import options_for

        store = store_for(options_for(self.server_url))
        out = {}
        for i, s in enumerate(seeds):
            spec = {**s.spec(), "bucket": bucket, "table": TABLE, "order": order}
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
        networks: list[Any] = []
        try:
            return self._run(plan, bucket, networks, keep_state, t_begin, load_before)
        finally:
            for net in networks:
                net.stop()

    def _network(self, networks: list[Any], plan: dict[str, Any] | None = None) -> Any:
        """A network of its own in front of the server (the S3-like one), with ``plan`` in force."""
        from tests.support.s3_network import S3_LIKE, FaultPlan, S3Network

        net = S3Network(self.server_url, S3_LIKE, faults=FaultPlan.from_json(plan) if plan else None,
                        lifetime=PROCESS_TIMEOUT * 3)
        networks.append(net)
        return net.start()

    def _run(self, plan: TrialPlan, bucket: str, networks: list[Any], keep_state: bool, t_begin: float,
             load_before: float) -> dict[str, Any]:
        jobs = self._seed(bucket, plan.seeds, plan.order)
        trial_dir = self.workdir / bucket
        trial_dir.mkdir(parents=True, exist_ok=True)
        endpoint = self._network(networks, plan.network).endpoint_url if plan.network else self.network_url
        watcher = OrderWatcher(self.client, bucket).start() if plan.watch else None
        running: dict[str, Running] = {}
        for p in plan.procs:
            own = self._network(networks) if p.network else None
            # The appender only makes the order move on (and the collection run): straight to the server.
            direct = p.role == "appender" and not plan.network
            spec = {**p.spec(), "bucket": bucket, "table": TABLE, "order": plan.order, "older_than": p.older_than,
                    "mutant": plan.mutant,
                    "endpoint": own.endpoint_url if own else self.server_url if direct else endpoint}
            running[p.name] = Running(p, spec, trial_dir / f"{p.name}.log")
            if own is not None:
                from tests.support.s3_network import FaultPlan

                brownout = FaultPlan.from_json(p.network["plan"])
                running[p.name].on_commit.append(lambda own=own, brownout=brownout: own.set_faults(brownout))
        for r in running.values():
            if not r.ready.wait(60):
                break
        pausers = [threading.Thread(target=r.watch_pauses, args=(running,), daemon=True)
                   for r in running.values() if r.proc.stop]
        for t in pausers:
            t.start()
        t0 = time.time() + 0.05
        waiters = []
        for r in running.values():
            if r.proc.after is None:
                r.go(t0 + r.proc.offset)
            else:
                def later(r: Running = r) -> None:
                    r.released(r.proc.after, running)  # type: ignore[arg-type]
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
        for t in waiters + pausers:
            t.join(5)
        t_race = time.time() - t0
        # Every process has ended: what records are left (a process that lost its job may have written some
        # after its job ended), then one recover finishes or rolls back what the killed ones left.
        before = self._records(bucket) if plan.watch else None
        final = self._final_recover(bucket, plan.order)
        watch = watcher.stop() if watcher is not None else None
        state = order_model.read_end_state(self.client, bucket, TABLE)
        for name, r in running.items():
            end = r.first("end")
            created = r.first("created")
            job_id = (created or {}).get("job_id") or (end or {}).get("job_id")
            killed = r.returncode == -9 and name not in hung
            jobs[name] = {**r.proc.spec(), "job_id": job_id, "kill": r.proc.kill, "killed": killed,
                          "hung": name in hung, "returncode": r.returncode, "zombie": r.proc.zombie,
                          "refuse": r.proc.refuse, "abort_failed": r.first("abort_failed") is not None,
                          "report": {k: v for k, v in end.items() if k not in ("event", "t", "traceback")} if end else None,
                          "recover_actions": (end or {}).get("actions")}
            for ev in r.all("appended"):  # each append of the appender is a job of its own
                one = {k: v for k, v in ev.items() if k not in ("event", "t", "i", "name")}
                files = [{**r.proc.files[ev["i"] % len(r.proc.files)], "task": 0}]
                jobs[ev["name"]] = {"role": "write", "name": ev["name"], "mode": "append", "po": "static",
                                    "dest": "", "files": files, "job_id": ev.get("job_id"), "killed": False,
                                    "hung": False, "zombie": False, "refuse": r.proc.refuse, "report": one}
        jobs["final-recover"] = {"role": "final-recover", "recover_actions": final}
        verdict = order_model.check(state, jobs, watch=watch, before=before)
        record = self._record(plan, bucket, running, jobs, state, verdict, t0, t_race, t_begin, load_before)
        if watch is not None:
            record["order_seen"] = {"places": len(watch["entries"]), "collected_through": max(
                (int(k) for k in watch["checkpoints"]), default=0), "polls": watch["polls"]}
        if keep_state:
            record["end_state"] = {"jobs": jobs, "state": state, "watch": watch, "before": before}
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
                                                                  "state": state, "watch": watch, "before": before,
                                                                  "verdict": verdict.violations},
                                                                 indent=1, default=str))
            for name, r in running.items():
                (trial_dir / f"{name}.events.json").write_text(json.dumps(r.events, indent=1))
        return record

    def _records(self, bucket: str) -> list[str]:
        from tests.support.checks import list_objects

        return [o["Key"] for o in list_objects(self.client, bucket, f"{TABLE}/") if "_temporary/mpcommit/" in o["Key"]]

    def _final_recover(self, bucket: str, order: dict[str, Any]) -> list[dict[str, Any]]:
        from mpcommit.options import OrderSettings
        from mpcommit.protocol.recovery import recover
        from tests.reliability.trial_job import options_for

        actions = recover(f"s3://{bucket}/{TABLE}", s3=options_for(self.server_url), older_than=0,
                          order=OrderSettings(**order))
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
                if end.get("finished_elsewhere"):
                    outcome += " (finished elsewhere)"
                if r.proc.role == "appender":
                    appended = r.all("appended")
                    outcome += f" ({sum(1 for e in appended if e.get('ok'))} of {len(appended)} appended)"
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
            if r.proc.stop:
                procs[name]["stop"] = r.proc.stop
                procs[name]["paused"] = [[round(a - t0, 3), round(b - t0, 3) if b else None]
                                         for a, b in itertools.zip_longest(r.stops, r.resumes)]
            if r.proc.network:
                procs[name]["brownout"] = [m for m in r.proc.network["plan"]["matches"]]
            if r.proc.refuse:
                procs[name]["refuse"] = r.proc.refuse
            if r.proc.dest:
                procs[name]["dest"] = r.proc.dest
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
            "notes": {k: v for k, v in verdict.notes.items() if k in ("outcomes unknown", "leftover ends",
                                                                     "serial orders", "collected through",
                                                                     "stray ends", "outcomes told",
                                                                     "outcomes chosen")},
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

def serve_moto(as_is: bool = False) -> None:
    """moto's S3 server in this process, for a harness in another (``--moto-process``): the port on stdout, then
    serve until stdin closes (the harness has gone). Its conditional writes are made atomic here, as
    :func:`atomic_conditional_writes_on_moto` does in the harness's own process."""
    from tests.support.servers import start_moto

    with contextlib.ExitStack() as stack:
        if not as_is:
            stack.enter_context(atomic_conditional_writes_on_moto())
        server = start_moto(in_process=True)
        print(server.endpoint_url, flush=True)
        sys.stdin.read()
        server.stop()


class _MotoProcess:
    """moto in a process of its own (:func:`serve_moto`): the trials' requests no longer share the harness's
    interpreter with its threads (the harness and moto each get a share of a busy machine's CPU)."""

    def __init__(self, as_is: bool):
        import subprocess

        args = [sys.executable, "-c", "import sys; from tests.reliability.order_trials import serve_moto; "
                f"serve_moto({as_is!r})"]
        self.proc = subprocess.Popen(args, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.endpoint_url = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not self.endpoint_url.startswith("http"):
            raise RuntimeError(f"moto did not start: {self.endpoint_url!r}")

    def stop(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(30)
        except Exception:  # noqa: BLE001
            self.proc.kill()


class Servers:
    """The server (moto in this process or one of its own, LocalStack, or one of the Go servers
    tests/support/servers.py builds) and the S3-like network in front of it."""

    def __init__(self, name: str, *, moto_as_is: bool = False, moto_process: bool = False):
        self.name = name
        self.moto_as_is = moto_as_is
        self.moto_process = moto_process
        self.server: Any = None
        self.network: Any = None
        self._atomic: Any = None

    def __enter__(self) -> "Servers":
        from tests.support.s3_network import S3_LIKE, S3Network
        from tests.support.servers import start_go_server, start_localstack, start_moto

        if self.name == "moto" and self.moto_process:
            self.server = _MotoProcess(self.moto_as_is)
            self.network = S3Network(self.server.endpoint_url, S3_LIKE).start()
            return self
        if self.name == "moto" and not self.moto_as_is:
            self._atomic = atomic_conditional_writes_on_moto()
            self._atomic.__enter__()
        self.server = (start_moto(in_process=True) if self.name == "moto" else start_localstack() if self.name == "localstack"
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
    parser.add_argument("--mutant", choices=("no_replace", "no_wait", "no_conflict", "no_fence"), help="break the protocol")
    parser.add_argument("--stop-after", type=float, help="stop starting trials after this many seconds")
    parser.add_argument("--parallel", type=int, default=1, help="trials at once (each on its own bucket)")
    parser.add_argument("--replace", action="store_true", help="empty --out first")
    parser.add_argument("--moto-as-is", action="store_true",
                        help="leave moto's conditional writes as they are (not atomic: see atomic_conditional_writes_on_moto)")
    parser.add_argument("--moto-process", action="store_true",
                        help="run moto in a process of its own rather than in the harness's")
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
                "moto_conditional_writes": "as is" if a.moto_as_is else "atomic",
                "moto": "own process" if a.moto_process else "harness's process"} if a.server == "moto" else {
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

    with Servers(a.server, moto_as_is=a.moto_as_is, moto_process=a.moto_process) as servers:
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
