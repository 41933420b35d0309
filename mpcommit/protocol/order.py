"""A table's commit order: the one sequence in which the jobs on a table take effect, decided by the store.

Clocks cannot order concurrent jobs (Last-Modified has a second's resolution and two hosts never agree), so
every job that changes what a table shows takes a numbered place before its first file becomes visible: it
creates ``TABLE/_mpcommit/order/<position>`` with ``If-None-Match: *``. Of two jobs that try one position,
the store lets exactly one create it; the other moves to the next (delta-rs commits its log the same way).
What a job may destroy is then decided against that order, never against time:

* an **overwrite** at position n waits until every earlier job touching what it replaces has ended (committed
  or rolled back), then deletes exactly the objects in its scope that no later job owns -- every data key
  carries its job id, and the jobs after n are in the order. A later job's files survive however late this
  one finishes; an earlier job's never do.
* a **compaction** at n gives up (:class:`~mpcommit.errors.CommitConflictError`, nothing of it visible) if an
  overwrite or another compaction touching its sources took effect after it listed them; later jobs wait for it.
* an **append** never waits and never loses: whatever comes before it cannot remove its files, whatever comes
  after sees them.

A job ends its place with ``<position>.done`` (committed or rolled back), created the same way, so of a driver
and any number of ``recover`` runs finishing one job exactly one records the end. A job that waits watches the
earlier job's heartbeat (:mod:`.heartbeat`); one silent for a lease is dead, and the waiter finishes or rolls it
back itself, as ``mpcommit jobs recover`` would: nothing waits for ever. Old ended places are deleted now and
then, so the order stays a few hundred records long whatever the table's age. The order lives under a hidden
folder: readers of the table (Spark, pyarrow, Athena, Hive) never see it.

Collecting old places never makes the order forget what a decision needs: before it deletes any place, the
collection writes a checkpoint (``collected-<n>``, :class:`~.records.order.OrderCheckpoint`) saying that every
place up to n has ended, and keeping the newest committed version of each application. A place whose records
are gone is therefore never taken for open, and a judgement of "the jobs after me" is made only while the
judge's own place is open: the collection deletes nothing above an open place, and a listing that shows the
place open reads the checkpoints after the places (their names sort last), so it would see any collection that
had begun (:meth:`TableOrder.jobs_after`). A dead place never stops the collection for ever: a job that tidies
the order takes over a place whose heartbeat has been silent for a lease (:meth:`TableOrder.collect_garbage`).

On a store that does not honour conditional writes (:mod:`mpcommit.store.conditional`), nothing runs unless the
user stated that each table has one job at a time; even then a destructive job refuses to run beside any other
job it can see on the table (:class:`~mpcommit.errors.ConcurrentJobsRefusedError`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from ..errors import (
    CommitFailedError,
    ConcurrentJobsRefusedError,
    MpcommitError,
    NoSuchKeyError,
    PreconditionFailedError,
    WaitedTooLongError,
)
from ..options import OrderSettings
from ..pool import ProgressHook
from ..store.conditional import Held, Records
from ..store.s3 import S3Store
from . import faults, order_txn
from .heartbeat import Pulse
from .layout import JobPaths, Table
from .order_view import Collected, OrderSnapshot, OrderView, PlaceEndedError, TxnState
from .records.order import (
    MAX_POSITION,
    OrderCheckpoint,
    OrderEntry,
    OrderOutcome,
    Outcome,
    Txn,
    TxnRecord,
    checkpoint_name,
    entry_name,
    parse_checkpoint_name,
    parse_order_name,
)

log = logging.getLogger(__name__)

#: Tables whose stray order keys this process has warned about already (once each is enough for a log).
_WARNED: set[tuple[str, str]] = set()


#: Entries read side by side when an application's versions are looked up in a cold process.
READ_AHEAD_THREADS = 16


class TableOrder:
    """The commit order of one table. Entries, ends and checkpoints never change once written (each is created
    with If-None-Match), so those read are cached -- an end only once found: a place without one may end at any
    moment, so its absence is asked of the store every time. One TableOrder may serve every job of its table
    that one process decides in a row (``recover``: each entry and end read once for all of them)."""

    def __init__(self, store: S3Store, table: Table, settings: OrderSettings | None = None):
        self.store = store
        self.table = table
        self.settings = settings or OrderSettings()
        self._entries: dict[int, OrderEntry] = {}
        self._outcomes: dict[int, OrderOutcome] = {}
        self._checkpoints: dict[int, OrderCheckpoint] = {}
        #: A place this order took at its first try -> the listing it was taken from, which named every place
        #: below it (places are taken in turn): the first look of the wait that follows (wait_for_earlier).
        self._listed_below: dict[int, OrderView] = {}

    def _records(self) -> Records:
        return Records.of(self.store, self.table.bucket, self.table.root)

    # ------------------------------------------------------------ keys
    def entry_key(self, position: int) -> str:
        return f"{self.table.order_root}{entry_name(position)}"

    def outcome_key(self, position: int) -> str:
        return f"{self.entry_key(position)}.done"

    def checkpoint_key(self, through: int) -> str:
        return f"{self.table.order_root}{checkpoint_name(through)}"

    # ------------------------------------------------------------ reading
    def view(self) -> OrderView:
        """One listing of the order. Its keys come in name order -- places and their ends first, checkpoints
        last -- and each page is read after the one before: a place found open here had not been collected by
        any collection that began before the places after it were read (it writes its checkpoint first)."""
        positions, ended, checkpoints, strays = set(), set(), set(), []
        root = self.table.order_root
        for obj in self.store.list_objects(self.table.bucket, root):
            name = obj.key[len(root):]
            parsed = parse_order_name(name)
            if parsed is not None:
                position, done = parsed
                (ended if done else positions).add(position)
                continue
            through = parse_checkpoint_name(name)
            if through is not None:
                checkpoints.add(through)
            else:
                strays.append(obj.key)
        if strays:
            self._warn_strays(strays)
        cps = tuple(sorted(checkpoints))
        through = cps[-1] if cps else 0
        return OrderView(tuple(sorted(positions)), frozenset(ended & positions), through, cps, tuple(strays),
                         tuple(sorted(p for p in positions | ended if p <= through)))

    def _warn_strays(self, strays: list[str]) -> None:
        if (self.table.bucket, self.table.prefix) in _WARNED:
            return
        _WARNED.add((self.table.bucket, self.table.prefix))
        shown = " ".join(f"s3://{self.table.bucket}/{key}" for key in strays[:5])
        more = f" and {len(strays) - 5} more" if len(strays) > 5 else ""
        log.warning("%s: %d key(s) under its commit order are no record of mpcommit's (a position that is not 20 "
                    "ASCII digits up to %d, or another name) and are ignored: %s%s. Remove them, e.g. with "
                    "`aws s3 rm`; `mpcommit jobs recover` and `mpcommit doctor` name them", self.table.uri,
                    len(strays), MAX_POSITION, shown, more)

    def checkpoint(self, view: OrderView | None = None) -> OrderCheckpoint | None:
        """The newest checkpoint of the order (None when nothing was ever collected), validated (I7)."""
        view = view or self.view()
        for through in reversed(view.checkpoints):
            cached = self._checkpoints.get(through)
            if cached is not None:
                return cached
            key = self.checkpoint_key(through)
            try:
                data = self.store.get_object(self.table.bucket, key)
            except NoSuchKeyError:
                continue  # replaced by a newer one meanwhile, which this listing saw
            found = OrderCheckpoint.from_bytes(data, where=f"s3://{self.table.bucket}/{key}", table=self.table,
                                               through=through)
            self._checkpoints[through] = found
            return found
        return None

    def ended(self, position: int) -> OrderOutcome | Collected | None:
        """How the job at ``position`` ended: its end record, :class:`Collected` when the order's collection
        deleted that record (a checkpoint covers the place), None while its place is open."""
        found = self.outcome(position)
        if found is not None:
            return found
        through = self.view().through
        return Collected(through) if position <= through else None

    def txn_state(self, app_id: str, *, below: int | None = None, view: OrderView | None = None) -> TxnState:
        """Application ``app_id`` in this order (below place ``below``): its newest committed version and its
        places still open after it (:func:`~mpcommit.protocol.order_txn.txn_state`). ``view``: the order as listed
        a moment ago (else listed now)."""
        return order_txn.txn_state(self, app_id, below=below, view=view)

    def read_ahead(self, positions: list[int], *, ends: Iterable[int] = ()) -> list[int]:
        """Read the entries not yet cached side by side (entries never change, so they are cached from then on),
        and the ends of places ``ends`` with them (an end once found never changes either); ``positions``."""
        reads = [(self.entry, p) for p in positions if p not in self._entries]
        reads += [(self.outcome, p) for p in ends if p not in self._outcomes]
        if len(reads) > 1:
            with ThreadPoolExecutor(min(READ_AHEAD_THREADS, len(reads))) as pool:
                list(pool.map(lambda read: read[0](read[1]), reads))
        return positions

    def snapshot(self) -> OrderSnapshot:
        view = self.view()
        return OrderSnapshot(view.highest, frozenset(view.open))

    def entry(self, position: int) -> OrderEntry | None:
        """The entry at ``position``; None once it was deleted (ended long ago)."""
        cached = self._entries.get(position)
        if cached is not None:
            return cached
        key = self.entry_key(position)
        try:
            data = self.store.get_object(self.table.bucket, key)
        except NoSuchKeyError:
            return None
        entry = OrderEntry.from_bytes(data, where=f"s3://{self.table.bucket}/{key}", table=self.table,
                                      position=position)
        self._entries[position] = entry
        return entry

    def outcome(self, position: int) -> OrderOutcome | None:
        """How the job at ``position`` ended, by its end record; None while there is none (read again next time:
        an end is cached once found, its absence never)."""
        cached = self._outcomes.get(position)
        if cached is not None:
            return cached
        key = self.outcome_key(position)
        try:
            data = self.store.get_object(self.table.bucket, key)
        except NoSuchKeyError:
            return None
        found = OrderOutcome.from_bytes(data, where=f"s3://{self.table.bucket}/{key}", table=self.table,
                                        position=position)
        self._outcomes[position] = found
        return found

    def entries(self, positions: Iterable[int]) -> list[OrderEntry]:
        found = []
        for p in positions:
            e = self.entry(p)
            if e is not None:
                found.append(e)
        return found

    def find(self, job_id: str, *, view: OrderView | None = None, ended_too: bool = False) -> OrderEntry | None:
        """The place of ``job_id`` among the open ones (a job's place stays open until the job has ended), or,
        ``ended_too``, among every place the order still holds."""
        view = view or self.view()
        positions = list(reversed(view.positions if ended_too else view.open))
        if ended_too:
            self.read_ahead(positions)
        for e in self.entries(positions):
            if e.job_id == job_id:
                return e
        return None

    def jobs_after(self, position: int) -> set[str]:
        """Every job that took a place after ``position`` (read after the listing it is used to judge). Valid only
        while that place is open, which this listing itself shows: PlaceEndedError when it has ended or been
        collected -- another process finished its job, and the places after it may be gone."""
        view = self.view()
        if not view.is_open(position):
            raise PlaceEndedError(f"place {position} of the commit order of {self.table.uri} has ended: another "
                                  "process finished its job")
        return {e.job_id for e in self.entries(p for p in view.positions if p > position)}

    # ------------------------------------------------------------ writing
    def take(self, proto: OrderEntry) -> OrderEntry:
        """Take the next free place for ``proto`` (its position is ignored). Of two jobs trying one place the
        store lets one create it; the other tries the next."""
        records = self._records()
        view = self.view()
        position = view.highest + 1
        while True:
            if position > MAX_POSITION:
                raise CommitFailedError(
                    f"the commit order of {self.table.uri} has a place at position {view.highest}, past the highest "
                    f"mpcommit takes ({MAX_POSITION}); such a key was not written by mpcommit. Remove "
                    f"s3://{self.table.bucket}/{self.entry_key(view.highest)} and run the job again.")
            entry = replace(proto, position=position)
            if isinstance(records.create(self.entry_key(position), entry.to_bytes()), Held):
                break
            position += 1
        self._entries[position] = entry
        # Only the newest place's listing is kept: a place whose job does not wait (an append) leaves none behind.
        self._listed_below = {position: view} if position == view.highest + 1 else {}
        return entry

    def end(self, entry: OrderEntry, outcome: Outcome, *, reason: str = "", txn: Txn | None = None,
            by: str = "") -> tuple[OrderOutcome, bool]:
        """Record how the job at ``entry`` ended. Returns the outcome that holds, and whether it is this call's:
        when another process ended the job first, its record stays and this one is not written. (A process that
        lost its job never gets here: its fence stops it first. Were an end written back after the place was
        collected, the checkpoint still says the place ended, and the next collection deletes it.)"""
        record = OrderOutcome(entry.position, entry.job_id, entry.bucket, entry.table, outcome,
                              int(time.time() * 1000), socket.gethostname(), reason, writer=uuid.uuid4().hex,
                              by=by or f"pid {os.getpid()}", txn=txn)
        key = self.outcome_key(entry.position)
        if isinstance(self._records().create(key, record.to_bytes()), Held):
            self._outcomes[entry.position] = record
            return record, True
        found = self.outcome(entry.position)  # another process's end, read after this create was refused
        if found is not None:
            return found, False
        raise PreconditionFailedError(f"the end of place {entry.position} of {self.table.uri} could not be read back",
                                      operation="put_object", bucket=self.table.bucket, key=key)

    def _read_raw(self, key: str) -> bytes | None:
        try:
            return self.store.get_object(self.table.bucket, key)
        except NoSuchKeyError:
            return None

    # ------------------------------------------------------------ deciding
    def wait_for_earlier(self, me: OrderEntry, paths: tuple[str, ...], *,
                         take_over: Callable[[OrderEntry], None], progress: ProgressHook | None = None,
                         blocks: Callable[[OrderEntry], bool] | None = None) -> OrderView:
        """Return once every job before ``me`` that touches ``paths`` (or for which ``blocks`` says so) has ended;
        returns the view that showed them ended (a decision about those jobs may be made from it without listing
        the order again). A job silent for the lease is handed to ``take_over`` (which finishes or rolls it back); a
        live one is waited for, at most ``max_wait_seconds``, after which CommitFailedError names it."""
        settings = self.settings
        pulse = Pulse(self.store)
        started = time.monotonic()
        delay = min(0.05, settings.poll_seconds)
        in_the_way = blocks or (lambda e: e.overlaps(paths))
        # First from the listing this order took ``me``'s place from, when it named every place below it: a place
        # it showed ended stays ended, and one it showed open is looked at again in a new listing.
        listed = self._listed_below.pop(me.position, None)
        while True:
            view, listed = (listed, None) if listed is not None else (self.view(), None)
            blocking = [e for e in self.entries(view.open_before(me.position)) if in_the_way(e)]
            if not blocking:
                return view
            if progress is not None:
                progress("wait", 0, len(blocking))
            for e in blocking:
                paths_of = JobPaths(self.table.destination(e.destination), e.job_id)
                if pulse.silent_for(paths_of) >= settings.lease_seconds:
                    take_over(e)
            waited = time.monotonic() - started
            if waited > settings.max_wait_seconds:
                first = blocking[0]
                raise WaitedTooLongError(
                    f"job {me.job_id} waited {waited:.0f} s for job {first.job_id} (place {first.position} in the "
                    f"commit order of {self.table.uri}), which is still committing and alive; nothing of "
                    f"{me.job_id} is visible. Run it again once {first.job_id} has ended (`mpcommit jobs list` "
                    "shows it), or let it wait longer: the data source's option order.maxWait, OrderSettings("
                    "max_wait_seconds=...) for write()/writer(), --max-wait for the CLI ('forever' waits while it "
                    "lives).", job_id=me.job_id, blocker=first.job_id, waited=waited)
            time.sleep(delay)
            delay = min(settings.poll_seconds, delay * 2)

    def conflict(self, me: OrderEntry, since: OrderSnapshot) -> OrderEntry | str | None:
        """For a compaction at ``me`` that read the table after ``since``: the earlier job that took effect on its
        sources since then (an overwrite or compaction touching them that has not been rolled back), a reason
        when the order moved on too far to tell, or None. Places are taken one after another, so every place
        between the snapshot and ``me`` exists unless it was cleared long after it ended: read one by one, no
        listing."""
        check = sorted(set(range(since.highest + 1, me.position)) | {p for p in since.open if p < me.position})
        for p in check:
            e = self.entry(p)
            if e is None:
                return (f"place {p} of the commit order of {self.table.uri} ended and was cleared while this job "
                        "ran, too long ago to tell what it changed")
            if not e.destructive or not e.overlaps(me.touches):
                continue
            outcome = self.outcome(p)
            if outcome is not None and outcome.outcome is Outcome.ROLLED_BACK:
                continue
            return e
        return None

    def refuse_beside_others(self, me: OrderEntry) -> None:
        """On a store without conditional writes (used only as one writer per table, as the user stated), a
        destructive job still runs only when no other job of the table is between its place and its end."""
        conditional = self._records().writes
        if conditional.create_only or not me.destructive:
            return
        view = self.view()
        others = [e for e in self.entries(view.open) if e.position != me.position and e.job_id != me.job_id]
        if others:
            other = others[0]
            raise ConcurrentJobsRefusedError(
                f"{self.table.uri}: the store does not honour conditional writes ({conditional.detail or 'stated'}), "
                f"so mpcommit cannot order concurrent jobs on one table, and job {other.job_id} is committing on it "
                f"now. Job {me.job_id} ({me.mode.value}) was refused; nothing of it is visible. Run overwrites and "
                "compactions of this table one at a time: run it again once that job has ended, or use a store "
                "that honours If-None-Match.")

    # ------------------------------------------------------------ keeping it short
    def collect_garbage(self, *, take_over: Callable[[OrderEntry], None] | None = None) -> int:
        """Delete ended places below the oldest open one, keeping the newest ``keep_resolved`` of them (a
        compaction that listed its sources a while ago still finds what came after it). A checkpoint saying
        that every place up to the newest deleted one has ended is written first, and keeps the newest
        committed version of each application. ``take_over`` is given the open places that hold the collection
        back and whose jobs showed no sign of life for a lease, by the store's own clock (a job killed after
        taking its place, which nothing would otherwise finish). Returns the keys deleted."""
        view = self.view()
        if take_over is not None and self._take_over_dead(view, take_over):
            view = self.view()
        open_places = view.open
        limit = open_places[0] if open_places else view.highest + 1
        ended = [p for p in view.positions if view.through < p < limit and p in view.ended]
        doomed = ended[: max(0, len(ended) - self.settings.keep_resolved)]
        stale = list(view.leftovers)
        if not doomed and not stale and len(view.checkpoints) <= 1:
            return 0
        faults.checkpoint("order.before_collect")
        try:
            through = view.through
            if doomed:
                through = doomed[-1]
                self._write_checkpoint(view, doomed)
            # Entries first: an end without its entry is ignored, while an entry whose end was deleted would read
            # as a job still open -- were it not for the checkpoint, which covers both.
            keys = [self.entry_key(p) for p in [*stale, *doomed]]
            keys += [self.outcome_key(p) for p in [*stale, *doomed]]
            keys += [self.checkpoint_key(c) for c in view.checkpoints if c < through]
            deleted = self.store.delete_objects(self.table.bucket, keys)
        except MpcommitError as exc:
            log.debug("%s: the order was not tidied (%s); the next job tries again", self.table.uri, exc)
            return 0  # tidying only
        finally:
            for p in doomed:
                self._entries.pop(p, None)
                self._outcomes.pop(p, None)
        return deleted

    def _write_checkpoint(self, view: OrderView, doomed: list[int]) -> None:
        previous = self.checkpoint(view)
        if view.checkpoints and (previous is None or previous.through != view.through):
            # Another collection replaced the newest checkpoint listed: the versions it kept are in its newer one,
            # which this listing did not see. A checkpoint written from an older one could lose them.
            raise CommitFailedError(f"the commit order of {self.table.uri} was collected by another job meanwhile")
        txns = dict(previous.txns) if previous is not None else {}
        for p in doomed:
            outcome = self.outcome(p)
            if outcome is None or outcome.outcome is not Outcome.COMMITTED or outcome.txn is None:
                continue
            kept = txns.get(outcome.txn.app_id)
            if kept is None or outcome.txn.version > kept.version:
                txns[outcome.txn.app_id] = TxnRecord(outcome.txn.version, p, outcome.job_id)
        through = doomed[-1]
        record = OrderCheckpoint(self.table.bucket, self.table.prefix, through, txns, int(time.time() * 1000))
        # Two collections may write the same checkpoint at once: either body says the same of the order.
        self._records().create(self.checkpoint_key(through), record.to_bytes())
        self._checkpoints[through] = record

    def _take_over_dead(self, view: OrderView, take_over: Callable[[OrderEntry], None]) -> bool:
        """Hand ``take_over`` the open places holding the collection back (more than ``keep_resolved`` ended
        places after them) whose jobs were silent for a lease by the store's clock. Returns whether any was."""
        holding = [p for p in view.open if sum(1 for q in view.ended if q > p) > self.settings.keep_resolved]
        handed = False
        for e in self.entries(holding[:3]):
            if self._silent_for(e) >= self.settings.lease_seconds:
                try:
                    take_over(e)
                    handed = True
                except MpcommitError as exc:
                    log.warning("%s: job %s at place %d is dead and could not be taken over (%s)", self.table.uri,
                                e.job_id, e.position, exc)
        return handed

    def _silent_for(self, entry: OrderEntry) -> float:
        """Seconds since the job at ``entry`` last showed life -- its heartbeat, else its place -- by the store's
        clock (the clock that stamped both), never this host's."""
        paths = JobPaths(self.table.destination(entry.destination), entry.job_id)
        newest = None
        for key in (paths.heartbeat, self.entry_key(entry.position)):
            info = self.store.head_object(self.table.bucket, key)
            if info is not None and info.last_modified is not None:
                newest = max(newest or 0.0, info.last_modified.timestamp())
        if newest is None:
            return 0.0
        return self.store.server_time(self.table.bucket) - newest
