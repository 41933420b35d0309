"""The driver's job commit, abort and the finishing of an interrupted commit.

A commit goes through three outcomes, never two:

* before the journal is written, a failure means NOT COMMITTED: nothing was made visible and the job can be
  aborted safely (:class:`~mpcommit.errors.CommitFailedError`);
* once the journal exists, a failure means UNKNOWN: some files may be visible, so nothing may be cleaned up;
  ``recover`` finishes the commit from the journal (:class:`~mpcommit.errors.CommitStateUnknownError`);
* after ``_SUCCESS`` is written, COMMITTED.

Every step after the journal is idempotent, which is what makes ``recover`` equal to an uninterrupted commit
(invariant I4): completing an already completed upload is resolved by checking the object's multipart ETag,
deletes skip what is gone, and ``_SUCCESS`` is rewritten.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import (
    CommitFailedError,
    CommitStateUnknownError,
    DuplicateTaskResultError,
    JobStateError,
    ManifestError,
    MpcommitError,
    NoSuchKeyError,
    NoSuchUploadError,
    ProtocolError,
)
from ..modes import CommitMode, CommitOutcome, PartitionOverwrite, WriteMode
from ..options import S3Options
from ..store.pool import ProgressHook, run_bounded
from ..store.s3 import DELETE_BATCH, CompletedPart, S3Store, UploadInfo
from . import faults
from .layout import Destination, JobPaths, is_hidden_key, job_id_of_hidden_key, job_id_of_key
from .records.job import CommitJournal, DeleteEntry, JobDescriptor, MergedFile
from .records.manifest import PendingUpload, StagedFile, TaskManifest, TaskResult
from .records.success import PartitionStats, SuccessData

log = logging.getLogger(__name__)

DEFAULT_COMMIT_THREADS = 32
#: Completes queued per commit thread: a deep queue keeps the threads busy while the driver reads the next
#: manifest, and still bounds what the driver holds.
COMPLETES_QUEUED_PER_THREAD = 4
#: Referenced manifests read ahead, in parallel, while the completes of earlier ones run: at most this many at
#: once, and only as many as hold about MANIFEST_PARTS_AHEAD parts (see _stream_manifests) -- never all.
MANIFESTS_AHEAD = 16
MANIFEST_PARTS_AHEAD = 50_000
#: Uploads handed to a commit process at a time (see JobCommitter.processes).
PROCESS_CHUNK = 256


class CatalogSummary(Protocol):
    """What a report needs of a catalog registration's result (a :class:`mpcommit.catalog.CatalogResult`):
    the catalog sits above the protocol, which knows it by this alone."""

    def summary(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class CommitReport:
    """What a job commit made visible, and how long each phase took (seconds)."""

    job_id: str
    uri: str
    mode: CommitMode
    outcome: CommitOutcome
    filenames: tuple[str, ...] = ()
    bytes: int = 0
    rows: int | None = 0
    partitions: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    aborted_uploads: int = 0
    deleted_objects: int = 0
    ignored: bool = False
    #: Per partition ("" for the root): files, bytes and rows this commit made visible (catalog statistics).
    partition_stats: Mapping[str, PartitionStats] = field(default_factory=dict)
    #: What a catalog registration after the commit did (:func:`mpcommit.catalog.register_commit`), else None.
    catalog: CatalogSummary | None = None

    @property
    def files(self) -> int:
        return len(self.filenames)

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "jobId": self.job_id, "uri": self.uri, "mode": self.mode.value, "outcome": self.outcome.value,
            "files": self.files, "bytes": self.bytes, "rows": self.rows, "partitions": len(self.partitions),
            "abortedUploads": self.aborted_uploads, "deletedObjects": self.deleted_objects,
            "ignored": self.ignored, "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }
        if self.catalog is not None:
            out["catalog"] = self.catalog.summary()
        return out


@dataclass(frozen=True)
class AbortReport:
    job_id: str
    aborted_uploads: int
    deleted_records: int


def _noop(_step: str, _done: int, _total: int | None) -> None:
    pass


class JobCommitter:
    """Commit, abort and finish one job of one destination. Holds no state between calls but its settings."""

    def __init__(
        self, store: S3Store, destination: Destination, job_id: str, *,
        threads: int = DEFAULT_COMMIT_THREADS, progress: ProgressHook | None = None, processes: int = 1,
    ):
        self.store = store
        #: Processes that complete uploads (each with its own S3 client and ``threads // processes`` threads):
        #: one Python process tops out at one core's worth of requests. 1 completes in this process.
        self.processes = max(1, processes)
        self.destination = destination
        self.job_id = job_id
        self.paths = JobPaths(destination, job_id)
        self.threads = max(1, threads)
        self.progress = progress or _noop
        self._completed = 0
        self._completed_lock = threading.Lock()
        #: A compaction's directories left as an overwrite left them (see _check_sources).
        self._broken: set[str] | None = None

    # ------------------------------------------------------------ commit
    def commit(self, descriptor: JobDescriptor, results: Sequence[TaskResult], *, ignored: bool = False,
               extra_timings: dict[str, float] | None = None, delete: Sequence[DeleteEntry] = (),
               merged: Sequence[MergedFile] = ()) -> CommitReport:
        """``delete`` names objects (pinned by ETag) to remove once every new file is complete: the sources
        of a compaction. ``merged`` names files merged from the winners' staged files (a commit-time merge):
        they are completed instead of moving those staged files in."""
        t0 = time.monotonic()
        timings: dict[str, float] = dict(extra_timings or {})
        by_task = self._check_results(results)
        if ignored:
            aborted, deleted = self.discard_all()
            mode = CommitMode.of(descriptor.mode, descriptor.partition_overwrite)
            return CommitReport(self.job_id, self.destination.uri, mode, CommitOutcome.NOT_COMMITTED, ignored=True,
                                aborted_uploads=aborted)
        # Validate every manifest before anything is completed (I7): a bad one must stop the commit while its
        # outcome is still "not committed". Referenced (large) manifests are read here once and again when
        # completing, so that the driver never holds all of them at once.
        winner_keys: set[str] = set()
        staged_keys: set[str] = set()
        try:
            for r in by_task.values():
                if r.manifest is not None:
                    r.manifest.validate(destination=self.destination, job_id=self.job_id, where=r.manifest_key)
                    if merged:  # only then are the keys worth holding
                        winner_keys.update(u.key for u in r.manifest.uploads)
                        staged_keys.update(f.key for f in r.manifest.staged)
            # Referenced manifests: read ahead in parallel, validated as they are read, each dropped at once.
            for manifest in self._stream_manifests([r.manifest_key for r in by_task.values() if r.manifest is None], {}):
                if merged:
                    winner_keys.update(u.key for u in manifest.uploads)
                    staged_keys.update(f.key for f in manifest.staged)
                del manifest  # not held while the next is read, nor through the completes
        except ManifestError:
            raise
        except MpcommitError as exc:
            raise CommitFailedError(f"job {self.job_id} was not committed, nothing was made visible: {exc}") from exc
        _check_merged(merged, staged_keys=staged_keys, keys=winner_keys | staged_keys, job_id=self.job_id)
        timings["validate"] = time.monotonic() - t0

        partitions = sorted({p for r in by_task.values() for p in r.partitions})
        journal = CommitJournal(
            job_id=self.job_id, bucket=self.destination.bucket, prefix=self.destination.prefix,
            mode=descriptor.mode, partition_overwrite=descriptor.partition_overwrite,
            started_ms=int(time.time() * 1000),
            winners=tuple(by_task[t].manifest_key for t in sorted(by_task)),
            replace=_replace_scope(descriptor.mode, descriptor.partition_overwrite, partitions),
            purpose=descriptor.purpose,
            delete=tuple(delete),
            merged=tuple(merged),
        )
        try:
            journal.validate_merged()
        except ManifestError as exc:
            raise ProtocolError(f"job {self.job_id} was not committed: {exc}") from exc
        if journal.replace:
            t = time.monotonic()
            self._check_scope_listable(journal.replace)
            timings["check_scope"] = time.monotonic() - t
        try:
            self.store.put_object(self.destination.bucket, self.paths.journal, journal.to_bytes())
        except MpcommitError as exc:
            # The journal may or may not have been written; either way no upload was completed, so a recover
            # would only complete exactly what this commit would have. Say so rather than guess.
            raise CommitStateUnknownError(
                f"job {self.job_id}: writing the commit journal failed ({exc}); nothing was completed. "
                f"Run `mpcommit jobs recover {self.destination.uri} --job {self.job_id}` or commit again.",
                job_id=self.job_id, destination=self.destination.uri,
            ) from exc
        self.progress("journal", 1, 1)
        inline = {r.manifest_key: r.manifest for r in by_task.values() if r.manifest is not None}
        try:
            faults.checkpoint("commit.after_journal")
            return self.finish(journal, inline=inline, timings=timings, started=t0)
        except CommitStateUnknownError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure after the journal leaves the outcome unknown
            raise CommitStateUnknownError(
                f"job {self.job_id}: the commit failed after its journal was written ({exc}). Some files may be "
                f"visible; do not clean up. Run `mpcommit jobs recover {self.destination.uri} --job {self.job_id}`.",
                job_id=self.job_id, destination=self.destination.uri,
            ) from exc

    def _check_results(self, results: Sequence[TaskResult]) -> dict[int, TaskResult]:
        by_task: dict[int, TaskResult] = {}
        for r in results:
            if not isinstance(r, TaskResult):
                raise ProtocolError(f"job.commit takes TaskResult values from task.commit(), got {type(r).__name__}")
            if r.job_id != self.job_id:
                raise ManifestError(f"a task result of job {r.job_id} was passed to the commit of job {self.job_id}; refused")
            if not r.manifest_key.startswith(self.paths.tasks):
                raise ManifestError(f"task result names manifest {r.manifest_key!r} outside job {self.job_id}; refused")
            if r.task_id in by_task:
                raise DuplicateTaskResultError(
                    f"two results for task {r.task_id} (attempts {by_task[r.task_id].attempt} and {r.attempt}); pass "
                    "exactly one result per task id. Nothing was committed."
                )
            by_task[r.task_id] = r
        return by_task

    # ------------------------------------------------------------ finish (commit and recover)
    def finish(self, journal: CommitJournal, *, inline: dict[str, TaskManifest | None] | None = None,
               timings: dict[str, float] | None = None, started: float | None = None) -> CommitReport:
        """Carry out a journal: complete winners, replace old data, abort leftovers, write _SUCCESS, clean up."""
        t0 = started if started is not None else time.monotonic()
        timings = dict(timings or {})
        inline = inline or {}
        journal_info = self.store.head_object(self.destination.bucket, self.paths.journal)
        if journal_info is None:
            raise CommitStateUnknownError(
                f"job {self.job_id}: its commit journal vanished while committing; another process may have "
                "finished or cleaned it. Check `mpcommit show` before acting.",
                job_id=self.job_id, destination=self.destination.uri,
            )
        cutoff = journal_info.last_modified

        t = time.monotonic()
        # What the commit keeps per file is only what _SUCCESS and the report need (the key, its partition's
        # counts) and the upload id: manifests are streamed, read a few at a time, and their parts dropped as
        # soon as their files are complete (driver memory flat in parts, linear in files at ~0.3 KB each).
        winners: set[str] = set()  # upload ids completed: never aborted as leftovers
        filenames: list[str] = []
        total_bytes = 0
        rows_total: int | None = 0
        partitions: set[str] = set()
        # Per partition: [files, bytes, rows or None] -- the catalog's statistics, from the commit itself.
        per_partition: dict[str, list] = {}
        broken_placed: list[str] = []

        def manifests() -> Iterator[TaskManifest]:
            return self._stream_manifests(journal.winners, inline)

        merged_sources = {key for m in journal.merged for key in m.sources}

        def uploads() -> Iterator[PendingUpload | StagedFile]:
            for m in manifests():
                yield from m.uploads
                # Staged files merged at commit time are not moved in: their merged file is completed instead.
                yield from (f for f in m.staged if f.key not in merged_sources)
            for merged_file in journal.merged:
                yield merged_file.upload

        def account(item: PendingUpload | StagedFile) -> None:
            nonlocal total_bytes, rows_total
            if self._broken and _directory(item.key) in self._broken:
                broken_placed.append(item.key)  # completed by an earlier run: _undo_broken deletes it
                return
            if isinstance(item, PendingUpload):
                winners.add(item.upload_id)
            filenames.append(item.key)
            total_bytes += item.size
            rows_total = None if rows_total is None or item.rows is None else rows_total + item.rows
            partitions.add(item.partition)
            stats = per_partition.get(item.partition)
            if stats is None:
                stats = per_partition[item.partition] = [0, 0, 0]
            stats[0] += 1
            stats[1] += item.size
            stats[2] = None if stats[2] is None or item.rows is None else stats[2] + item.rows
            self.progress("complete", len(filenames), None)

        sources = self._check_sources(journal, manifests) if journal.delete else None
        # An overwrite's first look at the scope it replaces only reads (see _replace_old): it runs beside the
        # completes instead of after them, one listing pass fewer on the commit's critical path.
        lookout = ThreadPoolExecutor(1, thread_name_prefix="mpcommit-replace-scope")
        first_look = lookout.submit(self._first_look, journal, cutoff) if journal.replace else None
        try:
            if self.processes > 1 and sources is None and not self._broken:
                self._complete_in_processes(uploads(), account)
            else:
                self._complete_in_threads(uploads(), account)
        except BaseException:
            lookout.shutdown(wait=False, cancel_futures=True)
            raise
        lookout.shutdown(wait=False)  # the look goes on; its result is waited for below
        if sources is not None:
            self._undo_broken(broken_placed)
        timings["complete"] = time.monotonic() - t
        self.progress("completed", len(filenames), len(filenames))

        t = time.monotonic()
        deleted = self._replace_old(journal, cutoff, sources, first_look=first_look.result() if first_look else None)
        timings["replace"] = time.monotonic() - t

        t = time.monotonic()
        aborted = self._abort_leftovers(journal, winners)
        timings["abort_leftovers"] = time.monotonic() - t

        t = time.monotonic()
        timings["total"] = time.monotonic() - t0
        filenames.sort()
        winners.clear()  # not needed past the leftovers' abort: freed before _SUCCESS is built
        mode = CommitMode.of(journal.mode, journal.partition_overwrite)
        success = SuccessData(
            job_id=self.job_id, mode=mode.value, filenames=tuple(filenames), bytes=total_bytes, rows=rows_total,
            partitions=tuple(sorted(p for p in partitions if p)), timings={k: round(v, 4) for k, v in timings.items()},
            hostname=socket.gethostname(), purpose=journal.purpose,
            partition_stats={p: PartitionStats(n, b, r) for p, (n, b, r) in sorted(per_partition.items())},
            merged_from=len(journal.delete) if journal.delete else None,
        )
        faults.checkpoint("commit.before_success")
        self.progress("success", 0, 1)
        self.store.put_object(self.destination.bucket, self.destination.success_key, success.to_bytes())
        self.progress("success", 1, 1)
        faults.checkpoint("commit.after_success")
        timings["success"] = time.monotonic() - t

        t = time.monotonic()
        self._remove_records(journal_first=True)
        timings["cleanup"] = time.monotonic() - t
        timings["total"] = time.monotonic() - t0
        return CommitReport(
            job_id=self.job_id, uri=self.destination.uri, mode=mode, outcome=CommitOutcome.COMMITTED,
            filenames=success.filenames, bytes=success.bytes, rows=success.rows, partitions=success.partitions,
            timings=timings, aborted_uploads=aborted, deleted_objects=deleted,
            partition_stats=dict(success.partition_stats or {}),
        )

    # ------------------------------------------------------------ compaction: sources replaced by merged files
    # A compaction's journal names the sources it deletes (pinned by ETag) once its merged files -- the same rows --
    # are complete. An overwrite may remove some of them first, while the compaction runs or waits for `recover`:
    # then a merged file of that directory holds rows the overwrite removed. Completing it would bring them back,
    # and a merged file the overwrite deleted must not stop the recovery for ever (its directory's sources would
    # stay next to the other merged files: every row twice). Such a directory is left as the overwrite left it:
    # its merged files are aborted or deleted, its remaining sources kept.
    def _check_sources(self, journal: CommitJournal, manifests: Callable[[], Iterator[TaskManifest]]) -> list[str]:
        """The sources still as merged (to delete once the merged files are complete); sets the directories
        whose sources someone else removed."""
        bucket = self.destination.bucket
        kept, gone = [], set()
        # One HEAD per source, side by side (one after another they cost a round trip each).
        found: dict[str, str | None] = {}
        run_bounded(lambda e: self.store.head_object(bucket, e.key), journal.delete, threads=self.threads,
                    on_result=lambda e, info: found.__setitem__(e.key, info.etag if info is not None else None))
        for entry in journal.delete:
            if found.get(entry.key) == entry.etag:
                kept.append(entry.key)
            else:
                gone.add(_directory(entry.key))
        if gone:
            # The compaction deletes its sources only once every merged file is complete: if they all are, the
            # missing sources are its own deletes, interrupted.
            outputs = [u for m in manifests() for u in m.uploads]
            if all((info := self.store.head_object(bucket, u.key)) is not None and info.size == u.size
                   and _etag_matches(info.etag, u) for u in outputs):
                gone = set()
        self._broken = gone
        return kept

    def _undo_broken(self, placed_keys: list[str]) -> None:
        """Delete the merged files of broken directories that were completed before (``placed_keys``)."""
        # (A merged file whose sources are all there but which is neither pending nor visible is not taken for
        # one an overwrite deleted: it may be a complete of the interrupted run still on its way. The commit
        # fails as for any job, and a later recover finishes it.)
        if placed_keys:
            self.store.delete_objects(self.destination.bucket, placed_keys)

    def _stream_manifests(self, keys: Sequence[str], inline: Mapping[str, TaskManifest | None]) -> Iterator[TaskManifest]:
        """The manifests named by ``keys``, in order: inline ones as they are, the others read ahead in parallel,
        each dropped by the caller once its files are handed on -- never all held.

        How many are read ahead follows their size: MANIFEST_PARTS_AHEAD divided by the largest manifest's
        parts seen so far, between 1 and MANIFESTS_AHEAD (2 before the first is read). Small manifests are thus
        read many at a time (a GET each would otherwise cost a round trip per task), large ones one ahead.
        """
        ahead: deque[tuple[Future[tuple[TaskManifest, int]] | None, TaskManifest | None]] = deque()
        pending = iter(keys)
        largest = 0

        def read(key: str) -> tuple[TaskManifest, int]:
            manifest = self._read_manifest(key)
            return manifest, manifest.part_count

        def window() -> int:
            if largest == 0:
                return 2
            return max(1, min(MANIFESTS_AHEAD, MANIFEST_PARTS_AHEAD // largest))

        with ThreadPoolExecutor(MANIFESTS_AHEAD, thread_name_prefix="mpcommit-manifest") as pool:
            def fill() -> None:
                while len(ahead) < window():
                    key = next(pending, None)
                    if key is None:
                        return
                    m = inline.get(key)
                    ahead.append((None, m) if m is not None else (pool.submit(read, key), None))

            fill()
            try:
                while ahead:
                    future, manifest = ahead.popleft()
                    if future is not None:
                        manifest, parts = future.result()
                        largest = max(largest, parts)
                    del future
                    fill()
                    assert manifest is not None
                    yield manifest
                    del manifest
            finally:
                for f, _m in ahead:
                    if f is not None:
                        f.cancel()

    def _complete_in_threads(self, items: Iterator[PendingUpload | StagedFile],
                             on_done: Callable[[PendingUpload | StagedFile], None]) -> None:
        """Place every item on ``self.threads`` threads, at most COMPLETES_QUEUED_PER_THREAD per thread queued;
        ``on_done`` runs on this thread. The first failure stops submitting and is raised once the calls in
        flight have ended. (One queue of finished items, not a wait() over every future per completion: that
        costs O(window) per file.)"""
        finished: queue.SimpleQueue[tuple[PendingUpload | StagedFile, BaseException | None]] = queue.SimpleQueue()

        def run(item: PendingUpload | StagedFile) -> None:
            try:
                self._place(item)
            except BaseException as exc:  # noqa: BLE001 - handed to the driver's thread
                finished.put((item, exc))
            else:
                finished.put((item, None))

        self._drive(items, run, finished, on_done, window=COMPLETES_QUEUED_PER_THREAD * self.threads,
                    pool=ThreadPoolExecutor(self.threads, thread_name_prefix="mpcommit-complete"))

    def _drive(self, items: Iterator, submit_one: Callable[[object], None], finished: "queue.SimpleQueue",
               on_done: Callable[[object], None], *, window: int, pool: ThreadPoolExecutor) -> None:
        """Submit ``submit_one(item)`` for each item, at most ``window`` in flight; each call puts (item, error)
        into ``finished``; ``on_done(item)`` runs here. The first failure stops submitting and is raised once
        the calls in flight have ended."""
        error: BaseException | None = None
        inflight = 0
        exhausted = False
        try:
            with pool:
                while True:
                    while not exhausted and error is None and inflight < window:
                        try:
                            item = next(items)
                        except StopIteration:
                            exhausted = True
                            break
                        except BaseException as exc:  # noqa: BLE001 - e.g. a manifest that could not be read
                            error = exc
                            break
                        pool.submit(submit_one, item)
                        inflight += 1
                    if inflight == 0:
                        break
                    item, exc = finished.get()
                    inflight -= 1
                    if exc is not None:
                        error = error or exc
                    elif error is None:
                        try:
                            on_done(item)
                        except BaseException as exc2:  # noqa: BLE001
                            error = exc2
        finally:
            if isinstance(items, Iterator) and hasattr(items, "close"):
                items.close()  # type: ignore[attr-defined]
        if error is not None:
            raise error

    def _complete_in_processes(self, items: Iterator[PendingUpload | StagedFile],
                               on_done: Callable[[PendingUpload | StagedFile], None]) -> None:
        """Completes spread over ``self.processes`` worker processes (spawned, each with its own S3 client and
        ``threads / processes`` threads), fed chunks of PROCESS_CHUNK uploads; staged files are moved here.
        The journal is written before; the fault checkpoints and progress run here as chunks come back."""
        import multiprocessing

        finished: queue.SimpleQueue = queue.SimpleQueue()
        per_process = max(1, self.threads // self.processes)
        context = multiprocessing.get_context("spawn")
        procs = ProcessPoolExecutor(self.processes, mp_context=context, initializer=_worker_init,
                                    initargs=(self.store.options, self.destination.bucket, self.destination.prefix,
                                              self.job_id, per_process))
        local = ThreadPoolExecutor(2 * self.processes + 2, thread_name_prefix="mpcommit-complete")

        def chunks() -> Iterator[list[PendingUpload | StagedFile]]:
            chunk: list[PendingUpload | StagedFile] = []
            for item in items:
                chunk.append(item)
                if len(chunk) >= PROCESS_CHUNK:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk

        def run(chunk: list[PendingUpload | StagedFile]) -> None:
            try:
                remote = [i for i in chunk if isinstance(i, PendingUpload)]
                if remote:
                    try:
                        procs.submit(_worker_complete, remote).result()
                    except _WorkerFailure as exc:
                        if exc.kind == CommitStateUnknownError.__name__:
                            raise CommitStateUnknownError(exc.message, job_id=self.job_id,
                                                          destination=self.destination.uri) from None
                        raise MpcommitError(f"a commit worker process failed: {exc.kind}: {exc.message}") from None
                for i in chunk:
                    if isinstance(i, StagedFile):
                        self._move_staged(i)
            except BaseException as exc:  # noqa: BLE001 - handed to the driver's thread
                finished.put((chunk, exc))
            else:
                finished.put((chunk, None))

        def done(chunk: list[PendingUpload | StagedFile]) -> None:
            for item in chunk:
                with self._completed_lock:
                    self._completed += 1
                    n = self._completed
                faults.checkpoint("commit.after_complete", n)
                on_done(item)

        try:
            # Two chunks per process in flight: one being completed, one waiting in its queue.
            self._drive(chunks(), run, finished, done, window=2 * self.processes, pool=local)
        finally:
            procs.shutdown(wait=True)

    def _place(self, item: PendingUpload | StagedFile) -> None:
        if self._broken and isinstance(item, PendingUpload) and _directory(item.key) in self._broken:
            # A merged file whose sources someone else removed: never complete it (see _check_sources); if it was
            # completed before, _undo_broken deletes it.
            self.store.abort_multipart_upload(self.destination.bucket, item.key, item.upload_id)
            return
        if isinstance(item, StagedFile):
            self._move_staged(item)
        else:
            self._complete(item)
        with self._completed_lock:
            self._completed += 1
            n = self._completed
        faults.checkpoint("commit.after_complete", n)

    def _complete(self, upload: PendingUpload) -> None:
        bucket = self.destination.bucket
        parts = [CompletedPart(p.number, p.etag, p.crc32) for p in upload.parts]
        try:
            self.store.complete_multipart_upload(bucket, upload.key, upload.upload_id, parts)
            return
        except NoSuchUploadError as exc:
            # Completed already (a retry, or a recover after a crash) -- or aborted by someone else. Only the
            # object itself can tell: same size and the multipart ETag of exactly these parts means ours.
            info = self.store.head_object(bucket, upload.key)
            if info is not None and info.size == upload.size and _etag_matches(info.etag, upload):
                return
            raise CommitStateUnknownError(
                f"job {self.job_id}: upload {upload.upload_id} of s3://{bucket}/{upload.key} is no longer pending and "
                "the object is not the one it would have made; the upload was aborted by something else "
                "(an orphan cleanup or lifecycle rule?) and its data is lost. Re-run the job.",
                job_id=self.job_id, destination=self.destination.uri,
            ) from exc

    def _move_staged(self, staged: StagedFile) -> None:
        """Without a merge, a staged small file is copied to its final key (server-side, one request)."""
        bucket = self.destination.bucket
        try:
            self.store.copy_object(bucket, staged.key, source_key=staged.staged_key, source_etag=staged.etag)
        except MpcommitError:
            info = self.store.head_object(bucket, staged.key)
            if info is not None and info.size == staged.size:
                return  # copied by an earlier, interrupted run
            raise

    def _scope_prefix(self, rel: str) -> str:
        return f"{self.destination.root}{rel}/" if rel else self.destination.root

    def _check_scope_listable(self, replace: Sequence[str]) -> None:
        """Before the journal: list the scope an overwrite replaces, so that a server whose listing cannot be
        proven complete stops the commit while nothing is visible yet (I8), not after the new files are. The
        replace step lists again after the completes, which is what decides; this listing only proves it can."""
        bucket = self.destination.bucket
        try:
            run_bounded(lambda rel: self.store.list_objects(bucket, self._scope_prefix(rel)), replace,
                        threads=self.threads)
        except MpcommitError as exc:
            raise CommitFailedError(f"job {self.job_id} was not committed, nothing was made visible and no old "
                                    f"data was deleted: {exc}") from exc

    def _first_look(self, journal: CommitJournal, cutoff: object) -> tuple[set[str | None], set[str]]:
        """The owners of the older objects in the replaced scope, then the jobs committing: the first listing
        and the journal check of :meth:`_replace_old`, which may run while this job's files are completed --
        what makes the deletion safe is only their order: this listing, then the journals, then the second
        listing, all before anything is deleted. This job's own files are never in it (skipped by owner)."""
        first, _ = self._older_in_scope(journal, cutoff)
        if not first:
            return set(), set()  # nothing to replace: whose commit is in flight does not matter
        return {owner for owner, _key in first}, self._committing_writes()

    def _replace_old(self, journal: CommitJournal, cutoff: object, sources: list[str] | None = None, *,
                     first_look: tuple[set[str | None], set[str]] | None = None) -> int:
        """Overwrite: delete older objects in the replaced scope, only after every new file is complete (I5).
        Compaction: delete the ``sources`` still as merged, except in directories left broken.
        ``first_look``: :meth:`_first_look`'s answer if it was taken already (beside the completes)."""
        if not journal.replace and not journal.delete:
            return 0
        bucket = self.destination.bucket
        doomed: list[str] = []
        if journal.replace:
            # A write job whose commit is in flight -- running, or interrupted and waiting for `recover` -- has
            # some files visible and the rest still pending; deleting the visible ones would leave it partial,
            # and its recovery would take them for lost data and fail for ever. It is left whole, as if it
            # committed after this one. Its journal exists before any of its files is visible and goes only once
            # all are complete, so: list, then look for journals, then list again -- a job seen in the first
            # listing without a journal now has finished, and the second listing holds all of its files.
            # A compaction is not spared: its files hold older jobs' rows, which this overwrite replaces.
            seen, committing = first_look if first_look is not None else self._first_look(journal, cutoff)
            # Nothing older in the scope at the first look (a first write, or a scope emptied meanwhile): what
            # appeared since came after this job's journal and is treated as written after it -- no second
            # listing (10,000 keys: ten pages, twice on LocalStack) on the commit's critical path.
            if seen:
                older, later_jobs = self._older_in_scope(journal, cutoff)
                # S3 stamps a multipart object with the time its upload *started*, so a concurrent job whose
                # writes straddle the journal has files on both sides of the cutoff. Decide per job, never per
                # file: one newer file marks a later job, and all of its files stay (no committed job loses part
                # of its data).
                doomed = [key for owner, key in older
                          if owner is None or (owner not in later_jobs and owner not in committing and owner in seen)]
        doomed += [key for key in sources or () if _directory(key) not in (self._broken or ())]
        self.progress("replace", 0, len(doomed))
        deleted = 0
        for batch_no, start in enumerate(range(0, len(doomed), DELETE_BATCH), 1):
            faults.checkpoint("commit.before_delete_batch", batch_no)
            deleted += self.store.delete_objects(bucket, doomed[start : start + DELETE_BATCH])
        self.progress("replace", deleted, len(doomed))
        return deleted

    def _committing_writes(self) -> set[str]:
        out = set()
        for job_id in committing_jobs(self.store, self.destination):
            paths = JobPaths(self.destination, job_id)
            try:
                other = CommitJournal.from_bytes(self.store.get_object(self.destination.bucket, paths.journal),
                                                 where=paths.journal, destination=self.destination, job_id=job_id)
            except NoSuchKeyError:
                continue  # finished meanwhile: the second listing holds all of its files
            except ManifestError:
                out.add(job_id)  # unreadable: never delete what cannot be judged
                continue
            if other.purpose != "compact":
                out.add(job_id)
        return out

    def _older_in_scope(self, journal: CommitJournal, cutoff: object) -> tuple[list[tuple[str | None, str]], set[str]]:
        """(owner, key) of every visible object of another job in the replaced scope that is not newer than the
        cutoff, and the jobs that have a newer one."""
        older: list[tuple[str | None, str]] = []
        later_jobs: set[str] = set()
        for rel in journal.replace:
            for obj in self.store.list_objects(self.destination.bucket, self._scope_prefix(rel)):
                owner = job_id_of_key(self.destination, obj.key)
                if is_hidden_key(self.destination, obj.key) or owner == self.job_id:
                    continue
                # Objects newer than the journal belong to a later job: a late recovery must not remove them.
                if cutoff is not None and obj.last_modified is not None and obj.last_modified > cutoff:  # type: ignore[operator]
                    if owner is not None:
                        later_jobs.add(owner)
                    continue
                older.append((owner, obj.key))
        return older, later_jobs

    def _abort_leftovers(self, journal: CommitJournal, winners: set[str]) -> int:
        """Abort every other upload of this job: losers' manifests first, then whatever the listing shows."""
        bucket = self.destination.bucket
        aborted = 0
        winner_keys = set(journal.winners)
        for obj in self.store.list_objects(bucket, self.paths.tasks):
            if obj.key in winner_keys:
                continue
            try:
                loser = self._read_manifest(obj.key)
            except ManifestError as exc:
                log.warning("skipping unreadable loser manifest %s: %s", obj.key, exc)
                continue
            for u in loser.uploads:
                if u.upload_id not in winners and self.store.abort_multipart_upload(bucket, u.key, u.upload_id):
                    aborted += 1
        aborted += self._abort_listed_uploads(exclude=winners)
        return aborted

    def _abort_listed_uploads(self, *, exclude: set[str] = frozenset()) -> int:  # type: ignore[assignment]
        """Abort pending uploads under the destination whose key carries this job's id -- never by prefix alone.
        ``exclude``: upload ids completed by this commit (S3's upload ids are unique)."""
        bucket = self.destination.bucket
        doomed = [
            u for u in self.store.list_multipart_uploads(bucket, self.destination.root)
            if job_id_of_key(self.destination, u.key) == self.job_id and u.upload_id not in exclude
        ]
        aborted = 0

        def count(_upload: UploadInfo, was_pending: bool) -> None:
            nonlocal aborted
            aborted += was_pending

        run_bounded(lambda u: self.store.abort_multipart_upload(bucket, u.key, u.upload_id), doomed,
                    threads=self.threads, on_result=count)
        return aborted

    def _remove_records(self, *, journal_first: bool) -> int:
        """Delete the job's hidden prefix. The journal goes first: leftover manifests without a journal are
        harmless, a journal without its manifests could not be recovered."""
        bucket = self.destination.bucket
        keys = [o.key for o in self.store.list_objects(bucket, self.paths.root)]
        if journal_first and self.paths.journal in keys:
            self.store.delete_objects(bucket, [self.paths.journal])
            keys.remove(self.paths.journal)
            faults.checkpoint("commit.during_cleanup")
        return self.store.delete_objects(bucket, keys) if keys else 0

    def _read_manifest(self, key: str) -> TaskManifest:
        data = self.store.get_object(self.destination.bucket, key)
        return TaskManifest.from_bytes(data, where=f"s3://{self.destination.bucket}/{key}",
                                       destination=self.destination, job_id=self.job_id)

    # ------------------------------------------------------------ abort
    def abort(self, *, force: bool = False) -> AbortReport:
        """Roll back: abort every upload of this job and remove its records. Refuses while a journal exists
        (the commit may be partly visible: recover instead) unless ``force``."""
        if not force and self.store.head_object(self.destination.bucket, self.paths.journal) is not None:
            raise JobStateError(
                f"job {self.job_id} has a commit journal: its commit started and may be partly visible. "
                f"Finish it with `mpcommit jobs recover {self.destination.uri} --job {self.job_id}` instead of aborting."
            )
        aborted, deleted = self.discard_all()
        return AbortReport(self.job_id, aborted, deleted)

    def discard_all(self) -> tuple[int, int]:
        bucket = self.destination.bucket
        aborted = 0
        for obj in self.store.list_objects(bucket, self.paths.tasks):
            try:
                manifest = self._read_manifest(obj.key)
            except ManifestError as exc:
                log.warning("skipping unreadable manifest %s: %s", obj.key, exc)
                continue
            for u in manifest.uploads:
                if self.store.abort_multipart_upload(bucket, u.key, u.upload_id):
                    aborted += 1
        aborted += self._abort_listed_uploads()
        deleted = self._remove_records(journal_first=False)
        return aborted, deleted


