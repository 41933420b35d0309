"""What a commit removes once its own files are complete (I5): an overwrite's older objects in the scope it
replaces -- older by the table's commit order, never by a clock -- and a compaction's sources, now held by its
merged files."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future

from ...errors import CommitFailedError, InconsistentListingError, MpcommitError
from ...pool import ProgressHook
from ...store.s3 import DELETE_BATCH, S3Store
from .. import faults
from ..layout import Destination, is_hidden_key, owner_of_key, table_of
from ..nesting import NestedTables
from ..order import TableOrder
from ..records.job import CommitJournal, DeleteEntry
from ..records.manifest import TaskManifest
from ..records.order import OrderEntry
from .context import CommitContext
from .placing import directory_of, etag_matches

log = logging.getLogger(__name__)

#: A directory with at least this many sources to check is listed; fewer get a HEAD each. A LIST request costs what
#: 12.5 HEADs cost on S3's price list (0.005 against 0.0004 USD per 1,000), and up to this many HEADs go out at
#: once on the commit's threads (32 by default) -- one round trip, as one listed page takes -- so below it a
#: listing saves neither money nor time, and it may read a page of unrelated files between two sources.
LIST_SOURCES_AT = 16
#: A directory's listing reads at most one page per this many of its sources (the commit's default threads:
#: that many HEADs take one round trip side by side, a page takes one too); sources past it get a HEAD each, so
#: that sources spread thin among many other files never cost more requests than HEADs would.
SOURCES_PER_PAGE = 32


class Replacer:
    """The replace step of one job's commit."""

    def __init__(self, store: S3Store, destination: Destination, job_id: str, context: CommitContext,
                 progress: ProgressHook):
        self.store = store
        self.destination = destination
        self.table = table_of(destination)
        self.job_id = job_id
        self.context = context
        self.progress = progress

    def _scope_prefix(self, rel: str) -> str:
        return f"{self.destination.root}{rel}/" if rel else self.destination.root

    # ------------------------------------------------------------ before the journal
    def check_scope(self, replace: Sequence[str]) -> None:
        """Before the journal: list the scope an overwrite replaces, so that a server whose listing cannot be
        proven complete stops the commit while nothing is visible yet (I8), not after the new files are; and
        refuse a scope that holds another table with a job in flight, whose commit order cannot see this job."""
        bucket = self.destination.bucket
        nested = NestedTables(self.table)

        def seen(key: str) -> bool:
            nested.add(key)
            return False  # looked at, not kept: a large table's listing is not held

        def look(rel: str) -> None:
            self.store.list_objects(bucket, self._scope_prefix(rel), keep=seen)

        try:
            self.context.run(look, replace)
        except MpcommitError as exc:
            raise CommitFailedError(f"job {self.job_id} was not committed, nothing was made visible and no old "
                                    f"data was deleted: {exc}") from exc
        busy = nested.in_flight()
        if busy:
            other, why = next(iter(sorted(busy.items())))
            raise CommitFailedError(
                f"job {self.job_id} was not committed: the scope it would replace in {self.destination.uri} holds "
                f"another table, {other}, with a job in flight there ({why}); an overwrite here would delete that "
                "table's files without regard to its jobs. Wait for them, or overwrite each table by its own URI. "
                "Nothing was made visible and nothing was deleted.")

    # ------------------------------------------------------------ overwrite
    def older_objects(self, journal: CommitJournal, entry: OrderEntry, order: TableOrder) -> list[str]:
        """The objects in the replaced scope that this overwrite removes: every visible data object there that
        no job after it in the commit order owns. The jobs before it have all ended (it waited for them), so
        this set only shrinks while the completes run; the listing comes first, the jobs after it are read
        after -- a job places files only once it has its place, so none of a later job's files can be taken
        for older."""
        listed: list[tuple[str | None, str]] = []
        nested = NestedTables(self.table)

        def older(key: str) -> bool:
            # The listing runs beside the completes and sees this job's own files appear: dropped page by page,
            # so that the driver never holds them all (~1 KB a listed file) -- only the scope's older files. The
            # hidden keys tell the tables nested in the scope, whose files are theirs (protocol/nesting.py).
            if is_hidden_key(self.destination, key):
                nested.add(key)
                return False
            return owner_of_key(key).job_id != self.job_id

        for rel in journal.replace:
            for obj in self.store.list_objects(self.destination.bucket, self._scope_prefix(rel), keep=older):
                listed.append((owner_of_key(obj.key).job_id, obj.key))
        faults.checkpoint("commit.after_replace_listing")
        if not listed:
            return []
        later = order.jobs_after(entry.position)
        if nested.roots:
            log.warning("job %s: %s holds other tables (%s); their files are theirs, and left as they are",
                        self.job_id, self.destination.uri, ", ".join(nested.roots))
        return [key for owner, key in listed if (owner is None or owner not in later) and not nested.covers(key)]

    def look_beside(self, journal: CommitJournal, entry: OrderEntry, order: TableOrder) -> Future[list[str]] | None:
        """:meth:`older_objects` started on the outer pool, beside the completes; None when nothing is replaced."""
        return self.context.beside(self.older_objects, journal, entry, order) if journal.replace else None

    def delete(self, doomed: list[str], sources: list[str] | None, *, skip_directories: frozenset[str]) -> int:
        """Delete the older objects and a compaction's sources (except in ``skip_directories``): only after every
        new file is complete (I5). Batches of DeleteObjects under an adaptive window: the first alone, then more
        at once while the store keeps up, fewer when it answers SlowDown (each key counts against its rate)."""
        doomed = doomed + [key for key in sources or () if directory_of(key) not in skip_directories]
        self.progress("replace", 0, len(doomed))
        bucket = self.destination.bucket
        batches = list(enumerate(range(0, len(doomed), DELETE_BATCH), 1))
        deleted = 0

        def delete_batch(batch: tuple[int, int]) -> int:
            batch_no, start = batch
            faults.checkpoint("commit.before_delete_batch", batch_no)
            return self.store.delete_objects(bucket, doomed[start : start + DELETE_BATCH])

        def count(_batch: tuple[int, int], n: int) -> None:
            nonlocal deleted
            deleted += n

        self.context.run_adaptive(delete_batch, batches, retry=self.store.options.retry, initial=1, on_result=count)
        self.progress("replace", deleted, len(doomed))
        return deleted

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
        found = self._current_etags(journal.delete)
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

    def _current_etags(self, entries: Sequence[DeleteEntry]) -> dict[str, str | None]:
        """The ETag each of ``entries``' keys has now, None for a key that is not there. A directory with many of
        them is listed (its direct children, in their key range: a few pages for a thousand sources, where a HEAD
        each would cost a request each); the others get a HEAD per key. Both say the same: S3's listings are
        strongly consistent since December 2020 (LocalStack's, moto's too), and a listing's ETag is the string
        a HEAD returns -- the very string the planner read from a listing and pinned in the journal."""
        by_folder: dict[str, list[str]] = {}
        for entry in entries:
            # The key up to its last '/': the prefix whose direct children it is ('' for a key at the root).
            by_folder.setdefault(entry.key[: entry.key.rfind("/") + 1], []).append(entry.key)
        listed = {folder: sorted(set(keys)) for folder, keys in by_folder.items() if len(keys) >= LIST_SOURCES_AT}
        headed = [key for folder, keys in by_folder.items() if folder not in listed for key in keys]
        found: dict[str, str | None] = {}
        # Side by side on the inner pool (one after another, each costs a round trip): the listings, then the
        # HEADs of the few-source directories and of what the listings left to them.
        self.context.run(lambda item: self._listed_etags(*item), listed.items(),
                         on_result=lambda _item, etags: found.update(etags))
        headed += [key for keys in listed.values() for key in keys if key not in found]
        self.context.run(self._head_etag, headed, on_result=lambda key, etag: found.__setitem__(key, etag))
        return found

    def _head_etag(self, key: str) -> str | None:
        info = self.store.head_object(self.destination.bucket, key)
        return info.etag if info is not None else None

    def _listed_etags(self, prefix: str, keys: list[str]) -> dict[str, str | None]:
        """``keys`` (sorted, all directly below ``prefix``) as a listing of its children from the first key to the
        last shows them: each listed one's ETag, None for one the listing proves absent. Keys past the listing's
        page budget are left out (for a HEAD each)."""
        # Pages are read one after another, HEADs side by side: past one page per SOURCES_PER_PAGE sources (sources
        # spread thin among other files), the HEADs of the rest finish sooner than more pages would.
        try:
            listed = self.store.list_child_range(self.destination.bucket, prefix, first=keys[0], last=keys[-1],
                                                 max_pages=-(-len(keys) // SOURCES_PER_PAGE))
        except InconsistentListingError as exc:
            # A listing the server cannot page consistently says nothing (I8); the HEADs it would have saved say
            # the same facts, and this commit (or its recovery) must not depend on that server's paging.
            log.warning("job %s: checking %d sources under s3://%s/%s with a HEAD each: %s", self.job_id, len(keys),
                        self.destination.bucket, prefix, exc)
            return {}
        etags = {obj.key: obj.etag for obj in listed.objects}
        return {key: etags.get(key) for key in keys if listed.covers(key)}

    def undo_skipped(self, placed_keys: list[str]) -> None:
        """Delete the merged files of skipped directories that were completed before (``placed_keys``)."""
        # (A merged file whose sources are all there but which is neither pending nor visible is not taken for
        # one an overwrite deleted: it may be a complete of the interrupted run still on its way. The commit
        # fails as for any job, and a later recover finishes it.)
        if placed_keys:
            self.store.delete_objects(self.destination.bucket, placed_keys)
