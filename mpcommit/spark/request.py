"""One write as every door asks for it: :class:`WriteRequest`, and the translation of Spark's string options into
one (:func:`translate`), shared by the fluent writer (``writer(df)``) and the data source
(``df.write.format("mpcommit")``, SQL, streams), so that both read an option the same way.

Spark's rules, kept here once: option names ignore case and a later option replaces an earlier one; ``path`` is the
argument or the option, never both; old format names resolve as in Spark; a codec neither Spark nor mpcommit knows
is Spark's ``CODEC_NOT_AVAILABLE``; Parquet's codec is ``compression``, else ``parquet.compression``, else the
session's; ``maxRecordsPerFile`` and ``partitionOverwriteMode`` are the option's, else the session's (the latter
only for a partitioned overwrite, the only write it changes); all columns as partition columns is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import SparkWriterError, UsageError
from ..formats import FORMATS
from ..formats.base import TEXT_COMPRESSION
from ..formats.parquet import PARQUET_COMPRESSION, TimestampType
from ..formats.partitioning import DEFAULT_MAX_OPEN_WRITERS
from ..modes import PartitionOverwrite, WriteMode
from ..options import OrderSettings, S3Options, WriterSettings
from ..protocol import DEFAULT_COMMIT_THREADS, Txn
from .table_schema import SchemaMismatch

if TYPE_CHECKING:
    from ..catalog.base import Catalog
    from ..compaction.planner import MergePolicy

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
WHAT_MPCOMMIT_WRITES = "mpcommit writes parquet, csv, json (JSON Lines) and text"


@dataclass(frozen=True)
class Settings:
    """mpcommit's own settings of one write, which are not Spark's: the keyword arguments of ``write`` and
    ``writer``, and the data source's options of the same names."""

    s3: S3Options | None = None
    merge: "MergePolicy | None" = None
    table: str | None = None
    catalog: "Catalog | str | None" = None
    max_open_writers: int = DEFAULT_MAX_OPEN_WRITERS
    commit_threads: int = DEFAULT_COMMIT_THREADS
    writer: WriterSettings | None = None
    overwrite_bucket_root: bool = False
    schema_mismatch: SchemaMismatch = SchemaMismatch.WARN
    #: The application version this write commits (``Txn(app_id, version)``; options txnAppId and txnVersion):
    #: a write of a version the table committed already is a no-op that says so (CommitReport.duplicate_of).
    txn: Txn | None = None
    #: How the job keeps its place in the table's commit order (heartbeat, lease, waits): OrderSettings.
    order: OrderSettings | None = None
    #: Set by :func:`~mpcommit.spark.table_target.resolve`, not by a caller: the table's layout was read from its
    #: catalog for this write and the write's path, format and partition columns were taken from or checked
    #: against it, so the write's start does not ask the catalog again.
    layout_checked: bool = False

    def __post_init__(self) -> None:
        if self.order is not None and not isinstance(self.order, OrderSettings):
            raise UsageError(f"order must be None or an OrderSettings (from mpcommit.options import OrderSettings), "
                             f"got {self.order!r}")
        if self.txn is not None and not isinstance(self.txn, Txn):
            raise UsageError(f"txn must be None or a Txn (from mpcommit import Txn; Txn('daily-load', 20261128)), "
                             f"got {self.txn!r}")
        if self.merge is not None:
            from ..compaction.planner import MergePolicy  # only a write that merges needs compaction

            if not isinstance(self.merge, MergePolicy):
                raise UsageError(f"merge must be None or a MergePolicy (from mpcommit.compaction import MergePolicy), "
                                 f"got {self.merge!r}")
        if self.s3 is not None and not isinstance(self.s3, S3Options):
            raise UsageError(f"s3 must be an S3Options (from mpcommit import S3Options), got {self.s3!r}")
        for name in ("max_open_writers", "commit_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be an integer of at least 1, got {value!r}")
        if self.catalog is not None and self.table is None:
            raise UsageError("catalog=... needs table='db.name' to register into")
        object.__setattr__(self, "schema_mismatch", SchemaMismatch.parse(self.schema_mismatch))


@dataclass(frozen=True)
class WriteRequest:
    """What one write asks for, checked as values; checked against the data by :func:`~.plan.plan_write`.

    ``options`` are the format's (PySpark's names: ``compression``, ``header``, ``sep`` ...) with
    ``maxRecordsPerFile``; ``timestamp_type``: Parquet's for zoned timestamps, None for the session's
    ``spark.sql.parquet.outputTimestampType`` (only read when the data holds such timestamps).
    """

    uri: str
    format: str = "parquet"
    mode: WriteMode = WriteMode.ERROR
    partition_by: tuple[str, ...] | None = None
    partition_overwrite: PartitionOverwrite = PartitionOverwrite.STATIC
    options: Mapping[str, Any] = field(default_factory=dict)
    timestamp_type: TimestampType | None = None
    settings: Settings = field(default_factory=Settings)


