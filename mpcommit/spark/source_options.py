"""The data source's options -> one :class:`~.request.WriteRequest`, by the fluent writer's rules (:func:`.request.
translate`), with mpcommit's own settings under the names of ``writer(df, ...)``'s keyword arguments.

Spark hands a Python data source its options as strings, names lower-cased. mpcommit's own names are matched
ignoring case and underscores (``maxOpenWriters`` = ``max_open_writers``); everything else is the file format's
(PySpark's names: ``compression``, ``header``, ``sep`` ...) and an option no format knows is refused by name
before any task runs.

====================  =====================================================================================
option                what it is (``writer(df)`` / ``write()`` beside it)
====================  =====================================================================================
path                  the destination, ``s3://`` / ``s3a://`` / ``s3n://`` (``save(path)``, ``start(path)``)
format                parquet (default), csv, json, text (``.format`` / ``.parquet(...)``)
partitionBy           partition columns, comma-separated (``.partitionBy``: Spark refuses it for Python sources)
saveMode              ``errorifexists`` or ``ignore`` with Spark's mode append (Spark refuses those modes for
                      Python sources); ``append`` and ``overwrite`` are Spark's own ``.mode``
partitionOverwrite-   static (default) or dynamic, as Spark's option
Mode
maxRecordsPerFile,    as Spark's options (outputTimestampType: Parquet's ``spark.sql.parquet.outputTimestampType``,
outputTimestampType   which a data source cannot read from the session)
table, catalog        write into ``table`` ("db.name") and register the committed partitions; catalog ``glue`` (the
                      session catalog is out of a data source's reach); ``glue.endpointUrl``, ``glue.catalogId``.
                      path, format and partitionBy are the table's when not given (:mod:`.table_target`)
merge                 true: merge small files before they become visible (``MergePolicy()``);
                      ``merge.smallFileAvg`` / ``merge.targetSize`` (sizes: ``16MB``, ``256MiB``) imply it
maxOpenWriters,       as ``writer(df, max_open_writers=, commit_threads=, overwrite_bucket_root=,
commitThreads, ...    schema_mismatch=)``
s3.*                  every ``S3Options`` field but ``retry``, its name in camelCase: ``s3.endpointUrl``,
                      ``s3.region``, ``s3.profile``, ``s3.accessKeyId``, ``s3.secretAccessKey``, ``s3.sessionToken``,
                      ``s3.addressingStyle``, ``s3.sse``, ``s3.sseKmsKeyId``, ``s3.sseCustomerKey``,
                      ``s3.expectedBucketOwner``, ``s3.conditionalWrites``, ``s3.maxPoolConnections``,
                      ``s3.connectTimeout``, ``s3.readTimeout``, ... (:data:`NAMES` holds them all)
writer.*              ``WriterSettings``' fields: ``writer.initialPartSize`` (a size), ``writer.partsPerSizeStep``,
                      ``writer.maxPartsInFlight``, ``writer.uploadThreads``, ``writer.closingBytes``
order.lease,          the commit order's (``OrderSettings.for_lease``, the CLI's ``--lease`` / ``--max-wait``): a
order.maxWait         silent earlier job is taken for dead after ``order.lease`` (``60s``); a live one is waited
                      for at most ``order.maxWait`` (default ``30m``; ``forever`` waits while it lives), then
                      the write fails naming it, nothing of it visible
checkpointLocation    a stream's, read by Spark (and by mpcommit's sink to record what the stream writes)
====================  =====================================================================================
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..formats import make_format
from ..formats.base import UnknownOptionError, did_you_mean
from ..options import OrderSettings, S3Options, WriterSettings
from ..units import parse_duration, parse_size, parse_wait
from .request import Settings, WriteRequest, to_str, translate
from .session import Recorder
from .table_schema import SchemaMismatch

#: Spark's own options, which reach a data source beside the user's (a stream's checkpoint).
SPARK_OPTIONS = {"checkpointlocation"}


def fold(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


_S3_FIELDS = {fold(f.name): f for f in dataclasses.fields(S3Options) if f.name != "retry"}
_WRITER_FIELDS = {fold(f.name): f for f in dataclasses.fields(WriterSettings)}
_WRITER_SIZES = {"initialpartsize", "closingbytes"}


@dataclass(frozen=True)
class GlueCatalogSpec:
    """The Glue Data Catalog as a data source's options name it: picklable, its client made where it is used."""

    endpoint_url: str | None = None
    catalog_id: str | None = None

    def build(self, s3: S3Options | None) -> Any:
        """The catalog, made once per process for these options: a write's options and its start both ask it
        (a Glue client costs its credentials' and endpoint's resolution)."""
        from ..catalog.glue import GlueCatalog

        key = (os.getpid(), self, s3)
        with _BUILT_LOCK:
            built = _BUILT.get(key)
            if built is None:
                built = _BUILT[key] = GlueCatalog(s3, endpoint_url=self.endpoint_url, catalog_id=self.catalog_id)
        return built


