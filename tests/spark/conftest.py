"""A SparkSession shared by every Spark test of the session (a JVM start costs about ten seconds).

Master ``local[2,3]``: two cores, and up to three attempts per task, so that a failed or killed attempt is
retried as on a cluster. Tests that need other masters (``local-cluster``) or their own session run in a
subprocess: a process holds one SparkContext.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

#: Rows per Arrow batch handed to a Python task; small, so that tasks see several batches.
BATCH_ROWS = 1000


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Workers must run this interpreter, the one the project is installed in.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("mpcommit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
