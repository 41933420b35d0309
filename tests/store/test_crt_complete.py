"""The CRT complete path (mpcommit.store.crt_complete) against botocore's: the same signature for the same
request, the same request on the wire, the same exceptions for every answer and failure, and the fallback to the
botocore lean path when awscrt cannot be imported."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest

from mpcommit import errors as e
from mpcommit.options import RetryPolicy, S3Options
from mpcommit.store import crt_complete
from mpcommit.store.crt_complete import CrtCompleter
from mpcommit.store.lean import LeanCompleter, complete_body, key_and_query
from mpcommit.store.s3 import CompletedPart, S3Store

REPO = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002)
PARTS = [CompletedPart(1, '"0123456789abcdef0123456789abcdef"', "AAAAAA=="), CompletedPart(2, '"e&f"', "BBBBBB==")]
KEYS = ["t/dt=2024-01-01/part-00000.parquet", "t/a b+c~d=é/ü,;:@$&'()*!.bin", "t//double//slash"]


def _store(path: str, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> S3Store:
    monkeypatch.setenv("MPCOMMIT_LEAN_COMPLETE", path)
    return S3Store(S3Options(region=kw.pop("region", "us-east-1"), access_key_id="AKIDEXAMPLE",
                             secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", retry=FAST, **kw))


def test_keys_and_upload_ids_are_encoded_as_urllib_quote_encodes_them():
    from urllib.parse import quote

    every_ascii = "".join(chr(c) for c in range(128))
    for key in [every_ascii, "t/dt=2024-01-01/part-00000-x.c000.parquet", "é/ü", "a\u2028b", ""] + KEYS:
        assert key_and_query(key, key) == f"{quote(key, safe='/~')}?uploadId={quote(key, safe='~')}"


# ---------------------------------------------------------------- the signature: botocore's, byte for byte
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("options", [
    {"endpoint_url": "http://127.0.0.1:4566"},  # path style on a custom endpoint with a port
    {"region": "eu-west-1", "addressing_style": "virtual"},  # AWS, the bucket in the host name
    {"region": "eu-west-1", "expected_bucket_owner": "111122223333", "session_token": "FwoGZXIvYXdzE+/token="},
])
def test_the_crt_signs_the_request_exactly_as_botocore_does(monkeypatch, key, options):
    store = _store("crt", monkeypatch, **options)
    crt = store._lean_completer()
    assert isinstance(crt, CrtCompleter)
    base, base_path, host = crt._base("my-bucket")
    tail = key_and_query(key, "2~Upload+Id/with=odd%chars")
    body = complete_body(PARTS)
    instant = datetime.datetime(2026, 11, 24, 12, 0, 0)

    signed = crt.signed_request(base_path + tail, host.host_header, body,
                                date=instant.replace(tzinfo=datetime.timezone.utc))
    theirs = {k.lower(): v for k, v in signed.headers}

    headers = {"User-Agent": "x"}
    if options.get("expected_bucket_owner"):
        headers["x-amz-expected-bucket-owner"] = options["expected_bucket_owner"]
    request = AWSRequest(method="POST", url=base + tail, data=body, headers=headers)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: instant)
    S3SigV4Auth(store._credentials.get_frozen_credentials(), "s3", store._client.meta.region_name).add_auth(request)
    ours = {k.lower(): v for k, v in request.headers.items()}

    assert theirs["authorization"] == ours["authorization"]
    for name in ("x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "x-amz-expected-bucket-owner"):
        assert theirs.get(name) == ours.get(name)
    if options.get("session_token"):
        assert "x-amz-security-token" in theirs["authorization"]
    assert theirs["host"] == base.split("/")[2]
    assert theirs["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    assert theirs["content-length"] == str(len(body))
    if options.get("addressing_style") == "virtual":
        assert host.host_header == "my-bucket.s3.eu-west-1.amazonaws.com" and base_path == "/"


# ---------------------------------------------------------------- answers and failures, the same on both paths
class _Answers(http.server.BaseHTTPRequestHandler):
    """A server whose answer depends on the key: what S3 may answer a complete with, and how a connection fails."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, dict[str, str], bytes]] = []

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

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append((self.path, dict(self.headers.items()), body))
        key = self.path.split("?")[0].rsplit("/", 1)[-1]
        error = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>'
        if key == "error-in-200":
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


