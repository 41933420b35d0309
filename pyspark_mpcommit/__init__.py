"""mpcommit's PySpark data source, under the name Spark looks for by itself.

PySpark 4 imports every installed top-level module named ``pyspark_*`` and registers its ``DefaultSource``
(pyspark/sql/worker/lookup_data_sources.py), so ``df.write.format("mpcommit")`` works in any session with no
import and no register call; :func:`mpcommit.spark.register` registers it explicitly. This module holds PySpark's
classes only -- each a thin shell over mpcommit's own (:mod:`mpcommit.spark.datasource`,
:mod:`mpcommit.spark.streaming`), which import no pyspark, so that ``pip install mpcommit`` without PySpark can
import all of mpcommit. Nothing but Spark (and the register helper) imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from mpcommit.errors import UsageError
from mpcommit.spark.datasource import NAME, NO_READER, NO_SCHEMA, BatchWrite, TaskOutcome
from mpcommit.spark.streaming import StreamSink

__all__ = ["BatchWriter", "DefaultSource", "StreamWriter", "TaskMessage"]


@dataclass(frozen=True)
class TaskMessage(WriterCommitMessage):
    """A task's :class:`~mpcommit.spark.datasource.TaskOutcome` as Spark carries it to the driver."""

    result: bytes | None
    job_id: str
    query_id: str | None = None

    @classmethod
    def of(cls, outcome: TaskOutcome) -> "TaskMessage":
        return cls(outcome.result, outcome.job_id, outcome.query_id)


class DefaultSource(DataSource):
    """``mpcommit``: writes through mpcommit, in batches (``df.write``, SQL) and streams (``df.writeStream``)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        raise UsageError(NO_SCHEMA)

    def reader(self, schema: Any) -> Any:
        raise UsageError(NO_READER)

    def writer(self, schema: Any, overwrite: bool) -> "BatchWriter":
        return BatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> "StreamWriter":  # noqa: N802 - PySpark's name
        return StreamWriter(dict(self.options), schema, overwrite)


class BatchWriter(DataSourceArrowWriter):
    """A batch write (:class:`mpcommit.spark.datasource.BatchWrite`): Arrow batches in, one job."""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool):
        self.impl = BatchWrite(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        return TaskMessage.of(self.impl.write_task(iterator))

    def commit(self, messages: Sequence[TaskMessage | None]) -> None:
        self.impl.commit(messages)

    def abort(self, messages: Sequence[TaskMessage | None]) -> None:
        self.impl.abort(messages)


class StreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink (:class:`mpcommit.spark.streaming.StreamSink`): each micro-batch one job, exactly once."""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool):
        self.sink = StreamSink(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        return TaskMessage.of(self.sink.write_task(iterator))

    def commit(self, messages: Sequence[TaskMessage | None], batchId: int) -> None:  # noqa: N803 - PySpark's name
        self.sink.commit(messages, batchId)

    def abort(self, messages: Sequence[TaskMessage | None], batchId: int) -> None:  # noqa: N803
        self.sink.abort(messages, batchId)