def committing_jobs(store: S3Store, destination: Destination) -> set[str]:
    """Jobs of ``destination`` whose commit is in flight or was interrupted: those with a commit journal."""
    out = set()
    for obj in store.list_objects(destination.bucket, destination.hidden_root):
        job_id = job_id_of_hidden_key(destination, obj.key)
        if job_id is not None and obj.key == JobPaths(destination, job_id).journal:
            out.add(job_id)
    return out


def _check_merged(merged: Sequence[MergedFile], *, staged_keys: set[str], keys: set[str], job_id: str) -> None:
    """Before the journal: every merged source must be a staged file of a winner, and a merged file may only
    take the name of one of its own sources (which then is not moved in)."""
    names = [m.upload.key for m in merged]
    if len(set(names)) != len(names):
        raise ProtocolError(f"job {job_id} was not committed: two merged files share a key")
    for m in merged:
        missing = [k for k in m.sources if k not in staged_keys]
        if missing:
            raise ProtocolError(
                f"job {job_id} was not committed: merged file {m.upload.key!r} names {missing[0]!r}, which is not a "
                "staged file of the committed task attempts"
            )
        if m.upload.key in keys and m.upload.key not in m.sources:
            raise ProtocolError(
                f"job {job_id} was not committed: merged file {m.upload.key!r} would replace another file of the job"
            )


