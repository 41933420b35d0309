"""The order trials' checker: a table's end state against the jobs that ran on it (SPEC.md, invariant I9).

It imports nothing from mpcommit. It reads the bucket with a raw boto3 client (:func:`read_end_state`) -- every
visible row, the commit order's records as JSON, pending uploads, job records, ``_SUCCESS`` -- into a plain,
JSON-serializable end state, and :func:`check` judges that against what the trial's processes said:

1. **The order's model, exactly.** The jobs whose place in the order ended ``committed``, in position order,
   applied to an empty table: an append adds its rows, a static overwrite replaces the table with its rows, a
   dynamic overwrite replaces the partitions it wrote, a compaction changes no row. The visible rows must equal
   that multiset: no row lost, shown twice or brought back; every row in the partition it names.
2. **Some serial order of the jobs that reported success** (I9 as the issue states it; weaker than 1, kept
   beside it): some permutation of the write jobs that reported success -- plus killed ones that a recovery
   committed -- applied after the seed jobs gives the visible rows.
3. **Reports against the order.** A job that reported success is committed in the order at the position it
   reported; a job that reported failure left nothing: no place or a rolled-back one, no file carrying its id,
   no row. A failure is a named conflict or refusal (:data:`ALLOWED_FAILURES`), never a crash of the protocol; a
   `recover` never reports ``failed``. A process that neither ended nor was killed on purpose hung.
4. **Nothing left over.** No pending upload, no job record, no open place, and ``_SUCCESS`` names the job at
   the highest committed place.
5. **A process that lost its job did nothing more (I10).** The order as a watcher saw it while the trial ran
   (:func:`read_order` every few tenths of a second: the order's collection deletes ended places, so the end
   state alone no longer shows every committed job) never changes a place's job or an end's outcome; a place
   that disappeared is covered by a checkpoint (``collected-<n>``, kind ``mpcommit.OrderCheckpoint``) and no end
   was written for a place after a checkpoint covered it; before the final ``recover``, a job whose place ended
   and none of whose processes was killed has no record left (a heartbeat or a finishing turn written back by a
   process that lost its job). A paused or cut-off process may fail only by name: finished elsewhere,
   :data:`ZOMBIE_FAILURES`.

Places collected before their end was seen take their outcome from the jobs' own reports (a success, a
``finished`` action of a ``recover``, a rollback); one nobody can tell is tried both ways.

Partitions: a file's rows sit in the folder the plan names (``folder``, relative to the table), spelled as
Spark's writer spells a partition (:func:`hive_folder`, written here apart from mpcommit's own escaping), whatever
spelling the job was given; a job's destination may be a partition's own URI (``dest``).

The end state is kept with each failing trial (and can be recorded), so a verdict can be replayed from it.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.support.checks import is_hidden, list_objects, pending_upload_entries, read_object

#: Failures a job may report: the exception class, and the roles it may end.
ALLOWED_FAILURES: dict[str, tuple[str, ...]] = {
    "CommitConflictError": ("compact",),
    "ConcurrentJobsRefusedError": ("write", "compact"),
    "JobRolledBackError": ("write", "compact"),
}
#: Failures a process that was paused or cut off from the store may report besides: it lost its job to another
#: process, which decides the outcome (JobTakenOverError), or it could not tell, the store refusing even the beat
#: that would have told it (CommitStateUnknownError, whose cause the trial's record keeps).
ZOMBIE_FAILURES = ("JobTakenOverError", "CommitStateUnknownError")
#: Refusals a process planned to be refused must report (``refuse`` in its plan): a destination inside another
#: table or a partition not spelled as col=value folders (UsageError and its URI form), and a store without
#: conditional writes.
REFUSALS = {"usage": ("UsageError", "InvalidUriError"), "conditional": ("ConditionalWritesMissingError",)}
#: What a `recover` that lost its job says of it (a JobTakenOverError caught per job), and one refused on a store
#: without conditional writes.
RECOVER_LOST = "stopped finishing it"
RECOVER_NO_CONDITIONS = "single_writer=True"

_HIVE_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x01, 0x20)}


def hive_value(value: str | None) -> str:
    """A partition value as Spark's writer (Hive's escapePathName) spells it in a folder name."""
    if value is None or value == "":
        return "__HIVE_DEFAULT_PARTITION__"
    return "".join(f"%{ord(ch):02X}" if ch in _HIVE_ESCAPED else ch for ch in value)


def hive_folder(pairs: Iterable[tuple[str, str | None]]) -> str:
    """``col=value/...`` for (column, value) pairs, each escaped as Spark's writer escapes it."""
    return "/".join(f"{hive_value(c)}={hive_value(v)}" for c, v in pairs)
