"""The soak checker's commit-order model (tests/soak/checker.check_order_model) on a bucket written by hand: the
rows a replay of the order leaves pass; a row an overwrite replaced, back again, or a row lost, or a place left
open, or a job whose log and place disagree, fail."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.soak.checker import JobLog, Reader, check_order_model, read_order, settle_fates
from tests.soak.runner import line

A = "11111111-1111-4111-8111-111111111111"
B = "22222222-2222-4222-8222-222222222222"
C = "33333333-3333-4333-8333-333333333333"


def _entry(position: int, job: str, mode: str, po: str = "static", purpose: str = "write") -> dict[str, Any]:
    return {"kind": "mpcommit.OrderEntry", "version": 1, "position": position, "jobId": job, "purpose": purpose,
            "mode": mode, "partitionOverwrite": po}


def _place(client: Any, bucket: str, entry: dict[str, Any], outcome: str | None) -> None:
    key = f"data/_mpcommit/order/{entry['position']:020d}"
    client.put_object(Bucket=bucket, Key=key, Body=json.dumps(entry).encode())
    if outcome:
        client.put_object(Bucket=bucket, Key=f"{key}.done", Body=json.dumps({"outcome": outcome}).encode())


def _file(client: Any, bucket: str, run: str, job: str, value: str, lines: int, task: int = 0) -> None:
    body = "".join(line(run, task, 0, value, 0, i) for i in range(lines))
    client.put_object(Bucket=bucket, Key=f"data/k={value}/part-{task:05d}-{job}.c000.txt", Body=body.encode())


def _jobs() -> dict[str, JobLog]:
    a = JobLog("p0-0", "py", "data", "append", "static", 0, job_id=A, fate="committed",
               rows={"0": {"attempt": 0, "files": [["a", 0, 2]]}, "1": {"attempt": 0, "files": [["b", 0, 2]]}})
    b = JobLog("p1-0", "py", "data", "overwrite", "dynamic", 0, job_id=B, fate="committed",
               rows={"0": {"attempt": 0, "files": [["a", 0, 1]]}})
    return {"p0-0": a, "p1-0": b}


@pytest.fixture
def table(moto_backend: Any) -> tuple[Any, str]:
    """A appended k=a and k=b; B, a dynamic overwrite of k=a, came after; C compacted k=b (no row changed)."""
    client = moto_backend.client
    bucket = moto_backend.new_bucket("soak-order")
    _place(client, bucket, _entry(1, A, "append"), "committed")
    _place(client, bucket, _entry(2, B, "overwrite", "dynamic"), "committed")
    _place(client, bucket, _entry(3, C, "append", purpose="compact"), "committed")
    _file(client, bucket, "p0-0", C, "b", 2, task=1)  # A's k=b rows, now in C's merged file
    _file(client, bucket, "p1-0", B, "a", 1)
    return client, bucket


def _verdict(client: Any, bucket: str, jobs: dict[str, JobLog] | None = None) -> Any:
    jobs = jobs or _jobs()
    return check_order_model(client, bucket, ["data"], Reader(client, bucket).snapshot(), jobs)


def test_the_replayed_order_passes(table: tuple[Any, str]) -> None:
    verdict = _verdict(*table)
    assert verdict.violations == []
    assert verdict.notes["data: committed places"] == 3 and verdict.notes["data: model rows"] == 3


def test_a_replaced_row_back_fails(table: tuple[Any, str]) -> None:
    client, bucket = table
    _file(client, bucket, "p0-0", A, "a", 2)  # A's k=a rows, which B replaced
    [problem] = _verdict(client, bucket).violations
    assert "not the commit order's model" in problem and "2 too many" in problem


def test_a_lost_row_fails(table: tuple[Any, str]) -> None:
    client, bucket = table
    client.delete_object(Bucket=bucket, Key=f"data/k=a/part-00000-{B}.c000.txt")
    [problem] = _verdict(client, bucket).violations
    assert "1 missing" in problem


def test_an_open_place_and_a_log_the_order_contradicts_fail(table: tuple[Any, str]) -> None:
    client, bucket = table
    _place(client, bucket, _entry(4, "44444444-4444-4444-8444-444444444444", "append"), None)
    jobs = _jobs()
    jobs["p1-0"].fate = "not_committed"
    violations = _verdict(client, bucket, jobs).violations
    assert any("still open at the end" in v for v in violations)
    assert any("p1-0 not committed by its log, its place 2 ended committed" in v for v in violations)


def test_an_empty_file_is_named_not_taken_for_rows_merely_missing(table: tuple[Any, str]) -> None:
    """What LocalStack left of two completes of one upload at once: the object listed, its body empty."""
    client, bucket = table
    client.put_object(Bucket=bucket, Key=f"data/k=a/part-00000-{B}.c000.txt", Body=b"")
    snap = Reader(client, bucket).snapshot()
    assert [u.split(":")[0] for u in snap.unreadable] == [f"data/k=a/part-00000-{B}.c000.txt"]
    assert "0 bytes read" in snap.unreadable[0]


def test_a_killed_job_ends_as_its_place_in_the_order_says(table: tuple[Any, str]) -> None:
    """A driver killed in its commit and finished by a later job's take-over leaves no trace in the soak's logs:
    at the end its fate is read from its place (committed, with the place's end as its time)."""
    client, bucket = table
    client.put_object(Bucket=bucket, Key="data/_mpcommit/order/00000000000000000002.done",
                      Body=json.dumps({"outcome": "committed", "time": 1234}).encode())
    jobs = _jobs()
    jobs["p1-0"].fate, jobs["p1-0"].end = "killed", None
    jobs["p9-0"] = JobLog("p9-0", "py", "data", "append", "static", 0, job_id="99999999-9999-4999-8999-999999999999",
                          fate="killed")  # never took a place: left as it was
    assert settle_fates(jobs, {"data": read_order(client, bucket, "data")}) == 1
    assert (jobs["p1-0"].fate, jobs["p1-0"].end) == ("committed", 1234)
    assert jobs["p9-0"].fate == "killed"


def test_records_of_a_job_whose_driver_still_cleans_up_are_judged_at_the_end_only() -> None:
    """A `recover` says a job ended (its driver recorded the end) while the driver, still running, removes the
    job's records: mid-run that is no leftover; at the end, once every driver stopped, it is."""
    from tests.soak.checker import Snapshot, check

    job = JobLog("p0-0", "py", "data", "append", "static", 0, job_id=A, fate="committed", end=1,
                 driver_still_running=True)
    snap = Snapshot({}, 0, [], [], {A: {f"data/_temporary/mpcommit/{A}/alive.json"}})
    assert check(snap, {"p0-0": job}, final=False).violations == []
    [problem] = check(snap, {"p0-0": job}, final=True).violations
    assert "records of finished job p0-0" in problem
    job.driver_still_running = False
    assert check(snap, {"p0-0": job}, final=False).violations == [problem]
