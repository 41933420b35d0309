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

On a store that does not honour conditional writes (:mod:`mpcommit.store.conditional`), places can be taken
twice, so a destructive job refuses to run beside any other job on the table
(:class:`~mpcommit.errors.ConcurrentJobsRefusedError`) instead of racing it.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ..errors import (
    CommitFailedError,
    ConcurrentJobsRefusedError,
    MpcommitError,
    NoSuchKeyError,
    PreconditionFailedError,
)
from ..options import OrderSettings
from ..pool import ProgressHook
from ..store.conditional import ConditionalWrites
from ..store.s3 import S3Store
from .heartbeat import Pulse
from .layout import JobPaths, Table, nested_table_of
from .records.order import (
    OrderEntry,
    OrderOutcome,
    Outcome,
    entry_name,
    parse_order_name,
)


@dataclass(frozen=True)
class OrderView:
    """The order as one listing showed it: the places taken, and which of them have ended."""

    positions: tuple[int, ...]
    ended: frozenset[int]

    @property
    def highest(self) -> int:
        return self.positions[-1] if self.positions else 0

    @property
    def lowest(self) -> int:
        return self.positions[0] if self.positions else 0

    def open_before(self, position: int) -> list[int]:
        """Places before ``position`` whose jobs have not ended."""
        return [p for p in self.positions if p < position and p not in self.ended]

    @property
    def open(self) -> list[int]:
        return [p for p in self.positions if p not in self.ended]


@dataclass(frozen=True)
class OrderSnapshot:
    """What a job saw of the order before it read the table (a compaction, before listing its sources)."""

    highest: int
    open: frozenset[int]


class TableOrder:
    """The commit order of one table. Entries are immutable once written, so they are cached."""

    def __init__(self, store: S3Store, table: Table, settings: OrderSettings | None = None):
        self.store = store
        self.table = table
        self.settings = settings or OrderSettings()
        self._entries: dict[int, OrderEntry] = {}

    # ------------------------------------------------------------ keys
    def entry_key(self, position: int) -> str:
        return f"{self.table.order_root}{entry_name(position)}"

    def outcome_key(self, position: int) -> str:
        return f"{self.entry_key(position)}.done"

    # ------------------------------------------------------------ reading
    def view(self) -> OrderView:
        positions, ended = set(), set()
        root = self.table.order_root
        for obj in self.store.list_objects(self.table.bucket, root):
            parsed = parse_order_name(obj.key[len(root):])
            if parsed is None:
                continue
            position, done = parsed
            (ended if done else positions).add(position)
        return OrderView(tuple(sorted(positions)), frozenset(ended & positions))

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
        key = self.outcome_key(position)
        try:
            data = self.store.get_object(self.table.bucket, key)
        except NoSuchKeyError:
            return None
        return OrderOutcome.from_bytes(data, where=f"s3://{self.table.bucket}/{key}", table=self.table,
                                       position=position)

    def entries(self, positions: Iterable[int]) -> list[OrderEntry]:
        found = []
        for p in positions:
            e = self.entry(p)
            if e is not None:
                found.append(e)
        return found

    def find(self, job_id: str, *, view: OrderView | None = None) -> OrderEntry | None:
        """The place of ``job_id`` among the open ones (a job's place stays open until the job has ended)."""
        view = view or self.view()
        for e in self.entries(reversed(view.open)):
            if e.job_id == job_id:
                return e
        return None

    def jobs_after(self, position: int) -> set[str]:
        """Every job that took a place after ``position`` (read after the listing it is used to judge)."""
        view = self.view()
        return {e.job_id for e in self.entries(p for p in view.positions if p > position)}

    # ------------------------------------------------------------ writing
    def take(self, proto: OrderEntry, conditional: ConditionalWrites) -> OrderEntry:
        """Take the next free place for ``proto`` (its position is ignored). Of two jobs trying one place the
        store lets one create it; the other tries the next."""
        position = self.view().highest + 1
        while True:
            entry = replace(proto, position=position)
            data = entry.to_bytes()
            key = self.entry_key(position)
            try:
                self.store.put_object(self.table.bucket, key, data, if_none_match=True)
            except PreconditionFailedError:
                if self._read_raw(key) == data:
                    break  # our own write, whose answer was lost and retried
                position += 1
                continue
            if not conditional.create_only and self._read_raw(key) != data:
                position += 1  # the store ignored the condition and another job wrote over ours: try the next
                continue
            break
        self._entries[position] = entry
        return entry

    def end(self, entry: OrderEntry, outcome: Outcome, *, reason: str = "") -> tuple[OrderOutcome, bool]:
        """Record how the job at ``entry`` ended. Returns the outcome that holds, and whether it is this call's:
        when another process ended the job first, its record stays and this one is not written."""
        record = OrderOutcome(entry.position, entry.job_id, entry.bucket, entry.table, outcome,
                              int(time.time() * 1000), socket.gethostname(), reason, writer=uuid.uuid4().hex)
        key = self.outcome_key(entry.position)
        data = record.to_bytes()
        try:
            self.store.put_object(self.table.bucket, key, data, if_none_match=True)
        except PreconditionFailedError:
            if self._read_raw(key) == data:
                return record, True  # our own write, whose answer was lost and retried
            found = self.outcome(entry.position)
            if found is not None:
                return found, False
            raise
        return record, True

    def _read_raw(self, key: str) -> bytes | None:
        try:
            return self.store.get_object(self.table.bucket, key)
        except NoSuchKeyError:
            return None

    # ------------------------------------------------------------ deciding
    def wait_for_earlier(self, me: OrderEntry, paths: tuple[str, ...], *,
                         take_over: Callable[[OrderEntry], None], progress: ProgressHook | None = None) -> None:
        """Return once every job before ``me`` that touches ``paths`` has ended. A job silent for the lease is
        handed to ``take_over`` (which finishes or rolls it back); a live one is waited for, at most
        ``max_wait_seconds``, after which CommitFailedError names it."""
        settings = self.settings
        pulse = Pulse(self.store)
        started = time.monotonic()
        delay = min(0.05, settings.poll_seconds)
        while True:
            view = self.view()
            blocking = [e for e in self.entries(view.open_before(me.position)) if e.overlaps(paths)]
            if not blocking:
                return
            if progress is not None:
                progress("wait", 0, len(blocking))
            for e in blocking:
                paths_of = JobPaths(self.table.destination(e.destination), e.job_id)
                if pulse.silent_for(paths_of) >= settings.lease_seconds:
                    take_over(e)
            waited = time.monotonic() - started
            if settings.max_wait_seconds is not None and waited > settings.max_wait_seconds:
                first = blocking[0]
                raise CommitFailedError(
                    f"job {me.job_id} waited {waited:.0f} s for job {first.job_id} (place {first.position} in the "
                    f"commit order of {self.table.uri}), which is still committing and alive; nothing of "
                    f"{me.job_id} is visible. Run it again once {first.job_id} has ended.")
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

    def refuse_beside_others(self, me: OrderEntry, conditional: ConditionalWrites) -> None:
        """On a store without conditional writes, a destructive job runs only when no other job of the table is
        between its place and its end: it cannot be ordered against them."""
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
    def collect_garbage(self) -> int:
        """Delete ended places below the oldest open one, keeping the newest ``keep_resolved`` of them (a
        compaction that listed its sources a while ago still finds what came after it). Returns keys deleted."""
        view = self.view()
        open_places = view.open
        limit = open_places[0] if open_places else view.highest + 1
        ended = [p for p in view.positions if p < limit and p in view.ended]
        doomed = ended[: max(0, len(ended) - self.settings.keep_resolved)]
        if not doomed:
            return 0
        # Entries first: an end without its entry is ignored, while an entry whose end was deleted would read as
        # a job still open, and make later jobs wait for it.
        try:
            deleted = self.store.delete_objects(self.table.bucket, [self.entry_key(p) for p in doomed])
            return deleted + self.store.delete_objects(self.table.bucket, [self.outcome_key(p) for p in doomed])
        except MpcommitError:
            return 0  # tidying only; the next job tries again
        finally:
            for p in doomed:
                self._entries.pop(p, None)


