"""What every catalog shares: the table name, what a commit asks a catalog to record, the result, the errors.

A catalog is told about a commit only after the data commit succeeded. Registering is therefore never part
of the commit's outcome: when it fails, the data stays committed and :class:`CatalogRegistrationError` says
exactly which partitions the catalog does not show yet, and how to finish (``mpcommit catalog sync``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from ..errors import MpcommitError, TransientStoreError, UsageError
from ..modes import CommitMode
from ..protocol.commit import CommitReport
from ..protocol.layout import parse_uri
from ..protocol.records.success import PartitionStats, SuccessData

__all__ = [
    "Catalog", "CatalogAccessDeniedError", "CatalogError", "CatalogRegistrationError", "CatalogRequestError",
    "CatalogResult", "PartitionColumnsMismatchError", "PartitionStats", "Registration", "RegistrationMode",
    "TableLocationMismatchError", "TableName", "TableNotFoundError", "TransientCatalogError", "UnsupportedTableError",
]

#: Shown instead of "" wherever a non-partitioned table's only "partition" (the table itself) is named.
TABLE_ITSELF = "(table)"


# ---------------------------------------------------------------- errors
class CatalogError(MpcommitError):
    """A catalog refused or failed a request (the data commit, if any, is not affected)."""


class TableNotFoundError(CatalogError):
    """The table (or its database) does not exist in the catalog."""


class PartitionColumnsMismatchError(CatalogError):
    """The commit's partition directories do not match the table's partition columns."""


class TableLocationMismatchError(CatalogError):
    """The table's location is not the destination the commit wrote to."""


class UnsupportedTableError(CatalogError):
    """A view, or a table format (Iceberg, Delta, Hudi) whose metadata is not Hive partitions."""


class CatalogAccessDeniedError(CatalogError):
    """The credentials may not read or change the table in the catalog."""


class CatalogRequestError(CatalogError):
    """The catalog refused a request as invalid, or failed in a way not worth retrying."""


class TransientCatalogError(CatalogError, TransientStoreError):
    """A catalog request failed in a way worth retrying (throttling, a concurrent modification, 5xx).

    A CatalogError like every catalog failure; a TransientStoreError too, so that the project's one retry
    boundary retries it.
    """


class CatalogRegistrationError(CatalogError):
    """The data is committed, but the catalog does not (fully) show it.

    ``not_registered`` names the partitions the catalog does not have at all, ``not_updated`` those it has
    with statistics (or, for an overwrite, a drop) not applied; ``report`` is the data commit's CommitReport
    (None for ``sync``); the message ends with the ``mpcommit catalog sync`` command that finishes the job.
    """

    def __init__(self, message: str, *, table: str, uri: str, catalog: str = "glue", not_registered: tuple[str, ...] = (),
                 not_updated: tuple[str, ...] = (), reasons: Mapping[str, str] | None = None,
                 report: CommitReport | None = None, result: "CatalogResult | None" = None):
        super().__init__(message)
        self.table = table
        self.uri = uri
        self.catalog = catalog
        self.not_registered = not_registered
        self.not_updated = not_updated
        self.reasons = dict(reasons or {})
        self.report = report
        self.result = result

    @property
    def sync_command(self) -> str:
        return sync_command(self.uri, self.table, self.catalog)


def sync_command(uri: str, table: str, catalog: str = "glue") -> str:
    """The CLI command that registers the last commit to ``uri`` in ``table``."""
    return f"mpcommit catalog sync {uri} --table {table}" + ("" if catalog == "glue" else f" --catalog {catalog}")


# ---------------------------------------------------------------- values
@dataclass(frozen=True, order=True)
class TableName:
    """``database.table``, as every catalog names a table."""

    database: str
    name: str

    @classmethod
    def parse(cls, value: "str | TableName") -> "TableName":
        if isinstance(value, TableName):
            return value
        text = str(value).strip().replace("`", "")
        database, dot, name = text.partition(".")
        if not dot or not database or not name or "." in name or any(c.isspace() for c in text):
            raise UsageError(f"table {value!r} is not a database-qualified name: use db.table (e.g. sales.orders)")
        return cls(database, name)

    def __str__(self) -> str:
        return f"{self.database}.{self.name}"


