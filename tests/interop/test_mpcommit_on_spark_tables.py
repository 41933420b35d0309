"""mpcommit works on what Spark writes through Hadoop's S3A magic committer: ``show`` summarises the table,
``compact`` merges its small files (and Spark reads the same rows afterwards), and the pending uploads a killed
S3A job leaves -- which carry no mpcommit job id -- are found, priced and aborted by ``uploads list/abort``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli
from tests.support.backends import Backend
from tests.support.backends import on_backends
from tests.support.checks import pending_upload_entries, read_object, visible_keys
from tests.support.spark_s3a import MAGIC_COMMITTER, session_settings

pytestmark = [pytest.mark.spark, pytest.mark.s3a,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

REPO = Path(__file__).resolve().parents[2]
TASKS = 4
PARTITIONS = 3
#: (Spark's format, its writer/reader options, `mpcommit compact --format`)
FORMATS = {"parquet": ({}, "parquet"), "csv": ({"header": "true"}, "csv-header")}


def data_files(client: Any, bucket: str, prefix: str) -> list[str]:
    return sorted(k for k in visible_keys(client, bucket, prefix) if not k.endswith("/"))


@pytest.mark.parametrize("s3a_backend,fmt", on_backends(list(FORMATS), moto=("parquet",)), indirect=["s3a_backend"])
def test_show_and_compact_a_table_written_by_the_s3a_magic_committer(s3a_spark, s3a_backend: Backend,
                                                                     s3a_bucket: str, fmt: str) -> None:
    spark, bucket, backend = s3a_spark, s3a_bucket, s3a_backend
    options, compact_format = FORMATS[fmt]
    df = spark.range(3000, numPartitions=TASKS).selectExpr(
        "id", f"CAST(id % {PARTITIONS} AS INT) AS p", "concat('name-', id) AS name")
    with session_settings(spark, MAGIC_COMMITTER):
        df.write.format(fmt).options(**options).partitionBy("p").save(f"s3a://{bucket}/t")
    success = json.loads(read_object(backend.client, bucket, "t/_SUCCESS"))
    assert success["committer"] == "magic", "the write must have gone through the magic committer"
    written = data_files(backend.client, bucket, "t")
    assert len(written) == TASKS * PARTITIONS

    mpcommit = cli(backend)
    shown = mpcommit("show", f"s3://{bucket}/t")
    assert shown.returncode == 0, str(shown)
    assert "Hadoop S3A, magic committer" in shown.stdout and success["jobId"] in shown.stdout, str(shown)
    assert f"Files      {len(written)}" in shown.stdout, str(shown)
    assert mpcommit("show", f"s3://{bucket}/t", "--json").json()["jobId"] == success["jobId"]

    compacted = mpcommit("compact", f"s3://{bucket}/t", "--format", compact_format, "--json")
    assert compacted.returncode == 0, str(compacted)
    report = compacted.json()
    assert (report["outcome"], report["filesMerged"], report["filesWritten"]) == ("committed", len(written), PARTITIONS)
    merged = data_files(backend.client, bucket, "t")
    assert len(merged) == PARTITIONS and not set(merged) & set(written)
    assert pending_upload_entries(backend.client, bucket, "t") == []

    read = spark.read.format(fmt).options(**options, inferSchema="true").load(f"s3a://{bucket}/t")
    assert sorted(tuple(r) for r in read.select("id", "p", "name").collect()) == sorted(tuple(r) for r in df.collect())
    after = mpcommit("show", f"s3://{bucket}/t")
    assert after.returncode == 0 and "append (compact)" in after.stdout, str(after)


# LocalStack only: its uploads carry their real initiation time (moto's are all from 2010, so --older-than
# would select them whatever their age), and the killed job's own JVM costs a minute more per backend.
@pytest.mark.parametrize("s3a_backend,_", on_backends([""]), indirect=["s3a_backend"])
def test_uploads_a_killed_s3a_magic_job_leaves_are_found_priced_and_aborted(s3a_spark, s3a_backend: Backend,
                                                                           s3a_bucket: str, _: str) -> None:
    bucket, backend, client = s3a_bucket, s3a_backend, s3a_backend.client
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = subprocess.Popen([sys.executable, "-m", "tests.interop.killed_magic_job", backend.endpoint_url, bucket, "t"],
                           cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        pending = wait_for_uploaded_parts(client, bucket, "t", uploads=2, job=job)
    finally:
        # The whole process group: the Python driver and the JVM it started.
        os.killpg(job.pid, signal.SIGKILL)
        output = job.communicate(timeout=60)[0]
    assert "FINISHED" not in output
    assert pending_upload_entries(client, bucket, "t") == pending, "the kill must not have changed the uploads"
    held = {u["Key"]: sum(p["Size"] for p in client.list_parts(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])["Parts"])
            for u in pending}
    assert all(size > 0 for size in held.values())
    time.sleep(1.1)  # so that --older-than 1s selects them on LocalStack, which reports real initiation times

    mpcommit = cli(backend)
    listed = mpcommit("uploads", "list", f"s3://{bucket}/t", "--json")
    assert listed.returncode == 0, str(listed)
    doc = listed.json()
    assert {u["key"]: u["bytes"] for u in doc["uploads"]} == held
    assert doc["count"] == 2 and doc["bytes"] == sum(held.values())
    assert [u["jobId"] for u in doc["uploads"]] == [None, None], "S3A's uploads have no mpcommit owner"

    aborted = mpcommit("uploads", "abort", f"s3://{bucket}/t", "--older-than", "1s", "--yes", "--json")
    assert aborted.returncode == 0, str(aborted)
    assert (aborted.json()["aborted"], aborted.json()["bytesFreed"]) == (2, sum(held.values()))
    assert pending_upload_entries(client, bucket, "t") == []


def wait_for_uploaded_parts(client: Any, bucket: str, prefix: str, *, uploads: int, job: subprocess.Popen,
                            timeout: float = 300) -> list[dict[str, Any]]:
    """The pending uploads under ``prefix`` once ``uploads`` of them each hold a part (the magic committer
    initiates an upload, then sends the file's part when the task closes it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.poll() is not None:
            pytest.fail(f"the S3A job exited (code {job.returncode}) before leaving its uploads:\n"
                        f"{job.stdout.read()[-4000:] if job.stdout else ''}")
        entries = pending_upload_entries(client, bucket, prefix)
        if len(entries) >= uploads and all(
                client.list_parts(Bucket=bucket, Key=e["Key"], UploadId=e["UploadId"]).get("Parts") for e in entries):
            return entries
        time.sleep(0.5)
    pytest.fail(f"no {uploads} pending uploads with parts under s3://{bucket}/{prefix} after {timeout:.0f}s")
