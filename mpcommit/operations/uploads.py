"""Pending multipart uploads under a destination: list them, price them, and abort the orphans safely.

Uncompleted multipart uploads are invisible in object listings yet billed by the byte until someone aborts
them. Crashed executors and dead drivers leave them behind. This module is the engine-neutral library under
``mpcommit uploads list|abort`` and ``scripts/cleanup_orphaned_uploads.py``:

* :func:`list_uploads` lists every pending upload under a scope, across all pages, with its age, part count
  and bytes held (from ListParts) and the job that owns it (every mpcommit key carries its job id).
* :func:`cleanup` selects uploads by age or by job and aborts them. It never aborts an upload of a *live* job
  unless that job is named (invariant I6): a job whose records say it is committing is never touched (it must
  be recovered, not cleaned), and a job that is still writing is live while any of its records or uploads is
  younger than the age threshold. The S3A committer's ``abort.pending.uploads`` cancels other jobs' work; this
  must not.

Scopes are exact by default: ``s3://b/data1`` means the keys under ``data1/``, never ``data10/...``. A
caller may ask for the raw string prefix instead (:meth:`UploadScope.parse` with ``string_prefix=True``).
Jobs are found by their records wherever they are (the nearest ancestor of the upload keys that holds
``_temporary/mpcommit/JOBID/``), so a scope that is a partition of a table, or a folder holding several
tables, protects live jobs just the same; their states are read by :mod:`mpcommit.protocol.inventory`, the
same rules ``jobs list|recover`` use.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timezone
from enum import Enum
from typing import Any

from ..errors import JobStateError, MpcommitError, NoSuchUploadError, OperationCancelledError, UsageError
from ..modes import JobState
from ..protocol.commit import JobCommitter
from ..protocol.inventory import JobStatus, find_owning_jobs
from ..protocol.layout import check_job_id, owner_of_key, parse_uri
from ..units import epoch_ms, short_duration
from ..pool import ProgressHook, run_bounded
from ..store.s3 import S3Store, UploadInfo

log = logging.getLogger(__name__)

DEFAULT_THREADS = 16


# ---------------------------------------------------------------- values
@dataclass(frozen=True)
class UploadScope:
    """Where to look: a bucket and the key prefix handed to ListMultipartUploads.

    Exact scopes (the default) end in ``/`` so that ``s3://b/data1`` never reaches ``data10/``; a string
    scope uses the URI's path as it is.
    """

    bucket: str
    prefix: str
    string_prefix: bool = False

    @classmethod
    def parse(cls, uri: str, *, string_prefix: bool = False) -> "UploadScope":
        destination = parse_uri(uri)
        if not string_prefix:
            return cls(destination.bucket, destination.root)
        # The raw path after the bucket, as typed (parse_uri has already refused what cannot be a prefix).
        raw = uri.split("://", 1)[1].partition("/")[2]
        return cls(destination.bucket, raw, string_prefix=True)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def describe(self) -> str:
        what = "keys starting with" if self.string_prefix else "keys under"
        return f"{what} {self.uri}"


@dataclass(frozen=True)
class InProgressUpload(UploadInfo):
    """A pending upload as the store lists it (:class:`~mpcommit.store.s3.UploadInfo`), with the job its key
    names and, once measured, what it holds."""

    job_id: str | None = None
    #: Filled in by ListParts (:func:`measure`); None until then.
    parts: int | None = None
    bytes: int | None = None

    def age_seconds(self, now: float | None = None) -> float | None:
        """Seconds since the upload was initiated (None when the store did not say)."""
        if self.initiated is None:
            return None
        return max(0.0, (time.time() if now is None else now) - epoch_ms(self.initiated) / 1000)

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        age = self.age_seconds(now)
        return {
            "key": self.key,
            "uploadId": self.upload_id,
            "initiated": self.initiated.astimezone(timezone.utc).isoformat() if self.initiated else None,
            "ageSeconds": round(age, 3) if age is not None else None,
            "parts": self.parts,
            "bytes": self.bytes,
            "jobId": self.job_id,
        }


@dataclass(frozen=True)
class ProtectedUpload:
    upload: InProgressUpload
    reason: str


@dataclass(frozen=True)
class AbortPlan:
    """Which uploads an abort would touch, and which it leaves alone and why."""

    selected: tuple[InProgressUpload, ...]
    protected: tuple[ProtectedUpload, ...] = ()
    #: Uploads in the scope that are not old enough (or of another job than the named one).
    not_matched: int = 0

    @property
    def selected_bytes(self) -> int:
        return sum(u.bytes or 0 for u in self.selected)


class AbortOutcome(str, Enum):
    ABORTED = "aborted"
    #: No longer pending when we got to it: completed or aborted by someone else (another cleaner ran).
    VANISHED = "vanished"
    WOULD_ABORT = "would_abort"  # dry run
    #: Its job started committing after the plan was made: left for `jobs recover`.
    SKIPPED = "skipped"
    FAILED = "failed"
    #: Not attempted: the run was cancelled or stopped at the first failure before its turn.
    NOT_DONE = "not_done"


@dataclass(frozen=True)
class AbortResult:
    upload: InProgressUpload
    outcome: AbortOutcome
    detail: str = ""


@dataclass
class CleanupReport:
    """What :func:`cleanup` found, aborted, left alone, and the bytes it freed."""

    scope: UploadScope
    older_than: float | None
    job_id: str | None
    dry_run: bool
    listed: int = 0
    plan: AbortPlan | None = None
    results: list[AbortResult] = field(default_factory=list)
    cancelled: bool = False
    seconds: float = 0.0

    def _count(self, outcome: AbortOutcome) -> list[AbortResult]:
        return [r for r in self.results if r.outcome is outcome]

    @property
    def aborted(self) -> list[AbortResult]:
        return self._count(AbortOutcome.ABORTED)

    @property
    def vanished(self) -> list[AbortResult]:
        return self._count(AbortOutcome.VANISHED)

    @property
    def failed(self) -> list[AbortResult]:
        return self._count(AbortOutcome.FAILED)

    @property
    def skipped(self) -> list[AbortResult]:
        return self._count(AbortOutcome.SKIPPED)

    @property
    def not_done(self) -> list[AbortResult]:
        return self._count(AbortOutcome.NOT_DONE)

    @property
    def bytes_freed(self) -> int:
        return sum(r.upload.bytes or 0 for r in self.aborted)

    @property
    def ok(self) -> bool:
        """True when everything selected was dealt with: no failure, not cancelled."""
        return not self.failed and not self.cancelled and not self.not_done

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        plan = self.plan or AbortPlan(())
        return {
            "uri": self.scope.uri,
            "stringPrefix": self.scope.string_prefix,
            "olderThanSeconds": self.older_than,
            "jobId": self.job_id,
            "dryRun": self.dry_run,
            "listed": self.listed,
            "selected": len(plan.selected),
            "selectedBytes": plan.selected_bytes,
            "aborted": len(self.aborted),
            "bytesFreed": self.bytes_freed,
            "vanished": len(self.vanished),
            "skipped": len(self.skipped),
            "failed": len(self.failed),
            "notDone": len(self.not_done),
            "protected": [
                {**p.upload.to_json(now), "reason": p.reason} for p in plan.protected
            ],
            "cancelled": self.cancelled,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "results": [
                {**r.upload.to_json(now), "outcome": r.outcome.value, **({"detail": r.detail} if r.detail else {})}
                for r in self.results
            ],
        }


# ---------------------------------------------------------------- listing
def list_uploads(store: S3Store, scope: UploadScope, *, older_than: float | None = None, sizes: bool = True,
                 threads: int = DEFAULT_THREADS, cancel: threading.Event | None = None,
                 progress: ProgressHook | None = None, now: float | None = None) -> list[InProgressUpload]:
    """Every pending upload in ``scope`` (all pages), oldest first within a key; ``older_than`` (seconds) keeps
    only uploads at least that old. With ``sizes``, each carries its parts and bytes (one ListParts each);
    an upload that vanished meanwhile is left out. Raises OperationCancelledError when ``cancel`` is set."""
    found: list[InProgressUpload] = []
    listed = store.list_multipart_uploads(scope.bucket, scope.prefix)
    # Ages by the store's clock, which stamped the uploads (a host whose clock runs ahead would see every
    # upload as older than it is); learnt from the listing's own answer.
    now = store.server_time(scope.bucket) if now is None else now
    for info in listed:
        if cancel is not None and cancel.is_set():
            raise OperationCancelledError(f"cancelled after listing {len(found)} uploads; nothing was changed")
        upload = InProgressUpload(info.key, info.upload_id, info.initiated, owner_of_key(info.key).job_id)
        if older_than is not None:
            age = upload.age_seconds(now)
            if age is None or age < older_than:
                continue
        found.append(upload)
        if progress and len(found) % 100 == 0:
            progress("list", len(found), None)
    if progress:
        progress("list", len(found), len(found))
    if not sizes:
        return found
    measured, complete = measure(store, scope.bucket, found, threads=threads, cancel=cancel, progress=progress)
    if not complete:
        raise OperationCancelledError(f"cancelled while measuring {len(found)} uploads; nothing was changed")
    return [u for u in measured if u is not None]


def measure(store: S3Store, bucket: str, uploads: Sequence[InProgressUpload], *, threads: int = DEFAULT_THREADS,
            cancel: threading.Event | None = None, progress: ProgressHook | None = None,
            ) -> tuple[list[InProgressUpload | None], bool]:
    """Parts and bytes of each upload (ListParts, in parallel). The list keeps the input order, with None for
    an upload that is no longer pending; the flag is False when cancelled before every upload was measured
    (unmeasured ones are returned as they were)."""
    out: list[InProgressUpload | None] = list(uploads)

    def one(index: int) -> InProgressUpload | None:
        u = uploads[index]
        try:
            parts = list(store.list_parts(bucket, u.key, u.upload_id))
        except NoSuchUploadError:
            return None
        return replace(u, parts=len(parts), bytes=sum(size for _n, size, _e in parts))

    def keep(index: int, measured: InProgressUpload | None) -> None:
        out[index] = measured

    complete = run_bounded(one, range(len(uploads)), threads=threads, on_result=keep, cancel=cancel,
                           progress=progress, phase="size", total=len(uploads))
    return out, complete


# ---------------------------------------------------------------- selection (pure)
def plan_abort(uploads: Iterable[InProgressUpload], jobs: dict[str, JobStatus], *, older_than: float | None,
               job_id: str | None, now: float | None = None) -> AbortPlan:
    """Choose what to abort: uploads at least ``older_than`` seconds old, or of the job ``job_id``, or both.

    Never selected: an upload whose job is committing (``jobs recover`` must finish it, or its data is lost),
    and, unless its job is the named one, an upload of a job that is still writing and was active within
    ``older_than``. An upload whose age is unknown is never selected by age.
    """
    if older_than is None and job_id is None:
        raise UsageError("refusing to abort every upload: give an age (--older-than 7d) or a job (--job ID)")
    if older_than is not None and older_than < 0:
        raise UsageError("the age threshold cannot be negative")
    now = time.time() if now is None else now
    selected: list[InProgressUpload] = []
    protected: list[ProtectedUpload] = []
    not_matched = 0
    for u in uploads:
        if job_id is not None and u.job_id != job_id:
            not_matched += 1
            continue
        if older_than is not None:
            age = u.age_seconds(now)
            if age is None or age < older_than:
                not_matched += 1
                continue
        job = jobs.get(u.job_id) if u.job_id else None
        if job is not None:
            if job.state is JobState.COMMITTING:
                protected.append(ProtectedUpload(u, (
                    f"job {job.job_id} is committing: finish it with `mpcommit jobs recover {job.destination.uri} "
                    f"--job {job.job_id}`")))
                continue
            if job.state is JobState.WRITING and u.job_id != job_id:
                idle = job.idle_seconds(now)
                threshold = older_than if older_than is not None else float("inf")
                if idle is None or idle < threshold:
                    active = f"active {short_duration(idle)} ago" if idle is not None else "activity unknown"
                    protected.append(ProtectedUpload(u, f"job {job.job_id} may still be writing ({active})"))
                    continue
        selected.append(u)
    return AbortPlan(tuple(selected), tuple(protected), not_matched)


# ---------------------------------------------------------------- aborting
def abort_uploads(store: S3Store, bucket: str, uploads: Sequence[InProgressUpload], jobs: dict[str, JobStatus] | None = None,
                  *, threads: int = DEFAULT_THREADS, cancel: threading.Event | None = None,
                  progress: ProgressHook | None = None,
                  on_result: Callable[[AbortResult], None] | None = None) -> tuple[list[AbortResult], bool]:
    """Abort ``uploads`` in parallel. Returns a result per upload and False when cancelled.

    An upload that is no longer pending is VANISHED, not an error (another cleaner, or its job, got there
    first). Before the first abort of a job that has records, the job's commit is stopped for good: its journal
    key is claimed for a rollback (the same barrier ``jobs abort`` and ``recover`` use), so that it can never
    begin committing once some of its uploads are gone; a job that began committing meanwhile keeps every
    upload (SKIPPED); a committed job's leftovers are simply aborted. Once its uploads here are aborted, a job
    stopped so has its rollback finished: its other uploads,
    anywhere under its destination, are aborted and its records removed (a job that can never commit is worth
    nothing, and its records would otherwise stay for ever). The first real failure stops further aborts (the
    rest are NOT_DONE): failures such as AccessDenied are rarely limited to one upload.
    """
    jobs = jobs or {}
    results: dict[int, AbortResult] = {}
    stopped: dict[str, bool] = {}
    stopped_lock = threading.Lock()
    failed = threading.Event()

    def committer_of(job: JobStatus) -> JobCommitter:
        return JobCommitter(store, job.destination, job.job_id, threads=0)

    def stop_commit(job: JobStatus) -> bool:
        """Whether the job's commit is stopped (by this call or before); False when it is committing."""
        if job.state is JobState.COMMITTED:
            return True  # committed already: what is left of it are losers' uploads and records
        with stopped_lock:
            if job.job_id not in stopped:
                try:
                    committer_of(job).stop_commit(reason="its uploads were aborted as orphans")
                    stopped[job.job_id] = True
                except JobStateError:
                    stopped[job.job_id] = False
            return stopped[job.job_id]

    def one(index: int) -> AbortResult:
        u = uploads[index]
        job = jobs.get(u.job_id) if u.job_id else None
        try:
            if job is not None and not stop_commit(job):
                return AbortResult(u, AbortOutcome.SKIPPED,
                                   f"job {job.job_id} started committing: run `mpcommit jobs recover {job.destination.uri}`")
            if store.abort_multipart_upload(bucket, u.key, u.upload_id):
                return AbortResult(u, AbortOutcome.ABORTED)
            return AbortResult(u, AbortOutcome.VANISHED, "no longer pending (completed, or aborted by someone else)")
        except MpcommitError as exc:
            failed.set()
            return AbortResult(u, AbortOutcome.FAILED, " ".join(str(exc).split()))

    def keep(index: int, result: AbortResult) -> bool:
        results[index] = result
        if on_result:
            on_result(result)
        return result.outcome is not AbortOutcome.FAILED

    complete = run_bounded(one, range(len(uploads)), threads=threads, on_result=keep, cancel=cancel,
                           progress=progress, phase="abort", total=len(uploads))
    if complete and not failed.is_set():
        for job_id in sorted(j for j, ok in stopped.items() if ok):
            try:
                committer_of(jobs[job_id]).rollback(reason="its uploads were aborted as orphans")
            except MpcommitError as exc:
                log.warning("job %s: its uploads were aborted but finishing its rollback failed (%s); "
                            "`mpcommit jobs recover --job %s` finishes it", job_id, exc, job_id)
    ordered = []
    for index, u in enumerate(uploads):
        if index in results:
            ordered.append(results[index])
        else:
            why = "stopped after a failure" if failed.is_set() else "cancelled before its turn"
            ordered.append(AbortResult(u, AbortOutcome.NOT_DONE, why))
    return ordered, complete or failed.is_set()


