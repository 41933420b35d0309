"""The one proxy (tests/support/s3_network.py): it shapes the operations it is told to, counts requests and bytes
per operation exactly, injects the faults it is told to and no others, and passes every request through as its
client signed it (checked on every selected server; versitygw checks signatures). The rest runs on moto; timing is
only ever checked as a lower bound (the proxy's floor guarantees it), never as an upper one."""

from __future__ import annotations

import dataclasses
import io
import time
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from tests.support.s3_network import (
    NONE,
    S3_LIKE,
    TRANSIENT,
    Fault,
    FaultDecider,
    FaultPlan,
    FaultRule,
    MatchRule,
    NetworkProfile,
    S3Network,
    lateness,
    parse_rate,
    parse_seconds,
    per_file,
    request_signature,
)
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


def test_a_tail_varies_each_answers_wait_around_the_median(net: S3Network, _moto_backend_session: Backend) -> None:
    net.set_profile(NetworkProfile("tail", default=0.005, tail={"default": 0.100}))
    bucket = _bucket(_moto_backend_session)
    c = raw_s3_client(net.endpoint_url)
    c.put_object(Bucket=bucket, Key="k", Body=b"x")
    net.reset()
    waits = []
    for _ in range(40):
        t0 = time.perf_counter()
        c.head_object(Bucket=bucket, Key="k")
        waits.append(time.perf_counter() - t0)
    total = net.stats()["ops"]["HeadObject"]["latency_seconds"]
    assert total != pytest.approx(40 * 0.005, rel=0.05), "drawn, not the median every time"
    assert max(waits) > 0.015, "some answers wait several times the median"


def test_runs_reset_with_one_seed_draw_each_operations_latencies_alike(net: S3Network,
                                                                       _moto_backend_session: Backend) -> None:
    # Common random numbers: the n-th HEAD waits the same whatever came before it, so that two committers compared
    # in one round differ by what they do, not by which of them drew the tail's rare long answers.
    net.set_profile(NetworkProfile("tail", default=0.002, tail={"default": 0.020}))
    bucket = _bucket(_moto_backend_session)
    c = raw_s3_client(net.endpoint_url)
    c.put_object(Bucket=bucket, Key="k", Body=b"x")

    def heads(seed: int, puts_before: int) -> float:
        net.reset(seed=seed)
        for i in range(puts_before):
            c.put_object(Bucket=bucket, Key=f"p{i}", Body=b"y")
        for _ in range(12):
            c.head_object(Bucket=bucket, Key="k")
        return net.stats()["ops"]["HeadObject"]["latency_seconds"]

    first = heads(5, puts_before=0)
    assert heads(5, puts_before=4) == first, "other operations' requests do not shift a stream's draws"
    assert heads(6, puts_before=0) != first, "another seed, other draws"
    net.reset()
    for _ in range(12):
        c.head_object(Bucket=bucket, Key="k")
    assert net.stats()["ops"]["HeadObject"]["latency_seconds"] != first, "without a seed the draws go on"


def test_an_answer_past_its_draw_is_late_only_when_the_server_was_slower_than_the_median() -> None:
    # No tail: the draw is the median, so any answer past it is late (the floor's gate, unchanged).
    assert lateness(took=0.031, drawn=0.030, median=0.030) == "late"
    assert lateness(took=0.030, drawn=0.030, median=0.030) == "late"
    # A tail's low draw (4 ms) under a server that took 6 ms, well within the 30 ms median: clipped, not late.
    assert lateness(took=0.006, drawn=0.004, median=0.030) == "clipped"
    # The same low draw under a server that took 45 ms: slower than the median, it set the pace.
    assert lateness(took=0.045, drawn=0.004, median=0.030) == "late"
    with pytest.raises(AssertionError):
        lateness(took=0.003, drawn=0.004, median=0.030)  # held by the proxy: never judged


