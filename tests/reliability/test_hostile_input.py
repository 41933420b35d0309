"""The hostile and bad input catalogue: each case must end in a clear error, lose nothing, and touch nothing
outside the destination (docs/RELIABILITY.md lists every case with its outcome).

Hostile manifests are delivered both ways a driver can receive them: written straight into the bucket at a task
manifest key and referenced by a TaskResult without an inline copy, and passed inline. Around the job there are
victims a careless committer would hurt: a pending upload and an object outside the destination whose keys carry
the job's id, a pending upload in another bucket, and another job of the same destination.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from mpcommit import Job, RetryPolicy, S3Options
from mpcommit.errors import (
    CommitStateUnknownError,
    EndpointUnreachableError,
    InvalidCredentialsError,
    ManifestCorruptError,
    ManifestError,
    ManifestScopeError,
    ManifestVersionError,
    NoSuchBucketError,
    RetriesExhaustedError,
    UsageError,
)
from mpcommit.options import WriterSettings
from mpcommit.protocol.layout import JobPaths, parse_partition_path
from mpcommit.protocol.records.manifest import TaskManifest, TaskResult
from mpcommit.protocol.recovery import recover
from mpcommit.sizing import (
    MAX_OBJECT_SIZE,
    MAX_PART_SIZE,
    MAX_PARTS,
    MIN_PART_SIZE,
    MiB,
    check_schedule_reaches_limit,
    plan_part_sizes,
)
from tests.support.checks import pending_uploads, read_object
from tests.support.s3_network import NONE, Fault, FaultPlan, FaultRule, S3Network
from tests.support.invariants import (
    bucket_state,
    check_aborted,
    check_committed,
    check_unchanged,
    dataset,
)
from tests.support.servers import free_port

JOB = "1ac0c0a0-0000-4000-8000-0000000000a1"
OTHER = "2bc0c0a0-0000-4000-8000-0000000000b2"
IMPATIENT = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.005)


@dataclass
class Victims:
    bucket: str
    other_bucket: str
    outside_upload: tuple[str, str]  # other/part-00000-JOB.c000.txt, pending
    foreign_upload: tuple[str, str]  # in other_bucket at t/part-00000-JOB.c000.txt, pending
    other_job_upload: tuple[str, str]  # OTHER's upload in t/
    other_job_manifest: str
    outside_etag: str  # of other/keep.txt


def on(*params: tuple, localstack: set[tuple] = frozenset()) -> list:
    """Every case on moto; the ``localstack`` subset also on LocalStack (validation happens before any request,
    so the whole catalogue on both servers would only repeat itself)."""
    out = [pytest.param("moto", *p, id="-".join(["moto", *map(str, p)])) for p in params]
    out += [pytest.param("localstack", *p, marks=pytest.mark.localstack, id="-".join(["localstack", *map(str, p)]))
            for p in params if p in localstack]
    return out


def make_victims(backend) -> Victims:
    c = backend.client
    bucket, other_bucket = backend.new_bucket("mpc-host"), backend.new_bucket("mpc-host-other")
    outside_key = f"other/part-00000-{JOB}.c000.txt"
    outside = (outside_key, c.create_multipart_upload(Bucket=bucket, Key=outside_key)["UploadId"])
    foreign_key = f"t/part-00000-{JOB}.c000.txt"
    foreign = (foreign_key, c.create_multipart_upload(Bucket=other_bucket, Key=foreign_key)["UploadId"])
    etag = c.put_object(Bucket=bucket, Key="other/keep.txt", Body=b"keep me\n")["ETag"]
    other = Job.create(f"s3://{bucket}/t", s3=backend.options, job_id=OTHER)
    with other.spec.task(0, 0) as task:
        with task.create(partition="", ext="txt") as out:
            out.write(b"other job\n")
        ref = task.commit()
    (other_upload,) = [u for u in pending_uploads(c, bucket, "t") if OTHER in u[0]]
    return Victims(bucket, other_bucket, outside, foreign, other_upload, ref.manifest_key, etag)


def good_attempt(job: Job, task_id: int = 0) -> TaskResult:
    with job.spec.task(task_id, 0) as task:
        with task.create(partition="dt=1", ext="txt") as out:
            out.write(b"good\n")
        return task.commit()


# ---------------------------------------------------------------- hostile manifests
Mutation = Callable[[dict[str, Any], Victims], "dict[str, Any] | bytes"]


def _first_upload(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    doc["uploads"][0].update(changes)
    return doc


MANIFEST_CASES: dict[str, tuple[Mutation, type[ManifestError], str]] = {
    "key-with-dotdot": (lambda d, v: _first_upload(d, key=f"t/../other/part-00000-{JOB}.c000.txt", uploadId=v.outside_upload[1]),
                        ManifestScopeError, "outside"),
    "absolute-key": (lambda d, v: _first_upload(d, key=f"/t/part-00000-{JOB}.c000.txt"), ManifestScopeError, "outside"),
    "key-outside-destination": (lambda d, v: _first_upload(d, key=v.outside_upload[0], uploadId=v.outside_upload[1]),
                                ManifestScopeError, "outside"),
    "another-bucket": (lambda d, v: {**d, "bucket": v.other_bucket, "uploads": [
        {**d["uploads"][0], "key": v.foreign_upload[0], "uploadId": v.foreign_upload[1]}]}, ManifestScopeError, "bucket"),
    "another-job-id": (lambda d, v: {**d, "jobId": OTHER}, ManifestScopeError, f"job {OTHER}"),
    "key-of-another-job": (lambda d, v: _first_upload(d, key=v.other_job_upload[0], uploadId=v.other_job_upload[1]),
                           ManifestScopeError, f"does not carry job id {JOB}"),
    "hidden-key-as-data": (lambda d, v: _first_upload(d, key=f"t/_temporary/part-00000-{JOB}.c000.txt"),
                           ManifestScopeError, "hidden"),
    "staged-key-outside-job": (lambda d, v: {**d, "staged": [{"key": f"t/part-00009-{JOB}.c000.txt", "stagedKey": "other/keep.txt",
                                                              "size": 8, "etag": v.outside_etag}]}, ManifestScopeError, "stages"),
    "duplicated-entry": (lambda d, v: {**d, "uploads": d["uploads"] * 2}, ManifestCorruptError, "twice"),
    "parts-with-gap": (lambda d, v: _first_upload(d, parts=[{**d["uploads"][0]["parts"][0], "n": 2}]), ManifestCorruptError, "1..N"),
    "size-mismatch": (lambda d, v: _first_upload(d, size=d["uploads"][0]["size"] + 1), ManifestCorruptError, "add up"),
    "unknown-version": (lambda d, v: {**d, "version": 2}, ManifestVersionError, "version 2"),
    "wrong-kind": (lambda d, v: {**d, "kind": "mpcommit.CommitJournal"}, ManifestCorruptError, "kind"),
    "field-of-wrong-type": (lambda d, v: {**d, "taskId": "0"}, ManifestCorruptError, "taskId"),
    "truncated-json": (lambda d, v: json.dumps(d).encode()[:-40], ManifestCorruptError, "not valid JSON"),
    "invalid-json": (lambda d, v: b"{'kind': nope", ManifestCorruptError, "not valid JSON"),
    "not-an-object": (lambda d, v: b"[]", ManifestCorruptError, "not a JSON object"),
}
# Refused when a record is decoded; inline, they arrive as TaskResult bytes from a worker.
JSON_LEVEL = {"unknown-version", "wrong-kind", "field-of-wrong-type"}
NOT_JSON = {"truncated-json", "invalid-json", "not-an-object"}  # only a stored manifest can be malformed bytes


def _state(backend, v: Victims):
    return bucket_state(backend.client, v.bucket), bucket_state(backend.client, v.other_bucket)


def _check_victims_intact(backend, v: Victims, before) -> None:
    after = _state(backend, v)
    check_unchanged(before[1], after[1], what="another bucket")
    assert v.outside_upload in after[0].uploads and v.other_job_upload in after[0].uploads
    assert after[0].objects["other/keep.txt"] == v.outside_etag
    assert v.other_job_manifest in after[0].objects


@pytest.mark.parametrize("backend_name, case, delivery", on(
    *[(c, d) for c in sorted(MANIFEST_CASES) for d in ("stored", "inline") if not (d == "inline" and c in NOT_JSON)],
    localstack={("key-with-dotdot", "stored"), ("another-bucket", "inline"), ("truncated-json", "stored"),
                ("duplicated-entry", "inline")}))
@pytest.mark.ci_on("localstack")
def test_a_hostile_manifest_is_refused_and_nothing_is_completed_or_deleted(request, backend_name, case, delivery):
    backend = request.getfixturevalue(f"{backend_name}_backend")
    mutate, error, words = MANIFEST_CASES[case]
    v = make_victims(backend)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB)
    good = good_attempt(job, 0)
    honest = good_attempt(job, 1)
    hostile = mutate(json.loads(good.manifest.to_bytes()), v)
    data = hostile if isinstance(hostile, bytes) else json.dumps(hostile).encode()
    if delivery == "stored":
        key = JobPaths(job.destination, JOB).task_manifest(0, 0, "deadbeef")
        backend.client.put_object(Bucket=v.bucket, Key=key, Body=data)
        bad = dataclasses.replace(good, manifest=None, manifest_key=key)
    elif case in JSON_LEVEL:
        result_doc = json.loads(good.to_bytes())
        result_doc["manifest"] = hostile
        with pytest.raises(error, match=words):
            TaskResult.from_bytes(json.dumps(result_doc).encode(), destination=job.destination, job_id=JOB)
        return
    else:
        bad = dataclasses.replace(good, manifest=_unchecked_manifest(hostile))
    before = _state(backend, v)
    with pytest.raises(error, match=words) as info:
        job.commit([bad, honest])
    assert str(info.value).startswith("task manifest at ")  # the message names what was refused
    # I7: nothing was completed, aborted, written or deleted for it -- not even the honest task's upload.
    check_unchanged(before[0], _state(backend, v)[0])
    check_unchanged(before[1], _state(backend, v)[1], what="another bucket")
    # The job can still be rolled back; the abort skips the hostile manifest instead of acting on it.
    job2 = Job.open(f"s3://{v.bucket}/t", JOB, s3=backend.options)
    job2.abort()
    check_aborted(backend.client, v.bucket, "t", JOB)
    _check_victims_intact(backend, v, before)


def _unchecked_manifest(doc: dict[str, Any]) -> TaskManifest:
    """Build a TaskManifest object from a hostile document without validating it (as a buggy or malicious
    worker could hand one over in memory)."""
    from mpcommit.protocol.records.base import Reader
    from mpcommit.protocol.records.manifest import PendingUpload, StagedFile

    r = Reader(doc, what="test", where="test")
    return TaskManifest(
        job_id=doc["jobId"], bucket=doc["bucket"], prefix=doc["prefix"], task_id=doc["taskId"], attempt=doc["attempt"],
        nonce=doc["nonce"], created_ms=doc["created"],
        uploads=tuple(PendingUpload.from_json(u, "test", r) for u in doc["uploads"]),
        staged=tuple(StagedFile.from_json(s, "test", r) for s in doc.get("staged", ())),
    )


def test_a_task_result_naming_another_jobs_manifest_is_refused(moto_backend):
    backend = moto_backend
    v = make_victims(backend)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB)
    good = good_attempt(job)
    before = _state(backend, v)
    for key in (v.other_job_manifest, "other/keep.txt", f"t/_temporary/mpcommit/{JOB}/../{OTHER}/job.json"):
        with pytest.raises(ManifestError, match="refused"):
            job.commit([dataclasses.replace(good, manifest=None, manifest_key=key)])
        job._finished = None  # the refused commit did not happen; let the same Job object try again
    check_unchanged(before[0], _state(backend, v)[0])


# ---------------------------------------------------------------- hostile journals (what `recover` acts upon)
JOURNAL_CASES: dict[str, Callable[[dict[str, Any], Victims], dict[str, Any]]] = {
    "winner-of-another-job": lambda j, v: {**j, "winners": [v.other_job_manifest]},
    "replace-outside": lambda j, v: {**j, "mode": "overwrite", "replace": ["../other"]},
    "delete-outside": lambda j, v: {**j, "delete": [{"key": "other/keep.txt", "etag": v.outside_etag}]},
    "another-bucket": lambda j, v: {**j, "bucket": v.other_bucket},
    "unknown-version": lambda j, v: {**j, "version": 99},
}


@pytest.mark.parametrize("backend_name, case", on(*[(c,) for c in sorted(JOURNAL_CASES)], localstack={("delete-outside",)}))
def test_recover_refuses_a_hostile_journal_and_touches_nothing(request, backend_name, case):
    backend = request.getfixturevalue(f"{backend_name}_backend")
    v = make_victims(backend)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB)
    good = good_attempt(job)
    journal = {"kind": "mpcommit.CommitJournal", "version": 1, "jobId": JOB, "bucket": v.bucket, "prefix": "t",
               "mode": "append", "partitionOverwrite": "static", "started": 1, "winners": [good.manifest_key],
               "replace": [], "delete": [], "purpose": "write"}
    key = JobPaths(job.destination, JOB).journal
    backend.client.put_object(Bucket=v.bucket, Key=key, Body=json.dumps(JOURNAL_CASES[case](journal, v)).encode())
    before = _state(backend, v)
    (action,) = [a for a in recover(job.destination, store=job.store) if a.job_id == JOB]
    assert action.action == "failed" and action.detail.startswith("commit journal at "), action
    check_unchanged(before[0], _state(backend, v)[0], what="I7 (journal)")
    check_unchanged(before[1], _state(backend, v)[1], what="I7 (journal, another bucket)")


# ---------------------------------------------------------------- partition values and keys
PARTITIONS = [
    ({"p": "a/b"}, "p=a%2Fb", "a/b"),
    ({"p": ".."}, "p=..", ".."),
    ({"p": "x=y"}, "p=x%3Dy", "x=y"),
    ({"p": "line\nbreak\ttab"}, "p=line%0Abreak%09tab", "line\nbreak\ttab"),
    ({"p": "日本語 ü €"}, "p=日本語 ü €", "日本語 ü €"),
    ({"p": "%41"}, "p=%2541", "%41"),
    ({"p": None, "q": ""}, "p=__HIVE_DEFAULT_PARTITION__/q=__HIVE_DEFAULT_PARTITION__", None),
    ({"a/b": 1}, "a%2Fb=1", "1"),
    ("dt=..", "dt=..", ".."),
]


def test_hostile_partition_values_stay_inside_the_destination_and_round_trip(backend):
    v = make_victims(backend)
    before = bucket_state(backend.client, v.bucket)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB)
    with job.spec.task(0, 0) as task:
        for n, (partition, _path, _value) in enumerate(PARTITIONS):
            with task.create(partition=partition, ext="txt") as out:
                out.write(f"{n}\n".encode())
        ref = task.commit()
    report = job.commit([ref])
    expected, numbers = {}, {}  # cNNN counts per partition directory of a task (values may share a path)
    for n, (_p, path, _v) in enumerate(PARTITIONS):
        number = numbers[path] = numbers.get(path, -1) + 1
        expected[f"t/{path}/part-00000-{JOB}.c{number:03d}.txt"] = f"{n}\n".encode()
    check_committed(backend.client, v.bucket, "t", JOB, expected, other={})
    for partition, path, value in PARTITIONS:
        if value is not None:
            assert value in parse_partition_path(path).values()
    assert set(report.partitions) == {p for _x, p, _v in PARTITIONS}
    after = bucket_state(backend.client, v.bucket)
    # New objects: the files, _SUCCESS, and the job's place in the table's commit order (and its end).
    assert {k for k in set(after.objects) - set(before.objects) if "/_mpcommit/" not in k} == set(expected) | {"t/_SUCCESS"}
    assert len([k for k in set(after.objects) - set(before.objects) if k.startswith("t/_mpcommit/order/")]) == 2
    _check_victims_intact(backend, v, (before, bucket_state(backend.client, v.other_bucket)))


@pytest.mark.parametrize("partition, words", [
    ("../escape", "'.' or '..' segment"),
    ("dt=1/../../other", "'.' or '..' segment"),
    ("dt=1//x", "empty"),
    ("_hidden=1", "readers skip"),
    (".dot=1", "readers skip"),
    ({"_c0": 1}, "readers skip"),
    ("dt=a\nb", "control character"),
    ("dt=a\x00b", "control character"),
])
def test_bad_partitions_are_refused_before_any_upload(moto_backend, partition, words):
    backend = moto_backend
    v = make_victims(backend)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB)
    before = bucket_state(backend.client, v.bucket)
    with pytest.raises(UsageError, match=words):
        with job.spec.task(0, 0) as task:
            task.create(partition=partition, ext="txt")
    check_unchanged(before, bucket_state(backend.client, v.bucket))


@pytest.mark.parametrize("ext", ["../txt", "a/b", "", ".hidden", "t\nx"])
def test_bad_extensions_are_refused_before_any_upload(moto_backend, ext):
    backend = moto_backend
    v = make_victims(backend)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB)
    before = bucket_state(backend.client, v.bucket)
    with pytest.raises(UsageError, match="extension"):
        with job.spec.task(0, 0) as task:
            task.create(partition="dt=1", ext=ext)
    check_unchanged(before, bucket_state(backend.client, v.bucket))


# ---------------------------------------------------------------- sizes
def test_a_file_larger_than_10000_initial_parts_fits_the_growing_schedule():
    """Planned part sizes (no data): the default schedule writes such a file, and 5 TiB, in at most 10,000 valid parts."""
    settings = WriterSettings()
    initial, step = settings.initial_part_size, settings.parts_per_size_step
    for total in (10_000 * initial + 1, 10 * 10_000 * initial, MAX_OBJECT_SIZE):
        sizes = plan_part_sizes(total, initial=initial, step=step)
        assert sum(sizes) == total and len(sizes) <= MAX_PARTS
        assert all(MIN_PART_SIZE <= s <= MAX_PART_SIZE for s in sizes[:-1]) and 0 < sizes[-1] <= MAX_PART_SIZE
        assert sizes == sorted(sizes[:-1]) + [sizes[-1]]  # parts only grow (the last may be short)
    with pytest.raises(UsageError, match="5 TiB"):
        plan_part_sizes(MAX_OBJECT_SIZE + 1, initial=initial, step=step)
    # A schedule that never grows cannot: refused with a reason.
    with pytest.raises(UsageError, match="cannot reach"):
        check_schedule_reaches_limit(initial=5 * MiB, step=10_000)


def test_a_writer_that_would_exceed_the_part_limit_fails_clearly_and_leaves_no_upload(backend, monkeypatch):
    """The 10,001st part, made cheap: the limit lowered to 3 parts of 5 MiB."""
    import mpcommit.protocol.writer

    monkeypatch.setattr(mpcommit.protocol.writer, "MAX_PARTS", 3)
    v = make_victims(backend)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB,
                     writer=WriterSettings(initial_part_size=5 * MiB, parts_per_size_step=10_000, upload_threads=2))
    before = bucket_state(backend.client, v.bucket)
    with pytest.raises(UsageError, match="more than 3 parts"):
        with job.spec.task(0, 0) as task:
            with task.create(partition="dt=1", ext="bin") as out:
                for _ in range(4):
                    out.write(b"\0" * (5 * MiB))
    check_unchanged(before, bucket_state(backend.client, v.bucket))


def test_zero_byte_files_and_an_empty_job_commit(backend):
    v = make_victims(backend)
    job = Job.create(f"s3://{v.bucket}/t", s3=backend.options, job_id=JOB)
    with job.spec.task(0, 0) as task:
        for partition in ("dt=1", "dt=2"):
            with task.create(partition=partition, ext="txt"):
                pass
        ref = task.commit()
    report = job.commit([ref])
    assert report.bytes == 0 and report.files == 2
    expected = {f"t/dt={i}/part-00000-{JOB}.c000.txt": b"" for i in (1, 2)}  # c000 in each directory
    check_committed(backend.client, v.bucket, "t", JOB, expected)
    # A job whose tasks wrote nothing commits an empty dataset: _SUCCESS with no files.
    empty = Job.create(f"s3://{v.bucket}/e", s3=backend.options)
    assert empty.commit([]).files == 0
    assert json.loads(read_object(backend.client, v.bucket, "e/_SUCCESS"))["files"] == 0
    assert dataset(backend.client, v.bucket, "e") == {}


# ---------------------------------------------------------------- buckets, credentials, endpoints
def test_a_missing_bucket_is_a_clear_error_before_anything_is_written(backend):
    with pytest.raises(NoSuchBucketError, match="does not exist") as info:
        Job.create("s3://mpc-no-such-bucket-7f3a/t", s3=backend.options)
    assert "mpc-no-such-bucket-7f3a" in str(info.value)
    names = {b["Name"] for b in backend.client.list_buckets()["Buckets"]}
    assert "mpc-no-such-bucket-7f3a" not in names


def test_no_credentials_at_all_is_a_clear_error(backend, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket = backend.new_bucket("mpc-host")
    options = S3Options(endpoint_url=backend.endpoint_url, region="us-east-1", retry=IMPATIENT)
    with pytest.raises(InvalidCredentialsError, match="no usable credentials"):
        Job.create(f"s3://{bucket}/t", s3=options)
    assert backend.client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_unknown_credentials_are_a_clear_error_and_not_retried(backend):
    """S3 answers unknown credentials with 403 InvalidAccessKeyId -- except on HEAD, which has no body, so only
    the status says it and one listing is asked why: both are refused at once, naming the unknown access key."""
    bucket = backend.new_bucket("mpc-host")
    rule = FaultRule(1.0, (Fault.INVALID_ACCESS_KEY,))
    with S3Network(backend.endpoint_url, NONE, faults=FaultPlan(default=rule)) as proxy:
        options = dataclasses.replace(backend.options, endpoint_url=proxy.endpoint_url, retry=IMPATIENT)
        # HeadBucket: a bare 403; one listing, which has a body, tells why.
        with pytest.raises(InvalidCredentialsError, match=r"head_bucket .* was refused \(403.*access key id is unknown"):
            Job.create(f"s3://{bucket}/t", s3=options)
        assert proxy.requests().total() == 2  # refused credentials are not worth retrying
        proxy.set_faults(FaultPlan({"HeadBucket": FaultRule(0.0)}, default=rule))
        # The first request after HeadBucket: the look for a table t would lie inside (protocol/nesting.py).
        with pytest.raises(InvalidCredentialsError, match="list_objects_v2 .* access key id is unknown") as info:
            Job.create(f"s3://{bucket}/t", s3=options)
        assert proxy.requests().total() == 4
    assert info.value.code == "InvalidAccessKeyId"
    assert backend.client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_a_permission_missing_for_deletes_keeps_the_old_data_whole(backend):
    """An overwrite whose credentials may not DeleteObjects: the new files are complete, the old data is whole
    (I5), the error says access was denied and that the commit must be recovered; with the permission back,
    `recover` finishes it."""
    c = backend.client
    bucket = backend.new_bucket("mpc-host")
    c.put_object(Bucket=bucket, Key="t/old.txt", Body=b"old\n")
    faults = FaultPlan({"DeleteObjects": FaultRule(1.0, (Fault.ACCESS_DENIED,))})
    with S3Network(backend.endpoint_url, NONE, faults=faults) as proxy:
        options = dataclasses.replace(backend.options, endpoint_url=proxy.endpoint_url, retry=IMPATIENT)
        job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=options, job_id=JOB)
        ref = good_attempt(job)
        with pytest.raises(CommitStateUnknownError, match="(?s)delete_objects.*AccessDenied.*recover"):
            job.commit([ref])
        assert proxy.requests()["DeleteObjects"] == 1
    assert read_object(c, bucket, "t/old.txt") == b"old\n"
    assert read_object(c, bucket, f"t/dt=1/part-00000-{JOB}.c000.txt") == b"good\n"
    recover(job.destination, s3=backend.options)
    check_committed(c, bucket, "t", JOB, {f"t/dt=1/part-00000-{JOB}.c000.txt": b"good\n"})


def test_an_unreachable_endpoint_is_a_clear_error_at_once():
    port = free_port()  # nothing listens there
    options = S3Options(endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1", access_key_id="test",
                        secret_access_key="test", retry=IMPATIENT, connect_timeout=1)
    with pytest.raises(EndpointUnreachableError) as info:  # a refused connection is not retried (issue 16)
        Job.create("s3://mpc-any-bucket/t", s3=options)
    message = str(info.value)
    assert not isinstance(info.value, RetriesExhaustedError) and "attempts" not in message
    assert f"could not reach the endpoint http://127.0.0.1:{port}: connection refused" in message
