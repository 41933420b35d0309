"""Pure planning shared by every catalog: which partitions to create, update or drop, with which parameters.

No I/O here: a catalog reads the table and the partitions it has, hands them to :func:`plan_partitions`
(or :func:`table_parameters` for a non-partitioned table) and carries out the result.

Statistics follow Hive's basic statistics (``numFiles``, ``totalSize``, ``numRows``, ``transient_lastDdlTime``),
computed from the commit alone, never from a listing: an append adds to what a partition had, an overwrite
replaces it. What no longer holds is removed, as Hive's metastore does after an INSERT: column statistics
(``COLUMN_STATS_ACCURATE`` and Spark's ``spark.sql.statistics.*``), and any count whose old value is unknown.
``mpcommit.lastJobId`` records the job whose statistics a partition carries, which makes a repeated
registration of one job (``mpcommit catalog sync``) a no-op instead of counting it twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ..protocol.layout import DEFAULT_PARTITION, parse_partition_path, partition_path
from ..protocol.records.success import PartitionStats
from ..errors import UsageError
from .base import (
    PartitionColumnsMismatchError,
    Registration,
    RegistrationMode,
    TableLayout,
    TableLocationMismatchError,
    TableName,
)

NUM_FILES = "numFiles"
TOTAL_SIZE = "totalSize"
NUM_ROWS = "numRows"
RAW_DATA_SIZE = "rawDataSize"
DDL_TIME = "transient_lastDdlTime"
COLUMN_STATS_ACCURATE = "COLUMN_STATS_ACCURATE"
#: Hive's marker for "basic statistics are accurate, column statistics are not".
BASIC_STATS_ACCURATE = '{"BASIC_STATS":"true"}'
SPARK_STATS_PREFIX = "spark.sql.statistics."
SPARK_TOTAL_SIZE = SPARK_STATS_PREFIX + "totalSize"
SPARK_NUM_ROWS = SPARK_STATS_PREFIX + "numRows"
LAST_JOB = "mpcommit.lastJobId"

#: Every key whose value a commit may make stale.
STATS_KEYS = (NUM_FILES, TOTAL_SIZE, NUM_ROWS, RAW_DATA_SIZE, COLUMN_STATS_ACCURATE)

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(/*)(.*)$")


# ---------------------------------------------------------------- locations
def normalize_location(uri: str) -> str:
    """A location in a comparable form: ``s3a://``/``s3n://`` are ``s3://``, ``file:///x`` is ``file:/x``,
    no trailing slash. Only for comparing; what is written keeps the table's own spelling."""
    text = uri.strip()
    m = _SCHEME_RE.match(text)
    if not m:
        return text.rstrip("/")
    scheme, slashes, rest = m.group(1).lower(), m.group(2), m.group(3)
    if scheme in ("s3", "s3a", "s3n"):
        return f"s3://{rest.strip('/')}"
    if scheme == "file":
        return f"file:/{rest.strip('/')}"
    return f"{scheme}:{slashes}{rest}".rstrip("/")


def table_root(table: TableName, table_location: str | None, written: str) -> str:
    """The table's location without a trailing slash, after checking that it is where the commit wrote."""
    if not table_location:
        raise TableLocationMismatchError(
            f"table {table} has no location in the catalog, so its partitions cannot point at {written}; "
            f"set it (ALTER TABLE {table} SET LOCATION '{written}') and sync again"
        )
    if normalize_location(table_location) != normalize_location(written):
        raise TableLocationMismatchError(
            f"table {table} is located at {table_location}, but the commit wrote to {written}: registering "
            "would point the catalog at other data. Write to the table's location, or move the table "
            f"(ALTER TABLE {table} SET LOCATION ...) and sync again"
        )
    return table_location.rstrip("/")


def partition_location(root: str, path: str, *, trailing_slash: bool) -> str:
    """``root/col=value/`` (Hive-escaped path as written to the store): where a partition's files are."""
    if not path:
        return root + ("/" if trailing_slash else "")
    return f"{root}/{path}" + ("/" if trailing_slash else "")


def is_under(location: str, root: str) -> bool:
    return normalize_location(location).startswith(normalize_location(root) + "/")


# ---------------------------------------------------------------- a write into a table: its layout
#: A table's format as catalogs name it -> the format mpcommit writes: Spark's providers (a Glue table that Spark
#: created keeps its provider in ``spark.sql.sources.provider``), crawlers' ``classification``, Hive's SerDes.
_FORMAT_NAMES = {
    "parquet": "parquet", "org.apache.spark.sql.parquet": "parquet",
    "org.apache.hadoop.hive.ql.io.parquet.serde.parquethiveserde": "parquet",
    "csv": "csv", "com.databricks.spark.csv": "csv", "org.apache.hadoop.hive.serde2.opencsvserde": "csv",
    "json": "json", "org.apache.hive.hcatalog.data.jsonserde": "json", "org.openx.data.jsonserde.jsonserde": "json",
    "text": "text",
}