def test_late_and_clipped_answers_are_counted_apart_with_their_overrun(net: S3Network,
                                                                      _moto_backend_session: Backend) -> None:
    bucket = _bucket(_moto_backend_session)
    c = raw_s3_client(net.endpoint_url)
    c.put_object(Bucket=bucket, Key="k", Body=b"x")
    # A median far under any server's own time: every answer past its draw is late, none clipped.
    net.set_profile(NetworkProfile("fast-tail", default=1e-6, tail={"default": 1e-5}))
    net.reset()
    for _ in range(20):
        c.head_object(Bucket=bucket, Key="k")
    head = net.stats()["ops"]["HeadObject"]
    assert head["late"] == 20 and head["clipped"] == 0
    assert head["late_seconds"] > 0 and head["clipped_seconds"] == 0
    # The floor, no tail, under the server's time: every answer late too, and nothing can be clipped.
    net.set_profile(NetworkProfile("floor", default=1e-6))
    net.reset()
    for _ in range(10):
        c.head_object(Bucket=bucket, Key="k")
    totals = net.stats()["totals"]
    assert totals["late"] == 10 and totals["clipped"] == 0 and totals["late_seconds"] > 0


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


def test_caps_the_client_hosts_link_across_connections(net: S3Network, _moto_backend_session: Backend) -> None:
    """Two connections at once share the host's cap: 2 x 2 MiB at 10 MB/s for the host take twice what one takes."""
    from concurrent.futures import ThreadPoolExecutor

    bucket = _bucket(_moto_backend_session)
    body = bytes(range(256)) * (8 * KiB)  # 2 MiB
    clients = [raw_s3_client(net.endpoint_url) for _ in range(2)]
    rate = 10e6
    net.set_profile(NetworkProfile("host", host_bandwidth=rate))
    floor = (2 * len(body) - 4 * 256 * KiB) / rate  # both directions' pacers lend two chunks each at most
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda ic: ic[1].put_object(Bucket=bucket, Key=f"h{ic[0]}", Body=body), enumerate(clients)))
    assert time.perf_counter() - t0 >= floor
    assert "10 MB/s" not in NetworkProfile("host", host_bandwidth=rate).describe()  # said in Gb/s
    assert "0.08 Gb/s for the client host" in NetworkProfile("host", host_bandwidth=rate).describe()


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


# ---------------------------------------------------------------- faults
def _no_retries(endpoint_url: str) -> Any:
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    return session.client("s3", endpoint_url=endpoint_url,
                          config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))


def _code(call: Any) -> str:
    try:
        call()
    except botocore.exceptions.ClientError as exc:
        return str(exc.response["Error"]["Code"])
    except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError):
        return "connection lost"
    return "ok"


def test_fault_decisions_are_a_function_of_seed_request_and_occurrence() -> None:
    plan = FaultPlan(default=FaultRule(0.5), seed=3)
    sig = request_signature("PUT", "/bucket-a/t/task-00001-a0-1f2e3d4c.json", {"x": "1", "uploadId": "u1"})
    assert sig == request_signature("PUT", "/bucket-b/t/task-00001-a0-99999999.json", {"x": "1", "uploadId": "u2"})
    one, two = FaultDecider(plan), FaultDecider(plan)
    first = [one.decide("PutObject", sig)[0] for _ in range(200)]
    assert first == [two.decide("PutObject", sig)[0] for _ in range(200)]  # the same run again
    assert 60 <= sum(f is not None for f in first) <= 140 and set(first) - {None} == set(TRANSIENT)
    other = FaultDecider(dataclasses.replace(plan, seed=4))
    assert first != [other.decide("PutObject", sig)[0] for _ in range(200)]
    assert one.faults["PutObject"].total() == sum(f is not None for f in first) == one.total


