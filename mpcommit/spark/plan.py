"""The one implementation of a Spark write, behind every door: ``write(df, ...)``, ``writer(df)...`` and the data
source (``df.write.format("mpcommit")``, SQL ``INSERT``, a stream's micro-batch).

The doors differ only in who runs the tasks and where the driver's steps run; the steps are these, in order:

1. :func:`plan_write` -- everything that can be checked before the store is touched: the format and its options,
   the partition columns against the data's columns, whether the format can hold the data's types, Parquet's
   timestamp type. No request, no upload.
2. :meth:`PlannedWrite.start` -- the catalog target checked (when a table is named), ``Job.create`` (which parses
   the URI, refuses an overwrite of a bucket's root without consent, checks the bucket and the mode, and records
   the job), and before an append or a dynamic overwrite one existing file's column types against the write's.
   Mode ``ignore`` on existing data stops here.
3. The tasks (:func:`mpcommit.spark.tasks.run_task`), one per Spark task, each returning its ``TaskResult``.
4. :meth:`StartedWrite.finish` -- the file Spark leaves for no rows, the commit-time merge, and the job commit, with
   the catalog registration through :func:`mpcommit.catalog.commit_registered` when a table is named; or
   :meth:`StartedWrite.abort`, after which nothing of the job is visible or pending.

A :class:`StartedWrite` can be carried to another process as its :meth:`~StartedWrite.handle` (the data source's
writer is pickled by Spark between its planning and its commit) and resumed there.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import CommitStateUnknownError, UsageError
from ..formats import make_format
from ..formats.base import FileFormat
from ..formats.empty_result import add_empty_result_file
from ..formats.parquet import ParquetFormat, TimestampType
from ..formats.partitioning import data_schema, resolve_partition_columns
from ..modes import PartitionOverwrite, WriteMode
from ..protocol import INLINE_MAX_PARTS, CommitReport, JobDescriptor, MergedFile, TaskResult
from ..protocol.job import Job
from ..protocol.task import JobSpec
from ..store.s3 import store_for
from .request import WriteRequest
from .session import Recorder, SessionSettings
from .table_schema import check_existing_files

if TYPE_CHECKING:
    from ..catalog.base import Catalog, TableName
    from ..protocol.stream import StreamCommitter

log = logging.getLogger(__name__)

#: Called in the task after each batch with (task id, attempt, batches written so far). For tests that make
#: a chosen attempt fail or die; it travels to the executors with the task's plan.
TaskHook = Callable[[int, int, int], None]


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """Everything one Spark task needs: small and picklable, it travels to the executors."""

    spec: JobSpec
    fmt: FileFormat
    partition_columns: tuple[str, ...]
    max_open_writers: int
    max_records_per_file: int
    task_hook: TaskHook | None = None
    #: With a merge policy: files that stay below one part are staged for the commit-time merge.
    stage_small: bool = False
    #: A data source's plan, made without seeing the session: the settings it took, checked in each task.
    session: SessionSettings | None = None
    consulted: frozenset[str] = frozenset()
    #: The parts a task's result may carry in-line: the job's share per task when its task count is known.
    inline_parts: int = INLINE_MAX_PARTS


@dataclasses.dataclass(frozen=True)
class PlannedWrite:
    """A write checked against its data, before anything is sent to the store."""

    request: WriteRequest
    fmt: FileFormat
    columns: tuple[str, ...]
    file_schema: pa.Schema
    max_records_per_file: int
    session: SessionSettings
    #: The session settings this write took because no option said otherwise.
    consulted: frozenset[str]

    def task_plan(self, spec: JobSpec, *, task_hook: TaskHook | None = None) -> TaskPlan:
        """What the tasks of this write need, for the job ``spec``."""
        s = self.request.settings
        unseen = not self.session.seen
        return TaskPlan(spec=spec, fmt=self.fmt, partition_columns=self.columns, max_open_writers=s.max_open_writers,
                        max_records_per_file=self.max_records_per_file, task_hook=task_hook,
                        stage_small=s.merge is not None, session=self.session if unseen else None,
                        consulted=self.consulted if unseen else frozenset())

    def resume(self, spec: JobSpec, descriptor: JobDescriptor, *, heartbeat: bool = True,
               task_hook: TaskHook | None = None, stream: StreamCommitter | None = None) -> "StartedWrite":
        """This write's job ``spec`` in this process (another than the one that created it): its heartbeat from
        here to the end of its commit, and the catalog target checked again (a catalog, which holds a client,
        does not travel between processes). ``stream``: the micro-batch's committer, whose reading of the table's
        commit order the job's commit goes on with."""
        s = self.request.settings
        target = None
        if s.table is not None:
            from ..catalog.sync import check_target

            target = check_target(s.table, _catalog(s, "glue"), s3=s.s3)
        job = Job(spec, descriptor, store=store_for(spec.s3), commit_threads=s.commit_threads,
                  overwrite_bucket_root=s.overwrite_bucket_root, heartbeat=heartbeat and not spec.ignored,
                  order=s.order, table_order=stream.order if stream is not None else None)
        job.txn = s.txn  # the version its commit records (a duplicate was found at start: the job is ignored)
        return StartedWrite(self, job, target, task_hook=task_hook)

    def start(self, *, spark: Any = None, default_catalog: str = "spark",
              task_hook: TaskHook | None = None) -> "StartedWrite":
        """Check the catalog target, create the job, and look at one existing file before an append. Raises with
        nothing written; returns a write whose job is ``ignored`` when mode ``ignore`` met existing data."""
        request, s = self.request, self.request.settings
        target = None
        if s.table is not None:  # before the job: a bad name or catalog must not cost a written-then-aborted job
            from ..catalog.sync import check_target  # only a write that registers needs the catalogs
            from .table_target import check

            target = check_target(s.table, _catalog(s, default_catalog), s3=s.s3, spark=spark)
            if not s.layout_checked:  # else the write's options were resolved against the table a moment ago
                check(*target, path=request.uri, fmt=self.fmt.name, partition_by=self.columns)
        job = Job.create(request.uri, mode=request.mode, partition_overwrite=request.partition_overwrite,
                         s3=s.s3, writer=s.writer, commit_threads=s.commit_threads,
                         overwrite_bucket_root=s.overwrite_bucket_root, txn=s.txn, order=s.order)
        started = StartedWrite(self, job, target, task_hook=task_hook)
        if job.duplicate_of is not None:
            log.warning("%s: version %d of application %r was committed already, by job %s: nothing written (the "
                        "report's duplicate_of)", job.destination.uri, s.txn.version, s.txn.app_id,
                        job.duplicate_of.job_id)
            return started
        if job.ignored:
            log.info("%s holds data and mode is 'ignore': nothing written", job.destination.uri)
            return started
        if request.mode is WriteMode.APPEND or (request.mode is WriteMode.OVERWRITE and self.columns and
                                                request.partition_overwrite is PartitionOverwrite.DYNAMIC):
            try:  # files of this write will sit beside the table's existing ones
                check_existing_files(job.store, job.destination, self.fmt, self.file_schema,
                                     partition_levels=len(self.columns), policy=s.schema_mismatch)
            except BaseException:
                started.abort()
                raise
        return started


