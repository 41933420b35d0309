"""A Structured Streaming sink with exactly-once output for every reader of the plain layout:
``df.writeStream.format("mpcommit").option("checkpointLocation", ...).start("s3://bucket/table")``.

Each micro-batch is one mpcommit job, written by the batch's tasks and committed by the sink's ``commit`` as any
write is (:mod:`.plan`). Its identity is (query id, batch id): Spark keeps the query id in the checkpoint and hands
it, with the batch id, to every task. The job id carries both (:func:`batch_job_id`: 48 bits of the query id's
hash, the batch id, and 48 random bits per run of the batch), so every attempt of one micro-batch -- the first
run's, a run after a crash that Spark replays -- is known by its id alone: under the table's hidden job records
while it is in flight, in the table's commit order after it took its place.

What the sink records beside the table, under ``TABLE/_mpcommit/streams/QUERY.json`` (:class:`StreamProgress`),
rewritten with conditional writes (If-Match on the last version read): the last micro-batch it committed (batch
id, job, place in the commit order), the attempt about to commit (``pending``: batch, job, and the highest place
in the order before it took one), and what the query writes (destination, partition columns, format).

Committing micro-batch B of query Q as job J:

1. Progress says B (or a later batch) is committed: Spark's checkpoint lagged the data commit, and this is a
   replay. J is rolled back; the batch is not written twice. Records another attempt of B left (its driver was
   killed after recording progress, before its job's records were gone) are tidied: that job is finished.
2. Every other attempt of (Q, B) still under the table's job records is finished or rolled back
   (``JobCommitter.recover_job``: a journal means the attempt's commit began, and it is finished; otherwise its
   journal key is claimed by a rollback, so that it can never commit, even from a process still alive).
3. The commit order is read from the place the last pending attempt saw (every attempt writes ``pending`` before
   its commit takes a place): an attempt of (Q, B) that committed there means the batch is committed -- progress
   is brought up to date and J rolled back. Places cleared from the order meanwhile (after hundreds of later
   jobs) make that unknowable: refused by name (:class:`StreamStateError`), never guessed.
4. Otherwise ``pending`` is set to J (conditionally: a change meanwhile starts over at 1), J is committed, and
   progress records B as committed -- once J's end is in the table's order, beside the removal of J's records,
   not after it. Spark writes its own commit log after that.

The progress record and the table's job records are read at once (with J's descriptor), the commit order after
both: an attempt that had left the job records by then has its place in the order already.

A driver killed anywhere in there leaves one of: J writing (rolled back at 2 by the replay), J committing
(finished at 2), J committed but progress not updated (recognised at 3), progress updated (recognised at 1, J's
records removed there if they were not yet).
Readers see each micro-batch whole once its commit has finished or been finished: a listing taken while a
commit completes its files (or after a driver died in that step, until the replay finishes it) can show part of
it, as S3 makes no group of objects visible at once.

A micro-batch whose tasks failed is rolled back by ``abort``: nothing of it stays visible or pending. A query
restarted on a different table, or with other partition columns or another format, is refused by name.

Output mode complete: Spark hands the sink ``overwrite=True``, and each micro-batch -- the query's whole result --
is an overwrite job that replaces the table's contents (the progress record, under the hidden ``_mpcommit/``,
stays); replays are recognised as above.

The named points where tests kill the driver (:mod:`mpcommit.protocol.faults`, indexed by batch id):
``stream.before_commit``, ``stream.after_pending``, ``stream.after_data_commit`` (J committed, progress not yet
updated) and ``stream.after_progress`` (progress updated, Spark's commit log not yet written); the job commit's
own points (``commit.after_complete`` ...) lie between ``stream.after_pending`` and ``stream.after_data_commit``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import orjson
import pyarrow as pa

from ..errors import (
    JobRolledBackError,
    JobStateError,
    ManifestError,
    MpcommitError,
    NoSuchKeyError,
    PreconditionFailedError,
    ProtocolError,
    UsageError,
)
from ..options import S3Options, WriterSettings
from ..protocol import faults
from ..protocol.commit import JobCommitter
from ..protocol.job import check_bucket_root_overwrite, write_descriptor
from ..protocol.layout import HIDDEN_ROOT, Destination, parse_uri, table_of
from ..protocol.order import TableOrder
from ..protocol.records.base import Reader, check_kind, dumps, loads_object
from ..protocol.records.job import JobDescriptor
from ..protocol.records.manifest import InlineBudget, TaskResult
from ..protocol.records.order import Outcome
from ..protocol.task import JobSpec
from ..store.conditional import Held, Records
from ..store.s3 import S3Store, store_for
from .datasource import Message, TaskOutcome
from .plan import PlannedWrite, arrow_schema_of, plan_write
from .session import Recorder, SessionSettings
from .source_options import parse
from .tasks import run_task

log = logging.getLogger(__name__)

#: What Spark hands a micro-batch's tasks (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY).
QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"
#: Under the table's root: one progress record per query.
STREAMS_ROOT = "_mpcommit/streams/"
PROGRESS_KIND = "mpcommit.StreamProgress"
#: Batch ids a job id can carry (eight hex digits): a micro-batch a second would take 136 years to reach it.
MAX_BATCH_ID = 2 ** 32 - 1


class StreamStateError(MpcommitError):
    """What the sink recorded cannot tell whether a micro-batch was committed, or does not match the query."""


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


# ---------------------------------------------------------------- the record beside the table
@dataclass(frozen=True)
class Pending:
    batch_id: int
    job_id: str
    #: The highest place in the table's commit order before this attempt could take one.
    after: int


@dataclass(frozen=True)
class StreamProgress:
    """One query's progress on one table (``TABLE/_mpcommit/streams/QUERY.json``)."""

    query_id: str
    destination: str
    partition_by: tuple[str, ...]
    format: str
    last_batch: int = -1
    last_job: str | None = None
    last_position: int = 0
    pending: Pending | None = None
    updated_ms: int = 0
    hostname: str = ""

    def to_bytes(self) -> bytes:
        pending = None if self.pending is None else {
            "batchId": self.pending.batch_id, "jobId": self.pending.job_id, "after": self.pending.after}
        return dumps({"kind": PROGRESS_KIND, "version": 1, "queryId": self.query_id, "destination": self.destination,
                      "partitionBy": list(self.partition_by), "format": self.format, "lastBatchId": self.last_batch,
                      "lastJobId": self.last_job, "lastPosition": self.last_position, "pending": pending,
                      "updated": self.updated_ms, "hostname": self.hostname})

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, query_id: str) -> "StreamProgress":
        what = "stream progress"
        obj = loads_object(data, what=what, where=where)
        check_kind(obj, kind=PROGRESS_KIND, versions=(1,), what=what, where=where)
        r = Reader(obj, what=what, where=where)
        if r.str("queryId") != query_id:
            raise StreamStateError(f"{what} at {where} belongs to query {obj.get('queryId')!r}, not {query_id}")
        last = obj.get("lastBatchId")
        if not isinstance(last, int) or isinstance(last, bool) or last < -1:
            raise StreamStateError(f"{what} at {where}: lastBatchId must be an integer >= -1, got {last!r}")
        pending = None
        if obj.get("pending") is not None:
            p = r.obj_of(obj["pending"], f"{where}: pending")
            pending = Pending(p.int("batchId"), p.str("jobId"), p.int("after"))
        return cls(query_id=query_id, destination=r.str("destination"),
                   partition_by=r.list("partitionBy", lambda v, w: _text(v, w)), format=r.str("format"),
                   last_batch=last, last_job=r.str("lastJobId", optional=True), last_position=r.int("lastPosition"),
                   pending=pending, updated_ms=r.int("updated"), hostname=r.str("hostname", optional=True) or "")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise StreamStateError(f"{where} must be a string, got {value!r}")
    return value


