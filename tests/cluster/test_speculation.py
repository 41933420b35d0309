"""Real speculative execution and lost executors on the standalone cluster, against S3 (LocalStack).

One Spark application (two executors of two cores, on two of the three worker hosts) serves every test of the
module, one write at a time. Spark's own event log says which attempts ran, where, and how each ended; the rows
say which attempt became visible (each row carries the attempt number that wrote it).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster_apps import (
    SPECULATION,
    DriverApp,
    check_abort_finds_everything,
    check_rows,
    read_flag,
    records_under,
    uploads_under,
    visible_rows,
    wait_for,
)
from tests.support.checks import visible_keys
from tests.support.invariants import bucket_state
from tests.support.spark_cluster import StandaloneCluster, is_executor, parent_of

ROWS = 6000  # per task: six Arrow batches of 1,000 rows; the stall is after the last one


@pytest.fixture(scope="module")
def app(spark_cluster: StandaloneCluster) -> Iterator[DriverApp]:
    spark_cluster.ensure_workers()
    driver = DriverApp(spark_cluster, "speculation", executor_cores=2, cores_max=4, extra=SPECULATION)
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def executors(app: DriverApp, cluster: StandaloneCluster) -> list[str]:
    """Wait until the application has its two executors again (a test before may have killed one)."""
    hosts = app.call("executors", count=2)["hosts"]
    assert len(hosts) == 2, hosts
    return hosts


def start_write(app: DriverApp, backend: Any, flags: Path, **args: Any) -> str:
    bucket = backend.new_bucket("mpc-cluster")
    app.call("write_async", args={"dir": str(flags), "endpoint": backend.endpoint_url, "bucket": bucket,
                                  "prefix": "t", "rows": ROWS, **args})
    return bucket


def executor_jvm_of(stalled: dict[str, Any]) -> int:
    """The executor JVM that runs a stalled Python worker: worker -> pyspark daemon -> JVM."""
    jvm = parent_of(stalled["ppid"])
    assert jvm is not None and is_executor(jvm), f"no executor JVM above the stalled worker {stalled['pid']}"
    return jvm


def done(flags: Path) -> dict[str, Any]:
    return wait_for(lambda: read_flag(flags / "done.json"), "the write (and its losers) to end")


# ---------------------------------------------------------------- speculation
def test_a_stalled_attempt_gets_a_speculative_copy_and_the_loser_outlives_the_job(
        app: DriverApp, executors: list[str], cluster_backend: Any, tmp_path: Path) -> None:
    """Task 0's first attempt stalls mid-upload (a 5 MiB part uploaded, its files open); Spark launches a copy on
    another host, which wins. The loser's executor is frozen (SIGSTOP, as a long GC pause or a partition would)
    so that Spark cannot kill it; the job commits while it is stalled, and it resumes after the commit."""
    be, flags = cluster_backend, tmp_path / "flags"
    bucket = start_write(app, be, flags, tasks=4, big=[0], hold_after_commit=str(flags / "finish"),
                         stall={"dir": str(flags), "tasks": [0], "attempt": 0, "at_batch": 6, "copies_wait": True})
    stalled = wait_for(lambda: read_flag(flags / "stalled-t0-a0.json"), "attempt 0 of task 0 to stall")
    assert any(p["parts"] >= 1 and "/k=a/" in p["key"] for p in stalled["pending"]), stalled["pending"]
    jvm = executor_jvm_of(stalled)
    os.kill(jvm, signal.SIGSTOP)
    try:
        committed = wait_for(lambda: read_flag(flags / "committed.json") or read_flag(flags / "failed.json"),
                             "the job to commit while the loser is frozen")
        assert "report" in committed, committed
        report = committed["report"]
        # Exactly the winners' files, every row once, one attempt per task; the stalled one lost.
        keys = visible_keys(be.client, bucket, "t")
        assert keys == set(committed["filenames"]) and report["files"] == 8
        visible = check_rows(visible_rows(be.endpoint_url, bucket, "t"), tasks=4, per_task=ROWS)
        assert visible[0] != 0, "the stalled attempt 0 of task 0 became visible"
        assert uploads_under(be.client, bucket, "t") == {}, "the commit left uploads pending"
        assert report["abortedUploads"] >= len(stalled["pending"])
        at_commit = bucket_state(be.client, bucket)
        # The loser resumes after the commit: its uploads are gone, it cannot complete or continue them.
        (flags / "release").touch()
        released = wait_for(lambda: read_flag(flags / "released-t0-a0.json"), "the loser to resume")
        assert released["jobCommitted"], "the loser resumed before the commit: it did not outlive the job"
        assert set(released["uploadsGone"]) == {p["uploadId"] for p in stalled["pending"]}
    finally:
        os.kill(jvm, signal.SIGCONT)
        (flags / "release").touch()
        (flags / "finish").touch()
    done(flags)  # the driver waited until no executor runs a task: the loser has ended
    after = bucket_state(be.client, bucket)
    assert after.objects == at_commit.objects, "the loser changed what is visible after the commit"
    check_abort_finds_everything(be.endpoint_url, be.client, bucket, "t")
    assert records_under(be.client, bucket, "t") == set()

    ends = app.task_ends(f"s3://{bucket}/t ")
    first = [e for e in ends[0] if e.attempt == 0]
    winners = [e for e in ends[0] if e.succeeded]
    assert len(first) == 1 and not first[0].succeeded and not first[0].speculative, ends[0]
    assert first[0].host == stalled["host"]
    assert len(winners) == 1 and winners[0].speculative and winners[0].host != stalled["host"], ends[0]
    assert winners[0].attempt == visible[0]
    for task, attempt in visible.items():
        assert any(e.succeeded and e.attempt == attempt for e in ends[task]), (task, ends[task])


def test_every_task_gets_a_speculative_copy(app: DriverApp, executors: list[str], cluster_backend: Any,
                                            tmp_path: Path) -> None:
    """Both tasks' first attempts stall mid-upload; a stage with no more tasks than an executor has slots is
    speculated after ``spark.speculation.task.duration.threshold``, so each gets a copy on another host."""
    be, flags = cluster_backend, tmp_path / "flags"
    bucket = start_write(app, be, flags, tasks=2, big=[0, 1],
                         stall={"dir": str(flags), "tasks": None, "attempt": 0, "at_batch": 6, "copies_wait": True})
    try:
        result = wait_for(lambda: read_flag(flags / "committed.json") or read_flag(flags / "failed.json"),
                          "the job to commit")
    finally:
        (flags / "release").touch()  # a loser Spark has not killed yet stops stalling
    assert "report" in result, result
    stalls = [read_flag(flags / f"stalled-t{t}-a0.json") for t in (0, 1)]
    assert all(stalls), "both first attempts stalled mid-upload"
    done(flags)
    visible = check_rows(visible_rows(cluster_backend.endpoint_url, bucket, "t"), tasks=2, per_task=ROWS)
    assert visible_keys(be.client, bucket, "t") == set(result["filenames"])
    assert uploads_under(be.client, bucket, "t") == {} and records_under(be.client, bucket, "t") == set()
    # Every first attempt's uploads (k=a with a part, k=b) were aborted by the commit.
    assert result["report"]["abortedUploads"] >= sum(len(s["pending"]) for s in stalls)

    ends = app.task_ends(f"s3://{bucket}/t ")
    for task, stall in zip((0, 1), stalls):
        first = [e for e in ends[task] if e.attempt == 0]
        copies = [e for e in ends[task] if e.speculative]
        assert len(first) == 1 and not first[0].succeeded and first[0].host == stall["host"], ends[task]
        assert copies and all(c.host != stall["host"] for c in copies), ends[task]
        winner = [e for e in ends[task] if e.succeeded]
        assert len(winner) == 1 and winner[0].speculative and winner[0].attempt == visible[task], ends[task]


# ---------------------------------------------------------------- lost executors
@pytest.mark.parametrize("what", ["executor", "worker"])
def test_a_lost_executor_or_worker_mid_write(app: DriverApp, executors: list[str], cluster: StandaloneCluster,
                                             cluster_backend: Any, tmp_path: Path, what: str) -> None:
    """All four first attempts stall mid-write (two of them mid-upload); then SIGKILL the executor JVM that runs
    task 0 -- or its whole worker with everything it started -- and let the others go on. Spark reruns the lost
    tasks on another executor; the commit shows one attempt per task and aborts the dead attempts' uploads."""
    be, flags = cluster_backend, tmp_path / "flags"
    bucket = start_write(app, be, flags, tasks=4, big=[0, 1],
                         stall={"dir": str(flags), "tasks": None, "attempt": 0, "at_batch": 6})
    try:
        stalls = wait_for(lambda: [s for t in range(4) if (s := read_flag(flags / f"stalled-t{t}-a0.json"))]
                          if all((flags / f"stalled-t{t}-a0.json").exists() for t in range(4)) else None,
                          "the four first attempts to stall")
        victim = stalls[0]["host"]
        dead = [s for s in stalls if s["host"] == victim]
        if what == "executor":
            assert cluster.kill_executor(victim), f"no executor JVM on {victim}"
        else:
            cluster.kill_worker(victim)
    finally:
        (flags / "release").touch()
    result = done(flags)
    assert "report" in result, result
    visible = check_rows(visible_rows(be.endpoint_url, bucket, "t"), tasks=4, per_task=ROWS)
    assert visible_keys(be.client, bucket, "t") == set(result["filenames"])
    assert uploads_under(be.client, bucket, "t") == {} and records_under(be.client, bucket, "t") == set()
    # Task 0 died mid-upload (a part of its k=a file was uploaded); no dead attempt cleaned up after itself.
    assert any(p["parts"] >= 1 for p in stalls[0]["pending"]), stalls[0]
    dead_uploads = {p["uploadId"] for s in dead for p in s["pending"]}
    assert result["report"]["abortedUploads"] >= len(dead_uploads)

    ends = app.task_ends(f"s3://{bucket}/t ")
    for s in dead:
        task = s["task"]
        lost = [e for e in ends[task] if e.attempt == 0]
        assert len(lost) == 1 and lost[0].reason == "ExecutorLostFailure" and lost[0].host == victim, ends[task]
        winner = [e for e in ends[task] if e.succeeded and e.attempt == visible[task]]
        assert len(winner) == 1 and visible[task] != 0, ends[task]
        assert winner[0].executor != lost[0].executor
        if what == "worker":
            assert winner[0].host != victim, "rerun on the dead machine"
    for task in range(4):
        # The visible attempt is one Spark counted as successful (speculation may have raced a survivor).
        assert any(e.succeeded and e.attempt == visible[task] for e in ends[task]), ends[task]