class NestedTables:
    """Other tables inside a scope, told from the keys of a listing of it: their commit orders and job records.
    A nested table with a job in flight (an open place, or a job's records) cannot be overwritten or compacted
    from outside, whose jobs its order does not see; an idle one is just files."""

    def __init__(self, table: Table):
        self.table = table
        self._places: dict[str, set[int]] = {}
        self._ended: dict[str, set[int]] = {}
        self._jobs: dict[str, set[str]] = {}

    def add(self, key: str) -> None:
        other = nested_table_of(self.table, key)
        if other is None:
            return
        rel = key[len(other_root(self.table, other)):]
        if rel.startswith("_mpcommit/order/"):
            parsed = parse_order_name(rel[len("_mpcommit/order/"):])
            if parsed is not None:
                (self._ended if parsed[1] else self._places).setdefault(other, set()).add(parsed[0])
        elif rel.startswith("_temporary/mpcommit/"):
            self._jobs.setdefault(other, set()).add(rel.split("/")[2] if rel.count("/") >= 2 else "")

    def in_flight(self) -> dict[str, str]:
        """{table URI: why} for every nested table with a job in flight."""
        out: dict[str, str] = {}
        for uri, places in self._places.items():
            open_places = places - self._ended.get(uri, set())
            if open_places:
                out[uri] = f"place {min(open_places)} of its commit order is open"
        for uri, jobs in self._jobs.items():
            out.setdefault(uri, f"job {sorted(jobs)[0]} has records there")
        return out


def other_root(table: Table, uri: str) -> str:
    """The key prefix ("a/b/") of the table at ``uri`` in ``table``'s bucket."""
    prefix = uri.split("://", 1)[1].partition("/")[2]
    return f"{prefix}/" if prefix else ""
