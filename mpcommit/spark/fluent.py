"""``mpcommit.spark.writer(df)``: PySpark's DataFrameWriter, committing through mpcommit.

A ``df.write...`` line becomes an mpcommit write by changing its first word::

    df.write.mode("overwrite").partitionBy("dt").option("compression", "zstd").parquet(uri)
    writer(df).mode("overwrite").partitionBy("dt").option("compression", "zstd").parquet(uri)

Every method on the chain is PySpark's, with its signature and defaults: mode ``errorifexists``, the format of
``spark.sql.sources.default``, Parquet's codec from ``spark.sql.parquet.compression.codec``,
``partitionOverwriteMode`` from the option or else ``spark.sql.sources.partitionOverwriteMode``,
``maxRecordsPerFile`` from the option or else ``spark.sql.files.maxRecordsPerFile``; option names ignore case and
a later option replaces an earlier one. The actions (``save``, ``parquet``, ``csv``, ``json``, ``text``) return
the :class:`~mpcommit.protocol.commit.CommitReport` where PySpark returns None.

mpcommit's own settings are not Spark's, so they are not on the chain: they are the keyword arguments of
:func:`writer` (``s3``, ``merge``, ``table``/``catalog``, ``max_open_writers``, ``commit_threads``,
``writer_settings``, ``overwrite_bucket_root``), the same as :func:`~mpcommit.spark.writer.write`'s.

Refused, by name and with what to do: what PySpark refuses, with Spark's error condition
(:class:`~mpcommit.errors.SparkWriterError`: ``INVALID_SAVE_MODE``, ``DATA_SOURCE_NOT_FOUND``,
``CODEC_NOT_AVAILABLE`` ...); what Spark accepts and mpcommit does not do (``orc``/``avro``/``xml``/``jdbc``,
``bucketBy``/``sortBy``/``clusterBy``, ``insertInto``/``saveAsTable``, options a format does not support) -- never
silently ignored. This module is a translation only: the write itself is :func:`~mpcommit.spark.writer.write`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import SparkWriterError, UsageError
from ..formats.partitioning import DEFAULT_MAX_OPEN_WRITERS
from ..modes import WriteMode
from ..options import OrderSettings, S3Options, WriterSettings
from ..protocol import DEFAULT_COMMIT_THREADS, CommitReport, Txn
from .request import (
    Settings,
    check_all_partition_columns,
    refuse_format,
    require_str,
    resolve_format,
    to_str,
    translate,
)
from .session import Recorder, SessionSettings
from .table_schema import SchemaMismatch
from .table_target import resolve as resolve_target
from .writer import _check_dataframe, write_request

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..catalog.base import Catalog
    from ..compaction.planner import MergePolicy

__all__ = ["DataFrameWriter", "writer"]


def writer(
    df: "DataFrame",
    *,
    s3: S3Options | None = None,
    merge: "MergePolicy | None" = None,
    table: str | None = None,
    catalog: "Catalog | str | None" = None,
    max_open_writers: int = DEFAULT_MAX_OPEN_WRITERS,
    commit_threads: int = DEFAULT_COMMIT_THREADS,
    writer_settings: WriterSettings | None = None,
    overwrite_bucket_root: bool = False,
    schema_mismatch: str = "warn",
    txn: Txn | None = None,
    order: OrderSettings | None = None,
) -> "DataFrameWriter":
    """``df.write`` for mpcommit: ``writer(df).mode(...).partitionBy(...).option(...).parquet(uri)``.

    The keyword arguments are mpcommit's own settings, as in :func:`~mpcommit.spark.writer.write`: ``s3`` (how to
    reach the store; default boto3's usual sources), ``merge`` (a :class:`~mpcommit.compaction.MergePolicy` merging
    small files before they become visible), ``table`` and ``catalog`` (write into an existing table and register
    the committed partitions in it: the path, format and partition columns the chain leaves out are the table's,
    ``writer(df, table="db.t").mode("append").save()``), ``max_open_writers``, ``commit_threads``, ``writer_settings`` (multipart sizing),
    ``overwrite_bucket_root`` (allow an overwrite of a whole bucket, ``s3://bucket``) and ``schema_mismatch``
    (``"warn"``, ``"error"`` or ``"ignore"``: an append whose column types differ from the table's files) and
    ``txn`` (``Txn(app_id, version)``: a version committed already writes nothing; also as Delta Lake's options,
    ``.option("txnAppId", app).option("txnVersion", n)``) and ``order`` (OrderSettings: the job's heartbeat and
    the lease after which a silent earlier job is taken over).
    """
    _check_dataframe(df, "writer")
    return DataFrameWriter(df, Settings(s3=s3, merge=merge, table=table, catalog=catalog,
                                        max_open_writers=max_open_writers, commit_threads=commit_threads,
                                        writer=writer_settings, overwrite_bucket_root=overwrite_bucket_root,
                                        schema_mismatch=SchemaMismatch.parse(schema_mismatch), txn=txn,
                                        order=order))


class DataFrameWriter:
    """PySpark's ``DataFrameWriter`` over :func:`~mpcommit.spark.writer.write`: the same methods, arguments and
    defaults; each setter changes this writer and returns it, as PySpark's do. Made by :func:`writer`."""

    def __init__(self, df: "DataFrame", settings: Settings):
        self._df = df
        self._settings = settings
        self._mode = "error"
        self._source: str | None = None
        self._partition_by: list[str] = []
        # Spark's CaseInsensitiveMap: folded name -> (name as given, value); a later option replaces an earlier one.
        self._options: dict[str, tuple[str, str]] = {}

    # ------------------------------------------------------------ PySpark's setters
    def mode(self, saveMode: str | None) -> "DataFrameWriter":  # noqa: N803 - PySpark's argument names
        """``append``, ``overwrite``, ``ignore``, ``error`` / ``errorifexists`` / ``default``; None keeps the mode."""
        if saveMode is None:
            return self
        require_str("saveMode", saveMode)
        try:
            self._mode = WriteMode.parse(saveMode).value
        except UsageError:
            raise SparkWriterError(
                "INVALID_SAVE_MODE",
                f'The specified save mode "{saveMode}" is invalid. Valid save modes include "append", "overwrite", '
                '"ignore", "error", "errorifexists", and "default".',
            ) from None
        return self

    def format(self, source: str) -> "DataFrameWriter":  # noqa: A003 - PySpark's name
        """``parquet``, ``csv``, ``json`` or ``text`` (checked here; Spark checks it when saving)."""
        self._source = resolve_format(source)
        return self

    def option(self, key: str, value: Any) -> "DataFrameWriter":
        """One option, by PySpark's rules: None is no option, True/False become "true"/"false", the rest str()."""
        if value is None:
            return self
        if not isinstance(key, str):
            raise SparkWriterError("NOT_STR", f"Argument `key` should be a str, got {type(key).__name__}.")
        self._options[key.lower()] = (key, to_str(value))
        return self

    def options(self, **options: Any) -> "DataFrameWriter":
        for key, value in options.items():
            self.option(key, value)
        return self

    def partitionBy(self, *cols: str | list[str]) -> "DataFrameWriter":  # noqa: N802 - PySpark's name
        """Hive-style partition columns: ``partitionBy("a", "b")`` or ``partitionBy(["a", "b"])``."""
        if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
            cols = tuple(cols[0])
        self._partition_by = list(cols)  # type: ignore[arg-type] - write() names a column that is not a str
        return self

    def bucketBy(self, numBuckets: int, col: Any, *cols: Any) -> NoReturn:  # noqa: N802,N803
        raise UsageError(
            "bucketBy: mpcommit writes no bucketed output (Spark writes buckets only through saveAsTable, into its "
            "catalog, in a layout only Spark reads). Drop .bucketBy(...) to write through mpcommit, or keep "
            "df.write...saveAsTable for a bucketed table."
        )

    def sortBy(self, col: Any, *cols: Any) -> NoReturn:  # noqa: N802
        raise SparkWriterError(
            "SORT_BY_WITHOUT_BUCKETING",
            "sortBy must be used together with bucketBy, and mpcommit writes no buckets. To sort rows within each "
            "file, sort before writing: writer(df.sortWithinPartitions(...)).",
        )

    def clusterBy(self, *cols: Any) -> NoReturn:  # noqa: N802
        raise UsageError(
            "clusterBy: clustering columns are table metadata for Spark's catalog tables, and mpcommit writes paths. "
            "Drop .clusterBy(...); to cluster the data in the files, df.repartitionByRange(...) or "
            "df.sortWithinPartitions(...) before writing."
        )

    # ------------------------------------------------------------ PySpark's actions
    def save(self, path: str | None = None, format: str | None = None,  # noqa: A002 - PySpark's names
             mode: str | None = None, partitionBy: str | list[str] | None = None,  # noqa: N803
             **options: Any) -> CommitReport:
        """Write and commit to ``path`` (``s3://``, ``s3a://``, ``s3n://``) or the ``path`` option."""
        self.mode(mode).options(**options)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if format is not None:
            self.format(format)
        return self._run(path)

    def parquet(self, path: str, mode: str | None = None, partitionBy: str | list[str] | None = None,  # noqa: N803
                compression: str | None = None) -> CommitReport:
        self.mode(mode)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        self.options(compression=compression)
        return self._run(path, "parquet")

    def csv(self, path: str, mode: str | None = None, compression: str | None = None, sep: str | None = None,
            quote: str | None = None, escape: str | None = None, header: bool | str | None = None,
            nullValue: str | None = None, escapeQuotes: bool | str | None = None,  # noqa: N803
            quoteAll: bool | str | None = None, dateFormat: str | None = None,  # noqa: N803
            timestampFormat: str | None = None, ignoreLeadingWhiteSpace: bool | str | None = None,  # noqa: N803
            ignoreTrailingWhiteSpace: bool | str | None = None,  # noqa: N803
            charToEscapeQuoteEscaping: str | None = None, encoding: str | None = None,  # noqa: N803
            emptyValue: str | None = None, lineSep: str | None = None) -> CommitReport:  # noqa: N803
        self.mode(mode)
        self.options(compression=compression, sep=sep, quote=quote, escape=escape, header=header,
                     nullValue=nullValue, escapeQuotes=escapeQuotes, quoteAll=quoteAll, dateFormat=dateFormat,
                     timestampFormat=timestampFormat, ignoreLeadingWhiteSpace=ignoreLeadingWhiteSpace,
                     ignoreTrailingWhiteSpace=ignoreTrailingWhiteSpace,
                     charToEscapeQuoteEscaping=charToEscapeQuoteEscaping, encoding=encoding, emptyValue=emptyValue,
                     lineSep=lineSep)
        return self._run(path, "csv")

    def json(self, path: str, mode: str | None = None, compression: str | None = None,
             dateFormat: str | None = None, timestampFormat: str | None = None,  # noqa: N803
             lineSep: str | None = None, encoding: str | None = None,  # noqa: N803
             ignoreNullFields: bool | str | None = None) -> CommitReport:  # noqa: N803
        self.mode(mode)
        self.options(compression=compression, dateFormat=dateFormat, timestampFormat=timestampFormat,
                     lineSep=lineSep, encoding=encoding, ignoreNullFields=ignoreNullFields)
        return self._run(path, "json")

    def text(self, path: str, compression: str | None = None, lineSep: str | None = None) -> CommitReport:  # noqa: N803
        self.options(compression=compression, lineSep=lineSep)
        return self._run(path, "text")

    def orc(self, path: str, *args: Any, **kwargs: Any) -> NoReturn:
        refuse_format("orc")

    def xml(self, path: str, *args: Any, **kwargs: Any) -> NoReturn:
        refuse_format("xml")

    def jdbc(self, url: str, table: str, *args: Any, **kwargs: Any) -> NoReturn:
        refuse_format("jdbc")

    def insertInto(self, tableName: str, overwrite: bool | None = None) -> NoReturn:  # noqa: N802,N803
        raise UsageError(
            f"insertInto({tableName!r}): mpcommit writes by column name, not by position into a table through Spark's "
            "catalog. Write to the table -- its location, format and partition columns taken from the catalog, the "
            f"new partitions registered -- with writer(df, table={tableName!r}).mode('append').save() (the "
            "DataFrame's columns named as the table's)."
        )

    def saveAsTable(self, name: str, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: N802
        raise UsageError(
            f"saveAsTable({name!r}): mpcommit does not create tables in Spark's catalog; it registers the partitions "
            "it commits in an existing table. Create the table once (CREATE TABLE ... USING parquet PARTITIONED BY "
            f"(...) LOCATION 's3a://...'), then writer(df, table={name!r}).mode('append').save(): its location, format "
            "and partition columns come from the catalog."
        )

    # ------------------------------------------------------------ translation into the one write
    def _run(self, path: str | None, source: str | None = None) -> CommitReport:
        partition_by, source, settings = self._partition_by, source or self._source, self._settings
        if settings.table is not None:
            # writer(df, table="db.t")...save(): what the chain leaves out is the table's, what it says is checked.
            option = self._options.get("path")
            given = path if path is not None else (option[1] if option is not None else None)
            target = resolve_target(settings, path=given if isinstance(given, str) else None, fmt=source,
                                    partition_by=partition_by, default_catalog="spark", spark=self._df.sparkSession)
            if target is not None:
                settings, source, partition_by = target.settings, target.format, list(target.partition_by)
                path = target.path if given is None else path
        check_all_partition_columns(list(self._df.columns), partition_by)
        session = Recorder(SessionSettings.of_session(self._df.sparkSession))
        request = translate(self._options, path=path, mode=self._mode, partition_by=partition_by,
                            source=source, session=session, settings=settings)
        return write_request(self._df, request)