class ProgressBook:
    """Reads and conditionally rewrites one query's :class:`StreamProgress`."""

    def __init__(self, store: S3Store, destination: Destination, query_id: str):
        self.store = store
        self.table = table_of(destination)
        self.query_id = query_id
        self.key = f"{self.table.root}{STREAMS_ROOT}{query_id}.json"
        self.where = f"s3://{self.table.bucket}/{self.key}"

    def read(self) -> tuple[StreamProgress | None, str | None]:
        try:
            data, etag = self.store.get_object_and_etag(self.table.bucket, self.key)
        except NoSuchKeyError:
            return None, None
        return StreamProgress.from_bytes(data, where=self.where, query_id=self.query_id), etag

    def write(self, record: StreamProgress, etag: str | None) -> str:
        """Replace the version read (``etag``; None: there was none), through the store's one seam of conditional
        writes. PreconditionFailedError when it changed meanwhile."""
        record = replace(record, updated_ms=int(time.time() * 1000), hostname=socket.gethostname())
        found = Records.of(self.store, self.table.bucket, self.table.root).replace(self.key, record.to_bytes(),
                                                                                   etag=etag)
        if not isinstance(found, Held):
            raise PreconditionFailedError(f"{self.where} changed while this micro-batch was being committed",
                                          operation="put_object", bucket=self.table.bucket, key=self.key)
        return found.etag


