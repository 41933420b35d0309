"""scripts/cleanup_orphaned_uploads.py, run as cron would run it: no terminal, logs on stderr, exit status."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

from tests.support.checks import pending_uploads

from tests.support.cli import SCRIPT, cli_env, start_uploads
from tests.support.cli import cleanup_script as run_script


def test_logs_every_action_and_a_summary_per_destination(moto_backend):
    cleanup_script = run_script(moto_backend)
    backend = moto_backend
    bucket = backend.new_bucket()
    start_uploads(backend.client, bucket, ["a/1", "a/2", "b/1"], with_part=True)
    start_uploads(backend.client, bucket, ["a2/keep"])

    dry = cleanup_script("--older-than", "1h", "--dry-run", f"s3://{bucket}/a", f"s3://{bucket}/b")
    assert dry.returncode == 0, dry
    assert len(re.findall(r" INFO would abort s3://\S+/(a|b)/\d ", dry.stderr)) == 3
    assert len(pending_uploads(backend.client, bucket, "")) == 4

    result = cleanup_script("--older-than", "1h", "--json", f"s3://{bucket}/a", f"s3://{bucket}/b")
    assert result.returncode == 0, result
    aborted = re.findall(r"^\S+Z INFO aborted s3://(\S+) upload=\S+ bytes=(\d+) job=-$", result.stderr, re.M)
    assert sorted(k for k, _ in aborted) == [f"{bucket}/a/1", f"{bucket}/a/2", f"{bucket}/b/1"]
    assert {b for _, b in aborted} == {"1000"}
    summaries = re.findall(r"summary (\S+) \(done\): listed=(\d+) selected=(\d+) aborted=(\d+) bytes_freed=(\d+)",
                           result.stderr)
    assert summaries == [(f"s3://{bucket}/a/", "2", "2", "2", "2000"), (f"s3://{bucket}/b/", "1", "1", "1", "1000")]
    assert [d["aborted"] for d in result.json()["destinations"]] == [2, 1]
    assert [k for k, _ in pending_uploads(backend.client, bucket, "")] == ["a2/keep"]

    again = cleanup_script("--older-than", "1h", f"s3://{bucket}/a")  # hourly: the next run finds nothing
    assert again.returncode == 0 and "aborted=0" in again.stderr, again


def test_refuses_to_run_without_an_age_or_a_job(moto_backend):
    cleanup_script = run_script(moto_backend)
    result = cleanup_script(f"s3://{moto_backend.new_bucket()}/a")
    assert result.returncode == 2 and "--older-than" in result.stderr and "Traceback" not in result.stderr


def test_two_cleaners_at_once_share_the_work_without_errors(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket()
    start_uploads(backend.client, bucket, [f"t/f{i:03d}" for i in range(120)])
    command = [sys.executable, str(SCRIPT), "--endpoint-url", backend.endpoint_url, "--older-than", "1h",
               "--threads", "4", f"s3://{bucket}/t"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
                             stdin=subprocess.DEVNULL) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outputs
    aborted = sum(len(re.findall(r" INFO aborted ", err)) for _, err in outputs)
    vanished = sum(len(re.findall(r" INFO vanished ", err)) for _, err in outputs)
    assert aborted == 120  # each upload aborted exactly once; the other cleaner saw it vanish, or never saw it
    assert vanished <= 120
    assert pending_uploads(backend.client, bucket, "t") == []


def test_sigint_stops_cleanly_and_reports_what_was_done(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket()
    start_uploads(backend.client, bucket, [f"t/f{i:03d}" for i in range(120)])
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--endpoint-url", backend.endpoint_url, "--older-than", "1h",
                          "--threads", "1", f"s3://{bucket}/t"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=cli_env(), stdin=subprocess.DEVNULL)
    lines = []
    assert p.stderr is not None
    deadline = time.monotonic() + 60
    for line in p.stderr:  # wait until it is aborting, then interrupt it
        lines.append(line)
        if " INFO aborted " in line or time.monotonic() > deadline:
            break
    p.send_signal(signal.SIGINT)
    rest, _ = p.stderr.read(), p.wait(timeout=60)
    log = "".join(lines) + rest
    assert p.returncode == 1, log
    assert "received SIGINT" in log and "Traceback" not in log
    aborted = len(re.findall(r" INFO aborted ", log))
    summary = re.search(r"summary \S+ \(interrupted\): .* aborted=(\d+) .* not_done=(\d+)", log)
    assert summary, log
    assert int(summary.group(1)) == aborted and 1 <= aborted < 120
    assert len(pending_uploads(backend.client, bucket, "t")) == 120 - aborted == int(summary.group(2))


def test_dead_jobs_records_go_and_interrupted_commits_are_left_for_a_person(moto_backend):
    """With --older-than the script also removes the records a dead job left under _temporary/ (they stayed
    for ever before), and logs an interrupted commit for `mpcommit jobs recover` instead of finishing it."""
    import pytest

    from mpcommit import Job
    from mpcommit.errors import CommitStateUnknownError
    from mpcommit.options import OrderSettings
    from mpcommit.protocol import faults
    from tests.support.invariants import job_records
    from tests.support.jobs import write_task

    backend = moto_backend
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    quiet = OrderSettings(heartbeat_seconds=3600, lease_seconds=7200)  # one beat, at creation
    dead = Job.create(uri, s3=backend.options, order=quiet)
    stuck = Job.create(uri, s3=backend.options, order=quiet)
    ref = write_task(stuck, 0, {"dt=1": b"x\n"})
    with faults.installed(faults.fail_at("commit.after_journal")), pytest.raises(CommitStateUnknownError):
        stuck.commit([ref])
    time.sleep(1.5)
    result = run_script(backend)("--older-than", "1s", "--json", uri)
    assert result.returncode == 0, result
    assert re.search(rf"job {dead.job_id} rolled_back: ", result.stderr), result.stderr
    assert re.search(rf"job {stuck.job_id} skipped: its commit was interrupted: finish it with `mpcommit jobs "
                     "recover", result.stderr), result.stderr
    assert result.json()["destinations"][0]["records"]["rolled_back"] == 1
    # moto dates every upload 2010: the stuck job's is old enough, and protected.
    assert re.search(r"summary \S+ \(done\): .* protected=1 .* jobs_finished=0 jobs_rolled_back=1 jobs_skipped=1 "
                     r"jobs_failed=0 ", result.stderr), result.stderr
    assert not job_records(backend.client, bucket, "t", dead.job_id)
    assert job_records(backend.client, bucket, "t", stuck.job_id)  # left for a person: its data waits
    assert len(pending_uploads(backend.client, bucket, "t")) == 1


def test_the_summary_counts_what_was_left_alone_and_why(server_backend):
    """Issue 40: right after a job was killed, `--older-than 2d` logged `job ...: skipped: it was active ...` and
    then summed up `selected=0 ... protected=0 skipped=0`, as if nothing had been there. The summary line counts
    the uploads left because they are too young and the jobs whose records were skipped, so that a grep of the
    summaries finds them. (A server of its own: moto dates every upload 2010, so none is ever too young.)"""
    from mpcommit import Job
    from tests.support.jobs import write_task

    backend = server_backend
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    killed = Job.create(uri, s3=backend.options)  # beats its heartbeat: active a moment ago
    try:
        write_task(killed, 0, {"dt=1": b"x\n", "dt=2": b"y\n", "dt=3": b"z\n"}, commit=False)
        result = run_script(backend)("--older-than", "2d", "--json", uri)
    finally:
        killed.abort()
    assert result.returncode == 0, result
    assert re.search(rf"job {killed.job_id} skipped: ", result.stderr), result.stderr
    assert re.search(r" INFO left 3 upload\(s\) alone: younger than 2d 0h$", result.stderr, re.M), result.stderr
    summary = re.search(r"summary \S+ \(done\): (.*)$", result.stderr, re.M)
    assert summary, result.stderr
    counts = dict(field.split("=") for field in summary.group(1).split())
    assert (counts["listed"], counts["selected"], counts["not_matched"], counts["protected"]) == ("3", "0", "3", "0")
    assert (counts["jobs_skipped"], counts["jobs_rolled_back"], counts["jobs_finished"]) == ("1", "0", "0")
    destination = result.json()["destinations"][0]
    assert destination["notMatched"] == 3 and destination["records"]["skipped"] == 1
