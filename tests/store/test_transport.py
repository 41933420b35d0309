"""The two transports of CompleteMultipartUpload (mpcommit.store.transport): the CRT's request is boto3's request --
the same signature as botocore's for the same headers, the same resource, security headers and parts on the wire,
the same exceptions for every answer and failure -- whatever the funnel of security parameters adds; the CRT's
asynchronous starts, time limits, connection bound and closing; the choice in S3Options and its fallbacks."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest

from mpcommit import errors as e
from mpcommit.options import CompleteTransport, RetryPolicy, S3Options
from mpcommit.store import security as security_module
from mpcommit.store.crt_transport import CrtCompleter
from mpcommit.store.s3 import CompletedPart, S3Store
from mpcommit.store.transport import Boto3Completer, complete_body, key_and_query

REPO = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002)
PARTS = [CompletedPart(1, '"0123456789abcdef0123456789abcdef"', "AAAAAA=="), CompletedPart(2, '"e&f"', "BBBBBB==")]
KEYS = ["t/dt=2024-01-01/part-00000.parquet", "t/a b+c~d=é/ü,;:@$&'()*!.bin", "t//double//slash"]
SSE_C_KEY = bytes(range(32))
#: Headers a transport adds for itself, not for the request's meaning.
OWN_HEADERS = {"user-agent", "amz-sdk-invocation-id", "amz-sdk-request", "x-amz-date", "authorization",
               "x-amz-content-sha256", "content-length", "host", "accept-encoding", "content-type"}


def _options(transport: str, **kw: Any) -> S3Options:
    return S3Options(region=kw.pop("region", "us-east-1"), access_key_id="AKIDEXAMPLE",
                     secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", retry=FAST,
                     complete_transport=transport, **kw)


def test_keys_and_upload_ids_are_encoded_as_urllib_quote_encodes_them():
    from urllib.parse import quote

    every_ascii = "".join(chr(c) for c in range(128))
    for key in [every_ascii, "t/dt=2024-01-01/part-00000-x.c000.parquet", "é/ü", "a\u2028b", ""] + KEYS:
        assert key_and_query(key, key) == f"{quote(key, safe='/~')}?uploadId={quote(key, safe='~')}"


def test_complete_body_lists_every_part_in_order_with_its_checksum():
    parts = [CompletedPart(1, '"a&b"', "AAAAAA=="), CompletedPart(2, '"c"', None)]
    root = ET.fromstring(complete_body(parts))
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    found = [(p.find(f"{ns}PartNumber").text, p.find(f"{ns}ETag").text,
              getattr(p.find(f"{ns}ChecksumCRC32"), "text", None)) for p in root]
    assert found == [("1", '"a&b"', "AAAAAA=="), ("2", '"c"', None)]


# ---------------------------------------------------------------- the signature: botocore's, byte for byte
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("options", [
    {"endpoint_url": "http://127.0.0.1:4566"},  # path style on a custom endpoint with a port
    {"region": "eu-west-1", "addressing_style": "virtual"},  # AWS, the bucket in the host name
    {"region": "eu-west-1", "expected_bucket_owner": "111122223333", "session_token": "FwoGZXIvYXdzE+/token="},
    {"region": "eu-west-1", "sse_customer_key": SSE_C_KEY},
])
def test_the_crt_signs_the_request_exactly_as_botocore_does(key, options):
    store = S3Store(_options("crt", **options))
    crt = store.completer()
    assert isinstance(crt, CrtCompleter)
    base, base_path, host = crt._base("my-bucket")
    tail = key_and_query(key, "2~Upload+Id/with=odd%chars")
    body = complete_body(PARTS)
    instant = datetime.datetime(2026, 11, 24, 12, 0, 0)

    signed = crt.signed_request(base_path + tail, host.host_header, body,
                                date=instant.replace(tzinfo=datetime.timezone.utc))
    theirs = {k.lower(): v for k, v in signed.headers}

    # botocore signs the same request: the same security headers, which it would send for these options.
    headers = {"User-Agent": "x", **{k: v for k, v in signed.headers if k.lower().startswith("x-amz-")
                                     and k.lower() not in ("x-amz-date", "x-amz-content-sha256")}}
    request = AWSRequest(method="POST", url=base + tail, data=body, headers=headers)
    import botocore.auth

    original = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda: instant
    try:
        S3SigV4Auth(crt.signer.credentials.get_frozen_credentials(), "s3", store._client.meta.region_name).add_auth(request)
    finally:
        botocore.auth.get_current_datetime = original
    ours = {k.lower(): v for k, v in request.headers.items()}

    assert theirs["authorization"] == ours["authorization"]
    for name in ("x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "x-amz-expected-bucket-owner",
                 "x-amz-server-side-encryption-customer-key-md5"):
        assert theirs.get(name) == ours.get(name)
    if options.get("session_token"):
        assert "x-amz-security-token" in theirs["authorization"]
    if options.get("sse_customer_key"):
        assert "x-amz-server-side-encryption-customer-key" in theirs["authorization"]
    assert theirs["host"] == base.split("/")[2]
    assert theirs["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    assert theirs["content-length"] == str(len(body))
    if options.get("addressing_style") == "virtual":
        assert host.host_header == "my-bucket.s3.eu-west-1.amazonaws.com" and base_path == "/"


# ---------------------------------------------------------------- a server that answers as S3 may
class _Answers(http.server.BaseHTTPRequestHandler):
    """A server whose answer depends on the key: what S3 may answer a complete with, and how a connection fails."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, dict[str, str], bytes]] = []
    open_connections = 0
    most_connections = 0
    lock = threading.Lock()
    #: Completes of keys starting "held" are answered once this is set (at most 30 s).
    release = threading.Event()

    def setup(self) -> None:
        super().setup()
        with self.lock:
            type(self).open_connections += 1
            type(self).most_connections = max(self.most_connections, self.open_connections)

    def finish(self) -> None:
        with self.lock:
            type(self).open_connections -= 1
        super().finish()

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, *, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _failed(self, key: str, error: bytes) -> bool:
        """The answers every request of a task may get (a complete's own are below)."""
        if key == "slow-down-all":
            self._send(503, error % (b"SlowDown", b"Please reduce your request rate."))
        elif key == "gone-upload":
            self._send(404, error % (b"NoSuchUpload", b"The specified upload does not exist."))
        elif key == "denied":
            self._send(403, error % (b"AccessDenied", b"Access Denied"))
        else:
            return False
        return True

    def _received(self) -> tuple[str, bytes, bytes]:
        """The request's key (its last path segment) and body, recorded; and the error document's template."""
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.lock:
            self.seen.append((self.path, dict(self.headers.items()), body))
        key = self.path.split("?")[0].rsplit("/", 1)[-1]
        return key, body, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>'

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        key, body, error = self._received()
        if self._failed(key, error):
            return
        self.send_response(200)
        self.send_header("ETag", '"%s"' % hashlib.md5(body).hexdigest())
        crc = self.headers.get("x-amz-checksum-crc32")
        if crc:
            self.send_header("x-amz-checksum-crc32", "AAAAAA==" if key == "bad-checksum" else crc)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        key, body, error = self._received()
        if self._failed(key, error):
            return
        if self.path.endswith("?uploads"):
            self._send(200, b"<InitiateMultipartUploadResult><UploadId>up/1=&amp;x</UploadId>"
                            b"</InitiateMultipartUploadResult>")
        elif key == "error-in-200":
            self._send(200, error % (b"InternalError", b"We encountered an internal error. Please try again."))
        elif key == "slow-down":
            self._send(503, error % (b"SlowDown", b"Please reduce your request rate."))
        elif key == "invalid-part":
            self._send(400, error % (b"InvalidPart", b"One or more of the specified parts could not be found."))
        elif key == "no-such-upload":
            self._send(404, error % (b"NoSuchUpload", b"The specified upload does not exist."))
        elif key == "hang":
            time.sleep(1.5)
            self._send(200, b"")
        elif key == "drop":
            self.close_connection = True  # no answer at all
        else:
            if key.startswith("slow"):
                time.sleep(0.1)
            elif key.startswith("held"):
                self.release.wait(30)
            etag = b'"%s-2"' % hashlib.md5(body).hexdigest().encode()
            self._send(200, b"<CompleteMultipartUploadResult><ETag>%s</ETag></CompleteMultipartUploadResult>"
                       % etag.replace(b'"', b"&quot;"), close=key.startswith("close"))