def test_fault_plans_are_bounded_and_name_real_request_classes() -> None:
    always = FaultDecider(FaultPlan(default=FaultRule(1.0, (Fault.SLOW_DOWN,)), max_consecutive=2, max_faults=5))
    decided = [always.decide("HeadObject", "HEAD k?")[0] for _ in range(9)]
    s = Fault.SLOW_DOWN
    assert decided == [s, s, None, s, s, None, s, None, None]  # at most two in a row, five in all
    assert always.total == 5
    never = FaultDecider(FaultPlan({"PutObject": FaultRule(1.0)}, default=None))
    assert never.decide("HeadObject", "HEAD k?") == (None, 0.0)
    spiky = FaultDecider(FaultPlan(spike_rate=1.0, spike_max=0.5))
    spikes = [spiky.decide("GetObject", f"GET k{i}?")[1] for i in range(20)]
    assert all(0.2 <= s <= 0.5 for s in spikes) and spiky.spikes == 20
    assert FaultPlan.from_json(FaultPlan({"UploadPart": FaultRule(0.3)}, seed=9).to_json()) == \
        FaultPlan({"UploadPart": FaultRule(0.3)}, seed=9)
    with pytest.raises(ValueError, match="UploadParts"):
        FaultPlan({"UploadParts": FaultRule(1.0)})


