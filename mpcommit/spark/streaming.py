"""A Structured Streaming sink with exactly-once output for every reader of the plain layout:
``df.writeStream.format("mpcommit").option("checkpointLocation", ...).start("s3://bucket/table")``.

The Spark side of :mod:`mpcommit.protocol.stream`, which holds the rules: each micro-batch is one mpcommit job,
written by the batch's tasks and committed by the sink's ``commit`` as any write is (:mod:`.plan`), as version B of
the query's application in the table's commit order -- the one fact that says micro-batch B was committed. Its
identity is (query id, batch id): Spark keeps the query id in the checkpoint and hands it, with the batch id, to
every task (``TaskContext``'s local properties), and every attempt's job id carries both.

A micro-batch whose tasks failed is rolled back by ``abort``: nothing of it stays visible or pending. A query
restarted on a different table, or with other partition columns or another format, is refused by name.

Output mode complete: Spark hands the sink ``overwrite=True``, and each micro-batch -- the query's whole result --
is an overwrite job that replaces the table's contents (the query's record, under the hidden ``_mpcommit/``,
stays); replays are recognised as any.

The named points where tests kill the driver (:mod:`mpcommit.protocol.faults`, indexed by batch id):
``stream.before_commit``, ``stream.after_settle`` (the other attempts of the micro-batch settled, this one's
commit not begun) and ``stream.after_data_commit`` (committed; Spark's commit log not yet written); the job
commit's own points (``commit.after_place`` ...) lie between the last two.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pyarrow as pa

from ..errors import JobRolledBackError, MpcommitError, NoSuchKeyError, ProtocolError
from ..options import S3Options, WriterSettings
from ..protocol import InlineBudget, JobDescriptor, TaskResult, faults
from ..protocol.job import check_bucket_root_overwrite, write_descriptor
from ..protocol.layout import parse_uri
from ..protocol.stream import StreamCommitter, StreamQuery, StreamStateError, batch_job_id
from ..protocol.task import JobSpec
from ..store.s3 import S3Store, store_for
from .datasource import Message, TaskOutcome
from .plan import PlannedWrite, arrow_schema_of, plan_write
from .session import Recorder, SessionSettings
from .source_options import parse
from .tasks import run_task, task_numbers

__all__ = ["StreamSink", "StreamStateError", "query_of_checkpoint"]

log = logging.getLogger(__name__)

#: What Spark hands a micro-batch's tasks (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY).
QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"


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
        """One task of a micro-batch, as Spark runs it (the query, batch and task from its ``TaskContext``)."""
        query_id, batch_id = _batch_of_task()
        return self.write_batch_task(query_id, batch_id, task_numbers(), iterator)

    def write_batch_task(self, query_id: str, batch_id: int, numbers: tuple[int, int],
                         iterator: Iterator[pa.RecordBatch]) -> TaskOutcome:
        """Attempt ``numbers`` (task id, attempt) of a task of micro-batch ``batch_id`` of query ``query_id``."""
        spec = self.spec(batch_job_id(query_id, batch_id, self.salt))
        _record_job(spec, self.planned)
        result = run_task(self.planned.task_plan(spec), iterator, numbers=numbers)
        return TaskOutcome(result.to_bytes(), spec.job_id, query_id)

    def spec(self, job_id: str) -> JobSpec:
        """The job of one attempt of a micro-batch."""
        s = self.planned.request.settings
        return JobSpec(job_id=job_id, destination=self.destination, s3=s.s3 or S3Options(),
                       writer=s.writer or WriterSettings())

    def store(self) -> S3Store:
        return store_for(self.planned.request.settings.s3 or S3Options())

    def committer(self, query_id: str) -> StreamCommitter:
        planned = self.planned
        query = StreamQuery(query_id, self.destination.uri, tuple(planned.columns), planned.fmt.name)
        return StreamCommitter(self.store(), self.destination, query, order=planned.request.settings.order)

    # ------------------------------------------------------------ on the driver
    def commit(self, messages: Sequence[Message | None], batch_id: int) -> None:
        """Commit micro-batch ``batch_id`` (:mod:`mpcommit.protocol.stream`'s steps), once."""
        faults.checkpoint("stream.before_commit", batch_id)
        sent = [m for m in messages if m is not None]
        if not sent:
            log.info("micro-batch %d: no task ran, nothing to commit", batch_id)
            return
        query_id, job_id = _identity(sent, batch_id)
        committer = self.committer(query_id)
        # A micro-batch's commit is latency: this attempt's descriptor is read beside the protocol's steps.
        with ThreadPoolExecutor(1, thread_name_prefix="mpcommit-stream") as pool:
            descriptor = pool.submit(self._descriptor, committer.store, job_id, batch_id)
            try:
                budget = InlineBudget()
                results = [TaskResult.from_bytes(m.result, destination=self.destination, job_id=job_id, budget=budget)
                           for m in sent if m.result is not None]
                txn = committer.prepare(batch_id, job_id)
            except BaseException:
                committer.roll_back(job_id, f"micro-batch {batch_id} was refused before its commit")
                raise
            if txn is None:
                return  # committed before: this attempt was rolled back
            faults.checkpoint("stream.after_settle", batch_id)
            started = self.planned.resume(self.spec(job_id), descriptor.result(), stream=committer)
        started.job.txn = txn
        report = started.finish(results)
        if report.duplicate_of is not None:
            log.warning("micro-batch %d was committed meanwhile by job %s (an earlier attempt that went on beside "
                        "this one): job %s committed nothing", batch_id, report.duplicate_of.job_id, job_id)
        else:
            log.info("micro-batch %d committed: %s", batch_id, report)
        faults.checkpoint("stream.after_data_commit", batch_id)

    def abort(self, messages: Sequence[Message | None], batch_id: int) -> None:
        """Roll back the micro-batch's attempt: nothing of it stays visible or pending. When no task lived to
        name its job (the query was stopped mid-batch, every task failed), this run's attempts of the batch are
        found by their ids from the query id in the checkpoint (when its location is an option and a local or S3
        path); else the replay, or ``mpcommit jobs recover --older-than``, removes them."""
        sent = [m for m in messages if m is not None and getattr(m, "job_id", None)]
        query_id = next((m.query_id for m in sent if m.query_id), None)
        if query_id is None:
            query_id = query_of_checkpoint(self.checkpoint, self.store())
        if query_id is None:
            return
        self.committer(query_id).abort(batch_id, {m.job_id for m in sent} or None)

    def _descriptor(self, store: S3Store, job_id: str, batch_id: int) -> JobDescriptor:
        spec = self.spec(job_id)
        where = f"s3://{self.destination.bucket}/{spec.paths.descriptor}"
        try:
            data = store.get_object(self.destination.bucket, spec.paths.descriptor)
        except NoSuchKeyError as exc:
            raise JobRolledBackError(f"micro-batch {batch_id}: job {job_id} has no descriptor at {where}: it "
                                     "was rolled back by another process; nothing of it is visible") from exc
        return JobDescriptor.from_bytes(data, where=where, destination=self.destination, job_id=job_id)


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


def _identity(messages: Sequence[Message], batch_id: int) -> tuple[str, str]:
    """(query id, job id) the micro-batch's tasks wrote for: one attempt, whatever its number of tasks."""
    ids = {(m.query_id, m.job_id) for m in messages}
    if len(ids) != 1:
        raise ProtocolError(f"micro-batch {batch_id}: its tasks wrote for different jobs {sorted(ids)}")
    query_id, job_id = ids.pop()
    if query_id is None:
        raise ProtocolError(f"micro-batch {batch_id}: job {job_id} names no query")
    return query_id, job_id


def _record_job(spec: JobSpec, planned: PlannedWrite) -> None:
    """The job's descriptor, written by the first of the micro-batch's tasks before any upload (as ``Job.create``
    writes it before the tasks of other writes), so that cleanup tools tell its uploads from orphans."""
    request = planned.request
    d = spec.destination
    descriptor = JobDescriptor(job_id=spec.job_id, bucket=d.bucket, prefix=d.prefix, mode=request.mode,
                               partition_overwrite=request.partition_overwrite, created_ms=int(time.time() * 1000),
                               hostname=socket.gethostname())
    write_descriptor(store_for(spec.s3), spec.paths, descriptor)  # or another task of the micro-batch did first
