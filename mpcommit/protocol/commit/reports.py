"""What a job commit and a rollback hand back to their caller."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ...modes import CommitMode, CommitOutcome
from ...units import human_bytes
from ..records.order import TxnRecord
from ..records.success import PartitionStats


class CatalogSummary(Protocol):
    """What a report needs of a catalog registration's result (a :class:`mpcommit.catalog.CatalogResult`):
    the catalog sits above the protocol, which knows it by this alone."""

    def summary(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class CommitReport:
    """What a job commit made visible, and how long each phase took (seconds)."""

    job_id: str
    uri: str
    mode: CommitMode
    outcome: CommitOutcome
    #: Sorted. A tuple, or for a large commit its compressed list (:class:`.committed.FileNames`): len, iteration
    #: and indexing as a tuple, without a million strings held.
    filenames: Sequence[str] = ()
    bytes: int = 0
    rows: int | None = 0
    partitions: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    aborted_uploads: int = 0
    deleted_objects: int = 0
    ignored: bool = False
    #: Per partition ("" for the root): files, bytes and rows this commit made visible (catalog statistics).
    partition_stats: Mapping[str, PartitionStats] = field(default_factory=dict)
    #: What a catalog registration after the commit did (:func:`mpcommit.catalog.register_commit`), else None.
    catalog: CatalogSummary | None = None
    #: The job's place in its table's commit order (None where the job took none: an ignored write).
    position: int | None = None
    #: Another process (a `recover`, or a later job taking over a silent one) recorded this job's end first: the
    #: commit happened, counted there.
    finished_elsewhere: bool = False
    #: Who finished it, when another process did ("recover on host h (pid 1)"), where its record says so.
    finished_by: str = ""
    #: The write named an application version that the table committed already: nothing was written, and this
    #: is the commit that holds it (idempotent re-runs, a replayed micro-batch).
    duplicate_of: "TxnRecord | None" = None

    @property
    def files(self) -> int:
        return len(self.filenames)

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "jobId": self.job_id, "uri": self.uri, "mode": self.mode.value, "outcome": self.outcome.value,
            "files": self.files, "bytes": self.bytes, "rows": self.rows, "partitions": len(self.partitions),
            "abortedUploads": self.aborted_uploads, "deletedObjects": self.deleted_objects,
            "ignored": self.ignored, "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }
        if self.position is not None:
            out["position"] = self.position
        if self.finished_elsewhere:
            out["finishedElsewhere"] = True
            if self.finished_by:
                out["finishedBy"] = self.finished_by
        if self.catalog is not None:
            out["catalog"] = self.catalog.summary()
        if self.duplicate_of is not None:
            out["duplicateOf"] = {"jobId": self.duplicate_of.job_id, "position": self.duplicate_of.position,
                                  "version": self.duplicate_of.version}
        return out

    def __str__(self) -> str:
        """The few lines a person wants to read (the dataclass's repr lists every file name)."""
        if self.duplicate_of is not None:
            d = self.duplicate_of
            return (f"{self.uri}: version {d.version} of this application was committed already, by job {d.job_id} "
                    f"(place {d.position}); nothing was written (job {self.job_id})")
        if self.ignored:
            return f"{self.uri}: mode {self.mode.value} found existing data; nothing was written (job {self.job_id})"
        rows = "" if self.rows is None else f", {self.rows:,} rows"
        elsewhere = (f" (finished by another process{': ' + self.finished_by if self.finished_by else ''})"
                     if self.finished_elsewhere else "")
        lines = [
            f"{self.outcome.value} {self.uri} ({self.mode.value}) job {self.job_id}{elsewhere}",
            f"  {self.files:,} files, {human_bytes(self.bytes)}{rows} in {len(self.partitions):,} partitions",
        ]
        if self.deleted_objects or self.aborted_uploads:
            lines.append(f"  replaced {self.deleted_objects:,} older objects, aborted {self.aborted_uploads:,} "
                         "leftover uploads")
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in self.timings.items() if k != "total")
        total = self.timings.get("total")
        if total is not None:
            lines.append(f"  commit took {total:.2f}s" + (f" ({phases})" if phases else ""))
        if self.catalog is not None:
            lines.append(f"  catalog: {self.catalog.summary()}")
        return "\n".join(lines)


@dataclass(frozen=True)
class AbortReport:
    job_id: str
    aborted_uploads: int
    deleted_records: int
    #: The job had ended before the rollback could claim it -- committed, or rolled back, by another process,
    #: its records removed -- so nothing was rolled back (a listing of jobs read before it ended).
    ended_before: bool = False
