"""Carrying out a journal, for the job's driver right after writing it and for ``recover`` alike (I4: a
recovered commit equals an uninterrupted one). One finisher at a time holds the job's finishing turn
(:mod:`.turn`); from the turn on, each step that cannot be undone is fenced (:mod:`.fence`).

The steps: (``recover``: validate every manifest) -> (an overwrite: wait for the earlier jobs touching its scope)
-> complete the winners' uploads, move staged files in -> delete what it replaces -> abort leftovers ->
``_SUCCESS`` -> record its end in the order -> remove its records -> (every ``tidy_every`` places: collect the
order's garbage).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ...errors import (
    CommitStateUnknownError,
    JobRolledBackError,
    JobTakenOverError,
    MpcommitError,
    NoSuchKeyError,
    WaitedTooLongError,
)
from ...modes import CommitMode, CommitOutcome
from ...pool import ProgressHook
from .. import faults
from ..heartbeat import Heartbeat
from ..inventory import read_success
from ..order import Collected, PlaceEndedError
from ..records.job import CommitJournal
from ..records.manifest import PendingUpload, StagedFile, TaskManifest
from ..records.order import OrderEntry, OrderOutcome, Outcome
from ..records.success import PartitionStats, SuccessData
from .cleanup import JobCleanup
from .committed import CommittedKeys, UploadIds
from .context import CommitContext
from .fence import Hold, HoldLostError
from .journal import write_success
from .placing import Placer, directory_of
from .replacing import Replacer
from .reports import CommitReport
from .turn import FinisherTurn
from .work import JobWork, TakeOver

log = logging.getLogger(__name__)

Item = PendingUpload | StagedFile


@dataclass
class Tally:
    """What a commit counts as its files are placed: the keys and upload ids it completed, and the bytes, rows
    and partitions that ``_SUCCESS``, the report and a catalog's statistics say. A file of a directory in
    ``skip`` (a compaction's sources that someone else removed) is not counted: an earlier run completed it, and
    the replace step deletes it (``skipped``)."""

    filenames: CommittedKeys
    progress: ProgressHook
    skip: frozenset[str] = frozenset()
    #: Upload ids completed: never aborted as leftovers.
    winners: UploadIds = field(default_factory=UploadIds)
    bytes: int = 0
    rows: int | None = 0
    partitions: set[str] = field(default_factory=set)
    #: Per partition: [files, bytes, rows or None].
    per_partition: dict[str, list] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def add(self, item: Item) -> None:
        if self.skip and directory_of(item.key) in self.skip:
            self.skipped.append(item.key)
            return
        if isinstance(item, PendingUpload):
            self.winners.add(item.upload_id)
        self.filenames.add(item.key)
        self.bytes += item.size
        self.rows = None if self.rows is None or item.rows is None else self.rows + item.rows
        self.partitions.add(item.partition)
        stats = self.per_partition.get(item.partition)
        if stats is None:
            stats = self.per_partition[item.partition] = [0, 0, 0]
        stats[0] += 1
        stats[1] += item.size
        stats[2] = None if stats[2] is None or item.rows is None else stats[2] + item.rows
        self.progress("complete", len(self.filenames), None)

    def partition_stats(self) -> dict[str, PartitionStats]:
        return {p: PartitionStats(n, b, r) for p, (n, b, r) in sorted(self.per_partition.items())}


class _Gone:
    """The job's journal is no longer at its key: another process finished or rolled it back."""

    def __repr__(self) -> str:
        return "GONE"


GONE = _Gone()


class _EndWatch:
    """:meth:`Finisher.end_of` as the finishing turn asks it (``FinisherTurn.take(ended=...)``), keeping its last
    answer: how the job ended, when the turn was not taken because it had (``last``), so that the finisher does
    not ask the store the same again at once (an end never changes)."""

    def __init__(self, ask: Callable[[], OrderOutcome | Collected | _Gone | None]):
        self._ask = ask
        self.last: OrderOutcome | Collected | _Gone | None = None

    def __call__(self) -> bool:
        self.last = self._ask()
        return self.last is not None


class Finisher:
    """Carries out the journal of ``work``'s job. ``take_over`` finishes or rolls back a silent job in its way."""

    def __init__(self, work: JobWork, take_over: TakeOver):
        self.work = work
        self.take_over = take_over

    # ------------------------------------------------------------ who finishes
    def finish(self, journal: CommitJournal, *, role: str = "recover", etag: str | None = None) -> CommitReport:
        """Carry out a journal (``recover``): every manifest validated first, then as a first commit would.
        Finishers of one job take turns (:mod:`.turn`): one that waited finds the job ended by the other.
        ``role`` names this finisher in the job's heartbeat, for people and errors. ``etag``: the ETag the
        journal was read with, where known: whether it is still there is then asked by a HEAD, not read again."""
        work = self.work
        heartbeat = Heartbeat(work.store, work.paths, work.order.settings.heartbeat_seconds, role=role)
        turn = FinisherTurn(work.store, work.paths, work.order.settings, heartbeat)
        watch = _EndWatch(lambda: self.end_of(journal, etag=etag))
        try:
            if not turn.take(ended=watch):
                with CommitContext(work.threads) as context:
                    return self._finish(journal, context, validated=False, end=watch.last)
            work.heartbeat = heartbeat
            with CommitContext(work.threads) as context:
                faults.checkpoint("commit.after_turn")
                return self._finish(journal, context, hold=self._hold(heartbeat), validated=False)
        finally:
            heartbeat.stop()
            turn.release()  # a no-op once the job's records went, the turn with them

    def finish_own(self, journal: CommitJournal, context: CommitContext, *, entry: OrderEntry,
                   inline: dict[str, TaskManifest | None], timings: dict[str, float], started: float,
                   when_ended: Callable[[int], None] | None) -> CommitReport:
        """The driver finishes the journal it just wrote, as one finisher among others: it takes the job's
        finishing turn, so that a `recover` that finds the journal meanwhile waits for this commit instead of
        completing the same uploads beside it. Two completes of one upload at once are harmless on S3, but
        LocalStack 4.13 then leaves an empty object a third of the time (66 of 200 pairs, 2026-11-26). Any failure
        leaves the outcome unknown (CommitStateUnknownError)."""
        work = self.work
        heartbeat = self._driver_heartbeat()
        turn = FinisherTurn(work.store, work.paths, work.order.settings, heartbeat)
        watch = _EndWatch(lambda: self.end_of(journal))
        ended = False
        try:
            faults.checkpoint("commit.after_journal")
            if not turn.take(ended=watch):
                # A recover took the turn between the journal and here, and finished the job.
                ended = True
                return self._finish(journal, context, validated=False, end=watch.last)
            faults.checkpoint("commit.after_turn")
            report = self._finish(journal, context, entry=entry, hold=self._hold(heartbeat), inline=inline,
                                  timings=timings, started=started, when_ended=when_ended)
            ended = True  # the turn went with the job's records
            return report
        except CommitStateUnknownError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure after the journal leaves the outcome unknown
            raise CommitStateUnknownError(
                f"job {work.job_id}: the commit failed after its journal was written ({exc}). Some files may be "
                f"visible; do not clean up. Run `mpcommit jobs recover {work.destination.uri} --job {work.job_id}`.",
                job_id=work.job_id, destination=work.destination.uri,
            ) from exc
        finally:
            if not ended:
                turn.release()  # whoever finishes it next need not wait for this process to be gone

    def ended(self, journal: CommitJournal) -> bool:
        """The job's end is recorded (or collected), or its journal is gone (finished or rolled back by another
        process)."""
        return self.end_of(journal) is not None

    def end_of(self, journal: CommitJournal, *, etag: str | None = None) -> OrderOutcome | Collected | _Gone | None:
        """How the job ended: its end in the order (or its place collected), ``GONE`` when its journal is no
        longer at its key (finished or rolled back by another process), None while it has not ended. Asked
        afresh every time (a job may end at any moment). ``etag``: the ETag the journal was read with -- then
        a HEAD that finds that very ETag at the key tells that the journal is still there, and only a different
        one is read."""
        work = self.work
        if journal.position is not None:
            ended = work.order.ended(journal.position)
            if ended is not None:
                return ended
        if etag:
            found = work.store.head_object(work.destination.bucket, work.paths.journal)
            if found is None:
                return GONE
            if found.etag == etag:
                return None  # the journal read before, still there: a journal is written once, never replaced
        try:
            claim = work.read_claim()
        except NoSuchKeyError:
            return GONE
        return None if isinstance(claim, CommitJournal) else GONE

    def _driver_heartbeat(self) -> Heartbeat:
        """The heartbeat the driver holds its job by: the Job's own, beating since Job.create; else one started
        now, on from the beat there (the process a data source commits in, resumed without one)."""
        work = self.work
        if work.heartbeat is None:
            work.heartbeat = Heartbeat(work.store, work.paths, work.order.settings.heartbeat_seconds).start()
        return work.heartbeat

    def _hold(self, heartbeat: Heartbeat) -> Hold:
        return Hold(heartbeat, self.work.order.settings.lease_seconds)

    # ------------------------------------------------------------ the job ended, or was lost, elsewhere
    def _finish(self, journal: CommitJournal, context: CommitContext, *, entry: OrderEntry | None = None,
                hold: Hold | None = None, inline: dict[str, TaskManifest | None] | None = None,
                timings: dict[str, float] | None = None, started: float | None = None, validated: bool = True,
                when_ended: Callable[[int], None] | None = None, end: OrderOutcome | Collected | _Gone | None = None) -> CommitReport:
        """``end``: how the job was found ended, right before, by the turn that was therefore not taken."""
        work = self.work
        if isinstance(end, (OrderOutcome, Collected)):
            return self._ended_elsewhere(journal, end)
        if entry is None:  # recover: the job may have ended meanwhile, by another process's hand
            entry = self._place_of(journal)
            if entry is None:
                return self._ended_elsewhere(journal, Collected(journal.position or 0))
            # Asked again, though the turn found it open a moment ago: a pause may lie between (commit.after_turn),
            # and one request is cheaper than reasoning about which pauses a lease covers.
            ended = work.order.ended(entry.position)
            if ended is not None:
                return self._ended_elsewhere(journal, ended)
        if hold is None:  # the turn was not taken: the job ended in another's hands after all
            raise JobTakenOverError(
                f"job {work.job_id}: another process holds it and is finishing it; this one did nothing for it. "
                f"`mpcommit jobs list {work.destination.uri}` shows it.", job_id=work.job_id,
                destination=work.destination.uri)
        try:
            return self._carry_out(journal, entry, context, hold, inline=inline or {}, timings=dict(timings or {}),
                                   t0=started if started is not None else time.monotonic(), validated=validated,
                                   when_ended=when_ended)
        except (HoldLostError, PlaceEndedError) as lost:
            return self._lost(journal, entry, lost)
        except MpcommitError:
            ended = work.order.ended(entry.position)
            if ended is not None:  # another process finished it while this one was at it
                return self._ended_elsewhere(journal, ended)
            raise

    def _lost(self, journal: CommitJournal, entry: OrderEntry, lost: MpcommitError) -> CommitReport:
        """This process lost the job while it was finishing it (a fence said so): it did nothing more for it. The
        outcome is what the other process made of it: committed (a report saying so), rolled back, or -- while
        the other one is still at it -- unknown."""
        work = self.work
        work.quiet()
        why = lost.why if isinstance(lost, HoldLostError) else str(lost)
        ended = work.order.ended(entry.position)
        if ended is None:
            raise JobTakenOverError(
                f"job {work.job_id}: this process stopped finishing it -- {lost}. It was taken over while this "
                "process was paused or cut off from the store, and another process is finishing it; this one "
                f"completed, deleted and recorded nothing more for it. `mpcommit jobs list {work.destination.uri}` "
                "shows it; should that process die, `mpcommit jobs recover "
                f"{work.destination.uri} --job {work.job_id}` finishes it.",
                job_id=work.job_id, destination=work.destination.uri, holder=why)
        log.warning("job %s: this process stopped finishing it (%s); another process finished it", work.job_id, why)
        return self._ended_elsewhere(journal, ended)

    def _place_of(self, journal: CommitJournal) -> OrderEntry | None:
        """The journal's place in the order; None when it ended so long ago that the order let it go. A journal
        written before commits took places (format 1 or 2) takes one now, at the end."""
        work = self.work
        if journal.position is not None:
            return work.order.entry(journal.position)
        found = work.order.find(work.job_id)
        if found is not None:
            return found
        return work.take_place(journal, [])

    def _ended_elsewhere(self, journal: CommitJournal, ended: OrderOutcome | Collected) -> CommitReport:
        """The job's end is recorded already: another process finished it (or, long ago, this one did). Its
        leftover records go; the report says so and carries what _SUCCESS tells, where _SUCCESS still names it."""
        work = self.work
        if isinstance(ended, OrderOutcome) and ended.outcome is Outcome.ROLLED_BACK:
            raise JobRolledBackError(f"job {work.job_id} was rolled back by another process ({ended.reason}); "
                                     "nothing of it is visible")
        work.quiet()
        with CommitContext(work.threads) as context:
            JobCleanup(work.store, work.destination, work.job_id, context).remove_records(journal_first=True)
        mode = CommitMode.of(journal.mode, journal.partition_overwrite)
        success = read_success(work.store, work.destination)
        named = success is not None and success.job_id == work.job_id
        by = f"{ended.by} on host {ended.hostname}".strip() if isinstance(ended, OrderOutcome) else ""
        return CommitReport(
            job_id=work.job_id, uri=work.destination.uri, mode=mode, outcome=CommitOutcome.COMMITTED,
            filenames=success.filenames if named else (), bytes=success.bytes if named else 0,  # type: ignore[union-attr]
            rows=success.rows if named else None, partitions=success.partitions if named else (),  # type: ignore[union-attr]
            position=journal.position, finished_elsewhere=True, finished_by=by)

    # ------------------------------------------------------------ the steps
    def _carry_out(self, journal: CommitJournal, entry: OrderEntry, context: CommitContext, hold: Hold, *,
                   inline: dict[str, TaskManifest | None], timings: dict[str, float], t0: float,
                   validated: bool, when_ended: Callable[[int], None] | None = None) -> CommitReport:
        work = self.work
        if not validated:
            # Recover: every manifest is read and validated before the first complete (I7), as a first commit
            # does before its journal -- never one bad manifest found after half the files are visible.
            for _manifest in work.manifests.stream(journal.winners, inline, context):
                pass
        replacer = Replacer(work.store, work.destination, work.job_id, context, work.progress)
        if entry.replaces:
            t = time.monotonic()
            try:
                work.order.wait_for_earlier(entry, entry.replaces, take_over=self.take_over, progress=work.progress)
            except WaitedTooLongError as exc:
                # Past the journal the job is decided: whoever finishes it next (recover, or the next job of the
                # table that waits for it once this driver's heartbeat has stopped) waits for the same job first.
                raise CommitStateUnknownError(
                    f"job {work.job_id} waited {exc.waited:.0f} s for job {exc.blocker}, an earlier job of "
                    f"{work.table.uri} that is still committing and alive, and stopped waiting after its journal: "
                    f"nothing of it is visible yet, and it will be finished -- its files made visible, what it "
                    f"replaces deleted -- once {exc.blocker} has ended, by `mpcommit jobs recover "
                    f"{work.destination.uri} --job {work.job_id}` or by the next job of the table that waits for it. "
                    "Do not run it again. To wait longer: OrderSettings(max_wait_seconds=...), the data source's "
                    "option order.maxWait, or --max-wait.", job_id=work.job_id, destination=work.destination.uri,
                ) from exc
            timings["wait"] = timings.get("wait", 0.0) + time.monotonic() - t  # beside the wait before the journal
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
        work = self.work
        t = time.monotonic()

        def manifests(consume: bool = False) -> Iterator[TaskManifest]:
            return work.manifests.stream(journal.winners, inline, context, consume=consume)

        merged_sources = {key for m in journal.merged for key in m.sources}

        def uploads() -> Iterator[Item]:
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
        tally = Tally(filenames, work.progress, skip)

        # An overwrite's look at the scope it replaces only reads: it runs beside the completes.
        older = replacer.look_beside(journal, entry, work.order)
        placer = Placer(work.store, work.destination, work.job_id, skip_directories=skip)
        placer.place_all(hold.guard(uploads(), "a complete"), tally.add, context)
        if sources is not None:
            replacer.undo_skipped(tally.skipped)
        timings["complete"] = time.monotonic() - t
        work.progress("completed", len(filenames), len(filenames))

        t = time.monotonic()
        doomed = older.result() if older is not None else []
        faults.checkpoint("commit.before_replace")
        if doomed or sources:
            hold.check("its deletes")  # between the judgement of what is older and the first delete
        deleted = replacer.delete(doomed, sources, skip_directories=skip)
        timings["replace"] = time.monotonic() - t

        t = time.monotonic()
        cleanup = JobCleanup(work.store, work.destination, work.job_id, context)
        aborted = cleanup.abort_leftovers(journal, tally.winners)
        timings["abort_leftovers"] = time.monotonic() - t

        t = time.monotonic()
        timings["total"] = time.monotonic() - t0
        tally.winners.clear()  # not needed past the leftovers' abort: freed before _SUCCESS is built
        mode = CommitMode.of(journal.mode, journal.partition_overwrite)
        success = SuccessData(
            job_id=work.job_id, mode=mode.value, filenames=filenames.names(), bytes=tally.bytes, rows=tally.rows,
            partitions=tuple(sorted(p for p in tally.partitions if p)),
            timings={k: round(v, 4) for k, v in timings.items()}, hostname=socket.gethostname(),
            purpose=journal.purpose, partition_stats=tally.partition_stats(),
            merged_from=len(journal.delete) if journal.delete else None, position=entry.position,
        )
        faults.checkpoint("commit.before_success")
        hold.check_if_stale("_SUCCESS")
        work.progress("success", 0, 1)
        write_success(work.store, work.destination, success, match_etag=work.conditional().match_etag)
        work.progress("success", 1, 1)
        faults.checkpoint("commit.after_success")
        hold.check_if_stale("the end of its place")
        _ended, ours = work.order.end(entry, Outcome.COMMITTED, by=hold.heartbeat.role, txn=entry.txn)
        timings["success"] = time.monotonic() - t
        if when_ended is not None:
            when_ended(entry.position)

        t = time.monotonic()
        work.quiet()
        cleanup.remove_records(journal_first=True)
        if entry.position % work.order.settings.tidy_every == 0:
            work.order.collect_garbage(take_over=lambda dead: self.take_over(dead, why="holds the order's "
                                                                             "collection back"))
        timings["cleanup"] = time.monotonic() - t
        timings["total"] = time.monotonic() - t0
        return CommitReport(
            job_id=work.job_id, uri=work.destination.uri, mode=mode, outcome=CommitOutcome.COMMITTED,
            filenames=success.filenames, bytes=success.bytes, rows=success.rows, partitions=success.partitions,
            timings=timings, aborted_uploads=aborted, deleted_objects=deleted,
            partition_stats=dict(success.partition_stats or {}), position=entry.position,
            finished_elsewhere=not ours,
        )
