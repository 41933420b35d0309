"""The one HTTP proxy the tests and benchmarks put in front of an S3 server: an S3-like network, and faults.

It lives in tests/support, the one library of test infrastructure; bench/ imports it from here (tests never import
bench). The proxy runs in a process of its own (an asyncio event loop, one upstream connection per client
connection), so its CPU shows up apart from the client's and the server's (``S3Network.cpu_seconds()``);
BENCHMARKS.md states what it costs on raw throughput. It forwards each request
as the client sent it -- method, path and query exactly as received, every header as it came, the Host header
included, the body byte for byte -- so that a server that checks SigV4 signatures (versitygw) accepts what passed
through it: the client signs the host it connects to (the proxy's ``127.0.0.1:port``), and that Host header is what
the server sees. One header is taken out: ``Expect: 100-continue``, which the proxy answers itself (no SigV4 signer
signs it: botocore, the CRT and the AWS SDKs leave it out). Every request is classified by its S3 operation
(:func:`classify`: ``UploadPart``, ``CompleteMultipartUpload``, ``ListObjectsV2``, ...), and then:

**The S3-like network** (a :class:`NetworkProfile`; :data:`NONE` forwards and counts only). A loopback server
answers in microseconds; S3 answers in tens of milliseconds, and that changes which design wins (parts in flight,
commit threads). ``tc netem`` on a veth pair would be the other way to get there, but this machine's kernel has no
netem qdisc (``CONFIG_NET_SCH_NETEM`` is not set; only tbf and htb are built in), and netem delays packets, not S3
operations: it cannot give CompleteMultipartUpload 80 ms and a HEAD 30 ms. Shaping, per request:

- the answer's first byte leaves no earlier than ``latency(operation)`` after the request's last byte arrived
  (a floor, not an addition: the local server's own time counts only where it is longer; such answers are
  counted as ``late``). With a tail (profile ``s3-tail``) that latency is drawn per request from a lognormal
  through the operation's median and p99, instead of being the median every time. Server-side copies take ``latency + bytes copied / copy_rate``; a multi-key request
  (DeleteObjects) takes ``latency + keys x per_key``;
- request and response bodies move at most at ``bandwidth`` bytes/s per connection, each way;
- with a :class:`ThrottleRule`, requests beyond a partition's rate are answered ``503 SlowDown`` by the proxy,
  never reaching the server, as S3 answers them before doing anything: writes (PUT, POST, DELETE, and one per
  key of a DeleteObjects) and reads (GET, HEAD) each draw from a token bucket per partitioned prefix.

Every parameter of the profiles below, and where its figure comes from, is in :data:`SOURCES` (BENCHMARKS.md
prints that table from it).

**Faults** (a :class:`FaultPlan`, none by default): at the rate its :class:`FaultRule` sets for the request's
class, a request is answered with a :class:`Fault` instead of being forwarded -- ``SLOW_DOWN`` (503),
``INTERNAL_ERROR`` (500), ``INVALID_ACCESS_KEY`` and ``ACCESS_DENIED`` (403, as S3 answers unknown credentials and
a missing permission), ``DROP`` (the connection closed before the request reaches the server) -- or ``DROP_AFTER``:
forwarded and applied, then the connection closed without an answer (the client cannot tell whether its request
took effect). Decisions are deterministic for a seed: whether the n-th occurrence of a request is faulted is a hash
of the seed, the request (method, key, query without the random upload id) and n -- not of the order in which
threads happen to send requests. A plan is bounded (``max_faults`` in all, at most ``max_consecutive`` faults in a
row for one request) and may also delay a share of requests by a latency spike (``spike_rate``). A faulted
answer leaves after the profile's round trip, as a throttled one does.

Counting, per operation: requests, request and response body bytes, bytes copied server-side (the copy-source
range, or an unsigned HEAD of the copy source when the request names no range), error answers, late answers,
throttled requests, and the faults injected by kind. With ``record_headers`` the proxy also keeps every request's
headers, so that a test can see what the client really sent (encryption and bucket-owner headers). All of it is
served under ``/__proxy/`` (no bucket can be named so: bucket names have no underscores):

    GET /__proxy/stats      the counters (JSON)           POST /__proxy/reset     zero them; answers the old ones
                                                          (``?seed=N``: the tail's draws start again from N)
    GET /__proxy/profile    the shaping in force          PUT  /__proxy/profile   replace it (JSON body)
    GET /__proxy/faults     the fault plan in force       PUT  /__proxy/faults    replace it (JSON body, or null)
    GET /__proxy/headers    the requests' headers, when recorded

and the counters are written to ``--stats-file`` when the proxy stops. Run it by hand with::

    python -m tests.support.s3_network --upstream http://127.0.0.1:4566 --profile s3 [--port 0] [--stats-file f.json]

or from Python with :class:`S3Network`: ``with S3Network(upstream, S3_LIKE) as net: net.endpoint_url`` for the
network, ``S3Network(upstream, NONE, faults=FaultPlan(default=FaultRule(0.2), seed=7))`` for faults alone.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import enum
import hashlib
import html
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlsplit

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # run as a script or as a subprocess from elsewhere
    sys.path.insert(0, str(REPO_ROOT))

__all__ = ["LEGACY_2026_11", "NONE", "REQUEST_CLASSES", "S3_COLD", "S3_LIKE", "S3_TAIL", "SOURCES", "TRANSIENT", "Fault",
           "Decision", "FaultDecider", "FaultPlan", "FaultRule", "MatchRule", "NetworkProfile", "S3Network",
           "ThrottleRule", "TokenBuckets",
           "classify", "delete_keys", "parse_rate", "parse_seconds", "partition_of", "per_file", "request_signature",
           "request_tokens"]

CONTROL_PREFIX = "/__proxy/"
CHUNK = 256 * 1024
COPY_OPERATIONS = ("CopyObject", "UploadPartCopy")


# ---------------------------------------------------------------- the classifier
REQUEST_CLASSES = (
    "HeadBucket", "HeadObject", "GetObject", "ListObjectsV2", "ListObjects", "ListMultipartUploads", "ListParts",
    "PutObject", "CopyObject", "CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload",
    "AbortMultipartUpload", "DeleteObject", "DeleteObjects", "CreateBucket", "DeleteBucket", "BucketConfig", "Other",
)


def classify(method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    """The S3 operation of a path-style request (one of :data:`REQUEST_CLASSES`)."""
    segments = path.lstrip("/").split("/", 1)
    has_key = len(segments) == 2 and segments[1] != ""
    copy = "x-amz-copy-source" in {h.lower() for h in headers}
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "GET":
        if "uploads" in query:
            return "ListMultipartUploads"
        if "uploadId" in query:
            return "ListParts"
        if has_key:
            return "GetObject"
        if query.get("list-type") == "2":
            return "ListObjectsV2"
        if set(query) - {"prefix", "marker", "delimiter", "max-keys", "encoding-type"}:
            return "BucketConfig"
        return "ListObjects"
    if method == "PUT":
        if "partNumber" in query and "uploadId" in query:
            return "UploadPartCopy" if copy else "UploadPart"
        if has_key:
            return "CopyObject" if copy else "PutObject"
        return "BucketConfig" if query else "CreateBucket"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        if "delete" in query:
            return "DeleteObjects"
    if method == "DELETE":
        if "uploadId" in query:
            return "AbortMultipartUpload"
        return "DeleteObject" if has_key else ("BucketConfig" if query else "DeleteBucket")
    return "Other"


# ---------------------------------------------------------------- the shaping
@dataclass(frozen=True)
class ThrottleRule:
    """S3's request-rate limit as the proxy applies it: a token bucket per partition and kind of request.

    ``write_rate`` and ``read_rate`` are requests per second per partition (S3: "at least 3,500
    PUT/COPY/POST/DELETE or 5,500 GET/HEAD requests per second per partitioned Amazon S3 prefix"); a bucket
    holds ``burst_seconds`` of its rate and starts full. ``partition_depth`` says which keys share a
    partition: ``None`` gives every "directory" (the key up to its last ``/``) its own, which is S3 once it has
    split a busy table's prefixes; ``0`` puts the whole bucket in one partition, which is a new (cold) bucket
    or prefix before S3 has split it; ``k`` the first ``k`` segments of the directory."""

    write_rate: float = 3500.0
    read_rate: float = 5500.0
    burst_seconds: float = 1.0
    partition_depth: int | None = None

    def rate(self, kind: str) -> float:
        return self.write_rate if kind == "write" else self.read_rate

    def to_json(self) -> dict[str, Any]:
        return {"write_rate": self.write_rate, "read_rate": self.read_rate, "burst_seconds": self.burst_seconds,
                "partition_depth": self.partition_depth}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ThrottleRule":
        depth = data.get("partition_depth")
        return cls(write_rate=float(data.get("write_rate", 3500.0)), read_rate=float(data.get("read_rate", 5500.0)),
                   burst_seconds=float(data.get("burst_seconds", 1.0)),
                   partition_depth=None if depth is None else int(depth))

    def describe(self) -> str:
        where = ("per directory prefix" if self.partition_depth is None else
                 "for the whole bucket (one cold partition)" if self.partition_depth == 0 else
                 f"per prefix of {self.partition_depth} path segment(s)")
        return (f"503 SlowDown beyond {self.write_rate:,.0f} writes/s and {self.read_rate:,.0f} reads/s {where} "
                f"(token buckets of {self.burst_seconds:g} s; each key of a DeleteObjects is a write)")


@dataclass(frozen=True)
class NetworkProfile:
    """Latency per S3 operation (seconds; ``default`` for the others), a per-connection bandwidth cap (bytes/s
    each way, ``None`` for none), the rate of server-side copies (bytes/s, added to a copy's latency), a
    per-key latency for multi-key requests (seconds per key, by operation) and an optional request-rate limit."""

    name: str
    default: float = 0.0
    latency: Mapping[str, float] = field(default_factory=dict)
    bandwidth: float | None = None
    copy_rate: float | None = None
    per_key: Mapping[str, float] = field(default_factory=dict)
    throttle: ThrottleRule | None = None
    #: A heavy tail (empty: none, every answer waits exactly its latency, a floor). The p99 of each operation's
    #: latency (``"default"`` for the others): the latencies above are then the medians of lognormal distributions
    #: through these p99s, and each answer waits a latency drawn from its operation's (:meth:`latency_for`).
    tail: Mapping[str, float] = field(default_factory=dict)
    #: The client host's own link (bytes/s, each way, all connections together; ``None``: none). Server-side copies
    #: move no bytes over it; a rewrite that downloads and uploads moves everything twice.
    host_bandwidth: float | None = None

    def spread(self, op: str) -> float:
        """The lognormal's sigma for ``op``: ln(p99 / p50) / z(0.99); 0 without a tail."""
        p99 = self.tail.get(op, self.tail.get("default"))
        median = self.latency.get(op, self.default)
        if not p99 or median <= 0 or p99 <= median:
            return 0.0
        return math.log(p99 / median) / Z99

    def mean_latency(self, op: str) -> float:
        """The expected latency of ``op`` (before copy and per-key terms): its median x exp(sigma^2 / 2) with a tail."""
        return self.latency.get(op, self.default) * math.exp(self.spread(op) ** 2 / 2)

    def latency_for(self, op: str, copied: int = 0, keys: int = 0, *, draw: float | None = None) -> float:
        """How long S3 takes to answer ``op``: its latency, plus ``copied / copy_rate`` for a server-side copy,
        plus ``keys x per_key`` for a multi-key request. With a tail, ``draw`` (uniform in (0, 1)) picks the latency
        from the operation's lognormal by its quantile (0.5: the median, 0.99: the p99); the copy and per-key terms
        stay as they are (a copy's time is its bytes')."""
        base = self.latency.get(op, self.default)
        sigma = self.spread(op) if draw is not None else 0.0
        if sigma:
            base *= math.exp(sigma * NormalDist().inv_cdf(min(max(draw, 1e-9), 1 - 1e-9)))  # type: ignore[arg-type]
        if op in COPY_OPERATIONS and self.copy_rate and copied:
            base += copied / self.copy_rate
        if keys and op in self.per_key:
            base += keys * self.per_key[op]
        return base

    @property
    def shaped(self) -> bool:
        return bool(self.default or any(self.latency.values()) or self.bandwidth or self.throttle
                    or self.host_bandwidth)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "default": self.default, "latency": dict(self.latency),
                "bandwidth": self.bandwidth, "copy_rate": self.copy_rate, "per_key": dict(self.per_key),
                "throttle": self.throttle.to_json() if self.throttle else None, "tail": dict(self.tail),
                "host_bandwidth": self.host_bandwidth}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "NetworkProfile":
        return cls(name=str(data.get("name", "custom")), default=float(data.get("default", 0.0)),
                   latency={str(k): float(v) for k, v in (data.get("latency") or {}).items()},
                   bandwidth=float(data["bandwidth"]) if data.get("bandwidth") else None,
                   copy_rate=float(data["copy_rate"]) if data.get("copy_rate") else None,
                   per_key={str(k): float(v) for k, v in (data.get("per_key") or {}).items()},
                   throttle=ThrottleRule.from_json(data["throttle"]) if data.get("throttle") else None,
                   tail={str(k): float(v) for k, v in (data.get("tail") or {}).items()},
                   host_bandwidth=float(data["host_bandwidth"]) if data.get("host_bandwidth") else None)

    def describe(self) -> str:
        if not self.shaped:
            return "no added latency, no bandwidth cap"
        parts = [f"{self.default * 1000:.0f} ms to first byte for every request"]
        special = []
        for op, s in sorted(self.latency.items(), key=lambda kv: -kv[1]):
            extra = f" + {self.per_key[op] * 1000:g} ms per key" if op in self.per_key else ""
            special.append(f"{op} {s * 1000:.0f} ms{extra}")
        if special:
            parts[0] += " except " + ", ".join(special)
        if self.tail:
            parts[0] = parts[0].replace(" to first byte", " median to first byte")
            tails = [f"{op if op != 'default' else 'the others'} {p99 * 1000:.0f} ms"
                     for op, p99 in sorted(self.tail.items(), key=lambda kv: -kv[1])]
            parts.append("lognormal tails, p99 " + ", ".join(tails))
        if self.copy_rate:
            parts.append(f"server-side copies also take size / {self.copy_rate / 1e6:.0f} MB/s")
        if self.bandwidth:
            parts.append(f"bodies at most {self.bandwidth / 1e6:.0f} MB/s per connection each way")
        if self.host_bandwidth:
            parts.append(f"at most {self.host_bandwidth * 8 / 1e9:g} Gb/s for the client host, each way")
        if self.throttle:
            parts.append(self.throttle.describe())
        return "; ".join(parts)


#: No shaping: the proxy only forwards and counts (used to measure its own cost).
NONE = NetworkProfile("none")

#: S3 in the same region as the client, with its request-rate limit per partitioned prefix. Every figure and its
#: source: :data:`SOURCES`. The latencies are the projection model's (bench/common.py) except DeleteObjects.
S3_LIKE = NetworkProfile(
    "s3",
    default=0.030,
    latency={"CompleteMultipartUpload": 0.080, "DeleteObjects": 0.040, "CopyObject": 0.050, "UploadPartCopy": 0.050},
    bandwidth=85e6,
    copy_rate=8e6,
    per_key={"DeleteObjects": 0.001},
    throttle=ThrottleRule(),
)

#: The same network with the whole bucket in one partition, as a new table's keys are until S3 splits them:
#: 3,500 writes/s for the whole job rather than per directory. The case where a commit meets 503s.
S3_COLD = dataclasses.replace(S3_LIKE, name="s3-cold", throttle=ThrottleRule(partition_depth=0))

#: The profile BENCHMARKS.md's history was measured with (until 2026-11-24): DeleteObjects a flat 300 ms
#: whatever its keys, no request-rate limit. Kept so that those figures can be reproduced, not for new ones.
LEGACY_2026_11 = NetworkProfile(
    "s3-2026-11",
    default=0.030,
    latency={"CompleteMultipartUpload": 0.080, "DeleteObjects": 0.300, "CopyObject": 0.050, "UploadPartCopy": 0.050},
    bandwidth=85e6,
    copy_rate=8e6,
)
#: The ``s3`` network with a heavy tail (issue 39): the same medians, each request's latency drawn from a lognormal
#: through a p99 of 10x its median. A fixed floor flatters a chain of requests made one after another (S3A's task
#: commit, a serial writer): every link waits exactly the median; here some links wait ten times as long.
S3_TAIL = dataclasses.replace(S3_LIKE, name="s3-tail", tail={"default": 0.300, "CompleteMultipartUpload": 0.800,
                                                             "DeleteObjects": 0.400, "CopyObject": 0.500,
                                                             "UploadPartCopy": 0.500})
PROFILES = {"none": NONE, "s3": S3_LIKE, "s3-cold": S3_COLD, "s3-tail": S3_TAIL, "s3-2026-11": LEGACY_2026_11}
#: The standard normal's 0.99 quantile: a lognormal's p99 is its median x exp(Z99 x sigma).
Z99 = NormalDist().inv_cdf(0.99)

_AWS_PERF = ("AWS, *Best practices design patterns: optimizing Amazon S3 performance* "
             "(docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html)")
_AWS_WHITEPAPER = ("AWS whitepaper *Best Practices Design Patterns: Optimizing Amazon S3 Performance* "
                   "(docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/)")
#: Every parameter of the ``s3`` and ``s3-cold`` profiles: (parameter, value, source). "Assumption" marks a
#: figure no public source gives; the benchmarks state it as such.
SOURCES: tuple[tuple[str, str, str], ...] = (
    ("latency of every request not named below (HEAD, GET, PUT, LIST page, DELETE, Create/Abort/UploadPart)",
     "30 ms to first byte",
     f"{_AWS_WHITEPAPER}, 'Timeouts and Retries for Latency-Sensitive Applications': small requests' \"median "
     "latencies are often in the tens of milliseconds\". 30 ms within that range is an **assumption** (the "
     "projection model's figure)."),
    ("CompleteMultipartUpload", "80 ms",
     "**Assumption** (issue 11's figure). AWS gives no typical figure; the API reference says only that "
     "processing \"could take several minutes\" for large uploads."),
    ("CopyObject, UploadPartCopy", "50 ms + size / 8 MB/s",
     "The rate is Apache Hadoop's \"measured in-S3 copy time of 6-10MB/s\" (*S3A Committers: Architecture and "
     "Implementation*, hadoop.apache.org, a 2017 measurement, not AWS's); the 50 ms is an **assumption**."),
    ("DeleteObjects", "40 ms + 1 ms per key",
     "**Assumption**, the outside check's figure (issue 25). AWS publishes no latency per key; what is "
     "documented is that S3 does per-key work: Hadoop's `BulkDelete` API (r3.5.0 javadoc) warns that \"each "
     "object listed in a bulk delete counts against the write IOPS limit\", which is why S3A pages its deletes "
     "by 250 (`fs.s3a.bulk.delete.page.size`). Replaces the flat 300 ms of the 2026-11 profile, which charged a "
     "1-key and a 1,000-key delete alike."),
    ("bandwidth per connection", "85 MB/s each way",
     f"{_AWS_WHITEPAPER}: \"Make one concurrent request for each 85-90 MB/s of desired network throughput\"."),
    ("write rate per partitioned prefix", "3,500 requests/s (PUT, COPY, POST, DELETE; each key of a DeleteObjects)",
     f"{_AWS_PERF}: \"at least 3,500 PUT/COPY/POST/DELETE or 5,500 GET/HEAD requests per second per partitioned "
     "Amazon S3 prefix\"; per key of a DeleteObjects: Hadoop's BulkDelete javadoc, above."),
    ("read rate per partitioned prefix", "5,500 requests/s (GET, HEAD, LIST)", f"{_AWS_PERF}, as above."),
    ("over the rate", "503 SlowDown, answered without reaching the server",
     "AWS Knowledge Center, *Why am I getting 503 Slow Down errors from Amazon S3 when the requests are within "
     "the supported request rate per prefix?* (repost.aws/knowledge-center/s3-503-within-request-rate-prefix): "
     "a fast spike in a prefix's request rate may get 503 Slow Down while S3 scales in the background. Hadoop's S3A docs (performance.md, 'Throttling'): a 503 "
     "\"is sent before any changes are made to the object store\"."),
    ("burst", "1 s of the rate, bucket full at the start",
     "**Assumption**: AWS documents rates, not a burst allowance."),
    ("partition (profile `s3`)", "each directory prefix (the key up to its last `/`)",
     f"{_AWS_PERF}: \"There are no limits to the number of prefixes in a bucket\"; the rate is per "
     "*partitioned* prefix, which a busy, long-lived table has."),
    ("copy rate, sensitivity (compaction)", "8, 25 and 50 MB/s per server-side copy request",
     "8 MB/s is the one published figure (Hadoop's, above: 6-10 MB/s measured in 2017); 25 and 50 MB/s are "
     "**assumptions** bracketing a faster S3 of today, which no public source measures. A compaction's verdict is "
     "read at each rate and judged at 8 MB/s, the rate a source supports."),
    ("client host's link (compaction sensitivity)", "10 Gb/s each way, all connections together",
     "AWS, *Amazon EC2 instance network bandwidth* (docs.aws.amazon.com/AWSEC2/latest/UserGuide/"
     "ec2-instance-network-bandwidth.html): \"an m5.8xlarge instance has 32 vCPUs and 10 Gbps network bandwidth\", "
     "for inbound and, simultaneously, outbound traffic; instances of 16 vCPUs or fewer have a lower baseline and "
     "burst \"up to\" theirs. Off by default (`host_bandwidth`): the benchmarks' other figures are per connection."),
    ("latency tail (profile `s3-tail`)",
     "lognormal per request class through the median above and a p99 of 10x it: 300 ms for the requests of 30 ms, "
     "800 ms for CompleteMultipartUpload, 400 ms for a DeleteObjects' base, 500 ms for a copy's base",
     "The shape: a measurement outside AWS (cloudsqale.com, *S3 Low Latency Writes - Using Aggressive Retries to "
     "Get Consistent Latency*, 2020: 10.2 million REST.PUT.PART requests, p25 48 ms, p50 80 ms, p95 880 ms, 0.26% "
     f"over 5 s) puts the p95 at 11x the median, a lognormal's shape (its p99 would be ~30x); {_AWS_WHITEPAPER}, "
     "'Timeouts and Retries for Latency-Sensitive Applications', advises retrying a small (< 512 KB) GET or PUT after "
     "2 s, which bounds the tail of small requests well below 2 s. A p99 of 10x the median, inside both, is an "
     "**assumption**; no public source gives S3's p99 per request class."),
    ("partition (profile `s3-cold`)", "the whole bucket",
     "AWS Knowledge Center, *How do I troubleshoot HTTP 5xx errors from Amazon S3?* (repost.aws/knowledge-center/"
     "http-5xx-errors-s3): a new prefix gets no additional request-rate resources of its own; S3 scales by "
     "the request pattern it sees. How long S3 takes to "
     "split is not documented (a comment on AWS's own article says 30-60 minutes: not an AWS statement); a job "
     "writing a new table is modelled as one partition throughout: an **assumption** at the cold end."),
)


def parse_seconds(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s)?\s*", text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (e.g. 30ms, 0.08s)")
    return float(m.group(1)) / (1000 if m.group(2) in (None, "ms") else 1)


