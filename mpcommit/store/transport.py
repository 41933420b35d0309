"""How CompleteMultipartUpload, the job commit's one request per file, is sent: two transports behind one seam.

A commit of 100,000 files sends 100,000 completes. Through boto3 each costs about a millisecond of client CPU,
nearly all of it botocore's per-call machinery (event hooks, endpoint rules, the serializer and parser, its
signer), and each in flight holds a thread. So there are two transports, chosen by
``S3Options.complete_transport`` (:class:`~mpcommit.options.CompleteTransport`), both a :class:`Completer`:

* :class:`Boto3Completer`: the client's ``complete_multipart_upload``, as every other request is sent;
* :class:`mpcommit.store.crt_transport.CrtCompleter`: the request built here (:func:`complete_body`, the URL from
  :func:`key_base_url` and :func:`key_and_query`, the headers from :func:`header_fields`), signed as botocore
  signs it (:mod:`mpcommit.store.signing`) and sent on the AWS Common Runtime's asynchronous HTTP connections; its answer read by
  :func:`etag_from_answer`. It can also :meth:`~mpcommit.store.crt_transport.CrtCompleter.start` a complete
  without waiting for it, so that hundreds are in flight from one thread.

A task's requests per file go the same way (issue 39): CreateMultipartUpload, UploadPart and the manifest's
PutObject through boto3 cost a task 2.6-3.6 ms of client CPU each (measured on this project's 2 shared cores),
more than writing a small file's Parquet; through the CRT 0.4-0.7 ms, plus about 4 ms per MB of body (:meth:`~mpcommit.store.crt_transport.CrtCompleter.create_multipart_upload`,
:meth:`~mpcommit.store.crt_transport.CrtCompleter.upload_part`, :meth:`~mpcommit.store.crt_transport.CrtCompleter.put_object`,
their resources from :func:`uploads_query`, :func:`part_query` and :func:`key_path`). Parts above 1 MiB stay on
boto3, which sends bytes more cheaply (``mpcommit.store.transport_choice.CRT_PART_MAX_BYTES``); so do puts with a
condition.

The CRT is used where it is equivalent to boto3 (:func:`mpcommit.store.transport_choice.crt_unusable` says why not
otherwise): awscrt imports, the store made its own client from its options (so it knows the credentials: an
injected client keeps every request on boto3), and no HTTP proxy is configured. Either way a complete carries the
same security parameters (:mod:`mpcommit.store.security`), and its failures are the botocore exceptions botocore
would have raised, so that retries, messages and the commit's idempotence check do not depend on the transport.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import quote
from xml.sax.saxutils import escape

from botocore.exceptions import ClientError

log = logging.getLogger(__name__)

#: Called once when an asynchronous complete ends: (the ETag, None) or (None, the botocore exception).
Done = Callable[["str | None", "BaseException | None"], None]


class Completer(Protocol):
    """Sends CompleteMultipartUpload. Raises the botocore exception botocore would have raised."""

    name: str

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any]) -> str:
        """One CompleteMultipartUpload, waited for; returns the object's ETag."""
        ...

    def close(self) -> None:
        """Release what the transport opened (connections, event loop)."""
        ...


class Boto3Completer:
    """CompleteMultipartUpload through the client's own ``complete_multipart_upload``, with the security
    parameters every boto3 request of the store carries."""

    name = "boto3"

    def __init__(self, client: Any, security: dict[str, str]):
        self._client = client
        self._security = security

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[Any]) -> str:
        response = self._client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed_parts(parts)},
            **self._security)
        return str(response.get("ETag", ""))

    def close(self) -> None:
        pass  # the client is the store's


def listed_parts(parts: Sequence[Any]) -> list[dict[str, Any]]:
    """``parts`` (objects with number, etag and crc32) as botocore's MultipartUpload takes them."""
    listed = []
    for p in parts:
        entry: dict[str, Any] = {"PartNumber": p.number, "ETag": p.etag}
        if p.crc32:
            entry["ChecksumCRC32"] = p.crc32
        listed.append(entry)
    return listed


