"""A Spark session catalog (with Hive support: the Hive metastore, or Glue as Spark's metastore) through Spark SQL.

New partitions are added with ``ALTER TABLE ... ADD IF NOT EXISTS PARTITION (...) LOCATION '...'``. Spark SQL
has no statement for a partition's parameters (Hive's ``ALTER TABLE ... PARTITION ... SET TBLPROPERTIES`` /
``UPDATE STATISTICS`` do not parse), so statistics go through the session catalog's own API over py4j
(``ExternalCatalog.alterPartitions``), and partitions are dropped with ``dropPartitions(retainData=true)``
rather than ``ALTER TABLE ... DROP PARTITION``, which deletes a managed table's files.

Statistics as the metastores keep them:

* partitions carry Hive's ``numFiles``/``totalSize``/``numRows`` and Spark's ``spark.sql.statistics.totalSize``/
  ``numRows`` (which Spark prefers). Hive's metastore recomputes ``numFiles`` and ``totalSize`` itself whenever
  a partition is added or altered, by listing its location -- that listing is the metastore's, not mpcommit's;
* a non-partitioned table gets Hive's statistics with ``DO_NOT_UPDATE_STATS`` (Hive's own switch, consumed by
  the metastore), after Spark's stale ``spark.sql.statistics.*`` are cleared with ``alterTableStats(None)``.

The JVM must resolve the table's location: open-source Spark needs ``s3a://`` and hadoop-aws on the classpath
(EMR and Databricks resolve ``s3://``). This module imports no pyspark: it is handed a session.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import UsageError
from .base import (
    CatalogError,
    CatalogRequestError,
    CatalogResult,
    Registration,
    RegistrationMode,
    TableLayout,
    TableName,
    TableNotFoundError,
    UnsupportedTableError,
)
from .plan import (
    DDL_TIME,
    LAST_JOB,
    NUM_FILES,
    NUM_ROWS,
    STATS_KEYS,
    TOTAL_SIZE,
    Action,
    ExistingPartition,
    PartitionChange,
    check_partition_columns,
    format_of,
    group_by_action,
    plan_partitions,
    table_parameters,
    table_root,
)

#: Partitions per ALTER TABLE ... ADD statement and per alterPartitions call.
BATCH = 100
#: Hive's table parameter that tells the metastore not to recompute basic statistics by listing (consumed).
DO_NOT_UPDATE_STATS = "DO_NOT_UPDATE_STATS"
_UNSUPPORTED_PROVIDERS = {"delta", "iceberg", "hudi"}
_SIMPLE_STATS_RE = re.compile(r"^(\d+) bytes(?:, (\d+) rows)?")


# ---------------------------------------------------------------- SQL, as pure functions
def quote_identifier(name: str) -> str:
    """A Spark SQL identifier in backquotes (a backquote inside is doubled)."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """A Spark SQL string literal. Spark unescapes backslashes in literals (unless
    ``spark.sql.parser.escapedStringLiterals``), so both ``\\`` and ``'`` are escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def table_sql(table: TableName) -> str:
    return f"{quote_identifier(table.database)}.{quote_identifier(table.name)}"


def partition_spec_sql(columns: Sequence[str], values: Sequence[str]) -> str:
    """``PARTITION (`dt`='2024-01-01', `n`='1')``: values as strings, which Spark casts to the column types."""
    return "PARTITION (" + ", ".join(f"{quote_identifier(c)}={sql_string(v)}" for c, v in zip(columns, values)) + ")"


def add_partitions_sql(table: TableName, columns: Sequence[str], partitions: Sequence[tuple[Sequence[str], str]]) -> str:
    """One ``ALTER TABLE ... ADD IF NOT EXISTS PARTITION (...) LOCATION '...' PARTITION ...`` for all of
    ``partitions`` ((values, location) pairs)."""
    if not partitions:
        raise ValueError("no partitions to add")
    specs = " ".join(f"{partition_spec_sql(columns, values)} LOCATION {sql_string(location)}"
                     for values, location in partitions)
    return f"ALTER TABLE {table_sql(table)} ADD IF NOT EXISTS {specs}"


def set_properties_sql(table: TableName, properties: Mapping[str, str]) -> str:
    pairs = ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in sorted(properties.items()))
    return f"ALTER TABLE {table_sql(table)} SET TBLPROPERTIES ({pairs})"


def unset_properties_sql(table: TableName, keys: Sequence[str]) -> str:
    return f"ALTER TABLE {table_sql(table)} UNSET TBLPROPERTIES IF EXISTS ({', '.join(sql_string(k) for k in sorted(keys))})"


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect session (``SparkSession.builder.remote(...)``): a client with no JVM of its own.
    Told by its class's module, so that no pyspark (nor its Connect client's gRPC) is imported here."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


