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

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from ..compaction.planner import MergePolicy
from ..errors import SparkWriterError, UsageError
from ..formats import FORMATS
from ..formats.base import TEXT_COMPRESSION
from ..formats.parquet import PARQUET_COMPRESSION
from ..formats.partitioning import DEFAULT_MAX_OPEN_WRITERS
from ..options import S3Options, WriterSettings
from ..protocol.commit import DEFAULT_COMMIT_THREADS, CommitReport
from .table_schema import SchemaMismatch
from .writer import _check_dataframe, write

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..catalog import Catalog

__all__ = ["DataFrameWriter", "writer"]

#: Spark's save modes (``SaveMode``, parsed ignoring case) -> mpcommit's.
SAVE_MODES = {"append": "append", "overwrite": "overwrite", "ignore": "ignore", "error": "error",
              "errorifexists": "error", "default": "error"}
#: Old names Spark still resolves to its built-in formats (``DataSource.backwardCompatibilityMap``).
FORMAT_ALIASES = {
    "org.apache.spark.sql.parquet": "parquet",
    "org.apache.spark.sql.parquet.DefaultSource": "parquet",
    "org.apache.spark.sql.execution.datasources.parquet": "parquet",
    "org.apache.spark.sql.execution.datasources.parquet.DefaultSource": "parquet",
    "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat": "parquet",
    "org.apache.spark.sql.json": "json",
    "org.apache.spark.sql.json.DefaultSource": "json",
    "org.apache.spark.sql.execution.datasources.json": "json",
    "org.apache.spark.sql.execution.datasources.json.DefaultSource": "json",
    "org.apache.spark.sql.execution.datasources.json.JsonFileFormat": "json",
    "com.databricks.spark.csv": "csv",
    "org.apache.spark.sql.execution.datasources.csv.CSVFileFormat": "csv",
    "org.apache.spark.sql.execution.datasources.text.TextFileFormat": "text",
}
#: Formats Spark writes that mpcommit does not: refused by name, not as unknown.
SPARK_ONLY_FORMATS = ("orc", "avro", "xml", "jdbc", "hive", "delta", "iceberg", "hudi", "noop", "console", "libsvm",
                      "binaryfile", "image", "kafka")
#: Codecs Spark 4 accepts (``compression``), to tell a misspelt codec (Spark's CODEC_NOT_AVAILABLE) from one of
#: Spark's that mpcommit does not write (the format refuses it by name).
SPARK_CODECS = {
    "parquet": {"none", "uncompressed", "snappy", "gzip", "lzo", "brotli", "lz4", "lz4_raw", "zstd"},
    "text": {"none", "uncompressed", "bzip2", "deflate", "gzip", "lz4", "snappy"},
}
#: The codecs mpcommit writes per format, as the CODEC_NOT_AVAILABLE message lists them.
MPCOMMIT_CODECS = {"parquet": sorted({*PARQUET_COMPRESSION, "uncompressed"}),
                   "text": sorted({*TEXT_COMPRESSION, "uncompressed"})}
_WHAT_MPCOMMIT_WRITES = "mpcommit writes parquet, csv, json (JSON Lines) and text"


def writer(
    df: "DataFrame",
    *,
    s3: S3Options | None = None,
    merge: MergePolicy | None = None,
    table: str | None = None,
    catalog: "Catalog | str | None" = None,
    max_open_writers: int = DEFAULT_MAX_OPEN_WRITERS,
    commit_threads: int = DEFAULT_COMMIT_THREADS,
    writer_settings: WriterSettings | None = None,
    overwrite_bucket_root: bool = False,
    schema_mismatch: str = "warn",
) -> "DataFrameWriter":
    """``df.write`` for mpcommit: ``writer(df).mode(...).partitionBy(...).option(...).parquet(uri)``.

    The keyword arguments are mpcommit's own settings, as in :func:`~mpcommit.spark.writer.write`: ``s3`` (how to
    reach the store; default boto3's usual sources), ``merge`` (a :class:`~mpcommit.compaction.MergePolicy` merging
    small files before they become visible), ``table`` and ``catalog`` (register the committed partitions in an
    existing table), ``max_open_writers``, ``commit_threads``, ``writer_settings`` (multipart sizing),
    ``overwrite_bucket_root`` (allow an overwrite of a whole bucket, ``s3://bucket``) and ``schema_mismatch``
    (``"warn"``, ``"error"`` or ``"ignore"``: an append whose column types differ from the table's files).
    """
    _check_dataframe(df, "writer")
    return DataFrameWriter(df, _Settings(s3=s3, merge=merge, table=table, catalog=catalog,
                                         max_open_writers=max_open_writers, commit_threads=commit_threads,
                                         writer_settings=writer_settings, overwrite_bucket_root=overwrite_bucket_root,
                                         schema_mismatch=SchemaMismatch.parse(schema_mismatch)))


