"""The job descriptor (written when a job is created) and the commit journal (written before the first
complete, so that `recover` can finish an interrupted commit exactly as it would have finished: I4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ManifestCorruptError, ManifestScopeError
from ...modes import PartitionOverwrite, Purpose, WriteMode
from ..layout import Destination, JobPaths, is_hidden_key, job_id_of_key
from .base import Reader, check_kind, dumps, loads_object
from .manifest import PendingUpload

DESCRIPTOR_KIND = "mpcommit.JobDescriptor"
JOURNAL_KIND = "mpcommit.CommitJournal"
ROLLBACK_KIND = "mpcommit.JobRollback"


def _purpose(r: Reader) -> Purpose:
    """A record's ``purpose`` (absent in the first formats: a write); an unknown one is refused (I7)."""
    found = r.str("purpose", optional=True) or Purpose.WRITE.value
    try:
        return Purpose(found)
    except ValueError:
        raise ManifestCorruptError(f"{r.what} at {r.where}: unknown purpose {found!r}") from None


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
    purpose: Purpose = Purpose.WRITE

    def __post_init__(self) -> None:
        # A Purpose, also when given by its name (the API and older callers pass "write" or "compact").
        object.__setattr__(self, "purpose", Purpose.parse(self.purpose))

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
                "purpose": self.purpose.value,
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
            purpose=_purpose(r),
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
class MergedFile:
    """A file merged at commit time from staged small files: its uncompleted upload, and the final keys of
    the staged files it replaces (which the commit then does not move in)."""

    upload: PendingUpload
    sources: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"upload": self.upload.to_json(), "sources": list(self.sources)}


