"""Scenario 2: one task's write throughput and peak memory -- mpcommit's streaming MultipartWriter vs
boto3's own upload (s3transfer ``upload_fileobj``) of the same bytes.

Each measurement runs in a fresh subprocess, so that peak memory is that one upload's: the child records its
RSS after imports, client set-up and a warm-up request, then streams ``size`` bytes (the same 1 MiB random
block over and over, produced on the fly: neither side reads a file), and reports the peak RSS above that
baseline (``ru_maxrss`` and a 2 ms psutil sampler). Both sides end with a completed object: the writer's
upload is completed by the same store right after ``close()`` (in a job, the driver does that at commit).

Settings are each side's defaults: mpcommit's ``WriterSettings()`` (8 MiB parts, 2 in flight, documented
bound ``part_size x (max_parts_in_flight + 1)`` = 24 MiB) and boto3's ``TransferConfig()`` (8 MiB parts,
10 threads, up to 10 parts buffered for a non-seekable stream).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any

from .common import (
    GiB,
    MiB,
    describe_ratio,
    empty_prefix,
    ensure_bucket,
    human_bytes,
    interleaved,
    log,
    make_client,
    md_table,
    median,
    paired_ratio,
    ratio_spread,
    s3_options,
)

BUCKET = "bench-writer"
VARIANTS = ("mpcommit", "s3transfer", "mpcommit10")
#: With ``s3transfer2`` too: every comparison at equal memory and equal connections (issue 12).
EQUAL_VARIANTS = ("mpcommit", "s3transfer2", "mpcommit10", "s3transfer")
#: Issue 12 item 4: equal memory and equal connections at two depths, to choose the writer's defaults.
DEPTH_VARIANTS = ("mpcommit", "s3transfer2", "mpcommit4", "s3transfer4")
LABELS = {"mpcommit": "mpcommit MultipartWriter", "s3transfer": "boto3 upload_fileobj (s3transfer)",
          "mpcommit4": "mpcommit, 4 parts in flight, 4 threads",
          "s3transfer4": "boto3 upload_fileobj, 4 threads, 5 chunks buffered (mpcommit4's memory and connections)",
          "mpcommit10": "mpcommit, 10 parts in flight (diagnostic)",
          "s3transfer2": "boto3 upload_fileobj, 2 threads, 3 chunks buffered (mpcommit's memory and connections)"}
#: s3transfer at mpcommit's defaults: 2 uploads at a time, and at most 3 parts of a non-seekable stream in memory
#: (one being read, two uploading), the writer's part_size x (max_parts_in_flight + 1).
EQUAL_TRANSFER = {"max_concurrency": 2, "max_in_memory_upload_chunks": 3}
#: The diagnostic variant: the same writer with s3transfer's concurrency (10 parts, 10 threads), to tell how
#: much of a throughput gap is the writer's smaller number of parts in flight.
DIAGNOSTIC_SETTINGS = {"max_parts_in_flight": 10, "upload_threads": 10}
#: Settings of the writer variants other than the defaults, and s3transfer's at the same memory and connections.
WRITER_SETTINGS = {"mpcommit10": DIAGNOSTIC_SETTINGS, "mpcommit4": {"max_parts_in_flight": 4, "upload_threads": 4}}
TRANSFER_SETTINGS = {"s3transfer2": EQUAL_TRANSFER, "s3transfer4": {"max_concurrency": 4, "max_in_memory_upload_chunks": 5}}
CHUNK = 1 * MiB


class _Stream(io.RawIOBase):
    """A non-seekable stream of ``size`` bytes made of one block repeated: what a task producing data has."""

    def __init__(self, block: bytes, size: int):
        self._block = memoryview(block)
        self._left = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        n = min(len(out), self._left)
        done = 0
        while done < n:
            take = min(n - done, len(self._block) - self._pos)
            out[done : done + take] = self._block[self._pos : self._pos + take]
            done += take
            self._pos = (self._pos + take) % len(self._block)
        self._left -= n
        return n


class _PeakSampler:
    def __init__(self, interval: float = 0.002):
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(self._interval)

    def __enter__(self) -> "_PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def child(variant: str, endpoint: str, key: str, size: int, *, trace: bool = False) -> dict[str, Any]:
    """Runs in the subprocess: one upload, measured. With ``trace`` the Python heap is traced too
    (tracemalloc's peak: the buffers themselves, without the allocator's and the HTTP stack's slack); that
    slows allocation, so traced runs are separate from the timed ones."""
    if trace:
        import tracemalloc
    block = os.urandom(CHUNK)
    result: dict[str, Any] = {"variant": variant, "bytes": size}
    if variant.startswith("mpcommit"):
        from mpcommit import WriterSettings
        from mpcommit.protocol.writer import MultipartWriter
        from mpcommit.store.s3 import CompletedPart, S3Store

        settings = WriterSettings(**WRITER_SETTINGS.get(variant, {}))
        store = S3Store(s3_options(endpoint))
        store.head_bucket(BUCKET)  # warm the connection pool
        result["bound"] = settings.initial_part_size * (settings.max_parts_in_flight + 1)
        base = _rss()
        max_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if trace:
            tracemalloc.start()
        with _PeakSampler() as sampler:
            t0 = time.perf_counter()
            writer = MultipartWriter(store, bucket=BUCKET, key=key, settings=settings)
            view = memoryview(block)
            left = size
            while left:
                n = min(left, CHUNK)
                writer.write(view[:n])
                left -= n
            writer.close()
            t1 = time.perf_counter()
            pending = writer.pending
            assert pending is not None
            store.complete_multipart_upload(BUCKET, key, pending.upload_id,
                                            [CompletedPart(p.number, p.etag, p.crc32) for p in pending.parts])
            t2 = time.perf_counter()
        result.update(seconds=t2 - t0, writer_seconds=t1 - t0, parts=len(pending.parts))
    elif variant.startswith("s3transfer"):
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
        client = session.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
        client.head_bucket(Bucket=BUCKET)
        config = TransferConfig()
        # boto3's TransferConfig takes only some of s3transfer's settings as arguments
        for k, v in TRANSFER_SETTINGS.get(variant, {}).items():
            setattr(config, k, v)
        result["bound"] = config.multipart_chunksize * config.max_in_memory_upload_chunks
        base = _rss()
        max_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if trace:
            tracemalloc.start()
        with _PeakSampler() as sampler:
            t0 = time.perf_counter()
            client.upload_fileobj(_Stream(block, size), BUCKET, key, Config=config)
            t2 = time.perf_counter()
        result.update(seconds=t2 - t0, writer_seconds=t2 - t0)
    else:
        raise ValueError(variant)
    max_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if trace:
        result["traced_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    result["baseline_rss"] = base
    result["peak_sampled"] = max(0, sampler.peak - base)
    # ru_maxrss is the process's high-water mark: it says something about the upload only if the upload raised it.
    result["peak_maxrss"] = max(0, max_after - base) if max_after > max_before else None
    result["peak"] = max(result["peak_sampled"], result["peak_maxrss"] or 0)
    return result


def measure(endpoint: str, variant: str, size: int, repeat: int, *, trace: bool = False) -> dict[str, Any]:
    key = f"w/{variant}-{repeat}-{time.time_ns()}.bin"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(__import__("pathlib").Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-m", "bench.bench_writer", "--child", variant, "--endpoint", endpoint,
                        "--key", key, "--size", str(size)] + (["--trace"] if trace else []), capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"writer child {variant} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["repeat"] = repeat
    out["load"] = os.getloadavg()[0]
    return out


def run(endpoint: str, *, size: int = 1 * GiB, repeats: int = 5, variants: tuple[str, ...] = VARIANTS,
        trace_size: int = 256 * MiB, schedule: Any = interleaved, records: Any = None) -> dict[str, Any]:
    cleaner = make_client(endpoint)
    ensure_bucket(cleaner, BUCKET)
    runs = []
    started = time.perf_counter()
    traced = []
    if trace_size:
        for v in variants:
            t = measure(endpoint, v, min(size, trace_size), -1, trace=True)
            empty_prefix(cleaner, BUCKET, "w/")
            traced.append(t)
            if records is not None:
                records.run(variant=v, pair=-1, size=min(size, trace_size), **{k: x for k, x in t.items() if k not in ("repeat", "variant")})
            log(f"writer: {v:<10} traced: Python heap peak {human_bytes(t['traced_peak'])}, RSS peak +{human_bytes(t['peak'])}")
    for repeat, variant in schedule(variants, repeats):
        r = measure(endpoint, variant, size, repeat)
        empty_prefix(cleaner, BUCKET, "w/")
        runs.append(r)
        if records is not None:
            records.run(pair=repeat, size=size, **{k: x for k, x in r.items() if k != "repeat"})
        log(f"writer: {variant:<10} r{repeat}: {size / r['seconds'] / MiB:7.1f} MiB/s, peak +{human_bytes(r['peak'])} "
            f"(sampled +{human_bytes(r['peak_sampled'])}), load {r['load']:.1f}")
    return {"scenario": "writer", "size": size, "repeats": repeats, "variants": list(variants), "runs": runs,
            "traced": traced, "trace_size": trace_size, "seconds": round(time.perf_counter() - started, 1)}


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    size = data["size"]
    by = {v: sorted((r for r in data["runs"] if r["variant"] == v), key=lambda r: r["repeat"]) for v in data["variants"]}
    rows = {}
    for v, rs in by.items():
        rows[v] = {
            "n": len(rs),
            "seconds": median(r["seconds"] for r in rs),
            "throughput": median(size / r["seconds"] for r in rs),
            "peak": median(r["peak"] for r in rs),
            "peak_max": max(r["peak"] for r in rs),
            "bound": rs[0]["bound"] if rs else None,
            "traced_peak": next((t["traced_peak"] for t in data.get("traced", []) if t["variant"] == v), None),
        }
    out: dict[str, Any] = {"rows": rows, "targets": {}}
    if "mpcommit" in by and "s3transfer" in by:
        mp, st = by["mpcommit"], by["s3transfer"]
        ratio = paired_ratio([size / r["seconds"] for r in mp], [size / r["seconds"] for r in st])
        out["throughput_ratio"] = ratio
        out["throughput_spread"] = ratio_spread([size / r["seconds"] for r in mp], [size / r["seconds"] for r in st])
        out["memory_ratio"] = paired_ratio([r["peak"] for r in mp], [r["peak"] for r in st])
        if by.get("mpcommit10"):
            out["diagnostic_spread"] = ratio_spread([size / r["seconds"] for r in by["mpcommit10"]],
                                                    [size / r["seconds"] for r in st])
        if by.get("s3transfer2"):
            out["equal_spread"] = ratio_spread([size / r["seconds"] for r in mp],
                                               [size / r["seconds"] for r in by["s3transfer2"]])
            out["equal_memory_ratio"] = paired_ratio([r["peak"] for r in mp], [r["peak"] for r in by["s3transfer2"]])
        out["targets"]["throughput_vs_s3transfer"] = {"ratio": ratio, "target": 0.9, "met": ratio >= 0.9,
                                                      "spread": out["throughput_spread"]}
        bound = rows["mpcommit"]["bound"]
        # The bound is about the writer's buffers: judged on the traced Python heap when there is a traced run
        # (RSS also holds thread stacks and the allocator's slack), else on RSS.
        traced = rows["mpcommit"]["traced_peak"]
        judged = traced if traced is not None else rows["mpcommit"]["peak_max"]
        out["targets"]["writer_memory_within_bound"] = {
            "peak_max": rows["mpcommit"]["peak_max"], "traced_peak": traced, "bound": bound, "met": judged <= bound}
    return out


def markdown(data: dict[str, Any]) -> str:
    s = summarise(data)
    rows = []
    for v, r in s["rows"].items():
        rows.append([LABELS.get(v, v), r["n"], f"{r['seconds']:.2f} s", f"{r['throughput'] / MiB:,.1f} MiB/s",
                     human_bytes(r["peak"]), human_bytes(r["peak_max"]),
                     human_bytes(r["traced_peak"]) if r["traced_peak"] is not None else "–",
                     human_bytes(r["bound"]) if r["bound"] else "–"])
    text = md_table(["upload of " + human_bytes(data["size"]), "runs", "time (median)", "throughput (median)",
                     "peak RSS above baseline (median)", "peak RSS (worst run)",
                     f"Python heap peak (tracemalloc, {human_bytes(min(data['size'], data.get('trace_size') or data['size']))})",
                     "buffering by its settings"], rows, align="lrrrrrrr")
    if "throughput_ratio" in s:
        text += (f"\n\nThroughput mpcommit ÷ s3transfer: **{describe_ratio(s['throughput_spread'], 'throughputs')}**; "
                 f"peak memory mpcommit ÷ s3transfer: **{s['memory_ratio']:.2f}x**.")
        if "diagnostic_spread" in s:
            text += (f" With 10 parts in flight (diagnostic) the writer's throughput is "
                     f"{describe_ratio(s['diagnostic_spread'], 'throughputs')} of s3transfer's.")
        if "equal_spread" in s:
            text += (f"\n\nAt equal memory and equal connections (s3transfer with 2 threads and 3 chunks buffered): "
                     f"throughput mpcommit ÷ s3transfer **{describe_ratio(s['equal_spread'], 'throughputs')}**, "
                     f"peak memory {s['equal_memory_ratio']:.2f}x.")
    return text


def depth_summary(data: dict[str, Any]) -> str:
    """Each depth's equal-memory, equal-connections pair, and depth 4 against depth 2 for each side."""
    size = data["size"]
    by = {v: sorted((r for r in data["runs"] if r["variant"] == v), key=lambda r: r["repeat"]) for v in data["variants"]}
    tp = {v: [size / r["seconds"] for r in rs] for v, rs in by.items()}
    out = []
    for a, b, what in (("mpcommit", "s3transfer2", "2 parts in flight: mpcommit ÷ s3transfer"),
                       ("mpcommit4", "s3transfer4", "4 parts in flight: mpcommit ÷ s3transfer"),
                       ("mpcommit4", "mpcommit", "mpcommit, 4 ÷ 2 parts in flight"),
                       ("s3transfer4", "s3transfer2", "s3transfer, 4 ÷ 2 threads")):
        if tp.get(a) and tp.get(b):
            out.append(f"- throughput {what}: **{describe_ratio(ratio_spread(tp[a], tp[b]), 'throughputs')}**")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", choices=tuple(LABELS))
    p.add_argument("--endpoint")
    p.add_argument("--key")
    p.add_argument("--size", type=int)
    p.add_argument("--trace", action="store_true")
    p.add_argument("--network", choices=("raw", "s3"), default="s3", help="standalone run: the network")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--variants", default=",".join(DEPTH_VARIANTS))
    p.add_argument("--backend", default="moto")
    p.add_argument("--name", default="writer_depth")
    p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.endpoint, a.key, a.size, trace=a.trace)))
        return
    # Standalone (issue 12 item 4): ABBA over the variants, on its own server, raw or through the S3-like network.
    from .common import abba, machine_description, save_json, start_server

    from .records import RecordLog
    from tests.support.s3_network import S3_LIKE

    size = a.size or 512 * MiB
    variants = tuple(a.variants.split(","))
    with start_server(a.backend) as server:
        records = RecordLog("writer", directory=a.records, network=a.network, server=server.version,
                            profile=S3_LIKE.to_json() if a.network == "s3" else None)
        meta = {"machine": machine_description(server), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "command": " ".join(sys.argv)}
        if a.network == "s3":
            from tests.support.s3_network import S3_LIKE, S3Network

            with S3Network(server.endpoint_url, S3_LIKE) as net:
                data = run(net.endpoint_url, size=size, repeats=a.repeats, variants=variants, trace_size=64 * MiB,
                           schedule=abba, records=records)
        else:
            data = run(server.endpoint_url, size=size, repeats=a.repeats, variants=variants, trace_size=64 * MiB,
                       schedule=abba, records=records)
    data["meta"], data["network"] = meta, a.network
    save_json(f"{a.name}.{a.network}", data)
    print(markdown(data))
    print(depth_summary(data))


if __name__ == "__main__":
    main()