# ---------------------------------------------------------------- Scala's collections, over py4j
def _converters(jvm: Any) -> Any:
    """Scala 2.13's ``scala.jdk.javaapi.CollectionConverters`` (Spark 4), or None on Scala 2.12 (Spark 3.5), which
    has only ``scala.collection.JavaConverters``. (py4j names a class the JVM does not have a ``JavaPackage``.)"""
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    return converters if type(converters).__name__ == "JavaClass" else None


def scala_dict(jvm: Any, scala_map: Any) -> dict[str, str]:
    """A Scala ``Map`` of the JVM as a dict of strings."""
    converters = _converters(jvm)
    java = converters.asJava(scala_map) if converters is not None else \
        jvm.scala.collection.JavaConverters.mapAsJavaMap(scala_map)
    return {str(k): str(v) for k, v in dict(java).items()}


def scala_list(jvm: Any, scala_seq: Any) -> list[Any]:
    """A Scala ``Seq`` of the JVM as a list."""
    converters = _converters(jvm)
    return list(converters.asJava(scala_seq) if converters is not None else
                jvm.scala.collection.JavaConverters.seqAsJavaList(scala_seq))


# ---------------------------------------------------------------- the catalog
class SparkSqlCatalog:
    """Registers commits in ``spark``'s session catalog (``spark_catalog``).

    Without Hive support (``spark.sql.catalogImplementation=in-memory``) the catalog lives only as long as
    the session; registering works the same.
    """

    name = "spark"

    def __init__(self, spark: Any, *, clock: Callable[[], float] = time.time):
        if is_connect_session(spark):
            # Refused here, before a write that names this catalog runs any task: registering needs the session
            # catalog's JVM objects (statistics through ExternalCatalog.alterPartitions, partition drops that
            # keep the data), and a Connect client holds no JVM -- the data would commit, the registration fail.
            raise UsageError(
                "catalog 'spark' registers through the session catalog's JVM API (py4j: ExternalCatalog for "
                "partition statistics and drops), which a Spark Connect session (sc://...) does not expose. Over "
                "Connect, register in Glue (catalog='glue'), or write without table= and register afterwards from "
                "a classic session: `mpcommit catalog sync S3URI --table db.name --catalog spark`."
            )
        self.spark = spark
        self._clock = clock

    # ------------------------------------------------------------ py4j access
    @property
    def _jvm(self) -> Any:
        return self.spark._jvm

    def _external(self) -> Any:
        return self.spark._jsparkSession.sessionState().catalog().externalCatalog()

    def _seq(self, items: Sequence[Any]) -> Any:
        return self._jvm.org.apache.spark.api.python.PythonUtils.toSeq(list(items))

    def _map(self, values: Mapping[str, str]) -> Any:
        return self._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(dict(values))

    def _dict(self, scala_map: Any) -> dict[str, str]:
        return scala_dict(self._jvm, scala_map)

    def _list(self, scala_seq: Any) -> list[Any]:
        return scala_list(self._jvm, scala_seq)

    def _location(self, uri: Any) -> str:
        # CatalogUtils.URIToString gives the path as written (``dt=a%3Ab``), not URI-encoded (``%253A``).
        return str(self._jvm.org.apache.spark.sql.catalyst.catalog.CatalogUtils.URIToString(uri))

    # ------------------------------------------------------------ a write's target
    def layout(self, table: "TableName | str") -> TableLayout:
        """Where ``table`` keeps its files and how (see :class:`~mpcommit.catalog.base.TableLayout`): its location,
        its format (Spark's provider, or for a Hive table its SerDe) and its partition columns."""
        table = TableName.parse(table)
        info = self._get_table(self._external(), table)
        location_uri = info.storage().locationUri()
        location = self._location(location_uri.get()) if location_uri.isDefined() else None
        provider = str(info.provider().get()) if info.provider().isDefined() else ""
        serde = info.storage().serde()
        library = str(serde.get()) if serde.isDefined() else None
        return TableLayout(table, location, format_of(provider, library), provider or library or "",
                           tuple(str(c) for c in self._list(info.partitionColumnNames())))

    # ------------------------------------------------------------ registration
    def register(self, table: TableName, registration: Registration) -> CatalogResult:
        """Register what ``registration`` made visible; see :class:`~mpcommit.catalog.base.Catalog`."""
        table = TableName.parse(table)
        ext = self._external()
        info = self._get_table(ext, table)
        columns = [str(c) for c in self._list(info.partitionColumnNames())]
        location_uri = info.storage().locationUri()
        location = self._location(location_uri.get()) if location_uri.isDefined() else None
        root = table_root(table, location, registration.location)
        written = check_partition_columns(table, columns, list(registration.partitions))
        now = int(self._clock())
        if not columns:
            return self._register_table(ext, table, info, registration, now)
        if registration.mode is RegistrationMode.OVERWRITE:
            existing = {p.values: p for p in self._all_partitions(ext, table, columns)}
        else:
            existing = {p.values: p for p in self._get_partitions(ext, table, columns, list(written.values()))}
        changes = plan_partitions(table, registration, columns=columns, root=root, existing=existing, now=now,
                                  trailing_slash=False, spark_stats=True)
        return self._apply(ext, table, columns, changes)

    def _apply(self, ext: Any, table: TableName, columns: Sequence[str], changes: list[PartitionChange]) -> CatalogResult:
        by_action = group_by_action(changes)
        not_registered: dict[str, str] = {}
        not_updated = {c.path: c.reason for c in by_action[Action.CONFLICT]}
        created: list[str] = []
        updated: list[str] = []
        dropped: list[str] = []

        # Added by SQL, then given their statistics like any existing partition (SQL cannot set them).
        to_alter: list[tuple[PartitionChange, Any, dict[str, str]]] = []
        for batch in _chunks(by_action[Action.CREATE], BATCH):
            try:
                self.spark.sql(add_partitions_sql(table, columns, [(c.values, c.location) for c in batch]))
            except Exception as exc:  # noqa: BLE001 - py4j/Spark errors, reported per partition
                for change in batch:
                    not_registered[change.path] = f"ALTER TABLE ... ADD PARTITION failed: {_spark_message(exc)}"
                continue
            for change in batch:
                found = self._partition(ext, table, columns, change.values)
                if found is None:
                    not_registered[change.path] = "ALTER TABLE ... ADD PARTITION succeeded, yet the partition is not there"
                    continue
                created.append(change.path)
                merged = {**found.parameters, **change.parameters}
                to_alter.append((change, found.raw, merged))
        new_paths = set(created)
        to_alter += [(c, c.existing.raw, dict(c.parameters)) for c in by_action[Action.UPDATE] if c.existing is not None]

        for batch in _chunks(to_alter, BATCH):
            try:
                self._alter_partitions(ext, table, [(raw, params) for _c, raw, params in batch])
            except Exception as exc:  # noqa: BLE001
                for change, _raw, _params in batch:
                    # A new partition without its statistics is registered, but not up to date.
                    not_updated[change.path] = f"statistics not set: {_spark_message(exc)}"
                continue
            updated += [c.path for c, _r, _p in batch if c.path not in new_paths]

        for batch in _chunks(by_action[Action.DROP], BATCH):
            try:
                specs = self._seq([self._map(dict(zip(columns, c.values))) for c in batch])
                # ignoreIfNotExists, purge=false, retainData=true: the overwrite already removed the files.
                ext.dropPartitions(table.database, table.name, specs, True, False, True)
            except Exception as exc:  # noqa: BLE001
                for change in batch:
                    not_updated[change.path] = f"not dropped ({_spark_message(exc)}), though the overwrite deleted its data"
                continue
            dropped += [c.path for c in batch]

        return CatalogResult(
            table=str(table), catalog=self.name, created=tuple(created), updated=tuple(updated),
            dropped=tuple(dropped), unchanged=tuple(c.path for c in by_action[Action.UNCHANGED]),
            not_registered=not_registered, not_updated=not_updated,
        )

    def _alter_partitions(self, ext: Any, table: TableName, items: Sequence[tuple[Any, Mapping[str, str]]]) -> None:
        # stats=None: our parameters carry Spark's statistics already; a stale CatalogStatistics on the
        # object would be written over them.
        none = self._jvm.scala.Option.empty()
        new = [p.copy(p.spec(), p.storage(), self._map(params), p.createTime(), p.lastAccessTime(), none)
               for p, params in items]
        ext.alterPartitions(table.database, table.name, self._seq(new))

    def _register_table(self, ext: Any, table: TableName, info: Any, registration: Registration,
                        now: int) -> CatalogResult:
        old = self._table_parameters(info, table)
        params = table_parameters(old, registration, now=now)
        if params is None:
            return CatalogResult(str(table), self.name, unchanged=("",))
        ident = self._jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(
            table.name, self._jvm.scala.Option.apply(table.database))
        stale = [k for k in STATS_KEYS if k in old and k not in params]
        try:
            self.spark._jsparkSession.sessionState().catalog().alterTableStats(ident, self._jvm.scala.Option.empty())
            ours = {k: v for k, v in params.items() if k in STATS_KEYS or k in (LAST_JOB, DDL_TIME)}
            self.spark.sql(set_properties_sql(table, {**ours, DO_NOT_UPDATE_STATS: "true"}))
            if stale:
                self.spark.sql(unset_properties_sql(table, stale))
        except Exception as exc:  # noqa: BLE001
            return CatalogResult(str(table), self.name, not_updated={"": f"statistics not set: {_spark_message(exc)}"})
        return CatalogResult(str(table), self.name, updated=("",))

    # ------------------------------------------------------------ reading the catalog
    def _get_table(self, ext: Any, table: TableName) -> Any:
        try:
            exists = bool(ext.databaseExists(table.database)) and bool(ext.tableExists(table.database, table.name))
            if not exists:
                raise TableNotFoundError(
                    f"table {table} does not exist in the Spark session catalog: create it (CREATE EXTERNAL TABLE "
                    f"{table} (...) PARTITIONED BY (...) STORED AS ... LOCATION '...'), then run `mpcommit catalog sync`"
                )
            info = ext.getTable(table.database, table.name)
        except CatalogError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise CatalogRequestError(f"reading table {table} from the Spark catalog failed: {_spark_message(exc)}") from exc
        if str(info.tableType().name()).upper() == "VIEW":
            raise UnsupportedTableError(f"{table} is a view; register commits into the table it reads from")
        provider = info.provider()
        fmt = str(provider.get()).lower() if provider.isDefined() else ""
        if fmt in _UNSUPPORTED_PROVIDERS:
            raise UnsupportedTableError(
                f"{table} is a {fmt} table: its files are tracked by {fmt}'s own metadata, not by Hive partitions; "
                "write to it with its own writer"
            )
        return info

    def _table_parameters(self, info: Any, table: TableName) -> dict[str, str]:
        """The table's parameters with the statistics Spark reports. Spark hides Hive's statistics from
        ``properties``; numFiles is read from the raw Hive table where the session catalog is Hive's."""
        params = self._dict(info.properties())
        params.update(self._stats(info.stats()))
        try:
            raw = self.spark._jsparkSession.sharedState().externalCatalog().unwrapped().client() \
                .getRawHiveTable(table.database, table.name)
            hive = self._dict(raw.hiveTableProps())
            if NUM_FILES in hive:
                params[NUM_FILES] = hive[NUM_FILES]
        except Exception:  # noqa: BLE001 - not a Hive catalog: numFiles is unknown, and so left unknown
            pass
        return params

    def _stats(self, stats: Any) -> dict[str, str]:
        """Spark's CatalogStatistics as Hive's keys (the values Spark itself would use)."""
        if not stats.isDefined():
            return {}
        m = _SIMPLE_STATS_RE.match(str(stats.get().simpleString()))
        if not m:
            return {}
        out = {TOTAL_SIZE: m.group(1)}
        if m.group(2) is not None:
            out[NUM_ROWS] = m.group(2)
        return out

    def _existing(self, p: Any, columns: Sequence[str]) -> ExistingPartition:
        spec = self._dict(p.spec())
        lowered = {k.lower(): v for k, v in spec.items()}
        values = tuple(lowered.get(c.lower(), "") for c in columns)
        params = self._dict(p.parameters())
        params.update(self._stats(p.stats()))
        return ExistingPartition(values, self._location(p.location()), params, raw=p)

    def _partition(self, ext: Any, table: TableName, columns: Sequence[str], values: Sequence[str]) -> ExistingPartition | None:
        found = ext.getPartitionOption(table.database, table.name, self._map(dict(zip(columns, values))))
        return self._existing(found.get(), columns) if found.isDefined() else None

    def _get_partitions(self, ext: Any, table: TableName, columns: Sequence[str],
                        values: Sequence[tuple[str, ...]]) -> Iterator[ExistingPartition]:
        for v in values:
            found = self._partition(ext, table, columns, v)
            if found is not None:
                yield found

    def _all_partitions(self, ext: Any, table: TableName, columns: Sequence[str]) -> Iterator[ExistingPartition]:
        for p in self._list(ext.listPartitions(table.database, table.name, self._jvm.scala.Option.empty())):
            yield self._existing(p, columns)


def _spark_message(exc: BaseException) -> str:
    """The first line of a Spark/py4j error, without the JVM stack trace."""
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip().removeprefix(": ").strip()
        if line and not line.startswith(("An error occurred while calling", "at ")):
            return line[:500]
    return text[:500] or type(exc).__name__


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
