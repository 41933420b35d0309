"""The plain values the store hands out and takes in: what S3 says about objects, uploads and parts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


def xml_safe(key: str) -> bool:
    """Whether XML 1.0 carries ``key`` unchanged (S3's XML bodies: DeleteObjects, CompleteMultipartUpload)."""
    return not any((c < " " and c not in "\t\n") or "\ud800" <= c <= "\udfff" or c in "\ufffe\uffff" for c in key)


@dataclass(frozen=True)
class UploadInfo:
    """A multipart upload as ListMultipartUploads shows it: started, neither completed nor aborted."""

    key: str
    upload_id: str
    initiated: datetime | None


@dataclass(frozen=True)
class ObjectInfo:
    """An object as a listing or a HEAD shows it."""

    key: str
    size: int
    etag: str
    last_modified: datetime | None


@dataclass(frozen=True)
class ObjectRange:
    """Part of a listing proven complete up to a key: every object of the range asked for whose key is at most
    ``through`` (every one of them when ``through`` is None) is in ``objects``, in key order."""

    objects: tuple[ObjectInfo, ...]
    through: str | None

    def covers(self, key: str) -> bool:
        """Whether this listing says whether ``key`` exists (is listed or, unlisted, is absent)."""
        return self.through is None or key <= self.through


@dataclass(frozen=True)
class CompletedPart:
    """A part as CompleteMultipartUpload lists it."""

    number: int
    etag: str
    crc32: str | None = None


@dataclass
class BucketLifecycle:
    """A bucket's lifecycle configuration as PutBucketLifecycleConfiguration takes it back whole."""

    rules: list[dict[str, Any]]
    #: S3's bucket-wide setting for transitions ("varies_by_storage_class" or "all_storage_classes_128K").
    transition_default_minimum_object_size: str | None
