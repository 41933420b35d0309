"""What a job leaves behind once its files are placed or given up: the uploads no winner owns (losing attempts,
retried tasks), and the job's records under its hidden prefix."""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable, Iterator

from ...errors import ManifestError, NoSuchKeyError
from ...store.s3 import S3Store, UploadInfo
from .. import faults
from ..layout import Destination, JobPaths, job_id_of_key
from ..records.job import CommitJournal
from ..records.manifest import PendingUpload
from .context import CommitContext
from .manifests import ManifestReader

log = logging.getLogger(__name__)


class JobCleanup:
    """Aborts one job's leftover uploads (found by the job id every key carries, never by prefix alone) and
    removes its records."""

    def __init__(self, store: S3Store, destination: Destination, job_id: str, context: CommitContext):
        self.store = store
        self.destination = destination
        self.job_id = job_id
        self.paths = JobPaths(destination, job_id)
        self.context = context
        self.manifests = ManifestReader(store, destination, job_id)

    def abort_leftovers(self, journal: CommitJournal, winners: Container[str]) -> int:
        """Abort every other upload of this job: losers' manifests first, then whatever the listing shows.
        ``winners``: upload ids completed by the commit (S3's upload ids are unique)."""
        winner_keys = set(journal.winners)
        # The store's listing of pending uploads is taken beside the losers' manifests, not after them: one round
        # trip less on every commit. It sees no fewer uploads for that -- an upload the losers' aborts end is not
        # listed, or is listed and then found gone (not counted twice), and a straggler that starts an upload
        # after either listing is the orphan cleanup's, as it would be after the later one.
        listed = self.context.outer.submit(self._listed_uploads)
        manifested = self._abort_manifested(skip=winner_keys, keep=winners)
        return manifested + self._abort(u for u in listed.result() if u.upload_id not in winners)

    def abort_all(self) -> int:
        """Abort every upload of the job still pending: those its manifests name, then those the listing shows."""
        return self._abort_manifested() + self.abort_listed()

    def discard_all(self) -> tuple[int, int]:
        """Abort every upload of the job and remove its records: (uploads aborted, records deleted)."""
        aborted = self.abort_all()
        return aborted, self.remove_records(journal_first=False)

    def _abort_manifested(self, *, skip: Container[str] = frozenset(), keep: Container[str] = frozenset()) -> int:
        bucket = self.destination.bucket

        def uploads() -> Iterator[PendingUpload]:
            for obj in self.store.list_objects(bucket, self.paths.tasks):
                if obj.key in skip:
                    continue
                try:
                    manifest = self.manifests.read(obj.key)
                except (ManifestError, NoSuchKeyError) as exc:
                    # NoSuchKey: gone, another rollback or cleanup of the job removed it meanwhile.
                    log.warning("skipping unreadable %s %s: %s", "loser manifest" if skip else "manifest", obj.key, exc)
                    continue
                yield from (u for u in manifest.uploads if u.upload_id not in keep)

        return self._abort(uploads())

    def abort_listed(self, *, exclude: Container[str] = frozenset()) -> int:
        """Abort pending uploads under the destination whose key carries this job's id -- never by prefix alone.
        ``exclude``: upload ids completed by this commit."""
        return self._abort(u for u in self._listed_uploads() if u.upload_id not in exclude)

    def _listed_uploads(self) -> list[UploadInfo]:
        """The pending uploads under the destination whose key carries this job's id."""
        return [u for u in self.store.list_multipart_uploads(self.destination.bucket, self.destination.root)
                if job_id_of_key(self.destination, u.key) == self.job_id]

    def _abort(self, doomed: Iterable[UploadInfo | PendingUpload]) -> int:
        """Abort each upload, under an adaptive window (fewer at once when the store answers SlowDown); the count
        of those still pending (another cleaner may have got to some first)."""
        bucket = self.destination.bucket
        aborted = 0

        def count(_upload: UploadInfo | PendingUpload, was_pending: bool) -> None:
            nonlocal aborted
            aborted += was_pending

        self.context.run_adaptive(lambda u: self.store.abort_multipart_upload(bucket, u.key, u.upload_id), doomed,
                                  retry=self.store.options.retry, on_result=count)
        return aborted

    def remove_records(self, *, journal_first: bool) -> int:
        """Delete the job's hidden prefix.

        After a commit (``journal_first``) the journal goes first: leftover manifests without a journal are
        harmless, a journal without its manifests could not be recovered. After a rollback it goes last: the
        rollback record at the journal key is what stops the job's own driver from committing, and it must
        outlive the descriptor, whose absence stops a driver that comes later (see journal.claim_journal)."""
        bucket = self.destination.bucket
        keys = [o.key for o in self.store.list_objects(bucket, self.paths.root)]
        removed = 0
        if journal_first and self.paths.journal in keys:
            removed += self.store.delete_objects(bucket, [self.paths.journal])
            keys.remove(self.paths.journal)
            faults.checkpoint("commit.during_cleanup")
        last = [k for k in keys if k == self.paths.journal]
        keys = [k for k in keys if k != self.paths.journal]
        if keys:
            removed += self.store.delete_objects(bucket, keys)
        if last:
            removed += self.store.delete_objects(bucket, last)
        return removed