# ---------------------------------------------------------------- the whole cleanup
def cleanup(
    store: S3Store,
    scope: UploadScope,
    *,
    older_than: float | None = None,
    job_id: str | None = None,
    dry_run: bool = False,
    threads: int = DEFAULT_THREADS,
    cancel: threading.Event | None = None,
    progress: ProgressHook | None = None,
    confirm: Callable[[AbortPlan], bool] | None = None,
    on_result: Callable[[AbortResult], None] | None = None,
) -> CleanupReport:
    """List the uploads in ``scope``, select by age and/or job (see :func:`plan_abort`), measure what is
    selected, and abort it unless ``dry_run`` or ``confirm(plan)`` says no.

    Cancelling (``cancel.set()``, e.g. on Ctrl-C) stops cleanly: nothing more is started, what is in flight
    finishes, and the report says what was done (``cancelled=True``). Raises UsageError without an age or a
    job, and JobStateError when the named job is committing.
    """
    if older_than is None and job_id is None:
        raise UsageError("refusing to abort every upload: give an age (--older-than 7d) or a job (--job ID)")
    if job_id is not None:
        check_job_id(job_id)
    t0 = time.monotonic()
    report = CleanupReport(scope, older_than, job_id, dry_run)
    try:
        listed = list_uploads(store, scope, sizes=False, cancel=cancel, progress=progress)
        report.listed = len(listed)
        # Jobs are looked up after the uploads were listed: a job's records are written before its first
        # upload, so every job owning a listed upload is seen if it is alive.
        jobs = find_owning_jobs(store, scope.bucket, listed, threads=threads, cancel=cancel, progress=progress)
    except OperationCancelledError:
        report.cancelled = True
        report.seconds = time.monotonic() - t0
        return report
    named = jobs.get(job_id) if job_id else None
    if named is not None and named.state is JobState.COMMITTING:
        raise JobStateError(
            f"job {job_id} is committing: its pending uploads are the data being committed and must not be "
            f"aborted. Finish it with `mpcommit jobs recover {named.destination.uri} --job {job_id}`."
        )
    now = store.server_time(scope.bucket)
    plan = plan_abort(listed, jobs, older_than=older_than, job_id=job_id, now=now)
    measured, complete = measure(store, scope.bucket, plan.selected, threads=threads, cancel=cancel, progress=progress)
    gone = [AbortResult(u, AbortOutcome.VANISHED, "no longer pending (completed, or aborted by someone else)")
            for u, m in zip(plan.selected, measured) if m is None]
    plan = replace(plan, selected=tuple(m for m in measured if m is not None))
    report.plan = plan
    report.results.extend(gone)
    if on_result is not None:
        for result in gone:
            on_result(result)
    if not complete:
        report.cancelled = True
        report.results.extend(AbortResult(u, AbortOutcome.NOT_DONE, "cancelled before its turn") for u in plan.selected)
        report.seconds = time.monotonic() - t0
        return report
    if dry_run:
        report.results.extend(AbortResult(u, AbortOutcome.WOULD_ABORT) for u in plan.selected)
        report.seconds = time.monotonic() - t0
        return report
    if plan.selected and confirm is not None and not confirm(plan):
        report.results.extend(AbortResult(u, AbortOutcome.NOT_DONE, "not confirmed") for u in plan.selected)
        report.seconds = time.monotonic() - t0
        return report
    results, finished = abort_uploads(store, scope.bucket, plan.selected, jobs, threads=threads, cancel=cancel,
                                      progress=progress, on_result=on_result)
    report.results.extend(results)
    report.cancelled = not finished
    report.seconds = time.monotonic() - t0
    return report
