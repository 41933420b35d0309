"""The records of a table's commit order (protocol/order.py), under ``TABLE/_mpcommit/order/``:

* ``NNNNNNNNNNNNNNNNNNNN`` (the position, 20 ASCII digits, at most :data:`MAX_POSITION`): an :class:`OrderEntry`,
  created with ``If-None-Match: *`` by the one job that takes that place, never changed afterwards;
* ``NNNNNNNNNNNNNNNNNNNN.done``: its :class:`OrderOutcome`, created the same way once the job is committed or
  rolled back -- by its driver or by whoever finished it. Whoever creates it first has finished the job;
* ``collected-NNNNNNNNNNNNNNNNNNNN``: an :class:`OrderCheckpoint`, written by the order's garbage collection
  before it deletes any place: every place up to that position has ended, so a place whose records are gone is
  never taken for open, and the newest committed version of each application (a stream's micro-batches, a
  scheduler's runs) outlives the places that recorded it. Its name sorts after every position, so a listing of
  the order reads it after the places it covers.

All are validated on read like every record (I7): a record naming another table or an unknown version is
refused, never guessed at. Any other name under the order's folder is no record of mpcommit's: it is reported
(``jobs recover``, ``mpcommit doctor``) and otherwise ignored, never read as a place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...errors import ManifestCorruptError, ManifestScopeError, UsageError
from ...modes import PartitionOverwrite, Purpose, WriteMode
from ..layout import Table, paths_overlap
from .base import Reader, check_kind, dumps, loads_object

ENTRY_KIND = "mpcommit.OrderEntry"
OUTCOME_KIND = "mpcommit.OrderOutcome"
CHECKPOINT_KIND = "mpcommit.OrderCheckpoint"
POSITION_DIGITS = 20
OUTCOME_SUFFIX = ".done"
CHECKPOINT_PREFIX = "collected-"
#: The highest position a place may have: far beyond any table's life (a job a millisecond for 30,000 years),
#: and below 2**63, so that every position fits the signed 64-bit integers JSON readers and orjson handle. A
#: place named higher is no record of mpcommit's (a hostile or mistyped key) and is never read as one.
MAX_POSITION = 10**18
#: An entry lists at most this many paths it touches; a job touching more is recorded as touching its whole
#: destination (coarser, so it may make other jobs wait longer, never shorter).
MAX_PATHS = 1000


def entry_name(position: int) -> str:
    return f"{position:0{POSITION_DIGITS}d}"


def checkpoint_name(through: int) -> str:
    return f"{CHECKPOINT_PREFIX}{entry_name(through)}"


def _position(stem: str) -> int | None:
    # ASCII digits only: str.isdigit() also accepts Arabic-Indic digits and superscripts, which int() then reads
    # (or refuses) in ways no other reader of the order would.
    if len(stem) != POSITION_DIGITS or not (stem.isascii() and stem.isdigit()):
        return None
    position = int(stem)
    return position if 1 <= position <= MAX_POSITION else None


def parse_order_name(name: str) -> tuple[int, bool] | None:
    """``(position, is_outcome)`` of a key name under the order root, else None."""
    stem, done = (name[: -len(OUTCOME_SUFFIX)], True) if name.endswith(OUTCOME_SUFFIX) else (name, False)
    position = _position(stem)
    return None if position is None else (position, done)


def parse_checkpoint_name(name: str) -> int | None:
    """The position a checkpoint's key name says it covers, else None."""
    return _position(name[len(CHECKPOINT_PREFIX):]) if name.startswith(CHECKPOINT_PREFIX) else None


def _scope(r: Reader, table: Table, what: str, where: str) -> None:
    if r.str("bucket") != table.bucket or r.obj.get("table", "") != table.prefix:
        raise ManifestScopeError(f"{what} at {where} belongs to another table ({r.obj.get('table')!r}), not "
                                 f"{table.uri}; refused")


def _path(v: Any, w: str) -> str:
    if not isinstance(v, str) or v.startswith("/") or v.endswith("/") or "//" in v:
        raise ManifestCorruptError(f"order entry at {w}: {v!r} is not a path inside the table")
    return v


