"""Exactly-once micro-batches of a streaming query, engine-neutral: what decides whether an attempt of micro-batch B
may commit, and under which name it commits.

A query's micro-batch B is one job, committed as version B of the query's application in the table's commit
order (:func:`batch_txn`): "was B committed?" is answered by that one fact, written with the commit itself and
kept through the order's garbage collection (the checkpoint keeps the newest version of every application). An
attempt's job id carries the query (48 bits of its id's hash) and the batch (:func:`batch_job_id`), so every
attempt of one micro-batch -- the first run's, a replay's after a crash -- is found by its id alone.

Committing attempt J of micro-batch B (:meth:`StreamCommitter.prepare`, then the job's commit with the returned
:class:`~mpcommit.protocol.records.order.Txn`):

1. The query's record beside the table (:class:`~mpcommit.protocol.records.stream.StreamQuery`) is created at its
   first micro-batch and checked at every later one: a restart on another table, or with other partition columns
   or another format, is refused by name.
2. Every other attempt of B still under the table's job records is finished (its journal was written: its commit
   began) or rolled back (its journal key is claimed, so that it can never commit, even from a process that is
   still alive).
3. B is looked up in the order: committed already (Spark's checkpoint lagged the data commit), J is rolled back and
   nothing is written twice.
4. Otherwise J commits as version B. The commit decides again against the places taken meanwhile (an attempt of B
   that woke from a pause and committed first makes J's commit a no-op that names it), and refuses a version older
   than the query's newest.

A driver killed anywhere leaves one of: J writing (rolled back at 2 by the replay), J committing (finished at 2), J
committed (recognised at 3). Readers see each micro-batch whole once its commit has finished or been finished.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import JobRolledBackError, JobStateError, ManifestError, MpcommitError, UsageError
from ..options import OrderSettings
from ..store.conditional import Held, Records
from ..store.s3 import S3Store
from .commit import JobCommitter
from .layout import HIDDEN_ROOT, Destination, table_of
from .order import TableOrder
from .records.order import Outcome, Txn, TxnRecord
from .records.stream import LegacyProgress, StreamQuery, StreamStateError

__all__ = ["MAX_BATCH_ID", "STREAMS_ROOT", "StreamCommitter", "StreamQuery", "StreamStateError", "batch_job_id", "batch_of_job",
           "batch_prefix", "batch_txn"]

log = logging.getLogger(__name__)

#: Under the table's root: one record per query.
STREAMS_ROOT = "_mpcommit/streams/"
#: Batch ids a job id can carry (eight hex digits): a micro-batch a second would take 136 years to reach it.
MAX_BATCH_ID = 2 ** 32 - 1
#: The application a query's micro-batches commit as versions of.
APP_PREFIX = "stream:"


def batch_job_id(query_id: str, batch_id: int, salt: str) -> str:
    """The job of one attempt of micro-batch ``batch_id`` of query ``query_id``: UUID-shaped, so that every key
    of the job carries it as any job id, with the query (48 bits of its hash) and the batch readable in it."""
    return f"{batch_prefix(query_id, batch_id)}-{salt}"


def batch_prefix(query_id: str, batch_id: int) -> str:
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise UsageError(f"micro-batch id {batch_id} is beyond what mpcommit's sink can name (0 to {MAX_BATCH_ID})")
    q = hashlib.sha256(query_id.encode()).hexdigest()[:12]
    b = f"{batch_id:08x}"
    return f"{q[:8]}-{q[8:12]}-{b[:4]}-{b[4:]}"


def batch_of_job(query_id: str, job_id: str) -> int | None:
    """The micro-batch of ``query_id`` that job ``job_id`` is an attempt of; None when it is not one."""
    query = batch_prefix(query_id, 0)[:13]
    if not job_id.startswith(query + "-") or len(job_id) < 23:
        return None
    try:
        return int(job_id[14:18] + job_id[19:23], 16)
    except ValueError:
        return None


def batch_txn(query_id: str, batch_id: int) -> Txn:
    """Micro-batch ``batch_id`` of query ``query_id`` as the version of an application it commits as."""
    return Txn(APP_PREFIX + query_id, batch_id)


class StreamCommitter:
    """The micro-batches of one query on one table (``query`` says what it writes)."""

    def __init__(self, store: S3Store, destination: Destination, query: StreamQuery, *,
                 order: OrderSettings | None = None):
        self.store = store
        self.destination = destination
        self.table = table_of(destination)
        self.query = query
        self.order_settings = order
        #: The table's commit order as this committer reads it: the ledger's look-ups and the micro-batch's own
        #: commit (hand it to the job) share the entries and ends read once.
        self.order = TableOrder(store, self.table, order)
        self.key = f"{self.table.root}{STREAMS_ROOT}{query.query_id}.json"
        self.where = f"s3://{self.table.bucket}/{self.key}"

    # ------------------------------------------------------------ the steps
    def prepare(self, batch_id: int, job_id: str) -> Txn | None:
        """Steps 1-3 for attempt ``job_id`` of micro-batch ``batch_id``: the version to commit it as, or None when
        the micro-batch was committed before (``job_id`` is then rolled back). StreamStateError when the query
        does not match what it wrote before."""
        prefix = batch_prefix(self.query.query_id, batch_id) + "-"
        if not job_id.startswith(prefix):
            raise StreamStateError(f"job {job_id} is not one of query {self.query.query_id}'s for micro-batch "
                                   f"{batch_id}")
        # A micro-batch's commit is latency: the query's record, the batch's attempts and the ledger are read side
        # by side. The ledger is asked again after settling other attempts (one may commit the batch as it is
        # finished). Read before the attempts were listed, it can only miss a commit that ended meanwhile -- and
        # the job's own commit decides again, after its place: this look is there to spare a replay its place.
        with ThreadPoolExecutor(2, thread_name_prefix="mpcommit-stream") as pool:
            attempts = pool.submit(self._attempts, batch_id)
            ledger = pool.submit(self.newest)
            recorded = self._record(batch_id)
            others = [other for other in attempts.result() if other != job_id]
            newest = ledger.result()
        for other in others:
            self._settle(other, batch_id)
        if others:
            newest = self.newest()
        committed = self._committed(batch_id, recorded.legacy, newest)
        if committed is not None:
            self.roll_back(job_id, f"micro-batch {batch_id} was committed before, by job {committed}; Spark's "
                                   "checkpoint lagged")
            return None
        return batch_txn(self.query.query_id, batch_id)

    def newest(self) -> TxnRecord | None:
        """The newest micro-batch of the query committed to the table (its version is the batch id)."""
        return self.order.txn_state(batch_txn(self.query.query_id, 0).app_id).newest

    def roll_back(self, job_id: str, why: str) -> None:
        """Roll back an attempt that must not commit (its commit never began)."""
        log.warning("%s: job %s is rolled back", why, job_id)
        try:
            JobCommitter(self.store, self.destination, job_id).rollback(reason=why)
        except MpcommitError as exc:  # the original reason matters more; orphan cleanup catches the rest
            log.warning("job %s could not be rolled back (%s)", job_id, exc)

    def abort(self, batch_id: int, job_ids: set[str] | None = None) -> None:
        """Roll back micro-batch ``batch_id``'s attempts ``job_ids`` (None: every attempt with records under the
        table's job records) after Spark aborted it: nothing of them stays visible or pending. An attempt whose
        commit began is left to the replay, or ``mpcommit jobs recover``, which finish it."""
        for job_id in sorted(job_ids if job_ids is not None else self._attempts(batch_id)):
            try:
                JobCommitter(self.store, self.destination, job_id).rollback(
                    reason=f"micro-batch {batch_id} aborted by Spark")
                log.info("micro-batch %d: job %s rolled back", batch_id, job_id)
            except JobStateError as exc:
                log.warning("micro-batch %d: job %s was not rolled back: %s", batch_id, job_id, exc)

    # ------------------------------------------------------------ inside
    def _record(self, batch_id: int) -> StreamQuery:
        """Step 1: the query's record, created at its first micro-batch, else checked against this run's."""
        records = Records.of(self.store, self.table.bucket, self.table.root)
        found = records.read(self.key)
        if found is None:
            if batch_id > 0:
                raise StreamStateError(
                    f"query {self.query.query_id} is at micro-batch {batch_id}, and {self.destination.uri} holds no "
                    "record of it: its checkpoint committed the earlier micro-batches to another table (was it "
                    "restarted with another path?). Restart it with the path it was started with, or with a new "
                    "checkpointLocation to start this table afresh. Nothing was written.")
            mine = StreamQuery(self.query.query_id, self.query.destination, tuple(self.query.partition_by),
                               self.query.format, int(time.time() * 1000), socket.gethostname())
            held = records.create(self.key, mine.to_bytes())
            if isinstance(held, Held):
                return mine
            if held.body is None:
                raise StreamStateError(f"{self.where} was created and removed while micro-batch {batch_id} was "
                                       "being committed; restart the query")
            found = (held.body, held.etag or "")
        record = StreamQuery.from_bytes(found[0], where=self.where, query_id=self.query.query_id)
        if record.identity() != self.query.identity():
            names = ("destination", "partition columns", "format")
            diff = "; ".join(f"{n}: {a!r} before, {b!r} now"
                             for n, a, b in zip(names, record.identity(), self.query.identity()) if a != b)
            raise StreamStateError(
                f"query {self.query.query_id} was started writing {record.destination} partitioned by "
                f"{list(record.partition_by)} as {record.format}, and is restarted otherwise ({diff}). Restart it as "
                "it was started, or with a new checkpointLocation (and another table) to write otherwise. Nothing "
                "was written.")
        return record

    def _attempts(self, batch_id: int) -> list[str]:
        """The attempts of micro-batch ``batch_id`` that have records under the table's job records."""
        prefix = batch_prefix(self.query.query_id, batch_id) + "-"
        root = f"{self.destination.root}{HIDDEN_ROOT}"
        return [name for name in (n.rstrip("/") for n in self.store.list_children(self.destination.bucket, root))
                if name.startswith(prefix)]

    def _settle(self, other: str, batch_id: int) -> None:
        """Step 2 for one other attempt: finished when its commit began, else rolled back for good."""
        committer = JobCommitter(self.store, self.destination, other)
        reason = f"an earlier attempt of micro-batch {batch_id}, settled by its replay"
        for _attempt in range(3):
            try:
                got = committer.recover_job(reason=reason)
                log.warning("micro-batch %d: earlier attempt %s %s", batch_id, other,
                            "finished" if hasattr(got, "filenames") else "rolled back")
                return
            except JobRolledBackError:
                return
            except JobStateError:
                continue  # its commit began meanwhile: finish it on the next try
            except ManifestError as exc:
                raise StreamStateError(f"micro-batch {batch_id}: an earlier attempt, job {other}, could not be "
                                       f"settled ({exc}); run `mpcommit jobs recover {self.destination.uri} --job "
                                       f"{other}`, then restart the query") from exc
        raise StreamStateError(f"micro-batch {batch_id}: an earlier attempt, job {other}, kept changing state")

    def _committed(self, batch_id: int, legacy: LegacyProgress | None, newest: TxnRecord | None) -> str | None:
        """Step 3: the job that committed micro-batch ``batch_id`` (``newest``: the query's newest version in the
        order), None when none did."""
        if legacy is not None:
            found = self._legacy_committed(batch_id, legacy)
            if found is not None:
                return found
        if newest is None or newest.version < batch_id:
            return None
        if newest.version > batch_id:
            raise StreamStateError(
                f"query {self.query.query_id} is at micro-batch {batch_id}, and committed micro-batch "
                f"{newest.version} to {self.destination.uri} already (job {newest.job_id}): its checkpoint is older "
                "than the table (was it restored from a copy?). Restart it with its own checkpoint, or with a new "
                "checkpointLocation. Nothing was written.")
        return newest.job_id

    def _legacy_committed(self, batch_id: int, legacy: LegacyProgress) -> str | None:
        """What a record of an older mpcommit says of ``batch_id``: committed when it is at or below the last batch
        it recorded, or when the attempt it named as pending committed in the order (looked up from the place that
        attempt could first take)."""
        if batch_id <= legacy.last_batch:
            return legacy.last_job or "(recorded by an older mpcommit)"
        pending = legacy.pending
        if pending is None or pending.batch_id != batch_id:
            return None
        order = self.order
        view = order.view()
        if view.positions and view.lowest > pending.after + 1:
            raise StreamStateError(
                f"cannot tell whether micro-batch {batch_id} of query {self.query.query_id} was committed: an older "
                f"mpcommit recorded its attempt {pending.job_id} as pending after place {pending.after}, and the "
                f"commit order of {self.table.uri} no longer holds places {pending.after + 1} to {view.lowest - 1}. "
                f"Look for data files of a job whose id starts {batch_prefix(self.query.query_id, batch_id)}- in the "
                "table: if there are some, the micro-batch is committed. Nothing was written.")
        prefix = batch_prefix(self.query.query_id, batch_id) + "-"
        for p in view.positions:
            if p <= pending.after:
                continue
            entry = order.entry(p)
            if entry is None or not entry.job_id.startswith(prefix):
                continue
            outcome = order.outcome(p)
            if outcome is not None and outcome.outcome is Outcome.COMMITTED:
                return entry.job_id
        return None
