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
ORDER_FOLDER = "_mpcommit/order/"
POSITION_DIGITS = 20

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
    success: dict[str, Any] | None = None
    for obj in list_objects(client, bucket, root):
        key = obj["Key"]
        rel = key[len(root):]
        if rel.startswith(ORDER_FOLDER):
            name = rel[len(ORDER_FOLDER):]
            stem, done = (name[:-5], True) if name.endswith(".done") else (name, False)
            if len(stem) == POSITION_DIGITS and stem.isdigit():
                doc = json.loads(read_object(client, bucket, key))
                (outcomes if done else entries)[int(stem)] = doc
            continue
        if rel.startswith("_temporary/mpcommit/"):
            records.append(key)
            continue
        if rel == "_SUCCESS":
            success = json.loads(read_object(client, bucket, key))
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
        order.append({"position": position, "jobId": e.get("jobId"), "purpose": e.get("purpose"),
                      "mode": e.get("mode"), "partitionOverwrite": e.get("partitionOverwrite"),
                      "touches": e.get("touches"), "replaces": e.get("replaces"),
                      "outcome": o.get("outcome") if o else None, "reason": (o or {}).get("reason", "")})
    for position in sorted(set(outcomes) - set(entries)):
        order.append({"position": position, "jobId": outcomes[position].get("jobId"), "purpose": None,
                      "outcome": outcomes[position].get("outcome"), "entry_missing": True})
    pending = [e["Key"] for e in pending_upload_entries(client, bucket, root)]
    return {"rows": sorted(rows), "files": sorted(files), "order": order, "pending": sorted(pending),
            "records": sorted(records),
            "success": {"jobId": success.get("jobId"), "position": success.get("position")} if success else None}


# ---------------------------------------------------------------- the model
@dataclass(frozen=True)
class JobPlan:
    """A write job as planned: its name, mode and the rows it writes per partition."""

    name: str
    mode: str  # append | overwrite
    po: str  # static | dynamic
    rows: Mapping[str, tuple[str, ...]]  # partition -> rows

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "JobPlan":
        rows: dict[str, list[str]] = {}
        for f in doc["files"]:
            rows.setdefault(f["partition"], []).extend(
                f"{doc['name']} {f['partition']} t{f['task']} r{i}" for i in range(f["rows"]))
        return cls(doc["name"], doc["mode"], doc.get("po", "static"), {p: tuple(r) for p, r in rows.items()})


Table = dict[str, Counter]  # partition -> rows


def apply(table: Table, job: JobPlan) -> Table:
    """The table after ``job`` commits (a new table; ``table`` is not changed)."""
    out = {p: Counter(r) for p, r in table.items()}
    if job.mode == "overwrite" and job.po == "static":
        out = {}
    for partition, rows in job.rows.items():
        if job.mode == "overwrite" and job.po == "dynamic":
            out[partition] = Counter()
        out.setdefault(partition, Counter()).update(rows)
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


