"""The worker side: a job spec shipped to workers, and one task attempt that writes files and commits them.

A task attempt's commit only records what it uploaded (its manifest); nothing becomes visible until the
driver's job commit. Any number of attempts of one task may write and commit; the driver picks one.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ..errors import JobStateError, ProtocolError, UsageError
from ..options import S3Options, WriterSettings
from ..store.s3 import S3Store, store_for
from . import faults
from .layout import Destination, JobPaths, data_file_name, normalize_partition
from .records.manifest import INLINE_MAX_PARTS, PendingUpload, StagedFile, TaskManifest, TaskResult, merge_rows
from .writer import ByteBudget, MultipartWriter, wait_pumping

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    """Everything a worker needs to write for a job: small and picklable, no driver state."""

    job_id: str
    destination: Destination
    s3: S3Options = field(default_factory=S3Options)
    writer: WriterSettings = field(default_factory=WriterSettings)
    ignored: bool = False

    @property
    def paths(self) -> JobPaths:
        return JobPaths(self.destination, self.job_id)

    def task(self, task_id: int, attempt: int = 0, *, store: S3Store | None = None) -> "TaskAttempt":
        """Open one attempt of task ``task_id``; use it as a context manager."""
        return TaskAttempt(self, task_id=task_id, attempt=attempt, store=store)


class TaskAttempt:
    """One attempt of one task. ``create`` opens writers; ``commit`` records the manifest.

    Leaving the ``with`` block by an exception aborts everything this attempt uploaded and re-raises;
    leaving it without committing aborts too (an uncommitted attempt can never win).
    """

    def __init__(self, spec: JobSpec, *, task_id: int, attempt: int, store: S3Store | None = None):
        if not isinstance(task_id, int) or task_id < 0 or not isinstance(attempt, int) or attempt < 0:
            raise UsageError(f"task_id and attempt must be non-negative integers, got {task_id!r}, {attempt!r}")
        self.spec = spec
        self.task_id = task_id
        self.attempt = attempt
        # Attempt numbers can repeat (Spark restarts them per stage attempt); the nonce keeps manifests apart.
        self.nonce = secrets.token_hex(4)
        self._store = store or store_for(spec.s3)
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: Writers not finished nor aborted, by key (keys are unique within an attempt): a file's finish takes out
        #: its own, where it rebuilt the list of them all (issue 39: 0.56 s of a 1,250-file task's CPU, profiled).
        self._open: dict[str, MultipartWriter] = {}
        self._uploads: list[PendingUpload] = []
        self._staged: list[StagedFile] = []
        #: The next cNNN per partition directory: Spark starts each directory of a task at c000.
        self._file_numbers: dict[str, int] = {}
        self._result: TaskResult | None = None
        self._aborted = False
        #: What writers closing in the background hold, all together (WriterSettings.closing_bytes).
        self.closing_budget = ByteBudget(spec.writer.closing_bytes)
        self._failure: BaseException | None = None

    @property
    def store(self) -> S3Store:
        return self._store

    # ------------------------------------------------------------ writing
    def next_key(self, partition: str, ext: str) -> str:
        """The final key of this attempt's next file in ``partition`` (every attempt of a task uses the same
        names, so two attempts can never both be visible: they race for the same keys, and the driver
        completes one). The cNNN counter counts per partition directory, as Spark's does."""
        with self._lock:
            number = self._file_numbers.get(partition, 0)
            self._file_numbers[partition] = number + 1
        name = data_file_name(task_id=self.task_id, job_id=self.spec.job_id, file_number=number, ext=ext)
        return f"{self.spec.destination.root}{partition + '/' if partition else ''}{name}"

    def create(self, partition: Any = None, ext: str = "bin", *, content_type: str | None = None,
               background: bool = False) -> MultipartWriter:
        """Open a streaming writer for a new file in ``partition`` (a ``col=value/...`` path, a mapping or pairs).

        With ``background=True`` no round trip waits on the caller: the upload's create is sent as the writer opens
        (on the store's polled sockets when it has them, else by the upload pool), and ``close()`` returns once the
        last part is on its way (at most ``WriterSettings.closing_bytes`` held by such closing files, all
        together); :meth:`commit` waits for them. A file that fails in the background fails the next ``create``
        and the commit. Either way the
        writer is registered for this attempt's abort before its upload exists.
        """
        self._check_writable()
        part_path = normalize_partition(partition)
        key = self.next_key(part_path, ext)
        writer = MultipartWriter(
            self._store, bucket=self.spec.destination.bucket, key=key, settings=self.spec.writer,
            executor=self._pool(), partition=part_path, on_finish=self._finished, on_abort=self._dropped,
            content_type=content_type, background=background, budget=self.closing_budget,
            on_failure=self._failed,
            # Registered before the upload exists (a background writer creates it later, on the pool).
            on_open=self._register,
        )
        return writer

    def stage(self, partition: Any, ext: str, data: bytes, *, rows: int | None = None) -> StagedFile:
        """Store a small file as a plain object under the job's hidden prefix, for a commit-time merge."""
        self._check_writable()
        part_path = normalize_partition(partition)
        key = self.next_key(part_path, ext)
        relative = key[len(self.spec.destination.root):]
        staged_key = self.spec.paths.staged_key(self.task_id, self.attempt, self.nonce, relative)
        etag = self._store.put_object(self.spec.destination.bucket, staged_key, data, content_type="application/octet-stream")
        staged = StagedFile(key=key, staged_key=staged_key, size=len(data), etag=etag, rows=rows, partition=part_path)
        with self._lock:
            self._staged.append(staged)
        return staged

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.spec.writer.upload_threads, thread_name_prefix=f"mpcommit-t{self.task_id}")
            return self._executor

    def _finished(self, pending: PendingUpload) -> None:
        with self._lock:
            self._uploads.append(pending)
            self._open.pop(pending.key, None)

    def _register(self, writer: MultipartWriter) -> None:
        with self._lock:
            self._open[writer.key] = writer

    def _failed(self, writer: MultipartWriter, exc: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = exc

    def drain(self) -> None:
        """Wait until every writer closing in the background is done; raise the first failure of any."""
        with self._lock:
            closing = [w for w in self._open.values() if w.closing]
        for w in closing:
            wait_pumping(self._store, w.done)  # a small file's answers are read only by a thread that pumps
            w.done.exception()  # a failure is recorded by _failed
        with self._lock:
            failure = self._failure
        if failure is not None:
            raise failure

    def _dropped(self, writer: MultipartWriter) -> None:
        with self._lock:
            if self._open.get(writer.key) is writer:
                del self._open[writer.key]

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._result is not None:
            raise JobStateError(f"task {self.task_id} attempt {self.attempt} is already committed")
        if self._aborted:
            raise JobStateError(f"task {self.task_id} attempt {self.attempt} was aborted")

    # ------------------------------------------------------------ commit and abort
    def commit(self, *, inline_parts: int = INLINE_MAX_PARTS) -> TaskResult:
        """Record every pending upload in this attempt's manifest and return the small result for the driver,
        which carries the manifest in-line when it has at most ``inline_parts`` parts (the job's share per task,
        :func:`~mpcommit.protocol.records.manifest.inline_parts_per_task`)."""
        self._check_writable()
        faults.checkpoint("task.before_commit")
        self.drain()
        with self._lock:
            still_open = list(self._open)
        if still_open:
            raise ProtocolError(
                f"task {self.task_id} attempt {self.attempt} has writers still open ({still_open[:3]}...): "
                "close every writer (leave its `with` block) before committing the task"
            )
        self._result = record_manifest(self._store, self.spec, self.task_id, self.attempt, self.nonce,
                                       self._uploads, self._staged, inline_parts=inline_parts)
        self._close_pool()
        faults.checkpoint("task.after_commit")
        return self._result

    def abort(self) -> None:
        """Abort every upload of this attempt and delete its staged files. Logs, never raises."""
        if self._aborted or self._result is not None:
            return
        self._aborted = True
        with self._lock:
            writers, uploads, staged = list(self._open.values()), list(self._uploads), list(self._staged)
        for w in writers:
            w.abort()
        bucket = self.spec.destination.bucket
        for u in uploads:
            try:
                self._store.abort_multipart_upload(bucket, u.key, u.upload_id)
            except Exception as exc:  # noqa: BLE001 - the job commit aborts leftovers by job id anyway
                log.warning("could not abort upload of s3://%s/%s: %s", bucket, u.key, exc)
        if staged:
            try:
                self._store.delete_objects(bucket, [s.staged_key for s in staged])
            except Exception as exc:  # noqa: BLE001
                log.warning("could not delete staged files of task %s: %s", self.task_id, exc)
        self._close_pool()

    def _close_pool(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    @property
    def result(self) -> TaskResult | None:
        return self._result

    def __enter__(self) -> "TaskAttempt":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None or self._result is None:
            self.abort()


def record_manifest(store: S3Store, spec: JobSpec, task_id: int, attempt: int, nonce: str,
                    uploads: Iterable[PendingUpload], staged: Iterable[StagedFile] = (), *,
                    inline_parts: int = INLINE_MAX_PARTS) -> TaskResult:
    """Write one task attempt's manifest -- its pending uploads and staged files, validated (I7) -- and return
    the small result the driver commits. What ``TaskAttempt.commit`` does, and what a compaction does for
    uploads it made itself, one per bin."""
    uploads = tuple(sorted(uploads, key=lambda u: u.key))
    staged = tuple(sorted(staged, key=lambda s: s.key))
    manifest = TaskManifest(
        job_id=spec.job_id, bucket=spec.destination.bucket, prefix=spec.destination.prefix,
        task_id=task_id, attempt=attempt, nonce=nonce, created_ms=int(time.time() * 1000),
        uploads=uploads, staged=staged,
    )
    manifest.validate(destination=spec.destination, job_id=spec.job_id)
    manifest_key = spec.paths.task_manifest(task_id, attempt, nonce)
    store.put_object(spec.destination.bucket, manifest_key, manifest.to_bytes())
    return TaskResult(
        job_id=spec.job_id, task_id=task_id, attempt=attempt, manifest_key=manifest_key,
        manifest=manifest if manifest.inline_parts <= min(inline_parts, INLINE_MAX_PARTS) else None,
        files=len(uploads) + len(staged), bytes=manifest.bytes,
        rows=merge_rows([u.rows for u in uploads] + [s.rows for s in staged]),
        partitions=tuple(sorted({u.partition for u in uploads} | {s.partition for s in staged})),
    )
