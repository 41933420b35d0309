"""The one S3 boundary: every request mpcommit makes goes through :class:`S3Store`.

Each public method is one S3 operation (or a paginated listing), called through ``_call``, which adds the
security parameters (:mod:`.security`: SSE, SSE-C, ExpectedBucketOwner), retries transient failures and
translates errors. CompleteMultipartUpload goes through a transport of its own (:mod:`.transport`: the AWS CRT or
boto3), with the same security parameters, retries and errors; the commit can also start completes without
waiting for them (:meth:`S3Store.start_complete`). The store counts requests per operation, so that tests and
benchmarks can assert request sequences.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from email.utils import parsedate_to_datetime
from typing import IO, Any, TypeVar

from botocore.exceptions import ClientError

from ..errors import (
    AccessDeniedError,
    ChecksumMismatchError,
    InvalidCredentialsError,
    NoSuchBucketError,
    NoSuchKeyError,
    NoSuchUploadError,
    StoreError,
    UsageError,
)
from ..options import CompleteTransport, S3Options
from .errors import translate
from .paging import PagedListings
from .retry import call_with_retry
from .security import RequestSecurity
from .values import BucketLifecycle, CompletedPart, ObjectInfo, ObjectRange, UploadInfo, xml_safe  # noqa: F401 - the store's values, named here too
from .session import s3_client
from .transport import Boto3Completer, Completer, Done, header_fields, listed_parts

log = logging.getLogger(__name__)

DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys
#: The requests besides CompleteMultipartUpload that the CRT transport sends when it is in use: a task's, one or
#: two per file (issue 39: through boto3 they cost a task more client CPU per file than the file's own encoding).
CRT_OPERATIONS = ("create_multipart_upload", "upload_part", "put_object")
#: Parts up to this size go through the CRT, larger ones through boto3. The CRT costs less per request, boto3 less
#: per byte: the CRT's HTTP/1.1 client sends a body in 16 KiB messages, each a trip through its channel and a
#: socket write, where boto3 hands the kernel the whole buffer. Measured (issue 39, 2 shared cores, versitygw):
#: CRT 0.7 ms + 4.3 ms per MB of client CPU, boto3 2.7-3.5 ms + 2.0 ms per MB: even at about 1 MB.
CRT_PART_MAX_BYTES = 1024 * 1024
#: An answer this quick dates the store's clock to within its Date's own second: no need to look at later ones.
_CLOCK_GOOD_ENOUGH = 0.25
#: Why the CRT transport was not used, logged once per process and reason (at debug: boto3 is a fine transport).
_FALLBACKS_LOGGED: set[str] = set()
T = TypeVar("T")


class S3Store:
    """Typed S3 operations over one boto3 client. Thread-safe (boto3 clients are)."""

    def __init__(self, options: S3Options, client: Any | None = None, *, unencoded_listing_client: Any | None = None):
        self.options = options
        #: The credentials of a client made here from ``options``; None for a client given by the caller, whose
        #: requests then all go through it (the CRT transport needs to know what signs).
        self._credentials: Any | None = None
        self._ca_bundle: str | None = None
        if client is None:
            client, self._credentials, self._ca_bundle = s3_client(options)
        self._client = client
        self._security = RequestSecurity(options, client)
        if options.complete_transport is CompleteTransport.CRT:
            from .crt_transport import crt_unusable  # imports awscrt: only where the CRT is asked for

            why = crt_unusable(client, self._credentials)
            if why is not None:
                raise UsageError(f"S3Options.complete_transport='crt' cannot be used: {why}. Use 'auto' (the CRT "
                                 "where it can be used, else boto3) or 'boto3'.")
        self._completer: Completer | None = None
        self._counts: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._lock = threading.Lock()
        self._paging = PagedListings(self, unencoded_listing_client)
        #: Whether the endpoint ever answered (a wrong endpoint fails at once; a known one is retried).
        self._reached = False
        #: The store's clock minus this host's, once measured (server_time), and the round trip of the answer it
        #: was learnt from: a slow answer's Date says less, so a quicker one later replaces it.
        self._clock_offset: float | None = None
        self._clock_round_trip = math.inf

    def close(self) -> None:
        """Close what the store opened beside its client: the CRT transport's connections and event loop."""
        with self._lock:
            completer, self._completer = self._completer, None
        if completer is not None:
            completer.close()

    def __enter__(self) -> "S3Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        return str(self._client.meta.endpoint_url)

    # ------------------------------------------------------------ accounting
    def request_counts(self) -> dict[str, int]:
        with self._count_lock:
            return dict(self._counts)

    def reset_counts(self) -> None:
        with self._count_lock:
            self._counts.clear()

    # ------------------------------------------------------------ the funnel
    def _call(self, operation: str, *, client: Any | None = None, bucket: str = "", key: str = "", **params: Any) -> Any:
        params.update(self._security.parameters(operation))  # the same function the CRT transport's headers come from
        method: Callable[..., Any] = getattr(client or self._client, operation)
        if self._clock_round_trip <= _CLOCK_GOOD_ENOUGH:
            return self._send(operation, lambda: method(**params), bucket=bucket, key=key)
        sent = time.time()
        response = self._send(operation, lambda: method(**params), bucket=bucket, key=key)
        self._note_clock(response, sent, time.time())
        return response

    def _note_clock(self, response: Any, sent: float, received: float) -> None:
        """Learn the store's clock from the Date of an answer that came back quickly (see server_time), or more
        quickly than the one it was learnt from."""
        round_trip = received - sent
        if round_trip > 2.0 or round_trip >= self._clock_round_trip or not isinstance(response, dict):
            return
        date = (response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}).get("date")
        if not date:
            return
        try:
            # Date is truncated to the second: on average half a second before the answer was made.
            self._clock_offset = parsedate_to_datetime(date).timestamp() + 0.5 - (sent + received) / 2
            self._clock_round_trip = round_trip
        except (TypeError, ValueError):
            pass

    def _send(self, operation: str, request: Callable[[], Any], *, bucket: str, key: str) -> Any:
        """Count, translate errors and retry: what every request goes through, whatever its transport."""

        def attempt() -> Any:
            with self._count_lock:
                self._counts[operation] += 1
            try:
                response = request()
            except Exception as exc:  # noqa: BLE001 - translated and chained below
                if isinstance(exc, ClientError):
                    self._reached = True  # the server answered, if only with an error
                raise translate(exc, operation=operation, bucket=bucket, key=key, endpoint=self.endpoint,
                                reached=self._reached) from exc
            self._reached = True
            return response

        where = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
        return call_with_retry(attempt, policy=self.options.retry, describe=f"{operation} {where}")

    # ------------------------------------------------------------ multipart uploads
    def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        crt = self._crt_sending(bucket, "create_multipart_upload")
        if crt is not None:
            return str(self._send("create_multipart_upload",
                                  lambda: crt.create_multipart_upload(bucket, key, content_type=content_type),
                                  bucket=bucket, key=key))
        params: dict[str, Any] = {"Bucket": bucket, "Key": key, "ChecksumAlgorithm": "CRC32"}
        if content_type:
            params["ContentType"] = content_type
        response = self._call("create_multipart_upload", bucket=bucket, key=key, **params)
        return str(response["UploadId"])

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: bytes | bytearray | memoryview, crc32: str) -> str:
        """Upload one part with its CRC32; S3 verifies it, and the echoed value is checked here too."""
        crt = self._crt_sending(bucket, "upload_part") if len(body) <= CRT_PART_MAX_BYTES else None
        if crt is not None:
            etag, echoed = self._send("upload_part", lambda: crt.upload_part(bucket, key, upload_id, number, body, crc32),
                                      bucket=bucket, key=key)
            response = {"ETag": etag, "ChecksumCRC32": echoed}
        else:
            response = self._call(
                "upload_part", bucket=bucket, key=key,
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number,
                Body=body if isinstance(body, (bytes, bytearray)) else bytes(body),  # the writer's buffer, not a copy
                ChecksumAlgorithm="CRC32", ChecksumCRC32=crc32,
            )
        echoed = response.get("ChecksumCRC32")
        if echoed and echoed != crc32:
            raise ChecksumMismatchError(
                f"part {number} of s3://{bucket}/{key}: S3 recorded CRC32 {echoed}, computed {crc32}",
                operation="upload_part", code="ChecksumMismatch", bucket=bucket, key=key,
            )
        return str(response["ETag"])

    def upload_part_copy(
        self, bucket: str, key: str, upload_id: str, number: int, *,
        source_key: str, source_etag: str, byte_range: tuple[int, int] | None = None, source_bucket: str | None = None,
    ) -> CompletedPart:
        """Server-side copy of a source (or its inclusive byte range) into a part, pinned by the source's ETag.

        Returns the part with the CRC32 that S3 computed for it: uploads are created with a CRC32 checksum, and
        S3 then refuses a complete that lacks any part's checksum (moto does not check; LocalStack and AWS do).
        """
        params: dict[str, Any] = {
            "Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": number,
            "CopySource": {"Bucket": source_bucket or bucket, "Key": source_key},
            "CopySourceIfMatch": source_etag,
        }
        if byte_range is not None:
            params["CopySourceRange"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        response = self._call("upload_part_copy", bucket=bucket, key=key, **params)
        result = response["CopyPartResult"]
        return CompletedPart(number, str(result["ETag"]), result.get("ChecksumCRC32") or None)

    def complete_multipart_upload(self, bucket: str, key: str, upload_id: str, parts: Sequence[CompletedPart], *,
                                  if_none_match: bool = False) -> str:
        """Complete an upload; ``if_none_match``: only if no object has the key yet (412 otherwise)."""
        if if_none_match:
            response = self._call(
                "complete_multipart_upload", bucket=bucket, key=key, Bucket=bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": listed_parts(parts)}, IfNoneMatch="*")
            return str(response.get("ETag", ""))
        completer = self.completer(bucket)
        return str(self._send("complete_multipart_upload", lambda: completer.complete(bucket, key, upload_id, parts),
                              bucket=bucket, key=key))

    def start_complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[CompletedPart], done: Done) -> bool:
        """One attempt at completing an upload, not waited for: ``done(etag, None)`` or ``done(None, error)``
        (a StoreError, as :meth:`complete_multipart_upload` would raise it after one attempt) is called once,
        from another thread. Not retried: the caller retries (:class:`mpcommit.store.retry.Attempts`). False, and
        nothing done, when the transport cannot complete without waiting (boto3): then complete on threads."""
        completer = self.completer(bucket)
        start = getattr(completer, "start", None)
        if start is None:
            return False
        with self._count_lock:
            self._counts["complete_multipart_upload"] += 1

        def finished(etag: str | None, error: BaseException | None) -> None:
            if error is None:
                self._reached = True
                done(etag, None)
                return
            if isinstance(error, ClientError):
                self._reached = True
            failure = translate(error, operation="complete_multipart_upload", bucket=bucket, key=key,
                                endpoint=self.endpoint, reached=self._reached)
            failure.__cause__ = error
            done(None, failure)

        try:
            start(bucket, key, upload_id, parts, finished)
        except Exception as exc:  # noqa: BLE001 - e.g. credentials that cannot be read: this attempt's failure
            finished(None, exc)
        return True

    def completes_in_flight(self, bucket: str) -> int | None:
        """How many completes :meth:`start_complete` may keep in flight (the CRT transport's connections); None
        when it cannot start any (boto3: complete on threads)."""
        completer = self.completer(bucket)
        return completer.max_connections if hasattr(completer, "start") else None  # type: ignore[attr-defined]

    def _crt_sending(self, bucket: str, operation: str) -> Any | None:
        """The CRT transport when it sends ``operation`` for this bucket (a task's per-file requests: its uploads,
        their parts, its manifest), else None: boto3 sends it. The same choice as the completes' (:meth:`completer`)."""
        completer = self.completer(bucket)
        sends = getattr(completer, "sends", None)
        return completer if sends is not None and sends(operation) else None

    def completer(self, bucket: str = "") -> Completer:
        """The transport of CompleteMultipartUpload (:mod:`.transport`), made on first use. Directory buckets
        (``--x-s3``, S3 Express One Zone) sign with session credentials the CRT transport does not make: boto3."""
        if bucket.endswith("--x-s3"):
            return Boto3Completer(self._client, self._security.parameters("complete_multipart_upload"))
        if self._completer is None:
            with self._lock:
                if self._completer is None:
                    self._completer = self._choose_completer()
        return self._completer

    def _choose_completer(self) -> Completer:
        opts = self.options
        security = self._security.parameters("complete_multipart_upload")
        if opts.complete_transport is CompleteTransport.BOTO3:
            return Boto3Completer(self._client, security)
        from .crt_transport import crt_unusable  # imports awscrt: only once a complete is sent

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
        from .crt_transport import CrtCompleter

        # A task's per-file requests go the same way, each whose security parameters all travel as headers.
        operation_headers = {}
        for operation in CRT_OPERATIONS:
            try:
                operation_headers[operation] = header_fields(self._security.operation_model(operation),
                                                             self._security.parameters(operation))
            except ValueError as exc:
                log.debug("%s goes through boto3, not the AWS CRT: %s", operation, exc)
        return CrtCompleter(self._client, self._credentials, security=security, headers=headers,
                            operation_headers=operation_headers,
                            max_connections=opts.max_completes_in_flight, connect_timeout=opts.connect_timeout,
                            read_timeout=opts.read_timeout, ca_bundle=self._ca_bundle)

    def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> bool:
        """Abort; False when the upload was no longer pending (another cleaner got there first)."""
        try:
            self._call("abort_multipart_upload", bucket=bucket, key=key, Bucket=bucket, Key=key, UploadId=upload_id)
        except NoSuchUploadError:
            return False
        return True

    # ------------------------------------------------------------ listings (store/paging.py: proven complete, I8)
    def list_multipart_uploads(self, bucket: str, prefix: str = "") -> list[UploadInfo]:
        """Every pending upload under ``prefix``, across all pages, proven complete."""
        return self._paging.uploads(bucket, prefix)

    def list_parts(self, bucket: str, key: str, upload_id: str) -> list[tuple[int, int, str]]:
        """(part number, size, etag) of every part uploaded so far, proven complete."""
        return self._paging.parts(bucket, key, upload_id)

    def list_objects(self, bucket: str, prefix: str = "", *,
                     keep: Callable[[str], bool] | None = None) -> list[ObjectInfo]:
        """Every object under ``prefix``, proven complete (invariant I8); with ``keep``, only those whose key it
        accepts (the others dropped page by page, never all held)."""
        return self._paging.objects(bucket, prefix, keep=keep)

    def list_children(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[str]:
        """Names directly below ``prefix`` (objects and "folders", the latter ending in '/'), in key order;
        ``limit`` stops after that many names."""
        return self._paging.children(bucket, prefix, limit=limit)

    def list_child_range(self, bucket: str, prefix: str, *, first: str, last: str,
                         max_pages: int | None = None) -> ObjectRange:
        """The objects directly below ``prefix`` with keys from ``first`` to ``last`` (and their ETags), in as few
        pages as the range takes, proven complete up to :attr:`ObjectRange.through` (at most ``max_pages``
        pages; the whole range when ``through`` is None or reaches ``last``)."""
        return self._paging.child_range(bucket, prefix, first=first, last=last, max_pages=max_pages)

    @property
    def pages_uploads_by_key(self) -> bool:
        """Whether this store's server refused the UploadIdMarker it returned (see store/paging.py)."""
        return self._paging.uploads_by_key

    # ------------------------------------------------------------ objects
    def head_object(self, bucket: str, key: str) -> ObjectInfo | None:
        try:
            r = self._call("head_object", bucket=bucket, key=key, Bucket=bucket, Key=key)
        except NoSuchKeyError:
            return None
        except AccessDeniedError as exc:
            raise self._why_forbidden(exc, bucket) from exc
        return ObjectInfo(key, int(r.get("ContentLength", 0)), str(r.get("ETag", "")), r.get("LastModified"))

    def get_object_and_etag(self, bucket: str, key: str) -> tuple[bytes, str]:
        """The object's bytes and the ETag they were read with (for a later write with ``if_match``)."""

        def read() -> tuple[bytes, str]:
            r = self._call("get_object", bucket=bucket, key=key, Bucket=bucket, Key=key)
            try:
                return bytes(r["Body"].read()), str(r.get("ETag", ""))
            except Exception as exc:  # noqa: BLE001 - a body that breaks off mid-stream is transient
                raise translate(exc, operation="get_object", bucket=bucket, key=key, endpoint=self.endpoint) from exc

        return call_with_retry(read, policy=self.options.retry, describe=f"reading s3://{bucket}/{key}")

    def read_object_and_etag(self, bucket: str, key: str, consume: Callable[[Iterator[bytes]], T], *,
                             chunk_size: int = 1 << 20) -> tuple[T, str]:
        """``consume(chunks)`` over the object's body as it streams in, and the ETag it was read with: an object
        too large to hold is read in about one chunk of memory. A body that breaks off is transient: the whole
        read is retried, ``consume`` called again from the start; what ``consume`` raises is its own."""

        def read() -> tuple[T, str]:
            r = self._call("get_object", bucket=bucket, key=key, Bucket=bucket, Key=key)

            def chunks() -> Iterator[bytes]:
                body = r["Body"].iter_chunks(chunk_size)
                while True:
                    try:
                        chunk = next(body, None)
                    except Exception as exc:  # noqa: BLE001 - a body that breaks off mid-stream is transient
                        raise translate(exc, operation="get_object", bucket=bucket, key=key,
                                        endpoint=self.endpoint) from exc
                    if chunk is None:
                        return
                    yield chunk

            try:
                return consume(chunks()), str(r.get("ETag", ""))
            finally:
                r["Body"].close()

        return call_with_retry(read, policy=self.options.retry, describe=f"reading s3://{bucket}/{key}")

    def get_object(self, bucket: str, key: str, *, byte_range: tuple[int, int] | None = None, if_match: str | None = None) -> bytes:
        params: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if byte_range is not None:
            params["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        if if_match:
            params["IfMatch"] = if_match

        def read() -> bytes:
            r = self._call("get_object", bucket=bucket, key=key, **params)
            try:
                return bytes(r["Body"].read())
            except Exception as exc:  # noqa: BLE001 - a body that breaks off mid-stream is transient
                raise translate(exc, operation="get_object", bucket=bucket, key=key, endpoint=self.endpoint) from exc

        # The body is streamed after the response arrives, so a dropped connection surfaces here, outside
        # the retry of the request itself: retry the whole read.
        return call_with_retry(read, policy=self.options.retry, describe=f"reading s3://{bucket}/{key}")

    def put_object(self, bucket: str, key: str, body: bytes | IO[bytes], *, if_none_match: bool = False,
                   if_match: str | None = None, content_type: str = "application/json") -> str:
        """Write an object. ``if_none_match``: only if no object has the key (S3's ``If-None-Match: *``);
        ``if_match``: only if the object's ETag is this one. Either raises PreconditionFailedError when it does
        not hold -- on a store that honours them (:mod:`.conditional` finds out). ``body``: bytes, or a seekable
        file sent from its current position (a large ``_SUCCESS``, streamed from a local file)."""
        crt = None if (if_none_match or if_match or not isinstance(body, (bytes, bytearray, memoryview))) \
            else self._crt_sending(bucket, "put_object")
        if crt is not None:
            return str(self._send("put_object", lambda: crt.put_object(bucket, key, body, content_type=content_type),
                                  bucket=bucket, key=key))
        params: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": body, "ContentType": content_type}
        if if_none_match:
            params["IfNoneMatch"] = "*"
        if if_match:
            params["IfMatch"] = if_match
        client = None if isinstance(body, (bytes, bytearray, memoryview)) else _FromStart(self._client, body)
        r = self._call("put_object", client=client, bucket=bucket, key=key, **params)
        return str(r.get("ETag", ""))

    def delete_objects(self, bucket: str, keys: Sequence[str]) -> int:
        """Delete in batches of 1,000; raises StoreError naming the first key S3 refused.

        A key that XML 1.0 cannot carry (control characters other than tab and newline, a carriage return that
        XML would turn into a newline) cannot travel in DeleteObjects' XML body -- servers answer 500 "not
        well-formed" for the whole batch, every time -- so such keys are deleted one by one with DeleteObject,
        where the key travels in the URL."""
        carried = [k for k in keys if xml_safe(k)]
        deleted = 0
        for start in range(0, len(carried), DELETE_BATCH):
            batch = carried[start : start + DELETE_BATCH]
            r = self._call(
                "delete_objects", bucket=bucket, key=batch[0],
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            failed = [x for x in r.get("Errors", []) or [] if x.get("Code") != "NoSuchKey"]
            if failed:
                first = failed[0]
                raise StoreError(
                    f"delete of s3://{bucket}/{first.get('Key')} failed: {first.get('Code')}: {first.get('Message')} "
                    f"({len(failed)} of {len(batch)} keys in the batch failed)",
                    operation="delete_objects", code=str(first.get("Code")), bucket=bucket, key=str(first.get("Key")),
                )
            deleted += len(batch)
        for key in keys:
            if not xml_safe(key):
                try:
                    self.delete_object(bucket, key)
                except NoSuchKeyError:
                    pass
                deleted += 1
        return deleted

    def copy_object(self, bucket: str, key: str, *, source_key: str, source_etag: str | None = None) -> str:
        """Server-side copy of an object up to 5 GiB, pinned by the source's ETag when given."""
        params: dict[str, Any] = {"Bucket": bucket, "Key": key, "CopySource": {"Bucket": bucket, "Key": source_key}}
        if source_etag:
            params["CopySourceIfMatch"] = source_etag
        r = self._call("copy_object", bucket=bucket, key=key, **params)
        return str(r.get("CopyObjectResult", {}).get("ETag", ""))

    def delete_object(self, bucket: str, key: str, *, if_match: str | None = None) -> None:
        params: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if if_match:
            params["IfMatch"] = if_match
        self._call("delete_object", bucket=bucket, key=key, **params)

    # ------------------------------------------------------------ any other request
    def request(self, operation: str, *, bucket: str, key: str = "", **params: Any) -> dict[str, Any]:
        """One S3 request by botocore's operation name (``put_object``, ``list_multipart_uploads``...) with botocore's
        parameters, through the same funnel as every other (security parameters, counts, retries, translated
        errors); the raw response, ResponseMetadata included. For callers that need a request or a header no
        method here offers: the store probes of ``mpcommit doctor`` (mpcommit.operations.probes)."""
        return dict(self._call(operation, bucket=bucket, key=key, Bucket=bucket, **params))

    # ------------------------------------------------------------ buckets
    def server_time(self, bucket: str) -> float:
        """Now, in seconds since the epoch, by the store's clock: ages of uploads and records are judged against
        the clock that stamped them, not this host's (a cleanup host whose clock runs ahead would take every job
        for older than it is). Learnt from the Date of the first quick answer (1 s resolution) -- a HEAD on the
        bucket when no request was made yet -- then this host's clock plus that offset."""
        if self._clock_offset is None:
            try:
                self.head_bucket(bucket)
            except (NoSuchBucketError, InvalidCredentialsError):
                raise
            except StoreError as exc:
                log.debug("no answer to learn the store's clock from (%s); using this host's", exc)
            if self._clock_offset is None:
                self._clock_offset = 0.0
        return time.time() + self._clock_offset

    def head_bucket(self, bucket: str) -> None:
        """Check that the bucket exists and is reachable with these credentials."""
        try:
            self._call("head_bucket", bucket=bucket, Bucket=bucket)
        except NoSuchKeyError as exc:
            # HEAD responses carry no error code; a 404 on a bucket means the bucket is missing.
            raise NoSuchBucketError(
                f"bucket {bucket!r} does not exist: create it, or check the URI and the endpoint "
                f"({self.endpoint})", operation="head_bucket", code="NoSuchBucket", bucket=bucket,
            ) from exc
        except AccessDeniedError as exc:
            raise self._why_forbidden(exc, bucket) from exc

    def _why_forbidden(self, exc: AccessDeniedError, bucket: str) -> StoreError:
        """A HEAD answered 403 carries no error code, so an unknown access key or a wrong secret reads as a missing
        permission. One request with a body (a listing of at most one key) tells them apart: its
        InvalidAccessKeyId or SignatureDoesNotMatch is raised instead; otherwise the HEAD's own error."""
        if exc.code != "403":
            return exc
        try:
            self._call("list_objects_v2", bucket=bucket, Bucket=bucket, MaxKeys=1)
        except InvalidCredentialsError as known:
            return InvalidCredentialsError(
                f"{exc.operation} s3://{bucket}{'/' + exc.key if exc.key else ''} was refused (403, no reason given "
                f"in a HEAD answer); a listing of the bucket tells why: {known}",
                operation=exc.operation, code=known.code, bucket=bucket, key=exc.key)
        except StoreError:
            return exc
        return exc

    def get_lifecycle(self, bucket: str) -> BucketLifecycle:
        """The bucket's lifecycle configuration: its rules, and the bucket-wide settings beside them."""
        try:
            r = self._call("get_bucket_lifecycle_configuration", bucket=bucket, Bucket=bucket)
        except StoreError as exc:
            if exc.code in ("NoSuchLifecycleConfiguration",):
                return BucketLifecycle([], None)
            raise
        return BucketLifecycle(list(r.get("Rules", []) or []), r.get("TransitionDefaultMinimumObjectSize"))

    def put_lifecycle(self, bucket: str, lifecycle: BucketLifecycle) -> None:
        """Replace the bucket's lifecycle configuration. The bucket-wide settings read with it go back with it:
        left out, S3 resets TransitionDefaultMinimumObjectSize to its default, and other tenants' transitions
        of objects under 128 KB silently stop."""
        extra: dict[str, Any] = {}
        if lifecycle.transition_default_minimum_object_size:
            extra["TransitionDefaultMinimumObjectSize"] = lifecycle.transition_default_minimum_object_size
        self._call("put_bucket_lifecycle_configuration", bucket=bucket, Bucket=bucket,
                   LifecycleConfiguration={"Rules": lifecycle.rules}, **extra)


# ---------------------------------------------------------------- clients, one per options per process
_STORES: dict[tuple[int, S3Options], S3Store] = {}
_STORES_LOCK = threading.Lock()


def store_for(options: S3Options) -> S3Store:
    """A shared store per (process, options): clients are thread-safe but must not cross a fork."""
    cache_key = (os.getpid(), options)
    with _STORES_LOCK:
        store = _STORES.get(cache_key)
        if store is None:
            store = S3Store(options)
            _STORES[cache_key] = store
        return store


class _FromStart:
    """The client, for one PUT of a file body: every attempt sends the file from where it stood at the first. The
    retry (:mod:`.retry`) calls again with the same file object, which the failed attempt may have read to its end."""

    def __init__(self, client: Any, body: IO[bytes]):
        self._client = client
        self._body = body
        self._start = body.tell()

    def put_object(self, **params: Any) -> Any:
        self._body.seek(self._start)
        return self._client.put_object(**params)
