"""The streaming protocol without Spark (mpcommit.protocol.stream): micro-batch job ids, the query's record, and
the one ledger -- micro-batch B committed is version B of the query's application in the table's commit order."""

from __future__ import annotations

import json

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError, ManifestVersionError, UsageError
from mpcommit.protocol.layout import is_job_id, parse_uri
from mpcommit.protocol.records.stream import LegacyPending, StreamQuery, StreamStateError
from mpcommit.protocol.stream import (
    STREAMS_ROOT,
    StreamCommitter,
    batch_job_id,
    batch_of_job,
    batch_prefix,
    batch_txn,
)
from mpcommit.store.s3 import S3Store
from tests.support.checks import all_keys, pending_uploads, read_object

Q = "0b9e6c1e-1e5c-4a8e-9a0e-2f3c1d2e4f50"


def test_a_stream_attempts_job_id_names_its_query_and_micro_batch() -> None:
    a, b = batch_job_id(Q, 7, "0123456789ab"), batch_job_id(Q, 7, "ba9876543210")
    assert is_job_id(a) and is_job_id(b) and a != b
    assert a.startswith(batch_prefix(Q, 7) + "-") and b.startswith(batch_prefix(Q, 7) + "-")
    assert batch_prefix(Q, 8) != batch_prefix(Q, 7) and batch_prefix("another", 7) != batch_prefix(Q, 7)
    assert batch_of_job(Q, a) == 7 and batch_of_job(Q, batch_job_id(Q, 2 ** 32 - 1, "0" * 12)) == 2 ** 32 - 1
    assert batch_of_job("another", a) is None and batch_of_job(Q, "not-a-job") is None
    with pytest.raises(UsageError, match="beyond"):
        batch_prefix(Q, 2 ** 32)


def test_the_query_record_round_trips_and_is_validated() -> None:
    record = StreamQuery(Q, "s3://bkt/t", ("dt",), "parquet", created_ms=1, hostname="h")
    assert StreamQuery.from_bytes(record.to_bytes(), where="x", query_id=Q) == record
    with pytest.raises(StreamStateError, match=f"belongs to query '{Q}', not q2"):
        StreamQuery.from_bytes(record.to_bytes(), where="x", query_id="q2")
    with pytest.raises(ManifestVersionError):
        StreamQuery.from_bytes(record.to_bytes().replace(b'"version":1', b'"version":9'), where="x", query_id=Q)


def legacy_record(last: int, pending: tuple[int, str, int] | None = None) -> bytes:
    """A record as mpcommit wrote it before the ledger: rewritten with each micro-batch."""
    return json.dumps({"kind": "mpcommit.StreamProgress", "version": 1, "queryId": Q, "destination": "s3://bkt/t",
                       "partitionBy": ["dt"], "format": "parquet", "lastBatchId": last, "lastJobId": "j-last",
                       "lastPosition": 3,
                       "pending": None if pending is None else dict(zip(("batchId", "jobId", "after"), pending)),
                       "updated": 5, "hostname": "h"}).encode()


def test_a_record_written_before_the_ledger_is_read_with_what_it_says_of_its_batches() -> None:
    record = StreamQuery.from_bytes(legacy_record(4, (5, "k", 11)), where="x", query_id=Q)
    assert record.identity() == ("s3://bkt/t", ("dt",), "parquet")
    assert record.legacy.last_batch == 4 and record.legacy.pending == LegacyPending(5, "k", 11)


# ---------------------------------------------------------------- on a store
def attempt(backend, bucket: str, batch_id: int, salt: str, *, fmt: str = "parquet") -> tuple[Job, StreamCommitter]:
    """One attempt of micro-batch ``batch_id`` that wrote one file (its task committed), and the committer that
    decides it."""
    job = Job.create(f"s3://{bucket}/t", s3=backend.options, job_id=batch_job_id(Q, batch_id, salt))
    with job.spec.task(0, 0) as task:
        with task.create(partition="dt=0", ext="txt") as out:
            out.write(f"batch {batch_id} {salt}\n".encode())
        job.results = [task.commit()]  # type: ignore[attr-defined]
    query = StreamQuery(Q, f"s3://{bucket}/t", ("dt",), fmt)
    return job, StreamCommitter(S3Store(backend.options), parse_uri(f"s3://{bucket}/t"), query)


def commit(job: Job, committer: StreamCommitter, batch_id: int):  # noqa: ANN201
    txn = committer.prepare(batch_id, job.job_id)
    if txn is None:
        return None
    job.txn = txn
    return job.commit(job.results)  # type: ignore[attr-defined]


def visible(backend, bucket: str) -> list[str]:
    return sorted(read_object(backend.client, bucket, k).decode().strip() for k in all_keys(backend.client, bucket, "t/")
                  if k.endswith(".txt"))


