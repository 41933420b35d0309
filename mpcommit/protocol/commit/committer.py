"""The job commit's steps in order, for a first commit and for ``recover`` alike; the steps themselves live in
the modules beside this one (journal, placing, replacing, cleanup) and in the table's commit order
(:mod:`mpcommit.protocol.order`).

A commit: validate every manifest -> take a place in the table's order -> (a versioned write: wait for its
application's earlier places, commit nothing if one committed the version) -> (a compaction: give up if an earlier
job replaced its sources) -> claim the journal -> take the job's finishing turn (:mod:`.turn`) -> (an overwrite:
wait for the earlier jobs touching its scope) -> complete -> delete what it replaces -> abort leftovers ->
``_SUCCESS`` -> record its end in the order -> remove its records. From the turn on, each step that cannot be
undone is fenced (:mod:`.fence`). A rollback claims the journal key first, so that a commit and a rollback of one job can
never both proceed.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from ...errors import (
    CommitConflictError,
    CommitFailedError,
    CommitStateUnknownError,
    JobRolledBackError,
    JobStateError,
    JobTakenOverError,
    ManifestError,
    MpcommitError,
    NoSuchKeyError,
    TxnVersionError,
    WaitedTooLongError,
)
from ...modes import CommitMode, CommitOutcome
from ...options import OrderSettings
from ...pool import ProgressHook
from ...store.conditional import ConditionalWrites, Records, conditional_writes
from ...store.s3 import S3Store
from .. import faults
from ..heartbeat import Heartbeat
from ..inventory import read_success
from ..layout import Destination, JobPaths, is_hidden_key, owner_of_key, table_of
from ..order import Collected, OrderSnapshot, PlaceEndedError, TableOrder
from ..records.job import CommitJournal, DeleteEntry, JobDescriptor, JobRollback, MergedFile, read_claim
from ..records.manifest import PendingUpload, StagedFile, TaskManifest, TaskResult
from ..records.order import OrderEntry, OrderOutcome, Outcome, Txn, TxnRecord, table_paths
from ..records.success import PartitionStats, SuccessData
from .cleanup import JobCleanup
from .committed import CommittedKeys, HandedOverResults, UploadIds
from .context import CommitContext
from .fence import Hold, HoldLostError
from .journal import (
    build_journal,
    claim_journal,
    claim_rollback,
    validate_winners,
    winners_by_task,
    write_success,
)
from .manifests import ManifestReader
from .placing import Placer, directory_of
from .replacing import Replacer
from .turn import FinisherTurn
from .reports import AbortReport, CommitReport

log = logging.getLogger(__name__)

DEFAULT_COMMIT_THREADS = 32


def _noop(_step: str, _done: int, _total: int | None) -> None:
    pass


class JobCommitter:
    """Commit, roll back and finish one job of one destination. Holds no state between calls but its settings.

    ``threads``: the commit's requests in flight (0: all on the caller's thread, for deterministic tests);
    ``order``: how the job waits for the jobs before it in its table's commit order.
    """

    def __init__(self, store: S3Store, destination: Destination, job_id: str, *,
                 threads: int = DEFAULT_COMMIT_THREADS, progress: ProgressHook | None = None,
                 order: OrderSettings | None = None):
        self.store = store
        self.destination = destination
        self.job_id = job_id
        self.paths = JobPaths(destination, job_id)
        self.threads = max(0, threads)
        self.progress = progress or _noop
        self.manifests = ManifestReader(store, destination, job_id)
        self.table = table_of(destination)
        self.order = TableOrder(store, self.table, order)
        #: The job's heartbeat while this process works for it: stopped before its records are removed.
        self.heartbeat: Heartbeat | None = None

    def _quiet(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def _conditional(self) -> ConditionalWrites:
        return conditional_writes(self.store, self.destination.bucket, self.table.root)

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
            entry = self._take_place(journal, partitions, txn)
            try:
                faults.checkpoint("commit.after_place")
                if txn is not None:
                    self._settle_txn(entry, txn)
                self.order.refuse_beside_others(entry)
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
                # unless it ended already: a rollback that claimed the journal key first ends it, and the order's
                # collection may have covered it since (a process that lost its job records nothing more, I10).
                try:
                    if not isinstance(exc, JobRolledBackError) and self.order.ended(entry.position) is None:
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
            # The driver finishes its own journal as one finisher among others: it takes the job's finishing turn
            # (:mod:`.turn`), so that a `recover` that finds the journal meanwhile waits for this commit instead of
            # completing the same uploads beside it. Two completes of one upload at once are harmless on S3, but
            # LocalStack 4.13 then leaves an empty object a third of the time (66 of 200 pairs, 2026-11-26).
            heartbeat = self._driver_heartbeat()
            turn = FinisherTurn(self.store, self.paths, self.order.settings, heartbeat)
            ended = False
            try:
                faults.checkpoint("commit.after_journal")
                if not turn.take(ended=lambda: self._ended(journal)):
                    # A recover took the turn between the journal and here, and finished the job.
                    ended = True
                    return self._finish(journal, context, validated=False)
                faults.checkpoint("commit.after_turn")
                report = self._finish(journal, context, entry=entry, hold=self._hold(heartbeat), inline=inline,
                                      timings=timings, started=t0, when_ended=when_ended)
                ended = True  # the turn went with the job's records
                return report
            except CommitStateUnknownError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure after the journal leaves the outcome unknown
                raise CommitStateUnknownError(
                    f"job {self.job_id}: the commit failed after its journal was written ({exc}). Some files may be "
                    f"visible; do not clean up. Run `mpcommit jobs recover {self.destination.uri} --job {self.job_id}`.",
                    job_id=self.job_id, destination=self.destination.uri,
                ) from exc
            finally:
                if not ended:
                    turn.release()  # whoever finishes it next need not wait for this process to be gone

    def _entry_for(self, journal: CommitJournal, partitions: Sequence[str], txn: Txn | None = None) -> OrderEntry:
        """The job's place: everything it may change is inside what it says it touches -- the partitions it
        writes, what it replaces (all of its destination for a static overwrite) and a compaction's sources --
        so that every conflict check, which reads ``touches``, sees all of it."""
        here = self.table.path_of(self.destination)
        touched = set(partitions) | set(journal.replace)
        touched |= {directory_of(d.key[len(self.destination.root):]) for d in journal.delete}
        touched = sorted(touched) or [""]
        return OrderEntry(
            position=1, job_id=self.job_id, bucket=self.destination.bucket, table=self.table.prefix,
            destination=here, purpose=journal.purpose, mode=journal.mode,
            partition_overwrite=journal.partition_overwrite,
            touches=table_paths(self.table, here, touched), replaces=table_paths(self.table, here, journal.replace)
            if journal.replace else (),
            created_ms=int(time.time() * 1000), hostname=socket.gethostname(), txn=txn)

    def _take_place(self, journal: CommitJournal, partitions: Sequence[str], txn: Txn | None = None) -> OrderEntry:
        try:
            return self.order.take(self._entry_for(journal, partitions, txn))
        except MpcommitError as exc:
            raise CommitFailedError(f"job {self.job_id} was not committed, nothing was made visible: it could not "
                                    f"take its place in the commit order of {self.table.uri}: {exc}") from exc

    def _settle_txn(self, entry: OrderEntry, txn: Txn) -> None:
        """Before the journal: wait for the earlier places of this application to end, then commit only a version
        newer than every one they committed (the way delta-rs decides a transaction's app id and version)."""
        self.order.wait_for_earlier(entry, (), take_over=self._take_over, progress=self.progress,
                                    blocks=lambda e: e.txn is not None and e.txn.app_id == txn.app_id)
        newest = self.order.txn_state(txn.app_id, below=entry.position).newest
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

    # ------------------------------------------------------------ finish (commit and recover)
    def finish(self, journal: CommitJournal, *, role: str = "recover") -> CommitReport:
        """Carry out a journal (``recover``): every manifest validated first, then as a first commit would.
        Finishers of one job take turns (:mod:`.turn`): one that waited finds the job ended by the other.
        ``role`` names this finisher in the job's heartbeat, for people and errors."""
        heartbeat = Heartbeat(self.store, self.paths, self.order.settings.heartbeat_seconds, role=role)
        turn = FinisherTurn(self.store, self.paths, self.order.settings, heartbeat)
        try:
            if not turn.take(ended=lambda: self._ended(journal)):
                with CommitContext(self.threads) as context:
                    return self._finish(journal, context, validated=False)
            self.heartbeat = heartbeat
            with CommitContext(self.threads) as context:
                faults.checkpoint("commit.after_turn")
                return self._finish(journal, context, hold=self._hold(heartbeat), validated=False)
        finally:
            heartbeat.stop()
            turn.release()  # a no-op once the job's records went, the turn with them

    def _driver_heartbeat(self) -> Heartbeat:
        """The heartbeat the driver holds its job by: the Job's own, beating since Job.create; else one started
        now, on from the beat there (the process a data source commits in, resumed without one)."""
        if self.heartbeat is None:
            self.heartbeat = Heartbeat(self.store, self.paths, self.order.settings.heartbeat_seconds).start()
        return self.heartbeat

    def _hold(self, heartbeat: Heartbeat) -> Hold:
        return Hold(heartbeat, self.order.settings.lease_seconds)

    def _ended(self, journal: CommitJournal) -> bool:
        """The job's end is recorded (or collected), or its journal is gone (finished or rolled back by another
        process)."""
        if journal.position is not None and self.order.ended(journal.position) is not None:
            return True
        try:
            return not isinstance(self.read_claim(), CommitJournal)
        except NoSuchKeyError:
            return True

    def _finish(self, journal: CommitJournal, context: CommitContext, *, entry: OrderEntry | None = None,
                hold: Hold | None = None, inline: dict[str, TaskManifest | None] | None = None,
                timings: dict[str, float] | None = None, started: float | None = None, validated: bool = True,
                when_ended: Callable[[int], None] | None = None) -> CommitReport:
        if entry is None:  # recover: the job may have ended meanwhile, by another process's hand
            entry = self._place_of(journal)
            if entry is None:
                return self._ended_elsewhere(journal, Collected(journal.position or 0))
            ended = self.order.ended(entry.position)
            if ended is not None:
                return self._ended_elsewhere(journal, ended)
        if hold is None:  # the turn was not taken: the job ended in another's hands after all
            raise JobTakenOverError(
                f"job {self.job_id}: another process holds it and is finishing it; this one did nothing for it. "
                f"`mpcommit jobs list {self.destination.uri}` shows it.", job_id=self.job_id,
                destination=self.destination.uri)
        try:
            return self._carry_out(journal, entry, context, hold, inline=inline or {}, timings=dict(timings or {}),
                                   t0=started if started is not None else time.monotonic(), validated=validated,
                                   when_ended=when_ended)
        except (HoldLostError, PlaceEndedError) as lost:
            return self._lost(journal, entry, lost)
        except MpcommitError:
            ended = self.order.ended(entry.position)
            if ended is not None:  # another process finished it while this one was at it
                return self._ended_elsewhere(journal, ended)
            raise

    def _lost(self, journal: CommitJournal, entry: OrderEntry, lost: MpcommitError) -> CommitReport:
        """This process lost the job while it was finishing it (a fence said so): it did nothing more for it. The
        outcome is what the other process made of it: committed (a report saying so), rolled back, or -- while
        the other one is still at it -- unknown."""
        self._quiet()
        why = lost.why if isinstance(lost, HoldLostError) else str(lost)
        ended = self.order.ended(entry.position)
        if ended is None:
            raise JobTakenOverError(
                f"job {self.job_id}: this process stopped finishing it -- {lost}. It was taken over while this "
                "process was paused or cut off from the store, and another process is finishing it; this one "
                f"completed, deleted and recorded nothing more for it. `mpcommit jobs list {self.destination.uri}` "
                "shows it; should that process die, `mpcommit jobs recover "
                f"{self.destination.uri} --job {self.job_id}` finishes it.",
                job_id=self.job_id, destination=self.destination.uri, holder=why)
        log.warning("job %s: this process stopped finishing it (%s); another process finished it", self.job_id, why)
        return self._ended_elsewhere(journal, ended)

    def _place_of(self, journal: CommitJournal) -> OrderEntry | None:
        """The journal's place in the order; None when it ended so long ago that the order let it go. A journal
        written before commits took places (format 1 or 2) takes one now, at the end."""
        if journal.position is not None:
            return self.order.entry(journal.position)
        found = self.order.find(self.job_id)
        if found is not None:
            return found
        entry = self._take_place(journal, [])
        return entry

    def _ended_elsewhere(self, journal: CommitJournal, ended: OrderOutcome | Collected) -> CommitReport:
        """The job's end is recorded already: another process finished it (or, long ago, this one did). Its
        leftover records go; the report says so and carries what _SUCCESS tells, where _SUCCESS still names it."""
        if isinstance(ended, OrderOutcome) and ended.outcome is Outcome.ROLLED_BACK:
            raise JobRolledBackError(f"job {self.job_id} was rolled back by another process ({ended.reason}); "
                                     "nothing of it is visible")
        self._quiet()
        with CommitContext(self.threads) as context:
            JobCleanup(self.store, self.destination, self.job_id, context).remove_records(journal_first=True)
        mode = CommitMode.of(journal.mode, journal.partition_overwrite)
        success = read_success(self.store, self.destination)
        named = success is not None and success.job_id == self.job_id
        by = f"{ended.by} on host {ended.hostname}".strip() if isinstance(ended, OrderOutcome) else ""
        return CommitReport(
            job_id=self.job_id, uri=self.destination.uri, mode=mode, outcome=CommitOutcome.COMMITTED,
            filenames=success.filenames if named else (), bytes=success.bytes if named else 0,  # type: ignore[union-attr]
            rows=success.rows if named else None, partitions=success.partitions if named else (),  # type: ignore[union-attr]
            position=journal.position, finished_elsewhere=True, finished_by=by)

    def _carry_out(self, journal: CommitJournal, entry: OrderEntry, context: CommitContext, hold: Hold, *,
                   inline: dict[str, TaskManifest | None], timings: dict[str, float], t0: float,
                   validated: bool, when_ended: Callable[[int], None] | None = None) -> CommitReport:
        if not validated:
            # Recover: every manifest is read and validated before the first complete (I7), as a first commit
            # does before its journal -- never one bad manifest found after half the files are visible.
            for _manifest in self.manifests.stream(journal.winners, inline, context):
                pass
        replacer = Replacer(self.store, self.destination, self.job_id, context, self.progress)
        if entry.replaces:
            t = time.monotonic()
            try:
                self.order.wait_for_earlier(entry, entry.replaces, take_over=self._take_over, progress=self.progress)
            except WaitedTooLongError as exc:
                # Past the journal the job is decided: whoever finishes it next (recover, or the next job of the
                # table that waits for it once this driver's heartbeat has stopped) waits for the same job first.
                raise CommitStateUnknownError(
                    f"job {self.job_id} waited {exc.waited:.0f} s for job {exc.blocker}, an earlier job of "
                    f"{self.table.uri} that is still committing and alive, and stopped waiting after its journal: "
                    f"nothing of it is visible yet, and it will be finished -- its files made visible, what it "
                    f"replaces deleted -- once {exc.blocker} has ended, by `mpcommit jobs recover "
                    f"{self.destination.uri} --job {self.job_id}` or by the next job of the table that waits for it. "
                    "Do not run it again. To wait longer: OrderSettings(max_wait_seconds=...), the data source's "
                    "option order.maxWait, or --max-wait.", job_id=self.job_id, destination=self.destination.uri,
                ) from exc
            timings["wait"] = time.monotonic() - t
        hold.check_if_stale("its completes")  # after any wait, and however long the manifests took

        # What the commit keeps per file is only what _SUCCESS and the report need (the key) and the upload id:
        # manifests are streamed, read a few at a time, and their parts dropped as soon as their files are
        # complete; the keys spill to a local temporary file beyond committed.SPILL_AT, the upload ids are kept as
        # 8-byte digests (driver memory bounded in files too: :mod:`.committed`). The file is closed on every exit.
        with CommittedKeys() as filenames:
            return self._place_and_succeed(journal, entry, context, hold, replacer, filenames, inline=inline,
                                           timings=timings, t0=t0, when_ended=when_ended)

    def _place_and_succeed(self, journal: CommitJournal, entry: OrderEntry, context: CommitContext, hold: Hold,
                           replacer: Replacer, filenames: CommittedKeys, *, inline: dict[str, TaskManifest | None],
                           timings: dict[str, float], t0: float,
                           when_ended: Callable[[int], None] | None) -> CommitReport:
        t = time.monotonic()
        winners = UploadIds()  # upload ids completed: never aborted as leftovers
        total_bytes = 0
        rows_total: int | None = 0
        partitions: set[str] = set()
        # Per partition: [files, bytes, rows or None] -- the catalog's statistics, from the commit itself.
        per_partition: dict[str, list] = {}
        skipped_placed: list[str] = []

        def manifests(consume: bool = False) -> Iterator[TaskManifest]:
            return self.manifests.stream(journal.winners, inline, context, consume=consume)

        merged_sources = {key for m in journal.merged for key in m.sources}

        def uploads() -> Iterator[PendingUpload | StagedFile]:
            for m in manifests(consume=True):  # the last pass: in-line manifests dropped as they are placed
                yield from m.uploads
                # Staged files merged at commit time are not moved in: their merged file is completed instead.
                yield from (f for f in m.staged if f.key not in merged_sources)
            for merged_file in journal.merged:
                yield merged_file.upload

        sources: list[str] | None = None
        skip: frozenset[str] = frozenset()
        if journal.delete:
            sources, skip = replacer.check_sources(journal, manifests)

        def account(item: PendingUpload | StagedFile) -> None:
            nonlocal total_bytes, rows_total
            if skip and directory_of(item.key) in skip:
                skipped_placed.append(item.key)  # completed by an earlier run: undo_skipped deletes it
                return
            if isinstance(item, PendingUpload):
                winners.add(item.upload_id)
            filenames.add(item.key)
            total_bytes += item.size
            rows_total = None if rows_total is None or item.rows is None else rows_total + item.rows
            partitions.add(item.partition)
            stats = per_partition.get(item.partition)
            if stats is None:
                stats = per_partition[item.partition] = [0, 0, 0]
            stats[0] += 1
            stats[1] += item.size
            stats[2] = None if stats[2] is None or item.rows is None else stats[2] + item.rows
            self.progress("complete", len(filenames), None)

        # An overwrite's look at the scope it replaces only reads: it runs beside the completes.
        older = replacer.look_beside(journal, entry, self.order)
        placer = Placer(self.store, self.destination, self.job_id, skip_directories=skip)
        placer.place_all(hold.guard(uploads(), "a complete"), account, context)
        if sources is not None:
            replacer.undo_skipped(skipped_placed)
        timings["complete"] = time.monotonic() - t
        self.progress("completed", len(filenames), len(filenames))

        t = time.monotonic()
        doomed = older.result() if older is not None else []
        faults.checkpoint("commit.before_replace")
        if doomed or sources:
            hold.check("its deletes")  # between the judgement of what is older and the first delete
        deleted = replacer.delete(doomed, sources, skip_directories=skip)
        timings["replace"] = time.monotonic() - t

        t = time.monotonic()
        cleanup = JobCleanup(self.store, self.destination, self.job_id, context)
        aborted = cleanup.abort_leftovers(journal, winners)
        timings["abort_leftovers"] = time.monotonic() - t

        t = time.monotonic()
        timings["total"] = time.monotonic() - t0
        winners.clear()  # not needed past the leftovers' abort: freed before _SUCCESS is built
        names = filenames.names()  # sorted; the temporary file closed here
        mode = CommitMode.of(journal.mode, journal.partition_overwrite)
        success = SuccessData(
            job_id=self.job_id, mode=mode.value, filenames=names, bytes=total_bytes, rows=rows_total,
            partitions=tuple(sorted(p for p in partitions if p)), timings={k: round(v, 4) for k, v in timings.items()},
            hostname=socket.gethostname(), purpose=journal.purpose,
            partition_stats={p: PartitionStats(n, b, r) for p, (n, b, r) in sorted(per_partition.items())},
            merged_from=len(journal.delete) if journal.delete else None, position=entry.position,
        )
        faults.checkpoint("commit.before_success")
        hold.check_if_stale("_SUCCESS")
        self.progress("success", 0, 1)
        write_success(self.store, self.destination, success, match_etag=self._conditional().match_etag)
        self.progress("success", 1, 1)
        faults.checkpoint("commit.after_success")
        hold.check_if_stale("the end of its place")
        _ended, ours = self.order.end(entry, Outcome.COMMITTED, by=hold.heartbeat.role, txn=entry.txn)
        timings["success"] = time.monotonic() - t
        if when_ended is not None:
            when_ended(entry.position)

        t = time.monotonic()
        self._quiet()
        cleanup.remove_records(journal_first=True)
        if entry.position % self.order.settings.tidy_every == 0:
            self.order.collect_garbage(take_over=lambda dead: self._take_over(dead, why="holds the order's "
                                                                              "collection back"))
        timings["cleanup"] = time.monotonic() - t
        timings["total"] = time.monotonic() - t0
        return CommitReport(
            job_id=self.job_id, uri=self.destination.uri, mode=mode, outcome=CommitOutcome.COMMITTED,
            filenames=success.filenames, bytes=success.bytes, rows=success.rows, partitions=success.partitions,
            timings=timings, aborted_uploads=aborted, deleted_objects=deleted,
            partition_stats=dict(success.partition_stats or {}), position=entry.position,
            finished_elsewhere=not ours,
        )

    # ------------------------------------------------------------ another job, dead, in the way
    def _take_over(self, other: OrderEntry, *, why: str = "is before it") -> None:
        """Finish or roll back another job of the table that went silent: one before this one that it waits for
        (TableOrder.wait_for_earlier), or a dead one holding the order's collection back (collect_garbage)."""
        committer = JobCommitter(self.store, self.table.destination(other.destination), other.job_id,
                                 threads=self.threads, order=self.order.settings)
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

    def recover_job(self, *, reason: str, role: str = "recover") -> CommitReport | AbortReport:
        """Finish this job from its journal, go on with its interrupted rollback, or roll it back when its
        commit never began (JobStateError if it begins meanwhile)."""
        claim = self.read_claim()
        if isinstance(claim, CommitJournal):
            return self.finish(claim, role=role)
        return self.rollback(reason=reason)

    def read_claim(self) -> CommitJournal | JobRollback | None:
        """What holds the job's journal key: its commit journal, the record of its rollback, or nothing."""
        try:
            data = self.store.get_object(self.destination.bucket, self.paths.journal)
        except NoSuchKeyError:
            return None
        return read_claim(data, where=self.paths.journal, destination=self.destination, job_id=self.job_id)

    # ------------------------------------------------------------ rollback
    def rollback(self, *, reason: str) -> AbortReport:
        """Roll back: claim the journal key (so that the job can never commit; JobStateError when it is
        committing already), record the end of its place in the order if it took one, abort every upload of the
        job and remove its records."""
        if not self.stop_commit(reason=reason):
            # It committed before the claim: what is left of it -- a zombie's uploads and manifest, or records its
            # own cleanup had not removed yet -- is no part of what it committed, and goes as after any commit.
            aborted, deleted = self.discard_all()
            return AbortReport(self.job_id, aborted, deleted, ended_before=True)
        faults.checkpoint("rollback.after_claim")
        with CommitContext(self.threads) as context:
            cleanup = JobCleanup(self.store, self.destination, self.job_id, context)
            aborted = cleanup.abort_all()
            self._quiet()
            if not self._conditional().create_only:
                self._remove_visible()
            # Not counted: the rollback record this rollback (or an interrupted one) put at the journal key.
            deleted = max(0, cleanup.remove_records(journal_first=False) - 1)
        return AbortReport(self.job_id, aborted, deleted)

    def _remove_visible(self) -> None:
        """On a store that cannot order a rollback against its job's commit (no conditional writes; used only as
        one writer per table, as the user stated), "nothing of it is visible" is checked, not assumed: files of
        the job found visible -- a commit that ran beside this rollback after all -- are deleted, and said."""
        mine = lambda key: owner_of_key(key).job_id == self.job_id and not is_hidden_key(self.destination, key)  # noqa: E731
        visible = [o.key for o in self.store.list_objects(self.destination.bucket, self.destination.root, keep=mine)]
        if visible:
            log.warning("job %s: %d of its files were visible when it was rolled back (its commit ran beside the "
                        "rollback, which this store cannot order: S3Options(single_writer=True) was stated); they "
                        "are deleted, e.g. s3://%s/%s", self.job_id, len(visible), self.destination.bucket,
                        visible[0])
            self.store.delete_objects(self.destination.bucket, visible)

    def stop_commit(self, *, reason: str) -> bool:
        """The first step of a rollback: claim the job's journal key, so that the job can never commit
        (JobStateError when it is committing already), and end its place in the order if it took one. Its
        uploads may be aborted from here on. False when the job had ended before the claim: its records --
        the journal key among them -- were removed by the process that committed or rolled it back, so the claim
        found the key free; the claim is taken back and nothing is rolled back."""
        claim, mine = claim_rollback(self.store, self.destination, self.job_id, reason)
        if mine and self.store.head_object(self.destination.bucket, self.paths.descriptor) is None:
            # Its descriptor went before the claim, with its other records: whoever ended the job -- its commit's
            # cleanup, or a rollback -- removed them, and its place may have been collected since, taking the
            # outcome with it (order trials run 12, pause-driver seed 1156: a `recover` that listed an append while
            # it wrote reported it rolled back, and wrote an end for its collected place, after it had committed).
            self._take_claim_back(claim)
            return False
        entry = self.order.find(self.job_id, ended_too=True)
        outcome = self.order.outcome(entry.position) if entry is not None else None
        if mine and (outcome.outcome is Outcome.COMMITTED if outcome is not None else
                     entry is None and self._committed_and_collected()):
            # The job committed before this claim, which found the journal key freed by its cleanup (a listing of
            # jobs read before it ended brought this rollback here). Taken back; the job stays committed. (A job
            # that ended otherwise -- aborted, rolled back -- is rolled back again: what its zombies left goes.)
            self._take_claim_back(claim)
            return False
        if entry is not None and outcome is None and entry.position > self.order.view().through:
            # (A place a checkpoint covers has ended, and its end may have been collected just now: never ended again.)
            self.order.end(entry, Outcome.ROLLED_BACK, reason=reason)
        return True

    def _take_claim_back(self, claim: JobRollback) -> None:
        records = Records.of(self.store, self.destination.bucket, self.table.root)
        records.delete(self.paths.journal, etag=None, body=claim.to_bytes())

    def _committed_and_collected(self) -> bool:
        """For a job with no place left in the order and a free journal key: whether it committed and the order's
        collection has since deleted its place (its commit stopped in its cleanup, which frees the journal key
        first). Only a commit makes a job's files visible, and its task manifests name them: a few of those keys
        are looked up (a job rolled back while writing has none visible; one with no manifest wrote nothing). Never on
        a store without conditional writes (its rollback deletes such files: :meth:`_remove_visible`), nor before
        the order was first collected."""
        if not self._conditional().create_only or self.order.view().through == 0:
            return False
        reader = ManifestReader(self.store, self.destination, self.job_id)
        looked = 0
        for obj in self.store.list_objects(self.destination.bucket, self.paths.tasks):
            try:
                manifest = reader.read(obj.key)
            except (ManifestError, NoSuchKeyError):
                continue  # unreadable, or removed meanwhile: other manifests tell
            for upload in manifest.uploads[:2]:
                if self.store.head_object(self.destination.bucket, upload.key) is not None:
                    return True
                looked += 1
            if looked >= 16:
                break
        return False

    def abort(self) -> AbortReport:
        """Roll back a job whose commit has not begun (the driver's own ``job.abort()``)."""
        return self.rollback(reason="aborted by its driver")

    def discard_all(self) -> tuple[int, int]:
        """Abort every upload of a committed job that is left, and remove its records: (aborted, deleted)."""
        self._quiet()
        with CommitContext(self.threads) as context:
            return JobCleanup(self.store, self.destination, self.job_id, context).discard_all()


class _Duplicate(MpcommitError):
    """A commit whose application version was committed already: it ends as a no-op (never raised to a caller)."""

    def __init__(self, record: TxnRecord, reason: str):
        super().__init__(reason)
        self.record = record
        self.reason = reason


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."

