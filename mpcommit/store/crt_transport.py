"""The CRT transport: CompleteMultipartUpload signed by the AWS Common Runtime's SigV4 signer and sent on its
asynchronous HTTP/1.1 connections (:mod:`mpcommit.store.transport` says when it is used, and builds the request);
and, the same way, a task's per-file requests (CreateMultipartUpload, small parts, its manifest), waited for.

``awscrt.http`` does all its IO on an event-loop thread of its own, in C: writing the request, parsing the
answer. So :meth:`CrtCompleter.start` only builds and signs a request on the caller's thread and hands it to a
connection; the answer comes back through a callback on the event-loop thread. Hundreds of completes can be in
flight from one Python thread (the commit's driver keeps them so: :func:`mpcommit.pool.run_windowed`), where a
blocking client needs a thread per request. :meth:`CrtCompleter.complete` is the same, waited for.

The signature is botocore's, byte for byte: the same headers signed (Host, ``X-Amz-Content-SHA256`` with the
payload's SHA-256, ``X-Amz-Date``, the security headers and the session token when there are any; not
User-Agent), the path encoded once and not normalised (S3's rules). Failures are raised as the botocore
exceptions botocore would raise, with the socket error :func:`mpcommit.store.errors.translate` looks for: a
connection refused or a name that does not resolve (``EndpointConnectionError``), ``ConnectTimeoutError``,
``ReadTimeoutError`` (no answer within ``read_timeout``), ``ConnectionClosedError``, ``SSLError``. TLS is verified
with the CA bundle boto3 would use. A connection the server closed is dropped, never reused.

Connections: a pool per host (:class:`_Host`), at most ``max_connections``, each carrying one request at a time;
requests beyond them wait for one. A watchdog thread ends requests that outlive their time. :meth:`close` closes
the connections and stops the watchdog; the event loop ends with the completer.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from awscrt import __version__ as awscrt_version
from awscrt import auth as crt_auth
from awscrt import http as crt_http
from awscrt import io as crt_io
from awscrt.exceptions import AwsCrtError
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import get_cert_path

from .transport import (
    Done,
    complete_body,
    etag_from_answer,
    etag_from_headers,
    key_and_query,
    key_base_url,
    key_path,
    part_query,
    upload_id_from_answer,
    uploads_query,
)

log = logging.getLogger(__name__)

_GONE = object()
#: The signed payload of a request whose body carries its own checksum, over TLS (botocore's choice too).
_UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"


def _connect_error(exc: BaseException, url: str) -> Exception:
    """The botocore exception for a connection that could not be made, carrying the socket error that
    :func:`mpcommit.store.errors.translate` recognises (refused, or a name that does not resolve)."""
    name = getattr(exc, "name", "")
    if name == "AWS_IO_SOCKET_TIMEOUT":
        return ConnectTimeoutError(endpoint_url=url, error=exc)
    if name == "AWS_IO_SOCKET_CONNECTION_REFUSED":
        return EndpointConnectionError(endpoint_url=url, error=ConnectionRefusedError(111, str(exc)))
    if name.startswith("AWS_IO_DNS_"):
        return EndpointConnectionError(endpoint_url=url, error=socket.gaierror(socket.EAI_NONAME, str(exc)))
    if "_TLS_" in name:  # certificate refused or handshake failed: what botocore raises for an ssl error
        return SSLError(endpoint_url=url, error=exc)
    return EndpointConnectionError(endpoint_url=url, error=exc)


#: Reads an answer: (status, headers by lower-case name, body) -> the result handed to ``done``, or raises the
#: botocore exception botocore would raise for it.
Parse = Callable[[int, dict[str, str], bytes], Any]


def _complete_answer(status: int, _headers: dict[str, str], data: bytes) -> str:
    return etag_from_answer(status, data)


class _Exchange:
    """One request on its way: waiting for a connection, sent, or answered."""

    __slots__ = ("request", "url", "done", "chunks", "deadline", "connection", "sent", "timed_out", "parse",
                 "headers")

    def __init__(self, request: Any, url: str, done: Done, deadline: float, parse: Parse = _complete_answer):
        self.request = request
        self.url = url
        self.done = done
        self.chunks: list[bytes] = []
        self.deadline = deadline
        self.connection: Any = None
        self.sent = False
        self.timed_out = False
        self.parse = parse
        self.headers: dict[str, str] = {}

    def on_response(self, http_stream: Any, status_code: int, headers: Any, **_: Any) -> None:
        self.headers = {name.lower(): value for name, value in headers}

    def on_body(self, http_stream: Any, chunk: bytes, **_: Any) -> None:
        self.chunks.append(bytes(chunk))


class _Body(io.RawIOBase):
    """A request body read straight from the caller's buffer (an 8 MiB part is not copied), pushing its exchange's
    deadline on with every read: a body still being sent is progress, as botocore's read timeout counts it."""

    def __init__(self, data: bytes | bytearray | memoryview, read_timeout: float):
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._at = 0
        self._read_timeout = read_timeout
        self.exchange: _Exchange | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: len(self._view)}[whence]
        self._at = max(0, min(len(self._view), base + offset))
        return self._at

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self._view) - self._at)
        buffer[:n] = self._view[self._at:self._at + n]
        self._at += n
        if self.exchange is not None and self.exchange.sent:
            self.exchange.deadline = time.monotonic() + self._read_timeout
        return n


