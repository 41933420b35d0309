"""The CLI against the servers that run as processes of their own (LocalStack, versitygw, SeaweedFS), which report
real Initiated times and paginate ListMultipartUploads: age-based cleanup and pagination can only be tested there
(moto reports every upload as initiated in 2010 and never paginates). versitygw refuses the UploadIdMarker it
returns, so its pages are followed by key marker (mpcommit.store.s3.S3Store.list_multipart_uploads)."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpcommit import Job
from mpcommit.errors import CommitStateUnknownError
from mpcommit.protocol import faults
from tests.support.checks import pending_upload_entries, pending_uploads, visible_keys
from tests.support.jobs import lines_of_partitions, write_task

from tests.support.cli import cli, data_key, start_uploads

#: Uploads created before the pause are older than the threshold, those created after it are younger when
#: listed: LocalStack's Initiated has whole seconds, and the CLI's start-up on a busy machine takes seconds.
PAUSE = 10.0
THRESHOLD_SECONDS = 7
THRESHOLD = f"{THRESHOLD_SECONDS}s"


@pytest.mark.ci_on("localstack")
def test_age_cutoff_live_jobs_and_committing_jobs_on_one_prefix(server_backend):
    """One prefix holding everything an hourly cleanup meets: old and young orphans, a live job that has been
    writing for longer than the threshold, a job whose commit was interrupted, and a sibling table."""
    backend = server_backend
    mpcommit = cli(backend)
    client = backend.client
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    old_orphans = start_uploads(client, bucket, [data_key("t", partition="dt=1"), data_key("t"), "t/loose.bin"],
                                with_part=True)
    sibling = start_uploads(client, bucket, [data_key("t2")])
    live = Job.create(uri, s3=backend.options)
    write_task(live, 0, lines_of_partitions(0, ["dt=1", "dt=2"]))  # old uploads of a live job
    stuck = Job.create(uri, s3=backend.options)
    result = write_task(stuck, 0, lines_of_partitions(0, ["dt=3"]))
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(CommitStateUnknownError):
        stuck.commit([result])

    time.sleep(PAUSE)
    young_orphans = start_uploads(client, bucket, [data_key("t"), "t/young.bin"])
    # The live job keeps working while the cleaners run, as a live job does: a task every half second.
    stop = threading.Event()

    def keep_writing() -> None:
        task_id = 1
        while not stop.is_set():
            write_task(live, task_id, lines_of_partitions(task_id, ["dt=1"]))
            task_id += 1
            stop.wait(0.5)

    with ThreadPoolExecutor(3) as pool:
        heartbeat = pool.submit(keep_writing)
        time.sleep(0.2)
        # Both right away, side by side: the young uploads must still be younger than the threshold when listed.
        listing = pool.submit(mpcommit, "uploads", "list", uri, "--older-than", THRESHOLD, "--json")
        cleaning = pool.submit(mpcommit, "uploads", "abort", uri, "--older-than", THRESHOLD, "--yes", "--json")
        listed, cleaned = listing.result(), cleaning.result()
        stop.set()
        heartbeat.result()

    assert listed.returncode == 0, listed
    old_keys = {u["key"] for u in listed.json()["uploads"]}
    assert not {k for k, _ in young_orphans} & old_keys  # the age filter leaves young uploads out...
    assert {k for k, _ in pending_uploads(client, bucket, "t/dt=2")} <= old_keys  # ...and keeps old ones (task 0's)
    assert all(u["ageSeconds"] >= THRESHOLD_SECONDS for u in listed.json()["uploads"])

    assert cleaned.returncode == 0, cleaned
    report = cleaned.json()
    assert sorted(r["uploadId"] for r in report["results"] if r["outcome"] == "aborted") == sorted(u for _, u in old_orphans)
    assert report["bytesFreed"] == 3 * 1000
    protected = {p["jobId"]: p["reason"] for p in report["protected"]}
    assert set(protected) == {live.job_id, stuck.job_id}
    assert "may still be writing" in protected[live.job_id] and "jobs recover" in protected[stuck.job_id]

    left = set(pending_uploads(client, bucket, "t"))
    live_left = [k for k, _ in left if live.job_id in k]
    assert set(young_orphans) <= left and not set(old_orphans) & left
    assert len(live_left) >= 3 and len([k for k, _ in left if stuck.job_id in k]) == 1
    assert set(sibling) == set(pending_uploads(client, bucket, "t2"))

    jobs = {j["jobId"]: j for j in mpcommit("jobs", "list", uri, "--json").json()["jobs"]}
    assert jobs[live.job_id]["state"] == "writing" and jobs[stuck.job_id]["state"] == "committing"
    assert jobs[live.job_id]["pendingUploads"] == len(live_left)

    recovered = mpcommit("jobs", "recover", uri, "--json")
    assert recovered.returncode == 0, recovered
    actions = {a["jobId"]: a["action"] for a in recovered.json()["actions"]}
    assert actions == {live.job_id: "skipped", stuck.job_id: "finished"}
    assert [k for k in visible_keys(client, bucket, "t") if stuck.job_id in k] != []

    named = mpcommit("uploads", "abort", uri, "--job", live.job_id, "--yes", "--json")
    assert named.returncode == 0 and named.json()["aborted"] == len(live_left), named
    assert set(pending_uploads(client, bucket, "t")) == set(young_orphans)


@pytest.mark.ci_on("localstack")  # versitygw's listing pages: tests/protocol/test_large_listings.py in CI
def test_more_than_a_thousand_uploads_are_listed_and_aborted_across_pages(server_backend):
    backend = server_backend
    mpcommit = cli(backend)
    client = backend.client
    bucket = backend.new_bucket()
    t0 = time.monotonic()
    keys = [f"big/k{i % 97:03d}/f" for i in range(1100)]  # many uploads per key: UploadIdMarker matters too
    started = start_uploads(client, bucket, keys, threads=32)
    created = time.monotonic() - t0
    assert len(pending_upload_entries(client, bucket, "big", page_size=1000)) == 1100  # the server paginates

    listed = mpcommit("uploads", "list", f"s3://{bucket}/big", "--json")
    assert listed.returncode == 0, listed
    doc = listed.json()
    assert doc["count"] == 1100
    assert sorted(u["uploadId"] for u in doc["uploads"]) == sorted(u for _, u in started)

    aborted = mpcommit("uploads", "abort", f"s3://{bucket}/big", "--older-than", "0s", "--yes", "--json")
    assert aborted.returncode == 0, aborted
    assert aborted.json()["aborted"] == 1100
    assert pending_uploads(client, bucket, "big") == []
    print(f"created 1,100 uploads in {created:.1f}s; listed with ListParts in {doc['seconds']:.1f}s; "
          f"aborted in {aborted.json()['seconds']:.1f}s")


def test_uploads_list_reports_real_ages(server_backend):
    backend = server_backend
    mpcommit = cli(backend)
    bucket = backend.new_bucket()
    start_uploads(backend.client, bucket, [f"t/{uuid.uuid4().hex}"])
    [upload] = mpcommit("uploads", "list", f"s3://{bucket}/t", "--json").json()["uploads"]
    assert 0 <= upload["ageSeconds"] < 120 and upload["initiated"].startswith(time.strftime("%Y", time.gmtime()))