@dataclass(frozen=True)
class OrderEntry:
    """One job's place in its table's commit order, and what the job may touch there."""

    position: int
    job_id: str
    bucket: str
    table: str
    #: The job's destination as a path inside the table ("" when the destination is the table).
    destination: str
    purpose: Purpose
    mode: WriteMode
    partition_overwrite: PartitionOverwrite
    #: Paths inside the table where the job places or deletes files ("" for the whole table).
    touches: tuple[str, ...]
    #: Paths whose older files the job replaces (an overwrite); () for appends and compactions.
    replaces: tuple[str, ...]
    created_ms: int
    hostname: str
    #: The application version this job commits, when the write names one (:class:`Txn`): a later place of the
    #: same application and a version not newer waits for this one, then commits nothing if this one committed.
    txn: "Txn | None" = None

    def __post_init__(self) -> None:
        # A Purpose, also when given by its name (the API and older callers pass "write" or "compact").
        object.__setattr__(self, "purpose", Purpose.parse(self.purpose))

    @property
    def destructive(self) -> bool:
        """Whether the job removes other jobs' files: an overwrite, or a compaction (its sources)."""
        return bool(self.replaces) or self.purpose is Purpose.COMPACT

    def overlaps(self, paths: tuple[str, ...]) -> bool:
        return any(paths_overlap(a, b) for a in self.touches for b in paths)

    def to_bytes(self) -> bytes:
        out: dict[str, Any] = {
            "kind": ENTRY_KIND, "version": 1, "position": self.position, "jobId": self.job_id,
            "bucket": self.bucket, "table": self.table, "destination": self.destination, "purpose": self.purpose.value,
            "mode": self.mode.value, "partitionOverwrite": self.partition_overwrite.value,
            "touches": list(self.touches), "replaces": list(self.replaces), "created": self.created_ms,
            "hostname": self.hostname,
        }
        if self.txn is not None:
            out["txn"] = self.txn.to_json()
        return dumps(out)

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, table: Table, position: int) -> "OrderEntry":
        what = "order entry"
        obj = loads_object(data, what=what, where=where)
        check_kind(obj, kind=ENTRY_KIND, versions=(1,), what=what, where=where)
        r = Reader(obj, what=what, where=where)
        _scope(r, table, what, where)
        found = r.int("position", minimum=1)
        if found != position:
            raise ManifestCorruptError(f"{what} at {where} says position {found}, not {position}; refused")
        try:
            purpose = Purpose(r.str("purpose"))
        except ValueError:
            raise ManifestCorruptError(f"{what} at {where}: unknown purpose {obj.get('purpose')!r}") from None
        return cls(
            position=found, job_id=r.str("jobId"), bucket=r.str("bucket"), table=obj.get("table", ""),
            destination=_path(obj.get("destination", ""), where) if obj.get("destination") else "",
            purpose=purpose, mode=WriteMode.parse(r.str("mode")),
            partition_overwrite=PartitionOverwrite.parse(r.str("partitionOverwrite")),
            touches=r.list("touches", lambda v, w: _path(v, w) if v else ""),
            replaces=r.list("replaces", lambda v, w: _path(v, w) if v else ""),
            created_ms=r.int("created"), hostname=r.str("hostname"),
            txn=Txn.from_json(obj["txn"], where=f"{where}: txn") if obj.get("txn") is not None else None,
        )


class Outcome(str, Enum):
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


@dataclass(frozen=True)
class OrderOutcome:
    """How a job in the order ended, written once by whoever ended it."""

    position: int
    job_id: str
    bucket: str
    table: str
    outcome: Outcome
    time_ms: int
    hostname: str
    #: Why, for a rollback (a conflict, a rollback asked for by name, a dead job taken over).
    reason: str = ""
    #: A random token of the writer: two processes that end one job in the same millisecond on one host write
    #: different bytes, so that each can tell its own write (retried after a lost answer) from the other's.
    writer: str = ""
    #: Who ended it, for people: "the job's driver (pid 123)", "recover (pid 456)".
    by: str = ""
    #: The application version this commit records (see :class:`Txn`), written with the commit's end.
    txn: "Txn | None" = None

    def to_bytes(self) -> bytes:
        out: dict[str, Any] = {
            "kind": OUTCOME_KIND, "version": 1, "position": self.position, "jobId": self.job_id,
            "bucket": self.bucket, "table": self.table, "outcome": self.outcome.value, "time": self.time_ms,
            "hostname": self.hostname, "reason": self.reason, "writer": self.writer, "by": self.by,
        }
        if self.txn is not None:
            out["txn"] = self.txn.to_json()
        return dumps(out)

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, table: Table, position: int) -> "OrderOutcome":
        what = "order outcome"
        obj = loads_object(data, what=what, where=where)
        check_kind(obj, kind=OUTCOME_KIND, versions=(1,), what=what, where=where)
        r = Reader(obj, what=what, where=where)
        _scope(r, table, what, where)
        if r.int("position", minimum=1) != position:
            raise ManifestCorruptError(f"{what} at {where} names another position; refused")
        try:
            outcome = Outcome(r.str("outcome"))
        except ValueError:
            raise ManifestCorruptError(f"{what} at {where}: unknown outcome {obj.get('outcome')!r}") from None
        txn = Txn.from_json(obj["txn"], where=f"{where}: txn") if obj.get("txn") is not None else None
        return cls(position=position, job_id=r.str("jobId"), bucket=r.str("bucket"), table=obj.get("table", ""),
                   outcome=outcome, time_ms=r.int("time"), hostname=r.str("hostname"),
                   reason=r.str("reason", optional=True) or "", writer=r.str("writer", optional=True) or "",
                   by=r.str("by", optional=True) or "", txn=txn)


