"""CompleteMultipartUpload through the AWS Common Runtime (awscrt): the job commit's one request per file, signed
by the CRT's SigV4 signer and sent on CRT HTTP connections.

The lean path (:mod:`mpcommit.store.lean`) still spends its CPU in Python: botocore's signer builds the canonical
request through botocore's header classes and runs five HMACs per request, and urllib3/http.client parse every
answer's headers through the email package. Here both run in C: ``awscrt.auth.aws_sign_request`` signs, and an
``awscrt.http`` connection writes the request and parses the answer on the CRT's event-loop thread; Python only
builds the document and reads the status and body. (Measured against the stub: about 0.15 ms of client CPU per
request at 32 threads, against 0.36 ms for the lean path and 0.18 ms for the CRT signer on http.client.)

Everything else is the lean path's, so that the request and its outcomes are the same: the document
(:func:`~mpcommit.store.lean.complete_body`, with each part's ChecksumCRC32), the URL botocore's endpoint rules
resolve (:func:`~mpcommit.store.lean.key_base_url`: addressing style, region, endpoint), the key and upload id
encoded as botocore encodes them, ``x-amz-expected-bucket-owner`` when the store sets an owner, the payload's
SHA-256 signed and sent in ``X-Amz-Content-SHA256`` (what botocore's S3 signer does for this request), and the
answer read by :func:`~mpcommit.store.lean.etag_from_answer` (a ``ClientError`` with the parsed code, a 200 whose
body is an ``<Error>`` included). Network failures are raised as the botocore exceptions the other paths raise,
with the socket error :func:`mpcommit.store.errors.translate` looks for, so retries and messages do not change.

awscrt is a dependency, but a wheel may be missing for a platform: without it the store keeps the lean path.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import io
import logging
import queue
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import get_cert_path

from .lean import complete_body, etag_from_answer, key_and_query, key_base_url

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

_logged_missing = False


def crt_available() -> bool:
    """Whether awscrt can be imported; logs once (at debug) that the lean path is used when it cannot."""
    global _logged_missing
    if crt_auth is not None:
        return True
    if not _logged_missing:
        _logged_missing = True
        log.debug("awscrt cannot be imported (%s): CompleteMultipartUpload uses the lean path "
                  "(botocore's signer and urllib3)", _IMPORT_ERROR)
    return False


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


class _Host:
    """A pool of keep-alive HTTP/1.1 connections to one host: each carries one request at a time."""

    def __init__(self, url: str, *, bootstrap: Any, tls: Callable[[], Any], socket_options: Any, max_connections: int,
                 connect_wait: float):
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.host_header = parts.netloc.rsplit("@", 1)[-1]  # botocore signs the netloc as the Host header
        self._bootstrap = bootstrap
        self._tls = tls
        self._socket_options = socket_options
        self._connect_wait = connect_wait
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue(max_connections)

    def take(self, url: str) -> Any:
        """An open idle connection, or a new one (a connection the server closed is dropped, not reused)."""
        while True:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                break
            if connection.is_open():
                return connection
        tls = None
        if self.https:
            tls = self._tls().new_connection_options()
            tls.set_server_name(self.host)
        try:
            return crt_http.HttpClientConnection.new(
                self.host, self.port, self._bootstrap, self._socket_options, tls).result(self._connect_wait)
        except concurrent.futures.TimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=url, error=exc) from exc
        except AwsCrtError as exc:
            raise _connect_error(exc, url) from exc

    def give_back(self, connection: Any) -> None:
        try:
            self._idle.put_nowait(connection)
        except queue.Full:  # more threads than the pool keeps (as urllib3 with block=False): close the extra one
            connection.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


class CrtCompleter:
    """CompleteMultipartUpload signed by the CRT's SigV4 signer and sent on CRT connections. Thread-safe."""

    def __init__(self, client: Any, credentials: Any, *, max_connections: int, connect_timeout: float,
                 read_timeout: float, expected_bucket_owner: str | None = None, ca_bundle: str | None = None):
        self._client = client
        self._credentials = credentials
        self._region = client.meta.region_name or "us-east-1"
        self._owner = expected_bucket_owner
        self._read_timeout = read_timeout
        self._max_connections = max_connections
        # The completer's own event loop (one thread does the IO of all its connections), never the CRT's
        # process-wide default: a store is made per process, and a loop does not survive a fork.
        self._loop = crt_io.EventLoopGroup(1)
        self._bootstrap = crt_io.ClientBootstrap(self._loop, crt_io.DefaultHostResolver(self._loop))
        self._socket_options = crt_io.SocketOptions()
        self._socket_options.connect_timeout_ms = max(1, int(connect_timeout * 1000))
        # The TCP connect is bounded by the socket option; a TLS handshake is a read, bounded like one.
        self._connect_wait = connect_timeout + read_timeout
        #: The CA bundle TLS is verified with: the configured one, else certifi's (as botocore verifies).
        self.ca_bundle = ca_bundle or get_cert_path(True)
        self._tls: Any = None  # made for the first https host, so that a bad bundle fails where TLS is used
        self._bases: dict[str, tuple[str, str, _Host]] = {}  # bucket -> (URL before the key, its path, host)
        self._hosts: dict[tuple[str, str], _Host] = {}
        self._lock = threading.Lock()
        self._signing_key: tuple[str, str, str | None] | None = None
        self._provider: Any = None
        self.user_agent = f"mpcommit crt-complete awscrt/{awscrt_version}"

    def _base(self, bucket: str) -> tuple[str, str, _Host]:
        found = self._bases.get(bucket)
        if found is None:
            base = key_base_url(self._client, bucket, self._owner)
            parts = urlsplit(base)
            with self._lock:
                host_key = (parts.scheme, parts.netloc)
                host = self._hosts.get(host_key)
                if host is None:
                    host = self._hosts[host_key] = _Host(
                        base, bootstrap=self._bootstrap, tls=self._tls_context, socket_options=self._socket_options,
                        max_connections=self._max_connections, connect_wait=self._connect_wait)
                found = self._bases[bucket] = (base, parts.path, host)
        return found

    def _tls_context(self) -> Any:
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

    def signed_request(self, path: str, host_header: str, body: bytes, *, date: datetime.datetime | None = None) -> Any:
        """The request for ``path`` (key and query, encoded) with ``body``, signed as botocore's S3 signer signs
        it: the same headers signed (Host, X-Amz-Content-SHA256, X-Amz-Date, the owner and the session token
        when there are any; not User-Agent), so the same signature for the same instant."""
        headers = [("Host", host_header), ("User-Agent", self.user_agent)]
        if self._owner:
            headers.append(("x-amz-expected-bucket-owner", self._owner))
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

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any]) -> str:
        """One CompleteMultipartUpload; returns the ETag. Raises the botocore exception botocore would have."""
        base, base_path, host = self._base(bucket)
        tail = key_and_query(key, upload_id)
        url = base + tail
        body = complete_body(parts)
        request = self.signed_request(base_path + tail, host.host_header, body)
        connection = host.take(url)
        chunks: list[bytes] = []
        try:
            stream = connection.request(request, on_body=lambda http_stream, chunk, **_: chunks.append(bytes(chunk)))
            stream.activate()
            status = stream.completion_future.result(self._read_timeout)
        except concurrent.futures.TimeoutError as exc:
            connection.close()  # the answer may still come: this connection can carry nothing else
            raise ReadTimeoutError(endpoint_url=url, error=exc) from exc
        except (AwsCrtError, RuntimeError, OSError) as exc:
            # AwsCrtError from the stream; RuntimeError is how the binding refuses a stream on a connection that
            # closed since it was taken (e.g. AWS_ERROR_HTTP_CONNECTION_CLOSED): a dropped connection, retried.
            connection.close()
            raise ConnectionClosedError(endpoint_url=url, error=exc) from exc
        host.give_back(connection)
        return etag_from_answer(status, b"".join(chunks))

    def close(self) -> None:
        with self._lock:
            for host in self._hosts.values():
                host.close()
