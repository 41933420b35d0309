"""The job descriptor (written when a job is created) and the commit journal (written before the first
complete, so that `recover` can finish an interrupted commit exactly as it would have finished: I4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ManifestScopeError
from ..layout import Destination, JobPaths
from ..modes import PartitionOverwrite, WriteMode
from .base import Reader, check_kind, dumps, loads_object

DESCRIPTOR_KIND = "mpcommit.JobDescriptor"
JOURNAL_KIND = "mpcommit.CommitJournal"


def _check_scope(r: Reader, *, destination: Destination, job_id: str | None, what: str, where: str) -> None:
    bucket, prefix, found_job = r.str("bucket"), r.obj.get("prefix", ""), r.str("jobId")
    if bucket != destination.bucket or prefix != destination.prefix:
        raise ManifestScopeError(
            f"{what} at {where} belongs to s3://{bucket}/{prefix}, not {destination.uri}; refused"
        )
    if job_id is not None and found_job != job_id:
        raise ManifestScopeError(f"{what} at {where} belongs to job {found_job}, not {job_id}; refused")


@dataclass(frozen=True)
class JobDescriptor:
    job_id: str
    bucket: str
    prefix: str
    mode: WriteMode
    partition_overwrite: PartitionOverwrite
    created_ms: int
    hostname: str
    purpose: str = "write"  # "write" or "compact"

    def to_bytes(self) -> bytes:
        return dumps(
            {
                "kind": DESCRIPTOR_KIND,
                "version": 1,
                "jobId": self.job_id,
                "bucket": self.bucket,
                "prefix": self.prefix,
                "mode": self.mode.value,
                "partitionOverwrite": self.partition_overwrite.value,
                "created": self.created_ms,
                "hostname": self.hostname,
                "purpose": self.purpose,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, destination: Destination, job_id: str | None = None) -> "JobDescriptor":
        obj = loads_object(data, what="job descriptor", where=where)
        check_kind(obj, kind=DESCRIPTOR_KIND, versions=(1,), what="job descriptor", where=where)
        r = Reader(obj, what="job descriptor", where=where)
        _check_scope(r, destination=destination, job_id=job_id, what="job descriptor", where=where)
        return cls(
            job_id=r.str("jobId"),
            bucket=r.str("bucket"),
            prefix=obj.get("prefix", ""),
            mode=WriteMode.parse(r.str("mode")),
            partition_overwrite=PartitionOverwrite.parse(r.str("partitionOverwrite")),
            created_ms=r.int("created"),
            hostname=r.str("hostname"),
            purpose=r.str("purpose", optional=True) or "write",
        )


@dataclass(frozen=True)
class DeleteEntry:
    """An object the commit deletes after every new file is completed (compaction sources).
    The ETag pins the version that was planned: a changed object is left alone."""

    key: str
    etag: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "etag": self.etag}


@dataclass(frozen=True)
class CommitJournal:
    """What a commit will do, written before it does any of it.

    ``winners`` are the manifest keys of the attempts to complete, one per task. ``replace`` lists the
    partition paths (relative to the destination; "" for all of it) whose older objects an overwrite removes
    once the new files are complete; only objects last modified before ``started_ms`` and not carrying this
    job's id are removed, so that a later job's data survives a late recovery.
    """

    job_id: str
    bucket: str
    prefix: str
    mode: WriteMode
    partition_overwrite: PartitionOverwrite
    started_ms: int
    winners: tuple[str, ...]
    replace: tuple[str, ...] = ()
    delete: tuple[DeleteEntry, ...] = ()
    purpose: str = "write"

    def to_bytes(self) -> bytes:
        return dumps(
            {
                "kind": JOURNAL_KIND,
                "version": 1,
                "jobId": self.job_id,
                "bucket": self.bucket,
                "prefix": self.prefix,
                "mode": self.mode.value,
                "partitionOverwrite": self.partition_overwrite.value,
                "started": self.started_ms,
                "winners": list(self.winners),
                "replace": list(self.replace),
                "delete": [d.to_json() for d in self.delete],
                "purpose": self.purpose,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, destination: Destination, job_id: str) -> "CommitJournal":
        obj = loads_object(data, what="commit journal", where=where)
        check_kind(obj, kind=JOURNAL_KIND, versions=(1,), what="commit journal", where=where)
        r = Reader(obj, what="commit journal", where=where)
        _check_scope(r, destination=destination, job_id=job_id, what="commit journal", where=where)
        paths = JobPaths(destination, job_id)

        def winner(v: Any, w: str) -> str:
            if not isinstance(v, str) or not v.startswith(paths.tasks) or not destination.contains(v):
                raise ManifestScopeError(f"commit journal at {w} names {v!r}, not a manifest of job {job_id}; refused")
            return v

        def replaced(v: Any, w: str) -> str:
            if not isinstance(v, str) or (v and not destination.contains(f"{destination.root}{v}")):
                raise ManifestScopeError(f"commit journal at {w}: {v!r} is not a partition path of {destination.uri}")
            return v

        def deleted(v: Any, w: str) -> DeleteEntry:
            e = r.obj_of(v, w)
            key = e.str("key")
            if not destination.contains(key):
                raise ManifestScopeError(f"commit journal at {w} deletes {key!r} outside {destination.uri}; refused")
            return DeleteEntry(key, e.str("etag"))

        return cls(
            job_id=r.str("jobId"),
            bucket=r.str("bucket"),
            prefix=obj.get("prefix", ""),
            mode=WriteMode.parse(r.str("mode")),
            partition_overwrite=PartitionOverwrite.parse(r.str("partitionOverwrite")),
            started_ms=r.int("started"),
            winners=r.list("winners", winner),
            replace=r.list("replace", replaced, optional=True),
            delete=r.list("delete", deleted, optional=True),
            purpose=r.str("purpose", optional=True) or "write",
        )
