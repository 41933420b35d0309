"""Compaction benchmark: mpcommit's multipart merge against a download-and-rewrite merge of the same files.

Run on demand (not part of the tests)::

    python -m bench.bench_compaction                 # moto's server in this process (EmbeddedS3Server)
    python -m bench.bench_compaction --server localstack --repeats 7
    python -m bench.bench_compaction --server versitygw --network s3 --copy-rate 8MB/s   # a Go server on tmpfs

It starts its own S3 server, writes three datasets (a mix of small and large JSON Lines files, large JSON
Lines files only, and a mix of small and large Parquet files; ``--datasets json-mixed-gib`` adds a gigabyte of
mixed JSON Lines), and compacts fresh copies of each with both variants, in ABBA order, ``--repeats`` times:

* ``multipart``: ``mpcommit.compaction.compact`` -- large sources copied server-side (UploadPartCopy), small
  ones fetched and packed, committed as a job (journal, completes, ETag-pinned source deletes).
* ``rewrite-equal``: download-and-rewrite **on the merge's footing**: the same bins (mpcommit's own planner, Hive's
  rule: as many output files as the merge writes), as many bins at once (4), as many requests in flight as the
  merge's pools allow (32 part threads + 64 copy threads = 96) on as many connections (128); each bin's sources
  downloaded, concatenated (JSON: newline-fixed; Parquet: read and rewritten through pyarrow) and uploaded in
  8 MiB parts, then the sources deleted in pages of 1,000.
* ``rewrite``: the baseline as it was until issue 25 (one output file, 8 connections, phases one after another):
  kept, labelled, because the history's figures were measured against it; not an equal footing.

Both run through boto3 clients instrumented the same way: every request is counted by operation, and the
bytes that cross the client are summed (request bodies out, response bodies in, from Content-Length). Times
are wall-clock medians; ratios are medians of per-repeat ratios with their range and a bootstrap interval.
``--network s3`` puts the S3-like network (``tests/support/s3_network.py``, profile ``s3``) in front of the server.
Results, with the machine and the date, go to ``bench/results/compaction.md``; one JSON line per run (server and
proxy CPU included) to ``bench/results/compaction.jsonl`` (``--records DIR`` elsewhere).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as dt
import io
import json
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from botocore.config import Config

from bench.common import abba, describe_ratio, ratio_spread, unencoded_listings
from mpcommit.compaction import compact
from mpcommit.options import RetryPolicy, S3Options
from mpcommit.store.s3 import S3Store

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "compaction.md"
MiB = 1024 * 1024
PART = 8 * MiB


def log(msg: str) -> None:
    print(f"[bench_compaction {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- instrumented clients
@dataclass
class Meter:
    """Requests by operation and bytes through the client, fed by botocore's events. Thread-safe."""

    requests: Counter = field(default_factory=Counter)
    sent: int = 0
    received: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-send.s3", self._before_send)
        client.meta.events.register("after-call.s3", self._after_call)
        return client

    def _before_send(self, request: Any, event_name: str = "", **_: Any) -> None:
        body = request.body
        size = len(body) if isinstance(body, (bytes, bytearray)) else (int(request.headers.get("Content-Length", 0) or 0))
        with self._lock:
            self.requests[event_name.rsplit(".", 1)[-1]] += 1
            self.sent += size

    def _after_call(self, http_response: Any = None, event_name: str = "", **_: Any) -> None:
        # A HEAD response carries the object's Content-Length but no body.
        if http_response is None or event_name.endswith(".HeadObject"):
            return
        size = int(http_response.headers.get("content-length", 0) or 0)
        with self._lock:
            self.received += size

    @property
    def through_client(self) -> int:
        return self.sent + self.received


def make_client(endpoint: str, meter: Meter | None = None, *, connections: int = 32) -> Any:
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    client = session.client("s3", endpoint_url=endpoint, config=Config(
        s3={"addressing_style": "path"}, retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=connections, request_checksum_calculation="when_required",
        response_checksum_validation="when_required"))
    client = unencoded_listings(client)
    return meter.attach(client) if meter else client


# ---------------------------------------------------------------- servers
@dataclass
class Server:
    endpoint: str
    description: str
    stop: Callable[[], None]
    pid: int | None = None


