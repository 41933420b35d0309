"""The pending-upload manifest of one committed task attempt, and the small result handed to the driver.

A manifest lists every upload the attempt left uncompleted: key, upload id, parts (number, ETag, size,
CRC32), size and rows. It is validated when read (invariant I7): every key must lie inside the destination,
carry the job's id, and belong to the bucket and job the reader expects.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import ManifestCorruptError, ManifestScopeError
from ...sizing import MAX_PARTS, multipart_etag
from ..layout import Destination, JobPaths, is_hidden_key, job_id_of_key
from .base import Reader, check_kind, dumps, loads_object

MANIFEST_KIND = "mpcommit.TaskManifest"
MANIFEST_VERSION = 1
# Above this many parts in total, a task result references its manifest instead of carrying it inline,
# so that the driver never holds all parts of all files at once.
INLINE_MAX_PARTS = 256
#: What a whole job's results may carry in-line, all tasks together. In-line manifests save the commit a read of
#: each, but the driver holds every one it was handed (~1.5 KB a file, collected and decoded) until the commit
#: places its files: past this many parts the rest are named, not carried, and the commit streams them from their
#: stored copies. 20,000 parts keep a job's in-line share near 30 MiB while a job of up to ~20,000 files -- most
#: jobs -- reads no manifest back.
INLINE_BUDGET_PARTS = 20_000


def inline_parts_per_task(tasks: int | None) -> int:
    """The parts one task's result may carry in-line when the job runs about ``tasks`` tasks: an even share of
    :data:`INLINE_BUDGET_PARTS`, at most :data:`INLINE_MAX_PARTS`; the per-task cap alone when the count is not
    known."""
    if not tasks or tasks <= 0:
        return INLINE_MAX_PARTS
    return min(INLINE_MAX_PARTS, INLINE_BUDGET_PARTS // tasks)


class InlineBudget:
    """The in-line parts a driver still decodes and keeps, over all the results of one job: a result whose
    manifest does not fit is kept without it (its ``manifest_key`` names the stored copy every task writes, which
    the commit then streams). Guards the driver where the task count was not known in advance."""

    def __init__(self, parts: int | None = None):
        self.left = INLINE_BUDGET_PARTS if parts is None else parts
        self.dropped = 0

    def take(self, parts: int) -> bool:
        if parts > self.left:
            self.dropped += 1
            return False
        self.left -= parts
        return True


@dataclass(frozen=True, slots=True)  # slots: a manifest of 10,000 parts per file holds many
class Part:
    number: int
    etag: str
    size: int
    crc32: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.number, "etag": self.etag, "size": self.size}
        if self.crc32:
            out["crc32"] = self.crc32
        return out

    @classmethod
    def from_json(cls, value: Any, where: str, reader: Reader) -> "Part":
        r = reader.obj_of(value, where)
        return cls(r.int("n", minimum=1), r.str("etag"), r.int("size"), r.str("crc32", optional=True))


@dataclass(frozen=True, slots=True)  # slots: a manifest of 10,000 parts per file holds many
class PendingUpload:
    """One uncompleted multipart upload at its final key."""

    key: str
    upload_id: str
    parts: tuple[Part, ...]
    size: int
    rows: int | None = None
    partition: str = ""

    @property
    def expected_etag(self) -> str:
        return multipart_etag([p.etag for p in self.parts])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "uploadId": self.upload_id,
            "size": self.size,
            "parts": [p.to_json() for p in self.parts],
        }
        if self.rows is not None:
            out["rows"] = self.rows
        if self.partition:
            out["partition"] = self.partition
        return out

    @classmethod
    def from_json(cls, value: Any, where: str, reader: Reader) -> "PendingUpload":
        r = reader.obj_of(value, where)
        parts = r.list("parts", lambda v, w: Part.from_json(v, w, reader))
        return cls(
            key=r.str("key"),
            upload_id=r.str("uploadId"),
            parts=parts,
            size=r.int("size"),
            rows=r.int("rows", optional=True),
            partition=r.str("partition", optional=True) or "",
        )


@dataclass(frozen=True, slots=True)  # slots: a manifest of 10,000 parts per file holds many
class StagedFile:
    """A small file written as a plain object under the job's hidden prefix, waiting for a commit-time merge.

    ``key`` is where it would become visible if moved in as it is; ``staged_key`` is where it waits.
    """

    key: str
    staged_key: str
    size: int
    etag: str
    rows: int | None = None
    partition: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "stagedKey": self.staged_key, "size": self.size, "etag": self.etag}
        if self.rows is not None:
            out["rows"] = self.rows
        if self.partition:
            out["partition"] = self.partition
        return out

    @classmethod
    def from_json(cls, value: Any, where: str, reader: Reader) -> "StagedFile":
        r = reader.obj_of(value, where)
        return cls(
            key=r.str("key"),
            staged_key=r.str("stagedKey"),
            size=r.int("size"),
            etag=r.str("etag"),
            rows=r.int("rows", optional=True),
            partition=r.str("partition", optional=True) or "",
        )


@dataclass(frozen=True)
class TaskManifest:
    job_id: str
    bucket: str
    prefix: str
    task_id: int
    attempt: int
    nonce: str
    created_ms: int
    uploads: tuple[PendingUpload, ...] = ()
    staged: tuple[StagedFile, ...] = ()

    @property
    def destination(self) -> Destination:
        return Destination(self.bucket, self.prefix)

    @property
    def part_count(self) -> int:
        return sum(len(u.parts) for u in self.uploads)

    @property
    def inline_parts(self) -> int:
        """What carrying it in a task result costs, in parts: every upload part, and one per staged file."""
        return self.part_count + len(self.staged)

    @property
    def bytes(self) -> int:
        return sum(u.size for u in self.uploads) + sum(s.size for s in self.staged)

    def to_bytes(self) -> bytes:
        return dumps(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": MANIFEST_KIND,
            "version": MANIFEST_VERSION,
            "jobId": self.job_id,
            "bucket": self.bucket,
            "prefix": self.prefix,
            "taskId": self.task_id,
            "attempt": self.attempt,
            "nonce": self.nonce,
            "created": self.created_ms,
            "uploads": [u.to_json() for u in self.uploads],
            "staged": [s.to_json() for s in self.staged],
        }

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, destination: Destination, job_id: str) -> "TaskManifest":
        """Decode and validate: refuses anything outside ``destination`` or belonging to another job (I7)."""
        obj = loads_object(data, what="task manifest", where=where)
        return cls.from_json(obj, where=where, destination=destination, job_id=job_id)

    @classmethod
    def from_json(cls, obj: dict[str, Any], *, where: str, destination: Destination, job_id: str) -> "TaskManifest":
        check_kind(obj, kind=MANIFEST_KIND, versions=(MANIFEST_VERSION,), what="task manifest", where=where)
        r = Reader(obj, what="task manifest", where=where)
        manifest = cls(
            job_id=r.str("jobId"),
            bucket=r.str("bucket"),
            prefix=r.str("prefix") if obj.get("prefix") != "" else "",
            task_id=r.int("taskId"),
            attempt=r.int("attempt"),
            nonce=r.str("nonce"),
            created_ms=r.int("created"),
            uploads=r.list("uploads", lambda v, w: PendingUpload.from_json(v, w, r)),
            staged=r.list("staged", lambda v, w: StagedFile.from_json(v, w, r), optional=True),
        )
        manifest.validate(destination=destination, job_id=job_id, where=where)
        return manifest

    def validate(self, *, destination: Destination, job_id: str, where: str = "<memory>") -> None:
        """Invariant I7: the manifest may only name this job's keys inside this destination."""
        if self.bucket != destination.bucket:
            raise ManifestScopeError(
                f"task manifest at {where} names bucket {self.bucket!r}, but the job writes to "
                f"{destination.bucket!r}; refused, nothing completed or deleted for it"
            )
        if self.prefix != destination.prefix:
            raise ManifestScopeError(
                f"task manifest at {where} belongs to destination prefix {self.prefix!r}, not "
                f"{destination.prefix!r}; refused"
            )
        if self.job_id != job_id:
            raise ManifestScopeError(
                f"task manifest at {where} belongs to job {self.job_id}, not {job_id}; refused"
            )
        paths = JobPaths(destination, job_id)
        seen: set[str] = set()
        for upload in self.uploads:
            _check_data_key(upload.key, destination=destination, job_id=job_id, where=where)
            if upload.key in seen:
                raise ManifestCorruptError(f"task manifest at {where} lists key {upload.key!r} twice; refused")
            seen.add(upload.key)
            _check_parts(upload, where)
        for staged in self.staged:
            _check_data_key(staged.key, destination=destination, job_id=job_id, where=where)
            if not staged.staged_key.startswith(paths.staged) or not destination.contains(staged.staged_key):
                raise ManifestScopeError(
                    f"task manifest at {where} stages {staged.staged_key!r} outside its job's hidden prefix; refused"
                )
            if staged.key in seen:
                raise ManifestCorruptError(f"task manifest at {where} lists key {staged.key!r} twice; refused")
            seen.add(staged.key)


