"""Fixtures for catalog tests: the Glue Data Catalog of the session's moto server (moto serves every service
on one port), a fresh database per test, and a helper that writes a job through mpcommit's public API."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import boto3
import pytest

from mpcommit import Job
from mpcommit.catalog import GlueCatalog
from tests.conftest import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, Backend

#: A Hive-style Parquet table's storage, as Athena or Spark would create it.
PARQUET_SD = {
    "Columns": [{"Name": "id", "Type": "bigint"}, {"Name": "name", "Type": "string"}],
    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
    "SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
                  "Parameters": {"serialization.format": "1"}},
    "Compressed": False,
}


def raw_glue_client(endpoint_url: str) -> Any:
    """A plain boto3 Glue client, independent of mpcommit's, for setting up and checking the catalog."""
    return boto3.session.Session(aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY,
                                 region_name=REGION).client("glue", endpoint_url=endpoint_url)


# Session-scoped: building a boto3 client loads Glue's service model, which costs about a second.
@pytest.fixture(scope="session")
def glue_client(_moto_backend_session: Backend) -> Any:
    return raw_glue_client(_moto_backend_session.endpoint_url)


@pytest.fixture(scope="session")
def glue(_moto_backend_session: Backend) -> GlueCatalog:
    """mpcommit's Glue catalog on the moto server."""
    return GlueCatalog(_moto_backend_session.options, endpoint_url=_moto_backend_session.endpoint_url)


@pytest.fixture
def database(glue_client: Any) -> Iterator[str]:
    """A fresh Glue database (moto's state is shared by the whole test session)."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    glue_client.create_database(DatabaseInput={"Name": name})
    yield name
    try:
        glue_client.delete_database(Name=name)
    except Exception:  # noqa: BLE001 - best effort
        pass


def create_table(client: Any, database: str, name: str, location: str, *, partition_keys: Sequence[str] = ("dt",),
                 parameters: Mapping[str, str] | None = None) -> None:
    sd = {**PARQUET_SD, "Location": location}
    client.create_table(DatabaseName=database, TableInput={
        "Name": name, "TableType": "EXTERNAL_TABLE", "StorageDescriptor": sd,
        "PartitionKeys": [{"Name": k, "Type": "string"} for k in partition_keys],
        "Parameters": {"EXTERNAL": "TRUE", "classification": "parquet", **(parameters or {})},
    })


def partitions(client: Any, database: str, table: str) -> dict[str, dict[str, Any]]:
    """Every partition of a table, keyed by "v1/v2", straight from Glue."""
    out: dict[str, dict[str, Any]] = {}
    for page in client.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=table):
        for p in page["Partitions"]:
            out["/".join(p["Values"])] = p
    return out


def stats_of(partition: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
    params = partition.get("Parameters") or {}
    def num(key: str) -> int | None:
        return int(params[key]) if key in params else None
    return num("numFiles"), num("totalSize"), num("numRows")


def write(backend: Backend, uri: str, files: Mapping[str, Sequence[bytes]], *, mode: str = "append",
          partition_overwrite: str = "static", **commit: Any) -> Any:
    """One job, one task per partition: ``files`` maps a partition path ("" for the root) to file contents
    (newline-terminated rows). Returns the commit's report; with ``table`` (and ``catalog``), committed and
    registered by :func:`mpcommit.catalog.commit_registered`, else by job.commit."""
    job = Job.create(uri, mode=mode, partition_overwrite=partition_overwrite, s3=backend.options)
    results = []
    for task_id, (partition, contents) in enumerate(sorted(files.items())):
        with job.spec.task(task_id, 0) as task:
            for data in contents:
                with task.create(partition=partition or None, ext="txt") as out:
                    out.write(data)
                    out.rows = data.count(b"\n")
            results.append(task.commit())
    if "table" in commit:
        from mpcommit.catalog import commit_registered

        return commit_registered(job, results, **commit)
    return job.commit(results, **commit)