def start_server(kind: str) -> Server:
    if kind == "versitygw":
        # The Go server on tmpfs: with the S3-like network in front, the model's latency and copy rate -- not the
        # server, as LocalStack did in every sensitivity run (77-99% of its answers late) -- set the pace.
        import signal
        import tempfile

        from bench.common import start_versitygw

        data = Path(tempfile.mkdtemp(prefix="mpcommit-bench-compaction-",
                                     dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        proc, endpoint = start_versitygw(data)

        def stop_versitygw() -> None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
            shutil.rmtree(data, ignore_errors=True)

        from tests.support.servers import go_server_binary

        built = go_server_binary("versitygw")  # ~/.cache/mpcommit/versitygw-VERSION/...: the version it was built at
        name = next((p.name for p in (built.parents if built else []) if p.name.startswith("versitygw-")), "versitygw")
        return Server(endpoint, f"{name} (posix backend on tmpfs, separate process)",
                      stop_versitygw, proc.pid)
    if kind == "embedded":
        from mpcommit.demo.embedded_s3 import EmbeddedS3Server

        srv = EmbeddedS3Server().start()
        version = metadata.version("moto")
        return Server(srv.endpoint_url, f"moto {version} server in the benchmark's process (EmbeddedS3Server)", srv.stop)
    port = _free_port()
    start = subprocess.run([str(REPO / "localstack" / "start.sh"), str(port)], capture_output=True, text=True,
                           timeout=600, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, MPCOMMIT_LS_WATCH_PID=str(os.getpid())))
    if start.returncode != 0:
        raise RuntimeError(f"localstack/start.sh failed:\n{start.stderr[-2000:]}")

    def stop() -> None:
        subprocess.run([str(REPO / "localstack" / "stop.sh"), str(port)], capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
        shutil.rmtree(REPO / "localstack" / "state" / str(port), ignore_errors=True)

    try:
        pid: int | None = int((REPO / "localstack" / "state" / str(port) / "pid").read_text().strip())
    except (OSError, ValueError):
        pid = None
    return Server(start.stdout.strip().splitlines()[-1], "LocalStack 4.13.1 (host mode, S3 only, separate process)", stop,
                  pid)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- datasets
def json_lines(size: int, seed: int) -> bytes:
    """Random JSON Lines of about ``size`` bytes (incompressible padding, like real payloads)."""
    rnd = random.Random(seed)
    out = bytearray()
    i = 0
    while len(out) < size:
        pad = base64.b64encode(rnd.getrandbits(768).to_bytes(96, "big")).decode()
        out += json.dumps({"id": f"{seed}-{i}", "v": rnd.random(), "pad": pad}).encode() + b"\n"
        i += 1
    return bytes(out)


def json_lines_fast(size: int, seed: int) -> bytes:
    """Like :func:`json_lines` with 2 KiB of padding per line: a gigabyte in seconds, few lines to check."""
    rnd = random.Random(seed)
    out = bytearray()
    i = 0
    while len(out) < size:
        pad = base64.b64encode(rnd.randbytes(1536)).decode()
        out += json.dumps({"id": f"{seed}-{i}", "pad": pad}).encode() + b"\n"
        i += 1
    return bytes(out)


def parquet_file(rows: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    table = pa.table({"id": pa.array(range(seed * 10_000_000, seed * 10_000_000 + rows), pa.int64()),
                      "v": pa.array([rnd.getrandbits(63) for _ in range(rows)], pa.int64())})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", row_group_size=256_000)
    return sink.getvalue()


@dataclass
class Dataset:
    name: str
    description: str
    files: dict[str, bytes]
    kind: str  # "json" | "parquet"

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.files.values())

    @property
    def large_bytes(self) -> int:
        return sum(len(v) for v in self.files.values() if len(v) >= 5 * MiB)


def gib_sizes(scale: int = 1) -> dict[str, tuple[int, int]]:
    """The files of :func:`gib_dataset` by name: (size, seed) each."""
    sizes = {f"l{i:04d}.json": (random.Random(1000 + i).randint(6, 16) * MiB, 1000 + i) for i in range(70 * scale)}
    sizes.update({f"s{i:04d}.json": (random.Random(5000 + i).randint(10, 400) * 1024, 5000 + i)
                  for i in range(700 * scale)})
    return sizes


def gib_dataset(scale: int = 1) -> Dataset:
    """About ``scale`` gigabytes of JSON Lines: 70 files of 6-16 MiB and 700 of 10-400 KiB per gigabyte (four bins
    of Hive's 256 MB per gigabyte)."""
    large, small = 70 * scale, 700 * scale
    files = {name: json_lines_fast(size, seed) for name, (size, seed) in gib_sizes(scale).items()}
    name = "json-mixed-gib" if scale == 1 else f"json-mixed-{scale}gib"
    return Dataset(name, f"JSON Lines: {large} files of 6-16 MiB and {small} of 10-400 KiB", files, "json")


def gib_scale(name: str) -> int | None:
    """The scale of a :func:`gib_dataset` named ``name`` (``json-mixed-gib``: 1, ``json-mixed-3gib``: 3); None for
    another name. ``json-mixed-2gib`` is 1.8 GiB (1.9 GB): the first of them past 2 GiB is ``json-mixed-3gib``."""
    if name == "json-mixed-gib":
        return 1
    match = re.fullmatch(r"json-mixed-([2-9])gib", name)
    return int(match.group(1)) if match else None


def datasets(scale: float) -> list[Dataset]:
    def sz(n: float) -> int:
        return max(1024, int(n * scale))

    mixed = {f"l{i:02d}.json": json_lines(sz(m * MiB), 100 + i) for i, m in enumerate((6, 7, 9, 12))}
    mixed.update({f"s{i:02d}.json": json_lines(sz(random.Random(i).randint(10, 400) * 1024), i) for i in range(60)})
    large = {f"l{i:02d}.json": json_lines(sz(m * MiB), 200 + i) for i, m in enumerate((6, 8, 10, 13, 16))}
    pq_files = {"l00.parquet": parquet_file(int(420_000 * scale), 1), "l01.parquet": parquet_file(int(560_000 * scale), 2)}
    pq_files.update({f"s{i:02d}.parquet": parquet_file(2000 + 300 * i, 10 + i) for i in range(20)})
    return [
        Dataset("json-mixed", "JSON Lines: 4 files of 6-12 MiB and 60 of 10-400 KiB", mixed, "json"),
        Dataset("json-large", "JSON Lines: 5 files of 6-16 MiB (every source >= 5 MiB)", large, "json"),
        Dataset("parquet-mixed", "Parquet (uncompressed int64): 2 files of 6-9 MiB and 20 small ones", pq_files, "parquet"),
    ]


# ---------------------------------------------------------------- the two variants
@dataclass
class Run:
    variant: str
    dataset: str
    seconds: float
    requests: Counter
    through_client: int
    data: int
    rows_ok: bool
    store_requests: int | None = None  # S3Store.request_counts(), a cross-check of the wire count
    copied: int = 0  # bytes copied server-side
    timings: dict[str, float] = field(default_factory=dict)  # the compaction's own phases (multipart)
    outputs: int = 1
    late: float | None = None  # share of answers the S3-like network's proxy found late (the server's own time)
    max_in_flight: int | None = None

    @property
    def request_total(self) -> int:
        return sum(self.requests.values())


def run_multipart(endpoint: str, bucket: str, prefix: str, ds: Dataset) -> Run:
    meter = Meter()
    options = S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test",
                        retry=RetryPolicy(max_attempts=3, initial_delay=0.05, max_delay=1.0))
    # Enough connections for the copies in flight (64), the part threads and the planning reads.
    store = S3Store(options, client=make_client(endpoint, meter, connections=128))
    t0 = time.perf_counter()
    report = compact(f"s3://{bucket}/{prefix}", s3=options, store=store)
    seconds = time.perf_counter() - t0
    if not report.merged or report.skipped:
        raise RuntimeError(f"expected every bin merged, got {report.to_json()}")
    run = Run("multipart", ds.name, seconds, meter.requests, meter.through_client, ds.size, True)
    run.store_requests = sum(store.request_counts().values())
    run.copied = report.stats.get("copied", 0)
    run.timings = dict(report.timings)
    run.outputs = len(report.merged)
    return run


def run_rewrite(endpoint: str, bucket: str, prefix: str, ds: Dataset, threads: int = 8) -> Run:
    """Download every source, merge locally, upload the result, delete the sources -- with plain boto3, on
    ``threads`` connections."""
    meter = Meter()
    client = make_client(endpoint, meter, connections=max(32, threads))
    t0 = time.perf_counter()
    keys = sorted(o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
                  for o in page.get("Contents", []))
    with ThreadPoolExecutor(threads) as pool:
        bodies = list(pool.map(lambda k: client.get_object(Bucket=bucket, Key=k)["Body"].read(), keys))
    if ds.kind == "json":
        merged = b"".join(b if b.endswith(b"\n") or not b else b + b"\n" for b in bodies)
    else:
        table = pa.concat_tables([pq.read_table(pa.BufferReader(b)) for b in bodies])
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="none", row_group_size=1 << 20)
        merged = sink.getvalue()
    out = f"{prefix}/merged.{ds.kind}"
    upload = client.create_multipart_upload(Bucket=bucket, Key=out)["UploadId"]

    def part(n: int) -> dict[str, Any]:
        body = merged[(n - 1) * PART : n * PART]
        return {"PartNumber": n, "ETag": client.upload_part(Bucket=bucket, Key=out, UploadId=upload, PartNumber=n,
                                                            Body=body)["ETag"]}

    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(part, range(1, -(-len(merged) // PART) + 1)))
    client.complete_multipart_upload(Bucket=bucket, Key=out, UploadId=upload, MultipartUpload={"Parts": parts})
    for i in range(0, len(keys), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True})
    seconds = time.perf_counter() - t0
    return Run("rewrite", ds.name, seconds, meter.requests, meter.through_client, ds.size, True)


#: The merge's footing (mpcommit.compaction defaults): bins merged at once, requests in flight (part threads +
#: copy threads), connections of its client (run_multipart).
EQUAL_BIN_THREADS = 4
EQUAL_THREADS = 32 + 64
EQUAL_CONNECTIONS = 128


def run_rewrite_equal(endpoint: str, bucket: str, prefix: str, ds: Dataset, *, threads: int = EQUAL_THREADS,
                      bin_threads: int = EQUAL_BIN_THREADS, connections: int = EQUAL_CONNECTIONS,
                      policy: Any = None) -> Run:
    """Download-and-rewrite on the merge's footing: the merge's bins (its own planner), ``bin_threads`` bins at
    once, every download and part upload of every bin on one pool of ``threads`` threads, ``connections``
    connections; then the sources deleted in pages of 1,000."""
    from mpcommit.compaction.planner import Candidate, MergePolicy, plan_bins

    meter = Meter()
    client = make_client(endpoint, meter, connections=connections)
    t0 = time.perf_counter()
    listed = [(o["Key"], o["Size"]) for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
              for o in page.get("Contents", [])]
    bins = plan_bins([Candidate(key, size, partition="", group=ds.kind) for key, size in listed], policy or MergePolicy())
    timings: dict[str, float] = {"plan": time.perf_counter() - t0}
    requests = ThreadPoolExecutor(threads, thread_name_prefix="rewrite-req")

    def one_bin(n_bin: tuple[int, Any]) -> None:
        n, b = n_bin
        bodies = list(requests.map(lambda k: client.get_object(Bucket=bucket, Key=k)["Body"].read(), b.keys))
        if ds.kind == "json":
            merged = b"".join(x if x.endswith(b"\n") or not x else x + b"\n" for x in bodies)
        else:
            table = pa.concat_tables([pq.read_table(pa.BufferReader(x)) for x in bodies])
            sink = io.BytesIO()
            pq.write_table(table, sink, compression="none", row_group_size=1 << 20)
            merged = sink.getvalue()
        del bodies
        out = f"{prefix}/merged-{n:04d}.{ds.kind}"
        upload = client.create_multipart_upload(Bucket=bucket, Key=out)["UploadId"]
        view = memoryview(merged)

        def part(i: int) -> dict[str, Any]:
            etag = client.upload_part(Bucket=bucket, Key=out, UploadId=upload, PartNumber=i,
                                      Body=bytes(view[(i - 1) * PART: i * PART]))["ETag"]
            return {"PartNumber": i, "ETag": etag}

        parts = list(requests.map(part, range(1, -(-len(merged) // PART) + 1)))
        client.complete_multipart_upload(Bucket=bucket, Key=out, UploadId=upload, MultipartUpload={"Parts": parts})

    try:
        with ThreadPoolExecutor(bin_threads, thread_name_prefix="rewrite-bin") as pool:
            list(pool.map(one_bin, enumerate(bins)))
        timings["merge"] = time.perf_counter() - t0 - timings["plan"]
        t = time.perf_counter()
        merged_keys = [k for b in bins for k in b.keys]
        pages = [merged_keys[i: i + 1000] for i in range(0, len(merged_keys), 1000)]
        list(requests.map(lambda page: client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in page], "Quiet": True}), pages))
        timings["delete"] = time.perf_counter() - t
    finally:
        requests.shutdown(wait=True)
    seconds = time.perf_counter() - t0
    run = Run("rewrite-equal", ds.name, seconds, meter.requests, meter.through_client, ds.size, True)
    run.outputs = len(bins)
    run.timings = timings
    return run


def verify(client: Any, bucket: str, prefix: str, ds: Dataset, expected: Any) -> bool:
    """The merged prefix holds exactly the sources' rows (checked outside the timed section)."""
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
            for o in page.get("Contents", []) if "/_" not in o["Key"]]
    if not keys or any(k.rsplit("/", 1)[-1] in ds.files for k in keys):
        return False  # no output, or a source left
    ids: list[Any] = []
    for key in keys:
        data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        if ds.kind == "json":
            ids += [json.loads(line)["id"] for line in data.splitlines()]
        else:
            ids += pq.read_table(pa.BufferReader(data)).column("id").to_pylist()
    return sorted(ids) == expected


def expected_rows(ds: Dataset) -> Any:
    if ds.kind == "json":
        return sorted(json.loads(line)["id"] for b in ds.files.values() for line in b.splitlines())
    return sorted(i for b in ds.files.values() for i in pq.read_table(pa.BufferReader(b)).column("id").to_pylist())


# ---------------------------------------------------------------- the run
def machine() -> dict[str, str]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")).split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    load = ""
    try:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        pass
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(), "os": f"{platform.system()} {platform.release()}", "cpu": cpu,
        "cores": str(os.cpu_count()), "memory": mem, "load average at start": load,
        "python": platform.python_version(), "pyarrow": pa.__version__, "boto3": metadata.version("boto3"),
        "mpcommit": metadata.version("mpcommit"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=("embedded", "localstack", "versitygw"), default="embedded")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="scale the large files (keep >= 1 for the 5 MiB rule)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--endpoint", help="use this running S3 endpoint (e.g. the S3-like network's proxy) instead of "
                                       "starting a server; --server then only names it")
    ap.add_argument("--endpoint-description", default="", help="what --endpoint is, for the report")
    ap.add_argument("--datasets", default="json-mixed,json-large,parquet-mixed",
                    help="comma-separated: json-mixed, json-large, parquet-mixed, json-mixed-gib (about 1 GB of JSON Lines), "
                         "json-mixed-Ngib (N = 2..9: N times as much; 3 is the first past 2 GiB)")
    ap.add_argument("--network", choices=("none", "s3"), default="none",
                    help="s3: put the S3-like network (tests/support/s3_network.py, profile s3) in front of the server")
    ap.add_argument("--copy-rate", default=None,
                    help="with --network s3: the model's server-side copy rate instead of its 8 MB/s (e.g. 25MB/s), "
                         "for the sensitivity table")
    ap.add_argument("--host-bandwidth", default=None,
                    help="with --network s3: a cap on the client host's link, all connections together, each way "
                         "(e.g. 1250MB/s: 10 Gb/s), for the sensitivity table")
    ap.add_argument("--rewrite-threads", type=int, default=8, help="connections of the old rewrite baseline (rewrite)")
    ap.add_argument("--variants", default="multipart,rewrite-equal",
                    help="comma-separated: multipart, rewrite-equal (the merge's footing), rewrite (the old baseline)")
    ap.add_argument("--allow-few-repeats", action="store_true", help="allow --repeats below 5 (smoke runs only)")
    ap.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    args = ap.parse_args(argv)
    if args.repeats < 5 and not args.allow_few_repeats:
        ap.error("--repeats must be at least 5 (medians over fewer runs are noise); --allow-few-repeats for a smoke run")
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    if set(variants) - {"multipart", "rewrite-equal", "rewrite"}:
        ap.error(f"unknown variants in {args.variants!r}")

    info = machine()
    if args.endpoint:
        server = Server(args.endpoint, args.endpoint_description or f"{args.server} at {args.endpoint}", lambda: None)
    else:
        log(f"starting the {args.server} server")
        server = start_server(args.server)
    profile = None
    if args.network == "s3":
        from tests.support.s3_network import S3_LIKE, S3Network, parse_rate

        profile = S3_LIKE
        if args.copy_rate or args.host_bandwidth:
            rate = parse_rate(args.copy_rate) if args.copy_rate else S3_LIKE.copy_rate
            host = parse_rate(args.host_bandwidth) if args.host_bandwidth else None
            name = f"s3, copies at {(rate or 0) / 1e6:g} MB/s" + (f", host link {host * 8 / 1e9:g} Gb/s" if host else "")
            profile = dataclasses.replace(S3_LIKE, name=name, copy_rate=rate, host_bandwidth=host)
        net = S3Network(server.endpoint, profile).start()
        stop_server = server.stop
        server_pid = server.pid

        def stop_both() -> None:
            net.stop()
            stop_server()

        server = Server(net.endpoint_url, f"{server.description}, through the S3-like network ({profile.describe()})",
                        stop_both, server_pid)
    try:
        client = make_client(server.endpoint)
        bucket = f"bench-compaction-{random.Random().getrandbits(40):010x}"
        client.create_bucket(Bucket=bucket)
        runs: list[Run] = []
        wanted = [n.strip() for n in args.datasets.split(",") if n.strip()]
        scales = {name: gib_scale(name) for name in wanted}
        known = {d.name: d for d in datasets(args.scale)} if any(v is None for v in scales.values()) else {}
        known.update({name: gib_dataset(scale) for name, scale in scales.items() if scale is not None})
        from bench.records import RecordLog
        from bench.common import server_cpu_seconds

        records = RecordLog("compaction", directory=args.records, network=args.network,
                            profile=profile.to_json() if profile is not None else None, server=server.description,
                            footing={"rewrite-equal": {"bins_at_once": EQUAL_BIN_THREADS, "threads": EQUAL_THREADS,
                                                       "connections": EQUAL_CONNECTIONS},
                                     "multipart": {"bins_at_once": 4, "part_threads": 32, "copy_threads": 64,
                                                   "connections": 128},
                                     "rewrite": {"threads": args.rewrite_threads, "connections": max(32, args.rewrite_threads),
                                                 "outputs": 1}})
        unknown = [n for n in wanted if n not in known]
        if unknown:
            ap.error(f"unknown datasets {unknown}")
        sets = [known[n] for n in wanted]
        # Setting up and checking goes straight to the server when there is a network in front of it.
        direct = make_client(server.endpoint if args.network == "none" else net.upstream, connections=32)
        for ds in sets:
            log(f"{ds.name}: {len(ds.files)} files, {ds.size / MiB:.1f} MiB")
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda kv: direct.put_object(Bucket=bucket, Key=f"src/{ds.name}/{kv[0]}", Body=kv[1]),
                              ds.files.items()))
            expected = expected_rows(ds)
            for r, variant in abba(variants, args.repeats):
                prefix = f"run/{ds.name}/{variant}-{r}"
                with ThreadPoolExecutor(8) as pool:  # a fresh copy, server-side, outside the timed section
                    list(pool.map(lambda name: direct.copy_object(
                        Bucket=bucket, Key=f"{prefix}/{name}", CopySource={"Bucket": bucket, "Key": f"src/{ds.name}/{name}"}),
                        ds.files))
                proxy_cpu = server_cpu = None
                if args.network == "s3":
                    net.reset()
                    p0 = net.stats()["cpu_seconds"]
                s0 = server_cpu_seconds(server.pid)
                c0 = time.process_time()
                if variant == "multipart":
                    result = run_multipart(server.endpoint, bucket, prefix, ds)
                elif variant == "rewrite-equal":
                    result = run_rewrite_equal(server.endpoint, bucket, prefix, ds)
                else:
                    result = run_rewrite(server.endpoint, bucket, prefix, ds, args.rewrite_threads)
                client_cpu = time.process_time() - c0
                server_cpu = server_cpu_seconds(server.pid) - s0
                throttled = 0
                if args.network == "s3":
                    totals = net.stats()
                    result.late = totals["totals"]["late"] / max(1, totals["totals"]["requests"])
                    result.max_in_flight = int(totals["max_in_flight"])
                    proxy_cpu = totals["cpu_seconds"] - p0
                    throttled = int(totals["totals"].get("throttled", 0))
                result.rows_ok = verify(direct, bucket, prefix, ds, expected)
                runs.append(result)
                records.run(variant=variant, dataset=ds.name, pair=r, seconds=result.seconds, data_bytes=ds.size,
                            sources=len(ds.files), outputs=result.outputs, requests=dict(result.requests),
                            requests_total=result.request_total, through_client=result.through_client,
                            copied=result.copied, rows_ok=result.rows_ok, timings=result.timings, late=result.late,
                            max_in_flight=result.max_in_flight, client_cpu_s=client_cpu, server_cpu_s=server_cpu,
                            proxy_cpu_s=proxy_cpu, throttled=throttled, load=os.getloadavg()[0])
                log(f"  {variant:9s} #{r}: {result.seconds:6.2f} s, {result.request_total:4d} requests, "
                    f"{result.through_client / MiB:7.2f} MiB through the client, rows ok: {result.rows_ok}"
                    + (f", phases {result.timings}" if result.timings else "")
                    + (f", late answers {result.late:.0%}, at most {result.max_in_flight} in flight"
                       if result.late is not None else ""))
                # The run's objects go, so that a gigabyte per run does not pile up in the server.
                for page in direct.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
                    keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    if keys:
                        direct.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        text = report(args, info, server.description, sets, runs)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(text)
        log(f"written {args.out}")
        bad = [r for r in runs if not r.rows_ok]
        large_ok = all(r.through_client < 0.01 * r.data for r in runs if r.variant == "multipart" and r.dataset == "json-large")
        (args.out.with_suffix(".json")).write_text(json.dumps([
            {"variant": r.variant, "dataset": r.dataset, "seconds": r.seconds, "requests": dict(r.requests),
             "throughClient": r.through_client, "copied": r.copied, "rowsOk": r.rows_ok, "timings": r.timings,
             "outputs": r.outputs, "late": r.late, "maxInFlight": r.max_in_flight} for r in runs], indent=1))
        return 0 if not bad and large_ok else 1
    finally:
        server.stop()