def plan_write(request: WriteRequest, schema: pa.Schema, session: Recorder) -> PlannedWrite:
    """Check ``request`` against the data's Arrow ``schema`` (as Spark hands it to Python); ``session`` reads the
    session settings the write takes where no option says otherwise, and remembers which."""
    options = dict(request.options)
    max_records = pop_max_records(options)
    fmt = make_format(request.format, options)
    columns = resolve_partition_columns(schema, request.partition_by)
    file_schema = data_schema(schema, columns)
    if isinstance(fmt, ParquetFormat):
        chosen = request.timestamp_type
        if chosen is None:
            # Read only where it changes something, so that a data source does not refuse a setting it ignores.
            chosen = TimestampType.parse(session("timestamp_type")) if _has_timestamp(file_schema) else TimestampType.INT96
        fmt = dataclasses.replace(fmt, timestamp_type=chosen)
        if chosen is TimestampType.INT96 and not fmt.int96_for(file_schema):
            log.warning("spark.sql.parquet.outputTimestampType is INT96, but the data has TIMESTAMP_NTZ columns, "
                        "which INT96 cannot hold and pyarrow cannot store beside INT96 ones: every timestamp is "
                        "written as INT64 microseconds (Spark reads back the same types)")
    fmt.check_schema(file_schema)
    return PlannedWrite(request, fmt, columns, file_schema, max_records, session.settings,
                        frozenset(session.consulted))


