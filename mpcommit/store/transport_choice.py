"""Which transport sends which of the store's requests: the AWS CRT's (:mod:`.crt_transport`) or boto3's
(:class:`.transport.Boto3Completer`, and the client's own methods).

``S3Options.complete_transport`` chooses for CompleteMultipartUpload: 'crt', 'boto3', or 'auto' -- the CRT where
it can stand in for boto3 (:func:`crt_unusable` says why not otherwise). A task's per-file requests
(:data:`CRT_OPERATIONS`) follow the completes, each only where its security parameters all travel as headers;
parts above :data:`CRT_PART_MAX_BYTES` stay on boto3. Directory buckets always use boto3. The transport is made on
first use, so that awscrt is imported only by a store that sends through it.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from typing import Any

from ..errors import UsageError
from ..options import CompleteTransport, S3Options
from .security import RequestSecurity
from .transport import Boto3Completer, Completer, header_fields

log = logging.getLogger(__name__)

#: The requests besides CompleteMultipartUpload that the CRT transport sends when it is in use: a task's, one or
#: two per file (issue 39: through boto3 they cost a task more client CPU per file than the file's own encoding).
CRT_OPERATIONS = ("create_multipart_upload", "upload_part", "put_object")
#: Parts up to this size go through the CRT, larger ones through boto3. The CRT costs less per request, boto3 less
#: per byte: the CRT's HTTP/1.1 client sends a body in 16 KiB messages, each a trip through its channel and a
#: socket write, where boto3 hands the kernel the whole buffer. Measured (issue 39, 2 shared cores, versitygw):
#: CRT 0.7 ms + 4.3 ms per MB of client CPU, boto3 2.7-3.5 ms + 2.0 ms per MB: even at about 1 MB.
CRT_PART_MAX_BYTES = 1024 * 1024
#: Why the CRT transport was not used, logged once per process and reason (at debug: boto3 is a fine transport).
_FALLBACKS_LOGGED: set[str] = set()


def crt_unusable(client: Any, credentials: Any) -> str | None:
    """Why the CRT transport cannot stand in for this client (None when it can)."""
    if credentials is None:
        return "the store was given its client (its credentials are the client's own business)"
    config = client.meta.config
    if getattr(config, "proxies", None) or any(k in ("http", "https", "all") for k in urllib.request.getproxies()):
        return "an HTTP proxy is configured"
    try:
        _crt_completer_class()
    except ImportError as missing:
        if (missing.name or "").split(".")[0] != "awscrt":
            raise  # a fault of mpcommit's own, not a missing wheel
        return f"awscrt cannot be imported ({missing})"
    return None


def _crt_completer_class() -> Any:
    """:class:`.crt_transport.CrtCompleter`, imported only where the CRT may be used: it imports awscrt."""
    from .crt_transport import CrtCompleter

    return CrtCompleter


class TransportChoice:
    """The transports of one store's client. Thread-safe.

    ``credentials`` and ``ca_bundle``: those the client was made with (:func:`.session.s3_client`), which the CRT
    signs and verifies with; None for a client the caller gave, whose requests then all go through it."""

    def __init__(self, options: S3Options, client: Any, security: RequestSecurity, *, credentials: Any | None,
                 ca_bundle: str | None):
        self._options = options
        self._client = client
        self._security = security
        self._credentials = credentials
        self._ca_bundle = ca_bundle
        if options.complete_transport is CompleteTransport.CRT:
            why = crt_unusable(client, credentials)
            if why is not None:
                raise UsageError(f"S3Options.complete_transport='crt' cannot be used: {why}. Use 'auto' (the CRT "
                                 "where it can be used, else boto3) or 'boto3'.")
        self._completer: Completer | None = None
        self._lock = threading.Lock()

    def completer(self, bucket: str = "") -> Completer:
        """The transport of CompleteMultipartUpload, made on first use. Directory buckets (``--x-s3``, S3 Express
        One Zone) sign with session credentials the CRT transport does not make: boto3."""
        if bucket.endswith("--x-s3"):
            return Boto3Completer(self._client, self._security.parameters("complete_multipart_upload"))
        if self._completer is None:
            with self._lock:
                if self._completer is None:
                    self._completer = self._choose_completer()
        return self._completer

    def pump(self, timeout: float) -> int:
        """Advance the requests the CRT transport started on its polled sockets (none before it is made)."""
        pump = getattr(self._completer, "pump", None)
        return pump(timeout) if pump is not None else 0

    def crt_sending(self, bucket: str, operation: str, *, body_size: int = 0) -> Any | None:
        """The CRT transport when it sends ``operation`` (botocore's name) with a body of ``body_size`` bytes for
        this bucket, else None: boto3 sends it. The same choice as the completes'."""
        if operation == "upload_part" and body_size > CRT_PART_MAX_BYTES:
            return None
        completer = self.completer(bucket)
        sends = getattr(completer, "sends", None)
        return completer if sends is not None and sends(operation) else None

    def close(self) -> None:
        """Close the CRT transport's connections and event loop, if it was made."""
        with self._lock:
            completer, self._completer = self._completer, None
        if completer is not None:
            completer.close()

    def _choose_completer(self) -> Completer:
        opts = self._options
        security = self._security.parameters("complete_multipart_upload")
        if opts.complete_transport is CompleteTransport.BOTO3:
            return Boto3Completer(self._client, security)
        why = crt_unusable(self._client, self._credentials)
        headers: list[tuple[str, str]] = []
        if why is None:
            try:
                headers = header_fields(self._security.operation_model("complete_multipart_upload"), security)
            except ValueError as exc:
                why = str(exc)
        if why is not None:
            if opts.complete_transport is CompleteTransport.CRT:
                raise UsageError(f"S3Options.complete_transport='crt' cannot be used: {why}")
            if why not in _FALLBACKS_LOGGED:
                _FALLBACKS_LOGGED.add(why)
                log.debug("CompleteMultipartUpload goes through boto3, not the AWS CRT: %s", why)
            return Boto3Completer(self._client, security)

        # A task's per-file requests go the same way, each whose security parameters all travel as headers.
        operation_headers = {}
        for operation in CRT_OPERATIONS:
            try:
                operation_headers[operation] = header_fields(self._security.operation_model(operation),
                                                             self._security.parameters(operation))
            except ValueError as exc:
                log.debug("%s goes through boto3, not the AWS CRT: %s", operation, exc)
        crt_completer = _crt_completer_class()
        return crt_completer(self._client, self._credentials, security=security, headers=headers,
                             operation_headers=operation_headers,
                             max_connections=opts.max_completes_in_flight, connect_timeout=opts.connect_timeout,
                             read_timeout=opts.read_timeout, ca_bundle=self._ca_bundle)
