"""Task attempts that fail in real Spark, against LocalStack: only the retried attempt's files become visible.

Master ``local[2,3]`` retries a failed task. A hook that travels with the task's closure makes attempt 0 of
task 0 fail after it has started uploading, and first records which uploads it had open in a side bucket (the
evidence), so that the test can tell those uploads apart from the retry's, which use the same keys.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from mpcommit.spark import write
from tests.support.spark_tables import SPARK_MARKS, assert_clean, data_keys, read_table, s3_filesystem
from tests.support.checks import pending_uploads, read_object

pytestmark = SPARK_MARKS

ROWS_PER_TASK = 3000  # three Arrow batches per task (SPARK_BATCH_ROWS = 1000 in tests/conftest.py)


def failing_on_first_attempt(endpoint: str, bucket: str, prefix: str, evidence_bucket: str, how: str) -> Any:
    """A task hook: on attempt 0 of task 0, after its 2nd batch, save the task's pending uploads, then fail."""

    def hook(task_id: int, attempt: int, batches: int) -> None:
        if task_id != 0 or attempt != 0 or batches != 2:
            return
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                              region_name="us-east-1")
        uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=f"{prefix}/").get("Uploads", [])
        mine = [[u["Key"], u["UploadId"]] for u in uploads if "/part-00000-" in u["Key"]]
        client.put_object(Bucket=evidence_bucket, Key="attempt0.json", Body=json.dumps(mine).encode())
        if how == "kill":
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)  # the Python worker dies outright: no cleanup code runs
        raise RuntimeError("injected failure in attempt 0 of task 0")

    return hook


def frame(spark: Any) -> Any:
    rows = [(i, ["a", "b", "c"][i % 3], i * 0.5) for i in range(2 * ROWS_PER_TASK)]
    return spark.createDataFrame(rows, "id long, k string, v double").repartition(2, "id")


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_failed_attempt_leaves_nothing_and_the_retry_wins(spark, localstack_backend, how) -> None:  # noqa: ANN001
    ls = localstack_backend
    bucket, evidence = ls.new_bucket(), ls.new_bucket("evidence")
    df = frame(spark)
    hook = failing_on_first_attempt(ls.endpoint_url, bucket, "t", evidence, how)
    report = write(df, f"s3://{bucket}/t", mode="overwrite", partition_by=["k"], s3=ls.options, _task_hook=hook)

    attempt0 = [tuple(u) for u in json.loads(read_object(ls.client, evidence, "attempt0.json"))]
    assert attempt0, "attempt 0 had started uploading before it failed"
    assert pending_uploads(ls.client, bucket, "t") == [], "no upload of any attempt left pending"
    if how == "raise":
        # The attempt aborted its own uploads on the way out: the job commit found none left to abort.
        assert report.aborted_uploads == 0
    else:
        # A killed worker cleans up nothing: the job commit aborted its uploads, found by the job id.
        assert report.aborted_uploads >= len(attempt0)

    keys = data_keys(ls.client, bucket, "t")
    assert keys == set(report.filenames)
    assert any("/part-00000-" in k for k in keys) and any("/part-00001-" in k for k in keys)
    # The retry wrote the same keys; what is visible is the retry's, with every row exactly once.
    assert {k for k, _ in attempt0} <= keys
    table = read_table(s3_filesystem(ls.endpoint_url), bucket, "t", partitions=pa.schema([("k", pa.string())]))
    assert sorted(table.column("id").to_pylist()) == list(range(2 * ROWS_PER_TASK))
    assert report.rows == 2 * ROWS_PER_TASK
    assert_clean(ls.client, bucket, "t")