def _check_data_key(key: str, *, destination: Destination, job_id: str, where: str) -> None:
    if not destination.contains(key):
        raise ManifestScopeError(
            f"task manifest at {where} names key {key!r}, which is outside {destination.uri}; refused, "
            "nothing completed or deleted for it"
        )
    if is_hidden_key(destination, key):
        raise ManifestScopeError(f"task manifest at {where} names hidden key {key!r} as data; refused")
    owner = job_id_of_key(destination, key)
    if owner != job_id:
        raise ManifestScopeError(
            f"task manifest at {where} names key {key!r}, which does not carry job id {job_id}; refused"
        )


def _check_parts(upload: PendingUpload, where: str) -> None:
    numbers = [p.number for p in upload.parts]
    if not numbers:
        raise ManifestCorruptError(f"task manifest at {where}: upload of {upload.key!r} has no parts")
    if numbers != list(range(1, len(numbers) + 1)) or len(numbers) > MAX_PARTS:
        raise ManifestCorruptError(
            f"task manifest at {where}: parts of {upload.key!r} must be numbered 1..N without gaps (N <= 10,000)"
        )
    if sum(p.size for p in upload.parts) != upload.size:
        raise ManifestCorruptError(f"task manifest at {where}: parts of {upload.key!r} do not add up to its size")


