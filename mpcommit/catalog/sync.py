"""Registering a commit in a catalog: right after it (:func:`commit_registered` -- check the target, commit,
register -- the one sequence every caller uses, the Spark writer too), or later from the ``_SUCCESS`` it wrote
(:func:`sync`, ``mpcommit catalog sync``).

Both run only after the data commit succeeded and never undo it: when the catalog refuses, the error says that
the data is committed, which partitions the catalog does not show, and the ``sync`` command that finishes.
A registration is idempotent for one job, so ``sync`` may be repeated; it registers the last commit to the
destination (the one its ``_SUCCESS`` describes), so run it before the next write.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from ..modes import Purpose
from ..errors import NoSuchKeyError, UsageError
from ..modes import CommitOutcome
from ..options import S3Options
from ..protocol.commit import CommitReport
from ..protocol.job import Job
from ..protocol.layout import parse_uri
from ..protocol.records.manifest import TaskResult
from ..protocol.records.success import SuccessData
from ..store.s3 import S3Store, store_for
from .base import (
    Catalog,
    CatalogRegistrationError,
    CatalogResult,
    Registration,
    TableName,
    describe,
    sync_command,
)

#: Partitions named in an error message; the exception's attributes carry them all.
NAMES_SHOWN = 20


def resolve_catalog(catalog: "Catalog | str | None", *, s3: S3Options | None = None, spark: Any = None,
                    glue_endpoint_url: str | None = None, glue_catalog_id: str | None = None) -> Catalog:
    """A Catalog from a Catalog, or a name: ``"glue"`` (the default; credentials and region of ``s3``) or
    ``"spark"`` (the session catalog of ``spark``, else of the active or a new Hive-enabled session)."""
    if catalog is None or catalog == "glue":
        from .glue import GlueCatalog

        return GlueCatalog(s3, endpoint_url=glue_endpoint_url, catalog_id=glue_catalog_id)
    if catalog == "spark":
        from .spark_catalog import SparkSqlCatalog

        return SparkSqlCatalog(spark if spark is not None else _spark_session())
    if isinstance(catalog, Catalog):
        return catalog
    raise UsageError(f"catalog {catalog!r} is neither a Catalog nor one of 'glue', 'spark'")


def _spark_session() -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise UsageError("catalog 'spark' needs pyspark: pip install 'mpcommit[spark]'") from exc
    return SparkSession.getActiveSession() or SparkSession.builder.enableHiveSupport().getOrCreate()


def check_target(table: "TableName | str", catalog: "Catalog | str | None", *, s3: S3Options | None = None,
                 spark: Any = None) -> tuple[TableName, Catalog]:
    """The table and catalog a commit is to be registered in, checked before the commit: a misspelt name or an
    unknown catalog is then a usage error, not a committed job whose registration failed."""
    return TableName.parse(table), resolve_catalog(catalog, s3=s3, spark=spark)


def commit_registered(job: Job, results: Sequence[TaskResult], *, table: "TableName | str",
                      catalog: "Catalog | str | None" = None, spark: Any = None, **commit_options: Any) -> CommitReport:
    """Commit ``job`` and register what it made visible in ``catalog`` (a :class:`Catalog`, "glue" -- the default,
    with the job's S3 credentials and region -- or "spark"). The table and catalog are checked first: a
    misspelt name or catalog is a usage error, not a committed job whose registration failed. If registering
    fails, the data stays committed and CatalogRegistrationError (carrying the report) names the partitions the
    catalog does not show and the ``mpcommit catalog sync`` command that finishes. ``commit_options`` go to
    :meth:`Job.commit <mpcommit.protocol.job.Job.commit>`."""
    name, resolved = check_target(table, catalog, s3=job.spec.s3, spark=spark)
    return register_commit(job.commit(results, **commit_options), table=name, catalog=resolved)


def register_commit(report: CommitReport, *, table: "TableName | str", catalog: Catalog) -> CommitReport:
    """Register a committed report's partitions and statistics; the report comes back with ``catalog`` set.
    A report that committed nothing (mode ``ignore`` met data) comes back as it is.

    Raises CatalogRegistrationError (carrying ``report``) when the catalog does not fully show the commit.
    """
    if report.outcome is not CommitOutcome.COMMITTED:
        return report
    registration = Registration.from_report(report)
    started = time.monotonic()
    result = _register(catalog, TableName.parse(table), registration, report=report)
    return dataclasses.replace(report, catalog=result,
                               timings={**report.timings, "catalog": time.monotonic() - started})


def sync(uri: str, *, table: "TableName | str", catalog: Catalog, s3: S3Options | None = None,
         store: S3Store | None = None) -> CatalogResult:
    """Register the last commit to ``uri`` from its ``_SUCCESS`` alone (no listing): what a failed
    registration left out, or a commit made without ``table=``."""
    destination = parse_uri(uri)
    store = store or store_for(s3 or S3Options())
    where = f"s3://{destination.bucket}/{destination.success_key}"
    try:
        data = store.get_object(destination.bucket, destination.success_key)
    except NoSuchKeyError as exc:
        raise UsageError(f"no {where}: nothing was committed to {destination.uri}, so there is nothing to register") from exc
    success = SuccessData.from_bytes(data, where=where)
    if success.purpose is not Purpose.WRITE:
        raise UsageError(
            f"the last commit to {destination.uri} (job {success.job_id}) was a {success.purpose.value}, not a write: "
            "its _SUCCESS does not describe what partitions gained, so it cannot be registered from it"
        )
    registration = Registration.from_success(success, destination.uri)
    return _register(catalog, TableName.parse(table), registration, report=None)


def _register(catalog: Catalog, table: TableName, registration: Registration, *,
              report: CommitReport | None) -> CatalogResult:
    try:
        result = catalog.register(table, registration)
    except Exception as exc:  # noqa: BLE001 - whatever the catalog raised, the data stays committed: say so
        everything = tuple(sorted(registration.partitions)) or ("",)
        raise CatalogRegistrationError(
            _message(catalog, table, registration, report=report, cause=str(exc), not_registered=everything),
            table=str(table), uri=registration.location, catalog=catalog.name, not_registered=everything,
            reasons={p: str(exc) for p in everything}, report=report,
        ) from exc
    if not result.ok:
        reasons = {**result.not_registered, **result.not_updated}
        raise CatalogRegistrationError(
            _message(catalog, table, registration, report=report, not_registered=tuple(sorted(result.not_registered)),
                     not_updated=tuple(sorted(result.not_updated)), reasons=reasons),
            table=str(table), uri=registration.location, catalog=catalog.name,
            not_registered=tuple(sorted(result.not_registered)),
            not_updated=tuple(sorted(result.not_updated)), reasons=reasons, report=report, result=result,
        )
    return result


def _message(catalog: Catalog, table: TableName, registration: Registration, *, report: CommitReport | None,
             cause: str = "", not_registered: Sequence[str] = (), not_updated: Sequence[str] = (),
             reasons: dict[str, str] | None = None) -> str:
    reasons = reasons or {}
    if report is not None:
        head = (f"the data is committed (job {report.job_id}: {report.files} files to {report.uri}; nothing was "
                f"rolled back), but the {catalog.name} catalog's table {table} does not fully show it")
    else:
        head = f"the {catalog.name} catalog's table {table} does not fully show job {registration.job_id} at {registration.location}"
    parts = [head + (f": {cause}" if cause else "")]
    if not_registered:
        parts.append(f"not registered ({len(not_registered)}): {_names(not_registered)}")
    if not_updated:
        shown = [f"{describe(p)} ({reasons[p]})" if reasons.get(p) else describe(p) for p in not_updated[:NAMES_SHOWN]]
        more = f", ... and {len(not_updated) - NAMES_SHOWN} more" if len(not_updated) > NAMES_SHOWN else ""
        parts.append(f"statistics not updated ({len(not_updated)}): {', '.join(shown)}{more}")
    if not cause and not_registered and reasons.get(not_registered[0]):
        parts.append(f"first reason: {reasons[not_registered[0]]}")
    parts.append(f"fix the cause, then run `{sync_command(registration.location, str(table), catalog.name)}`")
    return "; ".join(parts)


def _names(paths: Sequence[str]) -> str:
    shown = ", ".join(describe(p) for p in paths[:NAMES_SHOWN])
    return shown + (f", ... and {len(paths) - NAMES_SHOWN} more" if len(paths) > NAMES_SHOWN else "")
