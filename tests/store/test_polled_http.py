"""A task's small requests on the CRT transport's polled sockets (mpcommit.store.polled_http): answered only where the
store is pumped, at most ``max_connections`` connections, a kept-alive connection the server closed sent again on a
new one, and every failure -- no answer in time, a refused connection, an error answer, a certificate not trusted --
ended with the exception botocore would raise, so that the writer goes on through the pool. Against a small server
of this file's (plain sockets, so that a failure can be made to order) and, for TLS, a certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError, SSLError

from mpcommit.options import RetryPolicy, S3Options
from mpcommit.sizing import crc32_b64
from mpcommit.store.s3 import S3Store

FAST = RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.002)
DENIED = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>"
          b"<Message>Access Denied</Message></Error>")


class SmallServer:
    """Answers CreateMultipartUpload and UploadPart as S3 does, one thread per connection. ``mode``: ``ok``;
    ``one_per_connection`` (closes each connection after one answer, without saying so); ``silent`` (reads, never
    answers); ``denied`` (403 AccessDenied); ``chunked`` (the create's answer in chunks)."""

    def __init__(self, mode: str = "ok", tls: ssl.SSLContext | None = None):
        self.mode = mode
        self.tls = tls
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.connections = 0
        self.most_open = 0
        self._open = 0
        self._lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self.connections += 1
            self._open += 1
            self.most_open = max(self.most_open, self._open)
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
                length = int(headers.get("content-length", "0"))
                while len(data) < length:
                    data += conn.recv(65536)
                body, data = data[:length], data[length:]
                with self._lock:
                    self.requests.append((method, path, headers, body))
                    number = len(self.requests)
                if self.mode == "silent":
                    time.sleep(30)
                    return
                conn.sendall(self._answer(method, path, headers, number))
                if self.mode == "one_per_connection":
                    return
        except (OSError, ssl.SSLError):
            return
        finally:
            with self._lock:
                self._open -= 1
            conn.close()

    def _answer(self, method: str, path: str, headers: dict[str, str], number: int) -> bytes:
        if self.mode == "denied":
            return b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(DENIED), DENIED)
        if method == "POST" and path.endswith("?uploads"):
            xml = b"<InitiateMultipartUploadResult><UploadId>u-%d&amp;x</UploadId></InitiateMultipartUploadResult>" % number
            if self.mode == "chunked":
                half = len(xml) // 2
                return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
                        % (half, xml[:half], len(xml) - half, xml[half:]))
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(xml), xml)
        echoed = headers.get("x-amz-checksum-crc32", "")
        return (b"HTTP/1.1 200 OK\r\nETag: \"etag-%d\"\r\nx-amz-checksum-crc32: %s\r\nContent-Length: 0\r\n\r\n"
                % (number, echoed.encode()))


@pytest.fixture
def server(request):
    started: list[SmallServer] = []

    def start(mode: str = "ok", tls: ssl.SSLContext | None = None) -> SmallServer:
        started.append(SmallServer(mode, tls))
        return started[-1]

    yield start
    for s in started:
        s.close()


def _store(endpoint: str, **kw: Any) -> S3Store:
    return S3Store(S3Options(region="us-east-1", access_key_id="AKIDEXAMPLE", secret_access_key="secret",
                             endpoint_url=endpoint, retry=FAST, complete_transport="crt", **kw))


class Answers:
    def __init__(self) -> None:
        self.got: dict[int, tuple[Any, BaseException | None]] = {}
        self.threads: set[str] = set()

    def done(self, i: int):
        def done(result: Any, error: BaseException | None) -> None:
            self.threads.add(threading.current_thread().name)
            self.got[i] = (result, error)
        return done