ORDER_FOLDER = "_mpcommit/order/"
POSITION_DIGITS = 20
CHECKPOINT_PREFIX = "collected-"
CHECKPOINT_KIND = "mpcommit.OrderCheckpoint"

Rows = Counter  # Counter[str]: row line -> how often it is visible


# ---------------------------------------------------------------- reading the bucket
def read_end_state(client: Any, bucket: str, table: str) -> dict[str, Any]:
    """Everything the checker needs from the bucket, as plain data."""
    root = f"{table}/"
    rows: list[list[str]] = []
    files: list[str] = []
    records: list[str] = []
    entries: dict[int, dict[str, Any]] = {}
    outcomes: dict[int, dict[str, Any]] = {}
    checkpoints: dict[int, dict[str, Any]] = {}
    success: dict[str, Any] | None = None
    successes: dict[str, dict[str, Any]] = {}
    for obj in list_objects(client, bucket, root):
        key = obj["Key"]
        rel = key[len(root):]
        if rel.startswith(ORDER_FOLDER):
            _read_order_key(client, bucket, key, rel[len(ORDER_FOLDER):], entries, outcomes, checkpoints)
            continue
        if rel.startswith("_temporary/mpcommit/") or "/_temporary/mpcommit/" in rel:
            records.append(key)
            continue
        if rel == "_SUCCESS" or rel.endswith("/_SUCCESS"):
            doc = json.loads(read_object(client, bucket, key))
            where = rel[: -len("_SUCCESS")].rstrip("/")
            successes[where] = {"jobId": doc.get("jobId"), "position": doc.get("position")}
            if rel == "_SUCCESS":
                success = doc
            continue
        if is_hidden(rel):
            continue
        files.append(key)
        directory = rel.rsplit("/", 1)[0] if "/" in rel else ""
        for line in read_object(client, bucket, key).decode().splitlines():
            rows.append([directory, line])
    order = []
    for position in sorted(entries):
        e = entries[position]
        o = outcomes.get(position)
        order.append({"position": position, **_entry_doc(e),
                      "outcome": o.get("outcome") if o else None, "reason": (o or {}).get("reason", ""),
                      "by": (o or {}).get("by", ""), "time": (o or {}).get("time")})
    for position in sorted(set(outcomes) - set(entries)):
        order.append({"position": position, "jobId": outcomes[position].get("jobId"), "purpose": None,
                      "outcome": outcomes[position].get("outcome"), "entry_missing": True})
    pending = [e["Key"] for e in pending_upload_entries(client, bucket, root)]
    return {"rows": sorted(rows), "files": sorted(files), "order": order, "pending": sorted(pending),
            "records": sorted(records),
            "checkpoints": {str(t): {"time": c.get("time"), "kind": c.get("kind")} for t, c in sorted(checkpoints.items())},
            "success": {"jobId": success.get("jobId"), "position": success.get("position")} if success else None,
            "successes": successes}


def _read_order_key(client: Any, bucket: str, key: str, name: str, entries: dict[int, dict[str, Any]],
                    outcomes: dict[int, dict[str, Any]], checkpoints: dict[int, dict[str, Any]]) -> None:
    stem, done = (name[:-5], True) if name.endswith(".done") else (name, False)
    if len(stem) == POSITION_DIGITS and stem.isascii() and stem.isdigit():
        try:
            doc = json.loads(read_object(client, bucket, key))
        except Exception:  # noqa: BLE001 - collected between the listing and the read
            return
        (outcomes if done else entries)[int(stem)] = doc
    elif name.startswith(CHECKPOINT_PREFIX) and name[len(CHECKPOINT_PREFIX):].isascii() \
            and name[len(CHECKPOINT_PREFIX):].isdigit():
        try:
            doc = json.loads(read_object(client, bucket, key))
        except Exception:  # noqa: BLE001 - replaced by a newer one meanwhile
            return
        checkpoints[int(name[len(CHECKPOINT_PREFIX):])] = doc


