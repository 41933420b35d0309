"""Recovering the jobs under a destination: finish what was committing, roll back what is old and
uncommitted. Driven by ``mpcommit jobs recover`` and usable from Python; the jobs and their states come from
:mod:`.inventory`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from ..errors import MpcommitError
from ..modes import JobState
from ..options import S3Options
from ..sizing import short_duration
from ..store.s3 import S3Store, store_for
from .commit import DEFAULT_COMMIT_THREADS, CommitReport, JobCommitter
from .inventory import JobStatus, list_jobs
from .layout import Destination, JobPaths, parse_uri
from .records.job import CommitJournal


class RecoveryOutcome(str, Enum):
    """What ``recover`` did to one job."""

    FINISHED = "finished"        # its commit finished from the journal, or a committed job's records removed
    ROLLED_BACK = "rolled_back"  # old enough, or named: its uploads aborted, its records removed
    SKIPPED = "skipped"          # writing and younger than the threshold: it may be live
    FAILED = "failed"


@dataclass(frozen=True)
class RecoveryAction:
    job_id: str
    action: RecoveryOutcome
    detail: str
    report: CommitReport | None = None


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
    """Finish every committing job (or only ``job_id``) from its journal; roll back uncommitted jobs that showed
    no sign of life (a record or a new upload) for ``older_than`` seconds, or the named job. A job active more
    recently is left alone: it may be live."""
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
            action = RecoveryAction(status.job_id, RecoveryOutcome.FAILED, str(exc))
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
        return RecoveryAction(status.job_id, RecoveryOutcome.FINISHED, f"committed {report.files} files", report)
    if status.state is JobState.COMMITTED:
        # _SUCCESS names the job, so its files are complete; only records (and maybe loser uploads) remain.
        aborted, deleted = committer.discard_all()
        return RecoveryAction(status.job_id, RecoveryOutcome.FINISHED,
                              f"cleaned {deleted} records, aborted {aborted} uploads")
    # Judged by its last sign of life, not its age, as the upload cleanup judges it: a job that started long
    # ago and is still writing files is live, and rolling it back would cut it off mid-write.
    idle = status.idle_seconds(now)
    quiet_enough = older_than is not None and idle is not None and idle >= older_than
    if named or quiet_enough:
        report = committer.abort()
        return RecoveryAction(status.job_id, RecoveryOutcome.ROLLED_BACK,
                              f"aborted {report.aborted_uploads} uploads, removed {report.deleted_records} records")
    if older_than is not None and idle is not None:
        why = (f"it was active {short_duration(idle)} ago, within --older-than, so it may still be writing; "
               "pass --job to roll it back")
    else:
        why = "it may still be writing; pass --older-than or --job to roll it back"
    return RecoveryAction(status.job_id, RecoveryOutcome.SKIPPED, why)