def _pump_until(store: S3Store, answers: Answers, n: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while len(answers.got) < n and time.monotonic() < deadline:
        store.pump(0.05)
    assert len(answers.got) == n, f"{len(answers.got)} of {n} answered in {seconds} s"


def test_requests_are_answered_where_pumped_on_at_most_max_connections(server):
    srv = server()
    store = _store(srv.endpoint, max_completes_in_flight=2)
    crt = store.completer("bkt")
    answers = Answers()
    for i in range(12):
        crt.start_create_multipart_upload("bkt", f"t/p={i}/f.bin", answers.done(i), content_type="text/plain")
    time.sleep(0.3)
    assert answers.got == {}, "nothing is answered before the store is pumped"
    _pump_until(store, answers, 12)
    assert answers.threads == {threading.current_thread().name}
    assert sorted(r for r, e in answers.got.values()) == sorted(f"u-{n}&x" for n in range(1, 13))
    assert all(e is None for r, e in answers.got.values())
    assert srv.most_open <= 2 and srv.connections <= 2
    method, path, headers, body = srv.requests[0]
    assert (method, body) == ("POST", b"") and path.startswith("/bkt/t/p%3D") and path.endswith("?uploads")
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert headers["content-type"] == "text/plain" and headers["x-amz-checksum-algorithm"] == "CRC32"


def test_a_part_goes_out_whole_with_its_checksum_and_comes_back_with_its_etag(server):
    srv = server()
    store = _store(srv.endpoint)
    crt = store.completer("bkt")
    answers = Answers()
    bodies = [bytes([i]) * size for i, size in enumerate([0, 1, 70_000, 300_000, 1_000_000])]
    for i, body in enumerate(bodies):
        crt.start_upload_part("bkt", "t/f.bin", "u/1+2", i + 1, body, crc32_b64(body), answers.done(i))
    _pump_until(store, answers, len(bodies))
    got = {path: (headers, body) for method, path, headers, body in srv.requests}
    for i, body in enumerate(bodies):
        headers, sent = got[f"/bkt/t/f.bin?uploadId=u%2F1%2B2&partNumber={i + 1}"]
        assert sent == body and headers["x-amz-checksum-crc32"] == crc32_b64(body)
        etag, echoed = answers.got[i][0]
        assert etag.startswith('"etag-') and echoed == crc32_b64(body)


def test_a_kept_alive_connection_the_server_closed_is_sent_again_on_a_new_one(server):
    srv = server("one_per_connection")
    store = _store(srv.endpoint, max_completes_in_flight=1)
    crt = store.completer("bkt")
    answers = Answers()
    for i in range(5):  # one after the other: each reuses the connection the server closed after the last answer
        crt.start_create_multipart_upload("bkt", f"t/{i}", answers.done(i))
        _pump_until(store, answers, i + 1)
    assert [answers.got[i][1] for i in range(5)] == [None] * 5
    assert srv.connections == 5 and len(srv.requests) == 5


def test_a_request_without_an_answer_ends_with_a_read_timeout(server):
    srv = server("silent")
    store = _store(srv.endpoint, read_timeout=0.3)
    answers = Answers()
    store.completer("bkt").start_create_multipart_upload("bkt", "t/f", answers.done(0))
    _pump_until(store, answers, 1, seconds=10)
    result, error = answers.got[0]
    assert result is None and isinstance(error, ReadTimeoutError)


def test_a_refused_connection_ends_with_the_error_botocore_raises():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    store = _store(f"http://127.0.0.1:{port}", connect_timeout=2)
    answers = Answers()
    store.completer("bkt").start_create_multipart_upload("bkt", "t/f", answers.done(0))
    _pump_until(store, answers, 1, seconds=10)
    assert isinstance(answers.got[0][1], (EndpointConnectionError, ConnectTimeoutError))


def test_an_error_answer_is_the_client_error_botocore_raises_and_the_store_translates(server):
    srv = server("denied")
    store = _store(srv.endpoint)
    answers = Answers()
    store.completer("bkt").start_create_multipart_upload("bkt", "t/f", answers.done(0))
    # Through the store: counted as one attempt and translated as every other request's error.
    assert store.start_create_multipart_upload("bkt", "t/g", answers.done(1))
    _pump_until(store, answers, 2)
    error = answers.got[0][1]
    assert isinstance(error, ClientError) and error.response["Error"]["Code"] == "AccessDenied"
    from mpcommit.errors import AccessDeniedError

    assert isinstance(answers.got[1][1], AccessDeniedError)


def test_a_chunked_answer_is_read_whole(server):
    srv = server("chunked")
    store = _store(srv.endpoint)
    answers = Answers()
    store.completer("bkt").start_create_multipart_upload("bkt", "t/f", answers.done(0))
    _pump_until(store, answers, 1)
    assert answers.got[0] == ("u-1&x", None)


def _certificate(tmp_path) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mpcommit test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_tls_is_verified_with_the_ca_bundle_and_parts_go_unsigned_over_it(server, tmp_path, monkeypatch):
    cert, key = _certificate(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv = server("ok", tls=context)

    untrusting = _store(srv.endpoint)  # certifi's bundle: the certificate made here is not in it
    answers = Answers()
    untrusting.completer("bkt").start_create_multipart_upload("bkt", "t/f", answers.done(0))
    _pump_until(untrusting, answers, 1)
    assert answers.got[0][0] is None and isinstance(answers.got[0][1], SSLError)

    monkeypatch.setenv("AWS_CA_BUNDLE", cert)
    store = _store(srv.endpoint)
    crt = store.completer("bkt")
    answers = Answers()
    crt.start_create_multipart_upload("bkt", "t/f", answers.done(0))
    body = b"z" * 200_000
    crt.start_upload_part("bkt", "t/f", "u-1", 1, body, crc32_b64(body), answers.done(1))
    _pump_until(store, answers, 2)
    assert answers.got[0] == ("u-2&x", None) or answers.got[0] == ("u-1&x", None)
    assert answers.got[1][1] is None and answers.got[1][0][1] == crc32_b64(body)
    part = [h for m, p, h, b in srv.requests if m == "PUT"][0]
    assert part["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"  # over TLS, as botocore: the CRC32 covers the body


def test_closing_the_transport_ends_what_is_in_flight(server):
    srv = server("silent")
    store = _store(srv.endpoint)
    answers = Answers()
    store.completer("bkt").start_create_multipart_upload("bkt", "t/f", answers.done(0))
    store.pump(0.1)
    store.close()
    assert len(answers.got) == 1 and answers.got[0][1] is not None