class StartedWrite:
    """A write whose job exists: its tasks' plan, and the driver's last steps (:meth:`finish`, :meth:`abort`)."""

    def __init__(self, planned: PlannedWrite, job: Job, target: "tuple[TableName, Catalog] | None", *,
                 task_hook: TaskHook | None = None):
        self.planned = planned
        self.job = job
        self.target = target
        self.task_plan = planned.task_plan(job.spec, task_hook=task_hook)

    @property
    def ignored(self) -> bool:
        return self.job.ignored

    def handle(self) -> "WriteHandle":
        """What another process needs to finish or abort this write (picklable; no catalog object, no client)."""
        return WriteHandle(self.planned, self.job.spec, self.job.descriptor, self.task_plan)

    def finish(self, results: Sequence[TaskResult], *, runner: Any = None, spark: Any = None,
               when_ended: Callable[[int], None] | None = None) -> CommitReport:
        """Commit the tasks' results (one per task): the file Spark leaves for no rows, the commit-time merge
        (``runner`` runs its bins; None: this process's threads), the job commit and, with a table, the catalog
        registration. On a failure before the commit's journal the job is rolled back: nothing stays visible or
        pending. A commit whose outcome is unknown is left for ``mpcommit jobs recover``. ``when_ended``: see
        :meth:`JobCommitter.commit <mpcommit.protocol.commit.JobCommitter.commit>`."""
        job, planned, s = self.job, self.planned, self.planned.request.settings
        if job.ignored:
            return job.commit([])
        merged: tuple[MergedFile, ...] = ()
        extra: dict[str, float] = {}
        try:
            # No rows at all: the file Spark's writer leaves, so that readers still find the schema.
            results = add_empty_result_file(job.spec, planned.fmt, planned.file_schema, results,
                                            partitioned=bool(planned.columns))
            if s.merge is not None:
                from ..compaction.commit_merge import merge_at_commit  # only a write that merges needs it

                merges = merge_at_commit(job, results, s.merge, csv_header=getattr(planned.fmt, "header", None),
                                         runner=runner)
                merged = merges.merged
                extra["merge"] = merges.seconds
                for key, why in merges.skipped:
                    log.warning("job %s: files for %s not merged (%s); committed as they are", job.job_id, key, why)
        except BaseException:
            self.abort()
            raise
        t = time.monotonic()
        try:
            if self.target is not None:
                from ..catalog.sync import commit_registered

                table, catalog = self.target
                report = commit_registered(job, results, table=table, catalog=catalog, spark=spark, merged=merged,
                                           when_ended=when_ended)
            else:
                report = job.commit(results, merged=merged, when_ended=when_ended)
        except CommitStateUnknownError:
            raise  # some files may be visible: never clean up, `mpcommit jobs recover` finishes it
        except BaseException as exc:
            if not _committed(exc):
                self.abort()
            raise
        return dataclasses.replace(report, timings={**report.timings, **extra, "commit": time.monotonic() - t})

    def abort(self) -> None:
        """Roll the job back after a failure, without hiding the failure itself."""
        job = self.job
        try:
            report = job.abort()
            log.info("aborted job %s: %d uploads", job.job_id, report.aborted_uploads)
        except Exception as exc:  # noqa: BLE001 - the original error matters more; orphan cleanup catches the rest
            log.warning("could not abort job %s after a failure: %s; run `mpcommit jobs abort %s --job %s`",
                        job.job_id, exc, job.destination.uri, job.job_id)


def _catalog(settings: Any, default: str) -> Any:
    """The catalog to register in: the one named, built here when a data source's options describe it."""
    catalog = settings.catalog
    if catalog is None:
        return default
    build = getattr(catalog, "build", None)  # a data source's GlueCatalogSpec: its client is made here
    return build(settings.s3) if callable(build) else catalog


def _committed(exc: BaseException) -> bool:
    """A failure after the data commit (the catalog's): nothing may be rolled back."""
    from ..catalog.base import CatalogRegistrationError

    return isinstance(exc, CatalogRegistrationError)


@dataclasses.dataclass(frozen=True)
class WriteHandle:
    """A started write as another process resumes it (:meth:`StartedWrite.handle`)."""

    planned: PlannedWrite
    spec: JobSpec
    descriptor: JobDescriptor
    task_plan: TaskPlan

    def resume(self, *, heartbeat: bool = True) -> StartedWrite:
        """The write in this process (see :meth:`PlannedWrite.resume`)."""
        return self.planned.resume(self.spec, self.descriptor, heartbeat=heartbeat, task_hook=self.task_plan.task_hook)


# ---------------------------------------------------------------- helpers
def pop_max_records(options: dict[str, Any]) -> int:
    """``maxRecordsPerFile`` is the writer's, not the format's: take it out of the options (any case)."""
    found = [k for k in options if isinstance(k, str) and k.lower() == "maxrecordsperfile"]
    if len(found) > 1:
        raise UsageError("option maxRecordsPerFile is given twice (option names ignore case)")
    if not found:
        return 0
    value = options.pop(found[0])
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else -1
    except ValueError:
        number = -1
    if number < 0:
        raise UsageError(f"option maxRecordsPerFile must be 0 (no limit) or a positive integer, got {value!r}")
    return number


def _has_timestamp(schema: pa.Schema) -> bool:
    """Whether any column holds a timestamp, at any depth."""
    def walk(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return True
        return any(walk(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else False
    return any(walk(f.type) for f in schema)


def arrow_schema_of(spark_schema: Any, settings: SessionSettings) -> pa.Schema:
    """The Arrow schema Spark hands the tasks for a Spark ``StructType``, to check types before anything runs.
    Only a type the conversion refuses is blamed on the data (the conversion's own signature is :mod:`.compat`'s)."""
    from pyspark.errors import PySparkException

    from .compat import to_arrow_schema

    try:
        return to_arrow_schema(spark_schema, time_zone=settings.time_zone, large_var_types=settings.large_var_types)
    except PySparkException as exc:  # PySpark's refusal of a type; anything else is no fault of the data's
        raise UsageError(
            f"the data has a column type Spark cannot hand to Python as Arrow ({exc}); cast it first. "
            "Nothing was written."
        ) from exc
