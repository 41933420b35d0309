"""The AWS Glue Data Catalog, through boto3: the one Glue boundary.

Every request goes through :meth:`GlueCatalog._call`, which retries transient failures through the project's
one retry boundary (botocore's own retries are off) and turns Glue's error codes into CatalogError subclasses
with the original chained. Batch APIs are used within their limits: BatchGetPartition 1,000 values,
BatchCreatePartition and BatchUpdatePartition 100 partitions, BatchDeletePartition 25; GetPartitions is paginated.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import MpcommitError, RetriesExhaustedError, TransientStoreError, UsageError
from ..options import RetryPolicy, S3Options
from ..store.errors import translate as translate_transport
from ..store.retry import call_with_retry
from ..store.session import glue_client as make_glue_client
from .base import (
    CatalogAccessDeniedError,
    CatalogError,
    CatalogRequestError,
    CatalogResult,
    Registration,
    RegistrationMode,
    TableLayout,
    TableName,
    TableNotFoundError,
    TransientCatalogError,
    UnsupportedTableError,
)
from .plan import (
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

log = logging.getLogger(__name__)

GET_BATCH = 1000      # BatchGetPartition: PartitionsToGet
CREATE_BATCH = 100    # BatchCreatePartition: PartitionInputList
UPDATE_BATCH = 100    # BatchUpdatePartition: Entries
DELETE_BATCH = 25     # BatchDeletePartition: PartitionsToDelete
#: The TableInput fields UpdateTable accepts; GetTable answers with more (CreateTime, VersionId, ...).
_TABLE_INPUT_KEYS = (
    "Name", "Description", "Owner", "LastAccessTime", "LastAnalyzedTime", "Retention", "StorageDescriptor",
    "PartitionKeys", "ViewOriginalText", "ViewExpandedText", "TableType", "Parameters", "TargetTable",
    "ViewDefinition",
)
_PARTITION_INPUT_KEYS = ("Values", "LastAccessTime", "StorageDescriptor", "Parameters", "LastAnalyzedTime")
#: Table formats whose metadata is not Hive partitions (Glue's Parameters.table_type, Spark's provider).
_UNSUPPORTED_FORMATS = {"iceberg", "delta", "hudi"}
#: How often UpdateTable re-reads the table when another writer changed it in between.
_TABLE_UPDATE_ATTEMPTS = 5

# Glue error code -> (exception class, advice).
_CODES: dict[str, tuple[type[MpcommitError], str]] = {
    "EntityNotFoundException": (TableNotFoundError, "create the database and table first (e.g. CREATE EXTERNAL "
                                "TABLE ... LOCATION 's3://...'), then run `mpcommit catalog sync`"),
    "AccessDeniedException": (CatalogAccessDeniedError, "grant these credentials glue:GetTable, glue:GetPartitions, "
                              "glue:BatchGetPartition, glue:BatchCreatePartition, glue:BatchUpdatePartition, "
                              "glue:BatchDeletePartition and glue:UpdateTable on the table"),
    "GlueEncryptionException": (CatalogAccessDeniedError, "the catalog is encrypted with a KMS key these credentials "
                                "may not use"),
    "UnrecognizedClientException": (CatalogAccessDeniedError, "the credentials are not valid for Glue"),
    "InvalidSignatureException": (CatalogAccessDeniedError, "the secret key does not match: check the credentials"),
    "ExpiredTokenException": (CatalogAccessDeniedError, "the session token expired: refresh the credentials"),
    "InvalidInputException": (CatalogRequestError, "Glue refused the request as invalid"),
    "ValidationException": (CatalogRequestError, "Glue refused the request as invalid"),
    "ResourceNumberLimitExceededException": (CatalogRequestError, "a Glue quota (partitions per table?) is reached"),
    "AlreadyExistsException": (CatalogRequestError, "it exists already"),
    "ThrottlingException": (TransientCatalogError, "Glue asked to slow down"),
    "ConcurrentModificationException": (TransientCatalogError, "another writer changed it at the same time"),
    "InternalServiceException": (TransientCatalogError, "Glue had an internal error"),
    "OperationTimeoutException": (TransientCatalogError, "Glue timed out"),
    "ServiceUnavailableException": (TransientCatalogError, "Glue is unavailable"),
}


def glue_client(s3: S3Options | None = None, *, endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A Glue client with the credentials, profile, region and timeouts of ``s3`` (:func:`mpcommit.store.session.
    glue_client`: the one place AWS clients are made); a missing region is named as the usage error it is."""
    try:
        return make_glue_client(s3 or S3Options(), endpoint_url=endpoint_url, region=region)
    except Exception as exc:  # noqa: BLE001 - botocore's NoRegionError and friends, without importing them
        if "region" in str(exc).lower():
            raise UsageError("the Glue Data Catalog needs a region: pass --region, set AWS_REGION, or "
                             "S3Options(region=...)") from exc
        raise CatalogRequestError(f"cannot create a Glue client: {exc}") from exc