def format_of(*names: str | None) -> str | None:
    """The format mpcommit writes that a catalog's names for a table's format mean (a provider, a classification,
    a SerDe, in that order of trust), None when none of them is one."""
    for name in names:
        if name and name.strip().lower() in _FORMAT_NAMES:
            return _FORMAT_NAMES[name.strip().lower()]
    return None


def write_layout(layout: TableLayout, *, path: str | None, fmt: str | None,
                 partition_by: Sequence[str] | None) -> tuple[str, str, tuple[str, ...]]:
    """The destination, format and partition columns of a write into ``layout``'s table: each taken from the
    table where the write leaves it out, and refused by name -- before anything is written -- where the write says
    something else than the table (the commit would land where the table does not look, or register partitions
    the table cannot have)."""
    table = layout.table
    if path is None:
        if not layout.location:
            raise UsageError(f"table {table} has no location in the catalog, so the write cannot take its path from "
                             f"it: give the path, or set the table's (ALTER TABLE {table} SET LOCATION 's3://...')")
        path = layout.location
    elif layout.location and normalize_location(path) != normalize_location(layout.location):
        raise TableLocationMismatchError(
            f"the write goes to {path}, but table {table} is located at {layout.location}: its partitions would "
            f"point at other data. Leave the path out to write to the table's location, or move the table "
            f"(ALTER TABLE {table} SET LOCATION ...). Nothing was written.")
    if fmt is None:
        if layout.format is None:
            raise UsageError(f"table {table} is stored as {layout.provider or 'a format the catalog does not name'}, "
                             "which mpcommit does not write (parquet, csv, json, text) or cannot tell from it: give "
                             "the format (.format('parquet') / option format). Nothing was written.")
        fmt = layout.format
    elif layout.format is not None and fmt != layout.format:
        raise UsageError(f"the write is {fmt}, but table {table} is stored as {layout.format}: its readers would not "
                         f"read these files. Write {layout.format} (or leave the format out). Nothing was written.")
    columns = tuple(partition_by or ())
    if not partition_by:
        columns = layout.partition_columns
    elif [c.lower() for c in columns] != [c.lower() for c in layout.partition_columns]:
        wanted = ", ".join(layout.partition_columns) or "nothing"
        raise PartitionColumnsMismatchError(
            f"the write is partitioned by ({', '.join(columns)}), but table {table} by ({wanted}): partition by "
            "exactly the table's columns, in order (or leave them out to take them from the table). Nothing was "
            "written.")
    return path, fmt, columns


# ---------------------------------------------------------------- partition columns
def partition_values(table: TableName, path: str, columns: Sequence[str]) -> tuple[str, ...]:
    """The values of partition path ``col=v/...`` in the order of the table's partition columns; null and
    empty values are Hive's ``__HIVE_DEFAULT_PARTITION__``. Raises PartitionColumnsMismatchError."""
    parsed = parse_partition_path(path)
    names = [n.lower() for n in parsed]
    wanted = [c.lower() for c in columns]
    if names != wanted:
        raise PartitionColumnsMismatchError(
            f"table {table} is partitioned by ({', '.join(columns) or 'nothing'}), but the commit wrote partition "
            f"{path!r} ({', '.join(parsed) or 'no columns'}): write with partition_by={list(columns)!r}, or "
            "register into a table with these partition columns"
        )
    return tuple(DEFAULT_PARTITION if v is None else v for v in parsed.values())