# ---------------------------------------------------------------- the sink
class StreamSink:
    """The sink of one streaming query (``pyspark_source.StreamWriter`` is this as PySpark's
    ``DataSourceStreamArrowWriter``). Spark makes one per micro-batch where it plans the batch (its tasks get that
    one, pickled) and one where it commits the batch."""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool):
        session = Recorder(SessionSettings.unseen())
        source = parse(options, overwrite=overwrite, session=session, streaming=True,
                       columns=list(schema.fieldNames()))
        self.planned: PlannedWrite = plan_write(source.request, arrow_schema_of(schema, session.settings), session)
        request = self.planned.request
        self.destination = parse_uri(request.uri)
        check_bucket_root_overwrite(self.destination, request.mode, request.partition_overwrite,
                                    allowed=request.settings.overwrite_bucket_root, partitioned=bool(self.planned.columns))
        #: Tells this run's attempt of a micro-batch from another run's (the tasks of one run share it).
        self.salt = secrets.token_hex(6)
        self.checkpoint = source.checkpoint

    # ------------------------------------------------------------ in the tasks
    def write_task(self, iterator: Iterator[pa.RecordBatch]) -> TaskOutcome:
        query_id, batch_id = _batch_of_task()
        spec = self.spec(batch_job_id(query_id, batch_id, self.salt))
        _record_job(spec, self.planned)
        result = run_task(self.planned.task_plan(spec), iterator)
        return TaskOutcome(result.to_bytes(), spec.job_id, query_id)

    def spec(self, job_id: str) -> JobSpec:
        """The job of one attempt of a micro-batch."""
        s = self.planned.request.settings
        return JobSpec(job_id=job_id, destination=self.destination, s3=s.s3 or S3Options(),
                       writer=s.writer or WriterSettings())

    def store(self) -> S3Store:
        return store_for(self.planned.request.settings.s3 or S3Options())

    # ------------------------------------------------------------ on the driver
    def commit(self, messages: Sequence[Message | None], batch_id: int) -> None:
        BatchCommit(self, batch_id, messages).run()

    def abort(self, messages: Sequence[Message | None], batch_id: int) -> None:
        """Roll back the micro-batch's attempt: nothing of it stays visible or pending. When no task lived to
        name its job (the query was stopped mid-batch, every task failed), this run's attempts of the batch are
        found by their ids from the query id in the checkpoint (when its location is an option and a local or S3
        path); else the replay, or ``mpcommit jobs recover --older-than``, removes them."""
        store = self.store()
        jobs = {m.job_id for m in messages if m is not None and getattr(m, "job_id", None)}
        if not jobs:
            query_id = query_of_checkpoint(self.checkpoint, store)
            if query_id is not None:
                prefix = batch_prefix(query_id, batch_id) + "-"
                root = f"{self.destination.root}{HIDDEN_ROOT}"
                jobs = {n.rstrip("/") for n in store.list_children(self.destination.bucket, root)
                        if n.startswith(prefix)}
        for job_id in sorted(jobs):
            try:
                JobCommitter(store, self.destination, job_id).rollback(
                    reason=f"micro-batch {batch_id} aborted by Spark")
                log.info("micro-batch %d: job %s rolled back", batch_id, job_id)
            except JobStateError as exc:  # its commit began: the replay (or `recover`) finishes it
                log.warning("micro-batch %d: job %s was not rolled back: %s", batch_id, job_id, exc)