class GlueCatalog:
    """Registers commits in the AWS Glue Data Catalog (or anything speaking its API: LocalStack, moto).

    ``catalog_id`` is the account id of another account's catalog; ``client`` replaces the boto3 client
    built from ``s3`` (tests, custom sessions).
    """

    name = "glue"

    def __init__(self, s3: S3Options | None = None, *, endpoint_url: str | None = None, region: str | None = None,
                 catalog_id: str | None = None, client: Any | None = None, retry: RetryPolicy | None = None,
                 clock: Callable[[], float] = time.time):
        options = s3 or S3Options()
        self._client = client or glue_client(options, endpoint_url=endpoint_url, region=region)
        self.catalog_id = catalog_id
        self.retry = retry or options.retry
        self._clock = clock

    @property
    def endpoint(self) -> str:
        return str(self._client.meta.endpoint_url)

    # ------------------------------------------------------------ registration
    def register(self, table: TableName, registration: Registration) -> CatalogResult:
        """Register what ``registration`` made visible; see :class:`~mpcommit.catalog.base.Catalog`."""
        table = TableName.parse(table)
        info = self._get_table(table)
        _check_supported(table, info)
        columns = [k["Name"] for k in info.get("PartitionKeys") or []]
        root = table_root(table, (info.get("StorageDescriptor") or {}).get("Location"), registration.location)
        written = check_partition_columns(table, columns, list(registration.partitions))
        now = int(self._clock())
        if not columns:
            return self._register_table(table, info, registration, now)
        if registration.mode is RegistrationMode.OVERWRITE:
            existing = {p.values: p for p in self._all_partitions(table)}
        else:
            existing = {p.values: p for p in self._get_partitions(table, list(written.values()))}
        changes = plan_partitions(table, registration, columns=columns, root=root, existing=existing, now=now,
                                  trailing_slash=True)
        return self._apply(table, info, registration, columns, root, changes, now)

    def _apply(self, table: TableName, info: Mapping[str, Any], registration: Registration, columns: Sequence[str],
               root: str, changes: list[PartitionChange], now: int) -> CatalogResult:
        by_action = group_by_action(changes)
        not_registered: dict[str, str] = {}
        not_updated = {c.path: c.reason for c in by_action[Action.CONFLICT]}
        created: list[str] = []
        updated: list[str] = []
        dropped: list[str] = []

        raced: list[PartitionChange] = []
        for batch in _chunks(by_action[Action.CREATE], CREATE_BATCH):
            failed = self._create(table, info, batch)
            for change in batch:
                code, reason = failed.get(change.values, ("", ""))
                if not code:
                    created.append(change.path)
                elif code == "AlreadyExistsException":
                    raced.append(change)  # created by someone else since we looked: update it instead
                else:
                    not_registered[change.path] = reason
        if raced:
            log.info("%s: %d partition(s) appeared while registering (another writer); updating them instead",
                     table, len(raced))
            found = {p.values: p for p in self._get_partitions(table, [c.values for c in raced])}
            replanned = plan_partitions(table, _only(registration, [c.path for c in raced]), columns=columns,
                                        root=root, existing=found, now=now, trailing_slash=True)
            for change in replanned:
                if change.action is Action.CONFLICT:
                    not_updated[change.path] = change.reason
                elif change.action is Action.UPDATE:
                    by_action[Action.UPDATE].append(change)
                elif change.action is Action.CREATE:  # vanished again: give up on it, sync will retry
                    not_registered[change.path] = "created and deleted concurrently by another writer"
                else:
                    by_action[Action.UNCHANGED].append(change)

        for batch in _chunks(by_action[Action.UPDATE], UPDATE_BATCH):
            failed = self._update(table, batch)
            for change in batch:
                if change.values in failed:
                    not_updated[change.path] = failed[change.values][1]
                else:
                    updated.append(change.path)

        for batch in _chunks(by_action[Action.DROP], DELETE_BATCH):
            failed = self._delete(table, batch)
            for change in batch:
                code, reason = failed.get(change.values, ("", ""))
                if code and code != "EntityNotFoundException":
                    not_updated[change.path] = f"not dropped ({reason}), though the overwrite deleted its data"
                else:
                    dropped.append(change.path)

        return CatalogResult(
            table=str(table), catalog=self.name, created=tuple(created), updated=tuple(updated),
            dropped=tuple(dropped), unchanged=tuple(c.path for c in by_action[Action.UNCHANGED]),
            not_registered=not_registered, not_updated=not_updated,
        )

    def _register_table(self, table: TableName, info: Mapping[str, Any], registration: Registration,
                        now: int) -> CatalogResult:
        """Non-partitioned: the table's own statistics, read-modify-written under Glue's VersionId check."""
        for attempt in range(1, _TABLE_UPDATE_ATTEMPTS + 1):
            params = table_parameters(info.get("Parameters") or {}, registration, now=now)
            if params is None:
                return CatalogResult(str(table), self.name, unchanged=("",))
            table_input = {k: info[k] for k in _TABLE_INPUT_KEYS if k in info}
            table_input["Parameters"] = params
            request: dict[str, Any] = {"DatabaseName": table.database, "TableInput": table_input}
            if info.get("VersionId"):
                request["VersionId"] = info["VersionId"]
            try:
                self._call("update_table", str(table), retry=False, **request)
                return CatalogResult(str(table), self.name, updated=("",))
            except TransientCatalogError as exc:
                if attempt == _TABLE_UPDATE_ATTEMPTS:
                    return CatalogResult(str(table), self.name, not_updated={"": f"UpdateTable kept failing: {exc}"})
                time.sleep(min(self.retry.max_delay, self.retry.initial_delay * 2 ** attempt))
                info = self._get_table(table)  # someone else changed it: start from their version
            except CatalogError as exc:
                return CatalogResult(str(table), self.name, not_updated={"": str(exc)})
        raise AssertionError("unreachable")

    # ------------------------------------------------------------ Glue operations
    def layout(self, table: "TableName | str") -> TableLayout:
        """Where ``table`` keeps its files and how (see :class:`~mpcommit.catalog.base.TableLayout`): its location
        (a table Spark made keeps it in its SerDe's ``path`` parameter), its format -- Spark's provider, else a
        crawler's classification, else the SerDe -- and its partition keys."""
        table = TableName.parse(table)
        info = self._get_table(table)
        _check_supported(table, info)
        sd = info.get("StorageDescriptor") or {}
        serde = sd.get("SerdeInfo") or {}
        params = {str(k).lower(): str(v) for k, v in (info.get("Parameters") or {}).items()}
        provider, classification = params.get("spark.sql.sources.provider"), params.get("classification")
        library = serde.get("SerializationLibrary")
        location = (serde.get("Parameters") or {}).get("path") or sd.get("Location") or None
        return TableLayout(table, location, format_of(provider, classification, library),
                           provider or classification or library or str(sd.get("InputFormat") or ""),
                           tuple(str(k["Name"]) for k in info.get("PartitionKeys") or []))

    def _get_table(self, table: TableName) -> dict[str, Any]:
        try:
            response = self._call("get_table", str(table), DatabaseName=table.database, Name=table.name)
        except TableNotFoundError as exc:
            raise TableNotFoundError(
                f"table {table} does not exist in the Glue Data Catalog ({self.endpoint}"
                f"{', catalog ' + self.catalog_id if self.catalog_id else ''}): {_glue_message(exc)}. Create it "
                "(e.g. CREATE EXTERNAL TABLE ... LOCATION 's3://...'), then run `mpcommit catalog sync`"
            ) from exc
        return dict(response["Table"])

    def _get_partitions(self, table: TableName, values: Sequence[tuple[str, ...]]) -> Iterator[ExistingPartition]:
        """The given partitions that exist (BatchGetPartition, retrying what Glue leaves unprocessed)."""
        for batch in _chunks(list(values), GET_BATCH):
            wanted = [{"Values": list(v)} for v in batch]
            for _round in range(10):
                response = self._call("batch_get_partition", str(table), DatabaseName=table.database,
                                      TableName=table.name, PartitionsToGet=wanted)
                for p in response.get("Partitions") or []:
                    yield _existing(p)
                wanted = list(response.get("UnprocessedKeys") or [])
                if not wanted:
                    break
            else:
                raise TransientCatalogError(f"Glue left {len(wanted)} partitions of {table} unprocessed 10 times",
                                            operation="glue:BatchGetPartition", code="UnprocessedKeys")

    def _all_partitions(self, table: TableName) -> Iterator[ExistingPartition]:
        """Every partition of the table, across all pages of GetPartitions -- proven complete (I8): a NextToken
        that does not advance (a page asked for twice) is an error, never an endless loop."""
        params: dict[str, Any] = {"DatabaseName": table.database, "TableName": table.name, "MaxResults": 1000}
        used: set[str] = set()
        while True:
            response = self._call("get_partitions", str(table), **params)
            for p in response.get("Partitions") or []:
                yield _existing(p)
            token = response.get("NextToken")
            if not token:
                return
            if token in used:
                raise CatalogError(
                    f"Glue's listing of the partitions of {table} is inconsistent: it handed back NextToken "
                    f"{token[:40]!r} twice after {len(used)} pages, so some partitions may be missing. Nothing was "
                    "registered from it; try again, or report it to the catalog's maintainers.")
            used.add(token)
            params["NextToken"] = token

    def _create(self, table: TableName, info: Mapping[str, Any],
                batch: Sequence[PartitionChange]) -> dict[tuple[str, ...], tuple[str, str]]:
        """BatchCreatePartition; returns {values: (error code, reason)} of the partitions Glue refused. A new
        partition gets the table's StorageDescriptor (formats, SerDe, columns) with its own location."""
        table_sd = info.get("StorageDescriptor") or {}
        inputs = []
        for change in batch:
            sd = copy.deepcopy(table_sd)
            sd["Location"] = change.location
            inputs.append({"Values": list(change.values), "StorageDescriptor": sd, "Parameters": dict(change.parameters)})
        return self._batch(table, "batch_create_partition", batch, PartitionInputList=inputs)

    def _update(self, table: TableName, batch: Sequence[PartitionChange]) -> dict[tuple[str, ...], tuple[str, str]]:
        """BatchUpdatePartition: the partition as it is, with the new parameters (Glue replaces it whole)."""
        entries = []
        for change in batch:
            raw = change.existing.raw if change.existing is not None else {}
            partition_input = {k: raw[k] for k in _PARTITION_INPUT_KEYS if isinstance(raw, dict) and k in raw}
            partition_input["Values"] = list(change.values)
            partition_input["Parameters"] = dict(change.parameters)
            entries.append({"PartitionValueList": list(change.values), "PartitionInput": partition_input})
        return self._batch(table, "batch_update_partition", batch, Entries=entries)

    def _delete(self, table: TableName, batch: Sequence[PartitionChange]) -> dict[tuple[str, ...], tuple[str, str]]:
        return self._batch(table, "batch_delete_partition", batch,
                           PartitionsToDelete=[{"Values": list(c.values)} for c in batch])

    def _batch(self, table: TableName, operation: str, batch: Sequence[PartitionChange],
               **params: Any) -> dict[tuple[str, ...], tuple[str, str]]:
        """One batch call; per-partition errors from its answer, or the whole batch failed with the call."""
        try:
            response = self._call(operation, str(table), DatabaseName=table.database, TableName=table.name, **params)
        except CatalogError as exc:
            return {c.values: (type(exc).__name__, str(exc)) for c in batch}
        failed: dict[tuple[str, ...], tuple[str, str]] = {}
        for error in response.get("Errors") or []:
            values = tuple(error.get("PartitionValues") or error.get("PartitionValueList") or ())
            detail = error.get("ErrorDetail") or {}
            code = str(detail.get("ErrorCode") or "")
            failed[values] = (code, f"{_glue_operation(operation)}: {code}: {detail.get('ErrorMessage', '')}".rstrip(": "))
        return failed

    # ------------------------------------------------------------ the funnel
    def _call(self, operation: str, subject: str, *, retry: bool = True, **params: Any) -> dict[str, Any]:
        if self.catalog_id:
            params.setdefault("CatalogId", self.catalog_id)
        method: Callable[..., Any] = getattr(self._client, operation)

        def attempt() -> dict[str, Any]:
            try:
                return dict(method(**params))
            except Exception as exc:  # noqa: BLE001 - translated and chained below
                raise _translate(exc, operation=operation, subject=subject, endpoint=self.endpoint) from exc

        if not retry:
            return attempt()
        try:
            return call_with_retry(attempt, policy=self.retry, describe=f"{_glue_operation(operation)} {subject}")
        except RetriesExhaustedError as exc:
            raise CatalogRequestError(
                f"{_glue_operation(operation)} on {subject} still failed after retrying: {exc.__cause__}"
            ) from exc


