"""Write a PySpark DataFrame to S3 through the committer: no renames, nothing visible before the job commit.

How it runs:

1. On the driver, everything that can be checked is checked before anything is uploaded: format and options,
   mode, partition columns, and whether the format can hold the DataFrame's types. ``Job.create`` then checks
   the bucket and the mode (mode ``error`` on existing data raises here, with nothing written) and records the
   job; mode ``ignore`` on existing data stops here without running Spark.
2. ``df.mapInArrow`` runs one Python function per Spark task over the task's rows as Arrow batches. It opens
   the task attempt from Spark's own ``TaskContext`` (partition id -> task id, attempt number -> attempt),
   streams the rows into multipart uploads through :class:`~mpcommit.formats.partitioning.PartitionedWriter`, commits
   its attempt (writes its manifest) and returns its :class:`~mpcommit.protocol.records.manifest.TaskResult` as a
   single one-row binary column. The job spec travels inside the closure: executors need no driver state.
3. The driver ``collect()``s those rows: Spark's action result holds exactly one row per partition, from the
   attempt Spark counted as successful. ``Job.commit`` completes exactly those attempts and aborts every
   other upload of the job (failed attempts, attempts whose worker died, duplicates), then writes ``_SUCCESS``.

If the Spark job fails, the job is aborted: nothing of it stays visible or pending. If the commit's outcome is
unknown (it failed after its journal was written), nothing is cleaned up and the error says how to recover.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..catalog import Catalog
from ..catalog.sync import check_target, register_commit
from ..compaction.commit_merge import BinJob, BinOutcome, Runner, StagingSink, merge_at_commit, run_bin
from ..compaction.planner import MergePolicy
from ..errors import CommitStateUnknownError, ExecutorEnvironmentError, ProtocolError, UsageError
from ..formats import make_format
from ..formats.base import FileFormat
from ..formats.empty_result import add_empty_result_file
from ..formats.parquet import ParquetFormat, TimestampType
from ..formats.partitioning import DEFAULT_MAX_OPEN_WRITERS, PartitionedWriter, data_schema, resolve_partition_columns
from ..modes import PartitionOverwrite, WriteMode
from ..options import S3Options, WriterSettings
from ..protocol.commit import DEFAULT_COMMIT_THREADS, CommitReport
from ..protocol.job import Job, check_bucket_root_overwrite
from ..protocol.layout import parse_uri
from ..protocol.records.job import MergedFile
from ..protocol.records.manifest import TaskResult
from ..protocol.task import JobSpec
from .table_schema import SchemaMismatch, check_existing_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: The one column each task returns: its serialized TaskResult.
RESULT_SCHEMA = "result binary"

#: Called in the task after each batch with (task id, attempt, batches written so far). For tests that make
#: a chosen attempt fail or die; it travels to the executors with the task's closure.
TaskHook = Callable[[int, int, int], None]


@dataclasses.dataclass(frozen=True)
class _TaskPlan:
    """Everything one Spark task needs, pickled into the closure of the mapInArrow function."""

    spec: JobSpec
    fmt: FileFormat
    partition_columns: tuple[str, ...]
    max_open_writers: int
    max_records_per_file: int
    task_hook: TaskHook | None = None
    #: With a merge policy: files that stay below one part are staged for the commit-time merge.
    stage_small: bool = False


def write(
    df: "DataFrame",
    uri: str,
    format: str = "parquet",  # noqa: A002 - PySpark's name for it
    *,
    mode: str | WriteMode = "error",
    partition_by: str | list[str] | tuple[str, ...] | None = None,
    partition_overwrite: str | PartitionOverwrite = "static",
    merge: MergePolicy | None = None,
    options: Mapping[str, Any] | None = None,
    s3: S3Options | None = None,
    max_open_writers: int = DEFAULT_MAX_OPEN_WRITERS,
    commit_threads: int = DEFAULT_COMMIT_THREADS,
    writer: WriterSettings | None = None,
    table: str | None = None,
    catalog: Catalog | str | None = None,
    overwrite_bucket_root: bool = False,
    schema_mismatch: str | SchemaMismatch = "warn",
    _task_hook: TaskHook | None = None,
) -> CommitReport:
    """Write ``df`` to ``uri`` (``s3://``, ``s3a://`` or ``s3n://``) and commit it; return the commit report.

    ``format``: parquet (snappy by default), csv, json (JSON Lines) or text. ``mode``: error (errorifexists,
    the default, as in PySpark), append, overwrite or ignore. ``partition_by``: Hive-style partition columns;
    ``partition_overwrite="dynamic"`` makes overwrite replace only the partitions this write produces.
    ``options``: PySpark's writer option names -- ``compression``, ``header``, ``sep``, ``lineSep``,
    ``maxRecordsPerFile`` ... ``max_open_writers``: partition files one task keeps open before it writes the
    rest sorted by partition (see :mod:`mpcommit.formats.partitioning` for the memory bound). ``s3``: how to reach
    the store (default: boto3's usual sources). ``merge``: a :class:`~mpcommit.compaction.MergePolicy` to
    merge small files before they become visible (Hive's rule per partition: average below
    ``small_file_avg``, merged up to ``target_size``); tasks then stage files that stay below one part, and
    the merges run as a Spark stage before the commit (see :mod:`mpcommit.compaction.commit_merge`).
    ``table``: "db.name" to register the committed partitions and their statistics in, after the commit, in
    ``catalog`` (default: the DataFrame's session catalog; "glue", or a :class:`~mpcommit.catalog.Catalog`);
    see docs/CATALOG.md. ``overwrite_bucket_root``: allow an overwrite of a bucket's root (``s3://bucket``),
    which replaces every object in the bucket; refused without it. ``schema_mismatch``: when appending (or
    overwriting partitions dynamically), one existing file's column types (a Parquet footer, a CSV header) are
    compared with this write's first: ``"warn"`` (a :class:`~mpcommit.spark.table_schema.SchemaMismatchWarning`
    naming each column and both types), ``"error"`` (``SchemaMismatchError``, nothing written) or ``"ignore"``.

    The report gives the job id, the committed files, bytes, rows, partitions and timings (``write``: creating
    the job to the last task's result; ``merge``: the commit-time merge; ``commit``: the job commit).
    """
    if merge is not None and not isinstance(merge, MergePolicy):
        raise UsageError(
            f"merge must be None or a MergePolicy (from mpcommit.compaction import MergePolicy), got {merge!r}"
        )
    _check_dataframe(df)
    mismatch = SchemaMismatch.parse(schema_mismatch)
    if catalog is not None and table is None:
        raise UsageError("write(catalog=...) needs table='db.name' to register into")
    target = None
    if table is not None:  # before any task runs: a bad name or catalog must not cost a written-then-aborted job
        target = check_target(table, catalog if catalog is not None else "spark", s3=s3, spark=df.sparkSession)
    fmt_options = dict(options or {})
    max_records = _pop_max_records(fmt_options)
    fmt = make_format(format, fmt_options)
    write_mode = WriteMode.parse(mode)
    overwrite = PartitionOverwrite.parse(partition_overwrite)
    if isinstance(max_open_writers, bool) or not isinstance(max_open_writers, int) or max_open_writers < 1:
        raise UsageError(f"max_open_writers must be an integer of at least 1, got {max_open_writers!r}")
    if isinstance(commit_threads, bool) or not isinstance(commit_threads, int) or commit_threads < 1:
        raise UsageError(f"commit_threads must be an integer of at least 1, got {commit_threads!r}")
    destination = parse_uri(uri)
    schema = _arrow_schema(df)
    columns = resolve_partition_columns(schema, partition_by)
    fmt = _with_session_settings(fmt, df, data_schema(schema, columns))
    fmt.check_schema(data_schema(schema, columns))
    check_bucket_root_overwrite(destination, write_mode, overwrite, allowed=overwrite_bucket_root,
                                partitioned=bool(columns))

    job = Job.create(uri, mode=write_mode, partition_overwrite=overwrite, s3=s3, writer=writer,
                     commit_threads=commit_threads, overwrite_bucket_root=overwrite_bucket_root)
    if job.ignored:
        log.info("%s holds data and mode is 'ignore': nothing written", job.destination.uri)
        return job.commit([])
    if write_mode is WriteMode.APPEND or (write_mode is WriteMode.OVERWRITE and overwrite is PartitionOverwrite.DYNAMIC
                                          and columns):
        try:  # files of this write will sit beside the table's existing ones
            check_existing_files(job.store, job.destination, fmt, data_schema(schema, columns),
                                 partition_levels=len(columns), policy=mismatch)
        except BaseException:
            _abort_quietly(job)
            raise

    plan = _TaskPlan(spec=job.spec, fmt=fmt, partition_columns=columns, max_open_writers=max_open_writers,
                     max_records_per_file=max_records, task_hook=_task_hook, stage_small=merge is not None)

    def run_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _write_task(plan, batches)

    try:
        with _job_description(df, f"mpcommit: write {fmt.name} to {job.destination.uri} (job {job.job_id})"):
            rows = df.mapInArrow(run_task, RESULT_SCHEMA).collect()
        results = [TaskResult.from_bytes(bytes(row[0]), destination=job.destination, job_id=job.job_id) for row in rows]
        # No rows at all: the file Spark's writer leaves, so that readers still find the schema.
        results = add_empty_result_file(job.spec, fmt, data_schema(schema, columns), results, partitioned=bool(columns))
    except BaseException as exc:
        _abort_quietly(job)
        missing = _missing_module(exc)
        if missing is not None:
            raise ExecutorEnvironmentError(
                f"Spark's executors could not import {missing!r} (No module named {missing!r}): mpcommit's tasks run "
                "in the executors' Python, which needs mpcommit and its dependencies (pyarrow, pandas, boto3) "
                "installed, the same version as here. Install it in the Python the executors run, and point "
                "PYSPARK_PYTHON (or spark.pyspark.python) at that interpreter; this driver runs "
                f"{sys.executable}. Job {job.job_id} was rolled back: nothing was written."
            ) from exc
        raise

    merged: tuple[MergedFile, ...] = ()
    merge_timing: dict[str, float] = {}
    if merge is not None:
        try:
            merges = merge_at_commit(job, results, merge, csv_header=getattr(fmt, "header", None),
                                     runner=_spark_runner(df, job))
        except BaseException:
            _abort_quietly(job)
            raise
        merged = merges.merged
        merge_timing = {"merge": merges.seconds}
        for key, why in merges.skipped:
            log.warning("job %s: files for %s not merged (%s); committed as they are", job.job_id, key, why)

    t = time.monotonic()
    try:
        report = job.commit(results, merged=merged)
    except CommitStateUnknownError:
        raise  # some files may be visible: never clean up, `mpcommit jobs recover` finishes it
    except BaseException:
        _abort_quietly(job)
        raise
    if target is not None:
        # The data is committed: a CatalogRegistrationError names the `mpcommit catalog sync` that finishes.
        table_name, resolved = target
        report = register_commit(report, table=table_name, catalog=resolved)
    return dataclasses.replace(report, timings={**report.timings, **merge_timing, "commit": time.monotonic() - t})


def _spark_runner(df: "DataFrame", job: Job) -> Runner | None:
    """Run the merge bins as a Spark stage, one task per bin, so that the work spreads over the cluster.
    None without a SparkContext (Spark Connect): the bins then run on the driver's threads."""
    try:
        sc = df.sparkSession.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        # Said, because the work moves: the merges' copies are requested, and files below S3's 5 MiB part
        # minimum are read and re-uploaded, from this client process rather than from the cluster.
        log.warning("job %s: a Spark Connect session has no SparkContext to run the commit-time merge as a Spark "
                    "stage; the merges run on this process's threads", job.job_id)
        return None

    def run(bins: list[BinJob]) -> list[BinOutcome]:
        with _job_description(df, f"mpcommit: merge {len(bins)} bins of small files (job {job.job_id})"):
            return sc.parallelize(bins, len(bins)).map(run_bin).collect()

    return run


# ---------------------------------------------------------------- in the Spark task (executor)
def _write_task(plan: _TaskPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The body of one Spark task: write its rows, commit its attempt, return its result as one row."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise ProtocolError("mpcommit's task function ran outside a Spark task (no TaskContext)")
    task_id, attempt = context.partitionId(), context.attemptNumber()
    fmt = plan.fmt
    with plan.spec.task(task_id, attempt) as task:
        if plan.stage_small:
            limit = plan.spec.writer.initial_part_size

            def open_sink(path: str, ext: str) -> Any:
                return StagingSink(task, path, ext, limit=limit, content_type=fmt.content_type)
        else:
            def open_sink(path: str, ext: str) -> Any:
                return task.create(path, ext, content_type=fmt.content_type, background=True)
        out = PartitionedWriter(
            fmt=fmt,
            open_sink=open_sink,
            partition_columns=plan.partition_columns,
            max_open_writers=plan.max_open_writers,
            max_records_per_file=plan.max_records_per_file,
            spill_dir=_local_dir(),
        )
        try:
            for n, batch in enumerate(batches, 1):
                out.write(batch)
                if plan.task_hook is not None:
                    plan.task_hook(task_id, attempt, n)
            out.close()
        except BaseException:
            out.abort()
            raise  # and the task attempt's __exit__ aborts every upload it made
        result = task.commit()
    yield pa.RecordBatch.from_arrays([pa.array([result.to_bytes()], pa.binary())], names=["result"])


#: Modules whose absence in a task means the executors' Python is not set up for mpcommit (its own dependencies).
_OWN_MODULES = {"mpcommit", "pyarrow", "pandas", "numpy", "boto3", "botocore", "s3transfer", "urllib3", "orjson",
                "tenacity"}
_NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]+)'")


def _missing_module(exc: BaseException) -> str | None:
    """The module a Spark task failed to import, when it is mpcommit or one of its dependencies (Spark reports a
    task's ModuleNotFoundError inside its own exception's text)."""
    for match in _NO_MODULE.finditer(str(exc)):
        if match.group(1).split(".")[0] in _OWN_MODULES:
            return match.group(1)
    return None


def _local_dir() -> str | None:
    """Where a task spills: Spark's local directory when the executor exports it, else the system default."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    return dirs[0] if dirs and os.path.isdir(dirs[0]) else None


# ---------------------------------------------------------------- driver helpers
def _check_dataframe(df: Any, function: str = "write") -> None:
    """Refuse anything but a PySpark DataFrame (classic or Connect), naming the function called and the type given
    by its module (a pandas or polars DataFrame is also called DataFrame)."""
    if all(hasattr(df, attr) for attr in ("mapInArrow", "schema", "sparkSession")):
        return
    kind = type(df)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    hint = ""
    if kind.__module__.split(".")[0] in ("pandas", "polars", "pyarrow"):
        hint = " Make it a Spark DataFrame first: spark.createDataFrame(data)."
    raise UsageError(f"mpcommit.spark.{function} takes a PySpark DataFrame, got {name}.{hint} Nothing was written.")


def _with_session_settings(fmt: FileFormat, df: "DataFrame", file_schema: pa.Schema) -> FileFormat:
    """The format with what Spark's writer takes from the session rather than from options: Parquet's
    ``spark.sql.parquet.outputTimestampType`` (INT96 unless set)."""
    if not isinstance(fmt, ParquetFormat):
        return fmt
    chosen = TimestampType.parse(str(df.sparkSession.conf.get("spark.sql.parquet.outputTimestampType", "INT96")))
    fmt = dataclasses.replace(fmt, timestamp_type=chosen)
    if chosen is TimestampType.INT96 and not fmt.int96_for(file_schema):
        log.warning("spark.sql.parquet.outputTimestampType is INT96, but the data has TIMESTAMP_NTZ columns, which "
                    "INT96 cannot hold and pyarrow cannot store beside INT96 ones: every timestamp is written as INT64 "
                    "microseconds (Spark reads back the same types)")
    return fmt


def _pop_max_records(options: dict[str, Any]) -> int:
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


def _arrow_schema(df: "DataFrame") -> pa.Schema:
    """The Arrow schema Spark hands the tasks, to check types against the format before anything runs."""
    from pyspark.sql.pandas.types import to_arrow_schema

    conf = df.sparkSession.conf
    try:
        return to_arrow_schema(
            df.schema,
            timezone=conf.get("spark.sql.session.timeZone", None),
            prefers_large_types=str(conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true",
        )
    except Exception as exc:  # noqa: BLE001 - pyspark raises its own error types; say what to do instead
        raise UsageError(
            f"the DataFrame has a column type Spark cannot hand to Python as Arrow ({exc}); cast it first. "
            "Nothing was written."
        ) from exc


class _job_description:  # noqa: N801 - used like a function
    """Label the Spark job in the UI; restores the previous label. A no-op without a SparkContext (Connect)."""

    def __init__(self, df: "DataFrame", text: str):
        try:
            self._sc: Any = df.sparkSession.sparkContext
        except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
            self._sc = None
        self._text = text
        self._previous: str | None = None

    def __enter__(self) -> None:
        if self._sc is not None:
            self._previous = self._sc.getLocalProperty("spark.job.description")
            self._sc.setJobDescription(self._text)

    def __exit__(self, *exc: object) -> None:
        if self._sc is not None:
            self._sc.setJobDescription(self._previous)  # type: ignore[arg-type]


def _abort_quietly(job: Job) -> None:
    """Roll the job back after a failure, without hiding the failure itself."""
    try:
        report = job.abort()
        log.info("aborted job %s: %d uploads", job.job_id, report.aborted_uploads)
    except Exception as exc:  # noqa: BLE001 - the original error matters more; orphan cleanup catches the rest
        log.warning("could not abort job %s after a failure: %s; run `mpcommit jobs abort %s --job %s`",
                    job.job_id, exc, job.destination.uri, job.job_id)

