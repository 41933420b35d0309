"""The S3-like network (tests/support/s3_network.py): it shapes the operations it is told to, counts requests
and bytes per operation exactly, and passes every request through unchanged. Runs on moto; timing is only ever
checked as a lower bound (the proxy's floor guarantees it), never as an upper one."""

from __future__ import annotations

import io
import time
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.support.s3_network import NONE, S3_LIKE, NetworkProfile, S3Network, parse_rate, parse_seconds, per_file
from tests.support.backends import Backend, raw_s3_client

KiB = 1024
MiB = 1024 * KiB


@pytest.fixture(scope="module")
def network(_moto_backend_session: Backend) -> Any:
    with S3Network(_moto_backend_session.endpoint_url, NONE) as net:
        yield net


@pytest.fixture
def net(network: S3Network, _moto_backend_session: Backend) -> S3Network:
    network.set_profile(NONE)
    network.reset()
    return network


def _bucket(backend: Backend) -> str:
    return backend.new_bucket("netproxy")


def test_profile_latency_per_operation_and_copy_rate() -> None:
    assert S3_LIKE.latency_for("HeadObject") == 0.030
    assert S3_LIKE.latency_for("CompleteMultipartUpload") == 0.080
    assert S3_LIKE.latency_for("DeleteObjects") == 0.040 and S3_LIKE.latency_for("DeleteObjects", keys=10) == pytest.approx(0.050)
    assert S3_LIKE.latency_for("CopyObject", 8_000_000) == pytest.approx(0.050 + 1.0)
    assert S3_LIKE.latency_for("UploadPartCopy", 0) == 0.050
    assert NetworkProfile.from_json(S3_LIKE.to_json()) == S3_LIKE
    assert not NONE.shaped and S3_LIKE.shaped
    assert parse_seconds("80ms") == pytest.approx(0.08) and parse_seconds("0.5s") == 0.5
    assert parse_rate("85MB/s") == 85e6 and parse_rate("1Gbit/s") == 125e6 and parse_rate("none") is None
    with pytest.raises(ValueError):
        parse_rate("fast")


def test_counts_requests_bytes_and_server_side_copies(net: S3Network, _moto_backend_session: Backend) -> None:
    backend = _moto_backend_session
    bucket = _bucket(backend)
    c = raw_s3_client(net.endpoint_url)
    c.put_object(Bucket=bucket, Key="a", Body=b"x" * 1000)
    c.put_object(Bucket=bucket, Key="b", Body=b"y" * 3000)
    uid = c.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    p1 = c.upload_part(Bucket=bucket, Key="m", UploadId=uid, PartNumber=1, Body=b"z" * (5 * MiB))["ETag"]
    p2 = c.upload_part_copy(Bucket=bucket, Key="m", UploadId=uid, PartNumber=2, CopySource={"Bucket": bucket, "Key": "b"},
                            CopySourceRange="bytes=100-1099")["CopyPartResult"]["ETag"]
    c.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=uid,
                                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p1}, {"PartNumber": 2, "ETag": p2}]})
    c.copy_object(Bucket=bucket, Key="a2", CopySource={"Bucket": bucket, "Key": "a"})  # no range: sized by a HEAD
    assert c.get_object(Bucket=bucket, Key="m")["Body"].read() == b"z" * (5 * MiB) + b"y" * 1000
    c.head_object(Bucket=bucket, Key="a2")
    with pytest.raises(c.exceptions.ClientError):
        c.head_object(Bucket=bucket, Key="missing")
    c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in ("a", "a2", "b", "m")]})

    stats = net.stats()
    ops = stats["ops"]
    assert {op: v["requests"] for op, v in ops.items()} == {
        "PutObject": 2, "CreateMultipartUpload": 1, "UploadPart": 1, "UploadPartCopy": 1, "CompleteMultipartUpload": 1,
        "CopyObject": 1, "GetObject": 1, "HeadObject": 2, "DeleteObjects": 1}
    assert ops["PutObject"]["request_bytes"] == 4000
    assert ops["UploadPart"]["request_bytes"] == 5 * MiB
    assert ops["GetObject"]["response_bytes"] == 5 * MiB + 1000
    assert ops["UploadPartCopy"]["copied_bytes"] == 1000
    assert ops["CopyObject"]["copied_bytes"] == 1000 and ops["CopyObject"]["copies_unsized"] == 0
    assert ops["HeadObject"]["errors"] == 1
    assert stats["totals"]["copied_bytes"] == 2000
    assert all(v["latency_seconds"] == 0 for v in ops.values())  # NONE: nothing held
    assert per_file(stats, 2)["PutObject"] == 1.0 and per_file(stats, 2)["HeadObject"] == 1.0

    before = net.reset()
    assert before["totals"]["requests"] == 11
    assert net.stats()["totals"]["requests"] == 0


