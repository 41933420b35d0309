"""The one record a streaming query keeps beside its table: what the query writes
(``TABLE/_mpcommit/streams/QUERY.json``).

It is created once, by the first micro-batch the query commits, and never rewritten: whether micro-batch B was
committed is not in it but in the table's commit order, where B's job commits as version B of the query's
application (:class:`~mpcommit.protocol.records.order.Txn`), the one fact written with the commit itself. The record
only lets a restarted query be checked against what it wrote before (the same table, partition columns and
format), and tells the cleanup tools that a job is one of a stream's micro-batches.

Tables a query wrote with mpcommit before the ledger (records of kind ``mpcommit.StreamProgress``, version 1)
kept the last committed micro-batch and the attempt about to commit in this record, rewritten with each batch; such
a record is still read, and what it says of the batches it names is honoured (:class:`LegacyProgress`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import MpcommitError
from .base import Reader, check_kind, dumps, loads_object

KIND = "mpcommit.StreamQuery"
#: The record's kind before the ledger, when it was rewritten with each micro-batch.
LEGACY_KIND = "mpcommit.StreamProgress"


class StreamStateError(MpcommitError):
    """A micro-batch cannot be committed safely: the query does not match what it wrote before, or what was recorded
    cannot tell whether the micro-batch was committed."""


@dataclass(frozen=True)
class LegacyPending:
    """The attempt an older mpcommit was about to commit: micro-batch ``batch_id`` as job ``job_id``, which could
    only take a place in the commit order after place ``after``."""

    batch_id: int
    job_id: str
    after: int


@dataclass(frozen=True)
class LegacyProgress:
    """What an older mpcommit's record said of the batches it committed."""

    last_batch: int
    last_job: str | None
    pending: LegacyPending | None


@dataclass(frozen=True)
class StreamQuery:
    """One query's record on one table."""

    query_id: str
    destination: str
    partition_by: tuple[str, ...]
    format: str
    created_ms: int = 0
    hostname: str = ""
    #: Only in a record an older mpcommit wrote.
    legacy: LegacyProgress | None = None

    def identity(self) -> tuple[str, tuple[str, ...], str]:
        """What a restart of the query must write as before."""
        return self.destination, tuple(self.partition_by), self.format

    def to_bytes(self) -> bytes:
        return dumps({"kind": KIND, "version": 1, "queryId": self.query_id, "destination": self.destination,
                      "partitionBy": list(self.partition_by), "format": self.format, "created": self.created_ms,
                      "hostname": self.hostname})

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, query_id: str) -> "StreamQuery":
        what = "stream query record"
        obj = loads_object(data, what=what, where=where)
        legacy = obj.get("kind") == LEGACY_KIND
        check_kind(obj, kind=LEGACY_KIND if legacy else KIND, versions=(1,), what=what, where=where)
        r = Reader(obj, what=what, where=where)
        if r.str("queryId") != query_id:
            raise StreamStateError(f"{what} at {where} belongs to query {obj.get('queryId')!r}, not {query_id}")
        record = cls(query_id=query_id, destination=r.str("destination"),
                     partition_by=r.list("partitionBy", _text), format=r.str("format"),
                     created_ms=r.int("created" if not legacy else "updated"),
                     hostname=r.str("hostname", optional=True) or "")
        if not legacy:
            return record
        last = obj.get("lastBatchId")
        if not isinstance(last, int) or isinstance(last, bool) or last < -1:
            raise StreamStateError(f"{what} at {where}: lastBatchId must be an integer >= -1, got {last!r}")
        pending = None
        if obj.get("pending") is not None:
            p = r.obj_of(obj["pending"], f"{where}: pending")
            pending = LegacyPending(p.int("batchId"), p.str("jobId"), p.int("after"))
        return StreamQuery(record.query_id, record.destination, record.partition_by, record.format,
                           record.created_ms, record.hostname,
                           LegacyProgress(last, r.str("lastJobId", optional=True), pending))


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise StreamStateError(f"{where} must be a string, got {value!r}")
    return value
