"""Spark on ``s3a://`` for tests and benchmarks: Hadoop's S3A jars on the JVM's classpath, S3A pointed at a test server.

PySpark's pip package ships Hadoop's client but not its S3 connector; ``s3a/install.sh`` (``make s3a-install``)
fetches hadoop-aws at PySpark's Hadoop version, the AWS SDK v2 modules it uses and spark-hadoop-cloud's commit
protocol into ``s3a/jars/``. This module puts them on the classpath and sets S3A up for LocalStack and moto.

A JVM's classpath is fixed when it starts, and a Python process starts one JVM for all its SparkContexts, so every
session the test suite builds in-process goes through :func:`spark_session`: whichever test starts Spark first,
the S3A classes are there for the interop tests later on.

- :func:`s3a_jars` / :func:`s3a_jars_problem`: the installed jars, or why they cannot be used (missing jars named).
- :func:`spark_session`: the process's one test SparkSession (created if needed), S3A on its classpath when
  installed.
- :func:`point_bucket_at`: route one bucket's ``s3a://`` paths to a server (S3A's per-bucket endpoint), on a
  running session; each test bucket can thus live on a different backend.
- :data:`MAGIC_COMMITTER` with :func:`session_settings`: ``df.write`` on ``s3a://`` through the S3A magic committer.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from pathlib import Path
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree

REPO_ROOT = Path(__file__).resolve().parents[2]
S3A_DIR = REPO_ROOT / "s3a"
POM = S3A_DIR / "pom.xml"
JARS_DIR = Path(os.environ.get("S3A_JARS_DIR", S3A_DIR / "jars"))
#: Written by s3a/install.sh: "pom-sha256=... pyspark-hadoop=X" then one jar file name per line.
MARKER = JARS_DIR / ".installed"

ACCESS_KEY_ID = "test"
SECRET_ACCESS_KEY = "test"
REGION = "us-east-1"

#: S3A's settings for a plain-HTTP test server, the same for LocalStack and moto. The endpoint is per bucket
#: (:func:`point_bucket_at`).
S3A_OPTIONS: dict[str, str] = {
    "fs.s3a.path.style.access": "true",  # the servers answer on 127.0.0.1:PORT, not on bucket.host names
    "fs.s3a.connection.ssl.enabled": "false",
    "fs.s3a.endpoint.region": REGION,  # else the SDK probes EC2 metadata and the environment for a region
    "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "fs.s3a.access.key": ACCESS_KEY_ID,
    "fs.s3a.secret.key": SECRET_ACCESS_KEY,
    # Never purge other clients' pending uploads when a filesystem instance starts: mpcommit's live uploads
    # and the killed jobs' uploads the tests look for are exactly such uploads. (false is the default; stated
    # so that a site default cannot turn it on here.)
    "fs.s3a.multipart.purge": "false",
    # Fail fast on a dead server instead of S3A's default minutes of retries.
    "fs.s3a.attempts.maximum": "3",
    "fs.s3a.retry.limit": "3",
    "fs.s3a.connection.establish.timeout": "5s",
}

#: Session settings for ``df.write`` on s3a:// with the S3A magic committer (files stream to their final keys as
#: pending multipart uploads described under ``__magic``; the job commit completes them), through
#: spark-hadoop-cloud's commit protocol. Hadoop keys set on a running session reach the write's Hadoop
#: configuration as they are (Spark copies its session settings into it), so no ``spark.hadoop.`` prefix.
#: Use with :func:`session_settings`.
MAGIC_COMMITTER: dict[str, str] = {
    "spark.sql.sources.commitProtocolClass": "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol",
    "spark.sql.parquet.output.committer.class": "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter",
    "mapreduce.outputcommitter.factory.scheme.s3a": "org.apache.hadoop.fs.s3a.commit.S3ACommitterFactory",
    "fs.s3a.committer.name": "magic",
    "fs.s3a.committer.magic.enabled": "true",
}


class S3AJarsError(RuntimeError):
    """The S3A jars are not installed, incomplete, or for another Hadoop than PySpark's."""


def pom_versions() -> dict[str, str]:
    """The versions s3a/pom.xml pins: ``hadoop.version``, ``aws-sdk-v2.version``, ``spark-hadoop-cloud.version``."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = ElementTree.parse(POM).getroot().find("m:properties", ns)
    assert props is not None, f"{POM} has no <properties>"
    return {child.tag.split("}", 1)[1]: (child.text or "").strip() for child in props}


def pyspark_hadoop_version() -> str:
    """The Hadoop version PySpark was built with, from the ``hadoop-client-api-X.jar`` it ships."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if len(found) != 1:
        raise S3AJarsError(f"expected one hadoop-client-api-*.jar in {jars}, found {[p.name for p in found]}")
    return found[0].name[len("hadoop-client-api-"):-len(".jar")]


def expected_jar_names() -> list[str]:
    """The jars s3a/install.sh fetches that name their version in the pom (the SDK's other modules follow them)."""
    v = pom_versions()
    return [f"hadoop-aws-{v['hadoop.version']}.jar", f"s3-{v['aws-sdk-v2.version']}.jar",
            f"s3-transfer-manager-{v['aws-sdk-v2.version']}.jar",
            f"spark-hadoop-cloud_2.13-{v['spark-hadoop-cloud.version']}.jar"]