# ---------------------------------------------------------------- Spark's string options -> a request
def translate(options: Mapping[str, tuple[str, str]], *, path: str | None, mode: str, partition_by: list[Any],
              source: str | None, session: Callable[[str], str], settings: Settings) -> WriteRequest:
    """A request from a ``df.write``-style chain: ``options`` folded name -> (name as given, value as str);
    ``path`` the action's argument; ``mode`` one of WriteMode's values; ``source`` the format asked for (None:
    the session's default); ``session(name)`` a :data:`.session.SETTINGS` value."""
    given = {name: value for name, value in options.values()}
    uri = take_path(path, given)
    fmt = source or resolve_format(session("source_default"), from_conf="spark.sql.sources.default")
    check_codec(fmt, given)
    if fmt == "parquet":
        legacy = pop(given, "parquet.compression")
        if pop(given, "compression", keep=True) is None:
            given["compression"] = legacy if legacy is not None else session("parquet_codec")
    if not pop(given, "maxRecordsPerFile", keep=True):
        records = session("max_records_per_file")
        if records.strip() != "0":
            given["maxRecordsPerFile"] = records
    stamp = pop(given, "outputTimestampType")
    if fmt != "parquet" and stamp is not None:
        raise UsageError(f"option outputTimestampType is Parquet's; the format is {fmt}")
    timestamp_type = TimestampType.parse(stamp) if stamp is not None else None
    txn = Txn.parse(pop(given, "txnAppId"), pop(given, "txnVersion"))
    if txn is not None:
        if settings.txn is not None and settings.txn != txn:
            raise UsageError(f"options txnAppId/txnVersion ({txn.app_id!r}, {txn.version}) differ from the txn "
                             f"argument ({settings.txn.app_id!r}, {settings.txn.version}): give one. Nothing was "
                             "written.")
        settings = dataclasses.replace(settings, txn=txn)
    overwrite = pop(given, "partitionOverwriteMode")
    if mode == "overwrite" and partition_by:
        # Spark replaces only the written partitions when the mode is dynamic, the write is an overwrite
        # and it is partitioned; in every other case the setting does not apply, and is not read.
        chosen = overwrite if overwrite is not None else session("partition_overwrite")
        partition_overwrite = parse_partition_overwrite(chosen, given=overwrite is not None)
    else:
        if overwrite is not None:
            parse_partition_overwrite(overwrite, given=True)  # a bad value is refused wherever it is given
        partition_overwrite = "static"
    return WriteRequest(uri=uri, format=fmt, mode=WriteMode.parse(mode),
                        partition_by=tuple(partition_by) if partition_by else None,
                        partition_overwrite=PartitionOverwrite.parse(partition_overwrite), options=given,
                        timestamp_type=timestamp_type, settings=settings)


def check_all_partition_columns(columns: list[str], partition_by: list[Any]) -> None:
    """Spark's ALL_PARTITION_COLUMNS_NOT_ALLOWED: the files would hold no column."""
    if partition_by and all(isinstance(c, str) for c in partition_by):
        folded = {c.lower() for c in columns}
        if folded and folded <= {c.lower() for c in partition_by}:
            raise SparkWriterError("ALL_PARTITION_COLUMNS_NOT_ALLOWED", "Cannot use all columns for partition "
                                   "columns: the files would hold no data. Leave at least one column out.")


def to_str(value: Any) -> str:
    """PySpark's ``to_str``: booleans as Spark spells them, everything else str()."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def require_str(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise SparkWriterError("NOT_STR", f"Argument `{name}` should be a str, got {type(value).__name__}.")


def resolve_format(source: Any, *, from_conf: str | None = None) -> str:
    """Spark's name for a format -> mpcommit's format; Spark's refusal for an unknown one."""
    require_str("source", source)
    name = FORMAT_ALIASES.get(source, source.strip().lower())
    if name in FORMATS:
        return name
    where = f" (the session's {from_conf})" if from_conf else ""
    if name in SPARK_ONLY_FORMATS:
        refuse_format(source, where=where)
    raise SparkWriterError(
        "DATA_SOURCE_NOT_FOUND",
        f"Failed to find the data source: {source}{where}. Make sure the provider name is correct; "
        f"{WHAT_MPCOMMIT_WRITES}.",
    )


def refuse_format(source: str, *, where: str = "") -> NoReturn:
    raise UsageError(
        f"format {source!r}{where}: {WHAT_MPCOMMIT_WRITES}. Choose one of those (.format('parquet')), "
        f"or keep df.write for {source}."
    )


def pop(options: dict[str, str], name: str, *, keep: bool = False) -> str | None:
    """The value of option ``name`` (any case), taken out of ``options`` unless ``keep``."""
    for given in list(options):
        if given.lower() == name.lower():
            return options[given] if keep else options.pop(given)
    return None


def take_path(path: Any, options: dict[str, str]) -> str:
    """The destination: the argument, or Spark's ``path`` option, never both (as Spark 3.1+)."""
    from_option = pop(options, "path")
    if path is None:
        if from_option is None:
            raise UsageError("'path' is not specified: give save() the destination, e.g. save('s3://bucket/table')")
        return from_option
    require_str("path", path)
    if from_option is not None:
        raise UsageError(
            f"there is a 'path' option ({from_option!r}) and save() is called with a path ({path!r}); give one"
        )
    return path


def check_codec(fmt: str, options: dict[str, str]) -> None:
    """A codec name neither Spark nor mpcommit knows gets Spark's CODEC_NOT_AVAILABLE -- the short names
    :func:`~mpcommit.spark.writer.write` also takes (``gz``, ``bz2``, ``zstandard``) included, since Spark refuses
    them; one of Spark's that mpcommit does not write is left to the format, which refuses it by name."""
    family = "parquet" if fmt == "parquet" else "text"
    for name in ("compression", "codec") if family == "text" else ("compression", "parquet.compression"):
        value = pop(options, name, keep=True)
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


def parse_partition_overwrite(value: str, *, given: bool) -> str:
    folded = value.strip().lower()
    if folded not in ("static", "dynamic"):
        where = "option partitionOverwriteMode" if given else "the session's spark.sql.sources.partitionOverwriteMode"
        raise UsageError(f"{where} must be STATIC or DYNAMIC, got {value!r}")
    return folded
