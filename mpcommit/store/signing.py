"""SigV4 for the requests mpcommit builds itself (the CRT transport's completes, a task's per-file requests): the
signature botocore's S3 signer gives the same request, byte for byte -- the same headers signed (every header but
User-Agent and the hop-by-hop ones botocore leaves out; ``X-Amz-Content-SHA256`` with the payload's SHA-256 or
``UNSIGNED-PAYLOAD``; ``X-Amz-Date``; the session token when there is one), the path as encoded once and not
normalised, the query's pairs sorted as they stand (S3's rules) -- so a server sees the same request from either
transport.

Written here, with :mod:`hashlib` and :mod:`hmac`, rather than taken from a library, for its cost per request:
botocore's signer builds an ``AWSRequest`` and parses its URL each time, and the CRT's (``awscrt.auth``) needs an
``HttpRequest``, ``HttpHeaders`` and ``AwsSigningConfig`` made from Python and returns a future -- about 22 us of
client CPU a request beyond hashing the body, against about 6 us here (issue 39; a task sends two requests a file,
the job commit one). The derived signing key is kept per day, region and secret, as the signature allows.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Sequence
from typing import Any

#: The signed payload of a request whose body carries its own checksum, over TLS (botocore's choice too).
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
#: Headers botocore's SigV4 signer does not sign (``botocore.auth.SIGNED_HEADERS_BLACKLIST``), lower case.
NOT_SIGNED = frozenset({
    "baggage", "connection", "expect", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "traceparent", "tracestate", "trailer", "transfer-encoding", "upgrade", "user-agent", "x-amzn-trace-id",
    # Set when the request is sent, after signing, by botocore as here: not signed by either.
    "content-length", "authorization",
})
_SCOPE_TAIL = "s3/aws4_request"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.digest(key, text.encode(), "sha256")


class SigV4Signer:
    """Signs S3 requests with a client's credentials, for its region. Thread-safe.

    ``credentials``: botocore's, as the client signs with them (refreshable ones are read on every request, as
    botocore reads them)."""

    def __init__(self, credentials: Any, region: str, user_agent: str):
        self.credentials = credentials
        self.region = region
        self.user_agent = user_agent
        self._lock = threading.Lock()
        #: (secret key, day) -> the derived signing key, the day's and the secret's only.
        self._keys: dict[tuple[str, str], bytes] = {}
        self._last_stamp: tuple[int, str] = (-1, "")

    def headers(self, method: str, path: str, host_header: str, payload: str, headers: Sequence[tuple[str, str]],
                *, length: int, when: float | None = None) -> list[tuple[str, str]]:
        """The headers to send for ``method`` on ``path`` (the key and query, encoded) with ``headers`` of its own:
        Host, User-Agent, the date, the payload's hash (``payload``: the body's SHA-256 in hex, or
        :data:`UNSIGNED_PAYLOAD`), the session token if any, ``headers``, Authorization and Content-Length
        (``length``). ``when``: the instant signed (seconds since the epoch), now unless given."""
        frozen = self.credentials.get_frozen_credentials()
        stamp = self._stamp(when)
        day = stamp[:8]
        out = [("Host", host_header), ("User-Agent", self.user_agent), ("X-Amz-Date", stamp),
               ("X-Amz-Content-SHA256", payload)]
        if frozen.token:
            out.append(("X-Amz-Security-Token", frozen.token))
        out.extend(headers)

        signed: dict[str, str] = {}
        for name, value in out:
            lower = name.lower()
            if lower not in NOT_SIGNED:
                value = " ".join(value.split())  # SigV4's Trimall
                signed[lower] = f"{signed[lower]},{value}" if lower in signed else value
        names = sorted(signed)
        resource, _, query = path.partition("?")
        if query:
            query = "&".join(f"{k}={v}" for k, v in sorted(pair.partition("=")[::2] for pair in query.split("&")))
        canonical = "\n".join((
            method, resource, query,
            "".join(f"{n}:{signed[n]}\n" for n in names),
            ";".join(names), payload))
        scope = f"{day}/{self.region}/{_SCOPE_TAIL}"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        # hmac.digest: OpenSSL's one-shot HMAC, without the Python object hmac.new makes.
        signature = hmac.digest(self._signing_key(frozen.secret_key, day), to_sign.encode(), "sha256").hex()
        out.append(("Authorization", f"AWS4-HMAC-SHA256 Credential={frozen.access_key}/{scope}, "
                                     f"SignedHeaders={';'.join(names)}, Signature={signature}"))
        out.append(("Content-Length", str(length)))
        return out

    def _stamp(self, when: float | None) -> str:
        """``when`` (now unless given) as SigV4's date, formatted once a second (requests come hundreds a second)."""
        second = int(time.time() if when is None else when)
        last = self._last_stamp
        if last[0] != second:
            last = self._last_stamp = (second, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second)))
        return last[1]

    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), self.region), "s3"), "aws4_request")
            with self._lock:
                if len(self._keys) > 8:  # days and rotated secrets of a long-lived process
                    self._keys.clear()
                self._keys[(secret, day)] = key
        return key
