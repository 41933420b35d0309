"""The CRT transport: CompleteMultipartUpload signed by the AWS Common Runtime's SigV4 signer and sent on its
asynchronous HTTP/1.1 connections (:mod:`mpcommit.store.transport` says when it is used, and builds the request).

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
from collections.abc import Sequence
from typing import Any
import urllib.request
from urllib.parse import urlsplit

from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import get_cert_path

from .transport import Done, complete_body, etag_from_answer, key_and_query, key_base_url

log = logging.getLogger(__name__)

try:
    from awscrt import __version__ as awscrt_version
    from awscrt import auth as crt_auth
    from awscrt import http as crt_http
    from awscrt import io as crt_io
    from awscrt.exceptions import AwsCrtError
except ImportError as _missing:  # pragma: no cover - exercised by a test that hides the module
    crt_auth = None
    _IMPORT_ERROR: ImportError | None = _missing
else:
    _IMPORT_ERROR = None


_GONE = object()


def crt_unusable(client: Any, credentials: Any) -> str | None:
    """Why the CRT transport cannot stand in for this client (None when it can)."""
    if credentials is None:
        return "the store was given its client (its credentials are the client's own business)"
    config = client.meta.config
    if getattr(config, "proxies", None) or any(k in ("http", "https", "all") for k in urllib.request.getproxies()):
        return "an HTTP proxy is configured"
    missing = _IMPORT_ERROR
    if missing is not None:
        return f"awscrt cannot be imported ({missing})"
    return None


def crt_import_error() -> ImportError | None:
    """Why awscrt cannot be imported (a platform without a wheel), or None."""
    return _IMPORT_ERROR


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


class _Exchange:
    """One request on its way: waiting for a connection, sent, or answered."""

    __slots__ = ("request", "url", "done", "chunks", "deadline", "connection", "sent", "timed_out")

    def __init__(self, request: Any, url: str, done: Done, deadline: float):
        self.request = request
        self.url = url
        self.done = done
        self.chunks: list[bytes] = []
        self.deadline = deadline
        self.connection: Any = None
        self.sent = False
        self.timed_out = False

    def on_body(self, http_stream: Any, chunk: bytes, **_: Any) -> None:
        self.chunks.append(bytes(chunk))


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
            stream = connection.request(exchange.request, on_body=exchange.on_body)
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
            etag = etag_from_answer(future.result(), b"".join(exchange.chunks))
        except Exception as exc:  # noqa: BLE001 - the ClientError botocore would raise, handed to the caller
            self._completer.finish(exchange, None, exc)
            return
        self._completer.finish(exchange, etag, None)

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
                 max_connections: int, connect_timeout: float, read_timeout: float, ca_bundle: str | None = None):
        self._client = client
        self._credentials = credentials
        self._region = client.meta.region_name or "us-east-1"
        self._security = dict(security or {})
        self._headers = list(headers)
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
        base, base_path, host = self._base(bucket)
        tail = key_and_query(key, upload_id)
        body = complete_body(parts)
        exchange = _Exchange(self.signed_request(base_path + tail, host.host_header, body), base + tail, done,
                             time.monotonic() + self._connect_wait)
        if self._closed.is_set():
            done(None, ConnectionClosedError(endpoint_url=exchange.url, error=RuntimeError("the completer is closed")))
            return
        with self._lock:
            self._live[exchange] = None
            if self._watchdog is None:  # it stops when nothing is in flight
                self._watchdog = threading.Thread(target=self._watch, name="mpcommit-crt-watchdog", daemon=True)
                self._watchdog.start()
        host.submit(exchange)

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any]) -> str:
        """One CompleteMultipartUpload, waited for; returns the ETag. Raises the botocore exception botocore would
        have raised."""
        ended = threading.Event()
        outcome: list[Any] = []

        def done(etag: str | None, error: BaseException | None) -> None:
            outcome.extend((etag, error))
            ended.set()

        self.start(bucket, key, upload_id, parts, done)
        if not ended.wait(self._connect_wait + self.read_timeout + 10 * self._tick):  # the watchdog's, and more
            raise ReadTimeoutError(endpoint_url=f"s3://{bucket}/{key}", error="no answer in time")
        etag, error = outcome
        if error is not None:
            raise error
        return str(etag)

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
    def signed_request(self, path: str, host_header: str, body: bytes, *, date: datetime.datetime | None = None) -> Any:
        """The request for ``path`` (key and query, encoded) with ``body``, signed as botocore's S3 signer signs
        it: the same headers signed (Host, X-Amz-Content-SHA256, X-Amz-Date, the security headers and the session
        token when there are any; not User-Agent), so the same signature for the same instant."""
        headers = [("Host", host_header), ("User-Agent", self.user_agent), *self._headers]
        request = crt_http.HttpRequest("POST", path, crt_http.HttpHeaders(headers), io.BytesIO(body))
        config = crt_auth.AwsSigningConfig(
            credentials_provider=self._credentials_provider(), region=self._region, service="s3", date=date,
            # S3's rules, as botocore's S3 signer applies them: the path is encoded once and not normalised.
            use_double_uri_encode=False, should_normalize_uri_path=False,
            signed_body_value=hashlib.sha256(body).hexdigest(),
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