def parse_rate(text: str) -> float | None:
    """``85MB/s``, ``10MiB/s``, ``1Gbit/s`` or ``none`` -> bytes per second."""
    if text.strip().lower() in ("", "none", "0"):
        return None
    m = re.fullmatch(r"\s*([0-9.]+)\s*(B|KB|MB|GB|KiB|MiB|GiB|kbit|Mbit|Gbit)/s\s*", text)
    if not m:
        raise ValueError(f"not a rate: {text!r} (e.g. 85MB/s, 1Gbit/s, none)")
    unit = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3,
            "kbit": 125, "Mbit": 125e3, "Gbit": 125e6}[m.group(2)]
    return float(m.group(1)) * unit


# ---------------------------------------------------------------- the faults (pure)
class Fault(enum.Enum):
    """What the proxy does to a request instead of answering it as the server did."""

    SLOW_DOWN = "503 SlowDown"
    INTERNAL_ERROR = "500 InternalError"
    DROP = "dropped before the server"
    DROP_AFTER = "dropped after the server applied it"
    INVALID_ACCESS_KEY = "403 InvalidAccessKeyId"
    ACCESS_DENIED = "403 AccessDenied"


#: The faults a client's retries should get through: throttling, internal errors, lost connections.
TRANSIENT = (Fault.SLOW_DOWN, Fault.INTERNAL_ERROR, Fault.DROP, Fault.DROP_AFTER)


