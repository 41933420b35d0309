"""The job commit's steps in order, for a first commit and for ``recover`` alike; the steps themselves live in
the modules beside this one (journal, placing, replacing, cleanup)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence

from ...errors import CommitStateUnknownError, JobStateError
from ...modes import CommitMode, CommitOutcome
from ...pool import ProgressHook
from ...store.s3 import S3Store
from .. import faults
from ..layout import Destination, JobPaths
from ..records.job import CommitJournal, DeleteEntry, JobDescriptor, MergedFile
from ..records.manifest import PendingUpload, StagedFile, TaskManifest, TaskResult
from ..records.success import PartitionStats, SuccessData
from .cleanup import JobCleanup
from .context import CommitContext
from .journal import build_journal, validate_winners, winners_by_task, write_journal
from .manifests import ManifestReader
from .placing import Placer, directory_of
from .replacing import Replacer
from .reports import AbortReport, CommitReport

DEFAULT_COMMIT_THREADS = 32


def _noop(_step: str, _done: int, _total: int | None) -> None:
    pass


class JobCommitter:
    """Commit, abort and finish one job of one destination. Holds no state between calls but its settings.

    ``threads``: the commit's requests in flight (0: all on the caller's thread, for deterministic tests);
    ``processes`` > 1 spreads the completes over that many worker processes.
    """

    def __init__(self, store: S3Store, destination: Destination, job_id: str, *,
                 threads: int = DEFAULT_COMMIT_THREADS, progress: ProgressHook | None = None, processes: int = 1):
        self.store = store
        self.destination = destination
        self.job_id = job_id
        self.paths = JobPaths(destination, job_id)
        self.threads = max(0, threads)
        self.processes = max(1, processes)
        self.progress = progress or _noop
        self.manifests = ManifestReader(store, destination, job_id)

    # ------------------------------------------------------------ commit
    def commit(self, descriptor: JobDescriptor, results: Sequence[TaskResult], *, ignored: bool = False,
               extra_timings: dict[str, float] | None = None, delete: Sequence[DeleteEntry] = (),
               merged: Sequence[MergedFile] = ()) -> CommitReport:
        """``delete`` names objects (pinned by ETag) to remove once every new file is complete: the sources
        of a compaction. ``merged`` names files merged from the winners' staged files (a commit-time merge):
        they are completed instead of moving those staged files in."""
        t0 = time.monotonic()
        timings: dict[str, float] = dict(extra_timings or {})
        by_task = winners_by_task(results, self.paths)
        with CommitContext(self.threads) as context:
            if ignored:
                aborted, _deleted = JobCleanup(self.store, self.destination, self.job_id, context).discard_all()
                mode = CommitMode.of(descriptor.mode, descriptor.partition_overwrite)
                return CommitReport(self.job_id, self.destination.uri, mode, CommitOutcome.NOT_COMMITTED,
                                    ignored=True, aborted_uploads=aborted)
            validate_winners(by_task, self.manifests, context, merged=merged)
            timings["validate"] = time.monotonic() - t0
            journal = build_journal(descriptor, self.destination, by_task, delete=delete, merged=merged)
            if journal.replace:
                t = time.monotonic()
                Replacer(self.store, self.destination, self.job_id, context, self.progress).check_scope_listable(
                    journal.replace)
                timings["check_scope"] = time.monotonic() - t
            write_journal(self.store, self.destination, journal)
            self.progress("journal", 1, 1)
            inline = {r.manifest_key: r.manifest for r in by_task.values() if r.manifest is not None}
            try:
                faults.checkpoint("commit.after_journal")
                return self._finish(journal, context, inline=inline, timings=timings, started=t0)
            except CommitStateUnknownError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure after the journal leaves the outcome unknown
                raise CommitStateUnknownError(
                    f"job {self.job_id}: the commit failed after its journal was written ({exc}). Some files may be "
                    f"visible; do not clean up. Run `mpcommit jobs recover {self.destination.uri} --job {self.job_id}`.",
                    job_id=self.job_id, destination=self.destination.uri,
                ) from exc

    # ------------------------------------------------------------ finish (commit and recover)
    def finish(self, journal: CommitJournal) -> CommitReport:
        """Carry out a journal (``recover``): complete winners, replace old data, abort leftovers, write _SUCCESS,
        clean up."""
        with CommitContext(self.threads) as context:
            return self._finish(journal, context)

    def _finish(self, journal: CommitJournal, context: CommitContext, *,
                inline: dict[str, TaskManifest | None] | None = None, timings: dict[str, float] | None = None,
                started: float | None = None) -> CommitReport:
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
        replacer = Replacer(self.store, self.destination, self.job_id, context, self.progress)

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
        skipped_placed: list[str] = []

        def manifests() -> Iterator[TaskManifest]:
            return self.manifests.stream(journal.winners, inline, context)

        merged_sources = {key for m in journal.merged for key in m.sources}

        def uploads() -> Iterator[PendingUpload | StagedFile]:
            for m in manifests():
                yield from m.uploads
                # Staged files merged at commit time are not moved in: their merged file is completed instead.
                yield from (f for f in m.staged if f.key not in merged_sources)
            for merged_file in journal.merged:
                yield merged_file.upload

        sources: list[str] | None = None
        skip: frozenset[str] = frozenset()
        if journal.delete:
            sources, skip = replacer.check_sources(journal, manifests)

        def account(item: PendingUpload | StagedFile) -> None:
            nonlocal total_bytes, rows_total
            if skip and directory_of(item.key) in skip:
                skipped_placed.append(item.key)  # completed by an earlier run: undo_skipped deletes it
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

        # An overwrite's first look at the scope it replaces only reads (see Replacer.replace_old): it runs
        # beside the completes instead of after them, one listing pass fewer on the commit's critical path.
        first_look = replacer.look_beside(journal, cutoff)
        placer = Placer(self.store, self.destination, self.job_id, skip_directories=skip)
        placer.place_all(uploads(), account, context, processes=self.processes if sources is None else 1)
        if sources is not None:
            replacer.undo_skipped(skipped_placed)
        timings["complete"] = time.monotonic() - t
        self.progress("completed", len(filenames), len(filenames))

        t = time.monotonic()
        deleted = replacer.replace_old(journal, cutoff, sources, first_look=first_look.result() if first_look else None,
                                       skip_directories=skip)
        timings["replace"] = time.monotonic() - t

        t = time.monotonic()
        cleanup = JobCleanup(self.store, self.destination, self.job_id, context)
        aborted = cleanup.abort_leftovers(journal, winners)
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
        cleanup.remove_records(journal_first=True)
        timings["cleanup"] = time.monotonic() - t
        timings["total"] = time.monotonic() - t0
        return CommitReport(
            job_id=self.job_id, uri=self.destination.uri, mode=mode, outcome=CommitOutcome.COMMITTED,
            filenames=success.filenames, bytes=success.bytes, rows=success.rows, partitions=success.partitions,
            timings=timings, aborted_uploads=aborted, deleted_objects=deleted,
            partition_stats=dict(success.partition_stats or {}),
        )

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
        """Abort every upload of the job and remove its records: (uploads aborted, records deleted)."""
        with CommitContext(self.threads) as context:
            return JobCleanup(self.store, self.destination, self.job_id, context).discard_all()