@pytest.fixture(scope="module")
def answers():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _answers_store(transport: str, endpoint: str, **kw: Any) -> S3Store:
    store = S3Store(_options(transport, endpoint_url=endpoint, read_timeout=kw.pop("read_timeout", 0.5),
                             connect_timeout=1, **kw))
    assert isinstance(store.completer(), CrtCompleter if transport == "crt" else Boto3Completer)
    return store


def _parts_sent(body: bytes) -> list[tuple[str | None, ...]]:
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    return [tuple(getattr(p.find(f"{ns}{f}"), "text", None) for f in ("PartNumber", "ETag", "ChecksumCRC32"))
            for p in ET.fromstring(body)]


def _sent_by(transport: str, endpoint: str, **options: Any) -> tuple[str, dict[str, str], bytes]:
    _Answers.seen.clear()
    store = _answers_store(transport, endpoint, **options)
    store.complete_multipart_upload("b", "t/a b+c.bin", "up/1=", PARTS)
    (target, headers, body), = _Answers.seen
    # (a client may send the absolute form, "POST http://host/b/...": the same resource)
    return target.split(endpoint, 1)[-1], {k.lower(): v for k, v in headers.items()}, body


SECURE = {"expected_bucket_owner": "111122223333", "sse_customer_key": SSE_C_KEY}