_BUILT: dict[tuple[int, GlueCatalogSpec, S3Options | None], Any] = {}
_BUILT_LOCK = threading.Lock()


@dataclass(frozen=True)
class SourceOptions:
    """A data source's options, read: the request, and what a stream's sink needs besides."""

    request: WriteRequest
    checkpoint: str | None


def parse(options: Mapping[str, str], *, overwrite: bool, session: Recorder, streaming: bool = False,
          columns: list[str] | None = None) -> SourceOptions:
    """Read the options Spark handed the data source (``overwrite``: Spark's mode overwrite, or a complete-mode
    stream; ``session``: the settings it cannot see, as Spark's defaults)."""
    own: dict[str, tuple[str, str]] = {}
    rest: dict[str, tuple[str, str]] = {}
    for name, value in options.items():
        if not isinstance(name, str):
            raise UsageError(f"option names must be strings, got {name!r}")
        folded = fold(name)
        if folded in _OWN or folded.startswith(("s3.", "writer.", "merge.", "glue.", "order.")):
            if folded in own:
                raise UsageError(f"option {name!r} is given twice ({own[folded][0]!r} means the same)")
            own[folded] = (name, to_str(value))
        else:
            rest[name.lower()] = (name, to_str(value))
    path = _take(own, "path")
    if path is None and "table" not in own:
        raise UsageError(_NO_PATH_STREAM if streaming else (_NO_OPTIONS if not options else _NO_PATH))
    checkpoint = _take(own, "checkpointlocation")
    fmt = _take(own, "format")
    partition_by = _columns(_take(own, "partitionby"))
    mode = "overwrite" if overwrite else "append"
    save_mode = _take(own, "savemode")
    if save_mode is not None:
        mode = _save_mode(save_mode, overwrite=overwrite, streaming=streaming)
    settings = _settings(own)
    leftover = sorted(given for given, _ in own.values())
    if leftover:
        raise UsageError(f"unknown mpcommit option(s) {', '.join(map(repr, leftover))}: see the options of "
                         "mpcommit.spark.source_options (or README, 'The data source')"
                         f"{did_you_mean(leftover, NAMES) or '.'} Nothing was written.")
    from .request import check_all_partition_columns, resolve_format
    from .table_target import resolve as resolve_target

    source = resolve_format(fmt) if fmt is not None else None
    # option table (with catalog glue): the path, format and partition columns the options leave out are the table's.
    target = resolve_target(settings, path=path, fmt=source, partition_by=partition_by, default_catalog="glue")
    if target is not None:
        path, source, partition_by, settings = target.path, target.format, target.partition_by, target.settings
    if columns is not None:
        check_all_partition_columns(columns, list(partition_by))
    request = translate(rest, path=path, mode=mode, partition_by=list(partition_by), source=source, session=session,
                        settings=settings)
    _check_format_options(request)
    if streaming and request.settings.txn is not None:
        raise UsageError("options txnAppId/txnVersion are for batch writes (foreachBatch, a scheduled re-run): the "
                         "streaming sink commits each micro-batch once by itself, as version batchId of its query. "
                         "Leave them out. Nothing was written.")
    return SourceOptions(request, checkpoint)


def _check_format_options(request: WriteRequest) -> None:
    """The format's refusal of an option it does not know, given here, where every option of the data source is
    known: a misspelt option may be one of them (``partitionby_cols`` -> ``partitionBy``), which the format alone
    cannot name. Other refusals of the format's options come from the plan, as for every door."""
    options = {name: value for name, value in request.options.items() if fold(name) != "maxrecordsperfile"}
    try:
        make_format(request.format, options)
    except UnknownOptionError as exc:
        raise UsageError(
            f"{request.format} does not know option(s) {', '.join(map(repr, exc.unknown))}; it accepts: "
            f"{', '.join(exc.accepts)}, besides the data source's own (mpcommit.spark.source_options)"
            f"{did_you_mean(exc.unknown, [*exc.accepts, *exc.aliases, *NAMES]) or '.'} Nothing was written.") from None


