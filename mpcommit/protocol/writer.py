"""The streaming multipart writer: a binary file object that uploads parts as its buffer fills.

It never completes its upload: closing it hands back a :class:`PendingUpload` for the task manifest; only
the driver completes. The abort is registered the moment the upload is created, so every failure path
(an exception in the ``with`` body, a failed part, a failed close) aborts it.

Memory is bounded: one buffer filling plus at most ``max_parts_in_flight`` parts uploading, each at most the
current part size (see :class:`mpcommit.options.WriterSettings`). Part buffers are handed to the store as they
are (no copy) and reused once their part is uploaded, so a writer never holds more than
``max_parts_in_flight + 1`` of them, idle ones included.

A writer opened with ``background=True`` (what a task's sorted partition path uses, see
:meth:`mpcommit.protocol.task.TaskAttempt.create`) keeps no round trip on its caller's thread: the upload's create
is sent when the writer opens -- on a store that sends without waiting (the CRT transport's polled sockets), from
the caller's thread, its answer read where the caller pumps the store; else by the upload pool -- so that the upload
exists, and is aborted with its job, from the file's first byte. :meth:`close` sends the last part and returns at
once; a small file's only part goes on the polled sockets too, from the create's answer (a first attempt that fails
goes on through the pool with the store's retries); larger parts go through the pool. The writer finishes (hands its :class:`PendingUpload` to ``on_finish``) when its last part is uploaded. What such
closing writers still hold is bounded by a :class:`ByteBudget` shared by the task (``close`` waits for room).
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from typing import Any

from ..errors import ChecksumMismatchError, ProtocolError, StoreError, UsageError
from ..options import WriterSettings
from ..sizing import MAX_OBJECT_SIZE, MAX_PARTS, crc32_b64, part_size_for
from ..store.s3 import S3Store
from . import faults
from .records.manifest import Part, PendingUpload

log = logging.getLogger(__name__)

#: What a file closing in the background counts against its task's ``closing_bytes`` at the least: with the
#: default 32 MiB, at most 128 files close at once however small they are.
CLOSING_FILE_MIN_BYTES = 256 * 1024
#: How long one wait for an answer read on this thread lasts before whatever else may have ended is looked at.
_PUMP_SECONDS = 0.01


def wait_pumping(store: Any, future: Future[Any]) -> None:
    """Wait for ``future``, pumping ``store``'s requests started without waiting meanwhile: their answers are read
    only by a thread that pumps, and the waiting one may be the only thread that would (the task's)."""
    pump = getattr(store, "pump", None)
    while not future.done():
        if pump is None or not pump(_PUMP_SECONDS):
            wait([future], timeout=_PUMP_SECONDS)


class ByteBudget:
    """A counting semaphore of bytes: what writers closing in the background may still hold, all together.

    ``acquire(n)`` waits until ``n`` bytes are free (a request larger than the whole budget waits until nothing
    else is held, then takes the whole budget), and returns what it took, to be handed back to ``release``.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise UsageError(f"a byte budget needs at least one byte, got {capacity}")
        self.capacity = capacity
        self._held = 0
        #: The most bytes held at once (for tests and benchmarks: the bound in force).
        self.peak = 0
        self._cond = threading.Condition()

    def acquire(self, n: int, *, pump: Callable[[float], int] | None = None) -> int:
        """``pump``: advances the requests whose answers release bytes and that only a pumping thread reads
        (:meth:`mpcommit.store.s3.S3Store.pump`); called while waiting, with no lock held."""
        n = max(1, min(n, self.capacity))
        while True:
            with self._cond:
                if self._held + n <= self.capacity:
                    self._held += n
                    self.peak = max(self.peak, self._held)
                    return n
                if pump is None:
                    self._cond.wait()
                    continue
            if not pump(_PUMP_SECONDS):
                with self._cond:  # nothing polled in flight: bytes come back from the pool's threads
                    if self._held + n > self.capacity:
                        self._cond.wait(_PUMP_SECONDS)

    def release(self, n: int) -> None:
        with self._cond:
            self._held -= n
            self._cond.notify_all()

    @property
    def held(self) -> int:
        with self._cond:
            return self._held


def _hand_on(source: "Future[Part]", target: "Future[Part]") -> None:
    error = source.exception() if not source.cancelled() else ProtocolError("a part's upload was cancelled")
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


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
        background: bool = False,
        budget: ByteBudget | None = None,
        on_failure: Callable[["MultipartWriter", BaseException], None] | None = None,
        on_open: Callable[["MultipartWriter"], None] | None = None,
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
        self._on_failure = on_failure
        self._content_type = content_type
        self._background = background
        self._budget = budget
        # The buffer filling: its first ``_fill`` bytes are data. A fresh buffer grows as data arrives (a small
        # file costs what it holds); a reused one has the part's full length and is written in place.
        self._buffer = bytearray()
        self._fill = 0
        #: Buffers of uploaded parts, kept for the next parts (never more than max_parts_in_flight + 1 in all).
        self._free: list[bytearray] = []
        self._part_number = 0
        self._size = 0
        self._futures: list[Future[Part]] = []
        self._part_sizes: list[int] = []
        self._slots = threading.BoundedSemaphore(settings.max_parts_in_flight)
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()
        self._pending: PendingUpload | None = None
        self._aborted = False
        self._closing = False
        self._failure: BaseException | None = None
        self._done: Future[PendingUpload] = Future()
        self._budget_held = 0
        #: Rows written, when the caller knows them (Parquet and CSV writers do); goes into the manifest.
        self.rows: int | None = None
        self.upload_id: str | None = None
        self._create_future: Future[str] | None = None
        #: Whether ``_create_future`` is a create sent on the store's polled sockets (else the pool's work item).
        self._create_polled = False
        if on_open:
            on_open(self)  # whoever aborts the attempt knows this writer before its upload exists
        if not background:
            # From here on the upload exists and is billed until completed or aborted: every path below that
            # fails must abort it.
            try:
                self._ensure_created()
            except BaseException:
                # The caller never gets this writer, so nobody else could abort its upload.
                self.abort()
                raise
            return
        # Background: the create goes out now, not waited for (the polled sockets, else the pool). Whoever creates
        # the upload does so under ``_create_lock``; an abort taken before that stops it.
        self._create_future = self._start_polled_create()
        if self._create_future is not None:
            self._create_polled = True
        else:
            self._create_future = self._executor.submit(self._ensure_created)

    # ------------------------------------------------------------ the upload itself
    def _ensure_created(self) -> str:
        if self._create_polled and self._create_future is not None:
            wait_pumping(self._store, self._create_future)  # its answer sets upload_id; a failed one: created here
        with self._create_lock:
            if self.upload_id is not None:
                return self.upload_id
            if self._aborted:
                raise ProtocolError(f"writer for s3://{self.bucket}/{self.key} was aborted")
            self.upload_id = self._store.create_multipart_upload(self.bucket, self.key, content_type=self._content_type)
        faults.checkpoint("writer.created")  # a failure here is the creator's to handle: it aborts
        return self.upload_id

    # ------------------------------------------------------------ file object protocol
    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._size + self._fill

    def flush(self) -> None:
        # Parts have a minimum size; flushing early would break the upload. Data goes out as parts fill.
        pass

    def write(self, data: Any) -> int:
        if self.closed or self._closing:
            raise ValueError(f"write to closed writer for s3://{self.bucket}/{self.key}")
        view = memoryview(data).cast("B")
        written = len(view)
        while len(view):
            size = self._current_part_size()
            take = min(size - self._fill, len(view))
            end = self._fill + take
            if end <= len(self._buffer):
                # A reused buffer, written in place. Through a memoryview: bytearray's own slice assignment
                # would first copy the data into a temporary bytearray.
                with memoryview(self._buffer) as target:
                    target[self._fill:end] = view[:take]
            else:
                self._buffer += view[:take]
            self._fill = end
            view = view[take:]
            if self._fill >= size:
                self._send_buffer()
        return written

    def _current_part_size(self) -> int:
        return part_size_for(self._part_number + 1, initial=self._settings.initial_part_size, step=self._settings.parts_per_size_step)

    # ------------------------------------------------------------ parts
    def _send_buffer(self, *, last: bool = False) -> None:
        self._raise_failed_part()
        if self._part_number >= MAX_PARTS:
            raise UsageError(f"s3://{self.bucket}/{self.key} would need more than {MAX_PARTS} parts")
        if self._size + self._fill > MAX_OBJECT_SIZE:
            raise UsageError(f"s3://{self.bucket}/{self.key} would exceed S3's 5 TiB object limit")
        # Bound memory: wait for a free slot *before* taking a new buffer, so that at most one buffer filling
        # and max_parts_in_flight parts uploading exist at any moment (the bound WriterSettings documents).
        self._slots.acquire()
        try:
            self._part_number += 1
            number = self._part_number
            body = self._buffer
            if len(body) > self._fill:
                del body[self._fill:]  # the last part of a reused buffer: shrunk in place, never copied
            self._size += self._fill
            self._buffer = bytearray() if last else self._take_buffer(self._current_part_size())
            self._fill = 0
            future = self._start_part(number, body, last=last)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _f, body=body: self._part_done(body))
        self._futures.append(future)
        self._part_sizes.append(len(body))

    def _take_buffer(self, size: int) -> bytearray:
        """The buffer of the next part: an uploaded part's, else a new one of the part's exact size (the file has
        filled a part already, so its next one is not small; a buffer grown byte by byte would be up to 1/8 larger)."""
        with self._lock:
            while self._free:
                buf = self._free.pop()
                if len(buf) == size:
                    return buf
        return bytearray(size)

    def _part_done(self, body: bytearray) -> None:
        # Hand the buffer back before the slot: whoever gets the slot finds it free.
        with self._lock:
            if not self._aborted and not self._closing and len(body) == self._current_part_size():
                self._free.append(body)
        self._slots.release()

    def _start_part(self, number: int, body: bytearray, *, last: bool) -> Future[Part]:
        """A part on its way: through the upload pool, or -- a background file's only part, its create sent on the
        store's polled sockets -- on those sockets too, once the create is answered (:meth:`_send_part_polled`)."""
        if self._create_polled and last and number == 1:
            return self._send_part_polled(body)
        return self._executor.submit(self._upload_part, number, body)

    def _start_polled_create(self) -> "Future[str] | None":
        """The upload's create sent on the store's polled sockets (:mod:`mpcommit.store.polled_http`), not waited
        for: its answer -- read by whichever thread pumps the store -- sets ``upload_id`` and settles the future
        (a failed attempt's error too: whoever needs the upload then creates it through the store, with its
        retries). None when the store cannot send without waiting. Through the upload pool and the CRT's event
        loop a small file's two requests cost a task of 1,250 small files about three times their own CPU in
        threads handing over the interpreter lock (issue 39)."""
        start_create = getattr(self._store, "start_create_multipart_upload", None)
        if start_create is None:
            return None
        future: Future[str] = Future()
        # Running from the start, so never cancelled: an abort waits for its answer, then aborts what it created.
        future.set_running_or_notify_cancel()

        def created(upload_id: Any, error: BaseException | None) -> None:
            if error is not None:
                future.set_exception(error)
                return
            with self._create_lock:
                self.upload_id = str(upload_id)  # before anything can fail: an abort finds it
            try:
                faults.checkpoint("writer.created")
            except BaseException as exc:  # noqa: BLE001 - an injected fault fails the file, which aborts the upload
                future.set_exception(exc)
                return
            future.set_result(str(upload_id))

        # Under the create lock, as _ensure_created: no upload is created once an abort has been taken.
        with self._create_lock:
            if self._aborted:
                return None
            started = start_create(self.bucket, self.key, created, content_type=self._content_type)
        return future if started else None

    def _send_part_polled(self, body: bytearray) -> Future[Part]:
        """A small file's only part on the polled sockets, sent from its create's answer (at once when answered
        already). A first attempt of either that fails in the store goes on through the pool
        (:meth:`_upload_part`, with the store's retries; it creates the upload if the create failed)."""
        create = self._create_future
        assert create is not None
        future: Future[Part] = Future()
        future.set_running_or_notify_cancel()
        crc = crc32_b64(body)
        bucket, key = self.bucket, self.key

        def through_pool() -> None:
            try:
                pooled = self._executor.submit(self._upload_part, 1, body)
            except BaseException as exc:  # noqa: BLE001 - the pool was shut down: the task is ending
                future.set_exception(exc)
                return
            pooled.add_done_callback(lambda f: _hand_on(f, future))

        def part_sent(etag: Any, error: BaseException | None) -> None:
            if error is not None:
                if isinstance(error, ChecksumMismatchError):
                    future.set_exception(error)  # as the pool's path: an error, not retried
                else:
                    through_pool()
                return
            try:
                faults.checkpoint("writer.part_uploaded", 1)
            except BaseException as exc:  # noqa: BLE001 - an injected fault fails the part, as on the pool
                future.set_exception(exc)
                return
            future.set_result(Part(number=1, etag=str(etag), size=len(body), crc32=crc))

        def send(answered: Future[str]) -> None:
            error = answered.exception()
            if error is not None:
                if isinstance(error, StoreError):
                    through_pool()  # the store's retries, and the create if it never happened
                else:
                    future.set_exception(error)
                return
            with self._create_lock:
                aborted = self._aborted
            try:
                if aborted:
                    raise ProtocolError(f"writer for s3://{bucket}/{key} was aborted")
                if not self._store.start_upload_part(bucket, key, answered.result(), 1, body, crc, part_sent):
                    through_pool()
            except BaseException as exc:  # noqa: BLE001 - reported through the future
                future.set_exception(exc)

        create.add_done_callback(send)
        return future

    def _upload_part(self, number: int, body: bytearray) -> Part:
        upload_id = self._ensure_created()
        crc = crc32_b64(body)
        etag = self._store.upload_part(self.bucket, self.key, upload_id, number, body, crc)
        faults.checkpoint("writer.part_uploaded", number)
        return Part(number=number, etag=etag, size=len(body), crc32=crc)

    def _raise_failed_part(self) -> None:
        for f in self._futures:
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        create = self._create_future
        if create is not None and not self._create_polled and create.done() and not create.cancelled() \
                and create.exception() is not None:
            raise create.exception()  # type: ignore[misc]

    # ------------------------------------------------------------ finishing
    def close(self) -> None:
        """Upload what is buffered and hand back the pending upload. Never completes.

        A foreground writer waits for every part; a background one returns once its last part is on its way
        (see :attr:`done`)."""
        if self.closed or self._closing:
            return
        if self._background:
            self._close_in_background()
            return
        try:
            self.finish()
        finally:
            super().close()

    def finish(self) -> PendingUpload:
        if self._background:
            self._close_in_background()
            wait_pumping(self._store, self._done)
            return self._done.result()
        with self._lock:
            if self._pending is not None:
                return self._pending
            if self._aborted:
                raise ProtocolError(f"writer for s3://{self.bucket}/{self.key} was aborted")
        try:
            # The last part may be smaller than 5 MiB; a zero-byte file is one empty part.
            if self._fill or self._part_number == 0:
                self._send_buffer(last=True)
            parts = [f.result() for f in self._futures]
        except BaseException:
            self.abort()
            raise
        return self._finished(parts)

    def _finished(self, parts: list[Part]) -> PendingUpload:
        assert self.upload_id is not None
        pending = PendingUpload(
            key=self.key, upload_id=self.upload_id, parts=tuple(sorted(parts, key=lambda p: p.number)),
            size=self._size, rows=self.rows, partition=self.partition,
        )
        with self._lock:
            self._pending = pending
            # Drop every buffer now: the parts' futures (and their callbacks, which name the buffers) go too.
            self._free, self._futures, self._part_sizes = [], [], []
            self._buffer, self._create_future = bytearray(), None
        self._shutdown_executor()
        if self._on_finish:
            self._on_finish(pending)
        # Only now: whoever waits on ``done`` (a task's commit) finds the upload recorded by on_finish.
        if not self._done.done():
            self._done.set_result(pending)
        return pending

    def _close_in_background(self) -> None:
        with self._lock:
            if self._closing or self._aborted:
                return
            self._closing = True
        try:
            with self._lock:
                self._free = []
            # What this writer holds while it closes: its last part and the parts still uploading.
            # Each closing file counts at least CLOSING_FILE_MIN_BYTES, so that tiny files cannot pile up
            # without bound either (each is an upload, a request and a thread's work item).
            held = self._fill + sum(n for f, n in zip(self._futures, self._part_sizes) if not f.done())
            if self._budget is not None:
                self._budget_held = self._budget.acquire(max(held, CLOSING_FILE_MIN_BYTES),
                                                         pump=getattr(self._store, "pump", None))
            if self._fill or self._part_number == 0:
                self._send_buffer(last=True)  # the last part may be below 5 MiB; a zero-byte file is one empty part
        except BaseException as exc:
            self._release_budget()
            self.abort()
            if not self._done.done():
                self._done.set_exception(exc)
            raise
        finally:
            super().close()
        futures = list(self._futures)
        remaining = [len(futures)]
        count_lock = threading.Lock()

        def one_done(_f: Future[Part]) -> None:
            with count_lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                self._settle(futures)

        for f in futures:
            f.add_done_callback(one_done)
        pump = getattr(self._store, "pump", None)
        if pump is not None:
            pump(0)  # this file's requests on their way, and earlier files' answers read: one poll a file

    def _settle(self, futures: list[Future[Part]]) -> None:
        """Runs once every part of a background writer is done (on the thread of the last one)."""
        try:
            failure = next((f.exception() for f in futures if f.cancelled() or f.exception() is not None), None)
        except BaseException as exc:  # noqa: BLE001 - a cancelled future: the writer was aborted
            failure = exc
        try:
            if failure is None and not self._aborted:
                self._finished([f.result() for f in futures])
                return
            if failure is None:
                failure = ProtocolError(f"writer for s3://{self.bucket}/{self.key} was aborted")
            self.abort()
        except BaseException as exc:  # noqa: BLE001 - reported through the future and on_failure
            failure = exc
        finally:
            # The futures and their callbacks form a cycle that names every part's buffer: break it now rather
            # than at the garbage collector's next pass, so that a closed file's memory goes at once.
            futures.clear()
            self._release_budget()
        if not self._done.done():
            self._done.set_exception(failure)
        if self._on_failure:
            self._on_failure(self, failure)

    def _release_budget(self) -> None:
        held, self._budget_held = self._budget_held, 0
        if held and self._budget is not None:
            self._budget.release(held)

    @property
    def done(self) -> Future[PendingUpload]:
        """Resolves to the pending upload once every part is uploaded (at once for a foreground writer's close)."""
        return self._done

    @property
    def closing(self) -> bool:
        """True while a background writer's last parts are still uploading."""
        return self._closing and not self._done.done()

    def abort(self) -> None:
        """Stop and abort the upload. Never raises over an error already propagating: failures are logged."""
        with self._create_lock:  # no upload is created after this
            with self._lock:
                if self._aborted:
                    return
                self._aborted = True
        create = self._create_future
        futures = list(self._futures) + ([create] if create is not None else [])
        for f in futures:
            f.cancel()
        for f in futures:
            try:
                wait_pumping(self._store, f)  # an unanswered create of a small file ends in a pump
                f.result()
            except BaseException:  # noqa: BLE001 - already failing; the abort below is what matters
                pass
        if self.upload_id is not None:
            try:
                self._store.abort_multipart_upload(self.bucket, self.key, self.upload_id)
            except Exception as exc:  # noqa: BLE001 - logged; the job commit or orphan cleanup aborts it later
                log.warning("could not abort upload %s of s3://%s/%s: %s", self.upload_id, self.bucket, self.key, exc)
        self._buffer = bytearray()
        self._fill = 0
        self._free = []
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
