"""The ``mpcommit`` console script, run in a subprocess: output contracts, exit codes, bad input."""

from __future__ import annotations

import json
import os
import pty
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

from mpcommit import Job
from mpcommit.cli.main import main
from mpcommit.operations.lifecycle import RULE_ID
from tests.support.checks import pending_uploads

from tests.support.cli import Run, assert_clean_error, cli, cli_env, data_key, mpcommit_command, run, start_uploads


@pytest.mark.ci_on("localstack")
def test_sibling_prefixes_are_folders_unless_string_prefix_is_asked_for(backend, bucket):
    mpcommit = cli(backend)
    client = backend.client
    start_uploads(client, bucket, ["data1/a", "data1/b/c", "data10/a", "data1x"])

    listed = mpcommit("uploads", "list", f"s3://{bucket}/data1", "--json")
    assert listed.returncode == 0, listed
    doc = listed.json()
    assert sorted(u["key"] for u in doc["uploads"]) == ["data1/a", "data1/b/c"]
    assert doc["count"] == 2 and doc["bytes"] == 0

    wide = mpcommit("uploads", "list", f"s3://{bucket}/data1", "--string-prefix", "--json").json()
    assert sorted(u["key"] for u in wide["uploads"]) == ["data1/a", "data1/b/c", "data10/a", "data1x"]

    aborted = mpcommit("uploads", "abort", f"s3://{bucket}/data1", "--older-than", "0s", "--yes", "--json")
    assert aborted.returncode == 0, aborted
    assert aborted.json()["aborted"] == 2
    assert sorted(k for k, _ in pending_uploads(client, bucket, "", exact_prefix=True)) == ["data10/a", "data1x"]


def test_list_prints_a_table_with_totals_for_people(moto_backend):
    mpcommit = cli(moto_backend)
    backend = moto_backend
    bucket = backend.new_bucket()
    job_id = str(uuid.uuid4())
    start_uploads(backend.client, bucket, [data_key("t", job_id), "t/[x] loose.bin"], with_part=True)
    result = mpcommit("uploads", "list", f"s3://{bucket}/t")
    assert result.returncode == 0, result
    assert f"part-00000-{job_id}.c000.txt" in result.stdout and job_id in result.stdout
    assert "t/[x] loose.bin" in result.stdout  # keys are data, not markup
    assert "2 uploads" in result.stdout and "2.0 kB" in result.stdout
    assert result.stderr == ""  # no progress bars when stderr is not a terminal
    empty = mpcommit("uploads", "list", f"s3://{bucket}/nothing-here")
    assert empty.returncode == 0 and "No pending uploads" in empty.stdout
    one = mpcommit("uploads", "list", f"s3://{bucket}/t/[x]", "--string-prefix")
    assert "1 upload " in one.stdout and "1 uploads" not in one.stdout, one
    week = mpcommit("uploads", "list", f"s3://{bucket}/nothing-here", "--older-than", "7d")
    assert "No pending uploads older than 7d in" in week.stdout, week  # not "7d 0h"
    planned = mpcommit("uploads", "abort", f"s3://{bucket}/nothing-here", "--older-than", "26h", "--dry-run")
    assert "would abort 0 uploads older than 1d 2h," in planned.stdout, planned


def test_abort_refuses_without_a_selection_or_someone_to_confirm(moto_backend):
    mpcommit = cli(moto_backend)
    backend = moto_backend
    bucket = backend.new_bucket()
    start_uploads(backend.client, bucket, ["t/a"])
    no_selection = mpcommit("uploads", "abort", f"s3://{bucket}/t", "--yes")
    assert_clean_error(no_selection, 2, "--older-than", "--job")
    no_terminal = mpcommit("uploads", "abort", f"s3://{bucket}/t", "--older-than", "1s")  # stdin is /dev/null
    assert_clean_error(no_terminal, 2, "--yes")
    assert len(pending_uploads(backend.client, bucket, "t")) == 1


