"""The CRT transport's requests, built and signed by the AWS Common Runtime's SigV4 signer -- to botocore's
signature, byte for byte: the same headers signed (Host, ``X-Amz-Content-SHA256`` with the payload's SHA-256,
``X-Amz-Date``, the security headers and the session token when there are any; not User-Agent), the path encoded
once and not normalised (S3's rules). So a server sees the same request from either transport.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import threading
from collections.abc import Sequence
from typing import Any

from awscrt import __version__ as awscrt_version
from awscrt import auth as crt_auth
from awscrt import http as crt_http

#: The signed payload of a request whose body carries its own checksum, over TLS (botocore's choice too).
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"


class CrtSigner:
    """Signs requests with a client's credentials, for its region. Thread-safe.

    ``credentials``: botocore's, as the client signs with them (refreshable ones are read on every request)."""

    def __init__(self, credentials: Any, region: str):
        self.credentials = credentials
        self._region = region
        self.user_agent = f"mpcommit crt awscrt/{awscrt_version}"
        self._lock = threading.Lock()
        self._signing_key: tuple[str, str, str | None] | None = None
        self._provider: Any = None

    def signed_request(self, path: str, host_header: str, body: bytes | bytearray | memoryview, *,
                       headers: Sequence[tuple[str, str]], date: datetime.datetime | None = None,
                       method: str = "POST", payload: str | None = None, stream: Any = None) -> Any:
        """The request for ``path`` (key and query, encoded) with ``body`` and ``headers``, signed as botocore's
        S3 signer signs it, so the same signature for the same instant. ``payload``: the signed payload value (the
        body's SHA-256 unless given); ``stream``: the body as the CRT reads it (a copy of ``body`` unless given)."""
        headers = [("Host", host_header), ("User-Agent", self.user_agent), *headers]
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

    def _credentials_provider(self) -> Any:
        """A static CRT provider for the client's current credentials: refreshable credentials are read on every
        request (as botocore does), and a new provider is made only when they changed."""
        frozen = self.credentials.get_frozen_credentials()
        signing_key = (frozen.access_key, frozen.secret_key, frozen.token)
        if signing_key != self._signing_key:
            with self._lock:
                self._provider = crt_auth.AwsCredentialsProvider.new_static(*signing_key)
                self._signing_key = signing_key
        return self._provider
