"""Security: encryption and bucket-owner parameters on every request that accepts them, and credentials that never
leak into what mpcommit writes, logs or raises.

Neither moto nor LocalStack enforces ExpectedBucketOwner, so requests are inspected instead: a botocore
``before-parameter-build.s3`` hook on the store's client compares every request's parameters with the operation's
input shape (whatever accepts ``ServerSideEncryption``, ``SSEKMSKeyId``, ``ExpectedBucketOwner`` or
``ExpectedSourceBucketOwner`` must carry it), and the fault proxy checks the headers on the wire.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import traceback
from typing import Any

import pytest

from mpcommit import Job, RetryPolicy, S3Options
from mpcommit.errors import MpcommitError
from mpcommit.protocol import faults
from mpcommit.protocol.layout import Destination
from mpcommit.protocol.inventory import list_jobs
from mpcommit.protocol.recovery import recover
from mpcommit.sizing import crc32_b64
from mpcommit.store.s3 import CompletedPart, S3Store, store_for
from tests.support.checks import all_keys, read_object
from tests.support.s3_network import NONE, Fault, FaultPlan, FaultRule, S3Network
from tests.support.servers import free_port

OWNER = "111122223333"
KMS_KEY = "arn:aws:kms:us-east-1:111122223333:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
SSE_S3 = S3Options(sse="AES256", expected_bucket_owner=OWNER)
SSE_KMS = S3Options(sse="aws:kms", sse_kms_key_id=KMS_KEY, expected_bucket_owner=OWNER)
SSE_C = S3Options(sse_customer_key=bytes(range(32)), expected_bucket_owner=OWNER)
SSE_CASES = [
    pytest.param("moto", SSE_S3, id="moto-sse-s3"),
    pytest.param("moto", SSE_KMS, id="moto-sse-kms"),
    pytest.param("moto", SSE_C, id="moto-sse-c"),
    pytest.param("localstack", SSE_KMS, marks=pytest.mark.localstack, id="localstack-sse-kms"),
]
FAST = RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.005)


def _with_backend(backend, extra: S3Options, **changes: Any) -> S3Options:
    return dataclasses.replace(backend.options, sse=extra.sse, sse_kms_key_id=extra.sse_kms_key_id,
                               sse_customer_key=extra.sse_customer_key,
                               expected_bucket_owner=extra.expected_bucket_owner, **changes)


class RequestLog:
    """Every request the store's client builds: (operation, parameters, the operation's input members)."""

    def __init__(self, store: S3Store):
        self.calls: list[tuple[str, dict[str, Any], set[str]]] = []
        self._events = store._client.meta.events
        self._events.register("before-parameter-build.s3", self._record, unique_id="mpcommit-test-request-log")

    def _record(self, params: dict[str, Any], model: Any, **_kwargs: Any) -> None:
        self.calls.append((model.name, dict(params), set(model.input_shape.members)))

    def close(self) -> None:
        self._events.unregister("before-parameter-build.s3", unique_id="mpcommit-test-request-log")

    def violations(self, options: S3Options) -> list[str]:
        wanted = {"ExpectedBucketOwner": options.expected_bucket_owner,
                  "ExpectedSourceBucketOwner": options.expected_bucket_owner,
                  "ServerSideEncryption": options.sse}
        if options.sse == "aws:kms":
            wanted["SSEKMSKeyId"] = options.sse_kms_key_id
        if options.sse_customer_key is not None:
            import base64

            key = base64.b64encode(options.sse_customer_key).decode()
            wanted.update({"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key,
                           "CopySourceSSECustomerAlgorithm": "AES256", "CopySourceSSECustomerKey": key})
        out = []
        for op, params, members in self.calls:
            for name, value in wanted.items():
                if name in members and params.get(name) != value:
                    out.append(f"{op} lacks {name}={value!r} (sent {params.get(name)!r})")
        return sorted(set(out))

    @property
    def operations(self) -> set[str]:
        return {op for op, _p, _m in self.calls}


def _stage_and_write(job: Job, task_id: int, attempt: int = 0, *, fail: bool = False):
    with job.spec.task(task_id, attempt) as task:
        with task.create(partition="dt=1", ext="txt") as out:
            out.write(f"task {task_id}\n".encode())
        task.stage("dt=2", "txt", f"staged {task_id}\n".encode(), rows=1)
        if fail:
            raise RuntimeError("task failed on purpose")
        return task.commit()


@pytest.mark.parametrize("backend_name, sse", SSE_CASES)
def test_encryption_and_bucket_owner_on_every_request_that_accepts_them(request, backend_name, sse):
    backend = request.getfixturevalue(f"{backend_name}_backend")
    # Every request through boto3, where the log sees it built: the CRT transport sends a task's requests and the
    # completes with the very headers boto3 would (tests/store/test_transport.py,
    # test_the_crt_sends_a_tasks_requests_as_boto3_sends_them and test_the_crt_sends_the_request_boto3_sends).
    options = _with_backend(backend, sse, complete_transport="boto3")
    store = store_for(options)
    log = RequestLog(store)
    bucket = backend.new_bucket("mpc-sec")
    try:
        backend.client.put_object(Bucket=bucket, Key="t/old.txt", Body=b"old\n")
        job = Job.create(f"s3://{bucket}/t", mode="overwrite", s3=options)
        with pytest.raises(RuntimeError):
            _stage_and_write(job, 0, fail=True)
        refs = [_stage_and_write(job, 0, 1), _stage_and_write(job, 1)]
        _stage_and_write(job, 1, 1)  # a loser
        with faults.installed(faults.fail_at("commit.before_success")):
            with pytest.raises(MpcommitError):
                job.commit(refs)
        list_jobs(store, job.destination, with_bytes=True)
        recover(job.destination, s3=options)
        other = Job.create(f"s3://{bucket}/u", s3=options)
        _stage_and_write(other, 0)
        other.abort()
        _every_store_operation(store, bucket)
    finally:
        log.close()
    assert log.violations(options) == []
    assert {"HeadBucket", "PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "CopyObject",
            "UploadPartCopy", "ListObjectsV2", "ListMultipartUploads", "ListParts", "AbortMultipartUpload",
            "DeleteObjects", "DeleteObject", "HeadObject", "GetObject"} <= log.operations
    # The server stored every committed object encrypted as asked (moto does not keep SSE-C: the requests above
    # and the headers on the wire below are what is checked for it).
    for key in all_keys(backend.client, bucket, "t") if sse.sse_customer_key is None else ():
        head = backend.client.head_object(Bucket=bucket, Key=key)
        assert head.get("ServerSideEncryption") == sse.sse, key
        if sse.sse == "aws:kms":
            assert head.get("SSEKMSKeyId") == KMS_KEY, key


def _every_store_operation(store: S3Store, bucket: str) -> None:
    """Each public S3Store operation once, including those the write path above does not use."""
    store.head_bucket(bucket)
    etag = store.put_object(bucket, "ops/src", b"x" * 10)
    upload = store.create_multipart_upload(bucket, "ops/dst")
    part = store.upload_part_copy(bucket, "ops/dst", upload, 1, source_key="ops/src", source_etag=etag)
    parts = [part if isinstance(part, CompletedPart) else CompletedPart(1, part)]
    list(store.list_parts(bucket, "ops/dst", upload))
    store.complete_multipart_upload(bucket, "ops/dst", upload, parts)
    upload2 = store.create_multipart_upload(bucket, "ops/aborted")
    store.upload_part(bucket, "ops/aborted", upload2, 1, b"y", crc32_b64(b"y"))
    list(store.list_multipart_uploads(bucket, "ops/"))
    store.abort_multipart_upload(bucket, "ops/aborted", upload2)
    store.copy_object(bucket, "ops/copy", source_key="ops/src", source_etag=etag)
    store.get_object(bucket, "ops/copy")
    store.head_object(bucket, "ops/copy")
    list(store.list_objects(bucket, "ops/"))
    list(store.list_children(bucket, "ops/"))
    store.delete_object(bucket, "ops/copy")
    store.delete_objects(bucket, ["ops/src", "ops/dst"])


def test_encryption_and_owner_headers_are_on_the_wire(backend):
    """The same, seen by the proxy as HTTP headers: every request names the bucket owner; every write that
    creates an object asks for encryption."""
    with S3Network(backend.endpoint_url, NONE, record_headers=True) as proxy:
        options = _with_backend(backend, SSE_KMS, endpoint_url=proxy.endpoint_url)
        bucket = backend.new_bucket("mpc-sec")
        job = Job.create(f"s3://{bucket}/t", s3=options)
        job.commit([_stage_and_write(job, 0)])
        seen = proxy.headers()
    assert seen
    for cls, headers in seen:
        assert headers.get("x-amz-expected-bucket-owner") == OWNER, cls
        if cls in ("PutObject", "CreateMultipartUpload", "CopyObject"):
            assert headers.get("x-amz-server-side-encryption") == "aws:kms", cls
            assert headers.get("x-amz-server-side-encryption-aws-kms-key-id") == KMS_KEY, cls
        if cls in ("CopyObject", "UploadPartCopy"):
            assert headers.get("x-amz-source-expected-bucket-owner") == OWNER, cls


def test_sse_c_headers_are_on_the_wire_of_every_request_that_reads_or_writes_an_object(backend):
    """SSE-C: the key (and its MD5) on every request whose object or parts it encrypts -- the job commit's
    completes, sent by the CRT transport, included."""
    import base64
    import hashlib

    key = bytes(range(32))
    with S3Network(backend.endpoint_url, NONE, record_headers=True) as proxy:
        options = _with_backend(backend, SSE_C, endpoint_url=proxy.endpoint_url)
        bucket = backend.new_bucket("mpc-sec")
        job = Job.create(f"s3://{bucket}/t", s3=options)
        job.commit([_stage_and_write(job, 0), _stage_and_write(job, 1)])
        assert type(job.store.completer()).__name__ == "CrtCompleter"
        seen = proxy.headers()
    encrypted = {"PutObject", "GetObject", "HeadObject", "CreateMultipartUpload", "UploadPart",
                 "CompleteMultipartUpload", "CopyObject", "UploadPartCopy", "ListParts"}
    assert {"CompleteMultipartUpload", "PutObject", "UploadPart", "CopyObject"} <= {cls for cls, _h in seen}
    for cls, headers in seen:
        if cls in encrypted:
            assert headers.get("x-amz-server-side-encryption-customer-algorithm") == "AES256", cls
            assert headers.get("x-amz-server-side-encryption-customer-key") == base64.b64encode(key).decode(), cls
            assert headers.get("x-amz-server-side-encryption-customer-key-md5") == \
                base64.b64encode(hashlib.md5(key).digest()).decode(), cls
        if cls in ("CopyObject", "UploadPartCopy"):
            assert headers.get("x-amz-copy-source-server-side-encryption-customer-key") == \
                base64.b64encode(key).decode(), cls
        else:
            assert "x-amz-copy-source-server-side-encryption-customer-key" not in headers, cls


# ---------------------------------------------------------------- credentials never leak
ACCESS_KEY = "AKIAMPCCANARY7Q3XZ01"
SECRET_KEY = "mpcCanarySecret+7Qz/xX3wLr9Vb2Tn8Ks5Hd1"
SESSION_TOKEN = "mpcCanaryToken//IQoJb3JpZ2luX2VjE3Xz9Kw"
CANARIES = (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)


def _leaks(text: str) -> list[str]:
    return [c for c in CANARIES if c in text or c.encode().hex() in text]


def _exception_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)


def test_credentials_never_appear_in_records_success_logs_or_errors(moto_backend, caplog):
    backend = moto_backend
    caplog.set_level(logging.DEBUG, logger="mpcommit")
    caplog.set_level(logging.INFO)
    options = dataclasses.replace(backend.options, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                                  session_token=SESSION_TOKEN, retry=FAST)
    bucket = backend.new_bucket("mpc-sec")
    uri = f"s3://{bucket}/t"
    errors: list[BaseException] = []
    texts: list[str] = [repr(options), str(options)]

    job = Job.create(uri, mode="overwrite", s3=options)
    texts += [repr(job), repr(job.spec), str(job.spec)]
    try:
        _stage_and_write(job, 0, fail=True)
    except RuntimeError as exc:
        errors.append(exc)
    refs = [_stage_and_write(job, 0, 1), _stage_and_write(job, 1)]
    texts += [r.to_bytes().decode() for r in refs] + [repr(r) for r in refs] + [pickle.dumps(r).hex() for r in refs]
    with faults.installed(faults.fail_at("commit.before_success")):
        try:
            job.commit(refs)
        except MpcommitError as exc:
            errors.append(exc)
    # Every record the job wrote (descriptor, manifests, journal, staged files) while they all exist.
    records = {k: read_object(backend.client, bucket, k) for k in all_keys(backend.client, bucket, "")}
    assert any(k.endswith("journal.json") for k in records) and any("/tasks/" in k for k in records)
    recover(job.destination, s3=options)
    records.update({k: read_object(backend.client, bucket, k) for k in all_keys(backend.client, bucket, "")})
    assert "t/_SUCCESS" in records

    # Failure paths whose messages name requests, endpoints and buckets -- never the credentials.
    for action in (
        lambda: Job.create(f"s3://mpc-no-such-bucket-{free_port()}/t", s3=options),
        lambda: Job.create(uri, s3=dataclasses.replace(options, endpoint_url=f"http://127.0.0.1:{free_port()}", connect_timeout=1)),
        lambda: Job.open(uri, "00000000-0000-4000-8000-000000000000", s3=options),
        lambda: job.commit(refs),
    ):
        with pytest.raises(Exception) as info:
            action()
        errors.append(info.value)
    refused = FaultPlan(default=FaultRule(1.0, (Fault.INVALID_ACCESS_KEY,)))
    with S3Network(backend.endpoint_url, NONE, faults=refused, record_headers=True) as proxy:
        with pytest.raises(MpcommitError) as info:
            Job.create(uri, mode="append", s3=dataclasses.replace(options, endpoint_url=proxy.endpoint_url))
        errors.append(info.value)
        wire = [str(h) for _c, h in proxy.headers()]

    # The paths that log: aborts that fail (writer and task), unreadable manifests (commit, abort), an unreadable
    # job descriptor (list_jobs). Their messages carry S3 errors and keys -- never credentials.
    aborts_refused = FaultPlan({"AbortMultipartUpload": FaultRule(1.0, (Fault.INVALID_ACCESS_KEY,))})
    with S3Network(backend.endpoint_url, NONE, faults=aborts_refused) as proxy:
        failing = Job.create(f"s3://{bucket}/u", s3=dataclasses.replace(options, endpoint_url=proxy.endpoint_url))
        with pytest.raises(RuntimeError):
            _stage_and_write(failing, 0, fail=True)
        with pytest.raises(RuntimeError):
            with failing.spec.task(1, 0) as task:
                with task.create(partition="dt=1", ext="txt") as out:
                    out.write(b"x")
                raise RuntimeError("after the writer closed: the task's own abort fails")
    for name in ("v", "w"):
        other = Job.create(f"s3://{bucket}/{name}", s3=options)
        ref = _stage_and_write(other, 0)
        backend.client.put_object(Bucket=bucket, Key=f"{other.paths.tasks}task-00009-a0-deadbeef.json", Body=b"{broken")
        other.commit([ref]) if name == "v" else other.abort()
    backend.client.put_object(Bucket=bucket, Key=f"t/_temporary/mpcommit/{'1' * 8}-1111-4111-8111-{'1' * 12}/job.json",
                              Body=b"{broken")
    list_jobs(store_for(options), Destination(bucket, "t"))
    logged = " ".join(r.getMessage() for r in caplog.records if r.name.startswith("mpcommit"))
    for what in ("could not abort upload", "skipping unreadable loser manifest", "skipping unreadable manifest",
                 "unreadable job descriptor"):
        assert what in logged, what

    assert len(errors) == 7
    leaks = {f"record {k}": _leaks(v.decode("utf-8", "replace") + v.hex()) for k, v in records.items()}
    leaks |= {f"text {i}": _leaks(t) for i, t in enumerate(texts)}
    leaks |= {f"error {type(e).__name__}": _leaks(_exception_text(e)) for e in errors}
    leaks |= {f"log {r.name}:{r.levelname}": _leaks(r.getMessage() + (r.exc_text or "")) for r in caplog.records}
    assert {where: found for where, found in leaks.items() if found} == {}
    # On the wire the access key id (in Authorization) and the session token are sent by design; the secret never.
    assert not any(SECRET_KEY in h for h in wire) and any(ACCESS_KEY in h for h in wire)


def test_the_job_spec_carries_credentials_to_workers_but_never_shows_them(moto_backend):
    backend = moto_backend
    """Workers need the credentials (the spec is pickled to them); its text forms must not show them."""
    options = dataclasses.replace(backend.options, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                                  session_token=SESSION_TOKEN)
    job = Job.create(f"s3://{backend.new_bucket('mpc-sec')}/t", s3=options)
    assert pickle.loads(pickle.dumps(job.spec)).s3.secret_access_key == SECRET_KEY
    for text in (repr(job.spec), str(job.spec), repr(job), repr(options), repr(Destination("b", "t"))):
        assert _leaks(text) == [], text