@dataclass(frozen=True)
class Txn:
    """One version of one application, committed to a table: a streaming query's micro-batch, or a scheduled
    job's run (the way Delta Lake's ``txnAppId`` / ``txnVersion`` make a re-run a no-op). Carried on the
    committed end of its job's place, and kept in the order's checkpoint when that place is collected: "was
    version V of application A committed here?" is one fact, written with the commit."""

    app_id: str
    version: int

    def __post_init__(self) -> None:
        if not isinstance(self.app_id, str) or not self.app_id.strip() or len(self.app_id) > MAX_APP_ID:
            raise UsageError(f"Txn app_id must be a non-empty string of at most {MAX_APP_ID} characters (one id per "
                             f"application, the same on every run of it), got {self.app_id!r}")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or not 0 <= self.version < 2 ** 63:
            raise UsageError(f"Txn version must be an integer from 0 (a run's number, a micro-batch's id, a date as "
                             f"20261128), got {self.version!r}")

    @classmethod
    def parse(cls, app_id: str | None, version: str | None, *, given: str = "option") -> "Txn | None":
        """A Txn from string options (Spark's ``txnAppId`` and ``txnVersion``): both or neither."""
        if app_id is None and version is None:
            return None
        if app_id is None or version is None:
            missing = "txnAppId" if app_id is None else "txnVersion"
            raise UsageError(f"{given} {missing} is missing: txnAppId and txnVersion go together (the application "
                             "and the version of it this write commits). Nothing was written.")
        try:
            number = int(version.strip())
        except ValueError:
            raise UsageError(f"{given} txnVersion must be an integer, got {version!r}. Nothing was written.") from None
        return cls(app_id, number)

    def to_json(self) -> dict[str, Any]:
        return {"app": self.app_id, "version": self.version}

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> "Txn":
        if not isinstance(value, dict):
            raise ManifestCorruptError(f"application version at {where} must be an object")
        r = Reader(value, what="application version", where=where)
        app = r.str("app")
        if not app or len(app) > MAX_APP_ID:
            raise ManifestCorruptError(f"application version at {where}: app id must be 1-{MAX_APP_ID} characters")
        return cls(app, r.int("version"))


#: An application id is at most this long (a streaming query's UUID is 36 characters).
MAX_APP_ID = 200


@dataclass(frozen=True)
class TxnRecord:
    """The newest committed version of one application, as a checkpoint keeps it."""

    version: int
    position: int
    job_id: str


@dataclass(frozen=True)
class OrderCheckpoint:
    """What the order's garbage collection keeps of the places it deletes: every place up to ``through`` has
    ended (committed or rolled back), and the newest committed version of each application. Its size grows
    with the number of applications, never with the number of jobs: a table with a million jobs and one stream
    has a checkpoint of about 200 bytes."""

    bucket: str
    table: str
    through: int
    txns: dict[str, TxnRecord]
    time_ms: int

    def to_bytes(self) -> bytes:
        return dumps({
            "kind": CHECKPOINT_KIND, "version": 1, "bucket": self.bucket, "table": self.table, "through": self.through,
            "time": self.time_ms,
            "txns": {app: {"version": t.version, "position": t.position, "jobId": t.job_id}
                     for app, t in sorted(self.txns.items())},
        })

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, table: Table, through: int) -> "OrderCheckpoint":
        what = "order checkpoint"
        obj = loads_object(data, what=what, where=where)
        check_kind(obj, kind=CHECKPOINT_KIND, versions=(1,), what=what, where=where)
        r = Reader(obj, what=what, where=where)
        _scope(r, table, what, where)
        if r.int("through", minimum=1) != through:
            raise ManifestCorruptError(f"{what} at {where} names another position than its key; refused")
        raw = obj.get("txns")
        if not isinstance(raw, dict):
            raise ManifestCorruptError(f"{what} at {where}: txns must be an object")
        txns: dict[str, TxnRecord] = {}
        for app, value in raw.items():
            t = r.obj_of(value, f"{where}: txns[{app!r}]")
            if not app or len(app) > MAX_APP_ID:
                raise ManifestCorruptError(f"{what} at {where}: app id {app!r} must be 1-{MAX_APP_ID} characters")
            txns[app] = TxnRecord(t.int("version"), t.int("position", minimum=1), t.str("jobId"))
        return cls(bucket=r.str("bucket"), table=obj.get("table", ""), through=through, txns=txns,
                   time_ms=r.int("time"))


def table_paths(table: Table, destination_path: str, rels: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Paths relative to a destination (``""`` for all of it) as paths inside the table, at most MAX_PATHS."""
    joined = sorted({"/".join(p for p in (destination_path, rel) if p) for rel in rels})
    if len(joined) > MAX_PATHS:
        return (destination_path,)
    return tuple(joined)

