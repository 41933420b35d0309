"""A real catalog on S3 locations: the Spark session catalog with Hive support (embedded Derby metastore) and an
external table located on ``s3a://``. ``mpcommit.spark.write(..., table=)`` registers the committed partitions;
``spark.table`` and ``SHOW PARTITIONS`` then give exactly the committed rows and partitions. The session runs in a
subprocess (tests/interop/hive_s3a_check.py): Hive support needs a JVM of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import Backend
from tests.support.spark_s3a import require_s3a_jars
from tests.support.checks import pending_uploads

pytestmark = [pytest.mark.spark, pytest.mark.s3a, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def observed(localstack_backend: Backend, tmp_path: Path) -> dict[str, Any]:
    """What the Hive session saw, on LocalStack only: the subprocess's JVM and metastore cost about two minutes
    per backend on a busy machine, and the catalog's S3 side is the same on moto."""
    backend = localstack_backend
    pytest.importorskip("pyspark")
    require_s3a_jars()
    bucket = backend.new_bucket("mpc-hive")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "tests.interop.hive_s3a_check", str(tmp_path), backend.endpoint_url,
                           bucket], cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    result["bucket"], result["client"] = bucket, backend.client
    return result


@pytest.mark.long
def test_a_write_with_table_registers_its_partitions_in_hive_on_s3a(observed: dict[str, Any]) -> None:
    assert observed["catalogImplementation"] == "hive"
    first = observed["first"]
    expected_partitions = ["dt=2024-01-01/n=0", "dt=2024-01-01/n=1", "dt=50%25 off/n=0", "dt=50%25 off/n=1",
                           "dt=__HIVE_DEFAULT_PARTITION__/n=0", "dt=__HIVE_DEFAULT_PARTITION__/n=1",
                           "dt=a%2Fb%3Ac/n=0", "dt=a%2Fb%3Ac/n=1"]
    assert first["committed_partitions"] == expected_partitions
    assert first["show_partitions"] == expected_partitions
    assert first["table"] == first["written"]

    second = observed["second"]
    assert second["show_partitions"] == expected_partitions
    kept = [row for row in first["written"] if (row[2], row[3]) != ("2024-01-01", 0)]
    assert second["table"] == sorted(kept + second["written"], key=repr)
    assert second["partition_location"] == f"s3a://{observed['bucket']}/events/dt=a%2Fb%3Ac/n=1"
    assert pending_uploads(observed["client"], observed["bucket"], "events") == []


# Long tier: the Hive session behind ``observed`` costs about 110 s of a CI run (2026-11-28); the same route runs in
# CI through the session catalog (tests/spark/test_datasource_sql.py, option table).
@pytest.mark.long
def test_a_write_naming_a_spark_table_takes_its_location_format_and_partitions(observed: dict[str, Any]) -> None:
    """The catalog route (issue 38): ``writer(df, table="db.native").mode("append").save()`` with no path, format or
    partition columns writes where ``CREATE TABLE ... USING parquet PARTITIONED BY (dt) LOCATION`` said, registers
    the partitions, and Spark reads the table natively; a write partitioned otherwise is refused before writing."""
    native = observed["native"]
    assert native["uri"] == f"s3://{observed['bucket']}/native", "the table's location (a report names s3://)"
    assert native["partitions"] == ["dt=d0", "dt=d1"] and native["show_partitions"] == ["dt=d0", "dt=d1"]
    assert native["table"] == sorted([i, f"n{i}", f"d{i % 2}"] for i in range(6))
    assert native["refused"] is not None and native["refused"].startswith(
        "PartitionColumnsMismatchError: the write is partitioned by (name), but table db.native by (dt)"), native
    assert pending_uploads(observed["client"], observed["bucket"], "native") == []
