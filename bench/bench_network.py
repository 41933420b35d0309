"""Scenario 0: the S3-like network itself -- does it shape what it says, and what does the proxy cost?

1. **Calibration**: single requests, one after another on one connection, through the proxy with the S3-like
   profile: the time the client sees per operation against the latency configured for it, and a large PUT and
   GET against the per-connection bandwidth cap.
2. **Overhead**: the same work straight to the server and through the proxy with no shaping at all (it only
   forwards and counts), interleaved: a 1 GiB streaming upload (mpcommit's writer, in a fresh process as in
   scenario 2) and a burst of small requests (HeadObject on 32 threads). The proxy's CPU time per GiB and per
   1,000 requests is read from its process; on two shared cores that CPU is taken from the client and the server.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import bench_writer
from .common import (
    GiB, MiB, describe_ratio, empty_prefix, ensure_bucket, human_bytes, human_seconds, interleaved, log, make_client,
    md_table, median, ratio_spread, server_cpu_seconds,
)
from tests.support.s3_network import NONE, S3_LIKE, NetworkProfile, S3Network

BUCKET = "bench-network"
SMALL_REQUESTS = 3000
SMALL_THREADS = 32


def calibrate(upstream: str, profile: NetworkProfile = S3_LIKE, *, samples: int = 9) -> list[dict[str, Any]]:
    """Per operation: the median time the client saw, the configured latency, and what is left over."""
    rows: list[dict[str, Any]] = []
    with S3Network(upstream, profile) as net:
        c = make_client(net.endpoint_url, max_pool_connections=1)
        ensure_bucket(c, BUCKET)
        c.put_object(Bucket=BUCKET, Key="cal/small", Body=b"x" * 1024)

        def timed(fn: Any) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        def complete_one() -> float:
            uid = c.create_multipart_upload(Bucket=BUCKET, Key="cal/mpu")["UploadId"]
            etag = c.upload_part(Bucket=BUCKET, Key="cal/mpu", UploadId=uid, PartNumber=1, Body=b"y" * 1024)["ETag"]
            return timed(lambda: c.complete_multipart_upload(
                Bucket=BUCKET, Key="cal/mpu", UploadId=uid, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}))

        cases = {
            "HeadObject": lambda: timed(lambda: c.head_object(Bucket=BUCKET, Key="cal/small")),
            "GetObject (1 KiB)": lambda: timed(lambda: c.get_object(Bucket=BUCKET, Key="cal/small")["Body"].read()),
            "PutObject (1 KiB)": lambda: timed(lambda: c.put_object(Bucket=BUCKET, Key="cal/p", Body=b"z" * 1024)),
            "ListObjectsV2": lambda: timed(lambda: c.list_objects_v2(Bucket=BUCKET, Prefix="cal/")),
            "CompleteMultipartUpload": complete_one,
            "CopyObject (1 KiB)": lambda: timed(lambda: c.copy_object(Bucket=BUCKET, Key="cal/copy",
                                                                     CopySource={"Bucket": BUCKET, "Key": "cal/small"})),
            "DeleteObjects (1 key)": lambda: timed(lambda: c.delete_objects(
                Bucket=BUCKET, Delete={"Objects": [{"Key": "cal/none"}], "Quiet": True})),
        }
        expected = {"HeadObject": profile.latency_for("HeadObject"), "GetObject (1 KiB)": profile.latency_for("GetObject"),
                    "PutObject (1 KiB)": profile.latency_for("PutObject") + _wire(1024, profile),
                    "ListObjectsV2": profile.latency_for("ListObjectsV2"),
                    "CompleteMultipartUpload": profile.latency_for("CompleteMultipartUpload"),
                    "CopyObject (1 KiB)": profile.latency_for("CopyObject", 1024),
                    "DeleteObjects (1 key)": profile.latency_for("DeleteObjects")}
        for name, fn in cases.items():
            fn()  # warm
            seen = median(fn() for _ in range(samples))
            rows.append({"case": name, "configured": expected[name], "seen": seen})
        big = 64 * MiB
        body = os.urandom(big)
        seen = median(timed(lambda: c.put_object(Bucket=BUCKET, Key="cal/big", Body=body)) for _ in range(3))
        rows.append({"case": f"PutObject ({human_bytes(big)}, one connection)",
                     "configured": profile.latency_for("PutObject") + _wire(big, profile), "seen": seen})
        seen = median(timed(lambda: c.get_object(Bucket=BUCKET, Key="cal/big")["Body"].read()) for _ in range(3))
        rows.append({"case": f"GetObject ({human_bytes(big)}, one connection)",
                     "configured": profile.latency_for("GetObject") + _wire(big, profile), "seen": seen})
        rows[-1]["stats"] = net.stats()["totals"]
        empty_prefix(c, BUCKET, "cal/")
    for r in rows:
        log(f"network: calibration {r['case']:<40} configured {r['configured'] * 1000:7.1f} ms, seen {r['seen'] * 1000:7.1f} ms")
    return rows


def _wire(n: int, profile: NetworkProfile) -> float:
    return n / profile.bandwidth if profile.bandwidth else 0.0


def _small_burst(endpoint: str, n: int, threads: int) -> float:
    c = make_client(endpoint, max_pool_connections=threads)
    c.head_object(Bucket=BUCKET, Key="ovh/small")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _i: c.head_object(Bucket=BUCKET, Key="ovh/small"), range(n)))
    return time.perf_counter() - t0


def overhead(upstream: str, *, size: int = 1 * GiB, repeats: int = 5, server_pid: int | None = None) -> dict[str, Any]:
    """Direct vs through the proxy with no shaping, interleaved: upload throughput and a small-request burst."""
    runs: list[dict[str, Any]] = []
    with S3Network(upstream, NONE) as net:
        c = make_client(upstream)
        ensure_bucket(c, bench_writer.BUCKET)
        ensure_bucket(c, BUCKET)
        c.put_object(Bucket=BUCKET, Key="ovh/small", Body=b"x" * 1024)
        targets = {"direct": upstream, "proxy": net.endpoint_url}
        for repeat, path in interleaved(("direct", "proxy"), repeats):
            ep = targets[path]
            p0, s0 = net.cpu_seconds(), server_cpu_seconds(server_pid)
            w = bench_writer.measure(ep, "mpcommit", size, repeat)
            p1, s1 = net.cpu_seconds(), server_cpu_seconds(server_pid)
            empty_prefix(c, bench_writer.BUCKET, "w/")
            t_small = _small_burst(ep, SMALL_REQUESTS, SMALL_THREADS)
            p2, s2 = net.cpu_seconds(), server_cpu_seconds(server_pid)
            r = {"path": path, "repeat": repeat, "upload_s": w["seconds"], "upload_throughput": size / w["seconds"],
                 "upload_proxy_cpu_s": p1 - p0, "upload_server_cpu_s": s1 - s0,
                 "small_s": t_small, "small_rate": SMALL_REQUESTS / t_small, "small_proxy_cpu_s": p2 - p1,
                 "small_server_cpu_s": s2 - s1, "load": os.getloadavg()[0]}
            runs.append(r)
            log(f"network: overhead {path:<6} r{repeat}: upload {size / w['seconds'] / MiB:6.1f} MiB/s "
                f"(proxy CPU {r['upload_proxy_cpu_s']:.2f} s), {SMALL_REQUESTS} HEADs in {t_small:.2f} s "
                f"(proxy CPU {r['small_proxy_cpu_s']:.2f} s), load {r['load']:.1f}")
        counted = net.stats()
        empty_prefix(c, BUCKET, "ovh/")
    return {"size": size, "repeats": repeats, "small_requests": SMALL_REQUESTS, "small_threads": SMALL_THREADS,
            "runs": runs, "proxy_counted": counted["totals"]}


def run(endpoint: str, *, repeats: int = 5, size: int = 1 * GiB, server_pid: int | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    cal = calibrate(endpoint)
    ovh = overhead(endpoint, size=size, repeats=repeats, server_pid=server_pid)
    return {"scenario": "network", "profile": S3_LIKE.to_json(), "calibration": cal, "overhead": ovh,
            "seconds": round(time.perf_counter() - started, 1)}


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    ovh = data["overhead"]
    by = {p: sorted((r for r in ovh["runs"] if r["path"] == p), key=lambda r: r["repeat"]) for p in ("direct", "proxy")}
    proxy = by["proxy"]
    return {
        "upload": ratio_spread([r["upload_throughput"] for r in proxy], [r["upload_throughput"] for r in by["direct"]]),
        "small": ratio_spread([r["small_rate"] for r in proxy], [r["small_rate"] for r in by["direct"]]),
        "upload_direct": median(r["upload_throughput"] for r in by["direct"]),
        "upload_proxy": median(r["upload_throughput"] for r in proxy),
        "small_direct": median(r["small_rate"] for r in by["direct"]),
        "small_proxy": median(r["small_rate"] for r in proxy),
        "cpu_per_gib": median(r["upload_proxy_cpu_s"] / (ovh["size"] / GiB) for r in proxy),
        "cpu_share_upload": median(r["upload_proxy_cpu_s"] / r["upload_s"] for r in proxy),
        "cpu_per_1000": median(1000 * r["small_proxy_cpu_s"] / ovh["small_requests"] for r in proxy),
        "cpu_share_small": median(r["small_proxy_cpu_s"] / r["small_s"] for r in proxy),
        "server_cpu_per_1000_direct": median(1000 * r["small_server_cpu_s"] / ovh["small_requests"] for r in by["direct"]),
    }


def markdown(data: dict[str, Any]) -> str:
    s = summarise(data)
    ovh = data["overhead"]
    out = ["Calibration: single requests one after another on one connection through the proxy with the S3-like "
           "profile (median of 9; the two large transfers: median of 3). *Configured* is the latency set for the "
           "operation plus, for bodies, size / bandwidth; what the client sees on top is the local server's and "
           "the client's own time (for the large PUT, most likely the client hashing the body for its SigV4 "
           "signature, which botocore signs over plain HTTP, and the server hashing and storing it; not measured "
           "apart).", ""]
    rows = [[r["case"], human_seconds(r["configured"]), human_seconds(r["seen"]),
             f"{(r['seen'] - r['configured']) * 1000:+.1f} ms"] for r in data["calibration"]]
    out.append(md_table(["request", "configured", "seen by the client", "difference"], rows, align="lrrr"))
    out.append("")
    out.append(f"Overhead: {ovh['repeats']} interleaved repeats of the same work straight to the server and through "
               f"the proxy with no shaping (it forwards and counts): a {human_bytes(ovh['size'])} upload by mpcommit's "
               f"writer (default settings, fresh process) and {ovh['small_requests']:,} HeadObject requests on "
               f"{ovh['small_threads']} threads.")
    out.append("")
    rows = [
        ["upload throughput", f"{s['upload_direct'] / MiB:,.1f} MiB/s", f"{s['upload_proxy'] / MiB:,.1f} MiB/s",
         describe_ratio(s["upload"], "throughputs"),
         f"{s['cpu_per_gib']:.2f} s per GiB ({100 * s['cpu_share_upload']:.0f}% of a core while uploading)"],
        ["small requests", f"{s['small_direct']:,.0f}/s", f"{s['small_proxy']:,.0f}/s",
         describe_ratio(s["small"], "rates"),
         f"{s['cpu_per_1000']:.2f} s per 1,000 requests ({100 * s['cpu_share_small']:.0f}% of a core); "
         f"the server's own: {s['server_cpu_per_1000_direct']:.2f} s per 1,000"],
    ]
    out.append(md_table(["work", "direct", "through the proxy", "proxy ÷ direct", "the proxy's CPU"], rows, align="lrrll"))
    return "\n".join(out)


def main() -> None:  # pragma: no cover - by hand: python -m bench.bench_network
    import argparse
    import json

    from .common import start_server

    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="localstack")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--size", default="1GiB")
    a = p.parse_args()
    from .common import parse_size

    with start_server(a.backend) as server:
        data = run(server.endpoint_url, repeats=a.repeats, size=parse_size(a.size), server_pid=server.pid)
    print(markdown(data))
    print(json.dumps(summarise(data), indent=1, default=str))


if __name__ == "__main__":
    main()