@dataclass(frozen=True)
class _Settings:
    """mpcommit's own settings of one writer (the keyword arguments of :func:`writer`), passed on to write()."""

    s3: S3Options | None
    merge: MergePolicy | None
    table: str | None
    catalog: "Catalog | str | None"
    max_open_writers: int
    commit_threads: int
    writer_settings: WriterSettings | None
    overwrite_bucket_root: bool
    schema_mismatch: SchemaMismatch


class DataFrameWriter:
    """PySpark's ``DataFrameWriter`` over :func:`~mpcommit.spark.writer.write`: the same methods, arguments and
    defaults; each setter changes this writer and returns it, as PySpark's do. Made by :func:`writer`."""

    def __init__(self, df: "DataFrame", settings: _Settings):
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
        _require_str("saveMode", saveMode)
        folded = saveMode.lower()
        if folded not in SAVE_MODES:
            raise SparkWriterError(
                "INVALID_SAVE_MODE",
                f'The specified save mode "{saveMode}" is invalid. Valid save modes include "append", "overwrite", '
                '"ignore", "error", "errorifexists", and "default".',
            )
        self._mode = SAVE_MODES[folded]
        return self

    def format(self, source: str) -> "DataFrameWriter":  # noqa: A003 - PySpark's name
        """``parquet``, ``csv``, ``json`` or ``text`` (checked here; Spark checks it when saving)."""
        self._source = _resolve_format(source)
        return self

    def option(self, key: str, value: Any) -> "DataFrameWriter":
        """One option, by PySpark's rules: None is no option, True/False become "true"/"false", the rest str()."""
        if value is None:
            return self
        if not isinstance(key, str):
            raise SparkWriterError("NOT_STR", f"Argument `key` should be a str, got {type(key).__name__}.")
        self._options[key.lower()] = (key, _to_str(value))
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
        _refuse_format("orc")

    def xml(self, path: str, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse_format("xml")

    def jdbc(self, url: str, table: str, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse_format("jdbc")

    def insertInto(self, tableName: str, overwrite: bool | None = None) -> NoReturn:  # noqa: N802,N803
        raise UsageError(
            f"insertInto({tableName!r}): mpcommit writes to a path, not into a table through Spark's catalog. "
            "Write to the table's location with its format and partition columns, and register the new partitions: "
            f"writer(df, table={tableName!r}).mode('append').format(...).partitionBy(...).save('s3://<location>')."
        )

    def saveAsTable(self, name: str, *args: Any, **kwargs: Any) -> NoReturn:  # noqa: N802
        raise UsageError(
            f"saveAsTable({name!r}): mpcommit does not create tables in Spark's catalog; it registers the partitions "
            "it commits in an existing table. Create the table once (CREATE TABLE ... USING parquet PARTITIONED BY "
            f"(...) LOCATION 's3a://...'), then writer(df, table={name!r}).partitionBy(...).parquet('s3://...')."
        )

    # ------------------------------------------------------------ translation into write()
    def _run(self, path: str | None, source: str | None = None) -> CommitReport:
        options = {name: value for name, value in self._options.values()}
        path = _take_path(path, options)
        spark = self._df.sparkSession
        conf: Callable[[str, str], str] = lambda key, default: str(spark.conf.get(key, default))  # noqa: E731
        fmt = source or self._source or _resolve_format(conf("spark.sql.sources.default", "parquet"),
                                                       from_conf="spark.sql.sources.default")
        _check_codec(fmt, options)
        if fmt == "parquet":
            _parquet_codec(options, conf)
        if not _pop(options, "maxRecordsPerFile", keep=True):
            records = conf("spark.sql.files.maxRecordsPerFile", "0")
            if records.strip() != "0":
                options["maxRecordsPerFile"] = records
        if self._partition_by and all(isinstance(c, str) for c in self._partition_by):
            columns = {c.lower() for c in self._df.columns}
            if columns and columns <= {c.lower() for c in self._partition_by}:
                raise SparkWriterError("ALL_PARTITION_COLUMNS_NOT_ALLOWED", "Cannot use all columns for partition "
                                       "columns: the files would hold no data. Leave at least one column out.")
        overwrite = _pop(options, "partitionOverwriteMode")
        if self._mode == "overwrite" and self._partition_by:
            # Spark replaces only the written partitions when the mode is dynamic, the write is an overwrite
            # and it is partitioned; in every other case the setting does not apply, and is not read.
            chosen = overwrite if overwrite is not None else conf("spark.sql.sources.partitionOverwriteMode", "STATIC")
            partition_overwrite = _partition_overwrite(chosen, given=overwrite is not None)
        else:
            if overwrite is not None:
                _partition_overwrite(overwrite, given=True)  # a bad value is refused wherever it is given
            partition_overwrite = "static"
        s = self._settings
        return write(self._df, path, fmt, mode=self._mode, partition_by=self._partition_by or None,
                     partition_overwrite=partition_overwrite, options=options, s3=s.s3, merge=s.merge, table=s.table,
                     catalog=s.catalog, max_open_writers=s.max_open_writers, commit_threads=s.commit_threads,
                     writer=s.writer_settings, overwrite_bucket_root=s.overwrite_bucket_root,
                     schema_mismatch=s.schema_mismatch)


# ---------------------------------------------------------------- pure helpers
def _to_str(value: Any) -> str:
    """PySpark's ``to_str``: booleans as Spark spells them, everything else str()."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _require_str(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise SparkWriterError("NOT_STR", f"Argument `{name}` should be a str, got {type(value).__name__}.")


def _resolve_format(source: Any, *, from_conf: str | None = None) -> str:
    """Spark's name for a format -> mpcommit's format; Spark's refusal for an unknown one."""
    _require_str("source", source)
    name = FORMAT_ALIASES.get(source, source.strip().lower())
    if name in FORMATS:
        return name
    where = f" (the session's {from_conf})" if from_conf else ""
    if name in SPARK_ONLY_FORMATS:
        _refuse_format(source, where=where)
    raise SparkWriterError(
        "DATA_SOURCE_NOT_FOUND",
        f"Failed to find the data source: {source}{where}. Make sure the provider name is correct; "
        f"{_WHAT_MPCOMMIT_WRITES}.",
    )


def _refuse_format(source: str, *, where: str = "") -> NoReturn:
    raise UsageError(
        f"format {source!r}{where}: {_WHAT_MPCOMMIT_WRITES}. Choose one of those (.format('parquet')), "
        f"or keep df.write for {source}."
    )


def _pop(options: dict[str, str], name: str, *, keep: bool = False) -> str | None:
    """The value of option ``name`` (any case), taken out of ``options`` unless ``keep``."""
    for given in list(options):
        if given.lower() == name.lower():
            return options[given] if keep else options.pop(given)
    return None


def _take_path(path: Any, options: dict[str, str]) -> str:
    """The destination: the argument, or Spark's ``path`` option, never both (as Spark 3.1+)."""
    from_option = _pop(options, "path")
    if path is None:
        if from_option is None:
            raise UsageError("'path' is not specified: give save() the destination, e.g. save('s3://bucket/table')")
        return from_option
    _require_str("path", path)
    if from_option is not None:
        raise UsageError(
            f"there is a 'path' option ({from_option!r}) and save() is called with a path ({path!r}); give one"
        )
    return path


def _check_codec(fmt: str, options: dict[str, str]) -> None:
    """A codec name neither Spark nor mpcommit knows gets Spark's CODEC_NOT_AVAILABLE -- the short names
    :func:`~mpcommit.spark.writer.write` also takes (``gz``, ``bz2``, ``zstandard``) included, since Spark refuses
    them; one of Spark's that mpcommit does not write is left to the format, which refuses it by name."""
    family = "parquet" if fmt == "parquet" else "text"
    for name in ("compression", "codec") if family == "text" else ("compression", "parquet.compression"):
        value = _pop(options, name, keep=True)
        if value is None:
            continue
        folded = value.strip().lower()
        if folded in SPARK_CODECS[family] or folded in MPCOMMIT_CODECS[family] or "." in folded:
            continue  # (a codec class name is Spark's to resolve)
        raise SparkWriterError(
            "CODEC_NOT_AVAILABLE.WITH_AVAILABLE_CODECS_SUGGESTION",
            f"The codec {value} is not available. Available codecs are {', '.join(MPCOMMIT_CODECS[family])} "
            f"(what mpcommit writes as {fmt}).",
        )


def _parquet_codec(options: dict[str, str], conf: Callable[[str, str], str]) -> None:
    """Parquet's codec by Spark's precedence: ``compression``, then ``parquet.compression``, then the session's
    ``spark.sql.parquet.compression.codec``."""
    legacy = _pop(options, "parquet.compression")
    if _pop(options, "compression", keep=True) is None:
        options["compression"] = legacy if legacy is not None else conf("spark.sql.parquet.compression.codec",
                                                                          "snappy")


def _partition_overwrite(value: str, *, given: bool) -> str:
    folded = value.strip().lower()
    if folded not in ("static", "dynamic"):
        where = "option partitionOverwriteMode" if given else "the session's spark.sql.sources.partitionOverwriteMode"
        raise UsageError(f"{where} must be STATIC or DYNAMIC, got {value!r}")
    return folded