def test_each_micro_batch_commits_once_and_its_replay_is_recognised_by_the_ledger(moto_backend) -> None:  # noqa: ANN001
    be = moto_backend
    bucket = be.new_bucket("mpc-stream")
    job0, committer = attempt(be, bucket, 0, "a" * 12)
    assert commit(job0, committer, 0).position is not None
    record_key = f"t/{STREAMS_ROOT}{Q}.json"
    assert json.loads(read_object(be.client, bucket, record_key))["kind"] == "mpcommit.StreamQuery"
    assert committer.newest().version == 0 and committer.newest().job_id == job0.job_id

    # Spark's commit log lost micro-batch 0: its replay is rolled back before it takes a place, nothing written twice.
    replay, committer = attempt(be, bucket, 0, "b" * 12)
    places = [k for k in all_keys(be.client, bucket, "t/_mpcommit/order/") if not k.endswith(".done")]
    assert commit(replay, committer, 0) is None
    assert [k for k in all_keys(be.client, bucket, "t/_mpcommit/order/") if not k.endswith(".done")] == places
    assert visible(be, bucket) == [f"batch 0 {'a' * 12}"]

    job1, committer = attempt(be, bucket, 1, "c" * 12)
    commit(job1, committer, 1)
    assert committer.newest().version == 1
    # A replay of a micro-batch older than the newest committed: the checkpoint is older than the table.
    stale, committer = attempt(be, bucket, 0, "d" * 12)
    with pytest.raises(StreamStateError, match="checkpoint is older than the table"):
        commit(stale, committer, 0)
    committer.roll_back(stale.job_id, "refused")  # as the sink does with a refused attempt
    assert visible(be, bucket) == [f"batch 0 {'a' * 12}", f"batch 1 {'c' * 12}"]
    assert pending_uploads(be.client, bucket) == []


def test_an_attempt_that_began_its_commit_is_finished_by_the_replay_and_one_that_did_not_is_rolled_back(
        moto_backend) -> None:  # noqa: ANN001
    from mpcommit.protocol import faults

    be = moto_backend
    bucket = be.new_bucket("mpc-stream")
    # Micro-batch 0's first attempt dies after its journal: its commit began, so the replay finishes it.
    first, committer = attempt(be, bucket, 0, "a" * 12)
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(CommitStateUnknownError):
        commit(first, committer, 0)
    replay, committer = attempt(be, bucket, 0, "b" * 12)
    assert commit(replay, committer, 0) is None, "the first attempt committed: the replay writes nothing"
    assert committer.newest().job_id == first.job_id
    # Micro-batch 1's first attempt dies before its commit: the replay rolls it back and commits itself.
    dead, _ = attempt(be, bucket, 1, "c" * 12)
    replay, committer = attempt(be, bucket, 1, "d" * 12)
    assert commit(replay, committer, 1).position is not None
    assert visible(be, bucket) == [f"batch 0 {'a' * 12}", f"batch 1 {'d' * 12}"]
    assert pending_uploads(be.client, bucket) == [] and not all_keys(be.client, bucket, "t/_mpcommit/jobs/")


def test_a_query_restarted_elsewhere_or_otherwise_is_refused_by_name(moto_backend) -> None:  # noqa: ANN001
    be = moto_backend
    bucket = be.new_bucket("mpc-stream")
    job, committer = attempt(be, bucket, 3, "a" * 12)
    with pytest.raises(StreamStateError, match="holds no record of it"):
        committer.prepare(3, job.job_id)
    job0, committer = attempt(be, bucket, 0, "b" * 12)
    commit(job0, committer, 0)
    other, committer = attempt(be, bucket, 1, "c" * 12, fmt="csv")
    with pytest.raises(StreamStateError, match="format: 'parquet' before, 'csv' now"):
        committer.prepare(1, other.job_id)


def test_a_record_of_an_older_mpcommit_keeps_its_batches_committed(moto_backend) -> None:  # noqa: ANN001
    be = moto_backend
    bucket = be.new_bucket("mpc-stream")
    key = f"t/{STREAMS_ROOT}{Q}.json"
    be.client.put_object(Bucket=bucket, Key=key,
                         Body=legacy_record(4).replace(b"s3://bkt/t", f"s3://{bucket}/t".encode()))
    replay, committer = attempt(be, bucket, 4, "a" * 12)
    assert commit(replay, committer, 4) is None, "micro-batch 4 was committed before the ledger"
    nxt, committer = attempt(be, bucket, 5, "b" * 12)
    assert commit(nxt, committer, 5).position is not None
    assert committer.newest().version == 5
    assert visible(be, bucket) == [f"batch 5 {'b' * 12}"]


def test_the_ledger_is_read_from_the_newest_places_not_the_whole_order(moto_backend) -> None:  # noqa: ANN001
    """Each micro-batch's decision asks the order for the query's newest version. A new process reads entries
    newest first, a few at a time, and stops at the first committed place of the query: two entries here, not
    every place the order holds (before: all of them, read side by side, twice per micro-batch)."""
    from mpcommit.protocol.layout import Table
    from mpcommit.protocol.order import TableOrder

    be = moto_backend
    bucket = be.new_bucket("mpc-stream")
    for batch_id in range(12):
        job, committer = attempt(be, bucket, batch_id, f"{batch_id:012x}")
        commit(job, committer, batch_id)
    order = TableOrder(S3Store(be.options), Table(bucket, "t"))
    read: list[int] = []
    real = order.entry
    order.entry = lambda position: read.append(position) or real(position)  # type: ignore[method-assign]
    newest = order.txn_state(batch_txn(Q, 0).app_id).newest
    assert (newest.version, newest.position) == (11, 12)
    assert sorted(set(read)) == [11, 12], read  # (a cached entry asked again counts once)