def test_faults_off_refuse_nothing_and_faults_on_refuse_by_class(net: S3Network, _moto_backend_session: Backend) -> None:
    bucket = _bucket(_moto_backend_session)
    c = _no_retries(net.endpoint_url)
    c.put_object(Bucket=bucket, Key="k", Body=b"x")
    codes = [_code(lambda: c.head_object(Bucket=bucket, Key="k")) for _ in range(10)]
    assert codes == ["ok"] * 10 and net.stats()["faults"]["faults"] == {}
    try:
        net.set_faults(FaultPlan({"HeadObject": FaultRule(1.0, (Fault.SLOW_DOWN,)),
                                  "GetObject": FaultRule(1.0, (Fault.INTERNAL_ERROR,)),
                                  "ListObjectsV2": FaultRule(1.0, (Fault.ACCESS_DENIED,)),
                                  "PutObject": FaultRule(1.0, (Fault.INVALID_ACCESS_KEY,))}))
        # A HEAD's refusal has no body: the connection stays usable for the next request.
        assert [_code(lambda: c.head_object(Bucket=bucket, Key="k")) for _ in range(3)] == ["503"] * 3
        assert _code(lambda: c.get_object(Bucket=bucket, Key="k")) == "InternalError"
        assert _code(lambda: c.list_objects_v2(Bucket=bucket)) == "AccessDenied"
        with pytest.raises(botocore.exceptions.ClientError) as info:
            c.put_object(Bucket=bucket, Key="k2", Body=b"y")
        assert info.value.response["Error"]["Code"] == "InvalidAccessKeyId"
        assert info.value.response["Error"]["AWSAccessKeyId"] == "test"  # echoed, as S3 does
        assert _code(lambda: c.delete_object(Bucket=bucket, Key="k")) == "ok"  # a class not named
        faulted = net.faulted()
        assert faulted["HeadObject"] == {Fault.SLOW_DOWN: 3} and faulted["DeleteObject"] == {}
        assert net.requests()["HeadObject"] == 13 and net.stats()["ops"]["HeadObject"]["errors"] == 3
    finally:
        net.set_faults(None)
    assert _code(lambda: c.head_object(Bucket=bucket, Key="k")) == "404"  # the delete went through
    assert "k2" not in {o["Key"] for o in c.list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_match_rules_pick_requests_by_key_and_time_window() -> None:
    now = [100.0]
    brownout = MatchRule(("PutObject",), key=r"/alive\.json$", start=1.0, end=3.0, fault=Fault.SLOW_DOWN)
    slow = MatchRule(("ListObjectsV2",), key=r"^t/(dt=[^/]*/)?$", delay=2.5)
    decider = FaultDecider(FaultPlan(matches=(brownout, slow)), clock=lambda: now[0])
    beat = "t/_temporary/mpcommit/j1/alive.json"
    assert decider.decide_request("PutObject", "PUT beat?", beat).fault is None  # before the window
    now[0] += 1.5
    # In the window, every time: a brownout is not bounded by max_consecutive.
    assert [decider.decide_request("PutObject", "PUT beat?", beat).fault for _ in range(5)] == [Fault.SLOW_DOWN] * 5
    assert decider.decide_request("PutObject", "PUT other?", "t/dt=0/part-1.txt").fault is None
    assert decider.decide_request("ListObjectsV2", "GET ?p", "t/dt=1/").delay == 2.5
    assert decider.decide_request("ListObjectsV2", "GET ?o", "t/_mpcommit/order/").delay == 0.0
    now[0] += 2.0
    assert decider.decide_request("PutObject", "PUT beat?", beat).fault is None  # after it
    assert decider.faults["PutObject"][Fault.SLOW_DOWN] == 5
    # A window that counts from a request of its own: nothing before it, then as if the plan began there.
    late = FaultDecider(FaultPlan(matches=(dataclasses.replace(brownout, trigger=r"^PutObject .*/finishing\.json$"),)),
                        clock=lambda: now[0])
    assert late.decide_request("PutObject", "PUT beat?", beat).fault is None
    late.decide_request("PutObject", "PUT turn?", "t/_temporary/mpcommit/j1/finishing.json")
    now[0] += 1.5
    assert late.decide_request("PutObject", "PUT beat?", beat).fault is Fault.SLOW_DOWN
    now[0] += 2.0
    assert late.decide_request("PutObject", "PUT beat?", beat).fault is None
    plan = FaultPlan(matches=(brownout, MatchRule(strip_conditions=True)), seed=2)
    assert FaultPlan.from_json(plan.to_json()) == plan
    assert FaultDecider(plan).decide_request("PutObject", "PUT k?", "k").strip_conditions
    with pytest.raises(ValueError, match="Puts"):
        MatchRule(("Puts",))


def test_a_store_that_ignores_conditions_and_a_slow_listing(net: S3Network, _moto_backend_session: Backend) -> None:
    bucket = _bucket(_moto_backend_session)
    c = _no_retries(net.endpoint_url)
    c.put_object(Bucket=bucket, Key="k", Body=b"first")
    with pytest.raises(botocore.exceptions.ClientError):
        c.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    try:
        net.set_faults(FaultPlan(matches=(MatchRule(strip_conditions=True),
                                          MatchRule(("ListObjectsV2",), key="^slow/", delay=0.6))))
        c.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")  # written anyway
        t0 = time.monotonic()
        c.list_objects_v2(Bucket=bucket, Prefix="slow/")
        assert time.monotonic() - t0 >= 0.6
        t0 = time.monotonic()
        c.list_objects_v2(Bucket=bucket, Prefix="fast/")
        assert time.monotonic() - t0 < 0.5
        assert net.stats()["faults"]["stripped"] == 3
    finally:
        net.set_faults(None)
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"second"


def test_dropped_connections_before_and_after_the_server(net: S3Network, _moto_backend_session: Backend) -> None:
    bucket = _bucket(_moto_backend_session)
    c = _no_retries(net.endpoint_url)
    try:
        net.set_faults(FaultPlan({"PutObject": FaultRule(1.0, (Fault.DROP,))}))
        assert _code(lambda: c.put_object(Bucket=bucket, Key="before", Body=b"x")) == "connection lost"
        net.set_faults(FaultPlan({"PutObject": FaultRule(1.0, (Fault.DROP_AFTER,))}))
        assert _code(lambda: c.put_object(Bucket=bucket, Key="after", Body=b"y")) == "connection lost"
        assert net.faulted()["PutObject"] == {Fault.DROP: 1, Fault.DROP_AFTER: 1}
    finally:
        net.set_faults(None)
    listed = {o["Key"] for o in c.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert listed == {"after"}  # applied, though its answer was lost


def test_records_headers_only_when_asked(net: S3Network, _moto_backend_session: Backend) -> None:
    with pytest.raises(RuntimeError, match="record_headers"):
        net.headers()
    with S3Network(_moto_backend_session.endpoint_url, NONE, record_headers=True) as recording:
        c = raw_s3_client(recording.endpoint_url)
        c.put_object(Bucket=_bucket(_moto_backend_session), Key="k", Body=b"x", ServerSideEncryption="AES256")
        seen = recording.headers()
    assert [cls for cls, _h in seen] == ["PutObject"]
    assert seen[0][1]["x-amz-server-side-encryption"] == "AES256" and "authorization" in seen[0][1]


def test_the_trail_names_every_request_that_changes_the_store_and_no_read(_moto_backend_session: Backend,
                                                                           tmp_path: Any) -> None:
    import json

    trail = tmp_path / "trail.jsonl"
    with S3Network(_moto_backend_session.endpoint_url, NONE, trail=str(trail)) as traced:
        c = raw_s3_client(traced.endpoint_url)
        bucket = _bucket(_moto_backend_session)
        c.put_object(Bucket=bucket, Key="t/a", Body=b"x")
        c.get_object(Bucket=bucket, Key="t/a")
        c.copy_object(Bucket=bucket, Key="t/b", CopySource={"Bucket": bucket, "Key": "t/a"})
        c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "t/a"}, {"Key": "t/b"}]})
    entries = [json.loads(line) for line in trail.read_text().splitlines()]
    assert [e["op"] for e in entries] == ["PutObject", "CopyObject", "DeleteObjects"]
    assert entries[1]["src"].endswith("/t/a") and entries[2]["keys"] == ["t/a", "t/b"]
    assert all(e["status"] == 200 for e in entries)


