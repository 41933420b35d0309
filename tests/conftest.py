"""Shared fixtures: real S3 backends for every test.

Backends (all speak S3 over HTTP on 127.0.0.1):
- ``moto``: moto's server (:class:`mpcommit.demo.embedded_s3.EmbeddedS3Server`) in a process of its own, started once
  per session (in this process it would share the interpreter lock with the tests' threads).
- ``localstack``: LocalStack 4.13.1 as a host process on a free port, started by the harness on first use
  (``localstack/start.sh``; its log is ``localstack/state/PORT/localstack.log``) and stopped at session end.
- ``versitygw``, ``seaweedfs``: S3 servers written in Go (independent of the two Python emulators), built once per
  machine by ``s3servers/install.sh`` (``make versitygw-install`` / ``make seaweedfs-install``) and started per
  session on free ports by ``s3servers/start.sh`` (:func:`tests.support.servers.start_go_server`). Not built: their
  tests skip and say how to build them -- except under ``CI=true``, where that fails the run.

Fixtures:
- ``backend``: parametrized over the selected backends (ids ``moto`` / ``localstack`` / ``versitygw`` /
  ``seaweedfs``; each server's case carries its marker, so ``-m "not localstack"`` leaves LocalStack out). The Go
  servers join only in the tiers of :data:`GO_SERVER_TIERS` and never in a test that runs Spark: see the README.
- ``server_backend``: as ``backend``, without moto: the servers that run as processes of their own.
- ``moto_backend``, ``localstack_backend``, ``versitygw_backend``, ``seaweedfs_backend``: one backend each;
  ``moto_in_process_backend``: moto in this process, for a test that patches moto's own classes.
- ``bucket``: a fresh bucket on ``backend``.
- ``pyarrow_fs``: a ``pyarrow.fs.S3FileSystem`` on ``backend``, an independent C++ client to read data back.
- ``spark``: the SparkSession every Spark test shares, made once (a JVM start costs about ten seconds) by
  :func:`tests.support.spark_s3a.spark_session`: master ``local[2,3]``, two cores and up to three attempts per
  task, so that a failed or killed attempt is retried as on a cluster. Tests that need another master run in a
  subprocess: a process holds one SparkContext.

``MPCOMMIT_TEST_BACKENDS`` (default ``moto,localstack,versitygw``) restricts the backends, e.g.
``MPCOMMIT_TEST_BACKENDS=moto`` for a quick run without a server process, or adds SeaweedFS
(``moto,localstack,versitygw,seaweedfs``); tests that ask for a backend left out are then skipped.
"""

from __future__ import annotations

import os

# gRPC (the Spark Connect client) installs fork handlers; a fork that runs Python before its exec -- PySpark's
# launch of a session's JVM passes a preexec_fn -- then runs them in the child, which died in CI ("epoll_wait error:
# Bad file descriptor", JAVA_GATEWAY_EXITED for 121 Spark tests of the worker that had run the Connect tests first).
# The tests only fork to exec; gRPC documents turning its fork support off for that. Before anything imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.backends import (
    ACCESS_KEY_ID,
    BACKENDS_ENV,
    GO_SERVER_TIERS,
    REGION,
    SECRET_ACCESS_KEY,
    SPARK_BATCH_ROWS,
    Backend,
    make_backend,
    selected_backends,
)
from tests.support.servers import GO_SERVERS, ServerHandle, go_server_problem, start_go_server, start_localstack, start_moto
from tests.support.spark_s3a import spark_session
from tests.support.spark_tables import door_missing


# -- hooks -----------------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    selected_backends()  # fail early on a bad MPCOMMIT_TEST_BACKENDS
    selected_tier()


_LEFT_OUT = pytest.StashKey[tuple[str, int]]()  # (tier, tests left out), where collected


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    tier = selected_tier()
    if tier == "all":
        return
    # Under pytest-xdist the workers collect, and this process does not know how many they left out.
    count = config.stash.get(_LEFT_OUT, (tier, None))[1]
    other = "the long tier (make test-long runs it)" if tier == "ci" else "the CI tier (make test runs it)"
    terminalreporter.write_line(f"{TIER_ENV}={tier}: " + (f"{count} tests of {other} were left out" if count
                                                           is not None else f"{other} was left out"))


#: Tests that share a costly process started once per test session -- the standalone cluster, the Connect server --
#: run in one pytest-xdist worker per folder (``make test`` runs two workers), so that each process starts once.
SHARED_PROCESS_FOLDERS = ("tests/cluster/", "tests/connect/")


