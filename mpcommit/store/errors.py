"""One table that turns S3 error codes and botocore exceptions into the project's exceptions.

The original exception is always chained as ``__cause__``; the message names the request and what to do.
"""

from __future__ import annotations

import socket

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from urllib3.exceptions import ProtocolError as Urllib3ProtocolError

from .. import errors as e

# S3 error code -> (exception class, advice). Codes differ between AWS, LocalStack, moto, MinIO and Ceph;
# HEAD responses carry only the status code, hence the numeric entries.
_CODES: dict[str, tuple[type[e.StoreError], str]] = {
    "SlowDown": (e.ThrottledError, "S3 asked to slow down"),
    "Throttling": (e.ThrottledError, "S3 asked to slow down"),
    "ThrottlingException": (e.ThrottledError, "S3 asked to slow down"),
    "RequestLimitExceeded": (e.ThrottledError, "S3 asked to slow down"),
    "TooManyRequests": (e.ThrottledError, "S3 asked to slow down"),
    "429": (e.ThrottledError, "S3 asked to slow down"),
    "503": (e.ThrottledError, "S3 asked to slow down"),
    "ServiceUnavailable": (e.TransientStoreError, "the service is unavailable"),
    "InternalError": (e.TransientStoreError, "S3 had an internal error"),
    "RequestTimeout": (e.TransientStoreError, "S3 timed out reading the request"),
    "OperationAborted": (e.TransientStoreError, "a conflicting operation is in progress"),
    "ConditionalRequestConflict": (e.TransientStoreError, "a conflicting conditional write is in progress"),
    "500": (e.TransientStoreError, "S3 had an internal error"),
    "502": (e.TransientStoreError, "bad gateway"),
    "504": (e.TransientStoreError, "gateway timeout"),
    "NoSuchBucket": (e.NoSuchBucketError, "the bucket does not exist: create it, or check the URI and the endpoint"),
    "NoSuchKey": (e.NoSuchKeyError, "the object does not exist"),
    "404": (e.NoSuchKeyError, "the object does not exist"),
    "NotFound": (e.NoSuchKeyError, "the object does not exist"),
    "NoSuchUpload": (e.NoSuchUploadError, "the multipart upload is no longer pending (completed or aborted)"),
    "AccessDenied": (e.AccessDeniedError, "access denied: grant these credentials the permission for this request"),
    "AllAccessDisabled": (e.AccessDeniedError, "all access to this bucket is disabled"),
    "403": (e.AccessDeniedError, "access denied (403): check the credentials' permissions and the bucket owner"),
    "InvalidAccessKeyId": (e.InvalidCredentialsError, "the access key id is unknown: check AWS_ACCESS_KEY_ID or the profile"),
    "SignatureDoesNotMatch": (e.InvalidCredentialsError, "the secret key does not match: check the credentials"),
    "ExpiredToken": (e.InvalidCredentialsError, "the session token expired: refresh the credentials"),
    "InvalidToken": (e.InvalidCredentialsError, "the session token is invalid: refresh the credentials"),
    "PreconditionFailed": (e.PreconditionFailedError, "a precondition did not hold (the object changed or exists)"),
    "412": (e.PreconditionFailedError, "a precondition did not hold (the object changed or exists)"),
    "EntityTooSmall": (e.InvalidPartError, "a part other than the last was smaller than 5 MiB"),
    "InvalidPart": (e.InvalidPartError, "a listed part was not found or its ETag does not match"),
    "InvalidPartOrder": (e.InvalidPartError, "parts must be listed in ascending order"),
    "BadDigest": (e.ChecksumMismatchError, "the uploaded bytes do not match their checksum"),
    "InvalidDigest": (e.ChecksumMismatchError, "the checksum sent is malformed"),
    "XAmzContentChecksumMismatch": (e.ChecksumMismatchError, "the uploaded bytes do not match their checksum"),
    "InvalidRequest": (e.StoreError, "S3 refused the request as invalid"),
    # Stores that keep keys as files and folders (versitygw's posix backend) cannot put a key below an object's key.
    "ObjectParentIsFile": (e.StoreError, "a leading part of this key is an object already, and this store keeps keys "
                           "as files and folders, so nothing can go below it: choose another destination, or move "
                           "that object away"),
    # A 5xx that no retry can help: the server lacks the feature (checked before the generic 5xx rule below).
    "NotImplemented": (e.UnsupportedRequestError, "this S3 server does not implement the request or a header it carries"),
    "501": (e.UnsupportedRequestError, "this S3 server does not implement the request or a header it carries"),
}