_OWN = {"path", "format", "partitionby", "savemode", "table", "catalog", "merge", "maxopenwriters", "committhreads",
        "overwritebucketroot", "schemamismatch", "checkpointlocation"}


def _camel(field_name: str) -> str:
    head, *rest = field_name.split("_")
    return head + "".join(word.capitalize() for word in rest)


#: Every option of the data source as the table above spells it, besides the format's: what a misspelt name is
#: compared with.
NAMES = (
    "path", "format", "partitionBy", "saveMode", "table", "catalog", "merge", "maxOpenWriters", "commitThreads",
    "overwriteBucketRoot", "schemaMismatch", "checkpointLocation", "partitionOverwriteMode", "maxRecordsPerFile",
    "outputTimestampType", "merge.smallFileAvg", "merge.targetSize", "glue.endpointUrl", "glue.catalogId",
    "order.lease", "order.maxWait",
    *(f"s3.{_camel(f.name)}" for f in _S3_FIELDS.values()), *(f"writer.{_camel(f.name)}" for f in _WRITER_FIELDS.values()),
)

_NO_PATH = ("'path' is not specified: give the destination, df.write.format('mpcommit')...save('s3://bucket/table'), "
            "or the 'path' option. Nothing was written.")
_NO_PATH_STREAM = ("'path' is not specified: give the table, df.writeStream.format('mpcommit')...start("
                   "'s3://bucket/table'). Nothing was written.")
#: Said when a write arrives with no options at all: Spark 4 does not hand a catalog table's OPTIONS to a Python
#: data source's writer (an INSERT into a table made by CREATE TABLE ... USING mpcommit).
_NO_OPTIONS = ("'path' is not specified, and the write arrived with no options at all: give the destination, "
               "df.write.format('mpcommit')...save('s3://bucket/table'). An INSERT into a table made by CREATE TABLE "
               "... USING mpcommit arrives so too: Spark does not hand such a table's OPTIONS to a Python data source "
               "when it writes. Make it a view, whose options Spark does hand over -- CREATE TEMPORARY VIEW t (id "
               "BIGINT, dt STRING) USING mpcommit OPTIONS (path 's3://bucket/table', format 'parquet', partitionBy "
               "'dt') -- or give them on the statement: INSERT INTO t WITH ('path' = 's3://bucket/table', ...) "
               "SELECT ... For a catalog table, make it one Spark reads natively (CREATE TABLE t (...) USING parquet "
               "PARTITIONED BY (dt) LOCATION 's3a://bucket/table') and write into it with option table 'db.t' and "
               "catalog 'glue', or mpcommit.spark.writer(df, table='db.t'). Nothing was written.")


def _take(own: dict[str, tuple[str, str]], name: str) -> str | None:
    got = own.pop(name, None)
    return None if got is None else got[1]