def test_the_crt_sends_the_request_boto3_sends(answers):
    """The same resource, the same headers of meaning (security headers included, with their values), the same
    parts: the CRT's request is boto3's, built without botocore."""
    target, crt, body = _sent_by("crt", answers, **SECURE)
    boto3_target, boto3, boto3_body = _sent_by("boto3", answers, **SECURE)
    assert target == boto3_target == "/b/t/a%20b%2Bc.bin?uploadId=up%2F1%3D"
    assert {k: v for k, v in crt.items() if k not in OWN_HEADERS} == {k: v for k, v in boto3.items()
                                                                       if k not in OWN_HEADERS}
    assert crt["x-amz-expected-bucket-owner"] == "111122223333"
    assert crt["x-amz-server-side-encryption-customer-algorithm"] == "AES256"
    assert _parts_sent(body) == _parts_sent(boto3_body) == [("1", PARTS[0].etag, "AAAAAA=="),
                                                            ("2", '"e&f"', "BBBBBB==")]
    assert body == complete_body(PARTS)
    assert crt["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    assert "x-amz-expected-bucket-owner" in crt["authorization"]


def test_a_parameter_added_to_the_funnel_reaches_both_transports(answers, monkeypatch):
    """The security funnel is one function (mpcommit.store.security.security_parameters): whatever it adds to
    boto3's requests, the CRT's completes carry too -- here a parameter it does not add today."""
    funnel = security_module.security_parameters

    def with_request_payer(options: S3Options, operation: Any) -> dict[str, str]:
        params = funnel(options, operation)
        if "RequestPayer" in operation.input_shape.members:
            params["RequestPayer"] = "requester"
        return params

    monkeypatch.setattr(security_module, "security_parameters", with_request_payer)
    _, crt, _ = _sent_by("crt", answers, **SECURE)
    _, boto3, _ = _sent_by("boto3", answers, **SECURE)
    assert crt["x-amz-request-payer"] == boto3["x-amz-request-payer"] == "requester"
    assert {k: v for k, v in crt.items() if k not in OWN_HEADERS} == {k: v for k, v in boto3.items()
                                                                       if k not in OWN_HEADERS}


def test_a_funnel_parameter_that_is_no_header_keeps_completes_on_boto3(monkeypatch):
    """A parameter the CRT's request cannot carry (not a header) is never dropped: the completes go through boto3,
    or 'crt' asked for explicitly is refused."""
    funnel = security_module.security_parameters

    def with_a_body_parameter(options: S3Options, operation: Any) -> dict[str, str]:
        params = funnel(options, operation)
        if operation.name == "CompleteMultipartUpload":
            params["UploadId"] = "x"  # a query parameter: stands for anything not carried as a header
        return params

    monkeypatch.setattr(security_module, "security_parameters", with_a_body_parameter)
    assert isinstance(S3Store(_options("auto", endpoint_url="http://127.0.0.1:9")).completer(), Boto3Completer)
    with pytest.raises(e.UsageError, match="does not travel as a header"):
        S3Store(_options("crt", endpoint_url="http://127.0.0.1:9")).completer()


def _task_requests(transport: str, endpoint: str, key: str, *, part: bytes = b"part data",
                   **options: Any) -> tuple[S3Store, list[tuple[str, dict[str, str], bytes]]]:
    """A task's three kinds of request -- create an upload, send a part, put its manifest -- as ``transport``
    sends them: (the store, [(resource, headers by lower-case name, body)])."""
    import base64
    import zlib

    _Answers.seen.clear()
    store = _answers_store(transport, endpoint, **options)
    upload_id = store.create_multipart_upload("b", key, content_type="application/vnd.apache.parquet")
    crc = base64.b64encode(zlib.crc32(part).to_bytes(4, "big")).decode()
    etag = store.upload_part("b", key, upload_id, 3, bytearray(part), crc)
    assert upload_id == "up/1=&x" and etag == '"%s"' % hashlib.md5(part).hexdigest()
    store.put_object("b", key + ".json", b'{"m": 1}')
    return store, [(target.split(endpoint, 1)[-1], {k.lower(): v for k, v in headers.items()}, body)
                   for target, headers, body in _Answers.seen]


@pytest.mark.parametrize("part", [b"part data", bytes(range(256)) * 800], ids=["small", "200KiB"])
def test_the_crt_sends_a_tasks_requests_as_boto3_sends_them(answers, part):
    """CreateMultipartUpload, UploadPart and the manifest's PutObject: the same resources, headers of meaning
    (security headers included) and bodies as boto3's, built without botocore; the payload signed as botocore
    signs it over HTTP (its SHA-256). A body up to 64 KiB goes to the CRT as a BytesIO, a larger one read from the
    caller's buffer (crt_transport.SMALL_BODY_BYTES): both ways send the same bytes."""
    store, crt = _task_requests("crt", answers, "t/a b+c.bin", part=part, **SECURE)
    _, boto3 = _task_requests("boto3", answers, "t/a b+c.bin", part=part, **SECURE)
    assert [t for t, _, _ in crt] == [t for t, _, _ in boto3] == [
        "/b/t/a%20b%2Bc.bin?uploads", "/b/t/a%20b%2Bc.bin?uploadId=up%2F1%3D%26x&partNumber=3", "/b/t/a%20b%2Bc.bin.json"]
    for (_, ours, body), (_, theirs, their_body) in zip(crt, boto3):
        assert ours["user-agent"].startswith("mpcommit crt") and not theirs["user-agent"].startswith("mpcommit crt")
        assert {k: v for k, v in ours.items() if k not in OWN_HEADERS} == \
            {k: v for k, v in theirs.items() if k not in OWN_HEADERS | {"expect"}}
        assert body == their_body and ours["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
        assert ours.get("content-type") == theirs.get("content-type")
    assert crt[0][1]["x-amz-checksum-algorithm"] == "CRC32"
    assert crt[1][1]["x-amz-server-side-encryption-customer-algorithm"] == "AES256", "SSE-C on every part"
    assert store.request_counts() == {"create_multipart_upload": 1, "upload_part": 1, "put_object": 1}


def test_parts_above_a_mebibyte_and_conditional_puts_stay_on_boto3(answers):
    """Per byte boto3 costs less CPU than the CRT: a large part goes through boto3; so does any put with a
    condition, and a body that is a file."""
    import io

    from mpcommit.store.transport_choice import CRT_PART_MAX_BYTES

    _, sent = _task_requests("crt", answers, "t/large", part=b"x" * (CRT_PART_MAX_BYTES + 1))
    assert [h["user-agent"].startswith("mpcommit crt") for _, h, _ in sent] == [True, False, True]
    _Answers.seen.clear()
    store = _answers_store("crt", answers)
    store.put_object("b", "t/record", b"{}", if_none_match=True)
    store.put_object("b", "t/record", io.BytesIO(b"{}"))
    agents = [{k.lower(): v for k, v in h.items()}["user-agent"] for _, h, _ in _Answers.seen]
    assert len(agents) == 2 and not any(a.startswith("mpcommit crt") for a in agents)


@pytest.mark.parametrize("key, raised, attempts", [
    ("gone-upload", e.NoSuchUploadError, 1), ("denied", e.AccessDeniedError, 1),
    ("slow-down-all", e.RetriesExhaustedError, 3), ("bad-checksum", e.ChecksumMismatchError, 1),
])
def test_a_tasks_requests_fail_on_the_crt_as_on_boto3(answers, key, raised, attempts):
    found = {}
    for transport in ("crt", "boto3"):
        store = _answers_store(transport, answers)
        with pytest.raises(e.StoreError) as info:
            if key == "bad-checksum":
                store.upload_part("b", f"t/{key}", "u", 1, b"data", "mTEeQw==")
            else:
                store.create_multipart_upload("b", f"t/{key}")
        found[transport] = (type(info.value), getattr(info.value, "code", None), sum(store.request_counts().values()))
    assert found["crt"] == found["boto3"] and found["crt"][0] is raised and found["crt"][2] == attempts


# key -> (the exception, its code, attempts made)
OUTCOMES = {
    "error-in-200": (e.RetriesExhaustedError, None, 3),  # a 200 with an <Error> is a server error: retried
    "slow-down": (e.RetriesExhaustedError, None, 3),
    "invalid-part": (e.InvalidPartError, "InvalidPart", 1),
    "no-such-upload": (e.NoSuchUploadError, "NoSuchUpload", 1),
    "hang": (e.RetriesExhaustedError, None, 3),  # read timeout: retried
    "drop": (e.RetriesExhaustedError, None, 3),  # connection dropped: retried
}


@pytest.mark.parametrize("key", list(OUTCOMES))
def test_every_answer_and_failure_raises_what_boto3_raises(answers, key):
    raised = {}
    for transport in ("crt", "boto3"):
        store = _answers_store(transport, answers)
        with pytest.raises(e.StoreError) as info:
            store.complete_multipart_upload("b", f"t/{key}", "u", PARTS)
        last = info.value.__cause__ if isinstance(info.value, e.RetriesExhaustedError) else info.value
        raised[transport] = (type(info.value), getattr(info.value, "code", None), type(last).__name__,
                             getattr(last, "code", None), store.request_counts()["complete_multipart_upload"])
    cls, code, attempts = OUTCOMES[key]
    assert raised["crt"] == raised["boto3"]
    assert raised["crt"][0] is cls and raised["crt"][4] == attempts
    if code:
        assert raised["crt"][1] == code


@pytest.mark.parametrize("key", ["slow-down", "no-such-upload", "hang", "drop", "ok"])
def test_a_started_complete_reports_one_attempt_as_a_store_error(answers, key):
    """start_complete: one attempt, not waited for; its end reported once, translated as the store translates."""
    store = _answers_store("crt", answers)
    ended = threading.Event()
    outcome: list[Any] = []
    assert store.start_complete("b", f"t/{key}", "u", PARTS, lambda etag, error: (outcome.append((etag, error)),
                                                                                    ended.set()))
    assert ended.wait(5)
    time.sleep(0.1)
    (etag, error), = outcome
    assert store.request_counts()["complete_multipart_upload"] == 1
    if key == "ok":
        assert error is None and etag.endswith('-2"')
        return
    assert etag is None and isinstance(error, e.StoreError) and error.__cause__ is not None
    assert isinstance(error, {"slow-down": e.ThrottledError, "no-such-upload": e.NoSuchUploadError}.get(
        key, e.TransientStoreError))


def test_many_completes_in_flight_from_one_thread_within_the_connection_bound(answers):
    """Started completes need no thread each: 40 in flight from this thread, on at most max_completes_in_flight
    connections (the rest wait for one), each answered once -- all started before the server answers any."""
    baseline = _Answers.most_connections = _Answers.open_connections
    store = _answers_store("crt", answers, max_completes_in_flight=4)

    def client_threads() -> int:  # the server's own threads (one per connection) aside
        return sum("process_request_thread" not in t.name for t in threading.enumerate())

    threads_before = client_threads()
    lock = threading.Lock()
    answered: list[str] = []
    all_done = threading.Event()

    def done(etag: str | None, error: BaseException | None) -> None:
        assert error is None
        with lock:
            answered.append(etag or "")
            if len(answered) == 40:
                all_done.set()

    _Answers.release.clear()  # no answer until every complete has been started
    try:
        for i in range(40):
            store.start_complete("b", f"t/held-{i}", "u", PARTS, done)
        assert answered == []  # starting waited for no answer (a start that waited would see them after 30 s)
    finally:
        _Answers.release.set()
    assert all_done.wait(30)
    assert client_threads() <= threads_before + 1  # the watchdog; the CRT's event loop is not Python's
    assert _Answers.most_connections - baseline <= 4
    store.close()


def test_closing_the_transport_closes_its_connections_and_ends_what_is_in_flight(answers):
    store = _answers_store("crt", answers, read_timeout=5)
    assert store.complete_multipart_upload("b", "t/k", "u", PARTS).endswith('-2"')
    completer = store.completer()
    ended = threading.Event()
    outcome: list[Any] = []
    store.start_complete("b", "t/hang", "u", PARTS, lambda etag, error: (outcome.append(error), ended.set()))
    watchdog = completer._watchdog
    assert watchdog is not None and watchdog.is_alive()
    store.close()
    assert ended.wait(2)
    assert isinstance(outcome[0], e.TransientStoreError)  # a dropped connection: retried by whoever started it
    assert not watchdog.is_alive()
    deadline = time.monotonic() + 2
    while any(c.is_open() for h in completer._hosts.values() for c in h._all) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(c.is_open() for h in completer._hosts.values() for c in h._all)


def test_a_connection_the_server_closed_is_not_reused(answers):
    store = _answers_store("crt", answers)
    for i in range(5):  # every answer says "Connection: close"
        assert store.complete_multipart_upload("b", f"t/close-{i}", "u", PARTS).endswith('-2"')
    assert store.request_counts() == {"complete_multipart_upload": 5}


@pytest.mark.parametrize("endpoint, why", [
    ("refused", "connection refused"),
    ("http://no-such-host.invalid:4566", "does not resolve"),
])
def test_an_unreachable_endpoint_is_reported_as_boto3_reports_it(endpoint, why):
    import socket

    if endpoint == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    for transport in ("crt", "boto3"):
        store = _answers_store(transport, endpoint)
        with pytest.raises(e.EndpointUnreachableError, match=why):
            store.complete_multipart_upload("b", "t/k", "u", PARTS)


# ---------------------------------------------------------------- the choice
def test_the_transport_is_chosen_in_the_options_with_boto3_where_the_crt_cannot_be_used(monkeypatch):
    options = _options("auto", endpoint_url="http://127.0.0.1:9")
    assert isinstance(S3Store(options).completer(), CrtCompleter)  # the default where it can be used
    assert isinstance(S3Store(_options("boto3", endpoint_url="http://127.0.0.1:9")).completer(), Boto3Completer)
    assert S3Store(_options("boto3", endpoint_url="http://127.0.0.1:9")).completes_in_flight("b") is None
    given = S3Store(options, client=S3Store(options)._client)  # a client of the caller's: its credentials unknown
    assert isinstance(given.completer(), Boto3Completer)
    with pytest.raises(e.UsageError, match="given its client"):
        S3Store(_options("crt", endpoint_url="http://127.0.0.1:9"), client=given._client)
    # Directory buckets sign with S3 Express session credentials: boto3's business.
    assert isinstance(S3Store(options).completer("data--usw2-az1--x-s3"), Boto3Completer)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert isinstance(S3Store(options).completer(), Boto3Completer)
    with pytest.raises(e.UsageError, match="proxy"):
        S3Store(_options("crt", endpoint_url="http://127.0.0.1:9"))
    assert S3Options(complete_transport="boto3").complete_transport is CompleteTransport.BOTO3
    with pytest.raises(e.UsageError, match="complete_transport"):
        S3Options(complete_transport="lean")


def test_without_awscrt_the_store_falls_back_to_boto3_and_says_so_once():
    script = """
import logging, sys
sys.modules["awscrt"] = None  # as if no wheel were installed: every import of it fails
logging.basicConfig(level=logging.DEBUG, format="%(name)s %(message)s", stream=sys.stdout)
for noisy in ("botocore", "boto3", "urllib3"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
from mpcommit.options import S3Options
from mpcommit.store.s3 import S3Store
for _ in range(3):
    store = S3Store(S3Options(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="a",
                              secret_access_key="b"))
    print("completer", type(store.completer()).__name__)
try:
    S3Store(S3Options(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="a",
                      secret_access_key="b", complete_transport="crt"))
except ValueError as exc:
    print("refused", exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.count("completer Boto3Completer") == 3
    logged = [line for line in out.splitlines() if line.startswith("mpcommit.store.transport_choice")]
    assert len(logged) == 1 and "awscrt cannot be imported" in logged[0]
    assert "refused S3Options.complete_transport='crt' cannot be used: awscrt cannot be imported" in out


def test_the_crt_verifies_tls_with_the_configured_ca_bundle(monkeypatch, tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    assert S3Store(_options("crt", endpoint_url="http://127.0.0.1:9")).completer().ca_bundle == str(bundle)
    monkeypatch.delenv("AWS_CA_BUNDLE")
    assert S3Store(_options("crt", endpoint_url="http://127.0.0.1:9")).completer().ca_bundle != str(bundle)


# ---------------------------------------------------------------- on real servers: moto and LocalStack
def test_real_servers_accept_the_crt_request_and_answer_through_it(backend):
    from dataclasses import replace

    bucket = backend.new_bucket()
    crt_options = replace(backend.options, complete_transport="crt")
    store = S3Store(crt_options)
    assert isinstance(store.completer(), CrtCompleter)
    key = "t/dt=2024-01-01/a b+c~é=.bin"
    upload_id = store.create_multipart_upload(bucket, key)
    import base64
    import zlib

    chunks = [b"a" * (5 * 1024 * 1024), b"tail"]  # the first part through boto3 (above 1 MiB), the last the CRT's
    parts = []
    for n, chunk in enumerate(chunks, 1):
        crc = base64.b64encode(zlib.crc32(chunk).to_bytes(4, "big")).decode()
        parts.append(CompletedPart(n, store.upload_part(bucket, key, upload_id, n, chunk, crc), crc))
    etag = store.complete_multipart_upload(bucket, key, upload_id, parts)
    head = backend.client.head_object(Bucket=bucket, Key=key)
    assert etag == head["ETag"] and etag.endswith('-2"')
    assert backend.client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"".join(chunks)
    # A task's manifest, through the CRT: read back as written.
    put = store.put_object(bucket, "t/_manifest é.json", b'{"n": 1}')
    got = backend.client.get_object(Bucket=bucket, Key="t/_manifest é.json")
    assert got["Body"].read() == b'{"n": 1}' and got["ETag"] == put and got["ContentType"] == "application/json"
    # A part whose checksum does not match its bytes is refused by the server (moto does not check).
    refused = store.create_multipart_upload(bucket, "t/refused")
    if backend.name != "moto":
        with pytest.raises(e.StoreError):
            store.upload_part(bucket, "t/refused", refused, 1, b"data", "AAAAAA==")
    store.abort_multipart_upload(bucket, "t/refused", refused)
    # An upload that is gone: S3 and LocalStack answer NoSuchUpload (which the commit resolves by the object's
    # ETag); moto 5 answers 500. Either way the CRT path raises what boto3's raises for the same answer.
    aborted = store.create_multipart_upload(bucket, "t/aborted")
    store.abort_multipart_upload(bucket, "t/aborted", aborted)
    raised = {}
    for transport in ("crt", "boto3"):
        with S3Store(replace(backend.options, complete_transport=transport)) as other:
            with pytest.raises(e.StoreError) as info:
                other.complete_multipart_upload(bucket, "t/aborted", aborted, parts)
        raised[transport] = (type(info.value), info.value.code)
    assert raised["crt"] == raised["boto3"]
    if backend.name == "localstack":
        assert raised["crt"][0] is e.NoSuchUploadError
    with pytest.raises(e.NoSuchBucketError):
        store.complete_multipart_upload(bucket + "-missing", key, upload_id, parts)
    # A part whose ETag does not match is refused as S3 refuses it.
    other = store.create_multipart_upload(bucket, "t/other")
    crc = base64.b64encode(zlib.crc32(b"x").to_bytes(4, "big")).decode()
    store.upload_part(bucket, "t/other", other, 1, b"x", crc)
    with pytest.raises(e.InvalidPartError):
        store.complete_multipart_upload(bucket, "t/other", other, [CompletedPart(1, '"%032x"' % 1, crc)])
    store.close()
