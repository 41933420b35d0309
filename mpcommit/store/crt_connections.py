"""The CRT's HTTP/1.1 connections: a pool per host (:class:`HostConnections`), at most ``max_connections``, each
carrying one request at a time; requests beyond them wait for one. A connection the server closed is dropped,
never reused.

``awscrt.http`` does all its IO on an event-loop thread of its own, in C: writing the request, parsing the answer.
A request on its way is an :class:`Exchange`: handed to a connection, it is answered through callbacks on that
thread, and its end is reported once, by the transport the pool belongs to (:class:`Transport`,
:class:`mpcommit.store.crt_transport.CrtCompleter`), whose watchdog ends the requests that outlive their time.
Failures are the botocore exceptions botocore would raise, with the socket error
:func:`mpcommit.store.errors.translate` looks for (:func:`connect_error`).
"""

from __future__ import annotations

import collections
import io
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from awscrt import http as crt_http
from awscrt.exceptions import AwsCrtError
from botocore.exceptions import ConnectionClosedError, ConnectTimeoutError, EndpointConnectionError, SSLError

from .crt_nodelay import no_delay
from .transport import Done


def connect_error(exc: BaseException, url: str) -> Exception:
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


class Exchange:
    """One request on its way: waiting for a connection, sent, or answered."""

    __slots__ = ("request", "url", "done", "chunks", "deadline", "connection", "sent", "timed_out", "parse",
                 "headers", "reads_headers", "split")

    def __init__(self, request: Any, url: str, done: Done, deadline: float, parse: Parse, *,
                 reads_headers: bool = True, split: bool = False):
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
        #: Whether ``parse`` reads the answer's headers: a complete's answer is all in its body, and the headers'
        #: callback is Python run on the event loop's thread, under the interpreter lock, for every answer.
        self.reads_headers = reads_headers
        #: Whether the request goes out in more than one write (a body beyond the head's first message): its
        #: connection needs TCP_NODELAY first (:mod:`.crt_nodelay`).
        self.split = split

    def on_response(self, http_stream: Any, status_code: int, headers: Any, **_: Any) -> None:
        self.headers = {name.lower(): value for name, value in headers}

    def on_body(self, http_stream: Any, chunk: bytes, **_: Any) -> None:
        self.chunks.append(bytes(chunk))


class RequestBody(io.RawIOBase):
    """A request body read straight from the caller's buffer (an 8 MiB part is not copied), pushing its exchange's
    deadline on with every read: a body still being sent is progress, as botocore's read timeout counts it."""

    def __init__(self, data: bytes | bytearray | memoryview, read_timeout: float):
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._at = 0
        self._read_timeout = read_timeout
        self.exchange: Exchange | None = None

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


class Transport(Protocol):
    """What a host's connections use of the transport they belong to: its event loop (``bootstrap``) and socket
    options, its TLS context, its read timeout, and its register of the requests not yet ended."""

    bootstrap: Any
    socket_options: Any
    read_timeout: float

    def tls_context(self) -> Any: ...

    def finished(self, exchange: Exchange) -> bool:
        """Whether the exchange already ended (answered, failed or timed out)."""
        ...

    def finish(self, exchange: Exchange, result: Any, error: BaseException | None) -> bool:
        """Report the exchange's end to its caller, unless it was reported already."""
        ...


class HostConnections:
    """The connection pool of one host: keep-alive HTTP/1.1 connections, each carrying one request at a time, at
    most ``max_connections`` open or opening; a request finding none free waits for the next one released."""

    def __init__(self, url: str, transport: Transport, max_connections: int):
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.host_header = parts.netloc.rsplit("@", 1)[-1]  # botocore signs the netloc as the Host header
        self._transport = transport
        self._max = max_connections
        self._lock = threading.Lock()
        self._idle: list[Any] = []  # LIFO: the most recently used connection is the likeliest still open
        self._waiting: collections.deque[Exchange] = collections.deque()
        self._open = 0  # connections open or being opened
        self._all: set[Any] = set()  # every open connection, to close them all on close()
        self._no_delay: set[int] = set()  # the open connections (by id) with TCP_NODELAY set

    def submit(self, exchange: Exchange) -> None:
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
        self._no_delay.discard(id(connection))

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
                if not self._transport.finished(candidate):
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

    def _connect(self, exchange: Exchange) -> None:
        t = self._transport
        try:
            tls = None
            if self.https:
                tls = t.tls_context().new_connection_options()
                tls.set_server_name(self.host)
            future = crt_http.HttpClientConnection.new(self.host, self.port, t.bootstrap, t.socket_options, tls)
        except (AwsCrtError, RuntimeError, SSLError) as exc:
            self._failed_to_connect(exchange, exc)
            return
        future.add_done_callback(lambda f: self._connected(f, exchange))

    def _failed_to_connect(self, exchange: Exchange, exc: BaseException) -> None:
        with self._lock:
            self._open -= 1
        error = exc if isinstance(exc, SSLError) else connect_error(exc, exchange.url)
        self._transport.finish(exchange, None, error)
        self.release(None, reusable=False)  # a waiting request may try a connection of its own

    def _connected(self, future: Any, exchange: Exchange) -> None:  # on the event-loop thread
        error = future.exception()
        if error is not None:
            self._failed_to_connect(exchange, error)
            return
        connection = future.result()
        with self._lock:
            self._all.add(connection)
        if self._transport.finished(exchange):  # timed out while connecting: the connection serves another
            self.release(connection, reusable=True)
            return
        self._send(exchange, connection)

    def _send(self, exchange: Exchange, connection: Any) -> None:
        if exchange.split and id(connection) not in self._no_delay:
            no_delay(self.port)  # this connection's socket and any other new one to the host
            with self._lock:
                self._no_delay.add(id(connection))
        exchange.connection = connection
        exchange.sent = True
        exchange.deadline = time.monotonic() + self._transport.read_timeout
        try:
            stream = connection.request(exchange.request, on_body=exchange.on_body,
                                        on_response=exchange.on_response if exchange.reads_headers else None)
            stream.activate()
        except (AwsCrtError, RuntimeError, OSError) as exc:
            # How the binding refuses a stream on a connection that closed since it was taken: a dropped
            # connection, retried by the caller.
            self.release(connection, reusable=False)
            self._transport.finish(exchange, None, ConnectionClosedError(endpoint_url=exchange.url, error=exc))
            return
        stream.completion_future.add_done_callback(lambda f: self._answered(f, exchange))

    def _answered(self, future: Any, exchange: Exchange) -> None:  # on the event-loop thread
        error = future.exception()
        connection = exchange.connection
        if error is not None or exchange.timed_out:
            self.release(connection, reusable=False)
            if exchange.timed_out:
                return  # the watchdog has reported it
            self._transport.finish(exchange, None, ConnectionClosedError(endpoint_url=exchange.url, error=error))
            return
        self.release(connection, reusable=True)
        try:
            result = exchange.parse(future.result(), exchange.headers, b"".join(exchange.chunks))
        except Exception as exc:  # noqa: BLE001 - the ClientError botocore would raise, handed to the caller
            self._transport.finish(exchange, None, exc)
            return
        self._transport.finish(exchange, result, None)

    def close(self) -> None:
        with self._lock:
            connections = list(self._all)
            self._idle.clear()
        for connection in connections:
            connection.close()
