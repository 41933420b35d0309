"""What every scenario shares: the S3 server, clients that count their requests, the machine description,
the interleaved schedule, medians and ratios, and the model that projects request counts onto real S3."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCALSTACK_DIR = REPO_ROOT / "localstack"
RESULTS_DIR = REPO_ROOT / "bench" / "results"

ACCESS_KEY = "test"
SECRET_KEY = "test"
REGION = "us-east-1"
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the S3 server
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A running S3 server on the loopback interface. ``stop()`` is idempotent."""

    backend: str
    endpoint_url: str
    version: str
    _stop: Callable[[], None] = field(repr=False)
    pid: int | None = None
    _stopped: bool = field(default=False, repr=False)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server process has used so far; NaN when it cannot be read."""
        return server_cpu_seconds(self.pid)

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._stop()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(backend: str) -> Server:
    """LocalStack (the project's pinned host-mode install, via ``localstack/start.sh``) or moto's server,
    each in its own process so that it does not share the benchmark's interpreter lock."""
    if backend == "localstack":
        return _start_localstack()
    if backend == "moto":
        return _start_moto()
    raise ValueError(f"unknown backend {backend!r}: localstack or moto")


def _start_localstack() -> Server:
    env = dict(os.environ, MPCOMMIT_LS_WATCH_PID=str(os.getpid()))
    last = ""
    for _ in range(3):
        port = free_port()
        r = subprocess.run([str(LOCALSTACK_DIR / "start.sh"), str(port)], capture_output=True, text=True,
                           timeout=600, env=env, stdin=subprocess.DEVNULL)
        if r.returncode == 0:
            endpoint = r.stdout.strip().splitlines()[-1]

            def stop(port: int = port) -> None:
                subprocess.run([str(LOCALSTACK_DIR / "stop.sh"), str(port)], capture_output=True, timeout=120,
                               stdin=subprocess.DEVNULL)
                shutil.rmtree(LOCALSTACK_DIR / "state" / str(port), ignore_errors=True)

            version = _venv_version(LOCALSTACK_DIR / ".venv" / "bin" / "python", "localstack-core")
            try:
                pid: int | None = int((LOCALSTACK_DIR / "state" / str(port) / "pid").read_text().strip())
            except (OSError, ValueError):
                pid = None
            return Server("localstack", endpoint, f"LocalStack {version} (host mode, S3 only)", stop, pid)
        last = r.stderr
        if "already in use" not in r.stderr:
            break
    raise RuntimeError(f"localstack/start.sh failed:\n{last[-3000:]}")


def _start_moto() -> Server:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("moto server exited during startup")
            time.sleep(0.2)
    else:
        proc.kill()
        raise RuntimeError("moto server did not start within 60 s")

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()

    return Server("moto", endpoint, f"moto {metadata.version('moto')} server (separate process)", stop, proc.pid)


def server_cpu_seconds(pid: int | None) -> float:
    """CPU seconds of a process and its children: on shared cores, work done is steadier than wall time."""
    if not pid:
        return float("nan")
    try:
        import psutil

        proc = psutil.Process(pid)
        total = 0.0
        for p in [proc, *proc.children(recursive=True)]:
            t = p.cpu_times()
            total += t.user + t.system
        return total
    except Exception:  # noqa: BLE001 - only a measurement
        return float("nan")


def _venv_version(python: Path, dist: str) -> str:
    try:
        r = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                           capture_output=True, text=True, timeout=60)
        return r.stdout.strip() or "?"
    except Exception:  # noqa: BLE001 - only a label
        return "?"


