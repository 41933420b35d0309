"""One job as this process works on it: what the first commit (:mod:`.committer`), the finisher of a journal
(:mod:`.finisher`) and the rollback (:mod:`.rollback`) share -- the store, the job's paths, its table's commit
order, the commit's threads and progress, and the heartbeat this process holds the job by while it works for it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence

from ...errors import CommitFailedError, MpcommitError, NoSuchKeyError
from ...options import OrderSettings
from ...pool import ProgressHook
from ...store.conditional import ConditionalWrites, conditional_writes
from ...store.s3 import S3Store
from ..heartbeat import Heartbeat
from ..layout import Destination, JobPaths, table_of
from ..order import TableOrder
from ..records.job import CommitJournal, JobRollback, read_claim
from ..records.order import OrderEntry, Txn, table_paths
from .manifests import ManifestReader
from .placing import directory_of

#: Finishes or rolls back another job of the table that went silent (``why`` it is in the way, for the log).
TakeOver = Callable[..., None]


def _noop(_step: str, _done: int, _total: int | None) -> None:
    pass


class JobWork:
    """One job of one destination, as this process works on it. ``threads``: the commit's requests in flight (0:
    all on the caller's thread, for deterministic tests); ``order``: how the job waits for the jobs before it;
    ``table_order``: its table's order as this process reads it already (entries and ends read once for every
    job a ``recover`` or a waiting job decides), else a new one."""

    def __init__(self, store: S3Store, destination: Destination, job_id: str, *, threads: int,
                 progress: ProgressHook | None = None, order: OrderSettings | None = None,
                 table_order: TableOrder | None = None):
        self.store = store
        self.destination = destination
        self.job_id = job_id
        self.paths = JobPaths(destination, job_id)
        self.threads = max(0, threads)
        self.progress = progress or _noop
        self.manifests = ManifestReader(store, destination, job_id)
        self.table = table_of(destination)
        if table_order is not None and table_order.table != self.table:
            raise ValueError(f"the order of {table_order.table.uri} is not the order of job {job_id}'s table")
        self.order = table_order if table_order is not None else TableOrder(store, self.table, order)
        #: The job's heartbeat while this process works for it: stopped before its records are removed.
        self.heartbeat: Heartbeat | None = None

    def quiet(self) -> None:
        """Stop beating for the job: its records are about to go, or another process holds it."""
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def conditional(self) -> ConditionalWrites:
        return conditional_writes(self.store, self.destination.bucket, self.table.root)

    def read_claim(self) -> CommitJournal | JobRollback | None:
        """What holds the job's journal key: its commit journal, the record of its rollback, or nothing."""
        return self.read_claim_and_etag()[0]

    def read_claim_and_etag(self) -> tuple[CommitJournal | JobRollback | None, str | None]:
        """:meth:`read_claim`, and the ETag it was read with (None, None: nothing holds the key)."""
        try:
            data, etag = self.store.get_object_and_etag(self.destination.bucket, self.paths.journal)
        except NoSuchKeyError:
            return None, None
        return read_claim(data, where=self.paths.journal, destination=self.destination, job_id=self.job_id), etag

    # ------------------------------------------------------------ the job's place in its table's order
    def entry_for(self, journal: CommitJournal, partitions: Sequence[str], txn: Txn | None = None) -> OrderEntry:
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

    def take_place(self, journal: CommitJournal, partitions: Sequence[str], txn: Txn | None = None) -> OrderEntry:
        try:
            return self.order.take(self.entry_for(journal, partitions, txn))
        except MpcommitError as exc:
            raise CommitFailedError(f"job {self.job_id} was not committed, nothing was made visible: it could not "
                                    f"take its place in the commit order of {self.table.uri}: {exc}") from exc
