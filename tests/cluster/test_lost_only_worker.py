"""A cluster that loses its only worker in the middle of a write (bad input for the committer: its tasks die
with their machine and never clean up).

Spark itself does not fail such a job: with no worker left it waits for resources for ever (seen here: the
job still hung four minutes after "Lost executor 0 on 127.0.0.10: worker lost"). The driver's watchdog
(tests/cluster/cluster_job.py) cancels the job once the application has had no executor for 5 s, as an
orchestrator's timeout would; the write then fails with Spark's own error, and mpcommit aborts the job:
nothing visible, nothing pending, the old data whole.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster_apps import DriverApp, read_flag, records_under, uploads_under, wait_for
from tests.support.invariants import check_aborted
from tests.support.spark_cluster import StandaloneCluster

OLD = {f"t/k={k}/old-{k}.txt": f"old {k}\n".encode() for k in "ab"}


@pytest.fixture(scope="module")
def lonely(spark_cluster: StandaloneCluster, request: pytest.FixtureRequest) -> Iterator[StandaloneCluster]:
    """A second, one-worker cluster (master and worker on their own ports; the worker on 127.0.0.20)."""
    root = Path(tempfile.mkdtemp(prefix="lonely-", dir=spark_cluster.root))
    cluster = StandaloneCluster(root, workers=1, cores=2, memory="1g", first_host=20)
    try:
        yield cluster.start()
    finally:
        cluster.stop(keep=True)  # its logs live under the session cluster's directory, kept or removed with it


def test_the_only_worker_dies_mid_write(lonely: StandaloneCluster, cluster_backend: Any, tmp_path: Path) -> None:
    be, flags = cluster_backend, tmp_path / "flags"
    bucket = be.new_bucket("mpc-lonely")
    for key, data in OLD.items():
        be.client.put_object(Bucket=bucket, Key=key, Body=data)
    app = DriverApp(lonely, "lonely", executor_cores=2, cores_max=2)
    try:
        app.call("write_async", args={
            "dir": str(flags), "endpoint": be.endpoint_url, "bucket": bucket, "prefix": "t", "tasks": 2, "rows": 6000,
            "big": [0], "mode": "overwrite", "cancel_without_executors": 5,
            "stall": {"dir": str(flags), "tasks": None, "attempt": 0, "at_batch": 6}})
        stalls = wait_for(lambda: [read_flag(flags / f"stalled-t{t}-a0.json") for t in (0, 1)]
                          if all((flags / f"stalled-t{t}-a0.json").exists() for t in (0, 1)) else None,
                          "both tasks to stall mid-write")
        assert any(p["parts"] >= 1 for p in stalls[0]["pending"]), "task 0 had a part uploaded"
        lonely.kill_worker(lonely.workers[0].host)
        result = wait_for(lambda: read_flag(flags / "done.json"), "the write to fail")
    finally:
        (flags / "release").touch()
        app.close()
    assert "error" in result, f"the write succeeded without a worker: {result}"
    assert "SPARK_JOB_CANCELLED" in result["message"], result["message"][:2000]
    assert lonely.status()["workers"][0]["state"] == "DEAD"

    job_id = re.search(r"-([0-9a-f-]{36})\.c\d{3}\.", stalls[0]["pending"][0]["key"]).group(1)
    check_aborted(be.client, bucket, "t", job_id, before=OLD)
    assert uploads_under(be.client, bucket, "t") == {} and records_under(be.client, bucket, "t") == set()
    ends = app.task_ends(f"s3://{bucket}/t ")
    for task in (0, 1):
        assert [e.reason for e in ends[task]] == ["ExecutorLostFailure"], ends[task]
        assert ends[task][0].host == lonely.workers[0].host
