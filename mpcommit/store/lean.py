"""A lean path for the one request a job commit makes per file: CompleteMultipartUpload.

A boto3 call costs about 1.2 ms of client CPU, most of it botocore's per-call machinery (event hooks, endpoint
rules, the user-agent string rebuilt twice per request, the XML serializer and parser), not the request
itself. A commit of 100,000 files is 100,000 such calls. This path builds the request body itself (a fixed,
tiny XML document), has it signed by **botocore's own SigV4 signer** (``S3SigV4Auth``, the credentials and
region of the store's client), sends it on a urllib3 connection pool and reads the answer's status, code and
ETag. The URL comes from botocore too: the endpoint rules resolve it once per bucket (a presigned URL for a
probe key), so that addressing style, region and custom endpoints are botocore's decisions, not ours.

Errors are handed to :func:`mpcommit.store.errors.translate` as the botocore exceptions botocore itself would
have raised (``ClientError`` with the parsed code; ``EndpointConnectionError``, ``ReadTimeoutError``,
``ConnectionClosedError`` for the network), so retries and messages are those of every other request. A
``200 OK`` whose body is an ``<Error>`` (S3 may answer a complete so) is an error, as in botocore.

It is used only where it is known to be equivalent: the store made its own client from its options
(credentials known), and no HTTP proxy is configured. Otherwise the store uses boto3 as for every request.
"""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from botocore import __version__ as botocore_version
from botocore.httpsession import get_cert_path

_PROBE = "mpcommit-probe-key"
_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")
_ETAG = re.compile(rb"<ETag>([^<]*)</ETag>")
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _unescape(text: bytes) -> str:
    return (text.decode("utf-8").replace("&quot;", '"').replace("&#34;", '"').replace("&lt;", "<")
            .replace("&gt;", ">").replace("&apos;", "'").replace("&amp;", "&"))


def complete_body(parts: Sequence[Any]) -> bytes:
    """The CompleteMultipartUpload document for ``parts`` (objects with number, etag and crc32)."""
    out = [f'<CompleteMultipartUpload xmlns="{_NS}">']
    for p in parts:
        crc = f"<ChecksumCRC32>{escape(p.crc32)}</ChecksumCRC32>" if p.crc32 else ""
        out.append(f"<Part><ETag>{escape(p.etag)}</ETag>{crc}<PartNumber>{int(p.number)}</PartNumber></Part>")
    out.append("</CompleteMultipartUpload>")
    return "".join(out).encode()


def key_base_url(client: Any, bucket: str, owner: str | None) -> str:
    """The URL of ``bucket``'s keys, ending before the key, as botocore's endpoint rules resolve it for the
    client (addressing style, region, custom endpoint): the path of a presigned URL for a probe key."""
    params = {"Bucket": bucket, "Key": _PROBE, "UploadId": "x"}
    if owner:
        params["ExpectedBucketOwner"] = owner  # as on every request (it is not sent: only signed)
    url = client.generate_presigned_url("complete_multipart_upload", Params=params, ExpiresIn=60)
    path = url.split("?", 1)[0]
    if not path.endswith("/" + _PROBE):
        raise RuntimeError(f"unexpected presigned URL shape for bucket {bucket!r}: {path}")
    return path[: -len(_PROBE)]


def _ascii_quoting(safe: str) -> dict[int, str]:
    """A str.translate table doing for ASCII text what ``quote(text, safe=safe)`` does."""
    return {c: quote(chr(c), safe=safe) for c in range(128)}


_KEY_QUOTING = _ascii_quoting("/~")
_QUERY_QUOTING = _ascii_quoting("~")


def _quote(text: str, safe: str, table: dict[int, str]) -> str:
    # urllib's quote walks the text byte by byte in Python: a quarter of this request's CPU on 70-character keys.
    # str.translate does the same in C for ASCII, which almost every key is.
    return text.translate(table) if text.isascii() else quote(text, safe=safe)