@dataclass(frozen=True)
class FaultRule:
    """Fault ``rate`` (0..1) of the requests of one class, drawing the kind of fault from ``kinds``."""

    rate: float
    kinds: tuple[Fault, ...] = TRANSIENT

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0 or not self.kinds:
            raise ValueError("FaultRule needs 0 <= rate <= 1 and at least one kind")

    def to_json(self) -> dict[str, Any]:
        return {"rate": self.rate, "kinds": [k.name for k in self.kinds]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FaultRule":
        return cls(float(data["rate"]), tuple(Fault[k] for k in data["kinds"]))


@dataclass(frozen=True)
class MatchRule:
    """A rule for the requests whose class is in ``classes`` (empty: every class) and whose key -- for a listing,
    its ``prefix`` -- matches the regular expression ``key`` (searched; ``None``: any), from ``start`` to ``end``
    seconds after the plan took effect (``None``: from the start / for ever). A matching request is:

    - answered ``fault`` at ``rate`` (a refusal or a drop, as :class:`FaultRule` does; never counted against
      ``max_consecutive``, so that a brownout lasts as long as its window);
    - held ``delay`` seconds more before its answer leaves (the server answered already: a slow listing returns
      what the store held when it was asked);
    - forwarded without its ``If-None-Match`` and ``If-Match`` headers (``strip_conditions``: a store that ignores
      them, and writes anyway). The proxy forwards requests as signed, so this suits only servers that do not
      check signatures (moto, LocalStack).

    Several rules may match one request: the first with a fault decides the fault, delays add up. With
    ``trigger`` (a regular expression searched in ``"CLASS key"``, e.g. ``"^PutObject .*/finishing\\.json$"``) the
    window counts from the first request that matches it instead of from the plan's start (never, until one
    does): a brownout that begins when a process reaches a step of its own."""

    classes: tuple[str, ...] = ()
    key: str | None = None
    start: float | None = None
    end: float | None = None
    fault: Fault | None = None
    rate: float = 1.0
    delay: float = 0.0
    strip_conditions: bool = False
    trigger: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.classes) - set(REQUEST_CLASSES))
        if unknown:
            raise ValueError(f"no such request class: {', '.join(unknown)} (see REQUEST_CLASSES)")
        if not 0.0 <= self.rate <= 1.0 or self.delay < 0:
            raise ValueError("MatchRule needs 0 <= rate <= 1 and delay >= 0")
        if self.key is not None:
            re.compile(self.key)
        if self.trigger is not None:
            re.compile(self.trigger)

    def applies(self, request_class: str, key: str, elapsed: float | None) -> bool:
        """Whether the rule applies to this request ``elapsed`` seconds into its window's clock (``None``: its
        trigger has not fired)."""
        if elapsed is None:
            return False
        if self.classes and request_class not in self.classes:
            return False
        if self.start is not None and elapsed < self.start:
            return False
        if self.end is not None and elapsed >= self.end:
            return False
        return self.key is None or re.search(self.key, key) is not None

    def to_json(self) -> dict[str, Any]:
        return {"classes": list(self.classes), "key": self.key, "start": self.start, "end": self.end,
                "fault": self.fault.name if self.fault else None, "rate": self.rate, "delay": self.delay,
                "strip_conditions": self.strip_conditions, "trigger": self.trigger}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "MatchRule":
        return cls(classes=tuple(data.get("classes") or ()), key=data.get("key"), start=data.get("start"),
                   end=data.get("end"), fault=Fault[data["fault"]] if data.get("fault") else None,
                   rate=float(data.get("rate", 1.0)), delay=float(data.get("delay", 0.0)),
                   strip_conditions=bool(data.get("strip_conditions", False)), trigger=data.get("trigger"))


