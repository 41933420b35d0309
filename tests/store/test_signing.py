"""mpcommit's own SigV4 (mpcommit.store.signing) against botocore's S3 signer: the same Authorization and signed
headers for every request mpcommit builds itself -- a complete, a task's CreateMultipartUpload and UploadPart (with
their checksum headers, an empty body, an unsigned payload over TLS), a manifest's PUT -- whatever the key, the
query, the header values' white space, a session token or the instant."""

from __future__ import annotations

import datetime
import hashlib
from urllib.parse import quote

import botocore.auth
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from mpcommit.store.signing import UNSIGNED_PAYLOAD, SigV4Signer

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
INSTANT = datetime.datetime(2026, 11, 24, 12, 0, 7, tzinfo=datetime.timezone.utc)


def botocore_headers(credentials, region, method, url, body, headers, *, payload_signing=True, instant=INSTANT):
    """The headers botocore's S3 signer gives this request at ``instant`` (lower-case names)."""
    request = AWSRequest(method=method, url=url, data=body, headers={"User-Agent": "botocore", **dict(headers)})
    if not payload_signing:  # as botocore sets it for UploadPart: a streamed body with its checksum in a header
        request.context["has_streaming_input"] = True
        request.context["checksum"] = {"request_algorithm": {"in": "header", "name": "x-amz-checksum-crc32"}}
    original = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda: instant.replace(tzinfo=None)
    try:
        S3SigV4Auth(credentials, "s3", region).add_auth(request)
    finally:
        botocore.auth.get_current_datetime = original
    return {k.lower(): v for k, v in request.headers.items()}


def ours(credentials, region, method, path, host, body, headers, *, payload=None, instant=INSTANT):
    signer = SigV4Signer(credentials, region, "mpcommit-test")
    sent = signer.headers(method, path, host, payload or hashlib.sha256(body).hexdigest(), headers,
                          length=len(body), when=instant.timestamp())
    names = [n.lower() for n, _ in sent]
    assert len(names) == len(set(names)), f"a header sent twice: {names}"
    return {n.lower(): v for n, v in sent}


def assert_same(theirs, mine):
    assert mine["authorization"] == theirs["authorization"]
    for name in ("x-amz-date", "x-amz-content-sha256", "x-amz-security-token"):
        assert mine.get(name) == theirs.get(name), name


def test_a_task_s_create_and_part_and_a_manifest_put_are_signed_as_botocore_signs_them():
    credentials = Credentials("AKIDEXAMPLE", SECRET)
    host = "127.0.0.1:9000"
    key = quote("t/dt=2024-01-01/a b+c~d=é/part-00000.parquet", safe="/~")
    upload = quote("2~Upload+Id/with=odd%chars", safe="~")
    cases = [
        ("POST", f"/bkt/{key}?uploads", b"", [("x-amz-checksum-algorithm", "CRC32"), ("Content-Type", "application/x-parquet")]),
        ("PUT", f"/bkt/{key}?partNumber=3&uploadId={upload}", b"\x00parquet bytes" * 100,
         [("x-amz-sdk-checksum-algorithm", "CRC32"), ("x-amz-checksum-crc32", "AAAAAA==")]),
        ("PUT", "/bkt/t/_mpcommit/job/manifests/task-0.json", b'{"uploads": []}', [("Content-Type", "application/json")]),
    ]
    for method, path, body, headers in cases:
        theirs = botocore_headers(credentials, "us-east-1", method, f"http://{host}{path}", body, headers)
        mine = ours(credentials, "us-east-1", method, path, host, body, headers)
        assert_same(theirs, mine)
        assert mine["content-length"] == str(len(body)) and mine["host"] == host


def test_an_unsigned_payload_over_tls_and_a_session_token_are_signed_as_botocore_signs_them():
    credentials = Credentials("AKIDEXAMPLE", SECRET, "FwoGZXIvYXdzE+/token=")
    host = "bkt.s3.eu-west-1.amazonaws.com"
    headers = [("x-amz-sdk-checksum-algorithm", "CRC32"), ("x-amz-checksum-crc32", "AAAAAA=="),
               ("x-amz-expected-bucket-owner", "111122223333")]
    path = "/k?partNumber=1&uploadId=u"
    theirs = botocore_headers(credentials, "eu-west-1", "PUT", f"https://{host}{path}", b"body", headers,
                              payload_signing=False)
    mine = ours(credentials, "eu-west-1", "PUT", path, host, b"body", headers, payload=UNSIGNED_PAYLOAD)
    assert theirs["x-amz-content-sha256"] == UNSIGNED_PAYLOAD
    assert_same(theirs, mine)
    assert "x-amz-security-token" in mine["authorization"]


@settings(max_examples=150, deadline=None)
@given(key=st.text(min_size=1, max_size=40), query=st.lists(st.tuples(st.sampled_from(["uploadId", "partNumber",
       "uploads", "x-id", "versionId"]), st.text(max_size=12)), max_size=3, unique_by=lambda kv: kv[0]),
       value=st.text(alphabet=st.sampled_from("ab =+/\t  é,;"), max_size=20),
       seconds=st.integers(min_value=0, max_value=3 * 365 * 86400), token=st.booleans())
def test_any_key_query_header_value_and_instant_is_signed_as_botocore_signs_it(key, query, value, seconds, token):
    credentials = Credentials("AKIDEXAMPLE", SECRET, "tok/en+=" if token else None)
    instant = INSTANT + datetime.timedelta(seconds=seconds)
    path = "/bkt/" + quote(key, safe="/~")
    if query:
        path += "?" + "&".join(f"{k}={quote(v, safe='~')}" if k != "uploads" else k for k, v in query)
    headers = [("x-amz-meta-note", value), ("Content-Type", "application/octet-stream")]
    body = b"x" * (seconds % 50)
    theirs = botocore_headers(credentials, "us-west-2", "PUT", f"http://h:1{path}", body, headers, instant=instant)
    mine = ours(credentials, "us-west-2", "PUT", path, "h:1", body, headers, instant=instant)
    assert_same(theirs, mine)


def test_the_signing_key_follows_the_day_and_refreshed_credentials():
    class Rotating:
        def __init__(self):
            self.secret = SECRET

        def get_frozen_credentials(self):
            return Credentials("AKIDEXAMPLE", self.secret).get_frozen_credentials()

    rotating = Rotating()
    signer = SigV4Signer(rotating, "us-east-1", "t")
    one = dict(signer.headers("GET", "/b/k", "h", hashlib.sha256(b"").hexdigest(), [], length=0,
                              when=INSTANT.timestamp()))
    rotating.secret = "another-secret"
    two = dict(signer.headers("GET", "/b/k", "h", hashlib.sha256(b"").hexdigest(), [], length=0,
                              when=INSTANT.timestamp()))
    next_day = dict(signer.headers("GET", "/b/k", "h", hashlib.sha256(b"").hexdigest(), [], length=0,
                                   when=INSTANT.timestamp() + 86400))
    assert one["Authorization"] != two["Authorization"]
    theirs = botocore_headers(Credentials("AKIDEXAMPLE", "another-secret"), "us-east-1", "GET", "http://h/b/k", b"", [],
                              instant=INSTANT + datetime.timedelta(days=1))
    assert next_day["Authorization"] != two["Authorization"]
    assert next_day["Authorization"] == theirs["authorization"]