class _Host:
    """The connection pool of one host: keep-alive HTTP/1.1 connections, each carrying one request at a time, at
    most ``max_connections`` open or opening; a request finding none free waits for the next one released."""

    def __init__(self, url: str, completer: "CrtCompleter", max_connections: int):
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.host_header = parts.netloc.rsplit("@", 1)[-1]  # botocore signs the netloc as the Host header
        self._completer = completer
        self._max = max_connections
        self._lock = threading.Lock()
        self._idle: list[Any] = []  # LIFO: the most recently used connection is the likeliest still open
        self._waiting: collections.deque[_Exchange] = collections.deque()
        self._open = 0  # connections open or being opened
        self._all: set[Any] = set()  # every open connection, to close them all on close()

    def submit(self, exchange: _Exchange) -> None:
        with self._lock:
            connection = None
            while self._idle:
                candidate = self._idle.pop()
                if candidate.is_open():
                    connection = candidate
                    break
                self._forget(candidate)
            if connection is None:
                if self._open >= self._max:
                    self._waiting.append(exchange)
                    return
                self._open += 1
        if connection is not None:
            self._send(exchange, connection)
        else:
            self._connect(exchange)

    def _forget(self, connection: Any) -> None:
        """Under the lock: a connection that will carry nothing more frees its place."""
        self._open -= 1
        self._all.discard(connection)

    def release(self, connection: Any | None, *, reusable: bool) -> None:
        """A connection is free again (None: one that failed to open, its place already given back): it carries
        the next waiting request, or waits idle; a closed one makes room for a new connection."""
        if connection is not None and not (reusable and connection.is_open()):
            connection.close()
            with self._lock:
                self._forget(connection)
            connection = None
        with self._lock:
            waiting = None
            while self._waiting:
                candidate = self._waiting.popleft()
                if not self._completer.finished(candidate):
                    waiting = candidate
                    break
            if waiting is None:
                if connection is not None:
                    self._idle.append(connection)
                return
            if connection is None:
                self._open += 1
        if connection is not None:
            self._send(waiting, connection)
        else:
            self._connect(waiting)

    def _connect(self, exchange: _Exchange) -> None:
        c = self._completer
        try:
            tls = None
            if self.https:
                tls = c.tls_context().new_connection_options()
                tls.set_server_name(self.host)
            future = crt_http.HttpClientConnection.new(self.host, self.port, c.bootstrap, c.socket_options, tls)
        except (AwsCrtError, RuntimeError, SSLError) as exc:
            self._failed_to_connect(exchange, exc)
            return
        future.add_done_callback(lambda f: self._connected(f, exchange))

    def _failed_to_connect(self, exchange: _Exchange, exc: BaseException) -> None:
        with self._lock:
            self._open -= 1
        error = exc if isinstance(exc, SSLError) else _connect_error(exc, exchange.url)
        self._completer.finish(exchange, None, error)
        self.release(None, reusable=False)  # a waiting request may try a connection of its own

    def _connected(self, future: Any, exchange: _Exchange) -> None:  # on the event-loop thread
        error = future.exception()
        if error is not None:
            self._failed_to_connect(exchange, error)
            return
        connection = future.result()
        with self._lock:
            self._all.add(connection)
        if self._completer.finished(exchange):  # timed out while connecting: the connection serves another
            self.release(connection, reusable=True)
            return
        self._send(exchange, connection)

    def _send(self, exchange: _Exchange, connection: Any) -> None:
        exchange.connection = connection
        exchange.sent = True
        exchange.deadline = time.monotonic() + self._completer.read_timeout
        try:
            stream = connection.request(exchange.request, on_response=exchange.on_response, on_body=exchange.on_body)
            stream.activate()
        except (AwsCrtError, RuntimeError, OSError) as exc:
            # How the binding refuses a stream on a connection that closed since it was taken: a dropped
            # connection, retried by the caller.
            self.release(connection, reusable=False)
            self._completer.finish(exchange, None, ConnectionClosedError(endpoint_url=exchange.url, error=exc))
            return
        stream.completion_future.add_done_callback(lambda f: self._answered(f, exchange))

    def _answered(self, future: Any, exchange: _Exchange) -> None:  # on the event-loop thread
        error = future.exception()
        connection = exchange.connection
        if error is not None or exchange.timed_out:
            self.release(connection, reusable=False)
            if exchange.timed_out:
                return  # the watchdog has reported it
            self._completer.finish(exchange, None, ConnectionClosedError(endpoint_url=exchange.url, error=error))
            return
        self.release(connection, reusable=True)
        try:
            result = exchange.parse(future.result(), exchange.headers, b"".join(exchange.chunks))
        except Exception as exc:  # noqa: BLE001 - the ClientError botocore would raise, handed to the caller
            self._completer.finish(exchange, None, exc)
            return
        self._completer.finish(exchange, result, None)

    def close(self) -> None:
        with self._lock:
            connections = list(self._all)
            self._idle.clear()
        for connection in connections:
            connection.close()


