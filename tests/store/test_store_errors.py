"""The S3 boundary: error translation and the retry policy, over a scripted fake client."""

import socket

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from urllib3.exceptions import NameResolutionError, NewConnectionError

from mpcommit import errors as e
from mpcommit.options import RetryPolicy, S3Options
from mpcommit.store.s3 import S3Store


class Meta:
    endpoint_url = "http://127.0.0.1:1"


class ScriptedClient:
    """Each call pops the next outcome: an exception to raise or a response to return."""

    meta = Meta()

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def __getattr__(self, name):
        def call(**params):
            self.calls.append((name, params))
            outcome = self.outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        return call


def client_error(code, status=400, message="msg"):
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


FAST = S3Options(retry=RetryPolicy(max_attempts=3, initial_delay=0.0, max_delay=0.0))


def store(outcomes, options=FAST):
    return S3Store(options, client=ScriptedClient(outcomes))


@pytest.mark.parametrize(
    "code,status,cls",
    [
        ("NoSuchBucket", 404, e.NoSuchBucketError),
        ("AccessDenied", 403, e.AccessDeniedError),
        ("InvalidAccessKeyId", 403, e.InvalidCredentialsError),
        ("SignatureDoesNotMatch", 403, e.InvalidCredentialsError),
        ("PreconditionFailed", 412, e.PreconditionFailedError),
        ("EntityTooSmall", 400, e.InvalidPartError),
        ("BadDigest", 400, e.ChecksumMismatchError),
        ("NoSuchUpload", 404, e.NoSuchUploadError),
        ("WeirdNewCode", 400, e.StoreError),
        # versitygw answers every lifecycle request so (LocalStack a DeleteObject If-Match): not a transient 5xx.
        ("NotImplemented", 501, e.UnsupportedRequestError),
        ("", 501, e.UnsupportedRequestError),
    ],
)
def test_permanent_errors_map_to_distinct_classes_and_are_not_retried(code, status, cls):
    s = store([client_error(code, status)])
    with pytest.raises(cls) as info:
        s.put_object("bkt", "k", b"x")
    assert type(info.value) is cls
    assert isinstance(info.value.__cause__, ClientError)
    assert info.value.code == (code or str(status)) and "s3://bkt/k" in str(info.value)
    assert s.request_counts() == {"put_object": 1}


@pytest.mark.parametrize(
    "failure",
    [
        client_error("SlowDown", 503),
        client_error("InternalError", 500),
        client_error("RequestTimeout", 400),
        client_error("", 502),
        ReadTimeoutError(endpoint_url="http://x"),
        EndpointConnectionError(endpoint_url="http://x"),
    ],
)
def test_transient_failures_are_retried_then_succeed(failure):
    s = store([failure, failure, {"ETag": '"ok"'}])
    assert s.put_object("bkt", "k", b"x") == '"ok"'
    assert s.request_counts() == {"put_object": 3}


def test_retries_run_out_with_a_clear_error_chaining_the_last_failure():
    s = store([client_error("SlowDown", 503)] * 3)
    with pytest.raises(e.RetriesExhaustedError, match="after 3 attempts") as info:
        s.put_object("bkt", "k", b"x")
    assert isinstance(info.value.__cause__, e.ThrottledError)


def refused():
    """What botocore raises when nothing listens on the endpoint's port."""
    inner = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
    inner.__cause__ = ConnectionRefusedError(111, "Connection refused")
    return EndpointConnectionError(endpoint_url="http://127.0.0.1:1/", error=inner)


def unresolvable():
    inner = NameResolutionError("nohost.invalid", None, socket.gaierror(-2, "Name or service not known"))
    inner.__cause__ = socket.gaierror(-2, "Name or service not known")
    return EndpointConnectionError(endpoint_url="http://nohost.invalid/", error=inner)