@dataclass(frozen=True)
class Decision:
    """What the proxy does to one request: a fault (``None``: forward it), a spike before anything else, a delay
    added to its answer, and whether its conditional headers are taken out."""

    fault: Fault | None = None
    spike: float = 0.0
    delay: float = 0.0
    strip_conditions: bool = False


@dataclass(frozen=True)
class FaultPlan:
    """Which requests the proxy faults: ``rules`` by request class (:data:`REQUEST_CLASSES`), ``default`` for the
    classes not named (``None``: no fault). Deterministic for a ``seed``; at most ``max_faults`` faults in all
    (``None``: no bound) and ``max_consecutive`` in a row for one request. Besides, ``spike_rate`` of all requests
    wait a latency spike of 0.2 s to ``spike_max`` seconds before anything else happens to them. ``matches``
    (:class:`MatchRule`) single out requests by key pattern and time window: a brownout of one key, a slow
    listing, a store that ignores conditional headers; they are asked before ``rules``."""

    rules: Mapping[str, FaultRule] = field(default_factory=dict)
    default: FaultRule | None = None
    seed: int = 0
    max_faults: int | None = 100_000
    max_consecutive: int | None = None
    spike_rate: float = 0.0
    spike_max: float = 1.5
    matches: tuple[MatchRule, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rules) - set(REQUEST_CLASSES))
        if unknown:
            raise ValueError(f"no such request class: {', '.join(unknown)} (see REQUEST_CLASSES)")
        if not 0.0 <= self.spike_rate <= 1.0 or self.spike_max < SPIKE_MIN:
            raise ValueError(f"FaultPlan needs 0 <= spike_rate <= 1 and spike_max >= {SPIKE_MIN}")

    def rule_for(self, request_class: str) -> FaultRule | None:
        return self.rules.get(request_class, self.default)

    def to_json(self) -> dict[str, Any]:
        return {"rules": {k: r.to_json() for k, r in self.rules.items()},
                "default": self.default.to_json() if self.default else None, "seed": self.seed,
                "max_faults": self.max_faults, "max_consecutive": self.max_consecutive,
                "spike_rate": self.spike_rate, "spike_max": self.spike_max,
                "matches": [m.to_json() for m in self.matches]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FaultPlan":
        return cls(rules={str(k): FaultRule.from_json(r) for k, r in (data.get("rules") or {}).items()},
                   default=FaultRule.from_json(data["default"]) if data.get("default") else None,
                   seed=int(data.get("seed", 0)), max_faults=data.get("max_faults", 100_000),
                   max_consecutive=data.get("max_consecutive"), spike_rate=float(data.get("spike_rate", 0.0)),
                   spike_max=float(data.get("spike_max", 1.5)),
                   matches=tuple(MatchRule.from_json(m) for m in data.get("matches") or ()))


SPIKE_MIN = 0.2
# Random parts of keys that would make decisions differ from run to run: mpcommit's per-attempt nonce
# (``task-00001-a0-1f2e3d4c``). Upload ids are left out of signatures altogether.
_VOLATILE = re.compile(r"(task-\d+-a\d+-)[0-9a-f]{8}")


def match_key(path: str, query: Mapping[str, str]) -> str:
    """What a :class:`MatchRule`'s ``key`` is matched against: the request's key, or a listing's ``prefix``."""
    _bucket, _, key = path.lstrip("/").partition("/")
    return key or query.get("prefix", "")


def request_signature(method: str, path: str, query: Mapping[str, str]) -> str:
    """What makes two requests "the same request" for fault decisions, across retries and across runs: method, key
    and query -- without the bucket (random per test), the upload id (random per server) and mpcommit's nonce."""
    _bucket, _, key = path.lstrip("/").partition("/")
    stable_query = "&".join(f"{k}={v}" for k, v in sorted(query.items()) if k != "uploadId")
    return _VOLATILE.sub(r"\1NONCE", f"{method} {key}?{stable_query}")


class FaultDecider:
    """A :class:`FaultPlan`'s decisions, request by request, and what they came to: faults per class and kind,
    latency spikes. The n-th occurrence of a request is faulted when a hash of (seed, signature, n) falls below
    its class's rate, within the plan's bounds. ``plan`` may be replaced between requests; what was seen stays."""

    def __init__(self, plan: FaultPlan | None, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.plan = plan
        self.seen: Counter[str] = Counter()
        self.streak: Counter[str] = Counter()
        self.faults: dict[str, Counter[Fault]] = defaultdict(Counter)  # per class, per kind
        self.total = 0
        self.spikes = 0
        self.spike_seconds = 0.0
        self.matched = 0
        self.delayed_seconds = 0.0
        self.stripped = 0

    @property
    def plan(self) -> FaultPlan | None:
        return self._plan

    @plan.setter
    def plan(self, plan: FaultPlan | None) -> None:
        """A new plan takes effect now: its match rules' windows count from here (or from their triggers)."""
        self._plan = plan
        self.since = self.clock()
        self.triggered: dict[int, float] = {}  # rule index -> when its trigger fired

    def decide_request(self, request_class: str, signature: str, key: str = "") -> Decision:
        """Everything the plan does to this request; ``key``: the request's key, or a listing's prefix (what
        match rules are matched against)."""
        plan = self.plan
        if plan is None:
            return Decision()
        now = self.clock()
        for i, m in enumerate(plan.matches):
            if m.trigger is not None and i not in self.triggered and re.search(m.trigger, f"{request_class} {key}"):
                self.triggered[i] = now
        matched = [m for i, m in enumerate(plan.matches)
                   if m.applies(request_class, key, now - self.since if m.trigger is None
                                else now - self.triggered[i] if i in self.triggered else None)]
        if not matched:
            fault, spike = self.decide(request_class, signature)
            return Decision(fault, spike)
        self.matched += 1
        self.seen[signature] += 1
        digest = hashlib.sha256(f"{plan.seed}|{signature}|{self.seen[signature]}".encode()).digest()
        fault = None
        for m in matched:
            if m.fault is not None and int.from_bytes(digest[:8], "big") / 2**64 < m.rate:
                if plan.max_faults is None or self.total < plan.max_faults:
                    fault = m.fault
                    self.faults[request_class][fault] += 1
                    self.total += 1
                break
        delay = sum(m.delay for m in matched)
        self.delayed_seconds += delay
        strip = any(m.strip_conditions for m in matched)
        self.stripped += strip
        return Decision(fault, 0.0, delay, strip)

    def decide(self, request_class: str, signature: str) -> tuple[Fault | None, float]:
        """The fault for this request (``None``: forward it) and the spike it waits first (seconds, often 0)."""
        plan = self.plan
        if plan is None:
            return None, 0.0
        self.seen[signature] += 1
        digest = hashlib.sha256(f"{plan.seed}|{signature}|{self.seen[signature]}".encode()).digest()
        spike = 0.0
        if plan.spike_rate and int.from_bytes(digest[16:24], "big") / 2**64 < plan.spike_rate:
            spike = SPIKE_MIN + (plan.spike_max - SPIKE_MIN) * int.from_bytes(digest[24:32], "big") / 2**64
            self.spikes += 1
            self.spike_seconds += spike
        return self._fault(plan, request_class, signature, digest), spike

    def _fault(self, plan: FaultPlan, request_class: str, signature: str, digest: bytes) -> Fault | None:
        rule = plan.rule_for(request_class)
        if rule is None or rule.rate <= 0:
            self.streak[signature] = 0
            return None
        if plan.max_faults is not None and self.total >= plan.max_faults:
            return None
        if plan.max_consecutive is not None and self.streak[signature] >= plan.max_consecutive:
            self.streak[signature] = 0
            return None
        if int.from_bytes(digest[:8], "big") / 2**64 >= rule.rate:
            self.streak[signature] = 0
            return None
        fault = rule.kinds[digest[8] % len(rule.kinds)]
        self.streak[signature] += 1
        self.faults[request_class][fault] += 1
        self.total += 1
        return fault

    def snapshot(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json() if self.plan else None,
                "faults": {cls: {f.name: n for f, n in kinds.items()} for cls, kinds in sorted(self.faults.items())},
                "spikes": self.spikes, "spike_seconds": self.spike_seconds, "matched": self.matched,
                "delayed_seconds": self.delayed_seconds, "stripped": self.stripped}


#: The answers of faults that refuse a request: status line, S3 error code and message.
_REFUSALS = {
    Fault.SLOW_DOWN: ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
    Fault.INTERNAL_ERROR: ("500 Internal Server Error", "InternalError",
                           "We encountered an internal error. Please try again."),
    Fault.INVALID_ACCESS_KEY: ("403 Forbidden", "InvalidAccessKeyId",
                               "The AWS Access Key Id you provided does not exist in our records."),
    Fault.ACCESS_DENIED: ("403 Forbidden", "AccessDenied", "Access Denied"),
}


def error_answer(fault: Fault, *, head: bool, keep: bool, extra: str = "") -> bytes:
    """The bytes of an S3 error answer for a refusing fault; no body for a HEAD (its Content-Length 0)."""
    status, code, message = _REFUSALS[fault]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>{extra}'
            "<RequestId>proxy</RequestId></Error>").encode()
    close = "" if keep else "Connection: close\r\n"
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nx-amz-request-id: proxy\r\n"
            f"Content-Length: {0 if head else len(body)}\r\n{close}\r\n").encode() + (b"" if head else body)