def test_holds_each_operation_for_its_own_latency(net: S3Network, _moto_backend_session: Backend) -> None:
    net.set_profile(NetworkProfile("test", default=0.0, latency={"CompleteMultipartUpload": 0.25, "HeadObject": 0.01}))
    bucket = _bucket(_moto_backend_session)
    c = raw_s3_client(net.endpoint_url)
    uid = c.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    etag = c.upload_part(Bucket=bucket, Key="k", UploadId=uid, PartNumber=1, Body=b"p")["ETag"]
    t0 = time.perf_counter()
    c.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert time.perf_counter() - t0 >= 0.25  # a floor the proxy guarantees
    for _ in range(3):
        c.head_object(Bucket=bucket, Key="k")
    ops = net.stats()["ops"]
    assert ops["CompleteMultipartUpload"]["latency_seconds"] == pytest.approx(0.25)
    assert ops["HeadObject"]["latency_seconds"] == pytest.approx(0.03)
    for op in ("CreateMultipartUpload", "UploadPart"):
        assert ops[op]["latency_seconds"] == 0 and ops[op]["held_seconds"] == 0


def test_caps_bandwidth_per_connection_each_way(net: S3Network, _moto_backend_session: Backend) -> None:
    bucket = _bucket(_moto_backend_session)
    c = raw_s3_client(net.endpoint_url)
    body = bytes(range(256)) * (8 * KiB)  # 2 MiB
    c.put_object(Bucket=bucket, Key="big", Body=body)
    rate = 10e6
    net.set_profile(NetworkProfile("slow", bandwidth=rate))
    floor = (len(body) - 2 * 256 * KiB) / rate  # the pacer lends at most two 256 KiB chunks of credit
    t0 = time.perf_counter()
    assert c.get_object(Bucket=bucket, Key="big")["Body"].read() == body
    assert time.perf_counter() - t0 >= floor
    t0 = time.perf_counter()
    c.put_object(Bucket=bucket, Key="big2", Body=body)
    assert time.perf_counter() - t0 >= floor


def test_streams_chunked_uploads_and_answers_expect_continue(net: S3Network, _moto_backend_session: Backend) -> None:
    """boto3's own defaults: flexible checksums send a non-seekable body aws-chunked with a trailer, and large
    bodies with ``Expect: 100-continue``; both must reach the server intact."""
    bucket = _bucket(_moto_backend_session)
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    c = session.client("s3", endpoint_url=net.endpoint_url, config=Config(s3={"addressing_style": "path"}))
    data = bytes(range(251)) * 40_000  # ~9.6 MiB: multipart in upload_fileobj, parts with 100-continue
    c.upload_fileobj(io.BufferedReader(io.BytesIO(data)), bucket, "chunked")  # type: ignore[arg-type]
    assert c.get_object(Bucket=bucket, Key="chunked")["Body"].read() == data
    c.put_object(Bucket=bucket, Key="small", Body=io.BytesIO(b"hello"))
    assert c.get_object(Bucket=bucket, Key="small")["Body"].read() == b"hello"
    assert net.stats()["proxy_errors"] == 0


def test_control_api_refuses_unknown_calls(net: S3Network) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(net.endpoint_url + "/__proxy/nothing", timeout=10)
    assert err.value.code == 404
    req = urllib.request.Request(net.endpoint_url + "/__proxy/profile", data=b"{not json", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    assert net.stats()["profile"]["name"] == "none"


def test_answers_slow_down_past_the_rate_without_reaching_the_server(net: S3Network, _moto_backend_session: Backend) -> None:
    from tests.support.s3_network import ThrottleRule

    bucket = _bucket(_moto_backend_session)
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    c = session.client("s3", endpoint_url=net.endpoint_url,  # no retries: every 503 is seen
                       config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
    c.put_object(Bucket=bucket, Key="t/keep", Body=b"k")
    net.set_profile(NetworkProfile("throttle", throttle=ThrottleRule(write_rate=4, read_rate=1000, burst_seconds=1.0)))
    codes = []
    for i in range(8):
        try:
            c.put_object(Bucket=bucket, Key=f"t/k{i}", Body=b"x")
            codes.append("ok")
        except c.exceptions.ClientError as exc:
            codes.append(exc.response["Error"]["Code"])
    assert codes[:4] == ["ok"] * 4 and set(codes[4:]) <= {"SlowDown", "ok"} and codes.count("SlowDown") >= 3
    # a large body announced with Expect: 100-continue is refused unread, and the next request still goes through
    with pytest.raises(c.exceptions.ClientError, match="SlowDown"):
        c.put_object(Bucket=bucket, Key="t/big", Body=b"y" * (2 * MiB))
    assert c.head_object(Bucket=bucket, Key="t/keep")["ContentLength"] == 1  # reads have their own rate
    ops = net.stats()["ops"]
    assert ops["PutObject"]["throttled"] == codes.count("SlowDown") + 1
    assert ops["PutObject"]["requests"] == 10 and ops["HeadObject"]["throttled"] == 0
    listed = {o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="t/")["Contents"]}
    assert "t/big" not in listed and len(listed) == 1 + codes.count("ok")  # refused writes never reached moto
    time.sleep(1.1)  # refill: a delete of 3 keys draws 3 tokens, and its keys are counted
    c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in sorted(listed)[:3]]})
    assert net.stats()["ops"]["DeleteObjects"]["keys"] == 3