def _translate(exc: BaseException, *, operation: str, subject: str, endpoint: str) -> MpcommitError:
    what = f"{_glue_operation(operation)} on {subject}"
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response.get("Error") or {}
        code = str(error.get("Code") or "")
        message = str(error.get("Message") or "")
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        cls, advice = _CODES.get(code, (None, ""))
        if cls is None:
            transient = isinstance(status, int) and (status >= 500 or status == 429)
            cls, advice = (TransientCatalogError, "Glue failed") if transient else (CatalogRequestError, "Glue refused it")
        text = f"{what} failed: {code or status}: {advice}" + (f" ({message})" if message else "")
        if issubclass(cls, TransientStoreError):
            return cls(text, operation=f"glue:{operation}", code=code)
        return cls(text)
    # Transport failures (refused connections, timeouts, missing credentials): classified by the S3 table,
    # worded for Glue.
    transport = translate_transport(exc, operation=operation, endpoint=endpoint)
    text = f"{what} failed: {type(exc).__name__}: {exc} (Glue endpoint {endpoint})"
    if isinstance(transport, TransientStoreError):
        return TransientCatalogError(text, operation=f"glue:{operation}", code=transport.code)
    if transport.code == "NoCredentials":
        return CatalogAccessDeniedError(f"{what} failed: no usable AWS credentials found")
    return CatalogRequestError(text)


