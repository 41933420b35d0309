"""The S3-like network's cost and throttling rules (tests/support/s3_network.py), without a proxy or a server: what a
request costs in latency, which partition it counts against, and when the rate limit answers 503."""

import pytest

from tests.support.s3_network import (
    LEGACY_2026_11,
    PROFILES,
    S3_COLD,
    S3_LIKE,
    S3_TAIL,
    SOURCES,
    NetworkProfile,
    ThrottleRule,
    TokenBuckets,
    delete_keys,
    partition_of,
    request_tokens,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _delete_body(keys: list[str]) -> bytes:
    objects = "".join(f"<Object><Key>{k}</Key></Object>" for k in keys)
    return f'<?xml version="1.0"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{objects}<Quiet>true</Quiet></Delete>'.encode()


def test_delete_objects_costs_a_base_plus_one_millisecond_per_key():
    assert S3_LIKE.latency_for("DeleteObjects", keys=1) == pytest.approx(0.041)
    assert S3_LIKE.latency_for("DeleteObjects", keys=250) == pytest.approx(0.290)  # one S3A page
    assert S3_LIKE.latency_for("DeleteObjects", keys=1000) == pytest.approx(1.040)
    # keys only count for the operations that name a per-key cost
    assert S3_LIKE.latency_for("PutObject", keys=1000) == 0.030
    # the 2026-11 profile charged every page alike, which BENCHMARKS.md's history was measured with
    assert LEGACY_2026_11.latency_for("DeleteObjects", keys=1) == LEGACY_2026_11.latency_for("DeleteObjects", keys=1000) == 0.300


def test_the_other_latencies_are_unchanged_and_every_profile_survives_json():
    assert S3_LIKE.latency_for("HeadObject") == 0.030
    assert S3_LIKE.latency_for("CompleteMultipartUpload") == 0.080
    assert S3_LIKE.latency_for("CopyObject", 8_000_000) == pytest.approx(1.050)
    for profile in PROFILES.values():
        assert NetworkProfile.from_json(profile.to_json()) == profile
    assert S3_COLD.throttle is not None and S3_COLD.throttle.partition_depth == 0
    assert "503 SlowDown beyond 3,500 writes/s" in S3_LIKE.describe() and "1 ms per key" in S3_LIKE.describe()


def test_a_tail_draws_latencies_from_a_lognormal_through_the_median_and_p99():
    assert S3_TAIL.latency_for("HeadObject", draw=0.5) == pytest.approx(0.030)
    assert S3_TAIL.latency_for("HeadObject", draw=0.99) == pytest.approx(0.300)
    assert S3_TAIL.latency_for("CompleteMultipartUpload", draw=0.5) == pytest.approx(0.080)
    assert S3_TAIL.latency_for("CompleteMultipartUpload", draw=0.99) == pytest.approx(0.800)
    # without a draw, or without a tail, the median every time (the floor the other profiles keep)
    assert S3_TAIL.latency_for("HeadObject") == S3_LIKE.latency_for("HeadObject", draw=0.99) == 0.030
    # the copy's and the keys' terms are not drawn
    assert S3_TAIL.latency_for("CopyObject", 8_000_000, draw=0.99) == pytest.approx(0.500 + 1.0)
    assert S3_TAIL.latency_for("DeleteObjects", keys=100, draw=0.5) == pytest.approx(0.040 + 0.100)
    # the mean is above the median by exp(sigma^2 / 2): what a run's time per complete is judged against
    assert 1.5 < S3_TAIL.mean_latency("CompleteMultipartUpload") / 0.080 < 1.8
    assert S3_LIKE.mean_latency("CompleteMultipartUpload") == 0.080
    assert "p99 CompleteMultipartUpload 800 ms" in S3_TAIL.describe()


def test_every_parameter_names_its_source_and_assumptions_say_so():
    names = [name for name, _value, _source in SOURCES]
    for needed in ("DeleteObjects", "write rate per partitioned prefix", "read rate per partitioned prefix", "burst"):
        assert any(needed in n for n in names), needed
    for _name, value, source in SOURCES:
        assert value and len(source) > 40
    assumptions = {n for n, _v, src in SOURCES if "**Assumption**" in src or "**assumption**" in src}
    assert "DeleteObjects" in assumptions and "burst" in assumptions
    assert any(n.startswith("latency tail") for n in assumptions), "the tail's p99s are an assumption, said so"


def test_partitions_are_directories_or_the_whole_bucket_when_cold():
    assert partition_of("b", "t/dt=1/part-0.parquet", None) == "b/t/dt=1"
    assert partition_of("b", "t/dt=1/part-0.parquet", 0) == "b"
    assert partition_of("b", "t/dt=1/part-0.parquet", 1) == "b/t"
    assert partition_of("b", "_SUCCESS", None) == "b"


def test_a_delete_draws_one_write_token_per_key_on_each_key_s_partition():
    rule = ThrottleRule()
    body = _delete_body(["t/a=1/x", "t/a=1/y", "t/a=2/z", "t/&amp;/w"])
    assert delete_keys(body) == ["t/a=1/x", "t/a=1/y", "t/a=2/z", "t/&/w"]
    kind, tokens = request_tokens("POST", "DeleteObjects", "/b", {"delete": ""}, rule, body)
    assert kind == "write" and tokens == {"b/t/a=1": 2, "b/t/a=2": 1, "b/t/&": 1}
    kind, tokens = request_tokens("HEAD", "HeadObject", "/b/t/a=1/x", {}, rule)
    assert kind == "read" and tokens == {"b/t/a=1": 1}
    kind, tokens = request_tokens("GET", "ListObjectsV2", "/b", {"list-type": "2", "prefix": "t/a=2/"}, rule)
    assert kind == "read" and tokens == {"b/t/a=2": 1}
    kind, tokens = request_tokens("POST", "CompleteMultipartUpload", "/b/t/a=1/x", {"uploadId": "u"}, ThrottleRule(partition_depth=0))
    assert kind == "write" and tokens == {"b": 1}


def test_a_partition_admits_its_burst_then_its_rate_and_refuses_without_charging():
    clock = Clock()
    buckets = TokenBuckets(ThrottleRule(write_rate=100, read_rate=200, burst_seconds=1.0), clock)
    admitted = sum(buckets.admit("write", {"b/p": 1}) for _ in range(150))
    assert admitted == 100  # the burst: one second of the rate
    assert buckets.admit("read", {"b/p": 1})  # reads draw from their own bucket
    assert buckets.admit("write", {"b/q": 1})  # and every partition has its own
    clock.now += 0.5
    assert sum(buckets.admit("write", {"b/p": 1}) for _ in range(80)) == 50  # half a second of refill
    clock.now += 10
    assert sum(buckets.admit("write", {"b/p": 1}) for _ in range(150)) == 100  # never more than the burst


def test_a_multi_partition_request_is_all_or_nothing_and_a_huge_delete_waits_for_a_full_bucket():
    clock = Clock()
    buckets = TokenBuckets(ThrottleRule(write_rate=10, burst_seconds=1.0), clock)
    assert sum(buckets.admit("write", {"b/p": 1}) for _ in range(10)) == 10
    assert not buckets.admit("write", {"b/p": 1, "b/q": 1})
    assert buckets.admit("write", {"b/q": 10})  # q was not charged by the refused request
    clock.now += 1.0
    assert buckets.admit("write", {"b/p": 1000})  # more keys than a bucket holds: admitted when full ...
    clock.now += 1.0
    assert not buckets.admit("write", {"b/p": 1})  # ... and the partition is in debt for 99 s
    clock.now += 100.0
    assert buckets.admit("write", {"b/p": 1})


def test_cold_prefix_shares_one_rate_across_a_table_s_partitions():
    clock = Clock()
    warm = TokenBuckets(S3_LIKE.throttle, clock)  # type: ignore[arg-type]
    cold = TokenBuckets(S3_COLD.throttle, clock)  # type: ignore[arg-type]

    def completes(buckets: TokenBuckets, rule: ThrottleRule) -> int:
        n = 0
        for i in range(10_000):  # 10,000 completes in one instant over 10 partitions
            _kind, tokens = request_tokens("POST", "CompleteMultipartUpload", f"/b/t/dt={i % 10}/f{i}", {"uploadId": "u"}, rule)
            n += buckets.admit("write", tokens)
        return n

    assert completes(warm, S3_LIKE.throttle) == 10_000  # type: ignore[arg-type]
    assert completes(cold, S3_COLD.throttle) == 3_500  # type: ignore[arg-type]
