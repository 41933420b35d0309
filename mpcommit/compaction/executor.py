"""Run one merge: a multipart upload whose parts are server-side copies and packed fetched bytes.

The upload is left uncompleted and handed back as a :class:`PendingUpload`, exactly like a task's file, so
that the job commit completes it (or aborts it) with everything else. The abort is registered the moment
the upload exists: any failure -- a source that changed, a part refused, a format error in the stream --
aborts it and raises, leaving the sources untouched.

Parts run in parallel on executors: server-side copies on one of their own (``copy_pool``, many at once: they
wait on the store and hold no bytes), fetches and uploads on the other (``pool``, bounded by the client's
memory and link), so that the small sources stream while the copies run instead of queueing behind them.
Pass :class:`~mpcommit.store.pool.SerialExecutor` to make failure tests deterministic.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import MpcommitError, NoSuchKeyError, PreconditionFailedError
from ..pool import lent_or_own
from ..protocol.records.manifest import Part, PendingUpload
from ..sizing import MAX_PARTS, crc32_b64
from ..store.s3 import S3Store
from .errors import MergeError, MergePlanError, SourceChangedError
from .parts import CopyPart, LiteralBytes, PartPlan, Range, Segment, Transform, UploadPart, pack_stream

log = logging.getLogger(__name__)

#: Fetches and uploads in flight at once (a compaction's bins share them). Small sources cost a round trip each,
#: so more of them in flight shorten the stream; the bytes held are bounded by ``PREFETCH``/``PREFETCH_BYTES`` and
#: ``STREAM_PARTS_IN_FLIGHT``, not by the thread count.
DEFAULT_MERGE_THREADS = 32
#: Server-side copies in flight at once (across the bins of a compaction when they share a pool). A copy runs
#: at the store's copy rate per request, so the copies of a merge take about as long as its largest part only
#: when they all run side by side. S3 takes 3,500 writes a second per prefix; Hadoop's S3A allows 500
#: connections per filesystem (``fs.s3a.connection.maximum``, HADOOP-19015).
DEFAULT_COPY_THREADS = 64
#: Small sources fetched ahead of the one being assembled: at most this many ranges, and at most
#: ``PREFETCH_BYTES`` of them (a range is always fetched when none is ahead).
PREFETCH = 32
PREFETCH_BYTES = 32 * 1024 * 1024
#: Stream parts uploading at once (bounds memory to about this many parts).
STREAM_PARTS_IN_FLIGHT = 4


class Assembler(Protocol):
    """Turns the stream's fetched pieces into the bytes of the merged object (a format's rules)."""

    def feed(self, piece: Range, data: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class AssemblerSpec(Protocol):
    """A small, picklable description of an assembler (it travels to Spark executors with the merge).
    ``transform`` is what it does: the stream ranges carrying it are fed to the assembler."""

    @property
    def transform(self) -> Transform: ...

    def new(self) -> Assembler: ...


@dataclass(frozen=True)
class MergeTask:
    """Everything needed to build one merged object. Picklable.

    ``rows``: the merged row count when known in advance (Parquet footers); otherwise the assembler's
    ``rows`` attribute after the stream, if it has one.
    """

    key: str
    plan: PartPlan
    assembler: AssemblerSpec | None = None
    partition: str = ""
    rows: int | None = None
    content_type: str | None = None
    sources: tuple[str, ...] = ()


@dataclass
class MergeStats:
    """Bytes that passed through the client, and what was copied server-side. Thread-safe."""

    fetched: int = 0
    uploaded: int = 0
    copied: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, fetched: int = 0, uploaded: int = 0, copied: int = 0) -> None:
        with self._lock:
            self.fetched += fetched
            self.uploaded += uploaded
            self.copied += copied

    @property
    def through_client(self) -> int:
        return self.fetched + self.uploaded

    def to_json(self) -> dict[str, int]:
        return {"fetched": self.fetched, "uploaded": self.uploaded, "copied": self.copied,
                "throughClient": self.through_client}


def fetch_range(store: S3Store, bucket: str, piece: Range, stats: MergeStats | None = None) -> bytes:
    """The bytes of ``piece``, only if its source still has the planned ETag."""
    if piece.length == 0:
        return b""
    src = piece.source
    try:
        data = store.get_object(bucket, src.key, byte_range=(piece.start, piece.end - 1), if_match=src.etag)
    except (PreconditionFailedError, NoSuchKeyError) as exc:
        raise SourceChangedError(
            f"s3://{bucket}/{src.key} changed or was deleted after the merge was planned; merge skipped, "
            "sources left as they are"
        ) from exc
    if len(data) != piece.length:
        raise SourceChangedError(
            f"s3://{bucket}/{src.key}: asked for bytes {piece.start}..{piece.end}, got {len(data)} bytes "
            "(the object is shorter than planned); merge skipped"
        )
    if stats is not None:
        stats.add(fetched=len(data))
    return data


def run_merge(
    store: S3Store,
    bucket: str,
    task: MergeTask,
    *,
    pool: Executor | None = None,
    stats: MergeStats | None = None,
    threads: int = DEFAULT_MERGE_THREADS,
    copy_pool: Executor | None = None,
    copy_threads: int = DEFAULT_COPY_THREADS,
) -> PendingUpload:
    """Build ``task.key`` as an uncompleted multipart upload and return it; abort it on any failure.

    ``pool`` runs fetches and uploads, ``copy_pool`` the server-side copies. Without ``pool``, both are made
    here (``threads`` and ``copy_threads`` threads); with ``pool`` alone, the copies run on it too."""
    stats = stats if stats is not None else MergeStats()
    copies = sum(1 for p in task.plan.parts if isinstance(p, CopyPart))
    with ExitStack() as owned:
        workers = owned.enter_context(lent_or_own(pool, threads, "mpcommit-merge"))
        if copy_pool is not None or pool is not None or copies == 0:
            copiers = copy_pool or workers
        else:
            copiers = owned.enter_context(lent_or_own(None, min(copy_threads, copies), "mpcommit-copy"))
        upload_id = store.create_multipart_upload(bucket, task.key, content_type=task.content_type)
        try:
            parts, rows = _build(store, bucket, task, upload_id, workers, copiers, stats)
        except BaseException as exc:
            _abort(store, bucket, task.key, upload_id)
            if isinstance(exc, MpcommitError) and not isinstance(exc, MergeError):
                raise MergeError(f"merging into s3://{bucket}/{task.key} failed: {exc}") from exc
            raise
    return PendingUpload(
        key=task.key, upload_id=upload_id, parts=tuple(parts), size=sum(p.size for p in parts),
        rows=task.rows if task.rows is not None else rows, partition=task.partition,
    )


def _abort(store: S3Store, bucket: str, key: str, upload_id: str) -> None:
    try:
        store.abort_multipart_upload(bucket, key, upload_id)
    except Exception as exc:  # noqa: BLE001 - never raise over the error that got us here
        log.warning("could not abort merge upload %s of s3://%s/%s: %s (the job's cleanup aborts it by job id)",
                    upload_id, bucket, key, exc)


def _build(store: S3Store, bucket: str, task: MergeTask, upload_id: str, workers: Executor, copiers: Executor,
           stats: MergeStats) -> tuple[list[Part], int | None]:
    plan = task.plan
    futures: list[Future[Part]] = [
        (copiers if isinstance(part, CopyPart) else workers).submit(
            _run_fixed_part, store, bucket, task.key, upload_id, part, stats)
        for part in plan.parts
    ]
    uploader = _StreamUploader(store, bucket, task.key, upload_id, workers, stats,
                               first_number=len(plan.parts) + 1, part_size=plan.upload_part_size)
    assembler = task.assembler.new() if task.assembler is not None else None
    transform = task.assembler.transform if task.assembler is not None else None
    try:
        for chunk in _assembled(store, bucket, plan.stream, assembler, transform, workers, stats):
            uploader.write(chunk)
        uploader.close()
    finally:
        # Wait for every part in flight, even when failing: an abort must come after the parts it cancels
        # (a part that lands after the abort would be billed until the next cleanup).
        parts = [_result(f) for f in futures + uploader.futures]
    errors = [p for p in parts if isinstance(p, BaseException)]
    if errors:
        raise errors[0]
    done: list[Part] = sorted(parts, key=lambda p: p.number)  # type: ignore[arg-type]
    if not done:
        # Nothing at all (every source empty): a zero-byte object is one empty part.
        done = [_upload(store, bucket, task.key, upload_id, 1, b"", stats)]
    if len(done) > MAX_PARTS:
        raise MergePlanError(f"s3://{bucket}/{task.key} would need {len(done)} parts, more than {MAX_PARTS}")
    return done, getattr(assembler, "rows", None)


def _result(future: Future) -> Part | BaseException:
    try:
        return future.result()
    except BaseException as exc:  # noqa: BLE001 - collected, the first one is raised
        return exc


def _run_fixed_part(store: S3Store, bucket: str, key: str, upload_id: str, part: CopyPart | UploadPart,
                    stats: MergeStats) -> Part:
    if isinstance(part, CopyPart):
        src = part.source
        try:
            done = store.upload_part_copy(bucket, key, upload_id, part.number, source_key=src.key,
                                          source_etag=src.etag, byte_range=(part.start, part.end - 1))
        except (PreconditionFailedError, NoSuchKeyError) as exc:
            raise SourceChangedError(
                f"s3://{bucket}/{src.key} changed or was deleted after the merge was planned; merge skipped, "
                "sources left as they are"
            ) from exc
        stats.add(copied=part.size)
        return Part(part.number, done.etag, part.size, done.crc32)
    body = b"".join(
        fetch_range(store, bucket, piece, stats) if isinstance(piece, Range) else piece.data
        for piece in _coalesced(part.pieces)
    )
    return _upload(store, bucket, key, upload_id, part.number, body, stats)


def _coalesced(pieces: tuple[Segment, ...]) -> Iterator[Segment]:
    """Adjacent ranges of one source become one request."""
    pending: Range | None = None
    for piece in pieces:
        if isinstance(piece, Range) and pending is not None and piece.source == pending.source \
                and piece.start == pending.end and piece.transform == pending.transform:
            pending = Range(pending.source, pending.start, piece.end, pending.transform)
            continue
        if pending is not None:
            yield pending
            pending = None
        if isinstance(piece, Range):
            pending = piece
        else:
            yield piece
    if pending is not None:
        yield pending


def _upload(store: S3Store, bucket: str, key: str, upload_id: str, number: int, body: bytes,
            stats: MergeStats) -> Part:
    crc = crc32_b64(body)
    etag = store.upload_part(bucket, key, upload_id, number, body, crc)
    stats.add(uploaded=len(body))
    return Part(number, etag, len(body), crc)


def _assembled(store: S3Store, bucket: str, stream: tuple[Segment, ...], assembler: Assembler | None,
               transform: Transform | None, workers: Executor, stats: MergeStats) -> Iterator[bytes]:
    """The stream's bytes, in order: ranges fetched ahead in parallel; those carrying the assembler's
    ``transform`` passed through it, the others used as they are."""
    ahead: deque[tuple[Segment, Future[bytes] | None]] = deque()
    items = iter(stream)
    held = 0
    waiting: Segment | None = None

    def refill() -> None:
        nonlocal held, waiting
        while len(ahead) < PREFETCH:
            piece = waiting if waiting is not None else next(items, None)
            waiting = None
            if piece is None:
                return
            if isinstance(piece, Range):
                if ahead and held + piece.length > PREFETCH_BYTES:
                    waiting = piece  # over the byte bound: fetched once what is ahead has been used
                    return
                held += piece.length
                ahead.append((piece, workers.submit(fetch_range, store, bucket, piece, stats)))
            else:
                ahead.append((piece, None))

    try:
        refill()
        while ahead:
            piece, future = ahead.popleft()
            if isinstance(piece, Range):
                held -= piece.length
            refill()
            if isinstance(piece, LiteralBytes):
                yield piece.data
                continue
            assert future is not None and isinstance(piece, Range)
            if piece.transform is None:
                yield future.result()
            elif piece.transform is transform and assembler is not None:
                yield assembler.feed(piece, future.result())
            else:
                raise MergePlanError(f"a {piece.transform.value} range of {piece.source.key!r} in a merge whose "
                                     f"assembler does {transform.value if transform else 'nothing'}")
        if assembler is not None:
            yield assembler.finish()
    finally:
        for _piece, future in ahead:
            if future is not None:
                future.cancel()


class _StreamUploader:
    """Packs pushed bytes into parts of ``part_size`` (the last one smaller) and uploads them in parallel,
    with at most ``STREAM_PARTS_IN_FLIGHT`` bodies held at once."""

    def __init__(self, store: S3Store, bucket: str, key: str, upload_id: str, workers: Executor, stats: MergeStats,
                 *, first_number: int, part_size: int):
        self._store, self._bucket, self._key, self._upload_id = store, bucket, key, upload_id
        self._workers = workers
        self._stats = stats
        self._number = first_number
        self._part_size = part_size
        self._buffer = bytearray()
        self._futures: list[Future[Part]] = []
        self._slots = threading.BoundedSemaphore(STREAM_PARTS_IN_FLIGHT)

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._buffer += data
        if len(self._buffer) >= self._part_size:
            bodies = list(pack_stream([bytes(self._buffer)], self._part_size))
            # The last body may be short: keep it buffered, more bytes may follow.
            if len(bodies[-1]) < self._part_size:
                self._buffer = bytearray(bodies.pop())
            else:
                self._buffer = bytearray()
            for body in bodies:
                self._send(body)

    def _send(self, body: bytes) -> None:
        number = self._number
        self._number += 1
        if number > MAX_PARTS:
            raise MergePlanError(f"s3://{self._bucket}/{self._key} needs more than {MAX_PARTS} parts")
        self._slots.acquire()
        try:
            future = self._workers.submit(_upload, self._store, self._bucket, self._key, self._upload_id, number,
                                          body, self._stats)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _f: self._slots.release())
        self._futures.append(future)
        for f in self._futures:  # stop feeding a merge that already failed
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]

    def close(self) -> None:
        if self._buffer:
            self._send(bytes(self._buffer))
            self._buffer = bytearray()

    @property
    def futures(self) -> list[Future[Part]]:
        return list(self._futures)