def check(state: Mapping[str, Any], jobs: Mapping[str, Mapping[str, Any]]) -> Verdict:
    """Judge ``state`` (from :func:`read_end_state`) against ``jobs``: name -> {role (seed, write, compact,
    recover), mode, po, files, kill, killed, hung, report (the process's ``end`` line or None), job_id,
    recover_actions (for recover runs)} -- and the final recover's actions under the name ``final-recover``."""
    v = Verdict()
    plans = {name: JobPlan.from_json(j) for name, j in jobs.items() if j["role"] in ("seed", "write")}
    by_id: dict[str, str] = {j["job_id"]: name for name, j in jobs.items() if j.get("job_id")}
    order = state["order"]
    entry_of: dict[str, dict[str, Any]] = {}
    for e in order:
        if e.get("entry_missing"):
            v.fail(f"order: place {e['position']} has an end ({e['outcome']}) but no entry")
            continue
        if e["jobId"] in entry_of:
            v.fail(f"order: job {e['jobId']} holds two places ({entry_of[e['jobId']]['position']}, {e['position']})")
        entry_of[e["jobId"]] = e
        if e["outcome"] is None:
            v.fail(f"order: place {e['position']} (job {by_id.get(e['jobId'], e['jobId'])}) is still open after "
                   "every process ended and recover ran")
        elif e["outcome"] not in ("committed", "rolled_back"):
            v.fail(f"order: place {e['position']} ended {e['outcome']!r}")

    # ------------------------------------------------------------ rows: every one in the partition it names
    visible = Counter()
    for directory, line in state["rows"]:
        parts = line.split(" ")
        if len(parts) != 4 or parts[0] not in plans:
            v.fail(f"a visible row no job wrote: {line!r} in {directory!r}")
            continue
        if parts[1] != directory:
            v.fail(f"row {line!r} is in {directory!r}, not the partition it was written to")
        visible[(parts[1], line)] += 1

    # ------------------------------------------------------------ 1. the order's model
    table: Table = {}
    committed_names: list[str] = []
    for e in order:
        if e.get("entry_missing") or e["outcome"] != "committed":
            continue
        name = by_id.get(e["jobId"])
        if e["purpose"] == "compact":
            if name is not None and jobs[name]["role"] != "compact":
                v.fail(f"order: job {name} ({jobs[name]['role']}) took place {e['position']} as a compaction")
            committed_names.append(name or f"compaction {e['jobId']}")
            continue
        if name is None or name not in plans:
            v.fail(f"order: place {e['position']} committed job {e['jobId']}, which no trial process or seed ran")
            continue
        plan = plans[name]
        if e["mode"] != plan.mode or (plan.mode == "overwrite" and e["partitionOverwrite"] != plan.po):
            v.fail(f"order: place {e['position']} of {name} says {e['mode']}/{e['partitionOverwrite']}, the job "
                   f"was {plan.mode}/{plan.po}")
        table = apply(table, plan)
        committed_names.append(name)
    model = flatten(table)
    v.notes["committed in order"] = committed_names
    v.notes["model rows"] = sum(model.values())
    v.notes["visible rows"] = sum(visible.values())
    if visible != model:
        v.fail(f"the visible rows are not the order's model ({' -> '.join(committed_names)}): "
               f"{_diff(model, visible)}")

    # ------------------------------------------------------------ 2. some serial order of the successes
    seeds = [plans[n] for n, j in sorted(jobs.items(), key=lambda kv: kv[1].get("seq", 0)) if j["role"] == "seed"]
    succeeded = []
    for name, j in jobs.items():
        if j["role"] != "write":
            continue
        report = j.get("report") or {}
        committed_here = (entry_of.get(j.get("job_id") or "") or {}).get("outcome") == "committed"
        if report.get("ok") or (not report and committed_here):
            succeeded.append(plans[name])
    tables = serial_tables(seeds, succeeded)
    if tables is None:
        v.notes["serial orders"] = f"not tried: {len(succeeded)} jobs"
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
                if a["action"] == "failed":
                    v.fail(f"{name}: recover failed for job {by_id.get(a['job_id'], a['job_id'])}: {a['detail'][:300]}")
            if role == "recover" and not j.get("hung") and (report is None or not report.get("ok")):
                v.fail(f"{name} (recover) ended without reporting its actions: "
                       f"{(report or {}).get('error', 'exit ' + str(j.get('returncode')))} "
                       f"{(report or {}).get('message', '')[:300]}")
            continue
        entry = entry_of.get(j.get("job_id") or "")
        if report is None:
            if not j.get("killed"):
                v.fail(f"{name} ({role}) ended without a report (exit {j.get('returncode')})")
            continue
        if report.get("ok"):
            if role == "compact" and report.get("outcome") != "committed":
                if entry is not None and entry["outcome"] != "rolled_back":
                    v.fail(f"{name}: compaction reported {report.get('outcome')}, its place ended {entry['outcome']}")
                continue
            if entry is None:
                v.fail(f"{name} reported success, and holds no place in the order")
            elif entry["outcome"] != "committed":
                v.fail(f"{name} reported success, its place {entry['position']} ended {entry['outcome']}")
            elif report.get("position") != entry["position"]:
                v.fail(f"{name} reported position {report.get('position')}, its place is {entry['position']}")
            continue
        error = report.get("error", "?")
        if role not in ALLOWED_FAILURES.get(error, ()):
            v.fail(f"{name} ({role}) failed with {error}, not a named conflict or refusal: "
                   f"{report.get('message', '')[:400]}")
        elif error == "CommitConflictError" and not any(e["jobId"] in report.get("message", "") for e in order
                                                         if e["jobId"] != j.get("job_id")):
            v.fail(f"{name}: its conflict names no other job of the order: {report.get('message', '')[:300]}")
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

    # ------------------------------------------------------------ 4. nothing left over
    if state["pending"]:
        v.fail(f"{len(state['pending'])} uploads still pending, e.g. {state['pending'][:2]}")
    if state["records"]:
        v.fail(f"{len(state['records'])} job records left, e.g. {state['records'][:2]}")
    top = max((e for e in order if e.get("outcome") == "committed" and not e.get("entry_missing")),
              key=lambda e: e["position"], default=None)
    success = state.get("success")
    if top is not None and (success is None or success.get("jobId") != top["jobId"]):
        v.fail(f"_SUCCESS names {success and by_id.get(success.get('jobId'), success.get('jobId'))} (place "
               f"{success and success.get('position')}), the last committed place is {top['position']} "
               f"({by_id.get(top['jobId'], top['jobId'])})")
    return v