# ---------------------------------------------------------------- signatures
def test_servers_that_check_signatures_accept_what_went_through(backend: Backend) -> None:
    """The proxy forwards each request as its client signed it, so that every server accepts it -- versitygw
    checks SigV4 (a changed Host, path, query or signed header is SignatureDoesNotMatch); faults off, nothing is
    refused."""
    bucket = backend.new_bucket("netproxy")
    with S3Network(backend.endpoint_url, NONE) as proxy:
        c = raw_s3_client(proxy.endpoint_url)
        c.head_bucket(Bucket=bucket)
        c.put_object(Bucket=bucket, Key="dir/a key+with=odd&chars", Body=b"x" * 100, Metadata={"m": "v"})
        assert c.head_object(Bucket=bucket, Key="dir/a key+with=odd&chars")["ContentLength"] == 100
        keys = [o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="dir/", MaxKeys=5)["Contents"]]
        assert keys == ["dir/a key+with=odd&chars"]
        uid = c.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
        etag = c.upload_part(Bucket=bucket, Key="m", UploadId=uid, PartNumber=1, Body=b"p" * (5 * MiB))["ETag"]
        c.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=uid,
                                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "m"}]})
        stats = proxy.stats()
    assert stats["totals"]["errors"] == 0 and stats["proxy_errors"] == 0 and stats["faults"]["faults"] == {}


def test_versitygw_refuses_a_request_whose_signed_host_was_changed(versitygw_backend: Backend) -> None:
    """What the test above rests on: versitygw checks the Host the client signed. The same signed request sent
    through the proxy is accepted as signed and refused with the Host an in-between rewrote to the server's."""
    import http.client

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    backend = versitygw_backend
    bucket = backend.new_bucket("netproxy")
    with S3Network(backend.endpoint_url, NONE) as proxy:
        request = AWSRequest(method="HEAD", url=f"{proxy.endpoint_url}/{bucket}")
        S3SigV4Auth(Credentials("test", "test"), "s3", "us-east-1").add_auth(request)
        port = int(proxy.endpoint_url.rsplit(":", 1)[1])
        statuses = []
        for host in (f"127.0.0.1:{port}", backend.endpoint_url.split("//", 1)[1]):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.putrequest("HEAD", f"/{bucket}", skip_host=True, skip_accept_encoding=True)
            for name, value in request.headers.items():
                conn.putheader(name, host if name.lower() == "host" else value)
            if "host" not in {name.lower() for name in request.headers}:
                conn.putheader("Host", host)
            conn.endheaders()
            statuses.append(conn.getresponse().status)
            conn.close()
    assert statuses == [200, 403]
