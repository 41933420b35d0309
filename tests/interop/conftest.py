"""Fixtures for the interop tests: Spark's own readers and writers on ``s3a://`` against the test servers.

Hadoop's S3A jars come from ``make s3a-install`` (s3a/install.sh). Without them every test here is skipped with
a message naming the missing jars -- or fails, under ``CI=true``, where a skip would hide that nothing ran.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Backend, selected_backends
from tests.support.servers import GO_SERVERS
from tests.support.spark_s3a import point_bucket_at, s3a_jars_problem, session_has_s3a, spark_session


def require_s3a_jars() -> None:
    """Skip (fail under CI=true) when the S3A jars cannot be used, saying which are missing and how to get them."""
    problem = s3a_jars_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI=true: the s3a tests must run, not skip)", pytrace=False)
    pytest.skip(problem)


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


def on_backends(values: list[Any], *, moto: tuple[Any, ...] = (), go: tuple[Any, ...] = ()) -> list[Any]:
    """Parameters ``(backend name, value)`` for ``@pytest.mark.parametrize("s3a_backend,...", ..., indirect=
    ["s3a_backend"])``: every value on LocalStack, the main target, and those in ``moto`` on moto too. moto serves
    from the test process itself, where every request of Spark's S3A client competes with the driver for the
    GIL: the same case takes several times longer there, so moto runs a few cases, not the matrix. Those in
    ``go`` run on the Go servers selected too (versitygw in `make test`): S3A against an S3 written apart from
    both emulators, a case or two, since each is a Spark job."""
    cases = [("localstack", v) for v in values] + [("moto", v) for v in values if v in moto]
    cases += [(name, v) for name in GO_SERVERS for v in values if v in go]
    marks = {"localstack": (pytest.mark.localstack,), "moto": (), "versitygw": (pytest.mark.versitygw,),
             "seaweedfs": (pytest.mark.seaweedfs,)}
    return [pytest.param(name, v, marks=marks[name], id=f"{name}-{v}" if v != "" else name) for name, v in cases
            if name in selected_backends()]


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
