"""A STUB S3 server for the commit-at-scale benchmark: it costs next to nothing per request, so that what a
benchmark measures is the client's own cost, not the server's.

It is NOT an S3 implementation. It answers the few calls a job commit makes, with canned, valid XML:

* objects (the job's descriptor, manifests, journal, ``_SUCCESS``): PUT (with ``If-None-Match: *``), GET,
  HEAD, DELETE, DeleteObjects and ListObjectsV2 (paged by 1,000) -- kept in a dict, so that the commit reads
  back what it wrote;
* multipart uploads: CompleteMultipartUpload answers a canned result for any upload id (the body is not
  parsed: nothing is checked), except ids listed with ``--gone`` behaviour below; AbortMultipartUpload
  answers 204; ListMultipartUploads answers an empty listing; CreateMultipartUpload a fresh id.
* an upload id that starts with ``gone-`` answers NoSuchUpload (to exercise the client's recovery path);
* the bucket owner is ``111122223333``: a request whose ``x-amz-expected-bucket-owner`` names another answers
  403 AccessDenied, as S3 does (so that tests can see the header is sent).

Signatures are not checked. One asyncio event loop, HTTP/1.1 keep-alive, no threads: a request costs tens of
microseconds of server CPU, against about a millisecond of client CPU for a boto3 call. Moto or LocalStack
would cost more per request than the client does, and then the server, not the client, would be measured.

Run: ``python -m bench.stub_s3 [--port 0]``; it prints ``PORT <n>`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import sys
import time
from email.utils import formatdate
from urllib.parse import parse_qsl, unquote, urlsplit
from xml.sax.saxutils import escape

_ids = itertools.count(1)
_objects: dict[str, dict[str, tuple[bytes, str, float]]] = {}  # bucket -> key -> (body, etag, mtime)
_XML = b'<?xml version="1.0" encoding="UTF-8"?>\n'
OWNER = "111122223333"


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))


def _error(status: int, code: str, message: str = "") -> tuple[int, dict[str, str], bytes]:
    body = _XML + f"<Error><Code>{code}</Code><Message>{escape(message or code)}</Message></Error>".encode()
    return status, {"Content-Type": "application/xml"}, body


def handle(method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(target)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    path = unquote(parts.path).lstrip("/")
    bucket, _, key = path.partition("/")
    store = _objects.setdefault(bucket, {})
    xml = {"Content-Type": "application/xml"}
    if headers.get("x-amz-expected-bucket-owner", OWNER) != OWNER:
        return _error(403, "AccessDenied", "Access Denied")
    if key:
        if method == "POST" and "uploadId" in query:
            if query["uploadId"].startswith("gone-"):
                return _error(404, "NoSuchUpload", "The specified upload does not exist.")
            etag = '"%s-1"' % hashlib.md5(query["uploadId"].encode()).hexdigest()
            return 200, xml, _XML + (
                f"<CompleteMultipartUploadResult><Location>/{bucket}/{escape(key)}</Location><Bucket>{bucket}</Bucket>"
                f"<Key>{escape(key)}</Key><ETag>{escape(etag)}</ETag></CompleteMultipartUploadResult>").encode()
        if method == "POST" and "uploads" in query:
            return 200, xml, _XML + (
                f"<InitiateMultipartUploadResult><Bucket>{bucket}</Bucket><Key>{escape(key)}</Key>"
                f"<UploadId>stub-{next(_ids)}</UploadId></InitiateMultipartUploadResult>").encode()
        if method == "DELETE":
            if "uploadId" not in query:
                store.pop(key, None)
            return 204, {}, b""
        if method == "PUT":
            if headers.get("if-none-match") == "*" and key in store:
                return _error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
            etag = '"%s"' % hashlib.md5(body).hexdigest()
            store[key] = (body, etag, time.time())
            return 200, {"ETag": etag}, b""
        if method in ("GET", "HEAD"):
            found = store.get(key)
            if found is None:
                if method == "HEAD":
                    return 404, {}, b""
                return _error(404, "NoSuchKey", "The specified key does not exist.")
            data, etag, mtime = found
            meta = {"ETag": etag, "Last-Modified": formatdate(mtime, usegmt=True), "Content-Type": "application/octet-stream",
                    "Content-Length": str(len(data))}
            return 200, meta, (data if method == "GET" else b"")
        return _error(400, "InvalidRequest", f"the stub does not answer {method} on objects")
    # bucket-level
    if method == "HEAD":
        return 200, {}, b""
    if method == "PUT":
        return 200, {}, b""
    if method == "POST" and "delete" in query:
        text = body.decode()
        for chunk in text.split("<Key>")[1:]:
            store.pop(unescape_xml(chunk.split("</Key>", 1)[0]), None)
        return 200, xml, _XML + b"<DeleteResult></DeleteResult>"
    if method == "GET" and "uploads" in query:
        return 200, xml, _XML + (f"<ListMultipartUploadsResult><Bucket>{bucket}</Bucket><KeyMarker></KeyMarker>"
                                 "<UploadIdMarker></UploadIdMarker><MaxUploads>1000</MaxUploads><IsTruncated>false"
                                 "</IsTruncated></ListMultipartUploadsResult>").encode()
    if method == "GET":
        prefix = query.get("prefix", "")
        after = query.get("continuation-token") or query.get("start-after") or ""
        keys = sorted(k for k in store if k.startswith(prefix) and k > after)
        page, more = keys[:1000], len(keys) > 1000
        entries = "".join(
            f"<Contents><Key>{escape(k)}</Key><LastModified>{_iso(store[k][2])}</LastModified><ETag>{escape(store[k][1])}</ETag>"
            f"<Size>{len(store[k][0])}</Size><StorageClass>STANDARD</StorageClass></Contents>" for k in page)
        token = f"<NextContinuationToken>{escape(page[-1])}</NextContinuationToken>" if more else ""
        return 200, xml, _XML + (
            f"<ListBucketResult><Name>{bucket}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(page)}</KeyCount>"
            f"<MaxKeys>1000</MaxKeys><IsTruncated>{'true' if more else 'false'}</IsTruncated>{token}{entries}"
            "</ListBucketResult>").encode()
    return _error(400, "InvalidRequest", f"the stub does not answer {method} {target}")


def unescape_xml(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&apos;", "'").replace("&amp;", "&")


_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 404: "Not Found", 412: "Precondition Failed"}


class _Connection(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buffer = b""
        self.continued = False

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            method, target, _version = head[0].split(" ", 2)
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buffer) < end + 4 + length:
                if headers.get("expect", "").lower() == "100-continue" and not self.continued:
                    self.continued = True  # botocore waits up to a second for this before sending a PUT's body
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[attr-defined]
                return
            self.continued = False
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            try:
                status, out_headers, out = handle(method, target, headers, body)
            except Exception as exc:  # noqa: BLE001 - a stub answers 500 rather than dropping the connection
                status, out_headers, out = _error(500, "InternalError", repr(exc))
            lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", "x-amz-request-id: stub"]
            lines += [f"{k}: {v}" for k, v in out_headers.items()]
            if "Content-Length" not in out_headers:
                lines.append(f"Content-Length: {len(out)}")
            self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode() + out)  # type: ignore[attr-defined]


async def _serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Connection, "127.0.0.1", port, backlog=512)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as 'PORT <n>')")
    args = ap.parse_args(argv)
    try:
        asyncio.run(_serve(args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
