"""Finding jobs under a destination, and recovering them: finish what was committing, roll back what is
old and uncommitted. Driven by ``mpcommit jobs list|recover`` and usable from Python."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ..errors import ManifestError, MpcommitError, NoSuchKeyError
from ..modes import JobState
from ..options import S3Options
from ..store.s3 import S3Store, store_for
from .commit import DEFAULT_COMMIT_THREADS, CommitReport, JobCommitter
from .layout import Destination, JobPaths, job_id_of_hidden_key, job_id_of_key, parse_uri
from .records.job import CommitJournal, JobDescriptor
from .records.success import SuccessData

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: JobState
    created_ms: int | None
    records: int
    pending_uploads: int
    pending_bytes: int | None = None
    mode: str | None = None
    purpose: str | None = None

    def age_seconds(self, now: float | None = None) -> float | None:
        if self.created_ms is None:
            return None
        return max(0.0, (now or time.time()) - self.created_ms / 1000)


@dataclass(frozen=True)
class RecoveryAction:
    job_id: str
    action: str  # "finished", "rolled_back", "skipped", "failed"
    detail: str
    report: CommitReport | None = None


def _read_success(store: S3Store, destination: Destination) -> SuccessData | None:
    try:
        return SuccessData.from_bytes(store.get_object(destination.bucket, destination.success_key),
                                      where=f"s3://{destination.bucket}/{destination.success_key}")
    except (NoSuchKeyError, ManifestError):
        return None


def list_jobs(store: S3Store, destination: Destination, *, with_bytes: bool = False) -> list[JobStatus]:
    """Jobs that have records under the destination's hidden prefix, with their state and pending uploads."""
    records: dict[str, list[str]] = defaultdict(list)
    oldest: dict[str, datetime] = {}
    for obj in store.list_objects(destination.bucket, destination.hidden_root):
        job_id = job_id_of_hidden_key(destination, obj.key)
        if job_id is None:
            continue
        records[job_id].append(obj.key)
        if obj.last_modified is not None and (job_id not in oldest or obj.last_modified < oldest[job_id]):
            oldest[job_id] = obj.last_modified
    uploads: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for u in store.list_multipart_uploads(destination.bucket, destination.root):
        owner = job_id_of_key(destination, u.key)
        if owner in records:
            uploads[owner].append((u.key, u.upload_id))
    success = _read_success(store, destination)
    out = []
    for job_id, keys in sorted(records.items()):
        paths = JobPaths(destination, job_id)
        descriptor = None
        if paths.descriptor in keys:
            try:
                descriptor = JobDescriptor.from_bytes(store.get_object(destination.bucket, paths.descriptor),
                                                      where=paths.descriptor, destination=destination, job_id=job_id)
            except (ManifestError, NoSuchKeyError) as exc:
                log.warning("unreadable job descriptor %s: %s", paths.descriptor, exc)
        if paths.journal in keys:
            state = JobState.COMMITTING
        elif success is not None and success.job_id == job_id:
            state = JobState.COMMITTED
        else:
            state = JobState.WRITING
        created = descriptor.created_ms if descriptor else (
            int(oldest[job_id].timestamp() * 1000) if job_id in oldest else None)
        pending_bytes = None
        if with_bytes:
            pending_bytes = sum(size for key, uid in uploads[job_id]
                                for _n, size, _e in store.list_parts(destination.bucket, key, uid))
        out.append(JobStatus(job_id, state, created, len(keys), len(uploads[job_id]), pending_bytes,
                             descriptor.mode.value if descriptor else None, descriptor.purpose if descriptor else None))
    return out


def recover(
    destination: Destination | str,
    *,
    s3: S3Options | None = None,
    store: S3Store | None = None,
    job_id: str | None = None,
    older_than: float | None = None,
    threads: int = DEFAULT_COMMIT_THREADS,
    on_action: Callable[[RecoveryAction], None] | None = None,
) -> list[RecoveryAction]:
    """Finish every committing job (or only ``job_id``) from its journal; roll back uncommitted jobs older
    than ``older_than`` seconds, or the named job. A job that is writing and younger is left alone: it may be
    live."""
    dest = parse_uri(destination) if isinstance(destination, str) else destination
    store = store or store_for(s3 or S3Options())
    actions: list[RecoveryAction] = []
    now = time.time()
    for status in list_jobs(store, dest):
        if job_id is not None and status.job_id != job_id:
            continue
        committer = JobCommitter(store, dest, status.job_id, threads=threads)
        try:
            action = _recover_one(store, dest, status, committer, named=job_id is not None, older_than=older_than, now=now)
        except MpcommitError as exc:
            action = RecoveryAction(status.job_id, "failed", str(exc))
        actions.append(action)
        if on_action:
            on_action(action)
    return actions


def _recover_one(store: S3Store, dest: Destination, status: JobStatus, committer: JobCommitter, *,
                 named: bool, older_than: float | None, now: float) -> RecoveryAction:
    paths = JobPaths(dest, status.job_id)
    if status.state is JobState.COMMITTING:
        journal = CommitJournal.from_bytes(store.get_object(dest.bucket, paths.journal), where=paths.journal,
                                           destination=dest, job_id=status.job_id)
        report = committer.finish(journal)
        return RecoveryAction(status.job_id, "finished", f"committed {report.files} files", report)
    if status.state is JobState.COMMITTED:
        # _SUCCESS names the job, so its files are complete; only records (and maybe loser uploads) remain.
        aborted, deleted = committer.discard_all()
        return RecoveryAction(status.job_id, "finished", f"cleaned {deleted} records, aborted {aborted} uploads")
    age = status.age_seconds(now)
    old_enough = older_than is not None and age is not None and age >= older_than
    if named or old_enough:
        report = committer.abort()
        return RecoveryAction(status.job_id, "rolled_back",
                              f"aborted {report.aborted_uploads} uploads, removed {report.deleted_records} records")
    why = "it may still be writing; pass --older-than or --job to roll it back"
    return RecoveryAction(status.job_id, "skipped", why)

