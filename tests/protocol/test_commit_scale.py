"""Regressions of the commit at scale (issue 12) that a unit can show: no retry controller per request, the
lean complete path's request and its errors, manifests read ahead within bounds (never all held)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mpcommit.errors import AccessDeniedError, NoSuchUploadError, RetriesExhaustedError, TransientStoreError
from mpcommit.options import RetryPolicy, S3Options
from mpcommit.protocol.commit import manifests as manifests_module
from mpcommit.protocol.commit.context import MANIFESTS_AHEAD, CommitContext
from mpcommit.protocol.commit.manifests import ManifestReader
from mpcommit.protocol.layout import Destination
from mpcommit.protocol.records.manifest import Part, PendingUpload, TaskManifest
from mpcommit.store import retry as retry_module
from mpcommit.store.lean import complete_body
from mpcommit.store.s3 import CompletedPart, S3Store

REPO = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002)


# ---------------------------------------------------------------- retries
def test_a_request_that_succeeds_sets_up_no_retry_controller(monkeypatch):
    built = []

    class Counting(retry_module.Retrying):  # type: ignore[misc]
        def __init__(self, *args, **kwargs):
            built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(retry_module, "Retrying", Counting)
    for _ in range(100):
        assert retry_module.call_with_retry(lambda: 7, policy=FAST, describe="op") == 7
    assert built == []


def test_a_transient_failure_is_retried_counting_the_first_attempt(monkeypatch):
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TransientStoreError("op failed: 503", operation="op", code="503")
        return "ok"

    assert retry_module.call_with_retry(flaky, policy=FAST, describe="op") == "ok"
    assert len(calls) == 3

    calls.clear()

    def down() -> str:
        calls.append(1)
        raise TransientStoreError("op failed: 503", operation="op", code="503")

    with pytest.raises(RetriesExhaustedError, match="after 3 attempts"):
        retry_module.call_with_retry(down, policy=FAST, describe="op")
    assert len(calls) == 3  # max_attempts in all, the first one included


# ---------------------------------------------------------------- the lean complete path
def test_complete_body_lists_every_part_in_order_with_its_checksum():
    parts = [CompletedPart(1, '"a&b"', "AAAAAA=="), CompletedPart(2, '"c"', None)]
    root = ET.fromstring(complete_body(parts))
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    found = [(p.find(f"{ns}PartNumber").text, p.find(f"{ns}ETag").text,
              getattr(p.find(f"{ns}ChecksumCRC32"), "text", None)) for p in root]
    assert found == [("1", '"a&b"', "AAAAAA=="), ("2", '"c"', None)]


@pytest.fixture(scope="module")
def stub():
    proc = subprocess.Popen([sys.executable, "-m", "bench.stub_s3", "--port", "0"], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    line = proc.stdout.readline()
    assert line.startswith("PORT "), line
    yield f"http://127.0.0.1:{int(line.split()[1])}"
    proc.terminate()
    proc.wait(10)


def _options(endpoint: str, **kw) -> S3Options:
    return S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test",
                     retry=FAST, **kw)


def test_the_store_completes_through_the_lean_path_and_translates_its_errors(stub, monkeypatch):
    store = S3Store(_options(stub))
    assert store._lean_completer() is not None
    etag = store.complete_multipart_upload("b", "t/x y+z.bin", "u1", [CompletedPart(1, '"e"', "AAAAAA==")])
    assert etag.startswith('"') and etag.endswith('-1"')
    assert store.request_counts() == {"complete_multipart_upload": 1}
    with pytest.raises(NoSuchUploadError):
        store.complete_multipart_upload("b", "t/k", "gone-1", [CompletedPart(1, '"e"')])
    # The expected bucket owner is sent: the stub refuses a request naming another owner.
    with pytest.raises(AccessDeniedError):
        S3Store(_options(stub, expected_bucket_owner="999999999999")).complete_multipart_upload(
            "b", "t/k", "u2", [CompletedPart(1, '"e"')])
    S3Store(_options(stub, expected_bucket_owner="111122223333")).complete_multipart_upload(
        "b", "t/k", "u3", [CompletedPart(1, '"e"')])


def test_a_store_given_a_client_or_told_not_to_keeps_every_request_on_boto3(stub, monkeypatch):
    plain = S3Store(_options(stub))
    assert S3Store(plain.options, client=plain._client)._lean_completer() is None
    monkeypatch.setenv("MPCOMMIT_LEAN_COMPLETE", "0")
    assert S3Store(_options(stub))._lean_completer() is None


def test_unreachable_endpoint_through_the_lean_path_is_a_connection_error(monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = S3Store(_options(f"http://127.0.0.1:{port}"))
    with pytest.raises(Exception) as info:
        store.complete_multipart_upload("b", "t/k", "u", [CompletedPart(1, '"e"')])
    # Never reached: reported at once as unreachable (not retried, not a generic error).
    assert "could not reach the endpoint" in str(info.value)


# ---------------------------------------------------------------- manifests streamed, never all held
def _manifest(dest: Destination, job_id: str, task: int, files: int, parts: int) -> TaskManifest:
    from mpcommit.protocol.layout import data_file_name

    uploads = tuple(
        PendingUpload(dest.root + data_file_name(task_id=task, job_id=job_id, file_number=i, ext="bin"), f"u{task}-{i}",
                      tuple(Part(n, '"e"', 1) for n in range(1, parts + 1)), parts)
        for i in range(files))
    return TaskManifest(job_id=job_id, bucket=dest.bucket, prefix=dest.prefix, task_id=task, attempt=0, nonce="n",
                        created_ms=0, uploads=uploads)


@pytest.mark.parametrize("parts, most_held", [(1, MANIFESTS_AHEAD + 1), (600, 2)])
def test_referenced_manifests_are_read_ahead_in_parallel_within_bounds(monkeypatch, parts, most_held):
    """Small manifests are read many at a time; large ones stop the read-ahead at the parts bound; in no case
    are all of them read before the first is consumed."""
    monkeypatch.setattr(manifests_module, "MANIFEST_PARTS_AHEAD", 500)
    dest = Destination("b", "t")
    job_id = "20240101T000000-0123abcd"
    reader = ManifestReader(S3Store(S3Options(region="us-east-1", access_key_id="a", secret_access_key="b")), dest,
                            job_id)
    lock = threading.Lock()
    read: list[str] = []
    consumed = 0
    held_max = 0
    concurrent = 0
    concurrent_max = 0
    gate = threading.Barrier(2, timeout=5) if parts == 1 else None

    def fake_read(key: str) -> TaskManifest:
        nonlocal concurrent, concurrent_max
        with lock:
            concurrent += 1
            concurrent_max = max(concurrent_max, concurrent)
        if gate is not None and key in ("k0", "k1"):
            gate.wait()  # only passes if two reads run at once
        with lock:
            read.append(key)
            concurrent -= 1
        return _manifest(dest, job_id, int(key[1:]), 1, parts)

    monkeypatch.setattr(reader, "read", fake_read)
    keys = [f"k{i}" for i in range(40)]
    with CommitContext(8) as context:
        for m in reader.stream(keys, {}, context):
            consumed += 1
            time.sleep(0.002)  # let the read-ahead run as far as it may
            with lock:
                held_max = max(held_max, len(read) - consumed + 1)
            assert m.task_id == consumed - 1  # in journal order
    assert consumed == 40
    assert held_max <= most_held
    if gate is not None:
        assert concurrent_max >= 2  # read in parallel


@pytest.mark.parametrize("path", ["crt", "botocore"])
def test_the_lean_path_verifies_tls_with_the_configured_ca_bundle(stub, monkeypatch, tmp_path, path):
    monkeypatch.setenv("MPCOMMIT_LEAN_COMPLETE", path)
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")

    def ca_certs(lean) -> str:
        return lean.ca_bundle if path == "crt" else lean._pool.connection_pool_kw["ca_certs"]

    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    lean = S3Store(_options(stub))._lean_completer()
    assert lean is not None and ca_certs(lean) == str(bundle)
    monkeypatch.delenv("AWS_CA_BUNDLE")
    lean = S3Store(_options(stub))._lean_completer()
    assert lean is not None and ca_certs(lean) != str(bundle)
