"""mpcommit as a PySpark data source (PySpark 4's Python Data Source API): ``df.write.format("mpcommit")``, SQL
``INSERT`` into a view ``USING mpcommit``, and ``df.writeStream.format("mpcommit")`` (:mod:`.streaming`).

Spark finds it by itself in any installed top-level module named ``pyspark_*`` that defines ``DefaultSource``
(``pyspark_mpcommit``, installed with mpcommit, naming PySpark's classes in :mod:`.pyspark_source`, a shell over
this module and :mod:`.streaming`, which import no pyspark when loaded -- the sink reads its task context
inside a function), or after :func:`mpcommit.spark.register`. Its
options are described in :mod:`.source_options`.

How Spark runs a Python data source's batch write, and what mpcommit does at each step -- the same steps as
``write()`` and ``writer(df)`` (:mod:`.plan`):

1. ``writer(schema, overwrite)``, in a Python process of its own on the driver: the options are read and checked
   against the data's schema, and the job is created (``Job.create``). Everything refused is refused here, before
   any task runs, with nothing written. The writer, holding the job's spec, is then pickled by Spark.
2. ``write(batches)``, once per Spark task on the executors: Arrow batches in, the task body of every door
   (:func:`~mpcommit.spark.tasks.run_task`); its ``TaskResult`` goes back as the commit message.
3. ``commit(messages)`` when every task succeeded, in another Python process on the driver: the job is resumed
   from the pickled writer and committed (the file for no rows, the commit-time merge on this process's threads,
   the catalog registration). ``abort(messages)`` otherwise: nothing stays visible or pending.

Spark refuses by itself, before mpcommit sees the write, three things a Python data source cannot be asked for
(UNSUPPORTED_DATA_SOURCE_SAVE_MODE, "partitioning ... do not match"): ``.mode("errorifexists")`` -- PySpark's default
mode -- and ``.mode("ignore")``, for which write ``.mode("append").option("saveMode", "errorifexists")`` (or
``"ignore"``); and ``.partitionBy("dt")``, for which write ``.option("partitionBy", "dt")``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from ..errors import MpcommitError, UsageError
from ..protocol import InlineBudget, TaskResult
from .plan import WriteHandle, arrow_schema_of, plan_write
from .session import Recorder, SessionSettings
from .source_options import parse
from .tasks import run_task

log = logging.getLogger(__name__)

#: The name of the data source: ``df.write.format("mpcommit")``, ``USING mpcommit``.
NAME = "mpcommit"

#: Why the data source has no schema and no reader.
NO_SCHEMA = ("mpcommit only writes, so it cannot tell a table's columns: declare them (CREATE TEMPORARY VIEW t "
             "(id BIGINT, dt STRING) USING mpcommit OPTIONS (...)), and read the table with Spark's reader for its "
             "format, e.g. spark.read.parquet('s3a://bucket/table').")
NO_READER = ("mpcommit only writes: read the table with Spark's reader for its format, e.g. "
             "spark.read.parquet('s3a://bucket/table') (mpcommit's tables are plain Hive-style folders)")
#: Why a query of a catalog table USING mpcommit finds nothing to read: Spark keeps no options for a Python data
#: source's table (PySpark 4.3), and a saveAsTable through the source cannot be told from a save() (the same options).
NO_TABLE_OPTIONS = ("this table has no options: Spark keeps neither a location nor options for a table whose "
                    "provider is a Python data source, as df.write.format('mpcommit')...saveAsTable(...) and CREATE "
                    "TABLE ... USING mpcommit make it, so nothing can be read through it. saveAsTable wrote its data "
                    "where its path said. Drop this table and make one Spark reads natively: CREATE TABLE t (...) "
                    "USING parquet PARTITIONED BY (...) LOCATION 's3a://bucket/table'; then write into it with "
                    ".option('table', 'db.t') (catalog glue) or mpcommit.spark.writer(df, table='db.t').")


#: PySpark's worker switch (``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets it for all workers):
#: report a failure as the exception's own line, without the traceback.
HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"

F = TypeVar("F", bound=Callable[..., Any])


def user_facing(method: F) -> F:
    """mpcommit's own refusals first in what the user reads.

    Spark reports a Python data source's failure as the text PySpark's worker formats -- the whole traceback --
    after its own words (``[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer:``, or a
    task's ``PythonException``), so the line that says what is wrong and what to do came about ten lines down. For
    an :class:`~mpcommit.errors.MpcommitError` -- a refusal or a failure that names itself -- this sets the
    worker's own switch in the worker's process, so that it reports the exception's line alone: that process
    reads it when it reports this error and then exits (pyspark.sql.worker.utils.worker_run, worker.py), so nothing
    else is changed. Any other exception is a bug and keeps its traceback."""

    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except MpcommitError:
            os.environ[HIDE_TRACEBACK] = "1"
            raise

    return wrapped  # type: ignore[return-value]


class Message(Protocol):
    """A task's commit message (``pyspark_source.TaskMessage``, a ``WriterCommitMessage``)."""

    result: bytes | None
    job_id: str
    query_id: str | None


@dataclass(frozen=True)
class TaskOutcome:
    """What one task hands the driver: its serialized TaskResult (None when mode ``ignore`` met data), and for a
    stream's micro-batch the query it wrote for. Spark carries it as a ``WriterCommitMessage``."""

    result: bytes | None
    job_id: str
    query_id: str | None = None


class BatchWrite:
    """One batch write: planned and started where Spark creates its writer, committed where Spark commits it.
    (``pyspark_source.BatchWriter`` is this as PySpark's ``DataSourceArrowWriter``.)"""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool):
        session = Recorder(SessionSettings.unseen())
        source = parse(options, overwrite=overwrite, session=session, columns=list(schema.fieldNames()))
        planned = plan_write(source.request, arrow_schema_of(schema, session.settings), session)
        started = planned.start(default_catalog="glue")
        self.handle: WriteHandle = started.handle()
        self.ignored = started.ignored

    def write_task(self, batches: Iterator[pa.RecordBatch]) -> TaskOutcome:
        if self.ignored:  # mode ignore met existing data: nothing to write
            return TaskOutcome(None, self.handle.spec.job_id)
        result = run_task(self.handle.task_plan, batches)
        return TaskOutcome(result.to_bytes(), self.handle.spec.job_id)

    def commit(self, messages: Sequence[Message | None]) -> None:
        started = self.handle.resume()
        report = started.finish(results_of(messages, self.handle))
        log.info("%s", report)

    def abort(self, messages: Sequence[Message | None]) -> None:
        self.handle.resume(heartbeat=False).abort()


def results_of(messages: Sequence[Message | None], handle: WriteHandle) -> list[TaskResult]:
    """The tasks' results, each checked to belong to the job (I7); in-line manifests decoded only within the job's
    in-line budget (the rest the commit streams from their stored copies)."""
    spec = handle.spec
    out = []
    budget = InlineBudget()
    for m in messages:
        if m is None or getattr(m, "result", None) is None:
            continue
        if getattr(m, "job_id", None) != spec.job_id:
            raise UsageError(f"a task's commit message is not mpcommit's for job {spec.job_id}: {m!r}")
        out.append(TaskResult.from_bytes(m.result, destination=spec.destination, job_id=spec.job_id, budget=budget))
    return out