def key_and_query(key: str, upload_id: str) -> str:
    """What follows the key base URL: the key and the upload id, encoded as botocore encodes them for S3."""
    return f"{_quote(key, '/~', _KEY_QUOTING)}?uploadId={_quote(upload_id, '~', _QUERY_QUOTING)}"


def etag_from_answer(status: int, data: bytes) -> str:
    """The ETag of a CompleteMultipartUpload answer, or the ``ClientError`` botocore would have raised for it."""
    if status >= 300 or b"<Error>" in data[:256]:
        code = _CODE.search(data)
        message = _MESSAGE.search(data)
        raise ClientError(
            {"Error": {"Code": _unescape(code.group(1)) if code else str(status),
                       "Message": _unescape(message.group(1)) if message else ""},
             # A 200 carrying an error is a server-side failure (botocore takes it for a 500 as well).
             "ResponseMetadata": {"HTTPStatusCode": status if status >= 300 else 500}},
            "CompleteMultipartUpload",
        )
    etag = _ETAG.search(data)
    return _unescape(etag.group(1)) if etag else ""


def lean_available(client: Any) -> bool:
    """Whether requests may bypass the client's HTTP layer: no proxy configured, in the client or environment."""
    config = client.meta.config
    if getattr(config, "proxies", None):
        return False
    return not any(k in ("http", "https", "all") for k in urllib.request.getproxies())


class LeanCompleter:
    """CompleteMultipartUpload signed by botocore's SigV4 signer and sent on a urllib3 pool. Thread-safe."""

    def __init__(self, client: Any, credentials: Any, *, max_connections: int, connect_timeout: float,
                 read_timeout: float, expected_bucket_owner: str | None = None, ca_bundle: str | None = None):
        self._client = client
        self._credentials = credentials
        self._region = client.meta.region_name or "us-east-1"
        self._owner = expected_bucket_owner
        self._bases: dict[str, tuple[str, Any]] = {}  # bucket -> (URL before the key, its connection pool)
        self._lock = threading.Lock()
        # TLS verified as botocore verifies it: the configured CA bundle, else certifi's.
        self._pool = urllib3.PoolManager(
            num_pools=16, maxsize=max_connections, block=False, retries=False,
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            ca_certs=ca_bundle or get_cert_path(True), cert_reqs="CERT_REQUIRED",
        )
        self.user_agent = f"mpcommit lean-complete botocore/{botocore_version}"

    def _base(self, bucket: str) -> tuple[str, Any]:
        """The URL of ``bucket``'s keys (ending before the key) and the connection pool of its host."""
        found = self._bases.get(bucket)
        if found is None:
            base = key_base_url(self._client, bucket, self._owner)
            found = (base, self._pool.connection_from_url(base))
            with self._lock:
                self._bases[bucket] = found
        return found

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any]) -> str:
        """One CompleteMultipartUpload; returns the ETag. Raises the botocore exception botocore would have."""
        base, pool = self._base(bucket)
        url = base + key_and_query(key, upload_id)
        body = complete_body(parts)
        headers = {"User-Agent": self.user_agent}
        if self._owner:
            headers["x-amz-expected-bucket-owner"] = self._owner
        request = AWSRequest(method="POST", url=url, data=body, headers=headers)
        S3SigV4Auth(self._credentials.get_frozen_credentials(), "s3", self._region).add_auth(request)
        try:
            response = pool.urlopen("POST", url, body=body, headers=dict(request.headers.items()),
                                    redirect=False, retries=False, preload_content=True, assert_same_host=False)
        except (urllib3.exceptions.NewConnectionError, urllib3.exceptions.NameResolutionError) as exc:
            raise EndpointConnectionError(endpoint_url=url, error=exc) from exc
        except urllib3.exceptions.ConnectTimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=url, error=exc) from exc
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise ReadTimeoutError(endpoint_url=url, error=exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ConnectionClosedError(endpoint_url=url, error=exc) from exc
        return etag_from_answer(response.status, response.data or b"")

    def close(self) -> None:
        self._pool.clear()
