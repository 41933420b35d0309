"""The one S3 boundary: every request mpcommit makes goes through :class:`S3Store`.

Each public method is one S3 operation (or a paginated listing, :mod:`.paging`), sent through the store's funnel
(:mod:`.funnel`: security parameters, counts, retries, translated errors, the store's clock). A task's per-file
requests and CompleteMultipartUpload may go through the AWS CRT instead of boto3 (:mod:`.transport_choice` says
which), with the same security parameters, retries and errors; the commit can also start completes without waiting
for them (:meth:`S3Store.start_complete`). :func:`store_for` shares one store per options in a process.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

from ..errors import (
    AccessDeniedError,
    ChecksumMismatchError,
    InvalidCredentialsError,
    NoSuchBucketError,
    NoSuchKeyError,
    NoSuchUploadError,
    StoreError,
)
from ..options import S3Options
from .errors import translate
from .funnel import Funnel
from .paging import PagedListings
from .retry import call_with_retry
from .values import BucketLifecycle, CompletedPart, ObjectInfo, ObjectRange, UploadInfo, xml_safe  # noqa: F401 - the store's values, named here too
from .session import s3_client
from .transport import Completer, Done, listed_parts
from .transport_choice import TransportChoice

log = logging.getLogger(__name__)

DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys
T = TypeVar("T")


class S3Store(Funnel):
    """Typed S3 operations over one boto3 client. Thread-safe (boto3 clients are)."""

    def __init__(self, options: S3Options, client: Any | None = None, *, unencoded_listing_client: Any | None = None):
        credentials = ca_bundle = None
        if client is None:
            client, credentials, ca_bundle = s3_client(options)
        super().__init__(options, client)
        self._transports = TransportChoice(options, client, self._security, credentials=credentials,
                                           ca_bundle=ca_bundle)
        self._paging = PagedListings(self, unencoded_listing_client)

    def close(self) -> None:
        """Close what the store opened beside its client: the CRT transport's connections and event loop."""
        self._transports.close()

    def __enter__(self) -> "S3Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ multipart uploads
    def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        crt = self._transports.crt_sending(bucket, "create_multipart_upload")
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
        crt = self._transports.crt_sending(bucket, "upload_part", body_size=len(body))
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

    # ------------------------------------------------------------ a file's first requests, not waited for
    def start_create_multipart_upload(self, bucket: str, key: str, done: Done, *,
                                      content_type: str | None = None) -> bool:
        """One attempt at :meth:`create_multipart_upload`, not waited for: ``done(upload id, None)`` or
        ``done(None, error)`` (a StoreError, translated as after one attempt) is called once, on a thread that
        :meth:`pump` s (the CRT transport's polled sockets, :mod:`.polled_http`). Not retried: the caller retries. False, and nothing
        done, when the request would go through boto3 (which cannot send without waiting)."""
        crt = self._transports.crt_sending(bucket, "create_multipart_upload")
        if crt is None:
            return False
        finished = self._one_attempt("create_multipart_upload", bucket=bucket, key=key, done=done)
        try:
            crt.start_create_multipart_upload(bucket, key, finished, content_type=content_type)
        except Exception as exc:  # noqa: BLE001 - e.g. credentials that cannot be read: this attempt's failure
            finished(None, exc)
        return True

    def start_upload_part(self, bucket: str, key: str, upload_id: str, number: int,
                          body: bytes | bytearray | memoryview, crc32: str, done: Done) -> bool:
        """One attempt at :meth:`upload_part`, not waited for, as :meth:`start_create_multipart_upload`:
        ``done(etag, None)``, or ``done(None, error)`` -- a ChecksumMismatchError when S3 recorded another CRC32."""
        crt = self._transports.crt_sending(bucket, "upload_part", body_size=len(body))
        if crt is None:
            return False

        def checked(result: Any, error: BaseException | None) -> None:
            if error is None:
                etag, echoed = result
                if echoed and echoed != crc32:
                    error, result = ChecksumMismatchError(
                        f"part {number} of s3://{bucket}/{key}: S3 recorded CRC32 {echoed}, computed {crc32}",
                        operation="upload_part", code="ChecksumMismatch", bucket=bucket, key=key), None
                else:
                    result = str(etag)
            done(result, error)

        finished = self._one_attempt("upload_part", bucket=bucket, key=key, done=checked)
        try:
            crt.start_upload_part(bucket, key, upload_id, number, body, crc32, finished)
        except Exception as exc:  # noqa: BLE001 - this attempt's failure
            finished(None, exc)
        return True

    def pump(self, timeout: float = 0.0) -> int:
        """Advance the requests started without waiting (:meth:`start_create_multipart_upload`,
        :meth:`start_upload_part`): they are answered only on a thread that pumps, waiting up to ``timeout``
        seconds for an answer. Returns how many are still in flight."""
        return self._transports.pump(timeout)

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
        finished = self._one_attempt("complete_multipart_upload", bucket=bucket, key=key, done=done)
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

    def completer(self, bucket: str = "") -> Completer:
        """The transport of CompleteMultipartUpload for this bucket (:mod:`.transport_choice`), made on first use."""
        return self._transports.completer(bucket)

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
            else self._transports.crt_sending(bucket, "put_object")
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
        """Now, in seconds since the epoch, by the store's clock (:mod:`.clock`: learnt from the Date of the
        quickest answer so far -- a HEAD on the bucket when no request was made yet)."""

        def date_an_answer() -> None:
            try:
                self.head_bucket(bucket)
            except (NoSuchBucketError, InvalidCredentialsError):
                raise
            except StoreError as exc:
                log.debug("no answer to learn the store's clock from (%s); using this host's", exc)

        return self._clock.now(date_an_answer)

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
