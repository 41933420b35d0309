"""A task's small requests sent on non-blocking sockets and answered on the thread that polls: no other thread runs.

Issue 39: a task of 1,250 small files spent about three times the CPU on its two requests per file (create and only
part) that the same requests cost alone -- about 1 ms a request. The work itself is small (building and signing a
request, a few system calls, reading an answer); the rest was threads handing the interpreter lock to each other.
A request through the CRT wakes an upload pool thread to send it and another thread (the CRT's event loop) three
times to read the answer into Python, while the task's own thread, busy encoding Parquet, wants the lock back;
each hand-over costs both threads a context switch and a futex call. Measured on one task of 1,250 interleaved
partitions against the stub server, process CPU (bench/results/task_cpu/2026-11-29-experiments): requests answered
in-process with no pool thread 0.8 ms per extra file, with the pool thread doing nothing but checksums 1.07 ms, the
real requests through the pool and the CRT about 3.1 ms -- and the same requests sent and read on the task's own
thread over plain sockets, 1.8 ms.

So a small file's create and part go out here: :meth:`PolledRequests.start` builds and signs the request
(:mod:`.signing`: botocore's signature), writes what the socket takes at once, and returns; :meth:`pump` --
called by the task's thread whenever it is about to wait, and on each new request -- writes what is left, reads
what has arrived, and calls each finished request's ``done`` on the pumping thread. Nothing is answered while
nobody pumps: the writer pumps where it would wait (:mod:`mpcommit.protocol.writer`), so a request's answer is read
at the next file's close at the latest.

Only the happy path is here: an answer that is not a success, a connection that fails or closes, or a request that
outlives its time ends with the botocore exception botocore would raise, and the caller goes on through the upload
pool with the store's retries (:meth:`mpcommit.protocol.writer.MultipartWriter._send_part_polled`). Connections are
HTTP/1.1 keep-alive, one request at a time each, at most ``max_connections`` per host; TLS is verified with the CA
bundle the CRT transport uses (botocore's).
"""

from __future__ import annotations

import collections
import errno
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)

from .crt_connections import Parse
from .transport import Done

#: Bytes asked of a socket per read: an S3 answer to a create or a part is well under this.
_READ_BYTES = 64 * 1024
#: The most an answer's head may take (S3's are under 2 KiB).
_MAX_HEAD_BYTES = 64 * 1024
_IN = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP
_OUT = select.POLLOUT | select.POLLERR | select.POLLHUP


class _Request:
    __slots__ = ("head", "body", "done", "parse", "url", "deadline", "resent")

    def __init__(self, head: bytes, body: memoryview, done: Done, parse: Parse, url: str, deadline: float):
        self.head = head
        self.body = body
        self.done = done
        self.parse = parse
        self.url = url
        self.deadline = deadline
        #: Sent again once already, after a kept-alive connection turned out closed before any answer.
        self.resent = False


class _Connection:
    """One keep-alive connection: connecting, idle, sending a request or reading its answer."""

    __slots__ = ("sock", "fd", "request", "out", "sent", "answer", "connecting", "handshaking", "reused", "tls",
                 "server_name")

    def __init__(self, sock: socket.socket, *, tls: ssl.SSLContext | None, server_name: str):
        self.sock: Any = sock
        self.fd = sock.fileno()  # kept: a socket wrapped for TLS, or closed, answers another or -1
        #: Wraps the socket once it is connected (a socket wrapped before would have no TLS state to send with).
        self.tls = tls
        self.server_name = server_name
        #: Whether it carried an answer before: a server may have closed it since, unseen.
        self.reused = False
        self.request: _Request | None = None
        self.out: list[memoryview] = []  # what is left to write of the request: its head, then its body
        self.sent = False
        self.answer = bytearray()
        self.connecting = True
        self.handshaking = tls is not None

    def wants(self) -> int:
        if self.connecting or self.out:
            return _OUT
        return _IN


