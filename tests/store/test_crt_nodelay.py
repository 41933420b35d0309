"""TCP_NODELAY on the CRT's connections (mpcommit.store.crt_nodelay): set on a connection before a request whose
body goes out in more than one write, so that Nagle's algorithm does not hold the body's last segment until the
server's delayed acknowledgement (40 ms a part on Linux). Linux only: the sockets are found in /proc/self/fd."""

from __future__ import annotations

import base64
import http.server
import os
import socket
import sys
import threading
import zlib

import pytest

from mpcommit.store import crt_nodelay
from mpcommit.store.crt_nodelay import no_delay

from .test_transport import _Answers, _answers_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sockets found in /proc/self/fd")


def _our_sockets_to(port: int) -> list[bool]:
    """Whether each TCP socket of this process connected to ``port`` has TCP_NODELAY."""
    flags = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=int(name))
        except OSError:
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.family == socket.AF_INET and sock.getpeername()[1] == port:
                flags.append(bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
        except OSError:
            pass
        finally:
            sock.detach()
    return flags


def test_no_delay_sets_it_on_the_sockets_to_one_port_once_and_leaves_others_alone() -> None:
    with socket.create_server(("127.0.0.1", 0)) as ours, socket.create_server(("127.0.0.1", 0)) as other:
        port, other_port = ours.getsockname()[1], other.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as a, \
                socket.create_connection(("127.0.0.1", other_port)) as b:
            assert not a.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert no_delay(port) == 1
            assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert not b.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert no_delay(port) == 0  # looked at once
            assert a.getpeername()[1] == port  # the descriptor was borrowed, not closed
            with socket.create_connection(("127.0.0.1", port)) as c:
                assert no_delay(port) == 1 and c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_without_proc_nothing_is_done(monkeypatch) -> None:
    monkeypatch.setattr(crt_nodelay, "_FD_DIR", "/nonexistent/fd")
    assert no_delay(80) == 0


def test_a_part_goes_out_on_a_connection_without_nagles_delay() -> None:
    """A request without a body (CreateMultipartUpload) leaves the connection as it is; a part of 200 KiB, sent in
    several writes, finds TCP_NODELAY set first -- without it, its last segment waits for the server's delayed
    acknowledgement."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        store = _answers_store("crt", f"http://127.0.0.1:{port}", max_completes_in_flight=1)
        upload_id = store.create_multipart_upload("b", "t/k.bin", content_type="application/octet-stream")
        assert _our_sockets_to(port) == [False]  # one connection, as the CRT opened it
        part = bytes(range(256)) * 800
        crc = base64.b64encode(zlib.crc32(part).to_bytes(4, "big")).decode()
        store.upload_part("b", "t/k.bin", upload_id, 1, bytearray(part), crc)
        assert _our_sockets_to(port) == [True]
        store.close()
    finally:
        server.shutdown()
        server.server_close()
