"""An independent checker for invariant tests: what a reader of the bucket would see.

It uses nothing from mpcommit, only a raw boto3 S3 client, so that a bug in the library's own listing or
manifest code cannot hide a bug in what it left in the bucket.

Prefixes are directories: ``"table"`` means ``"table/"`` (so ``table2/...`` is not included); ``""`` is the whole
bucket. Pass ``exact_prefix=True`` to use a prefix as it is (e.g. a key prefix such as ``"table/part-00001"``).
"""

from __future__ import annotations

from typing import Any

from botocore.handlers import set_list_objects_encoding_type_url

__all__ = [
    "all_keys",
    "list_objects",
    "unencoded_listings",
    "is_hidden",
    "pending_upload_entries",
    "pending_uploads",
    "read_object",
    "visible_keys",
]


def _norm(prefix: str, exact_prefix: bool) -> str:
    if exact_prefix or not prefix or prefix.endswith("/"):
        return prefix
    return prefix + "/"


def is_hidden(relative_key: str) -> bool:
    """True when any path segment starts with ``_`` or ``.`` (what Spark, Hive and pyarrow readers skip)."""
    return any(segment.startswith(("_", ".")) for segment in relative_key.split("/"))


def unencoded_listings(client: Any) -> Any:
    """Make ``client`` list keys without ``EncodingType=url`` (botocore's default) and return it.

    LocalStack 4.13.x loses every page after the first 1,000 keys holding '=' when keys are URL-encoded; the
    same listing without encoding is complete. The tests' keys hold no characters that raw XML would alter.
    """
    for operation in ("ListObjects", "ListObjectsV2"):
        client.meta.events.unregister(f"before-parameter-build.s3.{operation}", set_list_objects_encoding_type_url)
    return client


def list_objects(client: Any, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    """The raw ``Contents`` entries of every object under ``prefix`` (used as given), over all pages, checked
    for the ways a server's pagination can lose keys: an assertion fails rather than a count coming up short."""
    entries: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    tokens: set[str] = set()
    previous_truncated = False
    while True:
        page = client.list_objects_v2(**kwargs)
        contents = list(page.get("Contents", ()))
        if previous_truncated and not contents and not page.get("IsTruncated"):
            raise AssertionError(f"listing s3://{bucket}/{prefix}: an empty last page after a truncated one "
                                 f"({len(entries)} keys so far); the server lost keys")
        keys = [obj["Key"] for obj in contents]
        if keys != sorted(keys) or (entries and keys and keys[0] <= entries[-1]["Key"]):
            raise AssertionError(f"listing s3://{bucket}/{prefix}: keys out of order")
        entries.extend(contents)
        if not page.get("IsTruncated"):
            return entries
        token = page.get("NextContinuationToken")
        if not token or token in tokens:
            raise AssertionError(f"listing s3://{bucket}/{prefix}: the continuation token does not advance")
        tokens.add(token)
        kwargs["ContinuationToken"] = token
        previous_truncated = True


def all_keys(client: Any, bucket: str, prefix: str = "", *, exact_prefix: bool = False) -> set[str]:
    """Every object key under ``prefix``, hidden or not (keys relative to the bucket)."""
    return {obj["Key"] for obj in list_objects(client, bucket, _norm(prefix, exact_prefix))}


def visible_keys(client: Any, bucket: str, prefix: str = "", *, exact_prefix: bool = False) -> set[str]:
    """Object keys under ``prefix`` that a reader of the table at ``prefix`` sees: those with no path segment
    below the prefix starting with ``_`` or ``.`` (so ``_SUCCESS`` and ``_temporary/...`` are excluded).
    Directory markers (keys ending in ``/``) count as visible."""
    prefix = _norm(prefix, exact_prefix)
    return {key for key in all_keys(client, bucket, prefix, exact_prefix=True) if not is_hidden(key[len(prefix):])}


def pending_upload_entries(
    client: Any,
    bucket: str,
    prefix: str = "",
    *,
    exact_prefix: bool = False,
    page_size: int | None = None,
) -> list[dict[str, Any]]:
    """The raw ``Uploads`` entries (``Key``, ``UploadId``, ``Initiated``, ...) of every multipart upload in progress
    under ``prefix``, following ``KeyMarker``/``UploadIdMarker`` across pages. ``page_size`` sets ``MaxUploads``
    (LocalStack, versitygw and S3 honour it; moto ignores it and never paginates).

    versitygw refuses the UploadIdMarker it returns (400 InvalidArgument): there the pages follow ``KeyMarker``
    alone and the uploads of each page's last key are fetched again in one listing of that key, which must show
    a later key or end (else the check cannot be made and says so)."""
    from botocore.exceptions import ClientError

    prefix = _norm(prefix, exact_prefix)
    entries: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    if page_size is not None:
        kwargs["MaxUploads"] = page_size
    seen_markers: set[tuple[str, str]] = set()
    by_key = False
    while True:
        try:
            page = client.list_multipart_uploads(**kwargs)
        except ClientError as exc:
            if "UploadIdMarker" not in kwargs or exc.response.get("Error", {}).get("Code") != "InvalidArgument":
                raise
            by_key = True
            del kwargs["UploadIdMarker"]
            _add_uploads_of_key(client, bucket, kwargs["KeyMarker"], entries)
            continue
        entries.extend(page.get("Uploads", ()))
        if not page.get("IsTruncated"):
            return entries
        key_marker = page.get("NextKeyMarker") or ""
        upload_id_marker = page.get("NextUploadIdMarker") or ""
        if not key_marker and not upload_id_marker:
            # Truncated but no markers: continue after the last entry, as S3 clients do.
            last = entries[-1]
            key_marker, upload_id_marker = last["Key"], last["UploadId"]
        if (key_marker, upload_id_marker) in seen_markers:
            raise AssertionError(f"ListMultipartUploads pagination loops at {(key_marker, upload_id_marker)!r}")
        seen_markers.add((key_marker, upload_id_marker))
        kwargs["KeyMarker"] = key_marker
        if by_key:
            _add_uploads_of_key(client, bucket, key_marker, entries)
        elif upload_id_marker:
            kwargs["UploadIdMarker"] = upload_id_marker
        else:
            kwargs.pop("UploadIdMarker", None)


def _add_uploads_of_key(client: Any, bucket: str, key: str, entries: list[dict[str, Any]]) -> None:
    """Append the uploads of ``key`` not in ``entries`` yet, from one listing of that key."""
    page = client.list_multipart_uploads(Bucket=bucket, Prefix=key)
    listed = page.get("Uploads", ())
    if page.get("IsTruncated") and all(u["Key"] == key for u in listed):
        raise AssertionError(f"cannot list every upload of {key!r}: more than one page of them, and the server "
                             "refuses UploadIdMarker")
    have = {(e["Key"], e["UploadId"]) for e in entries if e["Key"] == key}
    entries.extend(u for u in listed if u["Key"] == key and (key, u["UploadId"]) not in have)


def pending_uploads(
    client: Any,
    bucket: str,
    prefix: str = "",
    *,
    exact_prefix: bool = False,
    page_size: int | None = None,
) -> list[tuple[str, str]]:
    """``(key, upload_id)`` of every multipart upload in progress under ``prefix``, over all pages."""
    entries = pending_upload_entries(client, bucket, prefix, exact_prefix=exact_prefix, page_size=page_size)
    return [(entry["Key"], entry["UploadId"]) for entry in entries]


def read_object(client: Any, bucket: str, key: str) -> bytes:
    """The whole body of ``key``."""
    response = client.get_object(Bucket=bucket, Key=key)
    with response["Body"] as body:
        return body.read()
