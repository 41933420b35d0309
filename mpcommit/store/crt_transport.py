"""The CRT transport: CompleteMultipartUpload sent on the AWS Common Runtime's asynchronous HTTP/1.1 connections (:mod:`mpcommit.store.transport_choice` says when it is used, and
:mod:`mpcommit.store.transport` builds the request); and, the same way, a task's per-file requests
(CreateMultipartUpload, small parts, its manifest), waited for.

``awscrt.http`` does all its IO on an event-loop thread of its own, in C: writing the request, parsing the
answer. So :meth:`CrtCompleter.start` only builds and signs a request on the caller's thread
(:mod:`.signing`: botocore's signature, byte for byte) and hands it to a connection (:mod:`.crt_connections`:
a pool per host); the answer comes back through a callback on the event-loop thread. Hundreds of completes can be
in flight from one Python thread (the commit's driver keeps them so: :func:`mpcommit.pool.run_windowed`), where a
blocking client needs a thread per request. :meth:`CrtCompleter.complete` is the same, waited for.

Failures are raised as the botocore exceptions botocore would raise: a connection refused or a name that does not
resolve (``EndpointConnectionError``), ``ConnectTimeoutError``, ``ReadTimeoutError`` (no answer within
``read_timeout``), ``ConnectionClosedError``, ``SSLError``. TLS is verified with the CA bundle boto3 would use. A
watchdog thread ends requests that outlive their time. :meth:`CrtCompleter.close` closes the connections and
stops the watchdog; the event loop ends with the completer.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from awscrt import __version__ as awscrt_version
from awscrt import http as crt_http
from awscrt import io as crt_io
from awscrt.exceptions import AwsCrtError
from botocore.exceptions import ConnectionClosedError, ConnectTimeoutError, ReadTimeoutError, SSLError
from botocore.httpsession import get_cert_path

from .crt_connections import Exchange, HostConnections, Parse, RequestBody
from .polled_http import PolledRequests
from .signing import UNSIGNED_PAYLOAD, SigV4Signer
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

#: Bodies up to this size go to the CRT as a BytesIO (read in C); larger ones as a RequestBody (see _start).
SMALL_BODY_BYTES = 64 * 1024
#: A body up to this size goes out in the same write as the request's head (the CRT writes messages of 16 KiB);
#: a larger one needs its connection without Nagle's delay (crt_nodelay).
ONE_WRITE_BODY_BYTES = 8 * 1024
_GONE = object()


def _complete_answer(status: int, _headers: dict[str, str], data: bytes) -> str:
    return etag_from_answer(status, data)


class CrtCompleter:
    """CompleteMultipartUpload signed as botocore signs it and sent on CRT connections. Thread-safe.

    ``security``: the security parameters (:func:`mpcommit.store.security.security_parameters`); ``headers``: the
    same as the headers every complete carries (:func:`mpcommit.store.transport.header_fields`).
    """

    name = "crt"

    def __init__(self, client: Any, credentials: Any, *, security: dict[str, str] | None = None,
                 headers: Sequence[tuple[str, str]] = (),
                 operation_headers: dict[str, Sequence[tuple[str, str]]] | None = None,
                 max_connections: int, connect_timeout: float, read_timeout: float, ca_bundle: str | None = None):
        self._client = client
        self.signer = SigV4Signer(credentials, client.meta.region_name or "us-east-1",
                                  f"mpcommit crt awscrt/{awscrt_version}")
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
        self._bases: dict[str, tuple[str, str, HostConnections]] = {}  # bucket -> (URL before the key, its path, host)
        self._hosts: dict[tuple[str, str], HostConnections] = {}
        self._lock = threading.Lock()
        #: Requests not yet ended, with their deadlines (the watchdog's to enforce).
        self._live: dict[Exchange, None] = {}
        self._watchdog: threading.Thread | None = None
        self._closed = threading.Event()
        self._tick = max(0.02, min(1.0, read_timeout / 4, connect_timeout / 4))
        self._connect_timeout = connect_timeout
        self._polled: PolledRequests | None = None  # a task's small files' requests (made on first use)
        self._ssl: Any = None

    # ------------------------------------------------------------ one request
    def start(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any], done: Done) -> None:
        """Send one CompleteMultipartUpload without waiting: ``done(etag, None)`` or ``done(None, error)`` is
        called once, on another thread (or on this one, when the request fails before it is sent)."""
        self._start("POST", bucket, key_and_query(key, upload_id), complete_body(parts), done, _complete_answer,
                    reads_headers=False)

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
            headers=headers + self._operation_headers["create_multipart_upload"], reads_headers=False),
            f"s3://{bucket}/{key}"))

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: bytes | bytearray | memoryview,
                    crc32: str) -> tuple[str, str | None]:
        """UploadPart with its CRC32, the body sent from the caller's buffer; (the ETag, the CRC32 S3 echoed)."""
        headers = [("x-amz-sdk-checksum-algorithm", "CRC32"), ("x-amz-checksum-crc32", crc32)]

        def parse(status: int, answer: dict[str, str], data: bytes) -> tuple[str, str | None]:
            return etag_from_headers(status, answer, data, "UploadPart"), answer.get("x-amz-checksum-crc32")

        return self._wait(lambda done: self._start(
            "PUT", bucket, part_query(key, upload_id, number), body, done, parse,
            headers=headers + self._operation_headers["upload_part"], checksummed=True), f"s3://{bucket}/{key}")

    # ------------------------------------------------------------ a small file's requests, answered where polled
    def start_create_multipart_upload(self, bucket: str, key: str, done: Done, *,
                                      content_type: str | None = None) -> None:
        """:meth:`create_multipart_upload` sent on the polled sockets (:mod:`.polled_http`), not waited for:
        ``done(upload id, None)`` or ``done(None, error)``, called by a later :meth:`pump`."""
        headers = [("x-amz-checksum-algorithm", "CRC32")] + ([("Content-Type", content_type)] if content_type else [])
        self._start_polled("POST", bucket, uploads_query(key), b"", done,
                           lambda st, _h, data: upload_id_from_answer(st, data),
                           headers + self._operation_headers["create_multipart_upload"])

    def start_upload_part(self, bucket: str, key: str, upload_id: str, number: int,
                          body: bytes | bytearray | memoryview, crc32: str, done: Done) -> None:
        """:meth:`upload_part` sent on the polled sockets, not waited for: ``done((the ETag, the CRC32 S3 echoed),
        None)`` or ``done(None, error)``, called by a later :meth:`pump`."""
        headers = [("x-amz-sdk-checksum-algorithm", "CRC32"), ("x-amz-checksum-crc32", crc32)]

        def parse(status: int, answer: dict[str, str], data: bytes) -> tuple[str, str | None]:
            return etag_from_headers(status, answer, data, "UploadPart"), answer.get("x-amz-checksum-crc32")

        self._start_polled("PUT", bucket, part_query(key, upload_id, number), body, done, parse,
                           headers + self._operation_headers["upload_part"], checksummed=True)

    def pump(self, timeout: float) -> int:
        """Advance the requests started on the polled sockets, waiting up to ``timeout`` seconds for an answer, and
        report the finished ones on this thread; returns how many are still in flight."""
        polled = self._polled
        return polled.pump(timeout) if polled is not None else 0

    def _start_polled(self, method: str, bucket: str, tail: str, body: bytes | bytearray | memoryview, done: Done,
                      parse: Parse, headers: Sequence[tuple[str, str]], *, checksummed: bool = False) -> None:
        base, base_path, host = self._base(bucket)
        polled = self._polled
        if polled is None:
            with self._lock:
                if self._polled is None:
                    self._polled = PolledRequests(sign=self._sign_for_polled, connect_timeout=self._connect_timeout,
                                                  read_timeout=self.read_timeout,
                                                  max_connections=self.max_connections, tls=self._ssl_context)
                polled = self._polled
        payload = UNSIGNED_PAYLOAD if checksummed and host.https else None
        polled.start(method, (host.host, host.port, host.https), host.host_header, base_path + tail, base + tail,
                     body, headers, done, parse, payload=payload)

    def _sign_for_polled(self, path: str, host_header: str, body: Any, *, method: str, headers: Any,
                         payload: str | None) -> list[tuple[str, str]]:
        return self.signed_headers(path, host_header, body, method=method, headers=headers, payload=payload)

    def _ssl_context(self) -> Any:
        """Python's TLS context for the polled sockets, verifying with :attr:`ca_bundle` as the CRT's does."""
        import ssl

        with self._lock:
            if self._ssl is None:
                try:
                    self._ssl = ssl.create_default_context(cafile=self.ca_bundle)
                except (OSError, ssl.SSLError) as exc:
                    raise SSLError(endpoint_url=self.ca_bundle, error=exc) from exc
            return self._ssl

    def put_object(self, bucket: str, key: str, body: bytes | bytearray | memoryview, *, content_type: str) -> str:
        """PutObject of a body held in memory (no condition); the ETag."""
        return str(self._wait(lambda done: self._start(
            "PUT", bucket, key_path(key), body, done, lambda st, h, data: etag_from_headers(st, h, data, "PutObject"),
            headers=[("Content-Type", content_type)] + self._operation_headers["put_object"]), f"s3://{bucket}/{key}"))

    # ------------------------------------------------------------ sending
    def _start(self, method: str, bucket: str, tail: str, body: bytes | bytearray | memoryview, done: Done,
               parse: Parse, *, headers: Sequence[tuple[str, str]] | None = None, checksummed: bool = False,
               reads_headers: bool = True) -> None:
        """Sign and send one request for ``bucket``'s ``tail`` (the key and query, encoded); ``parse`` reads its
        answer (``reads_headers``: its headers too). ``checksummed``: the body carries its own checksum header, so
        over TLS its payload is not hashed for the signature (botocore's rule for a streamed body with a checksum)."""
        base, base_path, host = self._base(bucket)
        # A body sent in one write (a complete's list of parts, a small manifest) is read by the CRT through
        # BytesIO's own C reader; a large one (a part) from the caller's buffer, each read pushing its deadline on.
        # RequestBody's reads are Python, called from the event loop under the interpreter lock: for the
        # completes' few hundred bytes that cost the commit ~10% of its CPU (issue 37's 10,000-file bench).
        large = len(body) > SMALL_BODY_BYTES
        stream: Any = RequestBody(body, self.read_timeout) if large else io.BytesIO(bytes(body))
        payload = UNSIGNED_PAYLOAD if checksummed and base.startswith("https") else None
        request = self.signed_request(base_path + tail, host.host_header, body, method=method, payload=payload,
                                      headers=self._headers if headers is None else headers, stream=stream)
        exchange = Exchange(request, base + tail, done, time.monotonic() + self._connect_wait, parse,
                            reads_headers=reads_headers, split=len(body) > ONE_WRITE_BODY_BYTES)
        if large:  # (not isinstance: RequestBody is an io ABC, and this runs once a request)
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

    def finished(self, exchange: Exchange) -> bool:
        return exchange not in self._live

    def finish(self, exchange: Exchange, result: Any, error: BaseException | None) -> bool:
        """Report an exchange's end to its caller, once: the watchdog and the answer may race, and only the first
        to take it from the live requests reports (True)."""
        if self._live.pop(exchange, _GONE) is _GONE:
            return False
        try:
            exchange.done(result, error)
        except Exception:  # noqa: BLE001 - a caller's callback must not break the event loop
            log.exception("a CompleteMultipartUpload callback failed")
        return True

    # ------------------------------------------------------------ the request
    def signed_request(self, path: str, host_header: str, body: bytes | bytearray | memoryview, *,
                       date: datetime.datetime | None = None, method: str = "POST", payload: str | None = None,
                       headers: Sequence[tuple[str, str]] | None = None, stream: Any = None) -> Any:
        """The CRT's request for ``path`` (key and query, encoded) with ``body``, signed (:meth:`signed_headers`);
        ``stream``: the body as the CRT reads it (a copy of ``body`` unless given)."""
        signed = self.signed_headers(path, host_header, body, date=date, method=method, payload=payload,
                                     headers=headers)
        return crt_http.HttpRequest(method, path, crt_http.HttpHeaders(signed),
                                    stream if stream is not None else io.BytesIO(bytes(body)))

    def signed_headers(self, path: str, host_header: str, body: bytes | bytearray | memoryview, *,
                       date: datetime.datetime | None = None, method: str = "POST", payload: str | None = None,
                       headers: Sequence[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
        """The headers of the request for ``path`` with ``body``, signed as botocore signs it (:mod:`.signing`):
        ``payload`` is the signed payload value (the body's SHA-256 unless given); ``headers``: the request's own,
        a complete's security headers unless given."""
        own = self._headers if headers is None else headers
        return self.signer.headers(method, path, host_header,
                                   payload if payload is not None else hashlib.sha256(body).hexdigest(), own,
                                   length=len(body), when=date.timestamp() if date is not None else None)

    def _base(self, bucket: str) -> tuple[str, str, HostConnections]:
        found = self._bases.get(bucket)
        if found is None:
            base = key_base_url(self._client, bucket, self._security)
            parts = urlsplit(base)
            with self._lock:
                host_key = (parts.scheme, parts.netloc)
                host = self._hosts.get(host_key)
                if host is None:
                    host = self._hosts[host_key] = HostConnections(base, self, self.max_connections)
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
        if self._polled is not None:
            self._polled.close()
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