# ---------------------------------------------------------------- the counters
#: Per operation: requests; body bytes each way; bytes copied server-side (and copies whose size could not be
#: learnt); error answers (>= 400); the latency configured for its requests in total (``latency_seconds``), how
#: much of it the proxy waited out (``held_seconds``) and how often the server alone took longer (``late``) --
#: longer than the latency drawn and than the operation's median: with a tail, an answer whose draw fell below the
#: server's own time but which the server gave within the median is ``clipped`` instead (a lognormal through a
#: 30 ms median and a 300 ms p99 draws 5% of its latencies under 6 ms, below any real server's own time: counting
#: those as late judged the server by the tail's low end, not by its pace); without a tail the two are the same
#: test, and nothing is clipped. ``late_seconds`` and ``clipped_seconds``: how much longer than their draws those
#: answers took. The server's own time to its answer's head (``upstream_seconds``); requests answered 503
#: SlowDown by the rate limit (``throttled``, also counted in ``errors``); keys named by multi-key requests
#: (``keys``).
OP_FIELDS = ("requests", "request_bytes", "response_bytes", "copied_bytes", "copies_unsized", "errors",
             "latency_seconds", "held_seconds", "late", "late_seconds", "clipped", "clipped_seconds",
             "upstream_seconds", "throttled", "keys")


def lateness(took: float, drawn: float, median: float) -> str:
    """How an answer the server gave ``took`` seconds after the request, beyond the ``drawn`` latency the proxy was
    to hold it for, stands: ``late`` when the server was also slower than the operation's ``median`` (it set the
    pace), else ``clipped`` (only a draw from a tail's low end was under the server's own time). Without a tail the
    draw is the median: every such answer is late."""
    assert took >= drawn, "an answer within its draw is held, not judged"
    return "late" if took >= median else "clipped"


class Counters:
    """Counters per operation, plus connection counts. Only the event loop's thread touches them."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.ops: dict[str, dict[str, float]] = {}
        self.connections = 0
        self.max_connections = 0
        self.open_connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.proxy_errors = 0
        self.since = time.time()

    def op(self, name: str) -> dict[str, float]:
        if name not in self.ops:
            self.ops[name] = dict.fromkeys(OP_FIELDS, 0)
        return self.ops[name]

    def snapshot(self, profile: NetworkProfile) -> dict[str, Any]:
        totals = dict.fromkeys(OP_FIELDS, 0)
        for v in self.ops.values():
            for k in OP_FIELDS:
                totals[k] += v[k]
        return {"profile": profile.to_json(), "since": self.since, "now": time.time(),
                "cpu_seconds": time.process_time(),
                "connections": self.connections, "max_open_connections": self.max_connections,
                "max_in_flight": self.max_in_flight, "proxy_errors": self.proxy_errors,
                "ops": {k: dict(v) for k, v in sorted(self.ops.items())}, "totals": totals}


def per_file(stats: Mapping[str, Any], files: int) -> dict[str, float]:
    """Requests per output file by operation, from a ``stats()`` (or ``reset()``) snapshot taken around a job
    that wrote ``files`` files: the unit in which committers' request costs are compared."""
    return {op: v["requests"] / files for op, v in stats["ops"].items()} if files else {}


# ---------------------------------------------------------------- the request-rate limit (pure)
_KEY = re.compile(rb"<Key>(.*?)</Key>", re.S)


def delete_keys(body: bytes) -> list[str]:
    """The keys a DeleteObjects request names (its XML body)."""
    return [html.unescape(m.decode("utf-8", "replace")) for m in _KEY.findall(body)]


def partition_of(bucket: str, key: str, depth: int | None) -> str:
    """The partition a key's requests count against: the bucket and the key's directory (``depth=None``), or
    only the directory's first ``depth`` segments (0: the whole bucket)."""
    directory = key.rsplit("/", 1)[0] if "/" in key else ""
    if depth is not None:
        directory = "/".join(directory.split("/")[:depth]) if depth > 0 and directory else ""
    return f"{bucket}/{directory}" if directory else bucket


def request_tokens(method: str, op: str, path: str, query: Mapping[str, str], rule: ThrottleRule,
                   body: bytes = b"") -> tuple[str, dict[str, int]]:
    """What one request draws from the rate limit: its kind ("read" for GET and HEAD, else "write") and the
    tokens per partition -- one, or for a DeleteObjects one per key, on each key's own partition."""
    kind = "read" if method in ("GET", "HEAD") else "write"
    bucket, _, key = path.lstrip("/").partition("/")
    if op == "DeleteObjects":
        tokens: dict[str, int] = {}
        for k in delete_keys(body):
            part = partition_of(bucket, k, rule.partition_depth)
            tokens[part] = tokens.get(part, 0) + 1
        return kind, tokens or {bucket: 1}
    where = key if key else query.get("prefix", "")
    return kind, {partition_of(bucket, where, rule.partition_depth): 1}


