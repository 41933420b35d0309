"""Rolling a job back: claim its journal key first, so that it can never commit (a commit claims the same key for
its journal: of the two, one wins), end its place in the order, abort its uploads, remove its records.

A rollback must never undo a job that committed. The journal key is free both before a commit and after one (a
commit's cleanup removes it first), so a claim that finds it free asks the job's other records and the order
which of the two it was (:meth:`Rollback.stop_commit`).
"""

from __future__ import annotations

import logging

from ...errors import ManifestError, NoSuchKeyError
from .. import faults
from ..layout import is_hidden_key, owner_of_key
from ..records.job import JobRollback
from ..records.order import Outcome
from ...store.conditional import Records
from .cleanup import JobCleanup
from .context import CommitContext
from .journal import claim_rollback
from .manifests import ManifestReader
from .reports import AbortReport
from .work import JobWork

log = logging.getLogger(__name__)


class Rollback:
    """Rolls back the job of ``work``, or discards what a committed job left."""

    def __init__(self, work: JobWork):
        self.work = work

    def run(self, *, reason: str) -> AbortReport:
        """Roll back: claim the journal key (so that the job can never commit; JobStateError when it is
        committing already), record the end of its place in the order if it took one, abort every upload of the
        job and remove its records."""
        work = self.work
        if not self.stop_commit(reason=reason):
            # It committed before the claim: what is left of it -- a zombie's uploads and manifest, or records its
            # own cleanup had not removed yet -- is no part of what it committed, and goes as after any commit.
            aborted, deleted = self.discard_all()
            return AbortReport(work.job_id, aborted, deleted, ended_before=True)
        faults.checkpoint("rollback.after_claim")
        with CommitContext(work.threads) as context:
            cleanup = JobCleanup(work.store, work.destination, work.job_id, context)
            aborted = cleanup.abort_all()
            work.quiet()
            if not work.conditional().create_only:
                self._remove_visible()
            # Not counted: the rollback record this rollback (or an interrupted one) put at the journal key.
            deleted = max(0, cleanup.remove_records(journal_first=False) - 1)
        return AbortReport(work.job_id, aborted, deleted)

    def stop_commit(self, *, reason: str) -> bool:
        """The first step of a rollback: claim the job's journal key, so that the job can never commit
        (JobStateError when it is committing already), and end its place in the order if it took one. Its
        uploads may be aborted from here on. False when the job had ended before the claim: its records --
        the journal key among them -- were removed by the process that committed or rolled it back, so the claim
        found the key free; the claim is taken back and nothing is rolled back."""
        work = self.work
        claim, mine = claim_rollback(work.store, work.destination, work.job_id, reason)
        if mine and work.store.head_object(work.destination.bucket, work.paths.descriptor) is None:
            # Its descriptor went before the claim, with its other records: whoever ended the job -- its commit's
            # cleanup, or a rollback -- removed them, and its place may have been collected since, taking the
            # outcome with it (order trials run 12, pause-driver seed 1156: a `recover` that listed an append while
            # it wrote reported it rolled back, and wrote an end for its collected place, after it had committed).
            # A place it holds open can only be a zombie's, taken after a rollback had run to its end (a commit
            # records its end before its records go, and with them gone it can never claim its journal): ended
            # here, while this claim keeps it from claiming, or it would hold later places back for ever.
            entry = work.order.find(work.job_id)
            if entry is not None and work.order.ended(entry.position) is None:
                work.order.end(entry, Outcome.ROLLED_BACK, reason=f"{reason} (a place taken after its rollback)")
            self._take_claim_back(claim)
            return False
        entry = work.order.find(work.job_id, ended_too=True)
        outcome = work.order.outcome(entry.position) if entry is not None else None
        if mine and (outcome.outcome is Outcome.COMMITTED if outcome is not None else
                     entry is None and self._committed_and_collected()):
            # The job committed before this claim, which found the journal key freed by its cleanup (a listing of
            # jobs read before it ended brought this rollback here). Taken back; the job stays committed. (A job
            # that ended otherwise -- aborted, rolled back -- is rolled back again: what its zombies left goes.)
            self._take_claim_back(claim)
            return False
        if entry is not None and outcome is None and entry.position > work.order.view().through:
            # (A place a checkpoint covers has ended, and its end may have been collected just now: never ended again.)
            work.order.end(entry, Outcome.ROLLED_BACK, reason=reason)
        return True

    def discard_all(self) -> tuple[int, int]:
        """Abort every upload of a committed job that is left, and remove its records: (aborted, deleted)."""
        work = self.work
        work.quiet()
        with CommitContext(work.threads) as context:
            return JobCleanup(work.store, work.destination, work.job_id, context).discard_all()

    def _take_claim_back(self, claim: JobRollback) -> None:
        work = self.work
        records = Records.of(work.store, work.destination.bucket, work.table.root)
        records.delete(work.paths.journal, etag=None, body=claim.to_bytes())

    def _remove_visible(self) -> None:
        """On a store that cannot order a rollback against its job's commit (no conditional writes; used only as
        one writer per table, as the user stated), "nothing of it is visible" is checked, not assumed: files of
        the job found visible -- a commit that ran beside this rollback after all -- are deleted, and said."""
        work = self.work
        mine = lambda key: owner_of_key(key).job_id == work.job_id and not is_hidden_key(work.destination, key)  # noqa: E731
        visible = [o.key for o in work.store.list_objects(work.destination.bucket, work.destination.root, keep=mine)]
        if visible:
            log.warning("job %s: %d of its files were visible when it was rolled back (its commit ran beside the "
                        "rollback, which this store cannot order: S3Options(single_writer=True) was stated); they "
                        "are deleted, e.g. s3://%s/%s", work.job_id, len(visible), work.destination.bucket,
                        visible[0])
            work.store.delete_objects(work.destination.bucket, visible)

    def _committed_and_collected(self) -> bool:
        """For a job with no place left in the order and a free journal key: whether it committed and the order's
        collection has since deleted its place (its commit stopped in its cleanup, which frees the journal key
        first). Only a commit makes a job's files visible, and its task manifests name them: a few of those keys
        are looked up (a job rolled back while writing has none visible; one with no manifest wrote nothing). Never on
        a store without conditional writes (its rollback deletes such files: :meth:`_remove_visible`), nor before
        the order was first collected."""
        work = self.work
        if not work.conditional().create_only or work.order.view().through == 0:
            return False
        reader = ManifestReader(work.store, work.destination, work.job_id)
        looked = 0
        for obj in work.store.list_objects(work.destination.bucket, work.paths.tasks):
            try:
                manifest = reader.read(obj.key)
            except (ManifestError, NoSuchKeyError):
                continue  # unreadable, or removed meanwhile: other manifests tell
            for upload in manifest.uploads[:2]:
                if work.store.head_object(work.destination.bucket, upload.key) is not None:
                    return True
                looked += 1
            if looked >= 16:
                break
        return False