def _median(values: list[float]) -> float:
    return statistics.median(values)


def report(args: argparse.Namespace, info: dict[str, str], server: str, sets: list[Dataset], runs: list[Run]) -> str:
    lines = ["# Compaction: multipart merge vs download-and-rewrite", ""]
    lines += ["Produced by `python -m bench.bench_compaction " + " ".join(sys.argv[1:]) + "` "
              f"(medians over {args.repeats} interleaved repeats per variant; each run compacts a fresh copy).", ""]
    lines += ["## Machine", ""] + [f"- {k}: {v}" for k, v in info.items()] + [f"- S3 server: {server}", ""]
    lines += ["## Datasets", ""]
    for ds in sets:
        lines.append(f"- **{ds.name}**: {ds.description}; {len(ds.files)} files, {ds.size / MiB:.1f} MiB "
                     f"({ds.large_bytes / MiB:.1f} MiB in sources >= 5 MiB)")
    lines += ["", "## Results (medians)", "",
              "| dataset | variant | time (s) | requests | through the client (MiB) | through the client / data | rows exact |",
              "|---|---|---:|---:|---:|---:|---|"]
    summary: dict[tuple[str, str], dict[str, float]] = {}
    present = [v for v in ("multipart", "rewrite-equal", "rewrite") if any(r.variant == v for r in runs)]
    for ds in sets:
        for variant in present:
            rs = [r for r in runs if r.dataset == ds.name and r.variant == variant]
            s = {"time": _median([r.seconds for r in rs]), "requests": _median([r.request_total for r in rs]),
                 "bytes": _median([r.through_client for r in rs])}
            summary[(ds.name, variant)] = s
            lines.append(f"| {ds.name} | {variant} | {s['time']:.2f} | {s['requests']:.0f} | {s['bytes'] / MiB:.2f} | "
                         f"{s['bytes'] / ds.size:.2%} | {'yes' if all(r.rows_ok for r in rs) else 'NO'} |")
    lines += ["", "## Ratios (multipart / each rewrite)", "",
              "Time: the median of per-repeat ratios (each repeat's two runs back to back, ABBA order), its 95% "
              "bootstrap interval and range, and the ratio of the medians. Below 1.0x the merge is faster; the "
              "speed-up is the inverse.", "",
              "| dataset | against | time | time, with spread | speed-up (rewrite / merge) | requests | bytes through the client |",
              "|---|---|---:|---|---:|---:|---:|"]
    for ds in sets:
        if "multipart" not in present:
            break
        for base in (v for v in present if v != "multipart"):
            m, w = summary[(ds.name, "multipart")], summary[(ds.name, base)]
            mt = [r.seconds for r in runs if r.dataset == ds.name and r.variant == "multipart"]
            wt = [r.seconds for r in runs if r.dataset == ds.name and r.variant == base]
            spread = ratio_spread(mt, wt)
            lines.append(f"| {ds.name} | {base} | {spread['paired']:.2f} | {describe_ratio(spread)} | "
                         f"{1 / spread['paired']:.2f}x | {m['requests'] / w['requests']:.2f} | {m['bytes'] / w['bytes']:.4f} |")
    lines += ["", "## The merge's phases (medians, seconds)", "", "| dataset | plan | merge | verify | commit | total |",
              "|---|---:|---:|---:|---:|---:|"]
    for ds in sets:
        rs = [r for r in runs if r.dataset == ds.name and r.variant == "multipart"]
        if not rs:
            continue
        cells = [f"{_median([r.timings.get(k, 0.0) for r in rs]):.2f}" for k in ("plan", "merge", "verify", "commit", "total")]
        lines.append(f"| {ds.name} ({rs[0].outputs} merged files) | " + " | ".join(cells) + " |")
    lines += ["", "## Requests by operation (median run of each)", ""]
    for ds in sets:
        for variant in present:
            rs = sorted((r for r in runs if r.dataset == ds.name and r.variant == variant), key=lambda r: r.seconds)
            mid = rs[len(rs) // 2]
            ops = ", ".join(f"{op} {n}" for op, n in sorted(mid.requests.items()))
            check = f" (S3Store.request_counts(): {mid.store_requests})" if mid.store_requests is not None else ""
            copied = f"; {mid.copied / MiB:.1f} MiB copied server-side" if mid.copied else ""
            late = (f"; the proxy found {mid.late:.0%} of the answers late, at most {mid.max_in_flight} requests in "
                    "flight" if mid.late is not None else "")
            lines.append(f"- {ds.name} / {variant}: {ops}{check}{copied}{late}")
    large = [r for r in runs if r.dataset == "json-large" and r.variant == "multipart"]
    if large:
        worst = max(r.through_client / r.data for r in large)
        lines += ["", "## The 5 MiB rule", "",
                  f"For sources of 5 MiB and more (json-large), the multipart merge moved at most {worst:.3%} of the "
                  f"data through the client in any run (requirement: under 1%): "
                  f"{'met' if worst < 0.01 else 'NOT met'}. What remains is the 1-byte newline probe per source, the "
                  "job's records (descriptor, manifest, journal, _SUCCESS) and the listing."]
    lines += ["",
              "## Notes", "",
              "- Bytes through the client are counted on the wire for both variants (request bodies sent, response "
              "Content-Length received, HEAD responses excluded as they carry no body), with the same botocore event "
              "hooks; requests are counted per operation the same way.",
              "- On a loopback server, copying and downloading both run at memory speed, so the time ratio understates "
              "the gain on a real network, where a server-side copy moves no bytes over the client's link at all.",
              "- The multipart variant does more than the rewrite baseline for safety: a job descriptor, a task "
              "manifest per bin, a commit journal, a re-check of the sources before the commit (a listing per "
              "directory), a HEAD before each ETag-pinned source delete, _SUCCESS, and the cleanup of the job's "
              "records. Those account for its extra small requests. Parquet sources are read twice when small "
              "(footer, then data) and once (footer only) when copied.",
              "- Times on a shared, loaded machine (see the load average) are noisy; bytes and requests are exact.",
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