def _answers_store(path: str, endpoint: str, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> S3Store:
    store = _store(path, monkeypatch, endpoint_url=endpoint, read_timeout=0.5, connect_timeout=1, **kw)
    assert isinstance(store._lean_completer(), CrtCompleter if path == "crt" else LeanCompleter)
    return store


@pytest.mark.parametrize("path", ["crt", "botocore"])
def test_the_request_on_the_wire(answers, monkeypatch, path):
    _Answers.seen.clear()
    store = _answers_store(path, answers, monkeypatch, expected_bucket_owner="111122223333")
    etag = store.complete_multipart_upload("b", "t/a b+c.bin", "up/1=", PARTS)
    assert etag == '"%s-2"' % hashlib.md5(complete_body(PARTS)).hexdigest()
    (target, headers, body), = _Answers.seen
    # (urllib3 sends the absolute form, "POST http://host/b/...": the same resource)
    assert target.split(answers, 1)[-1] == "/b/t/a%20b%2Bc.bin?uploadId=up%2F1%3D"
    assert body == complete_body(PARTS) and b"<ChecksumCRC32>BBBBBB==</ChecksumCRC32>" in body
    assert headers["x-amz-expected-bucket-owner"] == "111122223333"
    assert {k.lower(): v for k, v in headers.items()}["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    assert "x-amz-expected-bucket-owner" in headers["Authorization"]


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
def test_every_answer_and_failure_raises_what_the_botocore_path_raises(answers, monkeypatch, key):
    raised = {}
    for path in ("crt", "botocore"):
        store = _answers_store(path, answers, monkeypatch)
        with pytest.raises(e.StoreError) as info:
            store.complete_multipart_upload("b", f"t/{key}", "u", PARTS)
        last = info.value.__cause__ if isinstance(info.value, e.RetriesExhaustedError) else info.value
        raised[path] = (type(info.value), getattr(info.value, "code", None), type(last).__name__,
                        getattr(last, "code", None), store.request_counts()["complete_multipart_upload"])
    cls, code, attempts = OUTCOMES[key]
    assert raised["crt"] == raised["botocore"]
    assert raised["crt"][0] is cls and raised["crt"][4] == attempts
    if code:
        assert raised["crt"][1] == code


def test_a_connection_the_server_closed_is_not_reused(answers, monkeypatch):
    store = _answers_store("crt", answers, monkeypatch)
    for i in range(5):  # every answer says "Connection: close"
        assert store.complete_multipart_upload("b", f"t/close-{i}", "u", PARTS).endswith('-2"')
    assert store.request_counts() == {"complete_multipart_upload": 5}


@pytest.mark.parametrize("endpoint, why", [
    ("refused", "connection refused"),
    ("http://no-such-host.invalid:4566", "does not resolve"),
])
def test_an_unreachable_endpoint_is_reported_as_on_the_botocore_path(monkeypatch, endpoint, why):
    import socket

    if endpoint == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    for path in ("crt", "botocore"):
        store = _answers_store(path, endpoint, monkeypatch)
        with pytest.raises(e.EndpointUnreachableError, match=why):
            store.complete_multipart_upload("b", "t/k", "u", PARTS)


# ---------------------------------------------------------------- without awscrt
def test_without_awscrt_the_store_falls_back_to_the_botocore_lean_path_and_says_so_once():
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
    print("completer", type(store._lean_completer()).__name__)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.count("completer LeanCompleter") == 3
    logged = [line for line in out.splitlines() if line.startswith("mpcommit.store.crt_complete")]
    assert len(logged) == 1 and "awscrt cannot be imported" in logged[0]


def test_with_awscrt_the_default_is_the_crt_path(monkeypatch):
    monkeypatch.delenv("MPCOMMIT_LEAN_COMPLETE", raising=False)
    store = S3Store(S3Options(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="a",
                              secret_access_key="b"))
    assert crt_complete.crt_available() and isinstance(store._lean_completer(), CrtCompleter)


# ---------------------------------------------------------------- on real servers: moto and LocalStack
def test_real_servers_accept_the_crt_request_and_answer_through_it(backend, monkeypatch):
    monkeypatch.setenv("MPCOMMIT_LEAN_COMPLETE", "crt")
    bucket = backend.new_bucket()
    store = S3Store(backend.options)
    assert isinstance(store._lean_completer(), CrtCompleter)
    key = "t/dt=2024-01-01/a b+c~é=.bin"
    upload_id = store.create_multipart_upload(bucket, key)
    import base64
    import zlib

    chunks = [b"a" * (5 * 1024 * 1024), b"tail"]
    parts = []
    for n, chunk in enumerate(chunks, 1):
        crc = base64.b64encode(zlib.crc32(chunk).to_bytes(4, "big")).decode()
        parts.append(CompletedPart(n, store.upload_part(bucket, key, upload_id, n, chunk, crc), crc))
    etag = store.complete_multipart_upload(bucket, key, upload_id, parts)
    head = backend.client.head_object(Bucket=bucket, Key=key)
    assert etag == head["ETag"] and etag.endswith('-2"')
    assert backend.client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"".join(chunks)
    # An upload that is gone: S3 and LocalStack answer NoSuchUpload (which the commit resolves by the object's
    # ETag); moto 5 answers 500. Either way the CRT path raises what boto3's raises for the same answer.
    aborted = store.create_multipart_upload(bucket, "t/aborted")
    store.abort_multipart_upload(bucket, "t/aborted", aborted)
    raised = {}
    for path in ("crt", "0"):
        monkeypatch.setenv("MPCOMMIT_LEAN_COMPLETE", path)
        with pytest.raises(e.StoreError) as info:
            S3Store(backend.options).complete_multipart_upload(bucket, "t/aborted", aborted, parts)
        raised[path] = (type(info.value), info.value.code)
    assert raised["crt"] == raised["0"]
    if backend.name == "localstack":
        assert raised["crt"][0] is e.NoSuchUploadError
    monkeypatch.setenv("MPCOMMIT_LEAN_COMPLETE", "crt")
    with pytest.raises(e.NoSuchBucketError):
        store.complete_multipart_upload(bucket + "-missing", key, upload_id, parts)
    # A part whose ETag does not match is refused as S3 refuses it.
    other = store.create_multipart_upload(bucket, "t/other")
    crc = base64.b64encode(zlib.crc32(b"x").to_bytes(4, "big")).decode()
    store.upload_part(bucket, "t/other", other, 1, b"x", crc)
    with pytest.raises(e.InvalidPartError):
        store.complete_multipart_upload(bucket, "t/other", other, [CompletedPart(1, '"%032x"' % 1, crc)])
