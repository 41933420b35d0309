"""The streaming multipart writer: a binary file object that uploads parts as its buffer fills.

It never completes its upload: closing it hands back a :class:`PendingUpload` for the task manifest; only
the driver completes. The abort is registered the moment the upload is created, so every failure path
(an exception in the ``with`` body, a failed part, a failed close) aborts it.

Memory is bounded: one buffer filling plus at most ``max_parts_in_flight`` parts uploading, each at most the
current part size (see :class:`mpcommit.options.WriterSettings`).
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from ..errors import ProtocolError, UsageError
from ..options import WriterSettings
from ..sizing import MAX_OBJECT_SIZE, MAX_PARTS, crc32_b64, part_size_for
from ..store.s3 import S3Store
from . import faults
from .records.manifest import Part, PendingUpload

log = logging.getLogger(__name__)


class MultipartWriter(io.BufferedIOBase):
    """Write bytes to ``s3://bucket/key`` as an uncompleted multipart upload."""

    def __init__(
        self,
        store: S3Store,
        *,
        bucket: str,
        key: str,
        settings: WriterSettings = WriterSettings(),
        executor: Executor | None = None,
        partition: str = "",
        on_finish: Callable[[PendingUpload], None] | None = None,
        on_abort: Callable[["MultipartWriter"], None] | None = None,
        content_type: str | None = None,
    ):
        super().__init__()
        self._store = store
        self.bucket = bucket
        self.key = key
        self.partition = partition
        self._settings = settings
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(settings.upload_threads, thread_name_prefix="mpcommit-part")
        self._on_finish = on_finish
        self._on_abort = on_abort
        self._buffer = bytearray()
        self._part_number = 0
        self._size = 0
        self._parts: dict[int, Part] = {}
        self._futures: list[Future[Part]] = []
        self._slots = threading.BoundedSemaphore(settings.max_parts_in_flight)
        self._lock = threading.Lock()
        self._pending: PendingUpload | None = None
        self._aborted = False
        #: Rows written, when the caller knows them (Parquet and CSV writers do); goes into the manifest.
        self.rows: int | None = None
        # From here on the upload exists and is billed until completed or aborted: every path below that
        # fails must abort it.
        self.upload_id = store.create_multipart_upload(bucket, key, content_type=content_type)
        try:
            faults.checkpoint("writer.created")
        except BaseException:
            # The caller never gets this writer, so nobody else could abort its upload.
            self.abort()
            raise

    # ------------------------------------------------------------ file object protocol
    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._size + len(self._buffer)

    def flush(self) -> None:
        # Parts have a minimum size; flushing early would break the upload. Data goes out as parts fill.
        pass

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError(f"write to closed writer for s3://{self.bucket}/{self.key}")
        view = memoryview(data).cast("B")
        written = len(view)
        while len(view):
            capacity = self._current_part_size() - len(self._buffer)
            take = min(capacity, len(view))
            self._buffer += view[:take]
            view = view[take:]
            if len(self._buffer) >= self._current_part_size():
                self._send_buffer()
        return written

    def _current_part_size(self) -> int:
        return part_size_for(self._part_number + 1, initial=self._settings.initial_part_size, step=self._settings.parts_per_size_step)

    # ------------------------------------------------------------ parts
    def _send_buffer(self) -> None:
        self._raise_failed_part()
        if self._part_number >= MAX_PARTS:
            raise UsageError(f"s3://{self.bucket}/{self.key} would need more than {MAX_PARTS} parts")
        if self._size + len(self._buffer) > MAX_OBJECT_SIZE:
            raise UsageError(f"s3://{self.bucket}/{self.key} would exceed S3's 5 TiB object limit")
        # Bound memory: wait for a free slot *before* freezing the buffer, so that at most one buffer filling
        # and max_parts_in_flight parts uploading exist at any moment (the bound WriterSettings documents).
        self._slots.acquire()
        try:
            self._part_number += 1
            number = self._part_number
            body = bytes(self._buffer)
            self._buffer = bytearray()
            self._size += len(body)
            future = self._executor.submit(self._upload_part, number, body)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _f: self._slots.release())
        self._futures.append(future)

    def _upload_part(self, number: int, body: bytes) -> Part:
        crc = crc32_b64(body)
        etag = self._store.upload_part(self.bucket, self.key, self.upload_id, number, body, crc)
        faults.checkpoint("writer.part_uploaded", number)
        return Part(number=number, etag=etag, size=len(body), crc32=crc)

    def _raise_failed_part(self) -> None:
        for f in self._futures:
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]

    # ------------------------------------------------------------ finishing
    def close(self) -> None:
        """Upload what is buffered, wait for every part, and hand back the pending upload. Never completes."""
        if self.closed:
            return
        try:
            self.finish()
        finally:
            super().close()

    def finish(self) -> PendingUpload:
        with self._lock:
            if self._pending is not None:
                return self._pending
            if self._aborted:
                raise ProtocolError(f"writer for s3://{self.bucket}/{self.key} was aborted")
        try:
            # The last part may be smaller than 5 MiB; a zero-byte file is one empty part.
            if self._buffer or self._part_number == 0:
                self._send_buffer()
            parts = [f.result() for f in self._futures]
        except BaseException:
            self.abort()
            raise
        pending = PendingUpload(
            key=self.key, upload_id=self.upload_id, parts=tuple(sorted(parts, key=lambda p: p.number)),
            size=self._size, rows=self.rows, partition=self.partition,
        )
        self._pending = pending
        self._shutdown_executor()
        if self._on_finish:
            self._on_finish(pending)
        return pending

    def abort(self) -> None:
        """Stop and abort the upload. Never raises over an error already propagating: failures are logged."""
        with self._lock:
            if self._aborted:
                return
            self._aborted = True
        for f in self._futures:
            f.cancel()
        for f in self._futures:
            try:
                f.result()
            except BaseException:  # noqa: BLE001 - already failing; the abort below is what matters
                pass
        try:
            self._store.abort_multipart_upload(self.bucket, self.key, self.upload_id)
        except Exception as exc:  # noqa: BLE001 - logged; the job commit or orphan cleanup aborts it later
            log.warning("could not abort upload %s of s3://%s/%s: %s", self.upload_id, self.bucket, self.key, exc)
        self._buffer = bytearray()
        self._shutdown_executor()
        if self._on_abort:
            self._on_abort(self)
        if not self.closed:
            super().close()

    def _shutdown_executor(self) -> None:
        if self._own_executor:
            self._executor.shutdown(wait=False)

    @property
    def pending(self) -> PendingUpload | None:
        return self._pending

    def __enter__(self) -> "MultipartWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
            return None
        self.close()
        return None

    def __del__(self) -> None:  # pragma: no cover - interpreter-dependent
        # io.IOBase.__del__ would call close(), which would upload; an abandoned writer must not do that.
        pass
