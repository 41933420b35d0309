"""Fixtures for the interop tests: Spark's own readers and writers on ``s3a://`` against the test servers.

Hadoop's S3A jars come from ``make s3a-install`` (s3a/install.sh). Without them every test here is skipped with
a message naming the missing jars -- or fails, under ``CI=true``, where a skip would hide that nothing ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.backends import Backend
from tests.support.spark_s3a import point_bucket_at, require_s3a_jars, session_has_s3a, spark_session


@pytest.fixture(scope="session")
def s3a_spark() -> Iterator[Any]:
    """The process's SparkSession, with S3A on its classpath."""
    pytest.importorskip("pyspark")
    require_s3a_jars()
    session, created = spark_session()
    if not session_has_s3a(session):
        pytest.fail("this process's Spark JVM started without the S3A jars on its classpath: every in-process "
                    "session must come from tests.support.spark_s3a.spark_session", pytrace=False)
    try:
        yield session
    finally:
        if created:
            session.stop()


@pytest.fixture
def s3a_backend(request: pytest.FixtureRequest) -> Backend:
    """The backend named by the test's ``on_backends`` parameter."""
    return request.getfixturevalue(f"_{request.param}_backend_session")


@pytest.fixture
def s3a_bucket(s3a_spark: Any, s3a_backend: Backend) -> str:
    """A fresh bucket on ``s3a_backend`` that ``s3a://`` paths in ``s3a_spark`` reach."""
    name = s3a_backend.new_bucket("mpc-s3a")
    point_bucket_at(s3a_spark, name, s3a_backend.endpoint_url)
    return name