# ---------------------------------------------------------------- the request's wire format (the CRT transport's)
_PROBE = "mpcommit-probe-key"
_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")
_ETAG = re.compile(rb"<ETag>([^<]*)</ETag>")
_UPLOAD_ID = re.compile(rb"<UploadId>([^<]*)</UploadId>")
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def complete_body(parts: Sequence[Any]) -> bytes:
    """The CompleteMultipartUpload document for ``parts`` (objects with number, etag and crc32)."""
    out = [f'<CompleteMultipartUpload xmlns="{_NS}">']
    for p in parts:
        crc = f"<ChecksumCRC32>{escape(p.crc32)}</ChecksumCRC32>" if p.crc32 else ""
        out.append(f"<Part><ETag>{escape(p.etag)}</ETag>{crc}<PartNumber>{int(p.number)}</PartNumber></Part>")
    out.append("</CompleteMultipartUpload>")
    return "".join(out).encode()


def key_base_url(client: Any, bucket: str, security: dict[str, str]) -> str:
    """The URL of ``bucket``'s keys, ending before the key, as botocore's endpoint rules resolve it for the
    client (addressing style, region, custom endpoint): the path of a presigned URL for a probe key. The security
    parameters go in as on every request the client builds (the URL is never sent)."""
    url = client.generate_presigned_url(
        "complete_multipart_upload", Params={"Bucket": bucket, "Key": _PROBE, "UploadId": "x", **security},
        ExpiresIn=60)
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


def key_path(key: str) -> str:
    """The key, encoded as botocore encodes it in S3's URLs (a PutObject's resource)."""
    return _quote(key, "/~", _KEY_QUOTING)


def uploads_query(key: str) -> str:
    """CreateMultipartUpload's resource after the key base URL."""
    return f"{key_path(key)}?uploads"


def part_query(key: str, upload_id: str, number: int) -> str:
    """UploadPart's resource after the key base URL (the query in botocore's order)."""
    return f"{key_and_query(key, upload_id)}&partNumber={int(number)}"


def header_fields(operation: Any, params: dict[str, str]) -> list[tuple[str, str]]:
    """``params`` (botocore's names and wire values, :func:`mpcommit.store.security.security_parameters`) as the
    HTTP headers botocore's model puts them in for ``operation`` (an OperationModel). A parameter that does not
    travel as a header cannot be carried by a request built here: ValueError, and the store keeps boto3."""
    members = operation.input_shape.members
    fields = []
    for name, value in params.items():
        shape = members.get(name)
        where = shape.serialization if shape is not None else {}
        if where.get("location") != "header":
            raise ValueError(f"{operation.name} parameter {name} does not travel as a header")
        fields.append((where["name"], str(value)))
    return fields


def etag_from_answer(status: int, data: bytes) -> str:
    """The ETag of a CompleteMultipartUpload answer, or the ``ClientError`` botocore would have raised for it."""
    # A 200 carrying an error is a server-side failure (botocore takes it for a 500 as well).
    raise_for_answer(status, data, "CompleteMultipartUpload", error_in_200=True)
    etag = _ETAG.search(data)
    return _unescape(etag.group(1)) if etag else ""


def upload_id_from_answer(status: int, data: bytes) -> str:
    """The upload id of a CreateMultipartUpload answer, or the ``ClientError`` botocore would have raised."""
    raise_for_answer(status, data, "CreateMultipartUpload")
    found = _UPLOAD_ID.search(data)
    if found is None:
        raise ClientError({"Error": {"Code": "InternalError", "Message": "no UploadId in the answer"},
                           "ResponseMetadata": {"HTTPStatusCode": 500}}, "CreateMultipartUpload")
    return _unescape(found.group(1))


def etag_from_headers(status: int, headers: dict[str, str], data: bytes, operation: str) -> str:
    """The ETag header of an UploadPart or PutObject answer (``headers`` by lower-case name), or the ``ClientError``
    botocore would have raised."""
    raise_for_answer(status, data, operation)
    return headers.get("etag", "")


def raise_for_answer(status: int, data: bytes, operation: str, *, error_in_200: bool = False) -> None:
    """The ``ClientError`` botocore raises for an answer of S3 that is an error, with its code and message."""
    if status < 300 and not (error_in_200 and b"<Error>" in data[:256]):
        return
    code = _CODE.search(data)
    message = _MESSAGE.search(data)
    raise ClientError(
        {"Error": {"Code": _unescape(code.group(1)) if code else str(status),
                   "Message": _unescape(message.group(1)) if message else ""},
         "ResponseMetadata": {"HTTPStatusCode": status if status >= 300 else 500}},
        operation,
    )


def _unescape(text: bytes) -> str:
    return (text.decode("utf-8").replace("&quot;", '"').replace("&#34;", '"').replace("&lt;", "<")
            .replace("&gt;", ">").replace("&apos;", "'").replace("&amp;", "&"))