def read_order(client: Any, bucket: str, table: str) -> dict[str, dict[int, dict[str, Any]]]:
    """The commit order's records as they are now: entries, ends and checkpoints by position."""
    root = f"{table}/{ORDER_FOLDER}"
    entries: dict[int, dict[str, Any]] = {}
    outcomes: dict[int, dict[str, Any]] = {}
    checkpoints: dict[int, dict[str, Any]] = {}
    for obj in list_objects(client, bucket, root):
        _read_order_key(client, bucket, obj["Key"], obj["Key"][len(root):], entries, outcomes, checkpoints)
    return {"entries": entries, "ends": outcomes, "checkpoints": checkpoints}


JOURNAL_KINDS = {"mpcommit.CommitJournal": "commit", "mpcommit.JobRollback": "rollback"}


def read_journals(client: Any, bucket: str, table: str, known: Mapping[str, str]) -> dict[str, str]:
    """What the journal keys (``.../_temporary/mpcommit/JOB/journal.json``, anywhere in the table) of jobs not in
    ``known`` hold now: job id -> "commit" (a commit journal: the job can only end committed) or "rollback" (a
    rollback's claim: it can only end rolled back)."""
    found: dict[str, str] = {}
    for obj in list_objects(client, bucket, f"{table}/"):
        key = obj["Key"]
        if not key.endswith("/journal.json") or "_temporary/mpcommit/" not in key:
            continue
        job_id = key.rsplit("/", 2)[-2]
        if job_id in known or job_id in found:
            continue
        try:
            doc = json.loads(read_object(client, bucket, key))
        except Exception:  # noqa: BLE001 - removed between the listing and the read
            continue
        kind = JOURNAL_KINDS.get(doc.get("kind", "") if isinstance(doc, dict) else "")
        if kind is not None:
            found[job_id] = kind
    return found


class OrderWatch:
    """Everything the order showed over a trial, polled (:func:`read_order`): the first time each place, end and
    checkpoint was seen, anything that changed under a name already seen, and ends written for a place that a
    checkpoint already covered."""

    def __init__(self) -> None:
        self.entries: dict[int, dict[str, Any]] = {}
        self.ends: dict[int, dict[str, Any]] = {}
        self.checkpoints: dict[int, int] = {}  # through -> its time (ms)
        self.gone: dict[int, float] = {}  # position -> when its entry was first missed
        self.changed: list[str] = []
        self.late_ends: list[dict[str, Any]] = []
        self.journals: dict[str, str] = {}  # job id -> "commit" | "rollback", as first seen at its journal key
        self.polls = 0

    def see_journals(self, journals: Mapping[str, str]) -> None:
        for job_id, kind in journals.items():
            self.journals.setdefault(job_id, kind)

    def see(self, order: Mapping[str, Mapping[int, Mapping[str, Any]]], now: float) -> None:
        self.polls += 1
        covered = max(self.checkpoints, default=0)
        for through, doc in order["checkpoints"].items():
            if doc.get("kind") != CHECKPOINT_KIND or doc.get("through") != through:
                self.changed.append(f"checkpoint collected-{through} is not an order checkpoint: {str(doc)[:200]}")
            self.checkpoints.setdefault(through, int(doc.get("time") or 0))
        for position, doc in order["entries"].items():
            known = self.entries.get(position)
            if known is None:
                self.entries[position] = _entry_doc(doc)
            elif known["jobId"] != doc.get("jobId"):
                self.changed.append(f"place {position} held job {known['jobId']}, then job {doc.get('jobId')}")
        for position, doc in order["ends"].items():
            known = self.ends.get(position)
            late = {"position": position, "outcome": doc.get("outcome"), "by": doc.get("by", ""),
                    "writer": doc.get("writer")}
            if known is None:
                self.ends[position] = {"outcome": doc.get("outcome"), "jobId": doc.get("jobId"),
                                       "time": doc.get("time"), "by": doc.get("by", ""), "writer": doc.get("writer")}
                if position <= covered and position not in order["entries"]:
                    self.late_ends.append(late)  # first seen after a checkpoint covered its place
            elif known["outcome"] != doc.get("outcome"):
                self.changed.append(f"the end of place {position} was {known['outcome']} (writer "
                                    f"{known['writer']}), then {doc.get('outcome')} (writer {doc.get('writer')})")
            elif known["writer"] != doc.get("writer") and late not in self.late_ends:
                self.late_ends.append(late)  # deleted by a collection, then written again
        for position in self.entries:
            if position not in order["entries"] and position not in self.gone:
                self.gone[position] = now

    def to_json(self) -> dict[str, Any]:
        return {"entries": {str(k): v for k, v in sorted(self.entries.items())},
                "ends": {str(k): v for k, v in sorted(self.ends.items())},
                "checkpoints": {str(k): v for k, v in sorted(self.checkpoints.items())},
                "gone": {str(k): v for k, v in sorted(self.gone.items())}, "changed": self.changed,
                "late_ends": self.late_ends, "journals": self.journals, "polls": self.polls}