# ---------------------------------------------------------------- clients and counting
def client_config(max_pool_connections: int = 64) -> Any:
    """The same botocore settings mpcommit's store uses (path style, no botocore retries, checksums only
    where required), so that baselines and mpcommit pay the same per-request client cost."""
    from botocore.config import Config

    return Config(
        s3={"addressing_style": "path"},
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=max_pool_connections,
        connect_timeout=10, read_timeout=300,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


def make_client(endpoint: str, *, max_pool_connections: int = 64, config: Any = None) -> Any:
    import boto3

    session = boto3.session.Session(aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=REGION)
    client = session.client("s3", endpoint_url=endpoint, config=config or client_config(max_pool_connections))
    return unencoded_listings(client)


def unencoded_listings(client: Any) -> Any:
    """List keys without ``EncodingType=url``: LocalStack 4.13.x's encoded listings lose every key past the
    first 1,000 when keys hold '=' (../shared/notes/localstack-host-mode.md), which would flatter any baseline
    that lists. The benchmarks' keys hold nothing that raw XML alters."""
    from botocore.handlers import set_list_objects_encoding_type_url

    for operation in ("ListObjects", "ListObjectsV2"):
        client.meta.events.unregister(f"before-parameter-build.s3.{operation}", set_list_objects_encoding_type_url)
    return client


def s3_options(endpoint: str) -> Any:
    from mpcommit import S3Options

    return S3Options(endpoint_url=endpoint, region=REGION, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)


class RequestMeter:
    """Counts the HTTP requests a botocore (or aiobotocore) client sends, per S3 operation, through its
    ``before-send`` event, and the bytes copied server-side (CopyObject, UploadPartCopy) through
    ``before-call``. ``source_size(bucket, key)`` gives the size of a whole-object copy source."""

    COPY_OPERATIONS = ("CopyObject", "UploadPartCopy")

    def __init__(self, source_size: Callable[[str, str], int] | None = None):
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.copied_bytes = 0
        self._source_size = source_size

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-send.s3", self._on_send)
        for op in self.COPY_OPERATIONS:
            client.meta.events.register(f"before-call.s3.{op}", self._on_copy)
        return client

    def _on_send(self, event_name: str = "", **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        with self._lock:
            self.counts[op] += 1

    def _on_copy(self, params: dict[str, Any] | None = None, **_: Any) -> None:
        params = params or {}
        size = 0
        rng = params.get("CopySourceRange") or params.get("x-amz-copy-source-range")
        if rng:
            lo, hi = str(rng).split("=", 1)[1].split("-")
            size = int(hi) - int(lo) + 1
        elif self._source_size is not None:
            src = params.get("CopySource") or params.get("x-amz-copy-source") or ""
            if isinstance(src, dict):
                size = self._source_size(src.get("Bucket", ""), src.get("Key", ""))
            else:
                bucket, _, key = str(src).lstrip("/").partition("/")
                size = self._source_size(bucket, key)
        with self._lock:
            self.copied_bytes += size

    def snapshot(self) -> tuple[Counter[str], int]:
        with self._lock:
            return Counter(self.counts), self.copied_bytes

    def since(self, before: tuple[Counter[str], int]) -> tuple[Counter[str], int]:
        counts, copied = self.snapshot()
        return counts - before[0], copied - before[1]


def ensure_bucket(client: Any, bucket: str) -> None:
    try:
        client.head_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - not there yet
        client.create_bucket(Bucket=bucket)


def empty_prefix(client: Any, bucket: str, prefix: str, *, threads: int = 8) -> None:
    """Delete every object and abort every upload under ``prefix`` (between runs, never timed)."""
    pending: list[tuple[str, str]] = []
    kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = client.list_multipart_uploads(**kw)
        pending += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", []) or []]
        if not page.get("IsTruncated"):
            break
        kw["KeyMarker"], kw["UploadIdMarker"] = page.get("NextKeyMarker", ""), page.get("NextUploadIdMarker", "")
    if pending:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda u: client.abort_multipart_upload(Bucket=bucket, Key=u[0], UploadId=u[1]), pending))
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", []) or []]
    batches = [keys[i : i + 1000] for i in range(0, len(keys), 1000)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda b: client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in b], "Quiet": True}),
                      batches))