def _glue_operation(operation: str) -> str:
    """``batch_create_partition`` -> ``Glue BatchCreatePartition``."""
    return "Glue " + "".join(w.capitalize() for w in operation.split("_"))


def _glue_message(exc: BaseException) -> str:
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Message") or "not found")
    return "not found"


def _existing(partition: Mapping[str, Any]) -> ExistingPartition:
    sd = partition.get("StorageDescriptor") or {}
    return ExistingPartition(values=tuple(partition.get("Values") or ()), location=str(sd.get("Location") or ""),
                             parameters=dict(partition.get("Parameters") or {}), raw=dict(partition))


def _check_supported(table: TableName, info: Mapping[str, Any]) -> None:
    if str(info.get("TableType") or "").upper() == "VIRTUAL_VIEW":
        raise UnsupportedTableError(f"{table} is a view; register commits into the table it reads from")
    params = {str(k).lower(): str(v).lower() for k, v in (info.get("Parameters") or {}).items()}
    fmt = params.get("table_type") or params.get("spark.sql.sources.provider") or ""
    if fmt in _UNSUPPORTED_FORMATS:
        raise UnsupportedTableError(
            f"{table} is a {fmt} table: its files are tracked by {fmt}'s own metadata, not by Hive partitions; "
            "write to it with its own writer"
        )


def _only(registration: Registration, paths: Sequence[str]) -> Registration:
    """The same registration, for some partitions only (and never dropping: that was planned already)."""
    mode = RegistrationMode.OVERWRITE_DYNAMIC if registration.mode is RegistrationMode.OVERWRITE else registration.mode
    return Registration(registration.location, registration.job_id, mode,
                        {p: registration.partitions[p] for p in paths})


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
