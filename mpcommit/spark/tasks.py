"""The body of one Spark task, the same behind every door: the rows it is handed as Arrow batches go into
multipart uploads through :class:`~mpcommit.formats.partitioning.PartitionedWriter`; the attempt commits (writes its
manifest) and returns its :class:`~mpcommit.protocol.records.manifest.TaskResult`. The task and attempt numbers are
Spark's own (``TaskContext``: partition id -> task id, attempt number -> attempt)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from ..errors import ProtocolError
from ..formats.partitioning import PartitionedWriter
from ..protocol import TaskResult
from .plan import TaskPlan


def task_numbers() -> tuple[int, int]:
    """(task id, attempt) of the Spark task this runs in."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise ProtocolError("mpcommit's task function ran outside a Spark task (no TaskContext)")
    return context.partitionId(), context.attemptNumber()


def run_task(plan: TaskPlan, batches: Iterable[pa.RecordBatch], *, spec: Any = None,
             numbers: tuple[int, int] | None = None) -> TaskResult:
    """Write ``batches`` as one attempt of this Spark task and commit the attempt. ``spec``: the job to write
    for, when it is not the plan's; ``numbers``: (task id, attempt), when not this Spark task's own."""
    if plan.session is not None:  # planned without seeing the session: refuse what it would have changed
        plan.session.check_in_task(plan.consulted)
    task_id, attempt = numbers if numbers is not None else task_numbers()
    fmt = plan.fmt
    with (spec or plan.spec).task(task_id, attempt) as task:
        if plan.stage_small:
            from ..compaction.commit_merge import StagingSink  # only a write that merges stages files

            limit = task.spec.writer.initial_part_size

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
        return task.commit(inline_parts=plan.inline_parts)


def _local_dir() -> str | None:
    """Where a task spills: Spark's local directory when the executor exports it, else the system default."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    return dirs[0] if dirs and os.path.isdir(dirs[0]) else None
