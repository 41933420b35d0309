"""Placing a journal's files: each winner's pending upload completed, each staged small file copied to its key.

Idempotent, which is what lets ``recover`` equal an uninterrupted commit (I4): completing an upload that was
completed already is recognised by the object's multipart ETag. The completes run under the commit's adaptive
window (:meth:`CommitContext.run_adaptive`): started on the store's asynchronous transport where it has one (the
AWS CRT: hundreds in flight from the commit's own thread, as many as the store answers as fast as it did with
fewer, up to ``S3Options.max_completes_in_flight``), else on the inner pool's threads; the window halves when the
store answers SlowDown, and a refused complete is sent again once there is room. (Worker processes for the
completes were removed: on the CRT a complete costs the driver 0.13-0.2 ms of CPU, so one core completes thousands a
second; see docs/COMMIT_AT_SCALE.md.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from ...errors import CommitStateUnknownError, MpcommitError, NoSuchUploadError
from ...pool import Done, Window
from ...store.retry import single_attempts
from ...store.s3 import CompletedPart, S3Store
from .. import faults
from ..layout import Destination
from ..records.manifest import PendingUpload, StagedFile
from .context import CommitContext

Item = PendingUpload | StagedFile


def directory_of(key: str) -> str:
    return key.rsplit("/", 1)[0] if "/" in key else ""


class Placer:
    """Completes the pending uploads and moves the staged files of one job.

    ``skip_directories``: directories whose merged files must never be completed (a compaction's sources that
    someone else removed, see :mod:`.replacing`): their uploads are aborted instead.
    """

    def __init__(self, store: S3Store, destination: Destination, job_id: str, *,
                 skip_directories: frozenset[str] = frozenset()):
        self.store = store
        self.destination = destination
        self.job_id = job_id
        self.skip_directories = skip_directories
        self._placed = 0
        self._placed_lock = threading.Lock()
        #: The completes' window of the last place_all: what it went through (its peak, the SlowDowns seen).
        self.window: Window | None = None

    # ------------------------------------------------------------ one item
    def place(self, item: Item) -> None:
        if self._skipped(item):
            # Never completed; if an earlier run completed it, the replace step deletes it.
            self.store.abort_multipart_upload(self.destination.bucket, item.key, item.upload_id)
            return
        if isinstance(item, StagedFile):
            self.move_staged(item)
        else:
            self.complete(item)

    def _skipped(self, item: Item) -> bool:
        return bool(self.skip_directories) and isinstance(item, PendingUpload) and \
            directory_of(item.key) in self.skip_directories

    def _count_one(self) -> None:
        with self._placed_lock:
            self._placed += 1
            n = self._placed
        faults.checkpoint("commit.after_complete", n)

    def complete(self, upload: PendingUpload) -> None:
        bucket = self.destination.bucket
        parts = [CompletedPart(p.number, p.etag, p.crc32) for p in upload.parts]
        try:
            self.store.complete_multipart_upload(bucket, upload.key, upload.upload_id, parts)
        except NoSuchUploadError as exc:
            self.check_gone(upload, exc)

    def check_gone(self, upload: PendingUpload, exc: NoSuchUploadError) -> None:
        """A complete answered NoSuchUpload: completed already (a retry, or a recover after a crash) -- or aborted
        by someone else. Only the object itself can tell: same size and the multipart ETag of exactly these parts
        means ours; otherwise CommitStateUnknownError."""
        bucket = self.destination.bucket
        info = self.store.head_object(bucket, upload.key)
        if info is not None and info.size == upload.size and etag_matches(info.etag, upload):
            return
        raise CommitStateUnknownError(
            f"job {self.job_id}: upload {upload.upload_id} of s3://{bucket}/{upload.key} is no longer pending and "
            "the object is not the one it would have made; the upload was aborted by something else "
            "(an orphan cleanup or lifecycle rule?) and its data is lost. Re-run the job.",
            job_id=self.job_id, destination=self.destination.uri,
        ) from exc

    def start_complete(self, item: Item, done: Done, context: CommitContext) -> bool:
        """Start the complete of a pending upload on the store's asynchronous transport (one attempt; a
        NoSuchUpload answer is resolved by :meth:`check_gone` on the inner pool). False for what it does not
        start: staged files, skipped uploads, a transport without asynchronous completes."""
        if not isinstance(item, PendingUpload) or self._skipped(item):
            return False
        parts = [CompletedPart(p.number, p.etag, p.crc32) for p in item.parts]

        def answered(_etag: str | None, error: BaseException | None) -> None:
            if isinstance(error, NoSuchUploadError):
                context.inner.submit(self._check_gone_once, item, error).add_done_callback(
                    lambda f: done(None, f.exception()))
            else:
                done(None, error)

        return self.store.start_complete(self.destination.bucket, item.key, item.upload_id, parts, answered)

    def _check_gone_once(self, upload: PendingUpload, exc: NoSuchUploadError) -> None:
        with single_attempts():
            self.check_gone(upload, exc)

    def move_staged(self, staged: StagedFile) -> None:
        """Without a merge, a staged small file is copied to its final key (server-side, one request)."""
        bucket = self.destination.bucket
        try:
            self.store.copy_object(bucket, staged.key, source_key=staged.staged_key, source_etag=staged.etag)
        except MpcommitError:
            info = self.store.head_object(bucket, staged.key)
            if info is not None and info.size == staged.size:
                return  # copied by an earlier, interrupted run
            raise

    # ------------------------------------------------------------ many items
    def place_all(self, items: Iterator[Item], on_done: Callable[[Item], None], context: CommitContext) -> None:
        """Place every item; ``on_done(item)`` runs on the calling thread as each is placed. The first failure
        stops submitting and is raised once the calls in flight have ended."""

        def placed(item: Item, _none: None) -> None:
            self._count_one()
            on_done(item)

        in_flight = self.store.completes_in_flight(self.destination.bucket)
        if in_flight is None:  # completes on the inner pool's threads: one more queued behind each
            initial = ceiling = 2 * max(1, context.threads)
        else:
            initial, ceiling = context.threads, max(in_flight, context.threads)
        self.window = context.run_adaptive(
            self.place, items, retry=self.store.options.retry,
            start=lambda item, done: self.start_complete(item, done, context),
            initial=initial, ceiling=ceiling, on_result=placed)


def etag_matches(found: str, upload: PendingUpload) -> bool:
    # SSE-KMS objects do not have MD5-based ETags; then size (checked by the caller) is what there is.
    if not all(len(p.etag.strip('"')) == 32 for p in upload.parts):
        return True
    return found.strip('"') == upload.expected_etag.strip('"')