@dataclass(frozen=True)
class CommitJournal:
    """What a commit will do, written before it does any of it.

    ``winners`` are the manifest keys of the attempts to complete, one per task. ``replace`` lists the
    partition paths (relative to the destination; "" for all of it) whose older objects an overwrite removes
    once the new files are complete: the objects of the jobs before this one in the table's commit order,
    never those of a job after it. ``position`` (format version 3) is this job's place in that order.
    ``delete`` (a compaction's only) names its sources, pinned by ETag. ``merged`` lists the files merged at
    commit time: completed with the winners, in place of their staged sources. Versions 1 and 2 (without a
    position) are still read: such a journal takes its place in the order when it is recovered.
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
    purpose: Purpose = Purpose.WRITE
    merged: tuple[MergedFile, ...] = ()
    position: int | None = None

    def __post_init__(self) -> None:
        # A Purpose, also when given by its name (the API and older callers pass "write" or "compact").
        object.__setattr__(self, "purpose", Purpose.parse(self.purpose))

    def to_bytes(self) -> bytes:
        self.validate_merged()
        extra: dict[str, Any] = {"merged": [m.to_json() for m in self.merged]} if self.merged else {}
        if self.position is not None:
            extra["position"] = self.position
        return dumps(
            {
                "kind": JOURNAL_KIND,
                "version": 3 if self.position is not None else (2 if self.merged else 1),
                "jobId": self.job_id,
                "bucket": self.bucket,
                "prefix": self.prefix,
                "mode": self.mode.value,
                "partitionOverwrite": self.partition_overwrite.value,
                "started": self.started_ms,
                "winners": list(self.winners),
                "replace": list(self.replace),
                "delete": [d.to_json() for d in self.delete],
                "purpose": self.purpose.value,
                **extra,
            }
        )

    def validate_merged(self, where: str = "<memory>") -> None:
        """Merged files must be this job's data keys inside the destination (I7), with parts 1..N, and every
        source merged at most once."""
        destination = Destination(self.bucket, self.prefix)
        seen: set[str] = set()
        for m in self.merged:
            key = m.upload.key
            if not destination.contains(key) or is_hidden_key(destination, key) or job_id_of_key(destination, key) != self.job_id:
                raise ManifestScopeError(
                    f"commit journal at {where} merges into {key!r}, which is not a data key of job {self.job_id} "
                    f"in {destination.uri}; refused"
                )
            numbers = [p.number for p in m.upload.parts]
            if not numbers or numbers != list(range(1, len(numbers) + 1)) or sum(p.size for p in m.upload.parts) != m.upload.size:
                raise ManifestCorruptError(f"commit journal at {where}: the parts of merged file {key!r} are inconsistent")
            if not m.sources:
                raise ManifestCorruptError(f"commit journal at {where}: merged file {key!r} names no sources")
            for source in m.sources:
                if not destination.contains(source) or job_id_of_key(destination, source) != self.job_id:
                    raise ManifestScopeError(
                        f"commit journal at {where}: merged file {key!r} names source {source!r}, not a file of job "
                        f"{self.job_id}; refused"
                    )
                if source in seen:
                    raise ManifestCorruptError(f"commit journal at {where}: {source!r} is merged twice; refused")
                seen.add(source)

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, destination: Destination, job_id: str) -> "CommitJournal":
        return cls.from_object(loads_object(data, what="commit journal", where=where), where=where,
                               destination=destination, job_id=job_id)

    @classmethod
    def from_object(cls, obj: dict[str, Any], *, where: str, destination: Destination,
                    job_id: str) -> "CommitJournal":
        """The journal from its decoded JSON (:meth:`from_bytes` without the decoding), validated alike."""
        version = check_kind(obj, kind=JOURNAL_KIND, versions=(1, 2, 3), what="commit journal", where=where)
        if version == 1 and "merged" in obj:
            raise ManifestCorruptError(f"commit journal at {where}: version 1 cannot carry merged files; refused")
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

        purpose = _purpose(r)

        def deleted(v: Any, w: str) -> DeleteEntry:
            # Only a compaction deletes named objects, and only data files: a journal that names a hidden key
            # (another job's journal, the table's _SUCCESS) could roll another job back or hide a commit.
            if purpose is not Purpose.COMPACT:
                raise ManifestScopeError(f"commit journal at {w}: a {purpose.value} job deletes no named objects; refused")
            e = r.obj_of(v, w)
            key = e.str("key")
            if not destination.contains(key):
                raise ManifestScopeError(f"commit journal at {w} deletes {key!r} outside {destination.uri}; refused")
            if is_hidden_key(destination, key):
                raise ManifestScopeError(f"commit journal at {w} deletes {key!r}, a hidden key and no data file; "
                                         "refused")
            return DeleteEntry(key, e.str("etag"))

        def merged(v: Any, w: str) -> MergedFile:
            e = r.obj_of(v, w)
            upload = PendingUpload.from_json(e.obj.get("upload"), f"{w}.upload", e)

            def source(value: Any, sw: str) -> str:
                if not isinstance(value, str):
                    raise ManifestCorruptError(f"commit journal at {sw} must be a key, got {value!r:.80}")
                return value

            return MergedFile(upload, e.list("sources", source))

        journal = cls(
            job_id=r.str("jobId"),
            bucket=r.str("bucket"),
            prefix=obj.get("prefix", ""),
            mode=WriteMode.parse(r.str("mode")),
            partition_overwrite=PartitionOverwrite.parse(r.str("partitionOverwrite")),
            started_ms=r.int("started"),
            winners=r.list("winners", winner),
            replace=r.list("replace", replaced, optional=True),
            delete=r.list("delete", deleted, optional=True),
            purpose=purpose,
            merged=r.list("merged", merged, optional=True) if version >= 2 else (),
            position=r.int("position", minimum=1) if version >= 3 else None,
        )
        journal.validate_merged(where)
        return journal


@dataclass(frozen=True)
class JobRollback:
    """What a rollback writes at the job's journal key before it aborts anything, with ``If-None-Match: *``.

    The journal key is the one place a commit and a rollback of one job meet: the commit creates its journal
    there the same way, so exactly one of them gets the key. A commit that finds this record stops before
    anything of it is visible; a rollback that finds a journal refuses (the job is committing: recover it).
    """

    job_id: str
    bucket: str
    prefix: str
    created_ms: int
    hostname: str
    reason: str

    def to_bytes(self) -> bytes:
        return dumps({"kind": ROLLBACK_KIND, "version": 1, "jobId": self.job_id, "bucket": self.bucket,
                      "prefix": self.prefix, "created": self.created_ms, "hostname": self.hostname,
                      "reason": self.reason})

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, destination: Destination, job_id: str) -> "JobRollback":
        return cls.from_object(loads_object(data, what="rollback record", where=where), where=where,
                               destination=destination, job_id=job_id)

    @classmethod
    def from_object(cls, obj: dict[str, Any], *, where: str, destination: Destination, job_id: str) -> "JobRollback":
        """The record from its decoded JSON (:meth:`from_bytes` without the decoding), validated alike."""
        check_kind(obj, kind=ROLLBACK_KIND, versions=(1,), what="rollback record", where=where)
        r = Reader(obj, what="rollback record", where=where)
        _check_scope(r, destination=destination, job_id=job_id, what="rollback record", where=where)
        return cls(job_id=r.str("jobId"), bucket=r.str("bucket"), prefix=obj.get("prefix", ""),
                   created_ms=r.int("created"), hostname=r.str("hostname"), reason=r.str("reason"))


def read_claim(data: bytes, *, where: str, destination: Destination, job_id: str) -> CommitJournal | JobRollback:
    """What holds a job's journal key: its commit journal, or the record of its rollback (decoded once)."""
    obj = loads_object(data, what="commit journal", where=where)
    if obj.get("kind") == ROLLBACK_KIND:
        return JobRollback.from_object(obj, where=where, destination=destination, job_id=job_id)
    return CommitJournal.from_object(obj, where=where, destination=destination, job_id=job_id)