@pytest.mark.parametrize("answer, code, left", [("n", 1, 1), ("y", 0, 0)])
def test_abort_asks_on_a_terminal(moto_backend, answer, code, left):
    backend = moto_backend
    bucket = backend.new_bucket()
    start_uploads(backend.client, bucket, ["t/a"])
    controller, terminal = pty.openpty()
    try:
        p = subprocess.Popen([*mpcommit_command(), "--endpoint-url", backend.endpoint_url, "uploads", "abort",
                              f"s3://{bucket}/t", "--older-than", "1s"], stdin=terminal, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=cli_env(), text=True)
        os.write(controller, f"{answer}\n".encode())
        out, err = p.communicate(timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)
    assert p.returncode == code, (out, err)
    assert "Abort 1 upload holding" in err
    assert "t/a" in out  # the plan is shown before the question
    assert len(pending_uploads(backend.client, bucket, "t")) == left


def test_dry_run_changes_nothing(backend, bucket):
    mpcommit = cli(backend)
    before = sorted(start_uploads(backend.client, bucket, [f"t/f{i}" for i in range(5)], with_part=True))
    result = mpcommit("uploads", "abort", f"s3://{bucket}/t", "--older-than", "0s", "--dry-run", "--json")
    assert result.returncode == 0, result
    doc = result.json()
    assert doc["dryRun"] and doc["selected"] == 5 and doc["selectedBytes"] == 5000 and doc["aborted"] == 0
    assert {r["outcome"] for r in doc["results"]} == {"would_abort"}
    assert sorted(pending_uploads(backend.client, bucket, "t")) == before
    if backend.name == "moto":  # the text for people once is enough
        text = mpcommit("uploads", "abort", f"s3://{bucket}/t", "--older-than", "0s", "--dry-run")
        assert "Dry run: would abort 5 uploads older than 0s," in text.stdout and "Nothing was changed" in text.stdout
    assert sorted(pending_uploads(backend.client, bucket, "t")) == before