def _directory(key: str) -> str:
    return key.rsplit("/", 1)[0] if "/" in key else ""


def _replace_scope(mode: WriteMode, overwrite: PartitionOverwrite, partitions: Sequence[str]) -> tuple[str, ...]:
    if mode is not WriteMode.OVERWRITE:
        return ()
    if overwrite is PartitionOverwrite.STATIC or "" in partitions:
        return ("",)
    return tuple(partitions)


def _etag_matches(found: str, upload: PendingUpload) -> bool:
    # SSE-KMS objects do not have MD5-based ETags; then size (checked by the caller) is what there is.
    if not all(len(p.etag.strip('"')) == 32 for p in upload.parts):
        return True
    return found.strip('"') == upload.expected_etag.strip('"')


# ---------------------------------------------------------------- commit worker processes
_WORKER: tuple[JobCommitter, ThreadPoolExecutor] | None = None


def _worker_init(options: S3Options, bucket: str, prefix: str, job_id: str, threads: int) -> None:
    """In a commit worker process: its own store (own boto3 client) and thread pool."""
    global _WORKER
    _WORKER = (JobCommitter(S3Store(options), Destination(bucket, prefix), job_id, threads=threads),
               ThreadPoolExecutor(threads, thread_name_prefix="mpcommit-worker"))


class _WorkerFailure(MpcommitError):
    """A failure in a commit worker process, carried back as (kind, message): mpcommit's errors take keyword
    arguments that pickling does not carry."""

    def __init__(self, kind: str, message: str):
        super().__init__(kind, message)
        self.kind, self.message = kind, message


def _worker_complete(uploads: list[PendingUpload]) -> int:
    """Complete a chunk of uploads (idempotently, as JobCommitter._complete does); raises the first failure."""
    assert _WORKER is not None, "commit worker not initialised"
    committer, pool = _WORKER
    try:
        for _ in pool.map(committer._complete, uploads):
            pass
    except Exception as exc:  # noqa: BLE001 - carried back whole, as a picklable failure
        raise _WorkerFailure(type(exc).__name__, str(exc)) from None
    return len(uploads)
