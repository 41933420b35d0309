"""Write a PySpark DataFrame to S3 through the committer: no renames, nothing visible before the job commit.

How it runs:

1. On the driver, everything that can be checked is checked before anything is uploaded (:mod:`.plan`, shared
   with the fluent writer and the data source): format and options, mode, partition columns, and whether the
   format can hold the DataFrame's types. ``Job.create`` then checks the bucket and the mode (mode ``error`` on
   existing data raises here, with nothing written) and records the job; mode ``ignore`` on existing data stops
   here without running Spark.
2. ``df.mapInArrow`` runs one Python function per Spark task over the task's rows as Arrow batches: the task body
   of every door (:func:`mpcommit.spark.tasks.run_task`), which returns its
   :class:`~mpcommit.protocol.records.manifest.TaskResult`, handed back here as a single one-row binary column.
   The task's plan travels inside the closure: executors need no driver state.
3. The driver ``collect()``s those rows: Spark's action result holds exactly one row per partition, from the
   attempt Spark counted as successful. ``Job.commit`` completes exactly those attempts and aborts every
   other upload of the job (failed attempts, attempts whose worker died, duplicates), then writes ``_SUCCESS``.

If the Spark job fails, the job is aborted: nothing of it stays visible or pending. If the commit's outcome is
unknown (it failed after its journal was written), nothing is cleaned up and the error says how to recover.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import ExecutorEnvironmentError, UsageError
from ..formats.partitioning import DEFAULT_MAX_OPEN_WRITERS
from ..modes import PartitionOverwrite, WriteMode
from ..options import OrderSettings, S3Options, WriterSettings
from ..protocol import (DEFAULT_COMMIT_THREADS, CommitReport, HandedOverResults, InlineBudget, TaskResult, Txn,
                        inline_parts_per_task)
from ..protocol.job import Job
from .compat import check_pyspark
from .plan import StartedWrite, TaskHook, arrow_schema_of, plan_write
from .request import Settings, WriteRequest
from .session import Recorder, SessionSettings
from .table_schema import SchemaMismatch
from .table_target import resolve as resolve_target
from .tasks import run_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..catalog.base import Catalog
    from ..compaction.commit_merge import BinJob, BinOutcome, Runner
    from ..compaction.planner import MergePolicy

log = logging.getLogger(__name__)

#: The one column each task returns: its serialized TaskResult.
RESULT_SCHEMA = "result binary"

__all__ = ["RESULT_SCHEMA", "TaskHook", "TaskResult", "write"]


def write(
    df: "DataFrame",
    uri: str,
    format: str = "parquet",  # noqa: A002 - PySpark's name for it
    *,
    mode: str | WriteMode = "error",
    partition_by: str | list[str] | tuple[str, ...] | None = None,
    partition_overwrite: str | PartitionOverwrite = "static",
    merge: "MergePolicy | None" = None,
    options: Mapping[str, Any] | None = None,
    s3: S3Options | None = None,
    max_open_writers: int = DEFAULT_MAX_OPEN_WRITERS,
    commit_threads: int = DEFAULT_COMMIT_THREADS,
    writer: WriterSettings | None = None,
    table: str | None = None,
    catalog: "Catalog | str | None" = None,
    overwrite_bucket_root: bool = False,
    schema_mismatch: str | SchemaMismatch = "warn",
    txn: Txn | None = None,
    order: OrderSettings | None = None,
    _task_hook: TaskHook | None = None,
) -> CommitReport:
    """Write ``df`` to ``uri`` (``s3://``, ``s3a://`` or ``s3n://``) and commit it; return the commit report.

    ``format``: parquet (snappy by default), csv, json (JSON Lines) or text. ``mode``: error (errorifexists,
    the default, as in PySpark), append, overwrite or ignore. ``partition_by``: Hive-style partition columns;
    ``partition_overwrite="dynamic"`` makes overwrite replace only the partitions this write produces (as in Spark,
    it applies to partitioned writes: an unpartitioned overwrite replaces the whole destination either way).
    ``options``: PySpark's writer option names -- ``compression``, ``header``, ``sep``, ``lineSep``,
    ``maxRecordsPerFile`` ... ``max_open_writers``: partition files one task keeps open before it writes the
    rest sorted by partition (see :mod:`mpcommit.formats.partitioning` for the memory bound). ``s3``: how to reach
    the store (default: boto3's usual sources). ``merge``: a :class:`~mpcommit.compaction.MergePolicy` to
    merge small files before they become visible (Hive's rule per partition: average below
    ``small_file_avg``, merged up to ``target_size``); tasks then stage files that stay below one part, and
    the merges run as a Spark stage before the commit (see :mod:`mpcommit.compaction.commit_merge`).
    ``table``: "db.name" to register the committed partitions and their statistics in, after the commit, in
    ``catalog`` (default: the DataFrame's session catalog; "glue", or a :class:`~mpcommit.catalog.Catalog`);
    without ``partition_by`` the table's partition columns are written, and a ``uri``, format or partition columns
    other than the table's are refused before anything is written; see docs/CATALOG.md. ``overwrite_bucket_root``: allow an overwrite of a bucket's root (``s3://bucket``),
    which replaces every object in the bucket; refused without it. ``schema_mismatch``: when appending (or
    overwriting partitions dynamically), one existing file's column types (a Parquet footer, a CSV header) are
    compared with this write's first: ``"warn"`` (a :class:`~mpcommit.spark.table_schema.SchemaMismatchWarning`
    naming each column and both types), ``"error"`` (``SchemaMismatchError``, nothing written) or ``"ignore"``.
    ``txn``: the application version this write commits, ``Txn(app_id, version)`` (Delta Lake's ``txnAppId`` /
    ``txnVersion``): a version the table committed already writes nothing and the report says so
    (``duplicate_of``) -- a scheduler's re-run of a run that did commit, a ``foreachBatch`` batch replayed after a
    restart (``Txn(query_name, batch_id)``); a version older than the newest committed for that application is
    refused (``TxnVersionError``). ``order``: how the job keeps its place in the table's commit order
    (:class:`~mpcommit.options.OrderSettings`: heartbeat, the lease after which a silent earlier job is taken over,
    the longest wait).

    The report gives the job id, the committed files, bytes, rows, partitions and timings (``write``: creating
    the job to the last task's result; ``merge``: the commit-time merge; ``commit``: the job commit).
    """
    _check_dataframe(df)
    settings = Settings(s3=s3, merge=merge, table=table, catalog=catalog, max_open_writers=max_open_writers,
                        commit_threads=commit_threads, writer=writer, overwrite_bucket_root=overwrite_bucket_root,
                        schema_mismatch=SchemaMismatch.parse(schema_mismatch), txn=txn, order=order)
    columns = partition_by if partition_by is None or isinstance(partition_by, str) else tuple(partition_by)
    # A table named: checked against the write before anything is written, its partition columns taken if not given.
    target = resolve_target(settings, path=uri, fmt=format.strip().lower() if isinstance(format, str) else format,
                            partition_by=[columns] if isinstance(columns, str) else columns, default_catalog="spark",
                            spark=df.sparkSession)
    if target is not None:
        settings, columns = target.settings, target.partition_by or None
    write_mode = WriteMode.parse(mode)
    overwrite = PartitionOverwrite.parse(partition_overwrite)
    if not columns:
        overwrite = PartitionOverwrite.STATIC  # as in Spark: the mode applies to partitioned writes only
    request = WriteRequest(uri=uri, format=format, mode=write_mode, partition_by=columns,  # type: ignore[arg-type]
                           partition_overwrite=overwrite, options=dict(options or {}), settings=settings)
    return write_request(df, request, task_hook=_task_hook)


def write_request(df: "DataFrame", request: WriteRequest, *, task_hook: TaskHook | None = None) -> CommitReport:
    """The write behind ``write`` and ``writer(df)``: plan, start, run the tasks as one Spark job, finish."""
    session = SessionSettings.of_session(df.sparkSession)
    planned = plan_write(request, _arrow_schema(df, session), Recorder(session))
    started = planned.start(spark=df.sparkSession, task_hook=task_hook)
    if started.ignored:
        return started.finish([])
    results = run_spark_tasks(df, started)  # handed over: the commit lets each in-line manifest go once placed
    return started.finish(results, runner=_spark_runner(df, started.job) if request.settings.merge else None,
                          spark=df.sparkSession)


def run_spark_tasks(df: "DataFrame", started: StartedWrite) -> HandedOverResults:
    """One mapInArrow task per Spark partition, each writing and committing its attempt; the driver collects
    their results, decoded (the collected rows are not kept) and handed over to the job commit. If the Spark job
    fails, the job is rolled back.

    The driver's memory stays bounded with the files: each task carries its manifest in-line only within its
    share of the job's in-line budget (from the task count Spark's plan gives), and the driver decodes in-line
    manifests only while that budget lasts (a count that was unknown or too low); the rest the commit streams
    from their stored copies."""
    plan, job = started.task_plan, started.job
    tasks = estimated_tasks(df)
    if tasks is not None:
        plan = dataclasses.replace(plan, inline_parts=inline_parts_per_task(tasks))
    budget = InlineBudget()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        result = run_task(plan, batches)
        yield pa.RecordBatch.from_arrays([pa.array([result.to_bytes()], pa.binary())], names=["result"])

    try:
        with _job_description(df, f"mpcommit: write {plan.fmt.name} to {job.destination.uri} (job {job.job_id})"):
            rows = df.mapInArrow(run, RESULT_SCHEMA).collect()
        rows.reverse()  # decoded from the end of the list, so that each row is let go once decoded
        results = HandedOverResults()
        while rows:
            results.append(TaskResult.from_bytes(bytes(rows.pop()[0]), destination=job.destination,
                                                 job_id=job.job_id, budget=budget))
        if budget.dropped:
            log.info("job %s: %d of %d task results past the in-line budget; the commit reads their manifests "
                     "from the store", job.job_id, budget.dropped, len(results))
        return results
    except BaseException as exc:
        started.abort()
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


def estimated_tasks(df: "DataFrame") -> int | None:
    """How many tasks writing ``df`` will run, from its physical plan and without running anything; None when the
    plan does not say (Spark Connect, or a scan whose split count only its RDD knows and that sits under adaptive
    execution). An adaptive plan's count is the one before its shuffles are coalesced: never fewer than the tasks
    that run, unless skew splitting adds some -- the driver's own budget covers that."""
    try:
        execution = df._jdf.queryExecution()
        physical = execution.executedPlan()
        if physical.getClass().getSimpleName() != "AdaptiveSparkPlanExec":
            n = physical.outputPartitioning().numPartitions()
            if n > 0:
                return int(n)
            # A plan without exchanges or subqueries makes its RDD without running a job: its partitions are the
            # tasks. With one, making the RDD may run a job (a broadcast's, a range partitioning's sample).
            tree = str(physical.toString())
            return None if "Exchange" in tree or "Subquery" in tree else int(execution.toRdd().getNumPartitions())
        n = physical.inputPlan().outputPartitioning().numPartitions()
        conf = df.sparkSession.conf
        shuffle = conf.get("spark.sql.adaptive.coalescePartitions.initialPartitionNum", None) \
            or conf.get("spark.sql.shuffle.partitions", "200")
        return max(int(n), int(shuffle))
    except Exception:  # noqa: BLE001 - Spark Connect (no _jdf) or a plan shape this does not know
        return None


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
        from ..compaction.commit_merge import run_bin

        with _job_description(df, f"mpcommit: merge {len(bins)} bins of small files (job {job.job_id})"):
            return sc.parallelize(bins, len(bins)).map(run_bin).collect()

    return run


#: Modules whose absence in a task means the executors' Python is not set up for mpcommit (its own dependencies).
_OWN_MODULES = {"mpcommit", "pyarrow", "pandas", "numpy", "boto3", "botocore", "s3transfer", "urllib3", "orjson"}
_NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]+)'")


def _missing_module(exc: BaseException) -> str | None:
    """The module a Spark task failed to import, when it is mpcommit or one of its dependencies (Spark reports a
    task's ModuleNotFoundError inside its own exception's text)."""
    for match in _NO_MODULE.finditer(str(exc)):
        if match.group(1).split(".")[0] in _OWN_MODULES:
            return match.group(1)
    return None


# ---------------------------------------------------------------- driver helpers
def _check_dataframe(df: Any, function: str = "write") -> None:
    """Refuse anything but a PySpark DataFrame (classic or Connect), naming the function called and the type given
    by its module (a pandas or polars DataFrame is also called DataFrame)."""
    if all(hasattr(df, attr) for attr in ("mapInArrow", "schema", "sparkSession")):
        check_pyspark()  # an unsupported PySpark is named here, not by whatever fails first further on
        return
    kind = type(df)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    hint = ""
    if kind.__module__.split(".")[0] in ("pandas", "polars", "pyarrow"):
        hint = " Make it a Spark DataFrame first: spark.createDataFrame(data)."
    raise UsageError(f"mpcommit.spark.{function} takes a PySpark DataFrame, got {name}.{hint} Nothing was written.")


def _arrow_schema(df: "DataFrame", session: SessionSettings) -> pa.Schema:
    """The Arrow schema Spark hands the tasks, to check types against the format before anything runs."""
    return arrow_schema_of(df.schema, session)


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