def test_lifecycle_rule_is_merged_with_existing_rules_and_idempotent(backend, bucket):
    if backend.name == "versitygw":
        pytest.skip("versitygw has no bucket lifecycle: test_lifecycle_where_the_server_has_none_says_so_at_once")
    mpcommit = cli(backend)
    client = backend.client
    existing = [
        {"ID": "expire-logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
        {"ID": "tmp-uploads", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
    ]
    client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": existing})
    shown = mpcommit("lifecycle", bucket)
    assert shown.returncode == 0 and "No enabled rule aborts" in shown.stdout, shown

    def rules() -> dict[str, dict]:
        return {r["ID"]: r for r in client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]}

    added = mpcommit("lifecycle", f"s3://{bucket}", "--abort-incomplete-days", "7", "--json")
    assert added.returncode == 0, added
    assert added.json()["change"] == "added" and added.json()["rulesAfter"] == 3
    after = rules()
    assert set(after) == {"expire-logs", "tmp-uploads", RULE_ID}
    assert after["expire-logs"]["Expiration"] == {"Days": 30}
    assert after["tmp-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert after[RULE_ID]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}

    again = mpcommit("lifecycle", bucket, "--abort-incomplete-days", "7")
    assert again.returncode == 0 and "nothing changed" in again.stdout, again
    assert rules() == after

    changed = mpcommit("lifecycle", bucket, "--abort-incomplete-days", "3", "--json").json()
    assert changed["change"] == "updated"
    final = rules()
    assert set(final) == set(after) and final[RULE_ID]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}
    assert final["expire-logs"] == after["expire-logs"]
    shown = mpcommit("lifecycle", bucket, "--json").json()
    assert {r["id"]: r["days"] for r in shown["abortIncompleteRules"]} == {"tmp-uploads": 1, RULE_ID: 3}



def test_lifecycle_where_the_server_has_none_says_so_at_once(versitygw_backend):
    """versitygw answers every lifecycle request 501 NotImplemented: a refusal to name, not a 5xx to retry."""
    bucket = versitygw_backend.new_bucket()
    for args in (["lifecycle", bucket], ["lifecycle", f"s3://{bucket}", "--abort-incomplete-days", "7"]):
        result = cli(versitygw_backend)(*args)
        assert_clean_error(result, 1, "NotImplemented", "no bucket lifecycle rules", "uploads abort", "--older-than")
        assert "still failed after" not in result.stderr and "retry later" not in result.stderr, result


def test_show_prints_the_success_summary(moto_backend):
    mpcommit = cli(moto_backend)
    backend = moto_backend
    bucket = backend.new_bucket()
    job = Job.create(f"s3://{bucket}/t", s3=backend.options)
    with job.spec.task(0, 0) as task:
        for dt in ("2024-01-01", "2024-01-02"):
            with task.create(partition=f"dt={dt}", ext="csv") as out:
                out.write(b"a,b\n1,2\n")
                out.rows = 2
        result = task.commit()
    report = job.commit([result])

    text = mpcommit("show", f"s3://{bucket}/t")
    assert text.returncode == 0, text
    for needle in (job.job_id, "append", "dt=2024-01-01", "Files", "16 B", "Rows", report.filenames[0]):
        assert needle in text.stdout, (needle, text.stdout)
    doc = mpcommit("show", f"s3://{bucket}/t", "--json").json()
    assert doc["name"] == "mpcommit.SuccessData/1" and doc["jobId"] == job.job_id and doc["files"] == 2
    assert sorted(doc["filenames"]) == sorted(report.filenames)

    missing = mpcommit("show", f"s3://{bucket}/elsewhere")
    assert_clean_error(missing, 1, "_SUCCESS")
    backend.client.put_object(Bucket=bucket, Key="hadoop/_SUCCESS", Body=b"")
    assert_clean_error(mpcommit("show", f"s3://{bucket}/hadoop"), 1, "empty file")


def test_show_says_what_the_success_describes_after_an_append_an_overwrite_and_a_compaction(moto_backend):
    mpcommit = cli(moto_backend)
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    for mode, rows in (("overwrite", range(0, 3)), ("append", range(3, 6))):
        job = Job.create(uri, mode=mode, s3=moto_backend.options)
        with job.spec.task(0, 0) as task:
            for i in rows:  # three small files in one partition
                with task.create(partition="dt=1", ext="json") as out:
                    out.write(b'{"id": %d}\n' % i)
                    out.rows = 1
            result = task.commit()
        job.commit([result])
        shown = " ".join(mpcommit("show", uri).stdout.split())
        if mode == "overwrite":
            assert f"The last commit to {uri} was a write in mode overwrite" in shown and "whole table" in shown
        else:
            assert "was an append" in shown and "added the 3 files below" in shown and "not counted" in shown

    compacted = mpcommit("compact", uri, "--small-file-avg", "1MB")
    assert compacted.returncode == 0, compacted
    shown = mpcommit("show", uri)
    text = " ".join(shown.stdout.split())
    assert shown.returncode == 0, shown
    assert "was a compaction" in text and "merged 6 small files into the 1 file below" in text, text
    assert "rows did not change" in text and "not the whole table" in text
    assert mpcommit("show", uri, "--json").json()["mergedFrom"] == 6


def test_jobs_list_recover_and_abort_on_moto(moto_backend):
    mpcommit = cli(moto_backend)
    backend = moto_backend
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    job = Job.create(uri, s3=backend.options)
    with job.spec.task(0, 0) as task:
        with task.create(partition="dt=1", ext="txt") as out:
            out.write(b"x\n")
        task.commit()
    listed = mpcommit("jobs", "list", uri, "--json")
    assert listed.returncode == 0, listed
    [status] = listed.json()["jobs"]
    assert (status["jobId"], status["state"], status["pendingUploads"], status["pendingBytes"]) == (job.job_id, "writing", 1, 2)
    assert job.job_id in mpcommit("jobs", "list", uri).stdout

    # A writing job is left alone by recover unless it is old enough or named.
    kept = mpcommit("jobs", "recover", uri, "--older-than", "1h", "--json")
    assert kept.returncode == 0 and [a["action"] for a in kept.json()["actions"]] == ["skipped"], kept
    assert_clean_error(mpcommit("jobs", "abort", uri, "--job", job.job_id), 2, "--yes", "--dry-run")
    looked = mpcommit("jobs", "abort", uri, "--job", job.job_id, "--dry-run")  # no terminal, no --yes: fine
    assert looked.returncode == 0 and "would abort 1 upload and remove 3 records" in looked.stdout, looked
    assert "Nothing was changed" in looked.stdout and len(pending_uploads(backend.client, bucket, "t")) == 1
    aborted = mpcommit("jobs", "abort", uri, "--job", job.job_id, "--yes")
    assert aborted.returncode == 0 and "aborted 1 upload, removed 3 records" in aborted.stdout, aborted
    assert pending_uploads(backend.client, bucket, "t") == []
    assert mpcommit("jobs", "list", uri, "--json").json()["jobs"] == []
    assert_clean_error(mpcommit("jobs", "abort", uri, "--job", job.job_id, "--yes"), 1, "no job")
    assert_clean_error(mpcommit("jobs", "recover", uri, "--job", job.job_id), 1, "no job")


def test_recover_prints_its_result_after_every_note(moto_backend):
    """Issue 40: `jobs recover` printed each job's result on stdout as it went, and a note the library logs on
    stderr while recovering the next job landed after it -- in the middle of the next command's output when both
    went to one pipe. Notes first, the result last: here the second job's note (its manifest is unreadable) comes
    before the first job's result line."""
    from mpcommit.options import OrderSettings

    backend = moto_backend
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    quiet = OrderSettings(heartbeat_seconds=3600, lease_seconds=7200)  # one beat, at creation: soon idle
    first = Job.create(uri, s3=backend.options, order=quiet, job_id="00000000-0000-4000-8000-000000000001")
    second = Job.create(uri, s3=backend.options, order=quiet, job_id="ffffffff-0000-4000-8000-000000000002")
    for job in (first, second):
        with job.spec.task(0, 0) as task:
            with task.create(partition="dt=1", ext="txt") as out:
                out.write(b"x\n")
            task.commit()
    manifests = backend.client.list_objects_v2(Bucket=bucket, Prefix=f"t/_temporary/mpcommit/{second.job_id}/tasks/")
    for obj in manifests["Contents"]:
        backend.client.put_object(Bucket=bucket, Key=obj["Key"], Body=b"not a manifest")
    time.sleep(1.5)
    p = subprocess.run([*mpcommit_command(), "--endpoint-url", backend.endpoint_url, "jobs", "recover", uri,
                        "--older-than", "1s"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=cli_env(), stdin=subprocess.DEVNULL, timeout=120)
    assert p.returncode == 0, p.stdout
    lines = p.stdout.splitlines()
    note = next(i for i, line in enumerate(lines) if "skipping unreadable manifest" in line)
    results = [i for i, line in enumerate(lines) if line.startswith("rolled_back ")]
    assert len(results) == 2 and note < min(results), p.stdout


def test_global_options_may_follow_the_command(moto_backend):
    bucket = moto_backend.new_bucket()
    url = moto_backend.endpoint_url
    uri = f"s3://{bucket}/t"
    listed = run([*mpcommit_command(), "uploads", "list", uri, "--endpoint-url", url, "--json"])
    assert listed.returncode == 0 and listed.json()["count"] == 0, listed
    jobs = run([*mpcommit_command(), "jobs", "list", uri, f"--endpoint-url={url}", "--region", "us-east-1", "--json"])
    assert jobs.returncode == 0 and jobs.json()["jobs"] == [], jobs
    shown = run([*mpcommit_command(), "--region", "us-east-1", "show", uri, "--endpoint-url", url])
    assert_clean_error(shown, 1, f"no s3://{bucket}/t/_SUCCESS")  # the endpoint was used: the bucket exists there
    assert_clean_error(run([*mpcommit_command(), "uploads", "list", uri, "--endpoint-url"]), 2,
                       "'--endpoint-url' requires an argument")
    help_text = run([*mpcommit_command(), "--help"]).stdout
    assert "may also follow the command" in " ".join(help_text.split())


def test_an_endpoint_nothing_listens_on_is_reported_once_and_at_once():
    with socket.socket() as probe:  # a port nothing listens on: bound, then released
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run([*mpcommit_command(), "--endpoint-url", f"http://127.0.0.1:{port}", "uploads", "list", "s3://bkt/t"])
    assert_clean_error(result, 1, "could not reach the endpoint", "connection refused", f"http://127.0.0.1:{port}")
    assert result.stderr.count("could not reach the endpoint") == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "--endpoint-url" in result.stderr and "S3Options" not in result.stderr, "the command line's own flag"
    for wrong in ("throttl", "slow down", "max_attempts", "attempts"):
        assert wrong not in result.stderr.lower(), result


BAD_INPUT = [
    # (arguments, exit code, words the message must contain)
    (["uploads", "list", "s3://{bucket}/t", "--older-than", "5x"], 2, ["not a duration", "30m"]),
    (["uploads", "abort", "s3://{bucket}/t", "--older-than", "-3d", "--yes"], 2, ["not a duration"]),
    (["uploads", "list", "/tmp/data"], 2, ["not an S3 URI"]),
    (["uploads", "list", "http://{bucket}/t"], 2, ["not an S3 URI"]),
    (["uploads", "abort", "s3://{bucket}/t", "--job", "not-a-job", "--yes"], 2, ["not an mpcommit job id"]),
    (["lifecycle", "{bucket}", "--abort-incomplete-days", "0"], 2, ["--abort-incomplete-days"]),
    (["lifecycle", "s3://{bucket}/some/prefix"], 2, ["whole bucket"]),
    (["uploads", "list", "s3://no-such-bucket-{suffix}/t"], 1, ["NoSuchBucket", "does not exist"]),
    (["lifecycle", "no-such-bucket-{suffix}"], 1, ["NoSuchBucket"]),
    (["jobs", "list", "s3://no-such-bucket-{suffix}/t"], 1, ["NoSuchBucket"]),
    (["--endpoint-url", "localhost:1", "uploads", "list", "s3://{bucket}/t"], 2, ["http://"]),
    (["--profile", "no-such-profile", "uploads", "list", "s3://{bucket}/t"], 2, ["no-such-profile"]),
    (["no-such-command"], 2, ["No such command"]),
    (["jobs", "recover", "s3://{bucket}/t", "--max-wait", "soon"], 2, ["not a wait", "forever"]),
    (["compact", "s3://{bucket}/t", "--lease", "0s"], 2, ["lease must be longer than 0"]),
]


#: These few also run as real processes: the rest go through the same ``main()`` in this process (faster).
IN_A_PROCESS = {0, 2, 7, 11}


def test_bad_input_gets_a_clear_message_and_the_right_exit_code(moto_backend, capsys, monkeypatch):
    bucket = moto_backend.new_bucket()
    suffix = uuid.uuid4().hex[:8]
    # No credentials anywhere: a clear message, not a botocore traceback.
    bare = {k: v for k, v in cli_env().items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    result = run([*mpcommit_command(), "--endpoint-url", moto_backend.endpoint_url, "uploads", "list",
                  f"s3://{bucket}/t"], env=bare)
    assert_clean_error(result, 1, "no usable credentials", "AWS_ACCESS_KEY_ID")
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in cli_env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    failures = []
    for n, (args, code, needles) in enumerate(BAD_INPUT):
        argv = ["--endpoint-url", moto_backend.endpoint_url, *(a.format(bucket=bucket, suffix=suffix) for a in args)]
        if n in IN_A_PROCESS:
            result = run([*mpcommit_command(), *argv])
        else:
            returncode = main(argv)
            captured = capsys.readouterr()
            result = Run(["main", *argv], returncode, captured.out, captured.err)
        try:
            assert_clean_error(result, code, *needles)
            assert len(result.stderr.strip().splitlines()) <= 4, "a short message, not a wall of text"
            assert result.stdout == "", "nothing on stdout"
        except AssertionError as exc:
            failures.append(f"{exc}\n{result}")
    assert not failures, "\n\n".join(failures)


def test_ctrl_c_stops_an_abort_cleanly_and_reports_what_was_done(moto_backend, capsys, monkeypatch):
    """A real SIGINT to this process while ``main()`` aborts: the first one asks for a clean stop."""
    backend = moto_backend
    bucket = backend.new_bucket()
    start_uploads(backend.client, bucket, [f"t/f{i:03d}" for i in range(120)])
    for name, value in cli_env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    late: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: late.append(signum))  # a SIGINT after main()
    done = threading.Event()

    def interrupt_once_aborting() -> None:
        while not done.is_set():
            if len(pending_uploads(backend.client, bucket, "t")) < 120:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=interrupt_once_aborting, daemon=True)
    watcher.start()
    try:
        code = main(["--endpoint-url", backend.endpoint_url, "uploads", "abort", f"s3://{bucket}/t",
                     "--older-than", "1s", "--yes", "--threads", "1", "--json"])
    finally:
        done.set()
        watcher.join(timeout=30)
        signal.signal(signal.SIGINT, previous)
    captured = capsys.readouterr()
    if late:
        pytest.skip("the abort finished before the interrupt arrived")
    report = json.loads(captured.out)
    assert code == 1, captured
    assert report["cancelled"] and not report["ok"]
    assert "interrupted" in captured.err
    assert 1 <= report["aborted"] < 120 and report["aborted"] + report["notDone"] == 120
    assert len(pending_uploads(backend.client, bucket, "t")) == report["notDone"]


def test_recover_takes_a_silent_holder_for_dead_after_the_lease_given(moto_backend):
    """Issue 37: the order's settings reach the command line. A job whose finishing turn a dead `recover` on
    another host holds is finished once its heartbeat stayed the same for --lease (3s here; 60s by default), and
    --single-writer may follow the command like the other global options."""
    from mpcommit.errors import CommitStateUnknownError
    from mpcommit.protocol import faults
    from mpcommit.protocol.records.liveness import Holder, TurnRecord

    backend = moto_backend
    bucket = backend.new_bucket()
    uri = f"s3://{bucket}/t"
    job = Job.create(uri, s3=backend.options)
    with job.spec.task(0, 0) as task:
        with task.create(partition="dt=1", ext="txt") as out:
            out.write(b"x\n")
        ref = task.commit()
    with faults.installed(faults.fail_at("commit.after_complete", 1)), pytest.raises(CommitStateUnknownError):
        job.commit([ref])
    backend.client.put_object(Bucket=bucket, Key=f"t/_temporary/mpcommit/{job.job_id}/finishing.json",
                              Body=TurnRecord(job.job_id, Holder("another-host.example", 1, "recover")).to_bytes())
    t0 = time.monotonic()
    done = cli(moto_backend)("jobs", "recover", uri, "--lease", "3s", "--json")
    assert done.returncode == 0 and [a["action"] for a in done.json()["actions"]] == ["finished"], done
    assert 3 <= time.monotonic() - t0 < 45
    assert cli(moto_backend)("jobs", "list", uri, "--single-writer", "--json").json()["jobs"] == []