def _start_order(item: pytest.Item) -> int:
    if item.nodeid.startswith("tests/connect/"):
        return 3  # last: by then its worker has started its own Spark JVM, before any gRPC thread could be forked
    if item.nodeid.startswith(SHARED_PROCESS_FOLDERS):
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's load scheduling, each test a unit of its own but the tests of a shared-process folder one unit.
    (Not ``--dist loadgroup``: its groups ride on rewritten node ids, which pytest 9.2 no longer lets a plugin set.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SharedProcessScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((folder for folder in SHARED_PROCESS_FOLDERS if nodeid.startswith(folder)), nodeid)

    return SharedProcessScheduling(config, log)


#: Which tests a run takes: ``ci`` (``make test``, the CI gate) leaves out the long tier, ``long``
#: (``make test-long``) runs only it, ``all`` both. The long tier: tests marked ``long`` -- the soak, the extra seeds
#: of randomized trials, listings of thousands of keys on servers other than the one they are about -- and the
#: other servers' cases of a slow scenario marked ``ci_on(server, ...)``, which CI runs on the servers named.
TIER_ENV = "MPCOMMIT_TIER"
TIERS = ("ci", "long", "all")


def selected_tier() -> str:
    tier = os.environ.get(TIER_ENV, "ci").strip().lower() or "ci"
    if tier not in TIERS:
        raise pytest.UsageError(f"{TIER_ENV}={tier!r}: choose among {', '.join(TIERS)}")
    return tier


def _server_of(item: pytest.Item) -> tuple[str | None, tuple[Any, ...]]:
    """The server a case runs on (its backend parameter) and its other parameters, by which its siblings on other
    servers are found."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None, ()
    name = next((n for n in ("backend", "server_backend", "s3a_backend", "backend_name", "server")
                 if n in callspec.params), None)
    others = tuple(sorted((k, repr(v)) for k, v in callspec.params.items() if k != name))
    return (callspec.params[name] if name else None), others


def long_tier(items: list[pytest.Item]) -> set[str]:
    """The node ids of the long tier among ``items``: those marked ``long``, and each case of a ``ci_on`` scenario
    on a server not named -- only where the same case (its other parameters equal) runs on a server named, so that
    CI never loses a case, and with MPCOMMIT_TEST_BACKENDS=moto the moto cases stay."""
    long = {item.nodeid for item in items if item.get_closest_marker("long") is not None}
    on_ci_servers: set[tuple[Any, ...]] = set()
    for item in items:
        marker = item.get_closest_marker("ci_on")
        server, others = _server_of(item)
        if marker is not None and server in marker.args:
            on_ci_servers.add((item.originalname, item.path, others))  # type: ignore[attr-defined]
    for item in items:
        marker = item.get_closest_marker("ci_on")
        server, others = _server_of(item)
        if (marker is not None and server is not None and server not in marker.args
                and (item.originalname, item.path, others) in on_ci_servers):  # type: ignore[attr-defined]
            long.add(item.nodeid)
    return long


#: Folders whose server-parametrized tests are about mpcommit's own logic -- the commit protocol, its order, its
#: faults, compaction, the Spark doors -- which the store does not change: CI runs each of their cases on
#: :data:`CI_SERVER` (the integration tests' real server) and the long tier runs it on the others. The folders
#: about the stores themselves (tests/stores, tests/store, tests/interop, tests/cli, the root's) run every server in
#: CI; so does a test marked ``every_server_in_ci``, or one that names its servers with ``ci_on``.
ONE_SERVER_FOLDERS = ("tests/protocol/", "tests/compaction/", "tests/reliability/", "tests/spark/")
CI_SERVER = "localstack"


def _one_server_in_ci(items: list[pytest.Item]) -> None:
    for item in items:
        if (item.nodeid.startswith(ONE_SERVER_FOLDERS) and item.get_closest_marker("ci_on") is None
                and item.get_closest_marker("every_server_in_ci") is None and _server_of(item)[0] is not None):
            item.add_marker(pytest.mark.ci_on(CI_SERVER))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = selected_tier()
    _one_server_in_ci(items)
    if tier != "all":
        long = long_tier(items)
        kept = [item for item in items if (item.nodeid in long) == (tier == "long")]
        left_out = [item for item in items if (item.nodeid in long) != (tier == "long")]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = kept
        config.stash[_LEFT_OUT] = (tier, len(left_out))
    # Longest first, so that two workers end together rather than one running a two-minute test alone at the end:
    # the shared-process folders (each one unit of several minutes for the scheduler below), then tests marked slow.
    items.sort(key=_start_order)
    # Tests that use a server directly get its marker too, so that -m "not localstack" leaves them out.
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for server in ("localstack", *GO_SERVERS):
            if {f"{server}_backend", f"{server}_server"} & names:
                item.add_marker(getattr(pytest.mark, server))
    # The doors a PySpark lacks skip, saying why (the support matrix's 3.5 rows: no data source; 4.0: no stream sink).
    for marker in ("pyspark4", "stream_sink"):
        missing = door_missing(marker)
        if missing is not None:
            for item in items:
                if item.get_closest_marker(marker) is not None:
                    item.add_marker(pytest.mark.skip(reason=missing))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``backend``'s parameters: the selected backends, the Go servers only in :data:`GO_SERVER_TIERS` and never
    beside Spark (a Spark job tests mpcommit's engine binding, which the store does not change)."""
    for fixture in ("backend", "server_backend"):
        if fixture not in metafunc.fixturenames:
            continue
        names = [name for name in selected_backends()
                 if (name not in GO_SERVERS or runs_on_go_servers(metafunc.definition.path, metafunc.fixturenames))
                 and (fixture == "backend" or name != "moto")]
        metafunc.parametrize(fixture, [pytest.param(name, marks=_SERVER_MARKS[name], id=name) for name in names],
                             indirect=True)


def runs_on_go_servers(path: Any, fixturenames: Any) -> bool:
    """Whether a test in file ``path`` using these fixtures runs on the Go servers too (its tier, no Spark)."""
    tests = Path(__file__).resolve().parent
    try:
        rel = Path(path).resolve().relative_to(tests)
    except ValueError:
        return False
    where = {"" if len(rel.parts) == 1 else rel.parts[0], rel.as_posix()}
    return bool(where & GO_SERVER_TIERS) and not {"spark", "s3a_spark"} & set(fixturenames)


# -- servers (session) -----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto_server() -> Iterator[ServerHandle]:
    handle = start_moto()
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def moto_in_process_server() -> Iterator[ServerHandle]:
    """moto in this process, for the tests that patch its classes (the trials' atomic conditional writes)."""
    handle = start_moto(in_process=True)
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


def _go_server(name: str) -> Iterator[ServerHandle]:
    if name not in selected_backends():
        pytest.skip(f"{name} is not in {BACKENDS_ENV}")
    problem = go_server_problem(name)
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{problem} (CI=true: the {name} tests must run, not skip)", pytrace=False)
        pytest.skip(problem)
    handle = start_go_server(name)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def versitygw_server() -> Iterator[ServerHandle]:
    """versitygw over a temporary folder on free ports; only started when a test needs it."""
    yield from _go_server("versitygw")


@pytest.fixture(scope="session")
def seaweedfs_server() -> Iterator[ServerHandle]:
    """SeaweedFS (master, volume, filer and S3 in one process) on free ports; only started when a test needs it."""
    yield from _go_server("seaweedfs")


@pytest.fixture(scope="session")
def _moto_backend_session(moto_server: ServerHandle) -> Backend:
    return make_backend("moto", moto_server)


@pytest.fixture(scope="session")
def _moto_in_process_backend_session(moto_in_process_server: ServerHandle) -> Backend:
    return make_backend("moto", moto_in_process_server)


@pytest.fixture(scope="session")
def _localstack_backend_session(localstack_server: ServerHandle) -> Backend:
    return make_backend("localstack", localstack_server)


@pytest.fixture(scope="session")
def _versitygw_backend_session(versitygw_server: ServerHandle) -> Backend:
    return make_backend("versitygw", versitygw_server)


@pytest.fixture(scope="session")
def _seaweedfs_backend_session(seaweedfs_server: ServerHandle) -> Backend:
    return make_backend("seaweedfs", seaweedfs_server)


# -- backends --------------------------------------------------------------------------------------------------


_SERVER_MARKS: dict[str, tuple[Any, ...]] = {
    "moto": (), "localstack": (pytest.mark.localstack,),
    "versitygw": (pytest.mark.versitygw,), "seaweedfs": (pytest.mark.seaweedfs,),
}


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    """One of the selected backends, per :func:`pytest_generate_tests`."""
    return request.getfixturevalue(f"_{request.param}_backend_session")


@pytest.fixture
def server_backend(request: pytest.FixtureRequest) -> Backend:
    """One of the selected backends that runs as a server process of its own (all but moto): real Initiated times
    and ListMultipartUploads paged at 1,000 (moto reports every upload as initiated in 2010 and never pages)."""
    return request.getfixturevalue(f"_{request.param}_backend_session")


@pytest.fixture
def moto_backend(_moto_backend_session: Backend) -> Backend:
    return _moto_backend_session


@pytest.fixture
def moto_in_process_backend(_moto_in_process_backend_session: Backend) -> Backend:
    return _moto_in_process_backend_session


@pytest.fixture
def localstack_backend(_localstack_backend_session: Backend) -> Backend:
    return _localstack_backend_session


@pytest.fixture
def versitygw_backend(_versitygw_backend_session: Backend) -> Backend:
    return _versitygw_backend_session


@pytest.fixture
def seaweedfs_backend(_seaweedfs_backend_session: Backend) -> Backend:
    return _seaweedfs_backend_session


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