class CrtCompleter:
    """CompleteMultipartUpload signed by the CRT's SigV4 signer and sent on CRT connections. Thread-safe.

    ``security``: the security parameters (:func:`mpcommit.store.security.security_parameters`); ``headers``: the
    same as the headers every complete carries (:func:`mpcommit.store.transport.header_fields`).
    """

    name = "crt"

    def __init__(self, client: Any, credentials: Any, *, security: dict[str, str] | None = None,
                 headers: Sequence[tuple[str, str]] = (),
                 operation_headers: dict[str, Sequence[tuple[str, str]]] | None = None,
                 max_connections: int, connect_timeout: float, read_timeout: float, ca_bundle: str | None = None):
        self._client = client
        self._credentials = credentials
        self._region = client.meta.region_name or "us-east-1"
        self._security = dict(security or {})
        self._headers = list(headers)
        #: The security headers of each other request this transport sends for the store, by botocore's operation
        #: name (:meth:`sends`); an operation left out stays on boto3.
        self._operation_headers = {op: list(h) for op, h in (operation_headers or {}).items()}
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        # The completer's own event loop (one thread does the IO of all its connections), never the CRT's
        # process-wide default: a store is made per process, and a loop does not survive a fork.
        self._loop = crt_io.EventLoopGroup(1)
        self.bootstrap = crt_io.ClientBootstrap(self._loop, crt_io.DefaultHostResolver(self._loop))
        self.socket_options = crt_io.SocketOptions()
        self.socket_options.connect_timeout_ms = max(1, int(connect_timeout * 1000))
        # Waiting for a connection and its TLS handshake, then the answer: each bounded.
        self._connect_wait = connect_timeout + read_timeout
        #: The CA bundle TLS is verified with: the configured one, else certifi's (as botocore verifies).
        self.ca_bundle = ca_bundle or get_cert_path(True)
        self._tls: Any = None  # made for the first https host, so that a bad bundle fails where TLS is used
        self._bases: dict[str, tuple[str, str, _Host]] = {}  # bucket -> (URL before the key, its path, host)
        self._hosts: dict[tuple[str, str], _Host] = {}
        self._lock = threading.Lock()
        self._signing_key: tuple[str, str, str | None] | None = None
        self._provider: Any = None
        #: Requests not yet ended, with their deadlines (the watchdog's to enforce).
        self._live: dict[_Exchange, None] = {}
        self._watchdog: threading.Thread | None = None
        self._closed = threading.Event()
        self._tick = max(0.02, min(1.0, read_timeout / 4, connect_timeout / 4))
        self.user_agent = f"mpcommit crt awscrt/{awscrt_version}"

    # ------------------------------------------------------------ one request
    def start(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any], done: Done) -> None:
        """Send one CompleteMultipartUpload without waiting: ``done(etag, None)`` or ``done(None, error)`` is
        called once, on another thread (or on this one, when the request fails before it is sent)."""
        self._start("POST", bucket, key_and_query(key, upload_id), complete_body(parts), done, _complete_answer)

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any]) -> str:
        """One CompleteMultipartUpload, waited for; returns the ETag. Raises the botocore exception botocore would
        have raised."""
        return str(self._wait(lambda done: self.start(bucket, key, upload_id, parts, done), f"s3://{bucket}/{key}"))

    # ------------------------------------------------------------ a task's requests, one per file and part
    def sends(self, operation: str) -> bool:
        """Whether this transport sends ``operation`` (botocore's name) for the store, besides the completes."""
        return operation in self._operation_headers

    def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        """CreateMultipartUpload with a CRC32 checksum for its parts, as the store's boto3 request is; the upload id."""
        headers = [("x-amz-checksum-algorithm", "CRC32")] + ([("Content-Type", content_type)] if content_type else [])
        return str(self._wait(lambda done: self._start(
            "POST", bucket, uploads_query(key), b"", done, lambda st, _h, data: upload_id_from_answer(st, data),
            headers=headers + self._operation_headers["create_multipart_upload"]), f"s3://{bucket}/{key}"))

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: bytes | bytearray | memoryview,
                    crc32: str) -> tuple[str, str | None]:
        """UploadPart with its CRC32, the body sent from the caller's buffer; (the ETag, the CRC32 S3 echoed)."""
        headers = [("x-amz-sdk-checksum-algorithm", "CRC32"), ("x-amz-checksum-crc32", crc32)]

        def parse(status: int, answer: dict[str, str], data: bytes) -> tuple[str, str | None]:
            return etag_from_headers(status, answer, data, "UploadPart"), answer.get("x-amz-checksum-crc32")

        return self._wait(lambda done: self._start(
            "PUT", bucket, part_query(key, upload_id, number), body, done, parse,
            headers=headers + self._operation_headers["upload_part"], checksummed=True), f"s3://{bucket}/{key}")

    def put_object(self, bucket: str, key: str, body: bytes | bytearray | memoryview, *, content_type: str) -> str:
        """PutObject of a body held in memory (no condition); the ETag."""
        return str(self._wait(lambda done: self._start(
            "PUT", bucket, key_path(key), body, done, lambda st, h, data: etag_from_headers(st, h, data, "PutObject"),
            headers=[("Content-Type", content_type)] + self._operation_headers["put_object"]), f"s3://{bucket}/{key}"))

    # ------------------------------------------------------------ sending
    def _start(self, method: str, bucket: str, tail: str, body: bytes | bytearray | memoryview, done: Done,
               parse: Parse, *, headers: Sequence[tuple[str, str]] | None = None, checksummed: bool = False) -> None:
        """Sign and send one request for ``bucket``'s ``tail`` (the key and query, encoded); ``parse`` reads its
        answer. ``checksummed``: the body carries its own checksum header, so over TLS its payload is not hashed
        for the signature (botocore's rule for a streamed body with a checksum)."""
        base, base_path, host = self._base(bucket)
        stream = _Body(body, self.read_timeout)
        if checksummed and base.startswith("https"):
            payload = _UNSIGNED_PAYLOAD
        else:
            payload = hashlib.sha256(body).hexdigest()
        request = self.signed_request(base_path + tail, host.host_header, body, method=method, payload=payload,
                                      headers=self._headers if headers is None else headers, stream=stream)
        exchange = _Exchange(request, base + tail, done, time.monotonic() + self._connect_wait, parse)
        stream.exchange = exchange
        if self._closed.is_set():
            done(None, ConnectionClosedError(endpoint_url=exchange.url, error=RuntimeError("the completer is closed")))
            return
        with self._lock:
            self._live[exchange] = None
            if self._watchdog is None:  # it stops when nothing is in flight
                self._watchdog = threading.Thread(target=self._watch, name="mpcommit-crt-watchdog", daemon=True)
                self._watchdog.start()
        host.submit(exchange)

    def _wait(self, start: Callable[[Done], None], where: str) -> Any:
        """Start a request and wait for its end (the watchdog ends every request in its time)."""
        ended = threading.Event()
        outcome: list[Any] = []

        def done(result: Any, error: BaseException | None) -> None:
            outcome.extend((result, error))
            ended.set()

        start(done)
        # The watchdog bounds a request from its send, and a body being sent pushes that on: wait as long, and a
        # little more -- but a request whose exchange is no longer live and never reported has failed.
        while not ended.wait(self._connect_wait + self.read_timeout + 10 * self._tick):
            if self._watchdog is None and not self._live:
                raise ReadTimeoutError(endpoint_url=where, error="no answer in time")
        result, error = outcome
        if error is not None:
            raise error
        return result

    def finished(self, exchange: _Exchange) -> bool:
        return exchange not in self._live

    def finish(self, exchange: _Exchange, etag: str | None, error: BaseException | None) -> bool:
        """Report an exchange's end to its caller, once: the watchdog and the answer may race, and only the first
        to take it from the live requests reports (True)."""
        if self._live.pop(exchange, _GONE) is _GONE:
            return False
        try:
            exchange.done(etag, error)
        except Exception:  # noqa: BLE001 - a caller's callback must not break the event loop
            log.exception("a CompleteMultipartUpload callback failed")
        return True

    # ------------------------------------------------------------ the request
    def signed_request(self, path: str, host_header: str, body: bytes | bytearray | memoryview, *,
                       date: datetime.datetime | None = None, method: str = "POST", payload: str | None = None,
                       headers: Sequence[tuple[str, str]] | None = None, stream: Any = None) -> Any:
        """The request for ``path`` (key and query, encoded) with ``body``, signed as botocore's S3 signer signs
        it: the same headers signed (Host, X-Amz-Content-SHA256, X-Amz-Date, the security headers and the session
        token when there are any; not User-Agent), so the same signature for the same instant. ``payload``: the
        signed payload value (the body's SHA-256 unless given); ``headers``: the request's own (a complete's
        security headers unless given); ``stream``: the body as the CRT reads it (a copy of ``body`` unless given)."""
        headers = [("Host", host_header), ("User-Agent", self.user_agent),
                   *(self._headers if headers is None else headers)]
        request = crt_http.HttpRequest(method, path, crt_http.HttpHeaders(headers),
                                       stream if stream is not None else io.BytesIO(bytes(body)))
        config = crt_auth.AwsSigningConfig(
            credentials_provider=self._credentials_provider(), region=self._region, service="s3", date=date,
            # S3's rules, as botocore's S3 signer applies them: the path is encoded once and not normalised.
            use_double_uri_encode=False, should_normalize_uri_path=False,
            signed_body_value=payload if payload is not None else hashlib.sha256(body).hexdigest(),
            signed_body_header_type=crt_auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256)
        signed = crt_auth.aws_sign_request(request, config).result()
        # Added after signing: botocore does not sign it either (it sets it when the request is prepared).
        signed.headers.add("Content-Length", str(len(body)))
        return signed

    def _base(self, bucket: str) -> tuple[str, str, _Host]:
        found = self._bases.get(bucket)
        if found is None:
            base = key_base_url(self._client, bucket, self._security)
            parts = urlsplit(base)
            with self._lock:
                host_key = (parts.scheme, parts.netloc)
                host = self._hosts.get(host_key)
                if host is None:
                    host = self._hosts[host_key] = _Host(base, self, self.max_connections)
                found = self._bases[bucket] = (base, parts.path, host)
        return found

    def tls_context(self) -> Any:
        """The TLS context, verifying with :attr:`ca_bundle`; a bundle the CRT cannot load is an SSLError, as in
        botocore."""
        with self._lock:
            if self._tls is None:
                options = crt_io.TlsContextOptions()
                try:
                    options.override_default_trust_store_from_path(None, self.ca_bundle)
                    self._tls = crt_io.ClientTlsContext(options)
                except (AwsCrtError, RuntimeError) as exc:
                    raise SSLError(endpoint_url=self.ca_bundle, error=exc) from exc
            return self._tls

    def _credentials_provider(self) -> Any:
        """A static CRT provider for the client's current credentials: refreshable credentials are read on every
        request (as botocore does), and a new provider is made only when they changed."""
        frozen = self._credentials.get_frozen_credentials()
        signing_key = (frozen.access_key, frozen.secret_key, frozen.token)
        if signing_key != self._signing_key:
            with self._lock:
                self._provider = crt_auth.AwsCredentialsProvider.new_static(*signing_key)
                self._signing_key = signing_key
        return self._provider

    # ------------------------------------------------------------ time limits
    def _watch(self) -> None:
        """End the requests that outlive their time: no connection within connect_timeout + read_timeout, or no
        answer within read_timeout of being sent. The connection of a request whose answer is late is closed: it
        cannot carry anything else. Ends once nothing is in flight (the next request starts another)."""
        while not self._closed.wait(self._tick):
            with self._lock:
                if not self._live:
                    self._watchdog = None
                    return
            now = time.monotonic()
            for exchange in [e for e in list(self._live) if e.deadline <= now]:
                if exchange.sent:
                    exchange.timed_out = True  # before finishing: an answer arriving now gives its connection up
                    connection = exchange.connection
                    if self.finish(exchange, None, ReadTimeoutError(endpoint_url=exchange.url,
                                                                    error="no answer in time")):
                        connection.close()  # its stream ends with an error; the host then drops the connection
                else:
                    self.finish(exchange, None, ConnectTimeoutError(endpoint_url=exchange.url,
                                                                    error="no connection in time"))

    # ------------------------------------------------------------ closing
    def close(self) -> None:
        """Close every connection and stop the watchdog; requests still in flight end with ConnectionClosedError."""
        self._closed.set()
        with self._lock:
            hosts = list(self._hosts.values())
        for host in hosts:
            host.close()
        for exchange in list(self._live):
            self.finish(exchange, None, ConnectionClosedError(endpoint_url=exchange.url,
                                                              error=RuntimeError("the completer was closed")))
        watchdog = self._watchdog
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join()