def check_partition_columns(table: TableName, columns: Sequence[str], paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Values per written partition path, or PartitionColumnsMismatchError naming the first that does not fit."""
    if not columns:
        stray = [p for p in paths if p]
        if stray:
            raise PartitionColumnsMismatchError(
                f"table {table} is not partitioned, but the commit wrote {len(stray)} partition(s) "
                f"({', '.join(sorted(stray)[:5])}{', ...' if len(stray) > 5 else ''}): write without partition_by, "
                "or register into a partitioned table"
            )
        return {p: () for p in paths}
    if "" in paths:
        raise PartitionColumnsMismatchError(
            f"table {table} is partitioned by ({', '.join(columns)}), but the commit wrote files at the table's root, "
            "outside any partition: write with partition_by"
        )
    return {p: partition_values(table, p, columns) for p in paths}


def values_path(columns: Sequence[str], values: Sequence[str]) -> str:
    """The partition path of catalog values (the inverse of :func:`partition_values`)."""
    return partition_path(columns, [None if v == DEFAULT_PARTITION else v for v in values])


# ---------------------------------------------------------------- statistics
def count(value: str | None) -> int | None:
    """A Hive statistic as a number; None when absent, malformed or Hive's "unknown" (-1)."""
    if value is None:
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        return None
    return n if n >= 0 else None


def stats_parameters(old: Mapping[str, str] | None, stats: PartitionStats | None, *, add: bool, job_id: str,
                     now: int, spark_stats: bool = False) -> dict[str, str]:
    """A partition's (or table's) parameters after a commit.

    ``old`` is None for a partition that does not exist yet (an append then starts from zero). With ``add``
    (append) each count is old + new, and unknown when the old one is; otherwise the commit's own counts
    replace the old ones. ``stats`` None means the commit's statistics are unknown: the counts are removed.
    ``spark_stats`` also writes Spark's own ``spark.sql.statistics.totalSize``/``numRows``, which Spark
    prefers over Hive's; otherwise stale Spark statistics are only removed.
    """
    base = dict(old or {})
    params = {k: v for k, v in base.items() if k not in STATS_KEYS and not k.startswith(SPARK_STATS_PREFIX)}
    if stats is not None:
        for key, delta in ((NUM_FILES, stats.files), (TOTAL_SIZE, stats.bytes), (NUM_ROWS, stats.rows)):
            if delta is None:
                continue
            if add:
                before = 0 if old is None else count(base.get(key))
                if before is None:
                    continue
                delta += before
            params[key] = str(delta)
        if all(k in params for k in (NUM_FILES, TOTAL_SIZE, NUM_ROWS)):
            params[COLUMN_STATS_ACCURATE] = BASIC_STATS_ACCURATE
        if spark_stats:
            if TOTAL_SIZE in params:
                params[SPARK_TOTAL_SIZE] = params[TOTAL_SIZE]
            if NUM_ROWS in params:
                params[SPARK_NUM_ROWS] = params[NUM_ROWS]
    params[DDL_TIME] = str(now)
    params[LAST_JOB] = job_id
    return params


# ---------------------------------------------------------------- plans
class Action(str, Enum):
    CREATE = "create"
    UPDATE = "update"
    DROP = "drop"
    UNCHANGED = "unchanged"  # already carries this job's statistics
    CONFLICT = "conflict"    # registered elsewhere: left alone, reported


@dataclass(frozen=True)
class ExistingPartition:
    """A partition as the catalog has it. ``raw`` is the catalog's own object, for the catalog's use only."""

    values: tuple[str, ...]
    location: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    raw: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class PartitionChange:
    action: Action
    path: str
    values: tuple[str, ...]
    location: str = ""
    parameters: Mapping[str, str] = field(default_factory=dict)
    existing: ExistingPartition | None = None
    reason: str = ""


def group_by_action(changes: Sequence["PartitionChange"]) -> dict[Action, list["PartitionChange"]]:
    """Planned changes by what they do, every action present (possibly empty), planning order kept."""
    grouped: dict[Action, list[PartitionChange]] = {a: [] for a in Action}
    for change in changes:
        grouped[change.action].append(change)
    return grouped


def plan_partitions(
    table: TableName, registration: Registration, *, columns: Sequence[str], root: str,
    existing: Mapping[tuple[str, ...], ExistingPartition], now: int, trailing_slash: bool, spark_stats: bool = False,
) -> list[PartitionChange]:
    """One change per written partition, plus (static overwrite) a drop for every other partition of the
    table whose location lies under the table's root: the overwrite deleted its data.

    ``existing`` must hold the written partitions the catalog has, and for a static overwrite every partition.
    """
    written = check_partition_columns(table, columns, list(registration.partitions))
    add = registration.mode is RegistrationMode.APPEND
    changes: list[PartitionChange] = []
    for path, values in sorted(written.items()):
        stats = registration.partitions[path]
        location = partition_location(root, path, trailing_slash=trailing_slash)
        found = existing.get(values)
        if found is None:
            params = stats_parameters(None, stats, add=add, job_id=registration.job_id, now=now, spark_stats=spark_stats)
            changes.append(PartitionChange(Action.CREATE, path, values, location, params))
        elif found.parameters.get(LAST_JOB) == registration.job_id:
            changes.append(PartitionChange(Action.UNCHANGED, path, values, found.location, found.parameters, found))
        elif normalize_location(found.location) != normalize_location(location):
            changes.append(PartitionChange(
                Action.CONFLICT, path, values, found.location, found.parameters, found,
                reason=f"registered at {found.location}, not at {location} where the commit wrote; left unchanged "
                       f"(point it there with ALTER TABLE {table} PARTITION (...) SET LOCATION, then sync again)",
            ))
        else:
            params = stats_parameters(found.parameters, stats, add=add, job_id=registration.job_id, now=now,
                                      spark_stats=spark_stats)
            changes.append(PartitionChange(Action.UPDATE, path, values, found.location, params, found))
    if registration.mode is RegistrationMode.OVERWRITE:
        kept = set(written.values())
        for values, found in sorted(existing.items()):
            if values not in kept and is_under(found.location, root):
                changes.append(PartitionChange(Action.DROP, values_path(columns, values), values, found.location,
                                               found.parameters, found))
    return changes


def table_parameters(table_params: Mapping[str, str], registration: Registration, *, now: int,
                     spark_stats: bool = False) -> dict[str, str] | None:
    """A non-partitioned table's parameters after the commit, or None when they already carry this job's."""
    if table_params.get(LAST_JOB) == registration.job_id:
        return None
    stats = registration.partitions.get("", PartitionStats(0, 0, 0))
    return stats_parameters(table_params, stats, add=registration.mode is RegistrationMode.APPEND,
                            job_id=registration.job_id, now=now, spark_stats=spark_stats)