def _columns(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    columns = tuple(c.strip() for c in value.split(","))
    if any(not c for c in columns):
        raise UsageError(f"option partitionBy {value!r}: column names separated by commas, e.g. 'dt' or 'dt,hour'")
    return columns


def _save_mode(value: str, *, overwrite: bool, streaming: bool) -> str:
    folded = value.strip().lower()
    if streaming:
        raise UsageError("option saveMode is for batch writes: a stream appends (outputMode append) or replaces the "
                         "table each micro-batch (outputMode complete)")
    if folded in ("error", "errorifexists", "default"):
        chosen = "error"
    elif folded in ("ignore", "append", "overwrite"):
        chosen = folded
    else:
        raise UsageError(f"option saveMode must be errorifexists or ignore (with .mode('append')), got {value!r}")
    if overwrite and chosen != "overwrite":
        raise UsageError(f"option saveMode {value!r} with .mode('overwrite'): give one; for {chosen}, write "
                         f".mode('append').option('saveMode', {value!r})")
    if not overwrite and chosen == "overwrite":
        raise UsageError("option saveMode 'overwrite': write .mode('overwrite') instead")
    return chosen


def _flag(name: str, value: str) -> bool:
    folded = value.strip().lower()
    if folded in ("true", "1", "yes", "on"):
        return True
    if folded in ("false", "0", "no", "off"):
        return False
    raise UsageError(f"option {name!r} must be true or false, got {value!r}")


def _integer(name: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise UsageError(f"option {name!r} must be an integer, got {value!r}") from None


def _duration(name: str, value: str, parse: Any) -> float:
    try:
        return parse(value)
    except UsageError as exc:
        raise UsageError(f"option {name!r}: {exc}") from None


def _typed(name: str, value: str, kind: Any) -> Any:
    text = str(kind)
    if "bool" in text:
        return _flag(name, value)
    if text.startswith("int"):
        return _integer(name, value)
    if text.startswith("float"):
        try:
            return float(value.strip())
        except ValueError:
            raise UsageError(f"option {name!r} must be a number, got {value!r}") from None
    return value


def _settings(own: dict[str, tuple[str, str]]) -> Settings:
    s3: dict[str, Any] = {}
    writer: dict[str, Any] = {}
    merge: dict[str, Any] = {}
    glue: dict[str, Any] = {}
    order: dict[str, float] = {}
    for folded in sorted(own):
        given, value = own[folded]
        group, _, field_name = folded.partition(".")
        if group == "s3" and field_name in _S3_FIELDS:
            f = _S3_FIELDS[field_name]
            s3[f.name] = _typed(given, value, f.type)
        elif group == "writer" and field_name in _WRITER_FIELDS:
            f = _WRITER_FIELDS[field_name]
            writer[f.name] = parse_size(value) if field_name in _WRITER_SIZES else _typed(given, value, f.type)
        elif group == "merge" and field_name in ("smallfileavg", "targetsize"):
            merge["small_file_avg" if field_name == "smallfileavg" else "target_size"] = value
        elif group == "glue" and field_name in ("endpointurl", "catalogid"):
            glue["endpoint_url" if field_name == "endpointurl" else "catalog_id"] = value
        elif group == "order" and field_name == "lease":
            order["lease_seconds"] = _duration(given, value, parse_duration)
        elif group == "order" and field_name == "maxwait":
            order["max_wait_seconds"] = _duration(given, value, parse_wait)
        else:
            continue
        del own[folded]
    policy = None
    merge_flag = _take(own, "merge")
    if (merge_flag is not None and _flag("merge", merge_flag)) or merge:
        if merge_flag is not None and not _flag("merge", merge_flag):
            raise UsageError("option merge is false, and merge.smallFileAvg / merge.targetSize ask for a merge")
        from ..compaction.planner import MergePolicy

        policy = MergePolicy.parse(**merge)
    table = _take(own, "table")
    catalog: Any = _take(own, "catalog")
    if table is not None:
        if catalog is None or catalog.strip().lower() == "spark":
            raise UsageError(
                f"option table {table!r} needs option catalog 'glue': the Spark session catalog is out of a data "
                "source's reach (Spark runs it in a Python process of its own). Register in Glue, or write with "
                f"mpcommit.spark.writer(df, table={table!r}) to use the session's catalog. Nothing was written.")
        if catalog.strip().lower() != "glue":
            raise UsageError(f"option catalog {catalog!r}: the data source registers in 'glue' only")
        catalog = GlueCatalogSpec(**glue)
    elif catalog is not None or glue:
        raise UsageError("option catalog (or glue.*) needs option table 'db.name' to register into")
    kwargs: dict[str, Any] = {}
    for name, field_name, parse_value in (("maxopenwriters", "max_open_writers", _integer),
                                          ("committhreads", "commit_threads", _integer),
                                          ("overwritebucketroot", "overwrite_bucket_root", _flag)):
        got = own.pop(name, None)
        if got is not None:
            kwargs[field_name] = parse_value(got[0], got[1])
    mismatch = _take(own, "schemamismatch")
    return Settings(s3=S3Options(**s3) if s3 else None, merge=policy, table=table, catalog=catalog,
                    order=OrderSettings.for_lease(**order) if order else None,
                    writer=WriterSettings(**writer) if writer else None,
                    schema_mismatch=SchemaMismatch.parse(mismatch) if mismatch is not None else SchemaMismatch.WARN,
                    **kwargs)
