"""What a commit removes once its own files are complete (I5): an overwrite's older objects in the scope it
replaces, and a compaction's sources, now held by its merged files."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future

from ...errors import CommitFailedError, ManifestError, MpcommitError, NoSuchKeyError
from ...pool import ProgressHook
from ...store.s3 import DELETE_BATCH, S3Store
from .. import faults
from ..inventory import committing_jobs
from ..layout import Destination, JobPaths, is_hidden_key, job_id_of_key
from ..records.job import CommitJournal
from ..records.manifest import TaskManifest
from .context import CommitContext
from .placing import directory_of, etag_matches

FirstLook = tuple[set[str | None], set[str]]


class Replacer:
    """The replace step of one job's commit."""

    def __init__(self, store: S3Store, destination: Destination, job_id: str, context: CommitContext,
                 progress: ProgressHook):
        self.store = store
        self.destination = destination
        self.job_id = job_id
        self.context = context
        self.progress = progress

    def _scope_prefix(self, rel: str) -> str:
        return f"{self.destination.root}{rel}/" if rel else self.destination.root

    # ------------------------------------------------------------ before the journal
    def check_scope_listable(self, replace: Sequence[str]) -> None:
        """Before the journal: list the scope an overwrite replaces, so that a server whose listing cannot be
        proven complete stops the commit while nothing is visible yet (I8), not after the new files are. The
        replace step lists again after the completes, which is what decides; this listing only proves it can."""
        bucket = self.destination.bucket
        try:
            self.context.run(lambda rel: self.store.list_objects(bucket, self._scope_prefix(rel)), replace)
        except MpcommitError as exc:
            raise CommitFailedError(f"job {self.job_id} was not committed, nothing was made visible and no old "
                                    f"data was deleted: {exc}") from exc

    # ------------------------------------------------------------ overwrite
    def first_look(self, journal: CommitJournal, cutoff: object) -> FirstLook:
        """The owners of the older objects in the replaced scope, then the jobs committing: the first listing
        and the journal check of :meth:`replace_old`, which may run while this job's files are completed --
        what makes the deletion safe is only their order: this listing, then the journals, then the second
        listing, all before anything is deleted. This job's own files are never in it (skipped by owner)."""
        first, _ = self._older_in_scope(journal, cutoff)
        if not first:
            return set(), set()  # nothing to replace: whose commit is in flight does not matter
        return {owner for owner, _key in first}, self._committing_writes()

    def look_beside(self, journal: CommitJournal, cutoff: object) -> Future[FirstLook] | None:
        """:meth:`first_look` started on the outer pool, beside the completes; None when nothing is replaced."""
        return self.context.beside(self.first_look, journal, cutoff) if journal.replace else None

    def replace_old(self, journal: CommitJournal, cutoff: object, sources: list[str] | None = None, *,
                    first_look: FirstLook | None = None, skip_directories: frozenset[str] = frozenset()) -> int:
        """Overwrite: delete older objects in the replaced scope, only after every new file is complete (I5).
        Compaction: delete the ``sources`` still as merged, except in ``skip_directories``.
        ``first_look``: :meth:`first_look`'s answer if it was taken already (beside the completes)."""
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
            seen, committing = first_look if first_look is not None else self.first_look(journal, cutoff)
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
        doomed += [key for key in sources or () if directory_of(key) not in skip_directories]
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

    # ------------------------------------------------------------ compaction: sources replaced by merged files
    # A compaction's journal names the sources it deletes (pinned by ETag) once its merged files -- the same rows --
    # are complete. An overwrite may remove some of them first, while the compaction runs or waits for `recover`:
    # then a merged file of that directory holds rows the overwrite removed. Completing it would bring them back,
    # and a merged file the overwrite deleted must not stop the recovery for ever (its directory's sources would
    # stay next to the other merged files: every row twice). Such a directory is left as the overwrite left it:
    # its merged files are aborted or deleted, its remaining sources kept.
    def check_sources(self, journal: CommitJournal,
                      manifests: Callable[[], Iterator[TaskManifest]]) -> tuple[list[str], frozenset[str]]:
        """The sources still as merged (to delete once the merged files are complete), and the directories
        whose sources someone else removed (their merged files are never completed)."""
        bucket = self.destination.bucket
        kept, gone = [], set()
        # One HEAD per source, side by side (one after another they cost a round trip each).
        found: dict[str, str | None] = {}
        self.context.run(lambda e: self.store.head_object(bucket, e.key), journal.delete,
                         on_result=lambda e, info: found.__setitem__(e.key, info.etag if info is not None else None))
        for entry in journal.delete:
            if found.get(entry.key) == entry.etag:
                kept.append(entry.key)
            else:
                gone.add(directory_of(entry.key))
        if gone:
            # The compaction deletes its sources only once every merged file is complete: if they all are, the
            # missing sources are its own deletes, interrupted.
            outputs = [u for m in manifests() for u in m.uploads]
            if all((info := self.store.head_object(bucket, u.key)) is not None and info.size == u.size
                   and etag_matches(info.etag, u) for u in outputs):
                gone = set()
        return kept, frozenset(gone)

    def undo_skipped(self, placed_keys: list[str]) -> None:
        """Delete the merged files of skipped directories that were completed before (``placed_keys``)."""
        # (A merged file whose sources are all there but which is neither pending nor visible is not taken for
        # one an overwrite deleted: it may be a complete of the interrupted run still on its way. The commit
        # fails as for any job, and a later recover finishes it.)
        if placed_keys:
            self.store.delete_objects(self.destination.bucket, placed_keys)