def _entry_doc(e: Mapping[str, Any]) -> dict[str, Any]:
    return {"jobId": e.get("jobId"), "purpose": e.get("purpose"), "mode": e.get("mode"),
            "partitionOverwrite": e.get("partitionOverwrite"), "destination": e.get("destination", ""),
            "touches": e.get("touches"), "replaces": e.get("replaces")}


# ---------------------------------------------------------------- the model
@dataclass(frozen=True)
class JobPlan:
    """A write job as planned: its name, mode, destination (a folder of the table, "" for the table itself) and
    the rows it writes per folder (relative to the table)."""

    name: str
    mode: str  # append | overwrite
    po: str  # static | dynamic
    rows: Mapping[str, tuple[str, ...]]  # folder -> rows
    dest: str = ""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "JobPlan":
        dest = doc.get("dest") or ""
        rows: dict[str, list[str]] = {}
        for f in doc["files"]:
            folder = f.get("folder")
            if folder is None:
                folder = "/".join(p for p in (dest, f["partition"]) if p)
            token = f.get("token", f["partition"])
            rows.setdefault(folder, []).extend(f"{doc['name']} {token} t{f['task']} r{i}" for i in range(f["rows"]))
        return cls(doc["name"], doc["mode"], doc.get("po", "static"), {p: tuple(r) for p, r in rows.items()}, dest)


Table = dict[str, Counter]  # folder -> rows


def _under(folder: str, scope: str) -> bool:
    return scope == "" or folder == scope or folder.startswith(scope + "/")


def apply(table: Table, job: JobPlan) -> Table:
    """The table after ``job`` commits (a new table; ``table`` is not changed): an append adds its rows; a static
    overwrite replaces everything under its destination; a dynamic one everything under each folder it writes."""
    out = {p: Counter(r) for p, r in table.items()}
    if job.mode == "overwrite":
        scopes = [job.dest] if job.po == "static" else list(job.rows)
        out = {p: r for p, r in out.items() if not any(_under(p, s) for s in scopes)}
    for folder, rows in job.rows.items():
        out.setdefault(folder, Counter()).update(rows)
    return {p: r for p, r in out.items() if +r}


def flatten(table: Table) -> Counter:
    return Counter({(p, row): n for p, rows in table.items() for row, n in rows.items()})


def serial_tables(prefix: Iterable[JobPlan], jobs: Iterable[JobPlan], limit: int = 8) -> list[Counter] | None:
    """Every table some serial order of ``jobs`` (after ``prefix``, in its order) leaves; None when there are
    too many jobs to try every order."""
    jobs = list(jobs)
    if len(jobs) > limit:
        return None
    start: Table = {}
    for job in prefix:
        start = apply(start, job)
    seen: dict[tuple, Counter] = {}
    for perm in itertools.permutations(jobs):
        table = start
        for job in perm:
            table = apply(table, job)
        flat = flatten(table)
        seen.setdefault(tuple(sorted(flat.items())), flat)
    return list(seen.values())


# ---------------------------------------------------------------- the verdict
@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def fail(self, what: str) -> None:
        if what not in self.violations:
            self.violations.append(what)

    @property
    def ok(self) -> bool:
        return not self.violations


def _diff(expected: Counter, actual: Counter, limit: int = 6) -> str:
    missing = expected - actual
    extra = actual - expected
    parts = []
    if missing:
        parts.append(f"{sum(missing.values())} rows missing, e.g. {sorted(missing)[:limit]}")
    if extra:
        parts.append(f"{sum(extra.values())} rows too many, e.g. {sorted(extra)[:limit]}")
    return "; ".join(parts)


def _ints(d: Mapping[Any, Any] | None) -> dict[int, Any]:
    return {int(k): v for k, v in (d or {}).items()}


def _job_of_record(key: str) -> str | None:
    marker = "_temporary/mpcommit/"
    at = key.find(marker)
    if at < 0:
        return None
    return key[at + len(marker):].split("/", 1)[0] or None


