"""A SparkSession shared by every Spark test of the session (a JVM start costs about ten seconds).

Master ``local[2,3]``: two cores, and up to three attempts per task, so that a failed or killed attempt is
retried as on a cluster. Like every in-process session of the suite it comes from
:func:`tests.support.spark_s3a.spark_session`, which puts Hadoop's S3A jars on the classpath whoever starts it.
Tests that need other masters (``local-cluster``) or their own session run in a subprocess: a process holds one
SparkContext.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.spark_s3a import spark_session

#: Rows per Arrow batch handed to a Python task; small, so that tasks see several batches.
BATCH_ROWS = 1000


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session, created = spark_session()
    # A runtime setting: it also applies when another suite's fixture started the session.
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
    try:
        yield session
    finally:
        if created:
            session.stop()
