"""One Spark Connect server for the whole test session (PySpark's own, see tests/support/spark_connect.py), and a
Connect client session on it. The server reads s3a:// on the session's moto server when the S3A jars are
installed, and its Python workers find the moto endpoint and credentials in their environment, as executors
whose S3Options() come from boto3's usual sources would."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.backends import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY
from tests.support.servers import ServerHandle
from tests.support.spark_connect import (
    ConnectServer,
    client_problem,
    connect_session,
    server_problem,
    start_connect_server,
)
from tests.support.spark_s3a import s3a_jars_problem, s3a_spark_conf


@pytest.fixture(scope="session")
def connect_server(moto_server: ServerHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    problem = server_problem() or client_problem()  # no server to test against comes first (PySpark 3.5)
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {problem}")
        pytest.skip(problem)
    conf: dict[str, str] = {}
    if s3a_jars_problem() is None:
        conf = {**s3a_spark_conf(), "spark.hadoop.fs.s3a.endpoint": moto_server.endpoint_url}
    env = {"AWS_ENDPOINT_URL_S3": moto_server.endpoint_url, "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
           "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY, "AWS_DEFAULT_REGION": REGION}
    server = start_connect_server(conf=conf, env=env, log=tmp_path_factory.mktemp("spark-connect") / "server.log")
    print(f"Spark Connect server at {server.url}, started in {server.started_in:.1f} s")  # shown with -s / -rA
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def connect_spark(connect_server: ConnectServer) -> Iterator[Any]:
    """A Spark Connect session (a client: no SparkContext, no JVM in this process)."""
    with connect_session(connect_server.url) as session:
        assert type(session).__module__ == "pyspark.sql.connect.session"
        yield session
