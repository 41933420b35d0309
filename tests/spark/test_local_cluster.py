"""A write with separate executor JVMs (``local-cluster[2,1,1024]``), in a subprocess of its own: one process
holds one SparkContext, and the shared session of the other Spark tests is a ``local`` one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.spark_tables import SPARK_MARKS, assert_clean, data_keys, read_table, s3_filesystem
from tests.support.checks import read_object

pytestmark = [*SPARK_MARKS, pytest.mark.slow]

JOB = Path(__file__).with_name("local_cluster_job.py")


def test_write_with_two_executor_processes(moto_backend) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    done = subprocess.run([sys.executable, str(JOB), moto_backend.endpoint_url, bucket], capture_output=True, text=True,
                          timeout=400, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["executors"] == 2
    assert out["report"]["outcome"] == "committed" and out["report"]["rows"] == 40_000
    # Every task ran in an executor JVM, none in the driver's.
    jvms = {json.loads(read_object(moto_backend.client, bucket, f"_evidence/task-{t}.json"))["jvm"] for t in range(4)}
    assert out["driver_jvm"] not in jvms
    assert data_keys(moto_backend.client, bucket, "t") == set(out["filenames"])
    table = read_table(s3_filesystem(moto_backend.endpoint_url), bucket, "t", partitions=pa.schema([("k", pa.string())]))
    assert sorted(table.column("id").to_pylist()) == list(range(40_000))
    assert_clean(moto_backend.client, bucket, "t")
