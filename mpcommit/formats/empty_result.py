"""What a write of no rows leaves: the file Spark's own writer leaves, so that readers of the table still find its
schema.

Spark's FileFormatWriter always lets its first task open a file, rows or not (and runs one task when the data
has no partitions at all): a write without rows and without partition columns leaves one file ``part-00000-...``
holding no rows -- for Parquet the schema and no row group, for CSV with ``header`` the header line, for JSON,
text and CSV without a header an empty file (a compressed one: an empty compressed stream). Without it
``spark.read.parquet`` of the table fails (``UNABLE_TO_INFER_SCHEMA``) after a day without data. A partitioned
write of no rows leaves no file in Spark, and none here. Measured with Spark 4.3's ``df.write`` to local folders.

Every door of the Spark binding calls :func:`add_empty_result_file` on the driver, with the task results it
collected, before the job commit: the file is then committed (or rolled back) with the job like any other.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from ..protocol.records.manifest import TaskResult
from ..protocol.task import JobSpec
from .base import FileFormat


def add_empty_result_file(spec: JobSpec, fmt: FileFormat, schema: pa.Schema, results: Sequence[TaskResult], *,
                          partitioned: bool) -> Sequence[TaskResult]:
    """``results``, with the file Spark leaves for no rows when no task wrote a file and the write is not
    partitioned: written on this process as a new attempt of task 0 (``part-00000-JOBID.c000.EXT``), whose result
    replaces task 0's (an attempt that wrote nothing; the job commit finds it and has nothing of it to abort).
    ``schema``: the files' schema (the data's, without partition columns)."""
    if partitioned or any(r.files for r in results):
        return results  # as it is: results handed over to the commit stay handed over (HandedOverResults)
    attempt = 1 + max((r.attempt for r in results if r.task_id == 0), default=-1)
    with spec.task(0, attempt) as task:
        with task.create("", fmt.extension, content_type=fmt.content_type) as sink:
            writer = fmt.open(sink, schema)  # type: ignore[arg-type] - a MultipartWriter is a binary file object
            writer.close()
            sink.rows = 0
        result = task.commit()
    return [result] + [r for r in results if r.task_id != 0]