def s3a_jars() -> list[Path]:
    """The installed S3A jars; :class:`S3AJarsError` naming what is missing or mismatched, and how to fix it."""
    how = "run 'make s3a-install' (needs Java 17 and Maven; see README.md)"
    if not MARKER.is_file():
        raise S3AJarsError(f"the S3A jars are not installed in {JARS_DIR} (missing: "
                           f"{', '.join(expected_jar_names())} and the rest of the AWS SDK v2): {how}")
    names = [line.strip() for line in MARKER.read_text().splitlines()[1:] if line.strip()]
    missing = [name for name in names if not (JARS_DIR / name).is_file()]
    missing += [name for name in expected_jar_names() if name not in names and name not in missing]
    if missing:
        raise S3AJarsError(f"{len(missing)} S3A jars are missing from {JARS_DIR}: {', '.join(missing)}; {how}")
    aws = [n for n in names if re.fullmatch(r"hadoop-aws-.+\.jar", n)]
    hadoop = pyspark_hadoop_version()
    if aws != [f"hadoop-aws-{hadoop}.jar"]:
        raise S3AJarsError(f"{JARS_DIR} holds {', '.join(aws) or 'no hadoop-aws jar'} but PySpark ships Hadoop "
                           f"{hadoop}: the versions must match; {how}")
    return [JARS_DIR / name for name in names]


def s3a_jars_problem() -> str | None:
    """Why Spark cannot use s3a:// here (missing jars named), or None when it can."""
    try:
        s3a_jars()
    except S3AJarsError as exc:
        return str(exc)
    return None


#: Every JVM the tests start is short-lived and does little work of its own (Python does the tasks' work): the C1
#: compiler alone and the serial collector halve the CPU a JVM spends starting (measured: a standalone master 7.5 s
#: -> 3.5 s of CPU, a worker 6 s -> 3.3 s) and cut the Spark tests' time by about a fifth (81 Spark tests on moto,
#: 2 interleaved rounds: 75 s -> 58 s and 61 s -> 48 s), which is what the suite mostly pays for on two cores.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The same for a SparkSession's builder (the driver's JVM and its executors').
JVM_CONF = {"spark.driver.extraJavaOptions": JVM_OPTIONS, "spark.executor.extraJavaOptions": JVM_OPTIONS}


def s3a_spark_conf() -> dict[str, str]:
    """Settings for a SparkSession builder: the S3A jars on the driver's and executors' classpath when installed
    (nothing otherwise) and :data:`S3A_OPTIONS`. The endpoint is set per bucket by :func:`point_bucket_at`."""
    conf = {f"spark.hadoop.{k}": v for k, v in S3A_OPTIONS.items()}
    if s3a_jars_problem() is None:
        # extraClassPath, not spark.jars: the jars are local files, and Hadoop's FileSystem and Spark's
        # commit-protocol lookups both want them on the application classpath from the JVM's start.
        classpath = os.pathsep.join(str(p) for p in s3a_jars())
        conf["spark.driver.extraClassPath"] = classpath
        conf["spark.executor.extraClassPath"] = classpath
    return conf


def spark_session(*, master: str = "local[2,3]", app: str = "mpcommit-tests",
                  conf: dict[str, str] | None = None) -> tuple[Any, bool]:
    """The process's SparkSession and whether this call created it (the caller then stops it).

    One session per process: an active session is returned as it is (``master`` and ``conf`` then do not
    apply). A new one gets the test defaults (UTC, two shuffle partitions, no UI, :data:`JVM_CONF`) and :func:`s3a_spark_conf`.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must run the interpreter the project is in
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    if existing is not None:
        return existing, False
    builder = (
        SparkSession.builder.master(master).appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
    )
    for key, value in {**JVM_CONF, **s3a_spark_conf(), **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session, True


def session_has_s3a(spark: Any) -> bool:
    """True when the session's JVM can load S3A's filesystem class."""
    try:
        spark._jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem", False,
                                          spark._jvm.Thread.currentThread().getContextClassLoader())
    except Exception:  # noqa: BLE001 - py4j wraps the ClassNotFoundException
        return False
    return True


@contextlib.contextmanager
def session_settings(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """Set ``settings`` on a running session for the duration of the block, then put the old values back."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def point_bucket_at(spark: Any, bucket: str, endpoint_url: str) -> None:
    """Route ``s3a://bucket/...`` to ``endpoint_url`` in a running session (S3A's per-bucket options), so that
    buckets on different test servers can share one session."""
    spark.sparkContext._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{bucket}.endpoint", endpoint_url)


def require_s3a_jars() -> None:
    """Skip (fail under CI=true) when the S3A jars cannot be used, saying which are missing and how to get them."""
    import pytest

    problem = s3a_jars_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI=true: the s3a tests must run, not skip)", pytrace=False)
    pytest.skip(problem)