class TokenBuckets:
    """One token bucket per (kind, partition): refilled at the rule's rate, holding ``burst_seconds`` of it, full
    when first used. A request is admitted only when every partition it touches has its tokens; a refused
    request takes none (S3 refuses before doing anything). ``clock`` is injectable for tests."""

    def __init__(self, rule: ThrottleRule, clock: Callable[[], float] = time.monotonic):
        self.rule = rule
        self.clock = clock
        self.level: dict[tuple[str, str], tuple[float, float]] = {}  # (kind, partition) -> (tokens, when)

    def _now_level(self, kind: str, part: str, now: float) -> float:
        rate = self.rule.rate(kind)
        cap = max(1.0, rate * self.rule.burst_seconds)
        tokens, when = self.level.get((kind, part), (cap, now))
        return min(cap, tokens + (now - when) * rate)

    def capacity(self, kind: str) -> float:
        return max(1.0, self.rule.rate(kind) * self.rule.burst_seconds)

    def admit(self, kind: str, tokens: Mapping[str, int]) -> bool:
        now = self.clock()
        levels = {part: self._now_level(kind, part, now) for part in tokens}
        # A request needing more than a full bucket (a 1,000-key delete at a low rate) waits for a full bucket and
        # leaves it in debt, rather than never being admitted.
        cap = self.capacity(kind)
        if any(levels[part] < min(n, cap) for part, n in tokens.items()):
            for part, level in levels.items():
                self.level[(kind, part)] = (level, now)
            return False
        for part, n in tokens.items():
            self.level[(kind, part)] = (levels[part] - n, now)
        return True


# ---------------------------------------------------------------- the proxy
class _Pacer:
    """At most ``rate`` bytes/s through one direction of one connection (the rate is the profile's at each call,
    so a new profile applies to open connections too). Wakes up late by up to a timer tick; a credit of one
    chunk keeps that lateness from adding up, so N bytes take at least (N - 2 x CHUNK) / rate."""

    def __init__(self) -> None:
        self.next = 0.0

    async def take(self, n: int, rate: float | None) -> None:
        if not rate:
            return
        now = time.monotonic()
        start = max(self.next, now - CHUNK / rate)
        self.next = start + n / rate
        if start > now:
            await asyncio.sleep(start - now)


_Pace = Callable[[int], Awaitable[None]]


class _Closed(Exception):
    """The peer closed its connection."""


def draw_stream(seed: int, op: str) -> random.Random:
    """The uniform draws of ``op``'s tail latencies from ``seed``: one stream per operation (:meth:`Proxy.draw`)."""
    return random.Random(f"{seed}:{op}")