class PolledRequests:
    """Small requests for one transport's hosts, sent and answered on the thread that pumps. Thread-safe: one thread
    pumps at a time, and ``done`` callbacks run on it after its pass, with no lock held (a callback may start the
    next request)."""

    def __init__(self, *, sign: Callable[..., Any], connect_timeout: float, read_timeout: float,
                 max_connections: int, tls: Callable[[], ssl.SSLContext | None]):
        self._sign = sign
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max = max_connections
        self._tls = tls
        self._lock = threading.Lock()
        self._poller = select.poll()
        self._by_fd: dict[int, tuple[tuple[str, int, bool], _Connection]] = {}
        self._idle: dict[tuple[str, int, bool], list[_Connection]] = {}
        self._open: dict[tuple[str, int, bool], int] = {}
        self._waiting: dict[tuple[str, int, bool], collections.deque[_Request]] = {}
        self._in_flight = 0
        self._finished: list[tuple[Done, Any, BaseException | None]] = []
        self._closed = False

    # ------------------------------------------------------------ requests
    def start(self, method: str, host: tuple[str, int, bool], host_header: str, path: str, url: str,
              body: bytes | bytearray | memoryview, headers: Sequence[tuple[str, str]], done: Done, parse: Parse,
              *, payload: str | None = None) -> None:
        """Send one request (``path``: the key and query, encoded) to ``host`` = (name, port, https) without
        waiting -- what the socket takes at once is written now; ``done(parse(status, headers, body), None)`` or
        ``done(None, error)`` is called once, by a later :meth:`pump`, on the thread that pumps."""
        signed = self._sign(path, host_header, body, method=method, headers=headers, payload=payload)
        lines = [f"{method} {path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in signed]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        request = _Request(head, memoryview(body).cast("B"), done, parse, url,
                           time.monotonic() + self._connect_timeout + self._read_timeout)
        with self._lock:
            if self._closed:
                self._finished.append((done, None, ConnectionClosedError(endpoint_url=url,
                                                                          error=RuntimeError("closed"))))
            else:
                self._in_flight += 1
                self._waiting.setdefault(host, collections.deque()).append(request)
                self._dispatch(host)
        # Not pumped here: the caller may hold a lock that the answer's callback takes (the writer's create lock).

    def pump(self, timeout: float) -> int:
        """Write what the sockets take, read what arrived (waiting up to ``timeout`` seconds for something to), end
        the requests that outlived their time, and call the finished requests' callbacks. Returns the requests
        still in flight."""
        finished: list[tuple[Done, Any, BaseException | None]] = []
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return self._in_flight
        try:
            if self._in_flight:
                ready = self._poller.poll(max(0, int(timeout * 1000)) if not self._finished else 0)
                for fd, events in ready:
                    found = self._by_fd.get(fd)
                    if found is not None:
                        self._step(found[0], found[1], events)
                self._expire()
            finished, self._finished = self._finished, []
            in_flight = self._in_flight
        finally:
            self._lock.release()
        for done, result, error in finished:
            done(result, error)
        return in_flight

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def close(self) -> None:
        """Close every connection; requests in flight end with ConnectionClosedError (reported by this call)."""
        with self._lock:
            self._closed = True
            for host, queue in self._waiting.items():
                while queue:
                    self._end(queue.popleft(), None, RuntimeError("the transport was closed"))
            for host, connection in list(self._by_fd.values()):
                if connection.request is not None:
                    self._end(connection.request, None, RuntimeError("the transport was closed"))
                    connection.request = None
                self._drop(host, connection)
            finished, self._finished = self._finished, []
        for done, result, error in finished:
            done(result, error)

    # ------------------------------------------------------------ under the lock
    def _dispatch(self, host: tuple[str, int, bool]) -> None:
        """Hand waiting requests of ``host`` to idle connections, opening new ones up to the bound."""
        queue = self._waiting.get(host)
        idle = self._idle.setdefault(host, [])
        while queue:
            if idle:
                self._send(host, idle.pop(), queue.popleft())
            elif self._open.get(host, 0) < self._max:
                request = queue.popleft()
                connection = self._connect(host, request)
                if connection is not None:
                    self._send(host, connection, request)
            else:
                return

    def _connect(self, host: tuple[str, int, bool], request: _Request) -> _Connection | None:
        """A new connection, made while the caller waits (bounded by the connect timeout; a task opens a few and
        keeps them), so that the request that needed it is written at once: a file's create reaches the store when
        the file opens, and its upload is aborted with its job from then on, however long nobody pumps."""
        name, port, https = host
        sock = None
        try:
            address = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(address[0], socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a head and a body: never wait for an ACK
            sock.settimeout(self._connect_timeout)
            sock.connect(address[4])
            if https:
                context = self._tls()
                assert context is not None
                sock = context.wrap_socket(sock, server_hostname=name)  # the handshake, within the same timeout
            sock.setblocking(False)
        except Exception as exc:  # noqa: BLE001 - refused, unresolved, timed out, a certificate not trusted
            if sock is not None:
                sock.close()
            if isinstance(exc, BotoCoreError):
                error: BaseException = exc
            elif isinstance(exc, socket.timeout):
                error = ConnectTimeoutError(endpoint_url=request.url, error=exc)
            elif isinstance(exc, ssl.SSLError):
                error = SSLError(endpoint_url=request.url, error=exc)
            else:
                error = EndpointConnectionError(endpoint_url=request.url, error=exc)
            self._end(request, None, error)
            return None
        connection = _Connection(sock, tls=None, server_name=name)
        connection.connecting = False
        self._open[host] = self._open.get(host, 0) + 1
        self._by_fd[sock.fileno()] = (host, connection)
        self._poller.register(sock.fileno(), _IN)
        return connection

    def _send(self, host: tuple[str, int, bool], connection: _Connection, request: _Request) -> None:
        connection.request = request
        connection.out = [memoryview(request.head), request.body] if len(request.body) else [memoryview(request.head)]
        connection.sent = False
        connection.answer = bytearray()
        if not connection.connecting:
            request.deadline = time.monotonic() + self._read_timeout
            self._write(host, connection)
        self._poller.modify(connection.fd, connection.wants())

    def _step(self, host: tuple[str, int, bool], connection: _Connection, events: int) -> None:
        request = connection.request
        try:
            if connection.connecting:
                error = connection.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise EndpointConnectionError(endpoint_url=request.url if request else "",
                                                  error=OSError(error, errno.errorcode.get(error, str(error))))
                if connection.tls is not None:
                    connection.sock = connection.tls.wrap_socket(connection.sock, do_handshake_on_connect=False,
                                                                 server_hostname=connection.server_name)
                    connection.tls = None  # the same descriptor, now with its TLS state
                if connection.handshaking:
                    try:
                        connection.sock.do_handshake()  # type: ignore[attr-defined]
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError) as want:
                        self._poller.modify(connection.fd,
                                            _IN if isinstance(want, ssl.SSLWantReadError) else _OUT)
                        return
                    connection.handshaking = False
                connection.connecting = False
                if request is not None:
                    request.deadline = time.monotonic() + self._read_timeout
            if request is None:
                # An idle connection readable: the server closed it (or sent what nobody asked for). Drop it.
                self._drop(host, connection)
                return
            if connection.out:
                self._write(host, connection)
            elif events & _IN:
                self._read(host, connection)
            if connection.request is not None and not self._closed:
                self._poller.modify(connection.fd, connection.wants())
        except Exception as exc:  # noqa: BLE001 - whatever a socket raises fails this request, never the pump
            self._fail(host, connection, exc)

    def _write(self, host: tuple[str, int, bool], connection: _Connection) -> None:
        while connection.out:
            view = connection.out[0]
            try:
                n = connection.sock.send(view)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return
            if n < len(view):
                connection.out[0] = view[n:]
                return
            connection.out.pop(0)
        connection.sent = True

    def _read(self, host: tuple[str, int, bool], connection: _Connection) -> None:
        while True:
            try:
                chunk = connection.sock.recv(_READ_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            if not chunk:
                raise ConnectionClosedError(endpoint_url=connection.request.url if connection.request else "",
                                            error=RuntimeError("the server closed the connection"))
            connection.answer += chunk
            answer = _parse_answer(connection.answer)
            if answer is not None:
                break
            if len(chunk) < _READ_BYTES and not isinstance(connection.sock, ssl.SSLSocket):
                return  # nothing more for now (a TLS socket may hold decrypted bytes: read on)
        status, headers, body, keep_alive = answer
        request = connection.request
        assert request is not None
        connection.request = None
        connection.answer = bytearray()
        if keep_alive:
            connection.reused = True
            self._idle.setdefault(host, []).append(connection)
            self._poller.modify(connection.fd, _IN)
        else:
            self._drop(host, connection)
        try:
            result = request.parse(status, headers, body)
        except Exception as exc:  # noqa: BLE001 - the ClientError botocore would raise, for the caller
            self._end(request, None, exc)
        else:
            self._end(request, result, None)
        self._dispatch(host)

    def _fail(self, host: tuple[str, int, bool], connection: _Connection, exc: BaseException) -> None:
        request = connection.request
        connection.request = None
        self._drop(host, connection)
        if request is not None and connection.reused and not connection.answer and not request.resent:
            # A kept-alive connection the server had closed, found only now: once more, on a new connection (as
            # botocore's urllib3 does). No answer came, so the request most likely never reached the server.
            request.resent = True
            self._waiting.setdefault(host, collections.deque()).appendleft(request)
        elif request is not None:
            if isinstance(exc, ssl.SSLError):  # a certificate not trusted, a failed handshake: as botocore says it
                exc = SSLError(endpoint_url=request.url, error=exc)
            elif not isinstance(exc, BotoCoreError):
                exc = ConnectionClosedError(endpoint_url=request.url, error=exc)
            self._end(request, None, exc)
        self._dispatch(host)

    def _expire(self) -> None:
        now = time.monotonic()
        for host, connection in [found for found in self._by_fd.values()
                                 if found[1].request is not None and found[1].request.deadline <= now]:
            request = connection.request
            assert request is not None
            error: BaseException = (ConnectTimeoutError(endpoint_url=request.url, error="no connection in time")
                                    if connection.connecting else
                                    ReadTimeoutError(endpoint_url=request.url, error="no answer in time"))
            connection.request = None
            self._drop(host, connection)
            self._end(request, None, error)
            self._dispatch(host)
        for host, queue in self._waiting.items():
            while queue and queue[0].deadline <= now:
                request = queue.popleft()
                self._end(request, None, ConnectTimeoutError(endpoint_url=request.url, error="no connection in time"))

    def _drop(self, host: tuple[str, int, bool], connection: _Connection) -> None:
        fd = connection.fd
        if self._by_fd.pop(fd, None) is not None:
            self._poller.unregister(fd)
            self._open[host] -= 1
        idle = self._idle.get(host, [])
        if connection in idle:
            idle.remove(connection)
        try:
            connection.sock.close()
        except OSError:
            pass

    def _end(self, request: _Request, result: Any, error: BaseException | None) -> None:
        self._in_flight -= 1
        self._finished.append((request.done, result, error))


def _parse_answer(data: bytearray) -> tuple[int, dict[str, str], bytes, bool] | None:
    """(status, headers by lower-case name, body, keep-alive) of a whole HTTP/1.1 answer in ``data``, else None
    (not all of it yet). An answer without a length ends with its connection: ConnectionClosedError."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > _MAX_HEAD_BYTES:
            raise ConnectionClosedError(endpoint_url="", error=RuntimeError("an answer's head too long"))
        return None
    lines = bytes(data[:end]).decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ", 2)[:2]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    start = end + 4
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(data, start)
        if body is None:
            return None
    else:
        length = headers.get("content-length")
        if length is None:
            raise ConnectionClosedError(endpoint_url="", error=RuntimeError("an answer without a length"))
        if len(data) < start + int(length):
            return None
        body = bytes(data[start:start + int(length)])
    keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    return int(status), headers, body, keep_alive


def _dechunk(data: bytearray, at: int) -> bytes | None:
    """The body of a chunked answer from ``at``, or None while its last chunk has not arrived."""
    out = bytearray()
    while True:
        line_end = data.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(bytes(data[at:line_end]).split(b";")[0], 16)
        at = line_end + 2
        if size == 0:
            return bytes(out) if data.find(b"\r\n", at) >= 0 else None
        if len(data) < at + size + 2:
            return None
        out += data[at:at + size]
        at += size + 2
