"""Recovering the jobs under a destination: finish what was committing, go on with interrupted rollbacks, roll
back what is old and uncommitted. Driven by ``mpcommit jobs recover`` and usable from Python; the jobs and
their states come from :mod:`.inventory`, and every decision that destroys or completes goes through the
job's commit barrier and its table's commit order (:mod:`.commit`, :mod:`.order`), so that any number of
recoveries and the job's own driver may act on one job at once: exactly one finishes it, the others say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from ..errors import JobRolledBackError, JobStateError, MpcommitError, NoSuchKeyError
from ..modes import JobState
from ..options import OrderSettings, S3Options
from ..units import short_duration
from ..store.s3 import S3Store, store_for
from .commit import DEFAULT_COMMIT_THREADS, CommitReport, JobCommitter
from .inventory import JobStatus, list_table_jobs
from .layout import Destination, Table, job_id_of_key, parse_uri, table_of
from .order import TableOrder
from .records.job import CommitJournal, JobRollback


class RecoveryOutcome(str, Enum):
    """What ``recover`` did to one job."""

    FINISHED = "finished"        # its commit finished from the journal (here or by another process), or a
    #                              committed job's records removed
    ROLLED_BACK = "rolled_back"  # old enough, named, or its rollback was interrupted: uploads aborted, records gone
    SKIPPED = "skipped"          # writing and younger than the threshold: it may be live
    FAILED = "failed"
    WOULD_FINISH = "would_finish"        # dry run
    WOULD_ROLL_BACK = "would_roll_back"  # dry run


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
    dry_run: bool = False,
    order: OrderSettings | None = None,
    finish_commits: bool = True,
) -> list[RecoveryAction]:
    """Finish every committing job (or only ``job_id``) from its journal; roll back uncommitted jobs that showed
    no sign of life (a record, its driver's heartbeat or a new upload) for ``older_than`` seconds, by the
    store's clock, or the named job. A job active more recently is left alone: it may be live. The jobs of the
    partition destinations inside this one are found too (:func:`~.inventory.list_table_jobs`). ``dry_run`` says what would be done and changes nothing. ``finish_commits=False`` leaves
    interrupted commits alone (reported as skipped: finishing one makes data visible, a decision some sites
    keep for a person), while still ending interrupted rollbacks and removing dead jobs' records."""
    dest = parse_uri(destination) if isinstance(destination, str) else destination
    store = store or store_for(s3 or S3Options())
    actions: list[RecoveryAction] = []
    now = store.server_time(dest.bucket)
    # One reading of each table's order for all its jobs: its entries and ends, which never change once written,
    # are read once (what may still change -- a place's end not yet written, the listing -- is asked every time).
    orders: dict[Table, TableOrder] = {}

    def order_of(destination: Destination) -> TableOrder:
        table = table_of(destination)
        if table not in orders:
            orders[table] = TableOrder(store, table, order)
        return orders[table]

    for status in list_table_jobs(store, dest, order=order, table_order=order_of(dest)):
        if job_id is not None and status.job_id != job_id:
            continue
        committer = JobCommitter(store, status.destination, status.job_id, threads=threads, order=order,
                                 table_order=order_of(status.destination))
        try:
            if status.state is JobState.COMMITTING and not finish_commits:
                action = RecoveryAction(status.job_id, RecoveryOutcome.SKIPPED, "its commit was interrupted: finish "
                                        f"it with `mpcommit jobs recover {status.destination.uri} --job {status.job_id}`")
            else:
                action = _recover_one(committer, status, named=job_id is not None, older_than=older_than, now=now,
                                      dry_run=dry_run)
        except MpcommitError as exc:
            action = RecoveryAction(status.job_id, RecoveryOutcome.FAILED, " ".join(str(exc).split()))
        actions.append(action)
        if on_action:
            on_action(action)
    return actions


def _recover_one(committer: JobCommitter, status: JobStatus, *, named: bool, older_than: float | None, now: float,
                 dry_run: bool) -> RecoveryAction:
    job = status.job_id
    if status.state in (JobState.COMMITTING, JobState.ROLLING_BACK):
        # The record that decided its state, as the listing read it: a journal is written once and never replaced
        # (only removed, once the job ended -- which the finisher asks afresh once it holds the job's turn), a
        # rollback record is claimed again by the rollback itself. Read here only where the listing could not.
        claim, etag = status.claim, status.claim_etag
        if claim is None:
            try:
                claim, etag = committer.work.read_claim_and_etag()
            except NoSuchKeyError:
                claim = None
        if claim is None:
            return RecoveryAction(job, RecoveryOutcome.FINISHED, "its commit was ended by another process meanwhile")
        if isinstance(claim, JobRollback):
            if dry_run:
                return RecoveryAction(job, RecoveryOutcome.WOULD_ROLL_BACK, f"its rollback ({claim.reason}) was "
                                      "interrupted: would abort its uploads and remove its records")
            report = committer.rollback(reason=claim.reason)
            return RecoveryAction(job, RecoveryOutcome.ROLLED_BACK, f"finished its interrupted rollback: aborted "
                                  f"{report.aborted_uploads} uploads, removed {report.deleted_records} records")
        if dry_run:
            return RecoveryAction(job, RecoveryOutcome.WOULD_FINISH, _preview(committer, claim))
        try:
            report = committer.finish(claim, etag=etag)
        except JobRolledBackError as exc:
            return RecoveryAction(job, RecoveryOutcome.ROLLED_BACK, str(exc))
        if report.finished_elsewhere:
            return RecoveryAction(job, RecoveryOutcome.FINISHED, "its commit was finished by another process", report)
        return RecoveryAction(job, RecoveryOutcome.FINISHED, f"committed {report.files} files", report)
    if status.state is JobState.COMMITTED:
        # _SUCCESS names the job, so its files are complete; only records (and maybe loser uploads) remain.
        if dry_run:
            return RecoveryAction(job, RecoveryOutcome.WOULD_FINISH, f"committed: would remove its {status.records} "
                                  "records and abort its leftover uploads")
        aborted, deleted = committer.discard_all()
        return RecoveryAction(job, RecoveryOutcome.FINISHED, f"cleaned {deleted} records, aborted {aborted} uploads")
    # Judged by its last sign of life, not its age, as the upload cleanup judges it: a job that started long
    # ago and is still writing files is live, and rolling it back would cut it off mid-write.
    idle = status.idle_seconds(now)
    quiet_enough = older_than is not None and idle is not None and idle >= older_than
    if named or quiet_enough:
        reason = "named in `recover --job`" if named else f"no sign of life for {short_duration(idle or 0)}"
        if dry_run:
            return RecoveryAction(job, RecoveryOutcome.WOULD_ROLL_BACK,
                                  f"{reason}: would abort {status.pending_uploads} uploads and remove "
                                  f"{status.records} records")
        try:
            report = committer.rollback(reason=f"recover: {reason}")
        except JobStateError:
            return RecoveryAction(job, RecoveryOutcome.SKIPPED, "it started committing meanwhile: run recover again "
                                  "to finish it")
        if report.ended_before:
            left = (f"; what was left of it went: aborted {report.aborted_uploads} uploads, removed "
                    f"{report.deleted_records} records") if report.aborted_uploads or report.deleted_records else ""
            return RecoveryAction(job, RecoveryOutcome.FINISHED, "it ended meanwhile, in another process's hands "
                                  "(its driver committed it): nothing rolled back" + left)
        return RecoveryAction(job, RecoveryOutcome.ROLLED_BACK,
                              f"aborted {report.aborted_uploads} uploads, removed {report.deleted_records} records")
    if older_than is not None and idle is not None:
        why = (f"it was active {short_duration(idle)} ago, within --older-than, so it may still be writing; "
               "pass --job to roll it back")
    else:
        why = "it may still be writing; pass --older-than or --job to roll it back"
    return RecoveryAction(job, RecoveryOutcome.SKIPPED, why)


def _preview(committer: JobCommitter, journal: CommitJournal) -> str:
    """What finishing the journal would do: uploads still to complete, objects it would delete."""
    from .commit.context import CommitContext
    from .commit.replacing import Replacer

    store, dest = committer.store, committer.destination
    pending = sum(1 for u in store.list_multipart_uploads(dest.bucket, dest.root)
                  if job_id_of_key(dest, u.key) == committer.job_id)
    what = f"would complete {pending} pending uploads"
    entry = committer.order.entry(journal.position) if journal.position is not None else None
    if journal.replace and entry is not None:
        with CommitContext(0) as context:
            older = Replacer(store, dest, committer.job_id, context, lambda *_: None).older_objects(
                journal, entry, committer.order)
        what += f" and delete {len(older)} older objects in the scope it replaces"
        if older:
            what += f" (e.g. s3://{dest.bucket}/{older[0]})"
    if journal.delete:
        what += f" and delete its {len(journal.delete)} merged sources"
    return what + "; nothing was changed"
