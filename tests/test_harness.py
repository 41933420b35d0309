"""The test infrastructure itself: servers, fixtures and the independent checker work on every backend."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpcommit.demo.embedded_s3 import EmbeddedS3Server
from mpcommit.sizing import MiB
from tests.support.backends import Backend, raw_s3_client
from tests.support.checks import (
    all_keys,
    is_hidden,
    pending_upload_entries,
    pending_uploads,
    read_object,
    visible_keys,
)
from tests.support.servers import start_localstack


def test_backend_roundtrip_and_hidden_keys(backend: Backend, bucket: str) -> None:
    assert backend.options.endpoint_url == backend.endpoint_url
    assert backend.options.access_key_id == "test" and backend.options.region == "us-east-1"
    assert backend.options.retry.max_attempts == 4
    keys = [
        "table/dt=1/part-00000-j.c000.csv",
        "table/_SUCCESS",
        "table/_temporary/mpcommit/j/manifest.json",
        "table/.hidden/x",
        "table/dt=1/.part-00001.crc",
        "table2/part-00000-k.c000.csv",
    ]
    for key in keys:
        backend.client.put_object(Bucket=bucket, Key=key, Body=key.encode())
    assert visible_keys(backend.client, bucket, "table") == {"table/dt=1/part-00000-j.c000.csv"}
    assert visible_keys(backend.client, bucket, "table/") == {"table/dt=1/part-00000-j.c000.csv"}
    assert all_keys(backend.client, bucket, "table") == set(keys) - {"table2/part-00000-k.c000.csv"}
    assert all_keys(backend.client, bucket, "table", exact_prefix=True) == set(keys)
    assert read_object(backend.client, bucket, "table/_SUCCESS") == b"table/_SUCCESS"
    assert is_hidden("_temporary/x") and is_hidden("a/.b") and not is_hidden("dt=__HIVE_DEFAULT_PARTITION__/p")


def test_multipart_upload_invisible_until_complete(backend: Backend, bucket: str, pyarrow_fs) -> None:  # noqa: ANN001
    client = backend.client
    key = "table/dt=2024-01-01/part-00007-job1.c000.csv"
    first, last = b"a" * (5 * MiB), b"tail\n"
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    etags = [
        client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=body)["ETag"]
        for n, body in ((1, first), (2, last))
    ]

    assert visible_keys(client, bucket, "table") == set()
    assert all_keys(client, bucket) == set()
    assert pending_uploads(client, bucket, "table") == [(key, upload_id)]
    assert pending_uploads(client, bucket, "other") == []

    client.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags)]},
    )
    assert visible_keys(client, bucket, "table") == {key}
    assert pending_uploads(client, bucket) == []
    assert read_object(client, bucket, key) == first + last
    # An independent client (pyarrow's C++ S3) reads the same bytes.
    with pyarrow_fs.open_input_stream(f"{bucket}/{key}") as stream:
        assert stream.read() == first + last


def test_abort_leaves_nothing(backend: Backend, bucket: str) -> None:
    client = backend.client
    upload_id = client.create_multipart_upload(Bucket=bucket, Key="t/part-0")["UploadId"]
    client.upload_part(Bucket=bucket, Key="t/part-0", UploadId=upload_id, PartNumber=1, Body=b"x")
    client.abort_multipart_upload(Bucket=bucket, Key="t/part-0", UploadId=upload_id)
    assert pending_uploads(client, bucket) == []
    assert all_keys(client, bucket) == set()


def test_pending_uploads_follows_key_and_upload_id_markers(backend: Backend, bucket: str) -> None:
    client = backend.client
    # Several uploads of one key, so that pages also split between upload ids of the same key.
    expected = [("t/a", client.create_multipart_upload(Bucket=bucket, Key="t/a")["UploadId"]) for _ in range(3)]
    for i in range(12):
        key = f"t/k{i:03d}"
        expected.append((key, client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]))
    client.create_multipart_upload(Bucket=bucket, Key="t2/not-under-t")

    found = pending_uploads(client, bucket, "t", page_size=2)
    assert sorted(found) == sorted(expected)
    assert len(found) == len(set(found))

    first_page = client.list_multipart_uploads(Bucket=bucket, Prefix="t/", MaxUploads=2)
    if backend.name == "localstack":
        assert first_page["IsTruncated"] and len(first_page["Uploads"]) == 2
    entries = pending_upload_entries(client, bucket, "t")
    assert all("Initiated" in entry for entry in entries)


@pytest.mark.localstack
def test_pending_uploads_beyond_one_default_page(localstack_backend: Backend) -> None:
    """More than 1000 uploads: LocalStack (like S3) truncates at 1000; the checker follows the markers."""
    client = localstack_backend.client
    bucket = localstack_backend.new_bucket()

    def create(i: int) -> tuple[str, str]:
        key = f"t/part-{i:05d}"
        return key, client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

    with ThreadPoolExecutor(8) as pool:
        expected = set(pool.map(create, range(1100)))
    assert client.list_multipart_uploads(Bucket=bucket)["IsTruncated"] is True
    found = pending_uploads(client, bucket)
    assert len(found) == 1100 and set(found) == expected


def test_embedded_server_standalone() -> None:
    with EmbeddedS3Server() as server:
        assert server.endpoint_url.startswith("http://127.0.0.1:")
        options = server.options()
        assert (options.endpoint_url, options.region, options.access_key_id) == (server.endpoint_url, "us-east-1", "test")
        client = raw_s3_client(server.endpoint_url)
        client.create_bucket(Bucket="embedded-standalone")
        client.put_object(Bucket="embedded-standalone", Key="k", Body=b"v")
        assert read_object(client, "embedded-standalone", "k") == b"v"
        client.delete_object(Bucket="embedded-standalone", Key="k")
        client.delete_bucket(Bucket="embedded-standalone")
        port = server.port
    assert not server.running
    with pytest.raises(RuntimeError):
        server.endpoint_url  # noqa: B018
    with socket.socket() as sock:  # the port was released (SO_REUSEADDR: closed connections linger in TIME_WAIT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


@pytest.mark.localstack
@pytest.mark.slow
@pytest.mark.long  # the harness itself, not mpcommit: a second LocalStack start (about 12 s)
def test_second_localstack_instance_is_independent(localstack_backend: Backend) -> None:
    """A second LocalStack beside the session's one: separate state, even for a bucket of the same name."""
    bucket = localstack_backend.new_bucket()
    localstack_backend.client.put_object(Bucket=bucket, Key="k", Body=b"first")
    with start_localstack() as second:
        assert second.endpoint_url != localstack_backend.endpoint_url
        client = raw_s3_client(second.endpoint_url)
        assert all(b["Name"] != bucket for b in client.list_buckets()["Buckets"])
        client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key="k", Body=b"second" * (200 * 1024))  # spooled to disk
        client.delete_object(Bucket=bucket, Key="k")
        client.delete_bucket(Bucket=bucket)
    # Deleting the bucket there removed nothing here; a large write here still works.
    assert read_object(localstack_backend.client, bucket, "k") == b"first"
    localstack_backend.client.put_object(Bucket=bucket, Key="big", Body=b"x" * (2 * MiB))
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", second.port), timeout=2).close()


@pytest.mark.localstack
def test_localstack_start_on_a_taken_port_leaves_no_state_folder() -> None:
    """start.sh refuses a port another process holds, and leaves no empty localstack/state/PORT behind."""
    import subprocess
    from pathlib import Path

    from tests.support.backends import selected_backends

    if "localstack" not in selected_backends():
        pytest.skip("LocalStack is not among MPCOMMIT_TEST_BACKENDS")

    root = Path(__file__).resolve().parents[1]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        state = root / "localstack" / "state" / str(port)
        assert not state.exists()
        done = subprocess.run(["bash", str(root / "localstack" / "start.sh"), str(port)], capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"port {port} is already in use" in done.stderr
    assert not state.exists(), f"{state} was left behind: {sorted(p.name for p in state.iterdir())}"
