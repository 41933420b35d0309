"""The S3 servers as a test sees them: which are selected (``MPCOMMIT_TEST_BACKENDS``), a :class:`Backend` per
server (mpcommit's options and an independent raw boto3 client), and the parameters of tests that pick their own
servers. The fixtures that start the servers are in tests/conftest.py; this is the library they and tests share.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.config import Config

from mpcommit.options import RetryPolicy, S3Options
from tests.support.checks import unencoded_listings
from tests.support.servers import GO_SERVERS, ServerHandle

BACKENDS_ENV = "MPCOMMIT_TEST_BACKENDS"
#: Rows per Arrow batch handed to a Spark task's Python worker; small, so that tasks see several batches.
SPARK_BATCH_ROWS = 1000
ALL_BACKENDS = ("moto", "localstack", "versitygw", "seaweedfs")
#: What ``make test`` runs on: SeaweedFS's first build takes about 25 minutes of CPU, beyond the suite's budget.
DEFAULT_BACKENDS = ("moto", "localstack", "versitygw")
#: Where ``backend`` tests run on the Go servers too: folders under tests/ ("" for the files directly in it) and
#: single files. The rest (spark, catalog, connect, cluster, most of reliability) stay on moto and LocalStack, where
#: they test mpcommit's own logic rather than the store; the fault matrix and tests/interop pick their own subsets.
#: reliability's table-order, concurrency and interrupted-commit tests are here: they rest on conditional writes;
#: so are the commit window's and the transient faults' tests, through the one proxy (tests/support/s3_network.py,
#: which keeps the client's SigV4 signature valid): how a store answers a re-sent complete, delete or abort is the
#: store's behaviour.
GO_SERVER_TIERS = frozenset({"", "protocol", "compaction", "cli", "stores", "reliability/test_table_order.py",
                             "reliability/test_concurrency.py", "reliability/test_interrupted_commit.py",
                             "reliability/test_commit_window.py", "reliability/test_transient_faults.py",
                             "reliability/test_fences.py", "reliability/test_table_scope.py"})

ACCESS_KEY_ID = "test"
SECRET_ACCESS_KEY = "test"
REGION = "us-east-1"
#: Retries fast enough for tests (the defaults back off for up to minutes).
FAST_RETRY = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.2)


def selected_backends() -> list[str]:
    raw = os.environ.get(BACKENDS_ENV, ",".join(DEFAULT_BACKENDS))
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

    name: str  # "moto" | "localstack" | "versitygw" | "seaweedfs"
    endpoint_url: str
    options: S3Options  # for mpcommit: test/test credentials, us-east-1, FAST_RETRY
    client: Any = field(repr=False)  # raw boto3 S3 client for assertions
    server: ServerHandle | None = field(default=None, repr=False)

    def new_bucket(self, prefix: str = "mpc-test") -> str:
        """Create a uniquely named bucket and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        self.client.create_bucket(Bucket=name)
        return name


def make_backend(name: str, server: ServerHandle) -> Backend:
    options = S3Options(
        endpoint_url=server.endpoint_url,
        region=REGION,
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        retry=FAST_RETRY,
    )
    return Backend(name, server.endpoint_url, options, raw_s3_client(server.endpoint_url), server)


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
