"""Shared fixtures: real S3 backends for every test.

Backends (both speak S3 over HTTP on 127.0.0.1):
- ``moto``: moto's server in this process (:class:`mpcommit.demo.embedded_s3.EmbeddedS3Server`), started once per session.
- ``localstack``: LocalStack 4.13.1 as a host process on a free port, started by the harness on first use
  (``localstack/start.sh``; its log is ``localstack/state/PORT/localstack.log``) and stopped at session end.

Fixtures:
- ``backend``: parametrized over the selected backends (ids ``moto`` / ``localstack``; the LocalStack case carries
  the ``localstack`` marker, so ``-m "not localstack"`` runs on moto only).
- ``moto_backend``, ``localstack_backend``: one backend each.
- ``bucket``: a fresh bucket on ``backend``.
- ``pyarrow_fs``: a ``pyarrow.fs.S3FileSystem`` on ``backend``, an independent C++ client to read data back.
- ``spark``: the SparkSession every Spark test shares, made once (a JVM start costs about ten seconds) by
  :func:`tests.support.spark_s3a.spark_session`: master ``local[2,3]``, two cores and up to three attempts per
  task, so that a failed or killed attempt is retried as on a cluster. Tests that need another master run in a
  subprocess: a process holds one SparkContext.

``MPCOMMIT_TEST_BACKENDS`` (default ``moto,localstack``) restricts the backends, e.g. ``MPCOMMIT_TEST_BACKENDS=moto``
for a quick run without LocalStack; tests that ask for ``localstack_backend`` are then skipped.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import boto3
import pytest
from botocore.config import Config

from mpcommit.options import RetryPolicy, S3Options
from tests.support.checks import unencoded_listings
from tests.support.servers import ServerHandle, start_localstack, start_moto
from tests.support.spark_s3a import spark_session

BACKENDS_ENV = "MPCOMMIT_TEST_BACKENDS"
#: Rows per Arrow batch handed to a Spark task's Python worker; small, so that tasks see several batches.
SPARK_BATCH_ROWS = 1000
ALL_BACKENDS = ("moto", "localstack")

ACCESS_KEY_ID = "test"
SECRET_ACCESS_KEY = "test"
REGION = "us-east-1"
#: Retries fast enough for tests (the defaults back off for up to minutes).
FAST_RETRY = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.2)


def selected_backends() -> list[str]:
    raw = os.environ.get(BACKENDS_ENV, ",".join(ALL_BACKENDS))
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    unknown = sorted(set(names) - set(ALL_BACKENDS))
    if unknown or not names:
        raise pytest.UsageError(f"{BACKENDS_ENV}={raw!r}: choose among {', '.join(ALL_BACKENDS)}")
    return [name for name in ALL_BACKENDS if name in names]


def raw_s3_client(endpoint_url: str) -> Any:
    """A plain boto3 S3 client (path-style, fake credentials), independent of mpcommit's own client code."""
    session = boto3.session.Session(
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY, region_name=REGION
    )
    # Listings without URL encoding: LocalStack's encoded listings lose keys past 1,000 (checks.unencoded_listings).
    return unencoded_listings(session.client(
        "s3",
        endpoint_url=endpoint_url,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=32,
            connect_timeout=10,
            read_timeout=120,
        ),
    ))


@dataclass
class Backend:
    """One S3 server as seen by a test."""

    name: str  # "moto" | "localstack"
    endpoint_url: str
    options: S3Options  # for mpcommit: test/test credentials, us-east-1, FAST_RETRY
    client: Any = field(repr=False)  # raw boto3 S3 client for assertions
    server: ServerHandle | None = field(default=None, repr=False)

    def new_bucket(self, prefix: str = "mpc-test") -> str:
        """Create a uniquely named bucket and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        self.client.create_bucket(Bucket=name)
        return name


def _make_backend(name: str, server: ServerHandle) -> Backend:
    options = S3Options(
        endpoint_url=server.endpoint_url,
        region=REGION,
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        retry=FAST_RETRY,
    )
    return Backend(name, server.endpoint_url, options, raw_s3_client(server.endpoint_url), server)


# -- hooks -----------------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    selected_backends()  # fail early on a bad MPCOMMIT_TEST_BACKENDS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests that use LocalStack directly get the marker too, so that -m "not localstack" leaves them out.
    for item in items:
        if {"localstack_backend", "localstack_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.localstack)


# -- servers (session) -----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto_server() -> Iterator[ServerHandle]:
    handle = start_moto()
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def localstack_server() -> Iterator[ServerHandle]:
    """LocalStack on a free port; only started when a test needs it."""
    if "localstack" not in selected_backends():
        pytest.skip(f"LocalStack is not in {BACKENDS_ENV}")
    handle = start_localstack()
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def _moto_backend_session(moto_server: ServerHandle) -> Backend:
    return _make_backend("moto", moto_server)


@pytest.fixture(scope="session")
def _localstack_backend_session(localstack_server: ServerHandle) -> Backend:
    return _make_backend("localstack", localstack_server)


# -- backends --------------------------------------------------------------------------------------------------


def _backend_params() -> list[Any]:
    marks = {"moto": (), "localstack": (pytest.mark.localstack,)}
    return [pytest.param(name, marks=marks[name], id=name) for name in selected_backends()]


@pytest.fixture(params=_backend_params())
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.getfixturevalue(f"_{request.param}_backend_session")


@pytest.fixture
def moto_backend(_moto_backend_session: Backend) -> Backend:
    return _moto_backend_session


@pytest.fixture
def localstack_backend(_localstack_backend_session: Backend) -> Backend:
    return _localstack_backend_session


@pytest.fixture
def bucket(backend: Backend) -> str:
    """A fresh, empty bucket on ``backend``."""
    return backend.new_bucket()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    session, created = spark_session()
    # A runtime setting: it also applies when another fixture (tests/interop's) started the session.
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(SPARK_BATCH_ROWS))
    try:
        yield session
    finally:
        if created:
            session.stop()


@pytest.fixture
def pyarrow_fs(backend: Backend) -> Any:
    """pyarrow's S3 filesystem on ``backend``: paths are ``"bucket/key"``."""
    from urllib.parse import urlsplit

    from pyarrow import fs

    netloc = urlsplit(backend.endpoint_url).netloc
    return fs.S3FileSystem(
        access_key=ACCESS_KEY_ID,
        secret_key=SECRET_ACCESS_KEY,
        region=REGION,
        scheme="http",
        endpoint_override=netloc,
        allow_bucket_creation=False,
        allow_bucket_deletion=False,
    )