class Proxy:
    """The proxy's event-loop side: one per process (see :class:`S3Network` for the side a test holds)."""

    def __init__(self, upstream: str, profile: NetworkProfile, *, faults: FaultPlan | None = None,
                 record_headers: bool = False, trail: str | None = None):
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.host, self.port = parts.hostname, parts.port
        self.profile = profile
        self.counters = Counters()
        self.buckets = TokenBuckets(profile.throttle) if profile.throttle else None
        #: The tail's draws: one seeded generator per operation (:meth:`draw`), so that the n-th request of an
        #: operation waits the same latency in every run started from the same seed, whatever requests of other
        #: operations came before it: two committers compared in one round (``POST /__proxy/reset?seed=N``) see
        #: their completes drawn alike -- common random numbers, so that a pair differs by the committers and not by
        #: which of them drew the tail's rare multi-second answers.
        self.seed = 39
        self._draws: dict[str, random.Random] = {}
        #: The client host's link, each way, shared by every connection (NetworkProfile.host_bandwidth).
        self.host_up, self.host_down = _Pacer(), _Pacer()
        self.faults = FaultDecider(faults)
        self.record_headers = record_headers
        self.headers: list[tuple[str, dict[str, str]]] = []  # (request class, headers in lower case) when recorded
        #: Every request that changes the store, one JSON line each (when asked): what a soak's forensics read to
        #: tell which request removed or wrote a key, and when.
        self.trail = open(trail, "a", buffering=1) if trail else None

    def _record(self, method: str, path: str, query: Mapping[str, str], op: str, status: int | str,
                lower: Mapping[str, str], body: bytes | None, started: float) -> None:
        if self.trail is None or method in ("GET", "HEAD"):
            return
        entry: dict[str, Any] = {"t": round(started * 1000), "ms": round((time.time() - started) * 1000), "op": op,
                                 "path": path, "status": status}
        if "uploadId" in query:
            entry["upload"] = query["uploadId"][-12:]
        if "x-amz-copy-source" in lower:
            entry["src"] = unquote(lower["x-amz-copy-source"])
        for h in ("if-none-match", "if-match", "x-amz-copy-source-if-match"):
            if h in lower:
                entry[h] = lower[h]
        if body is not None and op == "DeleteObjects":
            entry["keys"] = delete_keys(body)
        self.trail.write(json.dumps(entry) + "\n")

    def set_profile(self, profile: NetworkProfile) -> None:
        self.profile = profile
        self.buckets = TokenBuckets(profile.throttle) if profile.throttle else None

    def snapshot(self) -> dict[str, Any]:
        """The counters, with the faults injected (``faults``: the plan, per class and kind, and spikes)."""
        return {**self.counters.snapshot(self.profile), "faults": self.faults.snapshot()}

    # ------------------------------------------------------------ per client connection
    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        c = self.counters
        c.connections += 1
        c.open_connections += 1
        c.max_connections = max(c.max_connections, c.open_connections)
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        pace_up, pace_down = _Pacer(), _Pacer()
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                method, target, headers = _parse_head(head)
                if target.startswith(CONTROL_PREFIX):
                    await self._control(method, target, headers, reader, writer)
                    continue
                if up is None or up[0].at_eof() or up[1].is_closing():
                    if up is not None:
                        up[1].close()
                    up = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
                keep = await self._exchange(method, target, headers, head, reader, writer, up, pace_up, pace_down)
                if not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, _Closed, OSError):
            c.proxy_errors += 1
        finally:
            c.open_connections -= 1
            writer.close()
            if up is not None:
                up[1].close()

    async def _exchange(self, method: str, target: str, headers: list[tuple[str, str]], head: bytes,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        up: tuple[asyncio.StreamReader, asyncio.StreamWriter], pace_up: _Pacer, pace_down: _Pacer) -> bool:
        c = self.counters
        profile = self.profile  # one profile for the whole exchange, even if it is replaced meanwhile
        split = urlsplit(target)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        lower = {k.lower(): v for k, v in headers}
        op = classify(method, unquote(split.path), query, lower)
        started = time.time()
        stats = c.op(op)
        stats["requests"] += 1
        c.in_flight += 1
        c.max_in_flight = max(c.max_in_flight, c.in_flight)
        rate, host = profile.bandwidth, profile.host_bandwidth

        async def up_pace(n: int) -> None:
            await pace_up.take(n, rate)
            await self.host_up.take(n, host)

        async def down_pace(n: int) -> None:
            await pace_down.take(n, rate)
            await self.host_down.take(n, host)

        try:
            chunked = "chunked" in lower.get("transfer-encoding", "").lower()
            body: bytes | None = None  # read whole here only where the request must be looked into
            keys = 0
            if op == "DeleteObjects" and not chunked:
                body = await reader.readexactly(int(lower.get("content-length") or 0))
                keys = len(delete_keys(body))
                stats["keys"] += keys
            if self.record_headers:
                self.headers.append((op, dict(lower)))
            fault, spike, extra_delay = None, 0.0, 0.0
            if self.faults.plan is not None:
                decision = self.faults.decide_request(op, request_signature(method, unquote(split.path), query),
                                                      match_key(unquote(split.path), query))
                fault, spike, extra_delay = decision.fault, decision.spike, decision.delay
                if decision.strip_conditions:
                    head = _drop_header(_drop_header(head, "if-none-match"), "if-match")
            if spike:
                await asyncio.sleep(spike)
            if fault in _REFUSALS:
                stats["errors"] += 1
                self._record(method, unquote(split.path), query, op, fault.name, lower, body, started)
                return await self._refuse(fault, method, profile, lower, reader, writer, body is not None, up_pace)
            if fault is Fault.DROP:  # the request is read, never forwarded, and the connection closed
                self._record(method, unquote(split.path), query, op, fault.name, lower, body, started)
                await _skip_body(lower, reader, body is not None, up_pace)
                return False
            buckets = self.buckets if profile.throttle else None
            if buckets is not None and profile.throttle is not None:
                kind, tokens = request_tokens(method, op, unquote(split.path), query, profile.throttle, body or b"")
                if not buckets.admit(kind, tokens):
                    stats["throttled"] += 1
                    stats["errors"] += 1
                    return await self._refuse(Fault.SLOW_DOWN, method, profile, lower, reader, writer,
                                              body is not None, up_pace)
            sizing: asyncio.Task[int | None] | None = None
            copied = 0
            if op in COPY_OPERATIONS:
                copied, sizing = self._copy_size(lower)
            if "100-continue" in lower.get("expect", "").lower():
                # Answer it here (botocore sends it before every large body); the server never sees it.
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                head = _drop_header(head, "expect")
            ureader, uwriter = up
            uwriter.write(head)
            if body is not None:
                await up_pace(len(body))
                uwriter.write(body)
                stats["request_bytes"] += len(body)
            elif chunked:
                stats["request_bytes"] += await _relay_chunked(reader, uwriter, up_pace)
            else:
                n = int(lower.get("content-length") or 0)
                await _relay_exact(reader, uwriter, n, up_pace)
                stats["request_bytes"] += n
            await uwriter.drain()
            request_end = time.monotonic()

            response_head = await ureader.readuntil(b"\r\n\r\n")
            stats["upstream_seconds"] += time.monotonic() - request_end
            status, rheaders = _parse_status(response_head)
            self._record(method, unquote(split.path), query, op,
                         f"{status} {fault.name}" if fault is Fault.DROP_AFTER else status, lower, body, started)
            if status >= 400:
                stats["errors"] += 1
            if sizing is not None:
                size = await sizing
                if size is None:
                    stats["copies_unsized"] += 1
                copied = size or 0
            if status < 300:
                stats["copied_bytes"] += copied
            latency = profile.latency_for(op, copied, keys, draw=self.draw(op) if profile.tail else None)
            latency += extra_delay
            stats["latency_seconds"] += latency
            if latency:
                wait = request_end + latency - time.monotonic()
                if wait > 0:
                    stats["held_seconds"] += wait
                    await asyncio.sleep(wait)
                else:
                    median = profile.latency_for(op, copied, keys) + extra_delay  # the draw without the tail
                    kind = lateness(latency - wait, latency, median)
                    stats[kind] += 1
                    stats[f"{kind}_seconds"] -= wait
            rlower = {k.lower(): v for k, v in rheaders}
            close = "close" in rlower.get("connection", "").lower() or "close" in lower.get("connection", "").lower()
            if fault is Fault.DROP_AFTER:  # the server applied it; its answer is read to the end and lost
                writer, close = _Sink(), True  # type: ignore[assignment]
            writer.write(response_head)
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                pass
            elif "chunked" in rlower.get("transfer-encoding", "").lower():
                stats["response_bytes"] += await _relay_chunked(ureader, writer, down_pace)
            elif "content-length" in rlower:
                n = int(rlower["content-length"])
                await _relay_exact(ureader, writer, n, down_pace)
                stats["response_bytes"] += n
            else:  # delimited by the end of the connection
                stats["response_bytes"] += await _relay_to_eof(ureader, writer, down_pace)
                close = True
            await writer.drain()
            return not close
        finally:
            c.in_flight -= 1

    async def _refuse(self, fault: Fault, method: str, profile: NetworkProfile, lower: Mapping[str, str],
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body_read: bool,
                      up_pace: _Pace) -> bool:
        """Answer an error as S3 does past its request rate (or as a fault says), after the profile's round trip,
        without the server. A body announced with ``Expect: 100-continue`` is refused unread and the connection
        closed (the client never sends it); any other body is read and dropped, and the connection kept."""
        t0 = time.monotonic()
        keep = await _skip_body(lower, reader, body_read, up_pace)
        wait = t0 + profile.default - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        extra = ""
        if fault is Fault.INVALID_ACCESS_KEY:  # as S3 does: the refused access key id is echoed
            match = re.search(r"Credential=([^/]+)/", lower.get("authorization", ""))
            extra = f"<AWSAccessKeyId>{match.group(1) if match else ''}</AWSAccessKeyId>"
        writer.write(error_answer(fault, head=method == "HEAD", keep=keep, extra=extra))
        await writer.drain()
        return keep

    def _copy_size(self, headers: Mapping[str, str]) -> tuple[int, asyncio.Task[int | None] | None]:
        rng = headers.get("x-amz-copy-source-range")
        if rng:
            lo, _, hi = rng.partition("=")[2].partition("-")
            return int(hi) - int(lo) + 1, None
        return 0, asyncio.ensure_future(self._head_size(headers))

    async def _head_size(self, headers: Mapping[str, str]) -> int | None:
        """The size of a copy source, by a HEAD of its own on a connection of its own, carrying the copy
        request's credentials headers (its signature does not match a HEAD: moto and LocalStack do not check
        signatures; a server that does answers 403, and the copy is counted as unsized)."""
        path, _, version = unquote(headers.get("x-amz-copy-source", "")).partition("?")
        target = quote("/" + path.lstrip("/")) + (f"?{version}" if version else "")
        auth = "".join(f"{k}: {headers[k]}\r\n" for k in ("authorization", "x-amz-date", "x-amz-security-token") if k in headers)
        try:
            r, w = await asyncio.open_connection(self.host, self.port)
            try:
                w.write(f"HEAD {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{auth}"
                        "x-amz-content-sha256: UNSIGNED-PAYLOAD\r\nConnection: close\r\n\r\n".encode("latin-1"))
                await w.drain()
                status, rheaders = _parse_status(await r.readuntil(b"\r\n\r\n"))
            finally:
                w.close()
        except (OSError, asyncio.IncompleteReadError):
            return None
        length = {k.lower(): v for k, v in rheaders}.get("content-length")
        return int(length) if status == 200 and length is not None else None

    def draw(self, op: str) -> float:
        """The next uniform draw of ``op``'s own stream (seeded by the proxy's seed and the operation's name)."""
        stream = self._draws.get(op)
        if stream is None:
            stream = self._draws[op] = draw_stream(self.seed, op)
        return stream.random()

    # ------------------------------------------------------------ the control API
    async def _control(self, method: str, target: str, headers: list[tuple[str, str]],
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = int({k.lower(): v for k, v in headers}.get("content-length") or 0)
        body = await reader.readexactly(n) if n else b""
        path = urlsplit(target).path[len(CONTROL_PREFIX):].strip("/")
        status, answer = 200, None
        if path == "stats" and method == "GET":
            answer = self.snapshot()
        elif path == "reset" and method == "POST":
            # Counters, the rate limit's buckets and the faults' history alike: each benchmark run starts from
            # rested partitions, each test from the first occurrence of every request.
            answer = self.snapshot()
            self.counters.reset()
            self.set_profile(self.profile)
            self.faults = FaultDecider(self.faults.plan)
            self.headers = []
            seed = parse_qs(urlsplit(target).query).get("seed")
            if seed:  # the tail's draws start again from this seed (else they go on)
                self.seed, self._draws = int(seed[0]), {}
        elif path == "faults" and method == "GET":
            answer = self.faults.plan.to_json() if self.faults.plan else None
        elif path == "faults" and method == "PUT":
            try:
                data = json.loads(body)
                self.faults.plan = FaultPlan.from_json(data) if data else None
                answer = data
            except (ValueError, TypeError, KeyError) as exc:
                status, answer = 400, {"error": str(exc)}
        elif path == "headers" and method == "GET":
            answer = self.headers
        elif path == "profile" and method == "GET":
            answer = self.profile.to_json()
        elif path == "profile" and method == "PUT":
            try:
                self.set_profile(NetworkProfile.from_json(json.loads(body)))
                answer = self.profile.to_json()
            except (ValueError, TypeError) as exc:
                status, answer = 400, {"error": str(exc)}
        else:
            status, answer = 404, {"error": f"no {method} {target}"}
        data = json.dumps(answer).encode()
        writer.write(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()


def _parse_head(head: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:] if line)]
    return method, target, headers


def _parse_status(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    return status, [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:] if line)]


def _drop_header(head: bytes, name: str) -> bytes:
    lines = head.split(b"\r\n")
    keep = [line for line in lines[1:] if line.split(b":", 1)[0].strip().lower() != name.encode()]
    return b"\r\n".join([lines[0], *keep])


class _Sink:
    """A writer that drops what it is given (the body of a refused request, the answer of a dropped one)."""

    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


async def _skip_body(lower: Mapping[str, str], reader: asyncio.StreamReader, body_read: bool, pace: _Pace) -> bool:
    """Read and drop a request's body, unless it was read already or waits for ``100 Continue`` (then the client
    never sends it, and the connection cannot be kept: the answer is whether it can)."""
    if body_read:
        return True
    if "100-continue" in lower.get("expect", "").lower():
        return False
    if "chunked" in lower.get("transfer-encoding", "").lower():
        await _relay_chunked(reader, _Sink(), pace)  # type: ignore[arg-type]
    else:
        await _relay_exact(reader, _Sink(), int(lower.get("content-length") or 0), pace)  # type: ignore[arg-type]
    return True


async def _relay_exact(src: asyncio.StreamReader, dst: asyncio.StreamWriter, n: int, pace: _Pace) -> None:
    left = n
    while left:
        chunk = await src.read(min(left, CHUNK))
        if not chunk:
            raise _Closed()
        left -= len(chunk)
        await pace(len(chunk))
        dst.write(chunk)
        await dst.drain()


