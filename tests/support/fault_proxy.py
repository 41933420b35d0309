"""A small fault-injecting HTTP proxy on 127.0.0.1 in front of an S3 server (moto or LocalStack).

Point a client's ``endpoint_url`` at :attr:`FaultProxy.endpoint_url`; every request is classified by its S3
operation (``UploadPart``, ``CompleteMultipartUpload``, ``ListObjectsV2``, ...) and, at the rate set for that
class, answered with a fault instead of being forwarded:

- ``SLOW_DOWN``: 503 SlowDown (S3's throttling answer);
- ``INTERNAL_ERROR``: 500 InternalError;
- ``DROP``: the connection is closed before the request reaches the server;
- ``DROP_AFTER``: the request is forwarded and applied, then the connection is closed without an answer
  (the nastiest case: the client cannot tell whether its request took effect);
- ``INVALID_ACCESS_KEY``: 403 InvalidAccessKeyId, as S3 answers unknown credentials;
- ``ACCESS_DENIED``: 403 AccessDenied, as S3 answers credentials that lack a permission.

Decisions are deterministic for a seed: whether the n-th occurrence of a request is faulted is a hash of the seed,
the request (method, key, query without the random upload id) and n -- not of the order in which threads happen
to send requests. The proxy is bounded (``max_faults`` in total, at most ``max_consecutive`` faults in a row for
one request) and self-stopping (it shuts itself down after ``lifetime`` seconds, and on ``stop()`` / leaving
the ``with`` block). It only listens on 127.0.0.1.

It also records the headers of every request (``record_headers=True``), so that tests can inspect what the
client really sent (e.g. encryption and bucket-owner headers).
"""

from __future__ import annotations

import enum
import hashlib
import http.client
import re
import socket
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["Fault", "FaultProxy", "FaultRule", "REQUEST_CLASSES", "classify"]


class Fault(enum.Enum):
    SLOW_DOWN = "503 SlowDown"
    INTERNAL_ERROR = "500 InternalError"
    DROP = "dropped before the server"
    DROP_AFTER = "dropped after the server applied it"
    INVALID_ACCESS_KEY = "403 InvalidAccessKeyId"
    ACCESS_DENIED = "403 AccessDenied"


TRANSIENT = (Fault.SLOW_DOWN, Fault.INTERNAL_ERROR, Fault.DROP, Fault.DROP_AFTER)

REQUEST_CLASSES = (
    "HeadBucket", "HeadObject", "GetObject", "ListObjectsV2", "ListObjects", "ListMultipartUploads", "ListParts",
    "PutObject", "CopyObject", "CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload",
    "AbortMultipartUpload", "DeleteObject", "DeleteObjects", "CreateBucket", "DeleteBucket", "BucketConfig",
)


@dataclass(frozen=True)
class FaultRule:
    """Fault ``rate`` (0..1) of the requests of one class, drawing the kind of fault from ``kinds``."""

    rate: float
    kinds: tuple[Fault, ...] = TRANSIENT

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0 or not self.kinds:
            raise ValueError("FaultRule needs 0 <= rate <= 1 and at least one kind")