def query_of_checkpoint(checkpoint: str | None, store: S3Store) -> str | None:
    """The query id Spark keeps in ``CHECKPOINT/metadata`` ({"id": ...}), for a local or S3 checkpoint location;
    None where it cannot be read."""
    if not checkpoint:
        return None
    try:
        if checkpoint.startswith(("s3://", "s3a://", "s3n://")):
            where = parse_uri(checkpoint)
            data = store.get_object(where.bucket, f"{where.root}metadata")
        else:
            path = checkpoint[len("file:"):] if checkpoint.startswith("file:") else checkpoint
            if "://" in path or not path.startswith("/"):
                return None
            with open(os.path.join("/" + path.lstrip("/"), "metadata"), "rb") as f:
                data = f.read()
        found = orjson.loads(data.splitlines()[0]).get("id")
    except (OSError, MpcommitError, ValueError, IndexError, AttributeError):
        return None
    return found if isinstance(found, str) and found else None


def _batch_of_task() -> tuple[str, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_KEY) if context is not None else None
    batch = context.getLocalProperty(BATCH_ID_KEY) if context is not None else None
    if not query_id or batch is None:
        raise ProtocolError("mpcommit's streaming sink ran in a task that Spark did not give a query id and batch id "
                            f"({QUERY_ID_KEY}, {BATCH_ID_KEY}); it runs in Structured Streaming micro-batches only")
    return query_id, int(batch)


def _record_job(spec: JobSpec, planned: PlannedWrite) -> None:
    """The job's descriptor, written by the first of the micro-batch's tasks before any upload (as ``Job.create``
    writes it before the tasks of other writes), so that cleanup tools tell its uploads from orphans."""
    request = planned.request
    d = spec.destination
    descriptor = JobDescriptor(job_id=spec.job_id, bucket=d.bucket, prefix=d.prefix, mode=request.mode,
                               partition_overwrite=request.partition_overwrite, created_ms=int(time.time() * 1000),
                               hostname=socket.gethostname())
    write_descriptor(store_for(spec.s3), spec.paths, descriptor)  # or another task of the micro-batch did first


@dataclass
class Settled:
    """What the other attempts of a micro-batch came to."""

    committed_by: str | None
    position: int
    highest: int


