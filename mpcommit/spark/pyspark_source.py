"""PySpark's classes of the ``mpcommit`` data source: ``DefaultSource``, its batch and stream writers and the task
commit message -- each a thin shell over mpcommit's own (:mod:`.datasource`, :mod:`.streaming`, which import no
pyspark when loaded). Spark finds them through the top-level module ``pyspark_mpcommit``, which re-exports them
under the name PySpark's ``pyspark_*`` convention looks for; :func:`mpcommit.spark.register` registers them
explicitly. This is the package's one module that imports pyspark when loaded: the others that need it import it
inside the function that does (a task's ``TaskContext``, the catalog's session), so that the protocol, the CLI and
the tools run without Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .compat import check_data_source, check_stream_sink, stream_writer_base

# PySpark 3.5 has no pyspark.sql.datasource: refused by name here rather than as a module that is not there.
check_data_source()

from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from ..errors import UsageError  # noqa: E402
from .datasource import (  # noqa: E402
    NAME,
    NO_READER,
    NO_SCHEMA,
    NO_TABLE_OPTIONS,
    BatchWrite,
    TaskOutcome,
    user_facing,
)
from .streaming import StreamSink  # noqa: E402

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

    @user_facing
    def schema(self) -> Any:
        raise UsageError(NO_SCHEMA)

    @user_facing
    def reader(self, schema: Any) -> Any:
        raise UsageError(NO_READER if self.options else NO_TABLE_OPTIONS)

    @user_facing
    def writer(self, schema: Any, overwrite: bool) -> "BatchWriter":
        return BatchWriter(dict(self.options), schema, overwrite)

    @user_facing
    def streamWriter(self, schema: Any, overwrite: bool) -> "StreamWriter":  # noqa: N802 - PySpark's name
        check_stream_sink()  # PySpark 4.0's stream writers get rows: refused by name there
        return StreamWriter(dict(self.options), schema, overwrite)


class BatchWriter(DataSourceArrowWriter):
    """A batch write (:class:`mpcommit.spark.datasource.BatchWrite`): Arrow batches in, one job."""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool):
        self.impl = BatchWrite(options, schema, overwrite)

    @user_facing
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        return TaskMessage.of(self.impl.write_task(iterator))

    @user_facing
    def commit(self, messages: Sequence[TaskMessage | None]) -> None:
        self.impl.commit(messages)

    @user_facing
    def abort(self, messages: Sequence[TaskMessage | None]) -> None:
        self.impl.abort(messages)


# PySpark 4.0 has no Arrow stream writer: there DefaultSource.streamWriter refuses the sink by name, and this class,
# never made, stands on the row writer's base so that the batch data source still loads.
_StreamBase: Any = stream_writer_base() or DataSourceStreamWriter


class StreamWriter(_StreamBase):  # type: ignore[misc,valid-type]
    """A streaming sink (:class:`mpcommit.spark.streaming.StreamSink`): each micro-batch one job, exactly once."""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool):
        self.sink = StreamSink(options, schema, overwrite)

    @user_facing
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        return TaskMessage.of(self.sink.write_task(iterator))

    @user_facing
    def commit(self, messages: Sequence[TaskMessage | None], batchId: int) -> None:  # noqa: N803 - PySpark's name
        self.sink.commit(messages, batchId)

    @user_facing
    def abort(self, messages: Sequence[TaskMessage | None], batchId: int) -> None:  # noqa: N803
        self.sink.abort(messages, batchId)