_ERRORS = {
    Fault.SLOW_DOWN: (503, "Service Unavailable", "SlowDown", "Please reduce your request rate."),
    Fault.INTERNAL_ERROR: (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
    Fault.INVALID_ACCESS_KEY: (403, "Forbidden", "InvalidAccessKeyId",
                               "The AWS Access Key Id you provided does not exist in our records."),
    Fault.ACCESS_DENIED: (403, "Forbidden", "AccessDenied", "Access Denied"),
}
# Random parts of keys that would make decisions differ from run to run: mpcommit's per-attempt nonce
# (``task-00001-a0-1f2e3d4c``). Upload ids are left out of signatures altogether.
_VOLATILE = re.compile(r"(task-\d+-a\d+-)[0-9a-f]{8}")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade", "expect"}


def classify(method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    """The S3 operation of a path-style request."""
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


class FaultProxy:
    """Forward HTTP requests to ``upstream`` (``http://host:port``), faulting some of them per class.

    ``rules`` maps a request class to a :class:`FaultRule`; ``default`` applies to the classes not named.
    Change them while running with :meth:`configure` (e.g. ``configure(default=None)`` stops all faults).
    """

    def __init__(
        self,
        upstream: str,
        *,
        rules: Mapping[str, FaultRule] | None = None,
        default: FaultRule | None = None,
        seed: int = 0,
        max_faults: int | None = 100_000,
        max_consecutive: int | None = None,
        lifetime: float = 600.0,
        record_headers: bool = False,
    ):
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port
        self.seed = seed
        self.max_faults = max_faults
        self.max_consecutive = max_consecutive
        self.lifetime = lifetime
        self.record_headers = record_headers
        self._lock = threading.Lock()
        self._rules: dict[str, FaultRule] = dict(rules or {})
        self._default = default
        self._seen: Counter[str] = Counter()
        self._streak: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()  # per class, every request that arrived
        self.faults: dict[str, Counter[Fault]] = defaultdict(Counter)  # per class, per kind
        self.headers: list[tuple[str, dict[str, str]]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fault proxy is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def configure(self, *, rules: Mapping[str, FaultRule] | None = None, default: FaultRule | None = None) -> None:
        with self._lock:
            self._rules = dict(rules or {})
            self._default = default

    # ------------------------------------------------------------ accounting
    @property
    def total_faults(self) -> int:
        with self._lock:
            return sum(sum(c.values()) for c in self.faults.values())

    @property
    def total_requests(self) -> int:
        with self._lock:
            return sum(self.requests.values())

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {
                cls: {"requests": n, "faults": {f.name: k for f, k in self.faults[cls].items()}}
                for cls, n in sorted(self.requests.items())
            }

    # ------------------------------------------------------------ decisions
    def _decide(self, request_class: str, signature: str) -> Fault | None:
        with self._lock:
            self.requests[request_class] += 1
            rule = self._rules.get(request_class, self._default)
            self._seen[signature] += 1
            n = self._seen[signature]
            if rule is None or rule.rate <= 0:
                self._streak[signature] = 0
                return None
            total = sum(sum(c.values()) for c in self.faults.values())
            if self.max_faults is not None and total >= self.max_faults:
                return None
            if self.max_consecutive is not None and self._streak[signature] >= self.max_consecutive:
                self._streak[signature] = 0
                return None
            digest = hashlib.sha256(f"{self.seed}|{signature}|{n}".encode()).digest()
            draw = int.from_bytes(digest[:8], "big") / 2**64
            if draw >= rule.rate:
                self._streak[signature] = 0
                return None
            fault = rule.kinds[digest[8] % len(rule.kinds)]
            self._streak[signature] += 1
            self.faults[request_class][fault] += 1
            return fault


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        proxy = self.owner
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        headers = {k: v for k, v in self.headers.items()}
        request_class = classify(self.command, unquote(split.path), query, headers)
        body = self._read_body()
        if proxy.record_headers:
            with proxy._lock:
                proxy.headers.append((request_class, {k.lower(): v for k, v in headers.items()}))
        # The signature leaves out the bucket (random per test) and the upload id (random per server).
        _bucket, _, key = unquote(split.path).lstrip("/").partition("/")
        stable_query = "&".join(f"{k}={v}" for k, v in sorted(query.items()) if k != "uploadId")
        signature = _VOLATILE.sub(r"\1NONCE", f"{self.command} {key}?{stable_query}")
        fault = proxy._decide(request_class, signature)
        if fault in (Fault.DROP,):
            self._drop()
            return
        if fault in _ERRORS:
            self._error(fault)
            return
        try:
            status, reason, out_headers, out_body = self._forward(split, body)
        except OSError:
            self._drop()
            return
        if fault is Fault.DROP_AFTER:
            self._drop()
            return
        self.send_response_only(status, reason)
        for name, value in out_headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        length = out_headers_length(out_headers) if self.command == "HEAD" else len(out_body)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command != "HEAD" and out_body:
            self.wfile.write(out_body)

    def _forward(self, split: Any, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        proxy = self.owner
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
        try:
            target = split.path + (f"?{split.query}" if split.query else "")
            conn.putrequest(self.command, target, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                lower = name.lower()
                if lower in _HOP_BY_HOP or lower in ("host", "content-length"):
                    continue
                conn.putheader(name, value)
            conn.putheader("Host", f"{proxy.upstream_host}:{proxy.upstream_port}")
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
            response = conn.getresponse()
            data = response.read()
            return response.status, response.reason, list(response.getheaders()), data
        finally:
            conn.close()

    def _error(self, fault: Fault) -> None:
        status, reason, code, message = _ERRORS[fault]
        extra = ""
        if fault is Fault.INVALID_ACCESS_KEY:
            # As S3 does: the refused access key id is echoed in the error document.
            match = re.search(r"Credential=([^/]+)/", self.headers.get("Authorization") or "")
            extra = f"<AWSAccessKeyId>{match.group(1) if match else ''}</AWSAccessKeyId>"
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>{extra}<RequestId>FAULTPROXY</RequestId></Error>"
        ).encode()
        self.send_response_only(status, reason)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", "FAULTPROXY")
        if self.command == "HEAD":
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(xml)))
        self.end_headers()
        self.wfile.write(xml)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815


def out_headers_length(headers: list[tuple[str, str]]) -> int:
    for name, value in headers:
        if name.lower() == "content-length":
            return int(value)
    return 0
