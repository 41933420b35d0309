"""The records of a table's commit order (protocol/order.py), under ``TABLE/_mpcommit/order/``:

* ``NNNNNNNNNNNNNNNNNNNN`` (the position, 20 digits): an :class:`OrderEntry`, created with ``If-None-Match: *``
  by the one job that takes that place, never changed afterwards;
* ``NNNNNNNNNNNNNNNNNNNN.done``: its :class:`OrderOutcome`, created the same way once the job is committed or
  rolled back -- by its driver or by whoever finished it. Whoever creates it first has finished the job.

Both are validated on read like every record (I7): a record naming another table or an unknown version is
refused, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...errors import ManifestCorruptError, ManifestScopeError
from ...modes import PartitionOverwrite, WriteMode
from ..layout import Table, paths_overlap
from .base import Reader, check_kind, dumps, loads_object

ENTRY_KIND = "mpcommit.OrderEntry"
OUTCOME_KIND = "mpcommit.OrderOutcome"
POSITION_DIGITS = 20
OUTCOME_SUFFIX = ".done"
#: An entry lists at most this many paths it touches; a job touching more is recorded as touching its whole
#: destination (coarser, so it may make other jobs wait longer, never shorter).
MAX_PATHS = 1000


def entry_name(position: int) -> str:
    return f"{position:0{POSITION_DIGITS}d}"


def parse_order_name(name: str) -> tuple[int, bool] | None:
    """``(position, is_outcome)`` of a key name under the order root, else None."""
    stem, done = (name[: -len(OUTCOME_SUFFIX)], True) if name.endswith(OUTCOME_SUFFIX) else (name, False)
    if len(stem) != POSITION_DIGITS or not stem.isdigit():
        return None
    return int(stem), done


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
    purpose: str  # "write" or "compact"
    mode: WriteMode
    partition_overwrite: PartitionOverwrite
    #: Paths inside the table where the job places or deletes files ("" for the whole table).
    touches: tuple[str, ...]
    #: Paths whose older files the job replaces (an overwrite); () for appends and compactions.
    replaces: tuple[str, ...]
    created_ms: int
    hostname: str

    @property
    def destructive(self) -> bool:
        """Whether the job removes other jobs' files: an overwrite, or a compaction (its sources)."""
        return bool(self.replaces) or self.purpose == "compact"

    def overlaps(self, paths: tuple[str, ...]) -> bool:
        return any(paths_overlap(a, b) for a in self.touches for b in paths)

    def to_bytes(self) -> bytes:
        return dumps({
            "kind": ENTRY_KIND, "version": 1, "position": self.position, "jobId": self.job_id,
            "bucket": self.bucket, "table": self.table, "destination": self.destination, "purpose": self.purpose,
            "mode": self.mode.value, "partitionOverwrite": self.partition_overwrite.value,
            "touches": list(self.touches), "replaces": list(self.replaces), "created": self.created_ms,
            "hostname": self.hostname,
        })

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
        purpose = r.str("purpose")
        if purpose not in ("write", "compact"):
            raise ManifestCorruptError(f"{what} at {where}: unknown purpose {purpose!r}")
        return cls(
            position=found, job_id=r.str("jobId"), bucket=r.str("bucket"), table=obj.get("table", ""),
            destination=_path(obj.get("destination", ""), where) if obj.get("destination") else "",
            purpose=purpose, mode=WriteMode.parse(r.str("mode")),
            partition_overwrite=PartitionOverwrite.parse(r.str("partitionOverwrite")),
            touches=r.list("touches", lambda v, w: _path(v, w) if v else ""),
            replaces=r.list("replaces", lambda v, w: _path(v, w) if v else ""),
            created_ms=r.int("created"), hostname=r.str("hostname"),
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

    def to_bytes(self) -> bytes:
        return dumps({
            "kind": OUTCOME_KIND, "version": 1, "position": self.position, "jobId": self.job_id,
            "bucket": self.bucket, "table": self.table, "outcome": self.outcome.value, "time": self.time_ms,
            "hostname": self.hostname, "reason": self.reason, "writer": self.writer,
        })

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
        return cls(position=position, job_id=r.str("jobId"), bucket=r.str("bucket"), table=obj.get("table", ""),
                   outcome=outcome, time_ms=r.int("time"), hostname=r.str("hostname"),
                   reason=r.str("reason", optional=True) or "", writer=r.str("writer", optional=True) or "")


def table_paths(table: Table, destination_path: str, rels: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Paths relative to a destination (``""`` for all of it) as paths inside the table, at most MAX_PATHS."""
    joined = sorted({"/".join(p for p in (destination_path, rel) if p) for rel in rels})
    if len(joined) > MAX_PATHS:
        return (destination_path,)
    return tuple(joined)


def touched_by(entries: list[OrderEntry], paths: tuple[str, ...]) -> list[OrderEntry]:
    return [e for e in entries if e.overlaps(paths)]