@dataclass(frozen=True)
class TaskResult:
    """What a committed task attempt hands back to the driver: small and picklable.

    Small manifests travel inline (the stored copy stays, for recovery and cleanup), so that the driver does
    not re-read N manifests; large ones are referenced by key and streamed at commit.
    """

    job_id: str
    task_id: int
    attempt: int
    manifest_key: str
    manifest: TaskManifest | None = field(default=None, repr=False)
    files: int = 0
    bytes: int = 0
    rows: int | None = None
    partitions: tuple[str, ...] = ()

    def to_bytes(self) -> bytes:
        return dumps(
            {
                "kind": "mpcommit.TaskResult",
                "version": 1,
                "jobId": self.job_id,
                "taskId": self.task_id,
                "attempt": self.attempt,
                "manifestKey": self.manifest_key,
                "manifest": self.manifest.to_json() if self.manifest else None,
                "files": self.files,
                "bytes": self.bytes,
                "rows": self.rows,
                "partitions": list(self.partitions),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, destination: Destination, job_id: str,
                   budget: InlineBudget | None = None) -> "TaskResult":
        """Decode a task's result; with ``budget``, its in-line manifest only while the budget has room (else
        the result names the stored copy alone, and the manifest is never decoded)."""
        where = "a task result"
        obj = loads_object(data, what="task result", where=where)
        check_kind(obj, kind="mpcommit.TaskResult", versions=(1,), what="task result", where=where)
        r = Reader(obj, what="task result", where=where)
        inline = obj.get("manifest")
        manifest = (
            TaskManifest.from_json(inline, where=where, destination=destination, job_id=job_id)
            if isinstance(inline, dict) and (budget is None or budget.take(_inline_parts(inline)))
            else None
        )
        return cls(
            job_id=r.str("jobId"),
            task_id=r.int("taskId"),
            attempt=r.int("attempt"),
            manifest_key=r.str("manifestKey"),
            manifest=manifest,
            files=r.int("files"),
            bytes=r.int("bytes"),
            rows=r.int("rows", optional=True),
            partitions=r.list("partitions", lambda v, w: str(v), optional=True),
        )


def _inline_parts(manifest: dict[str, Any]) -> int:
    """The parts of an encoded manifest (a staged file counts as one), counted without decoding it; a malformed
    one counts as nothing here and is refused, by name, when decoded."""
    uploads, staged = manifest.get("uploads"), manifest.get("staged")
    n = len(staged) if isinstance(staged, list) else 0
    if isinstance(uploads, list):
        n += sum(len(u["parts"]) for u in uploads if isinstance(u, dict) and isinstance(u.get("parts"), list))
    return n


def merge_rows(values: Iterable[int | None]) -> int | None:
    """Sum of row counts, or None when any is unknown."""
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total