#: Unknown outcomes tried both ways, at most this many (2**n models).
MAX_UNKNOWN = 5


def check(state: Mapping[str, Any], jobs: Mapping[str, Mapping[str, Any]], *, watch: Mapping[str, Any] | None = None,
          before: Iterable[str] | None = None) -> Verdict:
    """Judge ``state`` (from :func:`read_end_state`) against ``jobs``: name -> {role (seed, write, compact,
    recover), mode, po, dest, files, kill, killed, hung, zombie (paused or cut off on purpose), refuse (a refusal
    it must report), report (the process's ``end`` line or None), job_id, recover_actions (for recover runs)} --
    and the final recover's actions under the name ``final-recover``. ``watch``: :meth:`OrderWatch.to_json` of
    the order seen while the trial ran; ``before``: the job records listed before the final recover."""
    v = Verdict()
    plans = {name: JobPlan.from_json(j) for name, j in jobs.items() if j["role"] in ("seed", "write")}
    by_id: dict[str, str] = {j["job_id"]: name for name, j in jobs.items() if j.get("job_id")}
    watch = watch or {}
    seen_entries, seen_ends = _ints(watch.get("entries")), _ints(watch.get("ends"))
    checkpoints = set(_ints(watch.get("checkpoints"))) | set(_ints(state.get("checkpoints")))
    through = max(checkpoints, default=0)
    v.notes["collected through"] = through
    for what in watch.get("changed") or ():
        v.fail(f"order: {what}")

    # ------------------------------------------------------------ the places: the end state, and what was seen
    places: dict[int, dict[str, Any]] = {}
    for e in state["order"]:
        if e.get("entry_missing"):
            if e["position"] > through:
                v.fail(f"order: place {e['position']} has an end ({e['outcome']}) but no entry")
            else:
                v.notes.setdefault("leftover ends", []).append(e["position"])
            continue
        places[e["position"]] = dict(e)
    for position, doc in seen_entries.items():
        if position not in places:
            if position > through:
                v.fail(f"order: place {position} (job {by_id.get(doc['jobId'], doc['jobId'])}) disappeared, and no "
                       f"checkpoint covers it (collected through {through})")
            places[position] = {"position": position, **doc, "outcome": None, "collected": True}
    for position, e in places.items():
        if e.get("outcome") is None and position in seen_ends:
            e["outcome"] = seen_ends[position]["outcome"]
    entry_of: dict[str, dict[str, Any]] = {}
    for position in sorted(places):
        e = places[position]
        if e["jobId"] in entry_of:
            v.fail(f"order: job {e['jobId']} holds two places ({entry_of[e['jobId']]['position']}, {position})")
        entry_of[e["jobId"]] = e
        if e["outcome"] is None and position > through:
            v.fail(f"order: place {position} (job {by_id.get(e['jobId'], e['jobId'])}) is still open after "
                   "every process ended and recover ran")
        elif e["outcome"] not in (None, "committed", "rolled_back"):
            v.fail(f"order: place {position} ended {e['outcome']!r}")

    # ------------------------------------------------------------ what the reports say of collected places
    def said(job_id: str) -> str | None:
        name = by_id.get(job_id)
        if name is None:
            return None
        report = jobs[name].get("report") or {}
        if report.get("ok"):
            return "committed" if jobs[name]["role"] != "compact" or report.get("outcome") == "committed" \
                else "rolled_back"
        if report.get("error") in ("JobRolledBackError", "CommitConflictError", "ConcurrentJobsRefusedError"):
            return "rolled_back"
        for other in jobs.values():
            for a in other.get("recover_actions") or ():
                if a["job_id"] == job_id and a["action"] == "finished" and a.get("position") is not None:
                    return "committed"
                if a["job_id"] == job_id and a["action"] == "rolled_back":
                    return "rolled_back"
        return None

    # A job whose commit journal was seen can only have ended committed (a rollback after the journal is
    # refused); one whose key held a rollback's claim, only rolled back.
    journals = dict(watch.get("journals") or {})
    unknown: list[int] = []
    for position, e in sorted(places.items()):
        if e["outcome"] is None:  # collected before its end was seen
            told = said(e["jobId"])
            by_journal = {"commit": "committed", "rollback": "rolled_back"}.get(journals.get(e["jobId"], ""))
            if told is not None and by_journal is not None and told != by_journal:
                v.fail(f"order: place {position} (job {by_id.get(e['jobId'], e['jobId'])}) was collected; the "
                       f"reports say {told}, its journal key held a {journals[e['jobId']]}")
            e["outcome"] = told or by_journal
            v.notes.setdefault("outcomes told", []).append(
                f"{position}:{e['outcome']} by {'reports' if told else 'journal' if by_journal else 'nobody'}")
            if e["outcome"] is None:
                unknown.append(position)
    if unknown:
        v.notes["outcomes unknown"] = unknown
    if len(unknown) > MAX_UNKNOWN:
        v.fail(f"order: {len(unknown)} collected places whose outcome no record or report tells: {unknown[:10]}")
        unknown = unknown[:MAX_UNKNOWN]

    # ------------------------------------------------------------ rows: every one in the folder its plan names
    where: dict[str, str] = {row: folder for plan in plans.values() for folder, rows in plan.rows.items()
                             for row in rows}
    visible = Counter()
    for directory, line in state["rows"]:
        parts = line.split(" ")
        if len(parts) != 4 or parts[0] not in plans or line not in where:
            v.fail(f"a visible row no job wrote: {line!r} in {directory!r}")
            continue
        if where[line] != directory:
            v.fail(f"row {line!r} is in {directory!r}, not the partition it was written to ({where[line]!r})")
        visible[(where[line], line)] += 1

    # ------------------------------------------------------------ 1. the order's model
    def replay(committed: set[int]) -> tuple[Table, list[str]]:
        table: Table = {}
        names: list[str] = []
        for position in sorted(committed):
            e = places[position]
            name = by_id.get(e["jobId"])
            if e.get("purpose") == "compact":
                if name is not None and jobs[name]["role"] != "compact":
                    v.fail(f"order: job {name} ({jobs[name]['role']}) took place {position} as a compaction")
                names.append(name or f"compaction {e['jobId']}")
                continue
            if name is None or name not in plans:
                v.fail(f"order: place {position} committed job {e['jobId']}, which no trial process or seed ran")
                continue
            plan = plans[name]
            if e.get("mode") != plan.mode or (plan.mode == "overwrite" and e.get("partitionOverwrite") != plan.po):
                v.fail(f"order: place {position} of {name} says {e.get('mode')}/{e.get('partitionOverwrite')}, "
                       f"the job was {plan.mode}/{plan.po}")
            if (e.get("destination") or "") != plan.dest:
                v.fail(f"order: place {position} of {name} names destination {e.get('destination')!r}, the job "
                       f"wrote to {plan.dest!r}")
            table = apply(table, plan)
            names.append(name)
        return table, names

    known = {p for p, e in places.items() if e["outcome"] == "committed"}
    chosen: set[int] | None = None
    tried = []
    for k in range(len(unknown) + 1):
        for extra in itertools.combinations(unknown, k):
            table, names = replay(known | set(extra))
            tried.append(names)
            if flatten(table) == visible:
                chosen = known | set(extra)
                break
        if chosen is not None:
            break
    committed_positions = chosen if chosen is not None else known
    table, committed_names = replay(committed_positions)
    model = flatten(table)
    v.notes["committed in order"] = committed_names
    v.notes["model rows"] = sum(model.values())
    v.notes["visible rows"] = sum(visible.values())
    if chosen is None:
        v.fail(f"the visible rows are not the order's model ({' -> '.join(committed_names)}"
               f"{f'; tried {len(tried)} ways for the unknown outcomes of places {unknown}' if unknown else ''}): "
               f"{_diff(model, visible)}")
    for position in unknown:
        places[position]["outcome"] = "committed" if position in committed_positions else "rolled_back"
        v.notes.setdefault("outcomes chosen", []).append(f"{position}:{places[position]['outcome']}")
    committed_ids = {places[p]["jobId"] for p in committed_positions}

    # ------------------------------------------------------------ 2. some serial order of the successes
    seeds = [plans[n] for n, j in sorted(jobs.items(), key=lambda kv: kv[1].get("seq", 0)) if j["role"] == "seed"]
    succeeded = []
    for name, j in jobs.items():
        if j["role"] != "write":
            continue
        report = j.get("report") or {}
        committed_here = j.get("job_id") in committed_ids
        if report.get("ok") or (committed_here and (not report or report.get("error") in ZOMBIE_FAILURES)):
            succeeded.append(plans[name])
    tables = serial_tables(seeds, succeeded)
    if tables is None:
        # Too many to try every order: the order's model (1) is one, provided the committed jobs are exactly the
        # successes (each success committed is checked below).
        v.notes["serial orders"] = f"not tried: {len(succeeded)} jobs; the order's own is checked"
        names = {p.name for p in succeeded}
        for job_id in committed_ids:
            name = by_id.get(job_id)
            if name is not None and jobs[name]["role"] == "write" and name not in names:
                v.fail(f"{name} is committed in the order, and did not report success")
    elif visible not in tables:
        v.fail(f"no serial order of the jobs that reported success ({', '.join(sorted(p.name for p in succeeded))}) "
               f"leaves the visible rows ({sum(visible.values())} rows; {len(tables)} distinct serial results)")

    # ------------------------------------------------------------ 3. reports against the order
    files_of: dict[str, list[str]] = {}
    for key in state["files"]:
        name = key.rsplit("/", 1)[-1]
        if name.startswith("part-") and len(name) > 47:
            files_of.setdefault(name[11:47], []).append(key)
    for name, j in jobs.items():
        role = j["role"]
        if j.get("hung"):
            v.fail(f"{name} ({role}) did not end within the trial's time limit")
        report = j.get("report")
        if role in ("seed", "recover", "final-recover"):
            for a in j.get("recover_actions") or ():
                if a["action"] != "failed":
                    continue
                lost = j.get("zombie") and RECOVER_LOST in a["detail"]
                refused = j.get("refuse") == "conditional" and RECOVER_NO_CONDITIONS in a["detail"]
                if not (lost or refused):
                    v.fail(f"{name}: recover failed for job {by_id.get(a['job_id'], a['job_id'])}: {a['detail'][:300]}")
            if role == "recover" and not j.get("hung") and (report is None or not report.get("ok")):
                error = (report or {}).get("error", "")
                if not (j.get("refuse") and error in REFUSALS[j["refuse"]]):
                    v.fail(f"{name} (recover) ended without reporting its actions: "
                           f"{error or 'exit ' + str(j.get('returncode'))} {(report or {}).get('message', '')[:300]}")
            continue
        if role == "appender":  # each of its appends is judged as a job of its own
            if report is not None and not report.get("ok") and not j.get("hung"):
                v.fail(f"{name} (appender) failed: {report.get('error')} {report.get('message', '')[:300]}")
            continue
        entry = entry_of.get(j.get("job_id") or "")
        refuse = j.get("refuse")
        if report is None:
            if not j.get("killed"):
                v.fail(f"{name} ({role}) ended without a report (exit {j.get('returncode')})")
            continue
        if report.get("ok"):
            if refuse:
                v.fail(f"{name} ({role}) was to be refused ({refuse}), and reported success")
            if role == "compact" and report.get("outcome") != "committed":
                if entry is not None and entry["outcome"] != "rolled_back":
                    v.fail(f"{name}: compaction reported {report.get('outcome')}, its place ended {entry['outcome']}")
                continue
            if entry is None:
                if not (report.get("position") is not None and report["position"] <= through):
                    v.fail(f"{name} reported success, and holds no place in the order")
            elif entry["outcome"] != "committed":
                v.fail(f"{name} reported success, its place {entry['position']} ended {entry['outcome']}")
            elif report.get("position") != entry["position"]:
                v.fail(f"{name} reported position {report.get('position')}, its place is {entry['position']}")
            continue
        error = report.get("error", "?")
        errors = {error, *report.get("bases", ())}
        if refuse:
            if not errors & set(REFUSALS[refuse]):
                v.fail(f"{name} ({role}) was to be refused ({refuse}), and failed with {error}: "
                       f"{report.get('message', '')[:300]}")
        elif role in ALLOWED_FAILURES.get(error, ()):
            pass
        elif j.get("zombie") and error in ZOMBIE_FAILURES and role in ("write", "compact"):
            pass
        else:
            v.fail(f"{name} ({role}) failed with {error}, not a named conflict or refusal: "
                   f"{report.get('message', '')[:400]}")
        if error == "CommitConflictError" and not any(e["jobId"] in report.get("message", "")
                                                      for e in places.values() if e["jobId"] != j.get("job_id")) \
                and "cleared" not in report.get("message", ""):
            v.fail(f"{name}: its conflict names no other job of the order: {report.get('message', '')[:300]}")
        if error in ZOMBIE_FAILURES:
            continue  # the job is the taker's now: judged by the order's model, with the others
        if entry is not None and entry["outcome"] == "committed":
            v.fail(f"{name} reported {error}, and its place {entry['position']} ended committed")
        if j.get("job_id") and files_of.get(j["job_id"]):
            v.fail(f"{name} reported {error}, and its files are visible: {files_of[j['job_id']][:2]}")
        if role == "write" and any(n == name for n in (line.split(' ')[0] for _d, line in state["rows"])) and (
                entry is None or entry["outcome"] != "committed"):
            v.fail(f"{name} reported {error}, and rows it wrote are visible")

    # ------------------------------------------------------------ exactly one finisher per job
    finishers: dict[str, list[str]] = {}
    for name, j in jobs.items():
        report = j.get("report") or {}
        if j["role"] == "write" and report.get("ok") and not report.get("finished_elsewhere"):
            finishers.setdefault(j["job_id"], []).append(f"{name} (its driver)")
        for a in j.get("recover_actions") or ():
            if a["action"] == "finished" and a.get("position") is not None and not a.get("finished_elsewhere"):
                finishers.setdefault(a["job_id"], []).append(f"{name} (recover)")
    for job_id, who in finishers.items():
        if len(who) > 1:
            v.fail(f"job {by_id.get(job_id, job_id)} was finished by {len(who)} processes, each saying it did: "
                   f"{', '.join(who)}")

    # ------------------------------------------------------------ what recover runs said against the order
    for name, j in jobs.items():
        for a in j.get("recover_actions") or ():
            entry = entry_of.get(a["job_id"])
            if entry is None or entry["outcome"] is None:
                continue
            if a["action"] == "rolled_back" and entry["outcome"] == "committed":
                v.fail(f"{name}: recover reported job {by_id.get(a['job_id'], a['job_id'])} rolled back, and its "
                       f"place {entry['position']} ended committed: {a['detail'][:200]}")
            if a["action"] == "finished" and a.get("position") is not None and entry["outcome"] == "rolled_back":
                v.fail(f"{name}: recover reported job {by_id.get(a['job_id'], a['job_id'])} finished, and its "
                       f"place {entry['position']} ended rolled back")

    # ------------------------------------------------------------ 5. nothing recorded after a job ended (I10)
    # An end written for a place after the collection covered it (SPEC I10: a process that lost its job records
    # nothing more). By design it changes no decision -- a covered place is ended whatever records are left, and
    # the next collection deletes it -- so one that agrees with how the job ended is noted as a stray; one that
    # disagrees is a violation.
    for late in watch.get("late_ends") or ():
        place = places.get(late["position"])
        told = place["outcome"] if place is not None else None
        if told is not None and late["outcome"] != told:
            v.fail(f"order: an end ({late['outcome']}, by {late['by']}) was written for place {late['position']} "
                   f"after the collection covered it; the job ended {told}")
        else:
            v.notes.setdefault("stray ends", []).append(f"{late['position']}:{late['outcome']} by {late['by']}")
    if before is not None:
        left: dict[str, list[str]] = {}
        for key in before:
            job_id = _job_of_record(key)
            if job_id is not None:
                left.setdefault(job_id, []).append(key)
        for job_id, keys in sorted(left.items()):
            name = by_id.get(job_id)
            entry = entry_of.get(job_id)
            if name is None or entry is None or entry["outcome"] is None:
                continue
            j = jobs[name]
            if j.get("killed") or j.get("hung") or j.get("abort_failed"):
                continue
            v.fail(f"job {name} ended ({entry['outcome']}, place {entry['position']}) and none of its processes "
                   f"was killed, yet {len(keys)} of its records were left: {sorted(k.rsplit('/', 1)[-1] for k in keys)[:4]}")

    # ------------------------------------------------------------ 4. nothing left over
    if state["pending"]:
        v.fail(f"{len(state['pending'])} uploads still pending, e.g. {state['pending'][:2]}")
    if state["records"]:
        v.fail(f"{len(state['records'])} job records left, e.g. {state['records'][:2]}")
    top = max((e for e in places.values() if e.get("outcome") == "committed" and not e.get("destination")),
              key=lambda e: e["position"], default=None)
    success = state.get("success")
    if top is not None and (success is None or success.get("jobId") != top["jobId"]):
        v.fail(f"_SUCCESS names {success and by_id.get(success.get('jobId'), success.get('jobId'))} (place "
               f"{success and success.get('position')}), the last committed place is {top['position']} "
               f"({by_id.get(top['jobId'], top['jobId'])})")
    return v