# ---------------------------------------------------------------- schedule and statistics
def interleaved(variants: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, variant) in an order that interleaves the variants and rotates which goes first, so that
    drift in the machine's load (shared cores) falls on every variant alike: ABC BCA CAB ..."""
    order: list[tuple[int, str]] = []
    n = len(variants)
    for r in range(repeats):
        order += [(r, variants[(r + i) % n]) for i in range(n)]
    return order


def abba(variants: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, variant) with each repeat's order mirrored in the next (AB BA AB BA ..., ABC CBA ...): a drift in
    the machine's load that is linear over a pair of repeats falls on every variant alike, which a rotation
    (:func:`interleaved`) only achieves over as many repeats as there are variants."""
    order: list[tuple[int, str]] = []
    for r in range(repeats):
        sequence = list(variants) if r % 2 == 0 else list(reversed(variants))
        order += [(r, v) for v in sequence]
    return order


def bootstrap_ratio_ci(num: Sequence[float], den: Sequence[float], *, confidence: float = 0.95,
                       resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """A percentile-bootstrap confidence interval for the median of per-repeat ratios ``num[i] / den[i]``.

    The pairs are resampled whole (each repeat's two runs shared the machine's load). With fewer than three
    pairs there is nothing to resample: the interval is (nan, nan).
    """
    import random

    pairs = [a / b for a, b in zip(num, den) if b]
    if len(pairs) < 3:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return medians[int(tail * (resamples - 1))], medians[int((1 - tail) * (resamples - 1))]


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else float("nan")


def paired_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """Median of per-repeat ratios: each repeat's variants ran back to back, so the pair shares the load."""
    return median(a / b for a, b in zip(num, den) if b)


def ratio_spread(num: Sequence[float], den: Sequence[float]) -> dict[str, float]:
    """A paired comparison three ways: the median of per-repeat ratios (the headline), their range, and the
    ratio of the two medians. When they disagree, the noise is larger than the difference."""
    pairs = [a / b for a, b in zip(num, den) if b]
    ci_lo, ci_hi = bootstrap_ratio_ci(num, den)
    return {"paired": median(pairs), "lo": min(pairs) if pairs else float("nan"),
            "hi": max(pairs) if pairs else float("nan"), "of_medians": median(num) / median(den) if den else float("nan"),
            "n": len(pairs), "ci_lo": ci_lo, "ci_hi": ci_hi}


def describe_ratio(r: dict[str, float], what: str = "times") -> str:
    if r.get("n", 0) <= 1:
        return f"{r['paired']:.2f}x (one pair)"
    ci = (f"95% CI {r['ci_lo']:.2f}-{r['ci_hi']:.2f}x, " if r.get("ci_lo", float("nan")) == r.get("ci_lo") else "")
    return (f"{r['paired']:.2f}x ({ci}median of {r['n']} per-repeat ratios, which ranged {r['lo']:.2f}-{r['hi']:.2f}x; "
            f"ratio of the median {what} {r['of_medians']:.2f}x)")


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def human_seconds(s: float) -> str:
    if s != s:  # nan
        return "–"
    if s >= 3600:
        return f"{s / 3600:,.1f} h"
    if s >= 120:
        return f"{s / 60:,.1f} min"
    if s >= 1:
        return f"{s:,.2f} s"
    return f"{s * 1000:,.0f} ms"


