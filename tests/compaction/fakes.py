"""An in-memory stand-in for S3Store, with S3's multipart rules, for testing merges without a server.

It implements the few operations a merge uses, enforces what S3 enforces (parts of at least 5 MiB but the
last, at most 5 GiB, ETag preconditions, byte ranges inside the object) and counts requests and the bytes
that pass through the client, so that tests can assert what was copied and what was downloaded.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field

from mpcommit.errors import InvalidPartError, NoSuchKeyError, NoSuchUploadError, PreconditionFailedError, StoreError
from mpcommit.protocol.records.manifest import PendingUpload
from mpcommit.sizing import MAX_PART_SIZE, MIN_PART_SIZE, crc32_b64
from mpcommit.store.s3 import CompletedPart, ObjectInfo


def etag_of(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


@dataclass
class FakeStore:
    objects: dict[str, bytes] = field(default_factory=dict)
    uploads: dict[str, tuple[str, dict[int, bytes]]] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)
    downloaded: int = 0
    uploaded: int = 0
    copied: int = 0
    aborted: list[str] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---------------------------------------------------------------- setup and results
    def put(self, key: str, data: bytes) -> ObjectInfo:
        self.objects[key] = data
        return ObjectInfo(key, len(data), etag_of(data), None)

    def complete(self, pending: PendingUpload) -> bytes:
        """Complete like S3: every part but the last must be at least 5 MiB."""
        key, parts = self.uploads.pop(pending.upload_id)
        numbers = [p.number for p in pending.parts]
        assert numbers == sorted(parts), f"manifest parts {numbers} != uploaded {sorted(parts)}"
        for n in numbers[:-1]:
            if len(parts[n]) < MIN_PART_SIZE:
                raise InvalidPartError(f"EntityTooSmall: part {n} is {len(parts[n])} bytes", code="EntityTooSmall")
        for p in pending.parts:
            assert p.size == len(parts[p.number])
            assert p.crc32 == crc32_b64(parts[p.number]), "part checksum missing or wrong"
        data = b"".join(parts[n] for n in numbers)
        self.objects[key] = data
        return data

    def request_counts(self) -> dict[str, int]:
        return dict(self.counts)

    # ---------------------------------------------------------------- the S3Store methods merges use
    def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        with self._lock:
            self.counts["create_multipart_upload"] += 1
            upload_id = f"u{next(self._ids)}"
            self.uploads[upload_id] = (key, {})
        return upload_id

    def _source(self, key: str, etag: str | None) -> bytes:
        if key not in self.objects:
            raise NoSuchKeyError(f"no such key {key}", code="NoSuchKey", key=key)
        data = self.objects[key]
        if etag is not None and etag_of(data) != etag:
            raise PreconditionFailedError(f"{key} changed", code="PreconditionFailed", key=key)
        return data

    def upload_part_copy(self, bucket, key, upload_id, number, *, source_key, source_etag, byte_range=None,
                         source_bucket=None) -> CompletedPart:
        with self._lock:
            self.counts["upload_part_copy"] += 1
        data = self._source(source_key, source_etag)
        lo, hi = byte_range if byte_range else (0, len(data) - 1)
        if not 0 <= lo <= hi < len(data):
            raise StoreError(f"InvalidRange {lo}-{hi} of {len(data)}", code="InvalidRange")
        body = data[lo : hi + 1]
        if len(body) > MAX_PART_SIZE:
            raise InvalidPartError("EntityTooLarge", code="EntityTooLarge")
        with self._lock:
            self._part(upload_id)[number] = body
            self.copied += len(body)
        return CompletedPart(number, etag_of(body), crc32_b64(body))

    def upload_part(self, bucket, key, upload_id, number, body, crc32) -> str:
        with self._lock:
            self.counts["upload_part"] += 1
            assert crc32 == crc32_b64(body)
            self._part(upload_id)[number] = bytes(body)
            self.uploaded += len(body)
        return etag_of(bytes(body))

    def _part(self, upload_id: str) -> dict[int, bytes]:
        if upload_id not in self.uploads:
            raise NoSuchUploadError(f"no upload {upload_id}", code="NoSuchUpload")
        return self.uploads[upload_id][1]

    def get_object(self, bucket, key, *, byte_range=None, if_match=None) -> bytes:
        with self._lock:
            self.counts["get_object"] += 1
        data = self._source(key, if_match)
        if byte_range is not None:
            lo, hi = byte_range
            if lo >= len(data):
                raise StoreError("InvalidRange", code="InvalidRange")
            data = data[lo : hi + 1]
        with self._lock:
            self.downloaded += len(data)
        return data

    def abort_multipart_upload(self, bucket, key, upload_id) -> bool:
        with self._lock:
            self.counts["abort_multipart_upload"] += 1
            self.aborted.append(upload_id)
            return self.uploads.pop(upload_id, None) is not None

    def head_object(self, bucket, key) -> ObjectInfo | None:
        self.counts["head_object"] += 1
        data = self.objects.get(key)
        return None if data is None else ObjectInfo(key, len(data), etag_of(data), None)