async def _relay_chunked(src: asyncio.StreamReader, dst: asyncio.StreamWriter, pace: _Pace) -> int:
    """Relays a chunked body byte for byte (aws-chunked signatures and trailers included); returns the payload size."""
    total = 0
    while True:
        line = await src.readuntil(b"\r\n")
        dst.write(line)
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers, then the empty line
                trailer = await src.readuntil(b"\r\n")
                dst.write(trailer)
                if trailer == b"\r\n":
                    await dst.drain()
                    return total
        await _relay_exact(src, dst, size + 2, pace)  # the data and its CRLF
        total += size


async def _relay_to_eof(src: asyncio.StreamReader, dst: asyncio.StreamWriter, pace: _Pace) -> int:
    total = 0
    while chunk := await src.read(CHUNK):
        total += len(chunk)
        await pace(len(chunk))
        dst.write(chunk)
        await dst.drain()
    return total


# ---------------------------------------------------------------- the process
async def _serve(args: argparse.Namespace, profile: NetworkProfile) -> None:
    faults = FaultPlan.from_json(json.loads(args.faults_json)) if args.faults_json else None
    proxy = Proxy(args.upstream, profile, faults=faults, record_headers=args.record_headers, trail=args.trail)
    server = await asyncio.start_server(proxy.client, "127.0.0.1", args.port, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    print(f"listening http://127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # Connections still open at shutdown are cancelled: nothing to report about them.
        if not isinstance(context.get("exception"), asyncio.CancelledError):
            loop.default_exception_handler(context)

    loop.set_exception_handler(quiet)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    deadline = time.monotonic() + args.lifetime

    async def watch() -> None:  # self-stopping: at the end of its lifetime, or when its parent is gone
        while time.monotonic() < deadline:
            if args.parent_pid and not _alive(args.parent_pid):
                break
            await asyncio.sleep(1.0)
        stop.set()

    watcher = asyncio.ensure_future(watch())
    await stop.wait()
    watcher.cancel()
    server.close()
    if args.stats_file:
        Path(args.stats_file).write_text(json.dumps(proxy.snapshot(), indent=1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.s3_network", description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="the S3 server, http://host:port")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one, printed)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="s3", help="the shaping to start from (default s3)")
    p.add_argument("--profile-json", help="the whole shaping as JSON (NetworkProfile.to_json), instead of --profile")
    p.add_argument("--latency", default="", help="overrides, e.g. default=25ms,CompleteMultipartUpload=80ms")
    p.add_argument("--bandwidth", help="per-connection cap each way, e.g. 85MB/s, or none")
    p.add_argument("--copy-rate", help="server-side copy rate added to copies' latency, e.g. 8MB/s, or none")
    p.add_argument("--host-bandwidth", help="the client host's link, all connections together, each way, e.g. 1250MB/s")
    p.add_argument("--faults-json", help="the faults to inject as JSON (FaultPlan.to_json); none by default")
    p.add_argument("--record-headers", action="store_true", help="keep every request's headers (GET /__proxy/headers)")
    p.add_argument("--stats-file", help="write the counters here (JSON) when the proxy stops")
    p.add_argument("--trail", help="append every request that changes the store here, one JSON line each")
    p.add_argument("--lifetime", type=float, default=6 * 3600, help="stop by itself after this many seconds")
    p.add_argument("--parent-pid", type=int, default=0, help="stop by itself when this process is gone")
    args = p.parse_args(argv)
    base = NetworkProfile.from_json(json.loads(args.profile_json)) if args.profile_json else PROFILES[args.profile]
    data = base.to_json()
    for item in filter(None, (s.strip() for s in args.latency.split(","))):
        op, _, value = item.partition("=")
        if op == "default":
            data["default"] = parse_seconds(value)
        else:
            data["latency"][op] = parse_seconds(value)
    if args.bandwidth is not None:
        data["bandwidth"] = parse_rate(args.bandwidth)
    if args.copy_rate is not None:
        data["copy_rate"] = parse_rate(args.copy_rate)
    if args.host_bandwidth is not None:
        data["host_bandwidth"] = parse_rate(args.host_bandwidth)
    if args.latency or args.bandwidth is not None or args.copy_rate is not None or args.host_bandwidth is not None:
        data["name"] = f"{data['name']} (modified)"
    asyncio.run(_serve(args, NetworkProfile.from_json(data)))
    return 0


class S3Network:
    """The proxy as a child process: ``endpoint_url`` to point clients at, its counters and its CPU time.

    ``S3Network(upstream, S3_LIKE)`` for the S3-like network; ``S3Network(upstream, NONE, faults=FaultPlan(...))``
    for faults with no shaping (both at once work too). ``start()`` (or ``with``) waits until it listens;
    ``stop()`` ends it, as does the end of ``lifetime`` seconds or of the process that started it."""

    def __init__(self, upstream: str, profile: NetworkProfile = S3_LIKE, *, faults: FaultPlan | None = None,
                 record_headers: bool = False, stats_file: str | None = None, lifetime: float = 6 * 3600,
                 trail: str | None = None):
        self.upstream = upstream
        self.trail = trail
        self.profile = profile
        self.fault_plan = faults
        self.record_headers = record_headers
        self.stats_file = stats_file
        self.lifetime = lifetime
        self.proc: subprocess.Popen[str] | None = None
        self.endpoint_url = ""

    def start(self) -> "S3Network":
        cmd = [sys.executable, "-m", "tests.support.s3_network", "--upstream", self.upstream,
               "--profile-json", json.dumps(self.profile.to_json()), "--parent-pid", str(os.getpid()),
               "--lifetime", str(self.lifetime)]
        if self.fault_plan is not None:
            cmd += ["--faults-json", json.dumps(self.fault_plan.to_json())]
        if self.record_headers:
            cmd.append("--record-headers")
        if self.stats_file:
            cmd += ["--stats-file", self.stats_file]
        if self.trail:
            cmd += ["--trail", self.trail]
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = [""]
        reader = threading.Thread(target=lambda: line.__setitem__(0, self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(30)
        if not line[0].startswith("listening "):
            self.stop()
            raise RuntimeError(f"the S3 network proxy did not start (it said {line[0]!r})")
        self.endpoint_url = line[0].split()[1]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()  # else the pipe is closed by the GC, warning in whatever test runs then

    def __enter__(self) -> "S3Network":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the proxy process has used so far."""
        try:
            import psutil

            t = psutil.Process(self.pid).cpu_times()
            return float(t.user + t.system)
        except Exception:  # noqa: BLE001 - only a measurement
            return float("nan")

    def _call(self, method: str, path: str, body: Any = None, *, send: bool = False) -> Any:
        data = json.dumps(body).encode() if body is not None or send else None
        req = urllib.request.Request(self.endpoint_url + CONTROL_PREFIX + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "stats")

    def reset(self, *, seed: int | None = None) -> dict[str, Any]:
        """Zero the counters (faults and recorded headers included); returns them as they were. With ``seed``, the
        tail's draws start again from it: runs reset with the same seed draw the same latencies per operation."""
        return self._call("POST", "reset" if seed is None else f"reset?seed={int(seed)}")

    def set_profile(self, profile: NetworkProfile) -> None:
        self._call("PUT", "profile", profile.to_json())
        self.profile = profile

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Inject these faults from now on (``None``: none); the requests seen so far still count as seen."""
        self._call("PUT", "faults", plan.to_json() if plan else None, send=True)
        self.fault_plan = plan

    # ------------------------------------------------------------ what a test asks
    def requests(self) -> Counter[str]:
        """Requests that arrived, per request class (faulted and throttled ones included)."""
        return Counter({op: int(v["requests"]) for op, v in self.stats()["ops"].items()})

    def faulted(self) -> defaultdict[str, Counter[Fault]]:
        """Faults injected, per request class and kind."""
        faults = self.stats()["faults"]["faults"]
        return defaultdict(Counter, {cls: Counter({Fault[k]: n for k, n in kinds.items()})
                                     for cls, kinds in faults.items()})

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per request class: requests, and faults by kind name."""
        stats = self.stats()
        faults = stats["faults"]["faults"]
        return {cls: {"requests": int(v["requests"]), "faults": dict(faults.get(cls, {}))}
                for cls, v in sorted(stats["ops"].items())}

    def headers(self) -> list[tuple[str, dict[str, str]]]:
        """Every request's class and headers (names in lower case), in order of arrival; needs ``record_headers``."""
        if not self.record_headers:
            raise RuntimeError("S3Network(record_headers=True) keeps the headers")
        return [(cls, headers) for cls, headers in self._call("GET", "headers")]


if __name__ == "__main__":
    raise SystemExit(main())
