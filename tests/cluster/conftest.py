"""One standalone Spark cluster for the whole test session: a master on 127.0.0.1 and three workers on 127.0.0.2-4
(two cores and 1 GiB each; executors of 512 MiB), started on first use and shared by every cluster test.

Its processes log under one directory, which is removed at the end of a session where every test passed and
kept (its path printed) when one failed: master.log, worker-N.log, worker-N/app-*/N/stderr (the executors'
logs, Python tracebacks included), apps/NAME/driver.log and apps/NAME/events (Spark's event logs).

The tests talk to S3 on LocalStack (the closest here to S3: initiation-time Last-Modified, NoSuchUpload for
parts of aborted uploads), or on moto when ``MPCOMMIT_TEST_BACKENDS`` leaves LocalStack out.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import Backend, selected_backends
from tests.support.spark_cluster import StandaloneCluster


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and "spark_cluster" in getattr(item, "fixturenames", ()):
        item.session.stash[_FAILED] = True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark_cluster(request: pytest.FixtureRequest) -> Iterator[StandaloneCluster]:
    root = Path(tempfile.mkdtemp(prefix="mpcommit-cluster-"))
    cluster = StandaloneCluster(root, workers=3, cores=2, memory="1g")
    try:
        cluster.start()
        yield cluster
    finally:
        keep = request.session.stash.get(_FAILED, False)
        cluster.stop(keep=keep)
        if keep:
            print(f"\nSpark cluster logs kept in {root}")


@pytest.fixture
def cluster(spark_cluster: StandaloneCluster) -> StandaloneCluster:
    """The session's cluster with every worker alive (a test before may have killed one)."""
    spark_cluster.ensure_workers()
    return spark_cluster


@pytest.fixture(scope="session")
def cluster_backend(request: pytest.FixtureRequest) -> Backend:
    name = "localstack" if "localstack" in selected_backends() else "moto"
    return request.getfixturevalue(f"_{name}_backend_session")