class BatchCommit:
    """The commit of one micro-batch (see the module's steps 1-4)."""

    def __init__(self, sink: StreamSink, batch_id: int, messages: Sequence[Message | None]):
        self.sink = sink
        self.batch_id = batch_id
        self.messages = [m for m in messages if m is not None]
        self.destination = sink.destination
        self.store = sink.store()

    def run(self) -> None:
        faults.checkpoint("stream.before_commit", self.batch_id)
        if not self.messages:
            log.info("micro-batch %d: no task ran, nothing to commit", self.batch_id)
            return
        query_id, job_id = self._identity()
        book = ProgressBook(self.store, self.destination, query_id)
        # A micro-batch's commit is latency: what does not depend on another read is read at once (this
        # attempt's descriptor beside the progress record and the table's job records), and the progress is
        # recorded beside the removal of the job's records rather than after it.
        with ThreadPoolExecutor(3, thread_name_prefix="mpcommit-stream") as pool:
            descriptor = pool.submit(self._descriptor, job_id)
            try:
                budget = InlineBudget()
                results = [TaskResult.from_bytes(m.result, destination=self.destination, job_id=job_id, budget=budget)
                           for m in self.messages if m.result is not None]
                claimed = self._claim(book, query_id, job_id, pool)
            except BaseException:
                self._roll_back(job_id, f"micro-batch {self.batch_id} was refused before its commit")
                raise
            if claimed is None:
                return  # committed before: this attempt was rolled back
            record, etag = claimed
            faults.checkpoint("stream.after_pending", self.batch_id)
            recording: list[Future[None]] = []

            def when_ended(position: int) -> None:
                recording.append(pool.submit(self._record_committed, book, record, etag, job_id, position))

            started = self.sink.planned.resume(self.sink.spec(job_id), descriptor.result())
            try:
                report = started.finish(results, when_ended=when_ended)
            except BaseException:
                wait(recording)  # a progress record being written is not left half-way behind this failure
                raise
            if recording:
                recording[0].result()
            else:  # the job's end was recorded elsewhere (another process finished it): recorded here, after
                self._record_committed(book, record, etag, job_id, report.position or 0)
        log.info("micro-batch %d committed: %s", self.batch_id, report)

    def _claim(self, book: "ProgressBook", query_id: str, job_id: str,
               pool: ThreadPoolExecutor) -> tuple[StreamProgress, str] | None:
        """Steps 1-4 up to the commit: None when the micro-batch was committed before (this attempt is then rolled
        back), else the progress record naming this attempt as pending, and its version."""
        for _attempt in range(20):
            # The progress record and the table's job records, read at once; the commit order is read after
            # both (in _settle), as the replay's reasoning needs: an attempt gone from the job records by then
            # has its place in the order.
            reading = pool.submit(book.read)
            others = self._other_attempts(query_id, job_id)
            record, etag = reading.result()
            self._check(record, query_id)
            if record is not None and record.last_batch >= self.batch_id:
                # Committed before. What its job left (a driver killed after the progress record, before the
                # job's records were removed) is tidied now: that attempt is finished, nothing of it re-done.
                for other in others:
                    self._settle_one(other)
                self._roll_back(job_id, f"micro-batch {self.batch_id} was committed before (progress at "
                                        f"{record.last_batch}, job {record.last_job}); Spark's checkpoint lagged")
                return None
            after = (record.pending.after if record is not None and record.pending is not None
                     else record.last_position if record is not None else 0)
            settled = self._settle(query_id, job_id, others, after=after, known=record is not None)
            base = record or StreamProgress(query_id, self.destination.uri, tuple(self.sink.planned.columns),
                                            self.sink.planned.fmt.name)
            try:
                if settled.committed_by is not None:
                    book.write(replace(base, last_batch=self.batch_id, last_job=settled.committed_by,
                                       last_position=settled.position, pending=None), etag)
                    self._roll_back(job_id, f"micro-batch {self.batch_id} was committed by job "
                                            f"{settled.committed_by}; Spark's checkpoint lagged")
                    return None
                claimed = replace(base, pending=Pending(self.batch_id, job_id, settled.highest))
                return claimed, book.write(claimed, etag)
            except PreconditionFailedError:
                continue  # another process changed it meanwhile: look again
        raise StreamStateError(f"{book.where} kept changing while micro-batch {self.batch_id} was being committed")

    # ------------------------------------------------------------ steps
    def _identity(self) -> tuple[str, str]:
        ids = {(m.query_id, m.job_id) for m in self.messages}
        if len(ids) != 1:
            raise ProtocolError(f"micro-batch {self.batch_id}: its tasks wrote for different jobs {sorted(ids)}")
        query_id, job_id = ids.pop()
        if query_id is None or not job_id.startswith(batch_prefix(query_id, self.batch_id) + "-"):
            raise ProtocolError(f"micro-batch {self.batch_id}: job {job_id} is not one of query {query_id}'s for it")
        return query_id, job_id

    def _check(self, record: StreamProgress | None, query_id: str) -> None:
        planned = self.sink.planned
        mine = (self.destination.uri, tuple(planned.columns), planned.fmt.name)
        if record is None:
            if self.batch_id > 0:
                raise StreamStateError(
                    f"query {query_id} is at micro-batch {self.batch_id}, and {self.destination.uri} holds no record "
                    "of it: its checkpoint committed the earlier micro-batches to another table (was it restarted "
                    "with another path?). Restart it with the path it was started with, or with a new "
                    "checkpointLocation to start this table afresh. Nothing was written.")
            return
        theirs = (record.destination, tuple(record.partition_by), record.format)
        if theirs != mine:
            names = ("destination", "partition columns", "format")
            diff = "; ".join(f"{n}: {a!r} before, {b!r} now" for n, a, b in zip(names, theirs, mine) if a != b)
            raise StreamStateError(
                f"query {query_id} was started writing {record.destination} partitioned by "
                f"{list(record.partition_by)} as {record.format}, and is restarted otherwise ({diff}). Restart it "
                "as it was started, or with a new checkpointLocation (and another table) to write otherwise. "
                "Nothing was written.")

    def _other_attempts(self, query_id: str, job_id: str) -> list[str]:
        """The other attempts of this micro-batch that have records under the table's job records."""
        prefix = batch_prefix(query_id, self.batch_id) + "-"
        root = f"{self.destination.root}{HIDDEN_ROOT}"
        return [other for other in (n.rstrip("/") for n in self.store.list_children(self.destination.bucket, root))
                if other.startswith(prefix) and other != job_id]

    def _settle(self, query_id: str, job_id: str, others: list[str], *, after: int, known: bool) -> Settled:
        """Steps 2 and 3: finish or roll back the other attempts of this micro-batch (``others``, listed after the
        progress record was read), then look in the commit order for one of them that committed."""
        prefix = batch_prefix(query_id, self.batch_id)
        for other in others:
            self._settle_one(other)
        order = TableOrder(self.store, table_of(self.destination))
        view = order.view()
        if not known:  # no attempt of this query ever took a place: nothing of it can be in the order
            return Settled(None, 0, view.highest)
        if view.positions and view.lowest > after + 1:
            raise StreamStateError(
                f"cannot tell whether micro-batch {self.batch_id} of query {query_id} was committed: the commit order "
                f"of {table_of(self.destination).uri} no longer holds places {after + 1} to {view.lowest - 1} (cleared "
                f"after many later jobs), where an earlier attempt of it may have committed. Look for data files of "
                f"a job whose id starts {prefix}- in the table: if there are some, the micro-batch is committed. "
                "Nothing was written.")
        for p in view.positions:
            if p <= after:
                continue
            entry = order.entry(p)
            if entry is None or not entry.job_id.startswith(prefix + "-") or entry.job_id == job_id:
                continue
            outcome = order.outcome(p)
            if outcome is None:  # still open with no records left to finish it by: it cannot have committed
                self._settle_one(entry.job_id)
                outcome = order.outcome(p)
            if outcome is not None and outcome.outcome is Outcome.COMMITTED:
                return Settled(entry.job_id, p, view.highest)
        return Settled(None, 0, view.highest)

    def _settle_one(self, other: str) -> None:
        committer = JobCommitter(self.store, self.destination, other)
        reason = f"an earlier attempt of micro-batch {self.batch_id}, settled by its replay"
        for _attempt in range(3):
            try:
                got = committer.recover_job(reason=reason)
                log.warning("micro-batch %d: earlier attempt %s %s", self.batch_id, other,
                            "finished" if hasattr(got, "filenames") else "rolled back")
                return
            except JobRolledBackError:
                return
            except JobStateError:
                continue  # its commit began meanwhile: finish it on the next try
            except ManifestError as exc:
                raise StreamStateError(f"micro-batch {self.batch_id}: an earlier attempt, job {other}, could not be "
                                       f"settled ({exc}); run `mpcommit jobs recover {self.destination.uri} --job "
                                       f"{other}`, then restart the query") from exc
        raise StreamStateError(f"micro-batch {self.batch_id}: an earlier attempt, job {other}, kept changing state")

    def _descriptor(self, job_id: str) -> JobDescriptor:
        spec = self.sink.spec(job_id)
        where = f"s3://{self.destination.bucket}/{spec.paths.descriptor}"
        try:
            data = self.store.get_object(self.destination.bucket, spec.paths.descriptor)
        except NoSuchKeyError as exc:
            raise JobRolledBackError(f"micro-batch {self.batch_id}: job {job_id} has no descriptor at {where}: it "
                                     "was rolled back by another process; nothing of it is visible") from exc
        return JobDescriptor.from_bytes(data, where=where, destination=self.destination, job_id=job_id)

    def _roll_back(self, job_id: str, why: str) -> None:
        """Roll back this run's attempt, which must not commit (its commit never began)."""
        log.warning("%s: job %s, this run's attempt, is rolled back", why, job_id)
        try:
            JobCommitter(self.store, self.destination, job_id).rollback(reason=why)
        except MpcommitError as exc:  # the original reason matters more; orphan cleanup catches the rest
            log.warning("micro-batch %d: job %s could not be rolled back (%s)", self.batch_id, job_id, exc)

    def _record_committed(self, book: ProgressBook, record: StreamProgress, etag: str, job_id: str,
                          position: int) -> None:
        """Step 4's end: the progress record says micro-batch B is committed. Runs once the job's end is in the
        table's order, beside the removal of the job's records (a driver killed in between leaves those records
        to the replay, which finishes that job at step 1)."""
        faults.checkpoint("stream.after_data_commit", self.batch_id)
        for _attempt in range(20):
            if record.last_batch >= self.batch_id:
                break
            try:
                book.write(replace(record, last_batch=self.batch_id, last_job=job_id, last_position=position,
                                   pending=None), etag)
                break
            except PreconditionFailedError:
                found, found_etag = book.read()  # changed meanwhile: read it again
                if found is None or found_etag is None:
                    raise StreamStateError(f"{book.where} vanished while micro-batch {self.batch_id} was committed")
                record, etag = found, found_etag
        else:
            raise StreamStateError(f"{book.where} kept changing while micro-batch {self.batch_id} was recorded")
        faults.checkpoint("stream.after_progress", self.batch_id)