@pytest.mark.parametrize("failure,why", [(refused, "connection refused"), (unresolvable, "host name does not resolve")])
def test_an_endpoint_that_never_answered_fails_at_once_saying_it_could_not_be_reached(failure, why):
    s = store([failure(), {"ETag": '"never reached"'}])
    with pytest.raises(e.EndpointUnreachableError) as info:
        s.put_object("bkt", "k", b"x")
    message = str(info.value)
    assert s.request_counts() == {"put_object": 1}, "not retried"
    assert not isinstance(info.value, e.TransientStoreError)
    assert message.count("could not reach the endpoint http://127.0.0.1:1") == 1 and why in message
    assert "S3Options(endpoint_url=...)" in message and "--endpoint-url" not in message
    assert "slow down" not in message and "max_attempts" not in message


def test_an_endpoint_that_answered_before_is_retried_when_it_refuses():
    s = store([{"ETag": '"1"'}, refused(), refused(), {"ETag": '"2"'}])
    assert s.put_object("bkt", "k", b"x") == '"1"'
    assert s.put_object("bkt", "k", b"x") == '"2"'  # a server restarting: retried, as before
    assert s.request_counts() == {"put_object": 4}


def test_retries_running_out_on_an_endpoint_say_so_not_throttling():
    s = store([{"ETag": '"1"'}] + [refused()] * 3)
    s.put_object("bkt", "k", b"x")
    with pytest.raises(e.RetriesExhaustedError) as info:
        s.put_object("bkt", "k", b"x")
    message = str(info.value)
    assert message.count("could not reach the endpoint") == 1 and message.count("s3://bkt/k") == 1
    assert "slow down" not in message and "throttl" not in message and "S3Options(endpoint_url=...)" in message
    assert "--endpoint-url" not in message


def test_abort_of_a_vanished_upload_is_not_an_error():
    s = store([client_error("NoSuchUpload", 404)])
    assert s.abort_multipart_upload("bkt", "k", "u") is False


def test_security_parameters_go_on_every_request_that_accepts_them():
    opts = S3Options(sse="aws:kms", sse_kms_key_id="key-1", expected_bucket_owner="111122223333", retry=FAST.retry)
    client = ScriptedClient([{"UploadId": "u"}, {"ETag": '"e"'}, {}])
    s = S3Store(opts, client=client)
    s.create_multipart_upload("bkt", "k")
    s.put_object("bkt", "k2", b"x")
    s.head_bucket("bkt")
    (_, create), (_, put), (_, head) = client.calls
    for params in (create, put):
        assert params["ServerSideEncryption"] == "aws:kms" and params["SSEKMSKeyId"] == "key-1"
    assert all(p["ExpectedBucketOwner"] == "111122223333" for p in (create, put, head))
    assert "ServerSideEncryption" not in head


def test_secrets_stay_out_of_repr():
    opts = S3Options(access_key_id="AKIAEXAMPLEKEY", secret_access_key="s3cr3t-value", session_token="tok-123")
    text = repr(opts)
    assert "AKIAEXAMPLEKEY" not in text and "s3cr3t-value" not in text and "tok-123" not in text


@pytest.mark.parametrize("head", ["head_bucket", "head_object"])
def test_a_forbidden_head_with_an_unknown_access_key_says_so(head):
    """A HEAD's 403 has no body: one listing (which has one) tells an unknown key from a missing permission."""
    unknown = client_error("InvalidAccessKeyId", 403, "The AWS Access Key Id you provided does not exist in our records.")
    s = store([client_error("403", 403, "Forbidden"), unknown])
    with pytest.raises(e.InvalidCredentialsError) as info:
        s.head_bucket("bkt") if head == "head_bucket" else s.head_object("bkt", "k")
    assert "InvalidAccessKeyId" in str(info.value) and "access key id is unknown" in str(info.value)
    assert s.request_counts() == {head: 1, "list_objects_v2": 1}


def test_a_forbidden_head_with_valid_credentials_stays_access_denied():
    s = store([client_error("403", 403, "Forbidden"), client_error("AccessDenied", 403, "Access Denied")])
    with pytest.raises(e.AccessDeniedError) as info:
        s.head_bucket("bkt")
    assert not isinstance(info.value, e.InvalidCredentialsError) and "403" in str(info.value)