def translate(exc: BaseException, *, operation: str, bucket: str = "", key: str = "", endpoint: str = "",
              reached: bool = True) -> e.StoreError:
    """Map a botocore/urllib3 exception to a StoreError subclass (the caller chains it with ``from exc``).

    ``reached``: whether this endpoint has answered before. A connection refused, or a host name that does not
    resolve, on an endpoint that never answered is a configuration mistake, reported at once (not retried).
    """
    where = f"s3://{bucket}/{key}" if key else (f"s3://{bucket}" if bucket else "")
    subject = f"{operation} {where}".strip()
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {}) or {}
        code = str(err.get("Code") or "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = str(err.get("Message") or "")
        cls, advice = _CODES.get(code) or _CODES.get(str(status) if status else "", (None, ""))  # type: ignore[arg-type]
        if cls is None:
            cls = e.TransientStoreError if isinstance(status, int) and status >= 500 else e.StoreError
            advice = "server error" if cls is e.TransientStoreError else "S3 refused the request"
        detail = f" ({message})" if message and message not in advice else ""
        return cls(f"{subject} failed: {code or status}: {advice}{detail}", operation=operation, code=code or str(status), bucket=bucket, key=key)
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        why = _unreachable_reason(exc)
        where_to = endpoint or "(default)"
        if why is not None and not reached:
            return e.EndpointUnreachableError(
                f"{subject} failed: could not reach the endpoint {where_to}: {why}. Check the endpoint, "
                "S3Options(endpoint_url=...) or AWS_ENDPOINT_URL (e.g. http://127.0.0.1:4566), and that the server is "
                "running",
                operation=operation, code="EndpointUnreachable", bucket=bucket, key=key,
            )
        return e.TransientEndpointError(
            f"{subject} failed: could not reach the endpoint {where_to}: {why or 'connecting failed or timed out'}",
            operation=operation, code="EndpointUnreachable", bucket=bucket, key=key,
        )
    if isinstance(exc, (ReadTimeoutError, ConnectionClosedError, ResponseStreamingError, IncompleteReadError, Urllib3ProtocolError, ConnectionError)):
        return e.TransientStoreError(
            f"{subject} failed: the connection dropped ({type(exc).__name__})",
            operation=operation, code="ConnectionError", bucket=bucket, key=key,
        )
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return e.InvalidCredentialsError(
            f"{subject} failed: no usable credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, "
            "or pass S3Options(access_key_id=..., secret_access_key=...)",
            operation=operation, code="NoCredentials", bucket=bucket, key=key,
        )
    if isinstance(exc, BotoCoreError):
        return e.StoreError(f"{subject} failed: {exc}", operation=operation, code=type(exc).__name__, bucket=bucket, key=key)
    return e.StoreError(f"{subject} failed: {type(exc).__name__}: {exc}", operation=operation, bucket=bucket, key=key)


def _unreachable_reason(exc: BaseException) -> str | None:
    """"connection refused" or "its host name does not resolve" when that is why ``exc`` could not connect
    (botocore keeps urllib3's error in ``kwargs['error']``, and that one the socket error); else None."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return "connection refused (nothing listens there)"
        if isinstance(current, socket.gaierror):
            return "its host name does not resolve"
        kwargs = getattr(current, "kwargs", None)
        pending.extend([current.__cause__, current.__context__, kwargs.get("error") if isinstance(kwargs, dict) else None])
    return None