def parse_size(text: str) -> int:
    from mpcommit.units import parse_size as core_parse

    return int(core_parse(text))


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(headers) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- projection onto real S3
@dataclass(frozen=True)
class S3CostModel:
    """Assumed costs of S3 requests, used to project a protocol's request and copy counts onto real S3.

    A local server copies at memory speed; S3 copies an object at roughly 6-10 MB/s, so copy-based
    protocols look far better locally than they are. The projection of one phase is
    ``sum(count(op) * latency(op) + copied bytes / copy rate) / concurrency``.
    """

    request_latency: float = 0.030      # seconds: HEAD, GET, PUT (small), DELETE, LIST page, Create/Abort upload, UploadPart (small)
    complete_latency: float = 0.080     # seconds: CompleteMultipartUpload of a few parts
    copy_latency: float = 0.050         # seconds: fixed part of CopyObject / UploadPartCopy
    copy_rate: float = 8e6              # bytes/second per object copied (S3: about 6-10 MB/s)
    bulk_delete_latency: float = 0.300  # seconds: DeleteObjects of up to 1,000 keys

    def latency(self, op: str) -> float:
        if op == "CompleteMultipartUpload":
            return self.complete_latency
        if op in RequestMeter.COPY_OPERATIONS:
            return self.copy_latency
        if op == "DeleteObjects":
            return self.bulk_delete_latency
        return self.request_latency

    def phase_seconds(self, counts: dict[str, int], copied_bytes: float, concurrency: int) -> float:
        work = sum(n * self.latency(op) for op, n in counts.items()) + copied_bytes / self.copy_rate
        return work / max(1, concurrency)

    def describe(self) -> str:
        return (f"{self.request_latency * 1000:.0f} ms per small request (HEAD, GET, PUT, DELETE, LIST page, "
                f"Create/Abort upload), {self.complete_latency * 1000:.0f} ms per CompleteMultipartUpload, "
                f"{self.bulk_delete_latency * 1000:.0f} ms per DeleteObjects batch, and per server-side copy "
                f"{self.copy_latency * 1000:.0f} ms plus size / {self.copy_rate / 1e6:.0f} MB/s (S3 copies at "
                "roughly 6-10 MB/s per object)")


# ---------------------------------------------------------------- the machine
def machine_description(server: Server | None = None) -> dict[str, str]:
    import psutil

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "?"

    def ver(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    info = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu,
        "cores": f"{os.cpu_count()} logical (shared with other workloads while measuring)",
        "memory": human_bytes(psutil.virtual_memory().total),
        "os": f"{platform.system()} {platform.release()} ({platform.platform()})",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "boto3": f"boto3 {ver('boto3')}, botocore {ver('botocore')}, s3transfer {ver('s3transfer')}",
        "others": f"s3fs {ver('s3fs')}, fsspec {ver('fsspec')}, pyarrow {ver('pyarrow')}, pyspark {ver('pyspark')}, "
                  f"psutil {ver('psutil')}, mpcommit {ver('mpcommit')}",
        "load": "load average at start %.2f / %.2f / %.2f" % os.getloadavg(),
    }
    if server is not None:
        info["server"] = f"{server.version} at {server.endpoint_url}"
    return info


def save_json(name: str, data: Any) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def start_versitygw(data: Path, cpus: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """versitygw (s3servers/start.sh: its posix backend over ``data``/store -- a tmpfs directory in the benchmarks, so
    that the disk never sets the pace) on a free port, pinned to ``cpus`` when given; (the process, its endpoint)
    once it answers. Stop it with SIGTERM to its process group."""
    import urllib.error
    import urllib.request

    from tests.support.servers import free_port, go_server_problem

    problem = go_server_problem("versitygw")
    if problem:
        raise SystemExit(f"bench: {problem}")
    port = free_port()
    (data / "store").mkdir(parents=True)
    log_file = open(data / "server.log", "wb")
    command = [str(REPO_ROOT / "s3servers" / "start.sh"), "versitygw", str(port), str(data / "store")]
    proc = subprocess.Popen((["taskset", "-c", cpus] if cpus else []) + command, stdout=log_file,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(endpoint + "/", timeout=2)
            break
        except urllib.error.HTTPError:
            break  # 403 to an unsigned request: it answers
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"versitygw exited: {(data / 'server.log').read_text()[-2000:]}")
            time.sleep(0.25)
    return proc, endpoint
