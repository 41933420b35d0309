"""Executors whose Python lacks mpcommit: the error a user sees names the fix, and nothing is left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark_tables import SPARK_MARKS

pytestmark = [*SPARK_MARKS, pytest.mark.slow]

JOB = Path(__file__).with_name("executor_without_mpcommit_job.py")


def test_executors_without_mpcommit_get_an_error_naming_the_fix(moto_backend) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    done = subprocess.run([sys.executable, str(JOB), moto_backend.endpoint_url, bucket], capture_output=True,
                          text=True, timeout=400, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["error"] == "ExecutorEnvironmentError", out
    message = out["message"]
    assert "No module named 'mpcommit'" in message and "PYSPARK_PYTHON" in message and "spark.pyspark.python" in message
    assert sys.executable in message, "the driver's interpreter, the one that has mpcommit"
    assert "rolled back" in message and out["uploads"] == 0 and out["keys"] == []
