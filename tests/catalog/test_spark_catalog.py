"""SparkSqlCatalog against a real Hive-enabled Spark session (embedded Derby metastore), on ``file:`` locations.

Local directories keep this test free of S3 and of Hadoop's S3A jars; the same catalog with a table located on
``s3a://`` runs in tests/interop/test_catalog_on_s3a.py.
The session runs in a subprocess (tests/catalog/spark_hive_check.py): a process holds one SparkContext, and the
shared test session has no Hive support.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    workdir = tmp_path_factory.mktemp("spark-hive")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run([sys.executable, "-m", "tests.catalog.spark_hive_check", str(workdir)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    result["workdir"] = str(workdir)
    return result


def test_the_session_catalog_is_hive(observed):
    assert observed["catalogImplementation"] == "hive"


def test_new_partitions_are_added_with_their_statistics(observed):
    step = observed["add"]
    assert sorted(step["result"]["created"]) == ["dt=2024-01-01/n=1", "dt=__HIVE_DEFAULT_PARTITION__/n=3",
                                                 "dt=a%27b%3Ac/n=2"]
    assert observed["show_partitions"] == ["dt=2024-01-01/n=1", "dt=__HIVE_DEFAULT_PARTITION__/n=3", "dt=a%27b%3Ac/n=2"]
    parts = step["partitions"]
    assert parts["2024-01-01|1"]["stats"] == "300 bytes, 30 rows"
    assert parts["a'b:c|2"] == {"location": f"file:{observed['workdir']}/t/dt=a%27b%3Ac/n=2",
                                "stats": "100 bytes, 10 rows", "numRows": "10", "lastJob": "j1"}
    assert parts["__HIVE_DEFAULT_PARTITION__|3"]["stats"] == "50 bytes, 5 rows"


def test_append_adds_and_a_repeated_registration_changes_nothing(observed):
    assert observed["append"]["result"]["updated"] == ["dt=2024-01-01/n=1"]
    assert observed["append"]["partitions"]["2024-01-01|1"]["stats"] == "400 bytes, 40 rows"
    assert observed["append"]["partitions"]["a'b:c|2"]["lastJob"] == "j1"  # untouched
    assert observed["append_again"]["result"]["unchanged"] == ["dt=2024-01-01/n=1"]
    assert observed["append_again"]["partitions"]["2024-01-01|1"]["stats"] == "400 bytes, 40 rows"


def test_dynamic_overwrite_replaces_only_the_written_partition(observed):
    parts = observed["dynamic"]["partitions"]
    assert observed["dynamic"]["result"]["updated"] == ["dt=a%27b%3Ac/n=2"]
    assert parts["a'b:c|2"]["stats"] == "7 bytes, 1 rows"
    assert parts["2024-01-01|1"]["stats"] == "400 bytes, 40 rows"


def test_spark_reads_through_a_registered_partition(observed):
    assert observed["read_n1"] == 3


def test_static_overwrite_drops_the_other_partitions_but_not_their_files(observed):
    step = observed["static"]
    assert sorted(step["result"]["dropped"]) == ["dt=__HIVE_DEFAULT_PARTITION__/n=3", "dt=a%27b%3Ac/n=2"]
    assert list(step["partitions"]) == ["2024-01-01|1"]
    assert step["partitions"]["2024-01-01|1"]["stats"] == "9 bytes, 2 rows"
    assert observed["kept_dir_after_drop"] is True


def test_non_partitioned_table_statistics(observed):
    assert observed["flat_overwrite"]["stats"] == "100 bytes, 7 rows"
    assert observed["flat_overwrite"]["hive"] == {"numFiles": "2", "totalSize": "100", "numRows": "7",
                                                  "mpcommit.lastJobId": "j5", "DO_NOT_UPDATE_STATS": None}
    assert observed["flat_append"]["stats"] == "150 bytes, 10 rows"
    assert observed["flat_append"]["hive"]["numFiles"] == "3"


def test_bad_tables_are_refused_with_clear_errors(observed):
    assert observed["missing"]["error"] == "TableNotFoundError" and "db.missing does not exist" in observed["missing"]["message"]
    assert observed["mismatch"]["error"] == "PartitionColumnsMismatchError"
    assert "partitioned by (dt, n)" in observed["mismatch"]["message"]
    assert observed["elsewhere"]["error"] == "TableLocationMismatchError"
