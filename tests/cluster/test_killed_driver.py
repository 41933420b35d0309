"""A cluster job's driver killed with SIGKILL in the middle of its commit, and finished from another process.

One driver application runs five overwrites, each on its own destination holding old data (five objects, so
that with delete batches of two a crash can fall between two batches). Each write is held at one point of its
commit -- before the journal (every task result in, ``Job.commit`` entered), right after the journal, after
its 2nd complete, before its 2nd delete batch, after its 1st complete -- one after the other, and when all five
are held, the driver process is SIGKILLed (its JVM and executors go with it). The state each one was left in is
then checked, and ``mpcommit jobs recover`` (the real command, in another process) finishes or rolls it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.cluster_apps import (
    DriverApp,
    check_rows,
    cli,
    read_flag,
    uploads_under,
    visible_rows,
    wait_for,
)
from tests.support.checks import all_keys
from tests.support.invariants import (
    bucket_state,
    check_aborted,
    check_committed,
    check_others_untouched,
    dataset,
    job_records,
)
from tests.support.spark_cluster import StandaloneCluster

ROWS, TASKS = 2000, 2
POINTS = {
    "d0": "before_journal",
    "d1": ["commit.after_journal", 1],
    "d2": ["commit.after_complete", 2],
    "d3": ["commit.before_delete_batch", 2],
    "d4": ["commit.after_complete", 1],  # for the recover that is itself killed twice
}


def old_data(prefix: str) -> dict[str, bytes]:
    return {f"{prefix}/k={'abc'[i % 3]}/old-{i}.txt": f"old {prefix} {i}\n".encode() for i in range(5)}


@dataclass
class Killed:
    bucket: str
    prefix: str
    job_id: str
    old: dict[str, bytes]
    at_kill: dict[str, bytes]  # the visible data of the destination when the driver died


@pytest.fixture(scope="module")
def killed(spark_cluster: StandaloneCluster, cluster_backend: Any, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, Killed]]:
    spark_cluster.ensure_workers()
    be = cluster_backend
    bucket = be.new_bucket("mpc-killed")
    for prefix in POINTS:
        for key, data in old_data(prefix).items():
            be.client.put_object(Bucket=bucket, Key=key, Body=data)
    root = tmp_path_factory.mktemp("killed")
    app = DriverApp(spark_cluster, "killed-driver", executor_cores=2, cores_max=2)
    try:
        jobs = {}
        for prefix, block in POINTS.items():
            flags = root / prefix
            app.call("write_async", args={"dir": str(flags), "endpoint": be.endpoint_url, "bucket": bucket,
                                          "prefix": prefix, "tasks": TASKS, "rows": ROWS, "mode": "overwrite",
                                          "block": block, "delete_batch": 2})
            held = wait_for(lambda: read_flag(flags / "blocked.json") or read_flag(flags / "failed.json"),
                            f"the write to {prefix} to reach {block}")
            assert "block" in held, held
            jobs[prefix] = held
        at_kill = {prefix: dataset(be.client, bucket, prefix) for prefix in POINTS}
        app.kill()
    finally:
        app.close()
    spark_cluster.wait_idle()
    out = {}
    for prefix in POINTS:
        job_id = jobs[prefix]["jobId"] or _job_of(be.client, bucket, prefix)
        out[prefix] = Killed(bucket, prefix, job_id, old_data(prefix), at_kill[prefix])
    yield out


def _job_of(client: Any, bucket: str, prefix: str) -> str:
    """The one job with records under the destination (its driver died before it could say)."""
    hidden = f"{prefix}/_temporary/mpcommit/"
    jobs = {key[len(hidden):].split("/", 1)[0] for key in all_keys(client, bucket, hidden, exact_prefix=True)}
    assert len(jobs) == 1, jobs
    return jobs.pop()


def _state(be: Any, k: Killed) -> str:
    """From the bucket, not from mpcommit: a job with a journal is committing, one with records is writing."""
    records = job_records(be.client, k.bucket, k.prefix, k.job_id)
    if f"{k.prefix}/_temporary/mpcommit/{k.job_id}/journal.json" in records:
        return "committing"
    return "writing" if records else "none"


def _recover(endpoint: str, k: Killed, *extra: str, fault: str | None = None) -> Any:
    return cli(endpoint, "jobs", "recover", f"s3://{k.bucket}/{k.prefix}", *extra, "--json", fault=fault)


def _check_finished(be: Any, k: Killed) -> None:
    """The recovered commit equals an uninterrupted one: exactly the new files (every row once, one attempt per
    task), the old data gone, _SUCCESS naming the job and its files, nothing pending, no records left."""
    new = {key: v for key, v in dataset(be.client, k.bucket, k.prefix).items() if k.job_id in key}
    assert len(new) == TASKS * 2  # two partitions per task
    check_committed(be.client, k.bucket, k.prefix, k.job_id, new)
    check_rows(visible_rows(be.endpoint_url, k.bucket, k.prefix), tasks=TASKS, per_task=ROWS)
    # I5 at the moment the driver died: the old data was whole, or every new file was already complete.
    old_whole = all(k.at_kill.get(key) == v for key, v in k.old.items())
    new_complete = all(k.at_kill.get(key) == v for key, v in new.items())
    assert old_whole or new_complete, f"at the kill: old data partly gone while the new was incomplete ({k.prefix})"


def _recover_and_check(be: Any, k: Killed) -> None:
    before = bucket_state(be.client, k.bucket)
    done = _recover(be.endpoint_url, k)
    assert done.returncode == 0, done.stderr[-3000:]
    actions = {a["jobId"]: a for a in json.loads(done.stdout)["actions"]}
    assert actions[k.job_id]["action"] == "finished", actions
    _check_finished(be, k)
    after = bucket_state(be.client, k.bucket)
    check_others_untouched(before, after, job_ids=[k.job_id], may_delete=lambda key: key in k.old,
                           may_write=lambda key: key == f"{k.prefix}/_SUCCESS")


def test_killed_before_the_journal_leaves_the_data_untouched(killed: dict[str, Killed], cluster_backend: Any) -> None:
    be, k = cluster_backend, killed["d0"]
    assert k.at_kill == k.old, "the destination changed before the journal"
    assert _state(be, k) == "writing"
    assert uploads_under(be.client, k.bucket, k.prefix), "the tasks' uploads are pending, waiting for a commit"
    # A plain recover leaves a young writing job alone (it may be live); naming it rolls it back.
    skipped = _recover(be.endpoint_url, k)
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert '"action": "skipped"' in skipped.stdout
    rolled = _recover(be.endpoint_url, k, "--job", k.job_id)
    assert rolled.returncode == 0 and '"action": "rolled_back"' in rolled.stdout, rolled.stdout + rolled.stderr
    check_aborted(be.client, k.bucket, k.prefix, k.job_id, before=k.old)


@pytest.mark.parametrize("prefix, seen", [("d1", "old whole, nothing new"), ("d2", "old whole, 2 new files"),
                                          ("d3", "new complete, old partly deleted")])
def test_killed_mid_commit_is_finished_by_recover(killed: dict[str, Killed], cluster_backend: Any, prefix: str,
                                                  seen: str) -> None:
    be, k = cluster_backend, killed[prefix]
    new_at_kill = sorted(key for key in k.at_kill if k.job_id in key)
    old_at_kill = sorted(key for key in k.at_kill if key in k.old)
    shown = {"d1": (0, 5), "d2": (2, 5), "d3": (TASKS * 2, 3)}[prefix]
    assert (len(new_at_kill), len(old_at_kill)) == shown, f"{seen}: {new_at_kill}, {old_at_kill}"
    assert _state(be, k) == "committing"
    refused = cli(be.endpoint_url, "jobs", "abort", f"s3://{k.bucket}/{k.prefix}", "--job", k.job_id, "--yes")
    assert refused.returncode == 1 and "recover" in refused.stderr, refused.stderr
    _recover_and_check(be, k)


def test_a_recover_killed_twice_is_finished_by_a_third(killed: dict[str, Killed], cluster_backend: Any) -> None:
    be, k = cluster_backend, killed["d4"]
    assert len([key for key in k.at_kill if k.job_id in key]) == 1
    snapshots = []
    for fault in ("commit.after_complete:2:kill", "commit.before_success:1:kill"):
        died = _recover(be.endpoint_url, k, fault=fault)
        assert died.returncode == -9, f"recover with {fault}: exit {died.returncode}\n{died.stderr[-2000:]}"
        assert _state(be, k) == "committing"
        snapshots.append(dataset(be.client, k.bucket, k.prefix))
    _recover_and_check(be, k)
    new = {key: v for key, v in dataset(be.client, k.bucket, k.prefix).items() if k.job_id in key}
    for fault, seen in zip(("after_complete:2", "before_success"), snapshots):
        old_whole = all(seen.get(key) == v for key, v in k.old.items())
        new_complete = all(seen.get(key) == v for key, v in new.items())
        assert old_whole or new_complete, f"recover killed at {fault} left old data partly gone, new incomplete"
    # The first recover died among its completes (old whole; at least 2 new files, more when the completes running
    # beside the 2nd -- the command completes in parallel -- finished first), the second after the replace.
    assert all(key in snapshots[0] for key in k.old) and len([x for x in snapshots[0] if k.job_id in x]) >= 2
    assert not any(key in snapshots[1] for key in k.old) and all(key in snapshots[1] for key in new)
