"""The job commit's steps in order, as the driver runs them; the steps themselves live in the modules beside this
one and in the table's commit order (:mod:`mpcommit.protocol.order`).

A commit: validate every manifest -> take a place in the table's order -> (a versioned write: wait for its
application's earlier places, commit nothing if one committed the version) -> (a compaction: give up if an earlier
job replaced its sources) -> claim the journal -> the :mod:`.finisher` carries the journal out, as ``recover``
does: take the job's finishing turn (:mod:`.turn`) -> (an overwrite: wait for the earlier jobs touching its scope)
-> complete -> delete what it replaces -> abort leftovers -> ``_SUCCESS`` -> record its end in the order -> remove
its records. From the turn on, each step that cannot be undone is fenced (:mod:`.fence`). A :mod:`.rollback`
claims the journal key first, so that a commit and a rollback of one job can never both proceed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ...errors import (
    CommitConflictError,
    CommitFailedError,
    CommitStateUnknownError,
    JobRolledBackError,
    JobStateError,
    ManifestError,
    MpcommitError,
    TxnVersionError,
)
from ...modes import CommitMode, CommitOutcome
from ...options import OrderSettings
from ...pool import ProgressHook
from ...store.s3 import S3Store
from .. import faults
from ..heartbeat import Heartbeat
from ..layout import Destination
from ..order import OrderSnapshot, TableOrder
from ..records.job import CommitJournal, DeleteEntry, JobDescriptor, JobRollback, MergedFile
from ..records.manifest import TaskResult
from ..records.order import OrderEntry, Outcome, Txn, TxnRecord
from .cleanup import JobCleanup
from .committed import HandedOverResults
from .context import CommitContext
from .finisher import Finisher
from .journal import build_journal, claim_journal, validate_winners, winners_by_task
from .replacing import Replacer
from .reports import AbortReport, CommitReport
from .rollback import Rollback
from .work import JobWork

log = logging.getLogger(__name__)

DEFAULT_COMMIT_THREADS = 32


class JobCommitter:
    """Commit, roll back and finish one job of one destination: the first commit up to its journal is here; the
    journal is carried out by a :class:`~.finisher.Finisher` (the driver's and ``recover``'s alike), a rollback
    by a :class:`~.rollback.Rollback`. Holds no state between calls but its settings and the job's heartbeat.

    ``threads``: the commit's requests in flight (0: all on the caller's thread, for deterministic tests);
    ``order``: how the job waits for the jobs before it in its table's commit order; ``table_order``: that order
    as this process reads it already (:class:`~.work.JobWork`).
    """

    def __init__(self, store: S3Store, destination: Destination, job_id: str, *,
                 threads: int = DEFAULT_COMMIT_THREADS, progress: ProgressHook | None = None,
                 order: OrderSettings | None = None, table_order: TableOrder | None = None):
        self.work = JobWork(store, destination, job_id, threads=threads, progress=progress, order=order,
                            table_order=table_order)
        self.finisher = Finisher(self.work, self._take_over)
        # Shorthands for the commit below.
        self.store, self.destination, self.job_id = store, destination, job_id
        self.paths, self.table, self.order = self.work.paths, self.work.table, self.work.order
        self.threads, self.progress, self.manifests = self.work.threads, self.work.progress, self.work.manifests

    @property
    def heartbeat(self) -> Heartbeat | None:
        """The job's heartbeat while this process works for it (the Job's own, from Job.create)."""
        return self.work.heartbeat

    @heartbeat.setter
    def heartbeat(self, heartbeat: Heartbeat | None) -> None:
        self.work.heartbeat = heartbeat

    # ------------------------------------------------------------ commit
    def commit(self, descriptor: JobDescriptor, results: Sequence[TaskResult], *, ignored: bool = False,
               extra_timings: dict[str, float] | None = None, delete: Sequence[DeleteEntry] = (),
               merged: Sequence[MergedFile] = (), since: OrderSnapshot | None = None,
               when_ended: Callable[[int], None] | None = None, txn: Txn | None = None) -> CommitReport:
        """``txn``: the application version this commit records (idempotent re-runs, a stream's micro-batch):
        it commits only after every earlier place of its application ended, and only if none of them committed
        this version or a newer one -- else it is a no-op that says so (``duplicate_of``) or, for an older version,
        TxnVersionError.

        ``delete`` names objects (pinned by ETag) to remove once every new file is complete: the sources
        of a compaction, which read the table after ``since``. ``merged`` names files merged from the winners'
        staged files (a commit-time merge): they are completed instead of moving those staged files in.

        ``when_ended(position)`` is called once the job's end is recorded in the table's order -- committed for
        good -- and before its records are removed, so that a caller's own record of the commit (the streaming
        sink's progress) is written beside that removal instead of after it. It must start its work elsewhere
        and return at once, without raising: the caller waits for that work and answers for its failures."""
        t0 = time.monotonic()
        timings: dict[str, float] = dict(extra_timings or {})
        by_task = winners_by_task(results, self.paths)
        with CommitContext(self.threads) as context:
            if ignored:
                aborted, _deleted = JobCleanup(self.store, self.destination, self.job_id, context).discard_all()
                mode = CommitMode.of(descriptor.mode, descriptor.partition_overwrite)
                return CommitReport(self.job_id, self.destination.uri, mode, CommitOutcome.NOT_COMMITTED,
                                    ignored=True, aborted_uploads=aborted)
            validate_winners(by_task, self.manifests, context, merged=merged)
            timings["validate"] = time.monotonic() - t0
            journal = build_journal(descriptor, self.destination, by_task, delete=delete, merged=merged)
            if journal.replace:
                t = time.monotonic()
                Replacer(self.store, self.destination, self.job_id, context, self.progress).check_scope(journal.replace)
                timings["check_scope"] = time.monotonic() - t
            t = time.monotonic()
            partitions = sorted({p for r in by_task.values() for p in r.partitions})
            entry = self.work.take_place(journal, partitions, txn)
            try:
                faults.checkpoint("commit.after_place")
                if txn is not None:
                    self._settle_txn(entry, txn)
                self.order.refuse_beside_others(entry)  # a store without conditional writes: refused, never waited
                if entry.replaces:
                    # An overwrite waits for the earlier jobs touching what it replaces here, before its journal:
                    # one that outwaits its max wait fails by name with nothing visible and can be run again, rather
                    # than stopping past its journal with an outcome nobody knows until that job ends. (Every
                    # earlier place exists already -- places are taken in turn -- so the wait after the journal,
                    # which stays for a journal written by an older mpcommit, finds them ended.)
                    waited = time.monotonic()
                    self.order.wait_for_earlier(entry, entry.replaces, take_over=self._take_over,
                                                progress=self.progress)
                    timings["wait"] = time.monotonic() - waited
                if since is not None:
                    self._refuse_conflict(entry, since)
                journal = replace(journal, position=entry.position)
                claim_journal(self.store, self.destination, journal)
            except CommitStateUnknownError:
                raise  # the journal may exist: its place stays open, and `recover` decides
            except _Duplicate as found:
                self.order.end(entry, Outcome.ROLLED_BACK, reason=found.reason)
                aborted, _deleted = JobCleanup(self.store, self.destination, self.job_id, context).discard_all()
                mode = CommitMode.of(descriptor.mode, descriptor.partition_overwrite)
                return CommitReport(self.job_id, self.destination.uri, mode, CommitOutcome.NOT_COMMITTED,
                                    ignored=True, aborted_uploads=aborted, duplicate_of=found.record)
            except BaseException as exc:
                # Refused before the journal: not committed, so the place ends (later jobs need not wait for it) --
                # unless it ended already: a rollback that claimed the journal key after this place was taken ended
                # it, and the order's collection may have covered it since (a process that lost its job records
                # nothing more, I10). A rollback that ran to its end before this place was taken could not end it:
                # the place is this process's own, open, and would hold every later place of its application back.
                try:
                    if self.order.ended(entry.position) is None:
                        self.order.end(entry, Outcome.ROLLED_BACK, reason=_short(exc))
                except MpcommitError as failed:
                    log.warning("job %s: could not record the end of its place %d (%s); a later job will take it "
                                "for dead and end it", self.job_id, entry.position, failed)
                if isinstance(exc, JobRolledBackError):
                    self.store.delete_objects(self.destination.bucket, [self.paths.heartbeat])
                raise
            timings["order"] = time.monotonic() - t
            self.progress("journal", 1, 1)
            inline = {r.manifest_key: r.manifest for r in by_task.values() if r.manifest is not None}
            # Past the journal the in-line manifests are held by ``inline`` alone where the caller handed its
            # results over: each is dropped there as soon as its files are placed (manifests(consume=True)).
            by_task.clear()
            if isinstance(results, HandedOverResults):
                results.clear()
            return self.finisher.finish_own(journal, context, entry=entry, inline=inline, timings=timings, started=t0,
                                            when_ended=when_ended)

    def _settle_txn(self, entry: OrderEntry, txn: Txn) -> None:
        """Before the journal: wait for the earlier places of this application to end, then commit only a version
        newer than every one they committed (the way delta-rs decides a transaction's app id and version)."""
        # The view that showed every earlier place of the application ended answers for them: places are taken in
        # turn, so none of the application's can appear below ours after it.
        ended = self.order.wait_for_earlier(entry, (), take_over=self._take_over, progress=self.progress,
                                            blocks=lambda e: e.txn is not None and e.txn.app_id == txn.app_id)
        newest = self.order.txn_state(txn.app_id, below=entry.position, view=ended).newest
        if newest is None or newest.version < txn.version:
            return
        if newest.version == txn.version:
            raise _Duplicate(newest, f"version {txn.version} of application {txn.app_id!r} was committed already, by "
                                     f"job {newest.job_id} (place {newest.position})")
        raise TxnVersionError(
            f"job {self.job_id} was not committed: it writes version {txn.version} of application {txn.app_id!r} to "
            f"{self.table.uri}, older than version {newest.version}, which job {newest.job_id} committed there (place "
            f"{newest.position}). Versions of one application commit in increasing order; nothing of it is visible.")

    def _refuse_conflict(self, entry: OrderEntry, since: OrderSnapshot) -> None:
        found = self.order.conflict(entry, since)
        if found is None:
            return
        if isinstance(found, OrderEntry):
            what = "an overwrite" if found.replaces else "a compaction"
            raise CommitConflictError(
                f"job {self.job_id} ({entry.purpose.value}) was not committed: {what}, job {found.job_id} (place "
                f"{found.position} in the commit order of {self.table.uri}), changed the files it was made from "
                "while it ran. Nothing of it is visible; run it again.",
                job_id=self.job_id, other_job_id=found.job_id, destination=self.destination.uri)
        raise CommitConflictError(
            f"job {self.job_id} ({entry.purpose.value}) was not committed: {found}. Nothing of it is visible; run it again.",
            job_id=self.job_id, other_job_id="", destination=self.destination.uri)

    # ------------------------------------------------------------ finish, recover, roll back
    def finish(self, journal: CommitJournal, *, role: str = "recover", etag: str | None = None) -> CommitReport:
        """Carry out a journal, as ``recover`` does: see :meth:`.finisher.Finisher.finish` (``etag``: the ETag the
        journal was read with, where known)."""
        return self.finisher.finish(journal, role=role, etag=etag)

    def recover_job(self, *, reason: str, role: str = "recover") -> CommitReport | AbortReport:
        """Finish this job from its journal, go on with its interrupted rollback, or roll it back when its
        commit never began (JobStateError if it begins meanwhile)."""
        claim, etag = self.work.read_claim_and_etag()
        if isinstance(claim, CommitJournal):
            return self.finish(claim, role=role, etag=etag)
        return self.rollback(reason=reason)

    def read_claim(self) -> CommitJournal | JobRollback | None:
        """What holds the job's journal key: its commit journal, the record of its rollback, or nothing."""
        return self.work.read_claim()

    def rollback(self, *, reason: str) -> AbortReport:
        """Roll the job back (:meth:`.rollback.Rollback.run`): never one that committed."""
        return Rollback(self.work).run(reason=reason)

    def stop_commit(self, *, reason: str) -> bool:
        """A rollback's first step (:meth:`.rollback.Rollback.stop_commit`): False when the job had ended."""
        return Rollback(self.work).stop_commit(reason=reason)

    def abort(self) -> AbortReport:
        """Roll back a job whose commit has not begun (the driver's own ``job.abort()``)."""
        return self.rollback(reason="aborted by its driver")

    def discard_all(self) -> tuple[int, int]:
        """Abort every upload of a committed job that is left, and remove its records: (aborted, deleted)."""
        return Rollback(self.work).discard_all()

    # ------------------------------------------------------------ another job, dead, in the way
    def _take_over(self, other: OrderEntry, *, why: str = "is before it") -> None:
        """Finish or roll back another job of the table that went silent: one before this one that it waits for
        (TableOrder.wait_for_earlier), or a dead one holding the order's collection back (collect_garbage)."""
        committer = JobCommitter(self.store, self.table.destination(other.destination), other.job_id,
                                 threads=self.threads, order=self.order.settings, table_order=self.order)
        log.warning("job %s: job %s, which %s in the commit order of %s, has been silent for %.0f s; finishing or "
                    "rolling it back", self.job_id, other.job_id, why, self.table.uri,
                    self.order.settings.lease_seconds)
        try:
            committer.recover_job(reason=f"silent for {self.order.settings.lease_seconds:.0f} s; taken over by job "
                                         f"{self.job_id}", role=f"take-over by job {self.job_id}")
        except JobStateError:
            pass  # it started committing meanwhile: alive after all, waited for again
        except (ManifestError, CommitStateUnknownError) as exc:
            raise CommitFailedError(
                f"job {self.job_id} cannot go on: job {other.job_id}, before it in the commit order of "
                f"{self.table.uri}, is dead and could not be finished ({exc}). Run `mpcommit jobs recover "
                f"{self.table.destination(other.destination).uri} --job {other.job_id}`.") from exc


class _Duplicate(MpcommitError):
    """A commit whose application version was committed already: it ends as a no-op (never raised to a caller)."""

    def __init__(self, record: TxnRecord, reason: str):
        super().__init__(reason)
        self.record = record
        self.reason = reason


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."

