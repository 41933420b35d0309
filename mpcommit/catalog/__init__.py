"""Catalog registration after a commit: Hive-style partitions and their basic statistics.

    report = commit_registered(job, results, table="sales.orders")                          # Glue
    report = commit_registered(job, results, table="sales.orders", catalog=SparkSqlCatalog(spark))
    report = register_commit(job.commit(results), table="sales.orders", catalog=resolve_catalog("glue"))

The catalog is updated only after the data commit succeeded; when it fails, the data stays committed and
CatalogRegistrationError names the partitions not registered and the ``mpcommit catalog sync`` command that
registers them from ``_SUCCESS``. See docs/CATALOG.md.
"""

from .base import (
    Catalog,
    CatalogAccessDeniedError,
    CatalogError,
    CatalogRegistrationError,
    CatalogRequestError,
    CatalogResult,
    PartitionColumnsMismatchError,
    PartitionStats,
    Registration,
    RegistrationMode,
    TableLayout,
    TableLocationMismatchError,
    TableName,
    TableNotFoundError,
    TransientCatalogError,
    UnsupportedTableError,
)
from .glue import GlueCatalog
from .spark_catalog import SparkSqlCatalog
from .sync import commit_registered, register_commit, resolve_catalog, sync

__all__ = [
    "Catalog", "CatalogAccessDeniedError", "CatalogError", "CatalogRegistrationError", "CatalogRequestError",
    "CatalogResult", "GlueCatalog", "PartitionColumnsMismatchError", "PartitionStats", "Registration",
    "RegistrationMode", "SparkSqlCatalog", "TableLayout", "TableLocationMismatchError", "TableName", "TableNotFoundError",
    "TransientCatalogError", "UnsupportedTableError", "commit_registered", "register_commit", "resolve_catalog", "sync",
]