class RegistrationMode(str, Enum):
    """How a commit changes the catalog, after the commit's mode (what happened to the data)."""

    APPEND = "append"                        # files added: existing partitions' statistics grow
    OVERWRITE = "overwrite"                  # the whole destination replaced: written partitions' statistics
                                             # replaced, partitions no longer holding data dropped
    OVERWRITE_DYNAMIC = "overwrite-dynamic"  # only the written partitions replaced; others untouched

    @classmethod
    def from_commit_mode(cls, mode: "CommitMode | str") -> "RegistrationMode":
        """From ``CommitReport.mode``, or ``_SUCCESS``'s ``mode`` as written. ``error`` and ``ignore`` wrote to
        an empty destination, which for the data is an append."""
        try:
            commit_mode = CommitMode.parse(mode)
        except UsageError:
            raise UsageError(f"commit mode {mode!r} cannot be registered in a catalog") from None
        if commit_mode is CommitMode.OVERWRITE:
            return cls.OVERWRITE
        if commit_mode is CommitMode.OVERWRITE_DYNAMIC:
            return cls.OVERWRITE_DYNAMIC
        return cls.APPEND


@dataclass(frozen=True)
class Registration:
    """What one commit made visible, as a catalog needs it: where, by which job, how, and per partition
    (``""`` for the table's root) the statistics of the committed files -- None where they are unknown
    (a _SUCCESS written before mpcommit recorded them)."""

    location: str
    job_id: str
    mode: RegistrationMode
    partitions: Mapping[str, PartitionStats | None] = field(default_factory=dict)

    @classmethod
    def from_report(cls, report: CommitReport) -> "Registration":
        return cls(location=report.uri, job_id=report.job_id, mode=RegistrationMode.from_commit_mode(report.mode),
                   partitions=dict(report.partition_stats))

    @classmethod
    def from_success(cls, success: SuccessData, uri: str) -> "Registration":
        """From a ``_SUCCESS``; without ``partitionStats`` (older files) only a non-partitioned commit's
        statistics are known (its totals), a partitioned one's partitions are registered without them."""
        location = parse_uri(uri).uri
        mode = RegistrationMode.from_commit_mode(success.mode)
        if success.partition_stats is not None:
            return cls(location, success.job_id, mode, dict(success.partition_stats))
        if not success.partitions:
            stats = PartitionStats(success.files, success.bytes, success.rows)
            return cls(location, success.job_id, mode, {"": stats} if success.files else {})
        return cls(location, success.job_id, mode, {p: None for p in success.partitions})


@dataclass(frozen=True)
class CatalogResult:
    """What a registration did, per partition path (``""`` is a non-partitioned table itself)."""

    table: str
    catalog: str
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    #: Already registered by this very job (a repeated ``sync``): left as they are.
    unchanged: tuple[str, ...] = ()
    #: Partitions the catalog does not have at all (their creation failed), with the reason.
    not_registered: Mapping[str, str] = field(default_factory=dict)
    #: Partitions the catalog has, but whose update (or drop) failed, with the reason.
    not_updated: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.not_registered and not self.not_updated

    def summary(self) -> dict[str, object]:
        return {
            "table": self.table, "catalog": self.catalog,
            "created": len(self.created), "updated": len(self.updated), "dropped": len(self.dropped),
            "unchanged": len(self.unchanged),
            "notRegistered": sorted(self.not_registered), "notUpdated": sorted(self.not_updated),
        }


@dataclass(frozen=True)
class TableLayout:
    """Where and how a catalog's table keeps its files, as far as a write into it needs to know: its location, its
    file format as mpcommit names it (None when it is not one mpcommit writes, or the catalog does not tell;
    ``provider`` says what the catalog said), and its partition columns in order."""

    table: TableName
    location: str | None
    format: str | None
    provider: str
    partition_columns: tuple[str, ...]


# ---------------------------------------------------------------- the protocol
@runtime_checkable
class Catalog(Protocol):
    """A metastore that can be told what a commit made visible.

    ``register`` raises CatalogError subclasses for a refusal of the whole table (it does not exist, its
    partition columns or location do not match, access denied) and reports partial failures per partition
    in the returned CatalogResult. It is idempotent for one job: partitions already carrying this job's
    statistics are left unchanged, so that ``sync`` can repeat a registration safely.
    """

    name: str

    def register(self, table: TableName, registration: Registration) -> CatalogResult: ...

    # A catalog may also say where a table is (``layout(table) -> TableLayout``): a Spark write that names the table
    # and leaves out its path, format or partition columns takes them from there, and one that gives them is checked
    # against it before anything is written. GlueCatalog and SparkSqlCatalog do.


def describe(partition: str) -> str:
    return partition or TABLE_ITSELF
