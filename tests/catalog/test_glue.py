"""Catalog registration in the Glue Data Catalog of moto's server, after real commits to its S3.

Everything is checked with a plain boto3 Glue client and the S3 checker, independent of mpcommit's own code.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from mpcommit.catalog import (
    CatalogRegistrationError,
    GlueCatalog,
    PartitionColumnsMismatchError,
    Registration,
    RegistrationMode,
    TableLocationMismatchError,
    TableName,
    TableNotFoundError,
    sync,
)
from mpcommit.modes import CommitOutcome
from mpcommit.protocol.records.success import PartitionStats
from tests.support.glue import PARQUET_SD, create_table, partitions, stats_of, write
from tests.support.checks import read_object, visible_keys

ROWS_A = b"1,a\n2,b\n"  # 8 bytes, 2 rows
ROWS_B = b"3,c\n"       # 4 bytes, 1 row


def test_new_partitions_are_added_with_location_storage_and_statistics(moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    create_table(glue_client, database, "events", f"s3://{bucket}/events")
    started = int(time.time())
    report = write(moto_backend, f"s3://{bucket}/events", {"dt=2024-01-01": [ROWS_A, ROWS_B], "dt=2024-01-02": [ROWS_B]},
                   table=f"{database}.events", catalog=glue)

    assert report.outcome is CommitOutcome.COMMITTED
    assert report.catalog is not None and report.catalog.created == ("dt=2024-01-01", "dt=2024-01-02")
    assert report.summary()["catalog"]["created"] == 2 and report.timings["catalog"] >= 0
    found = partitions(glue_client, database, "events")
    assert set(found) == {"2024-01-01", "2024-01-02"}
    first = found["2024-01-01"]
    assert stats_of(first) == (2, 12, 3)
    assert stats_of(found["2024-01-02"]) == (1, 4, 1)
    assert first["StorageDescriptor"]["Location"] == f"s3://{bucket}/events/dt=2024-01-01/"
    # The table's storage (formats, SerDe, columns) is copied, only the location differs.
    for key in ("Columns", "InputFormat", "OutputFormat", "SerdeInfo"):
        assert first["StorageDescriptor"][key] == PARQUET_SD[key]
    params = first["Parameters"]
    assert params["COLUMN_STATS_ACCURATE"] == '{"BASIC_STATS":"true"}'
    assert params["mpcommit.lastJobId"] == report.job_id
    assert started <= int(params["transient_lastDdlTime"]) <= time.time() + 1
    # The statistics come from the commit, and _SUCCESS keeps them for a later sync.
    success = json.loads(read_object(moto_backend.client, bucket, "events/_SUCCESS"))
    assert success["partitionStats"] == {"dt=2024-01-01": {"files": 2, "bytes": 12, "rows": 3},
                                         "dt=2024-01-02": {"files": 1, "bytes": 4, "rows": 1}}


def test_append_to_an_existing_partition_adds_to_its_statistics(moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    create_table(glue_client, database, "t", uri + "/")  # a trailing slash, as Athena writes it, still matches
    write(moto_backend, uri, {"dt=1": [ROWS_A]}, table=f"{database}.t", catalog=glue)
    before = partitions(glue_client, database, "t")["1"]

    report = write(moto_backend, uri, {"dt=1": [ROWS_B, ROWS_B], "dt=2": [ROWS_A]}, table=f"{database}.t", catalog=glue)

    assert report.catalog.created == ("dt=2",) and report.catalog.updated == ("dt=1",)
    found = partitions(glue_client, database, "t")
    assert stats_of(found["1"]) == (3, 16, 4)
    assert stats_of(found["2"]) == (1, 8, 2)
    assert found["1"]["StorageDescriptor"] == before["StorageDescriptor"]
    assert found["1"]["Parameters"]["mpcommit.lastJobId"] == report.job_id


def test_static_overwrite_replaces_statistics_and_drops_partitions_whose_data_it_deleted(
        moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    create_table(glue_client, database, "t", uri)
    write(moto_backend, uri, {"dt=1": [ROWS_A], "dt=2": [ROWS_A, ROWS_A]}, table=f"{database}.t", catalog=glue)
    # A partition kept elsewhere: the overwrite did not delete its data, so it must stay registered.
    glue_client.create_partition(DatabaseName=database, TableName="t", PartitionInput={
        "Values": ["elsewhere"], "StorageDescriptor": {**PARQUET_SD, "Location": f"s3://{bucket}/archive/dt=x/"}})

    report = write(moto_backend, uri, {"dt=2": [ROWS_B], "dt=3": [ROWS_B]}, mode="overwrite",
                   table=f"{database}.t", catalog=glue)

    assert report.catalog.dropped == ("dt=1",)
    found = partitions(glue_client, database, "t")
    assert set(found) == {"2", "3", "elsewhere"}
    assert stats_of(found["2"]) == (1, 4, 1)  # replaced, not added
    assert stats_of(found["3"]) == (1, 4, 1)
    assert {k.rsplit("/", 1)[0] for k in visible_keys(moto_backend.client, bucket, "t")} == {"t/dt=2", "t/dt=3"}


def test_dynamic_overwrite_updates_only_the_partitions_it_wrote(moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    create_table(glue_client, database, "t", uri)
    write(moto_backend, uri, {"dt=1": [ROWS_A], "dt=2": [ROWS_A, ROWS_A]}, table=f"{database}.t", catalog=glue)
    untouched = partitions(glue_client, database, "t")["1"]

    report = write(moto_backend, uri, {"dt=2": [ROWS_B]}, mode="overwrite", partition_overwrite="dynamic",
                   table=f"{database}.t", catalog=glue)

    assert report.mode == "overwrite-dynamic"
    assert report.catalog.updated == ("dt=2",) and report.catalog.dropped == () and report.catalog.created == ()
    found = partitions(glue_client, database, "t")
    assert set(found) == {"1", "2"}
    assert found["1"]["Parameters"] == untouched["Parameters"]
    assert stats_of(found["2"]) == (1, 4, 1)
    assert found["2"]["Parameters"]["mpcommit.lastJobId"] == report.job_id


def test_non_partitioned_table_gets_table_level_statistics(moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/flat"
    create_table(glue_client, database, "flat", uri, partition_keys=(),
                 parameters={"spark.sql.statistics.totalSize": "999", "spark.sql.statistics.numRows": "99"})

    write(moto_backend, uri, {"": [ROWS_A, ROWS_A]}, mode="overwrite", table=f"{database}.flat", catalog=glue)
    params = glue_client.get_table(DatabaseName=database, Name="flat")["Table"]["Parameters"]
    assert stats_of({"Parameters": params}) == (2, 16, 4)
    assert not any(k.startswith("spark.sql.statistics.") for k in params)  # stale Spark statistics dropped
    assert params["EXTERNAL"] == "TRUE" and params["classification"] == "parquet"  # the rest kept

    report = write(moto_backend, uri, {"": [ROWS_B]}, table=f"{database}.flat", catalog=glue)
    table = glue_client.get_table(DatabaseName=database, Name="flat")["Table"]
    assert report.catalog.updated == ("",)
    assert stats_of({"Parameters": table["Parameters"]}) == (3, 20, 5)
    assert table["StorageDescriptor"]["Location"] == uri and table["PartitionKeys"] == []
    assert partitions(glue_client, database, "flat") == {}


class RefusingClient:
    """A Glue client that refuses BatchCreatePartition (all of it, or some partitions) and passes the rest."""

    def __init__(self, real: Any, *, refuse_values: set[str] | None = None):
        self._real = real
        self.meta = real.meta
        self.refuse_values = refuse_values

    def batch_create_partition(self, **params: Any) -> Any:
        if self.refuse_values is None:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not allowed to create partitions"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "BatchCreatePartition")
        keep = [p for p in params["PartitionInputList"] if p["Values"][0] not in self.refuse_values]
        response = self._real.batch_create_partition(**{**params, "PartitionInputList": keep}) if keep else {}
        errors = list(response.get("Errors") or [])
        errors += [{"PartitionValues": [v], "ErrorDetail": {"ErrorCode": "ResourceNumberLimitExceededException",
                                                            "ErrorMessage": "too many partitions"}}
                   for v in sorted(self.refuse_values)]
        return {"Errors": errors}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_catalog_refusal_leaves_data_committed_and_sync_repairs_it(moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    create_table(glue_client, database, "t", uri)
    refusing = GlueCatalog(client=RefusingClient(glue._client), retry=moto_backend.options.retry)

    with pytest.raises(CatalogRegistrationError) as caught:
        write(moto_backend, uri, {"dt=1": [ROWS_A], "dt=2": [ROWS_B]}, table=f"{database}.t", catalog=refusing)

    err = caught.value
    assert err.not_registered == ("dt=1", "dt=2") and err.not_updated == ()
    assert err.report is not None and err.report.outcome is CommitOutcome.COMMITTED and err.report.files == 2
    message = str(err)
    assert "data is committed" in message and "dt=1, dt=2" in message and "AccessDenied" in message
    assert f"mpcommit catalog sync {uri} --table {database}.t" in message
    # Nothing was rolled back: both files are visible; the catalog has nothing.
    assert len(visible_keys(moto_backend.client, bucket, "t")) == 2
    assert partitions(glue_client, database, "t") == {}

    result = sync(uri, table=f"{database}.t", catalog=glue, s3=moto_backend.options)

    assert result.created == ("dt=1", "dt=2")
    found = partitions(glue_client, database, "t")
    assert stats_of(found["1"]) == (1, 8, 2) and stats_of(found["2"]) == (1, 4, 1)
    assert found["1"]["Parameters"]["mpcommit.lastJobId"] == err.report.job_id


def test_partial_refusal_of_an_append_is_repaired_without_counting_twice(moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    create_table(glue_client, database, "t", uri)
    write(moto_backend, uri, {"dt=1": [ROWS_A]}, table=f"{database}.t", catalog=glue)
    refusing = GlueCatalog(client=RefusingClient(glue._client, refuse_values={"2"}), retry=moto_backend.options.retry)

    with pytest.raises(CatalogRegistrationError) as caught:
        write(moto_backend, uri, {"dt=1": [ROWS_B], "dt=2": [ROWS_B], "dt=3": [ROWS_B]}, table=f"{database}.t",
              catalog=refusing)

    err = caught.value
    assert err.not_registered == ("dt=2",)
    assert "too many partitions" in err.reasons["dt=2"] and "dt=2" in str(err)
    assert err.result is not None and err.result.updated == ("dt=1",) and err.result.created == ("dt=3",)
    assert stats_of(partitions(glue_client, database, "t")["1"]) == (2, 12, 3)

    # Twice, as an operator might: the second run changes nothing.
    first = sync(uri, table=f"{database}.t", catalog=glue, s3=moto_backend.options)
    again = sync(uri, table=f"{database}.t", catalog=glue, s3=moto_backend.options)

    assert first.created == ("dt=2",) and set(first.unchanged) == {"dt=1", "dt=3"}
    assert again.created == () and set(again.unchanged) == {"dt=1", "dt=2", "dt=3"}
    found = partitions(glue_client, database, "t")
    assert stats_of(found["1"]) == (2, 12, 3)  # not 3 files: the append was counted once
    assert stats_of(found["2"]) == (1, 4, 1) and stats_of(found["3"]) == (1, 4, 1)


def test_a_table_that_does_not_exist_is_a_clear_error_after_the_commit(moto_backend, glue, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"

    with pytest.raises(CatalogRegistrationError) as caught:
        write(moto_backend, uri, {"dt=1": [ROWS_A]}, table=f"{database}.missing", catalog=glue)

    err = caught.value
    assert isinstance(err.__cause__, TableNotFoundError)
    assert f"{database}.missing does not exist" in str(err) and "dt=1" in str(err)
    assert f"mpcommit catalog sync {uri} --table {database}.missing" in str(err)
    assert err.report.outcome is CommitOutcome.COMMITTED
    assert len(visible_keys(moto_backend.client, bucket, "t")) == 1


def test_partition_columns_that_do_not_match_the_table_are_refused(moto_backend, glue, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    create_table(glue_client, database, "t", uri, partition_keys=("dt", "country"))

    with pytest.raises(CatalogRegistrationError) as caught:
        write(moto_backend, uri, {"dt=1": [ROWS_A]}, table=f"{database}.t", catalog=glue)

    err = caught.value
    assert isinstance(err.__cause__, PartitionColumnsMismatchError)
    assert "partitioned by (dt, country)" in str(err) and "'dt=1'" in str(err)
    assert err.not_registered == ("dt=1",)
    assert partitions(glue_client, database, "t") == {}
    assert len(visible_keys(moto_backend.client, bucket, "t")) == 1


def test_a_table_located_elsewhere_is_refused(glue, glue_client, database):
    create_table(glue_client, database, "t", "s3://other-bucket/t")
    registration = Registration("s3://bucket/t", "job", RegistrationMode.APPEND, {"dt=1": PartitionStats(1, 1, 1)})
    with pytest.raises(TableLocationMismatchError, match="located at s3://other-bucket/t"):
        glue.register(TableName(database, "t"), registration)
    assert partitions(glue_client, database, "t") == {}


class CountingClient:
    """Counts calls per operation, can fail the first ``throttle`` calls of one with ThrottlingException, and
    pages GetPartitions by ``page`` partitions (moto answers with one page)."""

    def __init__(self, real: Any, *, throttle: tuple[str, int] | None = None, page: int = 40):
        self._real = real
        self.meta = real.meta
        self.calls: dict[str, list[dict[str, Any]]] = {}
        self._throttle = dict([throttle]) if throttle else {}
        self._page = page

    def _get_partitions(self, **params: Any) -> Any:
        token = int(params.pop("NextToken", "0"))
        params.pop("MaxResults", None)
        everything = [p for page in self._real.get_paginator("get_partitions").paginate(**params)
                      for p in page["Partitions"]]
        answer: dict[str, Any] = {"Partitions": everything[token : token + self._page]}
        if token + self._page < len(everything):
            answer["NextToken"] = str(token + self._page)
        return answer

    def __getattr__(self, name: str) -> Any:
        method = self._get_partitions if name == "get_partitions" else getattr(self._real, name)

        def call(**params: Any) -> Any:
            self.calls.setdefault(name, []).append(params)
            if self._throttle.get(name, 0) > 0:
                self._throttle[name] -= 1
                raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                                   "ResponseMetadata": {"HTTPStatusCode": 400}}, name)
            return method(**params)
        return call


def test_batches_respect_the_api_limits_and_throttling_is_retried(moto_backend, glue, glue_client, database):
    create_table(glue_client, database, "t", "s3://bucket/t")
    counting = CountingClient(glue._client, throttle=("batch_create_partition", 1))
    catalog = GlueCatalog(client=counting, retry=moto_backend.options.retry)
    stats = {f"dt={i:03d}": PartitionStats(1, 10, 2) for i in range(130)}

    result = catalog.register(TableName(database, "t"), Registration("s3://bucket/t", "job-1", RegistrationMode.APPEND, stats))

    assert len(result.created) == 130 and result.ok
    creates = counting.calls["batch_create_partition"]
    assert [len(c["PartitionInputList"]) for c in creates] == [100, 100, 30]  # the first was throttled, then retried
    assert len(partitions(glue_client, database, "t")) == 130

    # A static overwrite with none of them: every partition, read across pages, is dropped, 25 per call.
    result = catalog.register(TableName(database, "t"), Registration("s3://bucket/t", "job-2", RegistrationMode.OVERWRITE, {}))
    assert len(result.dropped) == 130
    assert [c.get("NextToken") for c in counting.calls["get_partitions"]] == [None, "40", "80", "120"]
    assert [len(c["PartitionsToDelete"]) for c in counting.calls["batch_delete_partition"]] == [25] * 5 + [5]
    assert partitions(glue_client, database, "t") == {}


def test_a_malformed_table_or_a_catalog_without_table_is_refused_before_the_commit(moto_backend, glue):
    from mpcommit import Job
    from mpcommit.errors import UsageError

    bucket = moto_backend.new_bucket()
    job = Job.create(f"s3://{bucket}/t", s3=moto_backend.options)
    with job.spec.task(0, 0) as task:
        with task.create(partition="dt=1", ext="txt") as out:
            out.write(b"x\n")
        result = task.commit()

    from mpcommit.catalog import commit_registered

    with pytest.raises(UsageError, match="db.table"):
        commit_registered(job, [result], table="orders", catalog=glue)
    with pytest.raises(UsageError, match="neither a Catalog"):
        commit_registered(job, [result], table="db.orders", catalog="hive")
    assert visible_keys(moto_backend.client, bucket, "t") == set()  # nothing committed, the job still can be
    assert job.commit([result]).files == 1


class StuckPagesClient(CountingClient):
    """GetPartitions hands back the same NextToken for ever (a broken catalog, or a proxy replaying a page)."""

    def _get_partitions(self, **params: Any) -> Any:
        if len(self.calls["get_partitions"]) > 50:
            raise AssertionError("asked for the same page 50 times: the listing never ends")
        return {"Partitions": [], "NextToken": "same-token"}


def test_a_partition_listing_whose_token_never_advances_fails_instead_of_hanging(moto_backend, glue, glue_client,
                                                                                database):
    """I8 for the catalog: a static overwrite lists every partition; a NextToken handed back twice is an error
    that names the table, after two pages, and nothing is registered from it."""
    from mpcommit.catalog.base import CatalogError

    create_table(glue_client, database, "t", "s3://bucket/t")
    stuck = StuckPagesClient(glue._client)
    catalog = GlueCatalog(client=stuck, retry=moto_backend.options.retry)
    with pytest.raises(CatalogError, match="NextToken 'same-token' twice"):
        catalog.register(TableName(database, "t"), Registration("s3://bucket/t", "job-1", RegistrationMode.OVERWRITE, {}))
    assert len(stuck.calls["get_partitions"]) == 2
    assert "batch_delete_partition" not in stuck.calls
