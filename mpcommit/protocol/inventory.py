"""The jobs under a destination, as their records tell them: which exist, their state, age and last sign of
life, and the job a key belongs to.

The one place these rules live. ``jobs list|recover`` (:mod:`.recovery`), ``uploads list|abort``
(:mod:`mpcommit.operations.uploads`) and the cleanup script all decide from what this module reads, so that a
job that one of them treats as committing or live is treated so by every other (invariant I6: nothing
touches another job's uploads). The rules:

* a job exists while it has records under ``ROOT_temporary/mpcommit/JOBID/``; a key belongs to the job its
  name or hidden prefix carries (:func:`~.layout.job_id_of_key`, :func:`~.layout.owner_of_key`), never to a
  prefix;
* a journal means COMMITTING (``recover`` finishes it; nothing may clean it up), a rollback record at the
  journal key ROLLING_BACK (it can never commit; ``recover`` ends the rollback); a ``_SUCCESS`` that names
  the job means COMMITTED (only its records are left); otherwise the job may still be WRITING;
* its age runs from its descriptor (else its oldest record), its idle time from its newest sign of life: the
  descriptor, any record (its driver's heartbeat among them), any of its pending uploads anywhere under its
  destination -- not only those in the scope a tool was given.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..errors import ManifestError, NoSuchKeyError, OperationCancelledError
from ..modes import JobState
from ..units import epoch_ms
from ..pool import ProgressHook, run_bounded
from ..options import OrderSettings
from ..store.s3 import ObjectInfo, S3Store, UploadInfo
from .layout import Destination, JobPaths, job_id_of_hidden_key, job_id_of_key, owner_of_key, table_of
from .records.job import CommitJournal, JobDescriptor, JobRollback, read_claim
from .records.success import SuccessData

if TYPE_CHECKING:
    from .order import TableOrder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobStatus:
    """What a job's records say about it."""

    job_id: str
    destination: Destination
    state: JobState
    records: int
    #: When the job was created (ms): its descriptor's time, else its oldest record's.
    created_ms: int | None
    #: The newest sign of life (ms): its descriptor, any record, any of its pending uploads that were seen.
    last_activity_ms: int | None
    #: Its pending uploads under the destination; None where they were not counted.
    pending_uploads: int | None = None
    pending_bytes: int | None = None
    mode: str | None = None
    purpose: str | None = None
    #: What held its journal key when its state was judged -- a COMMITTING job's journal, a ROLLING_BACK one's
    #: rollback record -- and the ETag it was read with, so that ``recover`` acts on the record that decided the
    #: state without reading it again; None where the key held nothing readable.
    claim: CommitJournal | JobRollback | None = field(default=None, compare=False, repr=False)
    claim_etag: str | None = field(default=None, compare=False, repr=False)

    def age_seconds(self, now: float | None = None) -> float | None:
        return _seconds_since(self.created_ms, now)

    def idle_seconds(self, now: float | None = None) -> float | None:
        return _seconds_since(self.last_activity_ms, now)


def _seconds_since(ms: int | None, now: float | None) -> float | None:
    if ms is None:
        return None
    return max(0.0, (time.time() if now is None else now) - ms / 1000)


def read_success(store: S3Store, destination: Destination) -> SuccessData | None:
    """The destination's ``_SUCCESS``, or None when there is none or it cannot be read as one."""
    try:
        return SuccessData.from_bytes(store.get_object(destination.bucket, destination.success_key),
                                      where=f"s3://{destination.bucket}/{destination.success_key}")
    except (NoSuchKeyError, ManifestError):
        return None


class _SuccessFiles:
    """Each destination's ``_SUCCESS``, read once at most (threads that race for one read it twice)."""

    def __init__(self, store: S3Store):
        self._store = store
        self._read: dict[Destination, SuccessData | None] = {}

    def of(self, destination: Destination) -> SuccessData | None:
        if destination not in self._read:
            self._read[destination] = read_success(self._store, destination)
        return self._read[destination]


def _status(store: S3Store, destination: Destination, job_id: str, records: Sequence[ObjectInfo], *,
            successes: _SuccessFiles, uploads: Sequence[UploadInfo], pending_uploads: int | None) -> JobStatus:
    paths = JobPaths(destination, job_id)
    keys = {o.key for o in records}
    descriptor = None
    if paths.descriptor in keys:
        try:
            descriptor = JobDescriptor.from_bytes(store.get_object(destination.bucket, paths.descriptor),
                                                  where=paths.descriptor, destination=destination, job_id=job_id)
        except (ManifestError, NoSuchKeyError) as exc:
            log.warning("unreadable job descriptor s3://%s/%s: %s", destination.bucket, paths.descriptor, exc)
    claim: CommitJournal | JobRollback | None = None
    claim_etag: str | None = None
    if paths.journal in keys:
        state, claim, claim_etag = _claim_state(store, destination, job_id)
    else:
        success = successes.of(destination)
        state = JobState.COMMITTED if success is not None and success.job_id == job_id else JobState.WRITING
    record_stamps = [epoch_ms(o.last_modified) for o in records if o.last_modified is not None]
    upload_stamps = [epoch_ms(u.initiated) for u in uploads if u.initiated is not None]
    created = descriptor.created_ms if descriptor else min(record_stamps, default=None)
    signs_of_life = record_stamps + upload_stamps + ([descriptor.created_ms] if descriptor else [])
    return JobStatus(
        job_id=job_id, destination=destination, state=state, records=len(records), created_ms=created,
        last_activity_ms=max(signs_of_life, default=None), pending_uploads=pending_uploads,
        mode=descriptor.mode.value if descriptor else None, purpose=descriptor.purpose.value if descriptor else None,
        claim=claim, claim_etag=claim_etag,
    )


def _claim_state(store: S3Store, destination: Destination,
                 job_id: str) -> tuple[JobState, CommitJournal | JobRollback | None, str | None]:
    """COMMITTING or ROLLING_BACK, from what holds the job's journal key (unreadable: COMMITTING, never cleaned),
    with that record and its ETag (None, None: gone meanwhile, or unreadable)."""
    paths = JobPaths(destination, job_id)
    try:
        data, etag = store.get_object_and_etag(destination.bucket, paths.journal)
        claim = read_claim(data, where=paths.journal, destination=destination, job_id=job_id)
    except NoSuchKeyError:
        return JobState.COMMITTING, None, None  # gone meanwhile: the next look tells
    except ManifestError:
        return JobState.COMMITTING, None, None
    return (JobState.ROLLING_BACK if isinstance(claim, JobRollback) else JobState.COMMITTING), claim, etag


def committing_jobs(store: S3Store, destination: Destination) -> set[str]:
    """Jobs of ``destination`` whose commit is in flight or was interrupted: those with a commit journal."""
    out = set()
    for obj in store.list_objects(destination.bucket, destination.hidden_root):
        job_id = job_id_of_hidden_key(destination, obj.key)
        if job_id is not None and obj.key == JobPaths(destination, job_id).journal:
            out.add(job_id)
    return out


# ---------------------------------------------------------------- the jobs of one destination
def list_jobs(store: S3Store, destination: Destination, *, with_bytes: bool = False) -> list[JobStatus]:
    """Jobs that have records under the destination's hidden prefix, with their state and pending uploads
    (their bytes too, one ListParts per upload, ``with_bytes``)."""
    records: dict[str, list[ObjectInfo]] = defaultdict(list)
    for obj in store.list_objects(destination.bucket, destination.hidden_root):
        job_id = job_id_of_hidden_key(destination, obj.key)
        if job_id is not None:
            records[job_id].append(obj)
    uploads: dict[str, list[UploadInfo]] = defaultdict(list)
    for u in store.list_multipart_uploads(destination.bucket, destination.root):
        owner = job_id_of_key(destination, u.key)
        if owner in records:
            uploads[owner].append(u)
    successes = _SuccessFiles(store)
    out = []
    for job_id, objs in sorted(records.items()):
        status = _status(store, destination, job_id, objs, successes=successes, uploads=uploads[job_id],
                         pending_uploads=len(uploads[job_id]))
        if with_bytes:
            held = sum(size for u in uploads[job_id]
                       for _n, size, _e in store.list_parts(destination.bucket, u.key, u.upload_id))
            status = replace(status, pending_bytes=held)
        out.append(status)
    return out


def list_table_jobs(store: S3Store, destination: Destination, *, order: OrderSettings | None = None,
                    with_bytes: bool = False, table_order: TableOrder | None = None) -> list[JobStatus]:
    """The jobs of a destination (:func:`list_jobs`), then those of the partition destinations inside it (a job
    given ``s3://b/t/dt=1`` keeps its records under that URI): the ones holding a place in the table's commit
    order -- open (interrupted in their commit) or ended and not yet collected (a commit interrupted in its
    cleanup leaves records behind an ended place) -- and the ones whose pending uploads lie under this destination
    (still writing). What ``jobs list`` shows is what ``jobs recover`` acts on. ``table_order``: the table's
    order as the caller reads it (its entries read here are then cached there), else a new one."""
    from .order import TableOrder

    found = list_jobs(store, destination, with_bytes=with_bytes)
    seen = {s.job_id for s in found}
    table = table_of(destination)
    inside = table.path_of(destination)
    elsewhere: dict[Destination, set[str]] = defaultdict(set)
    view_order = table_order if table_order is not None else TableOrder(store, table, order)
    view = view_order.view()
    # Every place the order holds: the entries are read side by side once, and one listing per partition
    # destination named in them finds the records left there.
    for entry in view_order.entries(view_order.read_ahead(view.held)):
        if entry.job_id in seen or entry.destination == inside:
            continue
        if not inside or entry.destination.startswith(f"{inside}/"):
            elsewhere[table.destination(entry.destination)].add(entry.job_id)
    for other, job_ids in sorted(elsewhere.items()):
        for status in list_jobs(store, other, with_bytes=with_bytes):
            if status.job_id in job_ids and status.job_id not in seen:
                found.append(status)
                seen.add(status.job_id)
    strays = [u for u in store.list_multipart_uploads(destination.bucket, destination.root)
              if (owner_of_key(u.key).job_id or "") not in seen | {""}]
    if strays:  # still writing, under a partition's own URI: found from its uploads' keys upwards
        for job_id, status in sorted(find_owning_jobs(store, destination.bucket, strays, threads=8).items()):
            if job_id not in seen and destination.contains(status.destination.root):
                found.append(status)
                seen.add(job_id)
    return found


# ---------------------------------------------------------------- the jobs owning some uploads
def find_owning_jobs(store: S3Store, bucket: str, uploads: Iterable[UploadInfo], *, threads: int,
                     cancel: threading.Event | None = None,
                     progress: ProgressHook | None = None) -> dict[str, JobStatus]:
    """For each job id that ``uploads`` (listed under any prefix of ``bucket``) carry, the job's status if it
    still has records; a job without records (committed, aborted, or its records removed) is left out.

    A job's destination is an ancestor of all its keys: it is probed from the nearest (the keys' common
    directory) upwards, one small listing per level, until ``_temporary/mpcommit/JOBID/`` is found. Jobs are
    probed in parallel. Raises OperationCancelledError when ``cancel`` is set before the end.
    """
    by_job: dict[str, list[UploadInfo]] = defaultdict(list)
    root_hint: dict[str, str] = {}
    for u in uploads:
        owner = owner_of_key(u.key)
        if owner.job_id is None:
            continue
        by_job[owner.job_id].append(u)
        if owner.root is not None:
            root_hint[owner.job_id] = owner.root
    successes = _SuccessFiles(store)

    def probe(job_id: str) -> tuple[Destination, list[ObjectInfo]] | None:
        own = by_job[job_id]
        candidates = [root_hint[job_id]] if job_id in root_hint else _ancestors(_common_directory(u.key for u in own))
        for root in candidates:
            destination = Destination(bucket, root.rstrip("/"))
            records = list(store.list_objects(bucket, JobPaths(destination, job_id).root))
            if records:
                return destination, records
        return None

    found: dict[str, tuple[Destination, list[ObjectInfo]]] = {}

    def keep(job_id: str, where: tuple[Destination, list[ObjectInfo]] | None) -> None:
        if where is not None:
            found[job_id] = where

    if not run_bounded(probe, sorted(by_job), threads=threads, on_result=keep, cancel=cancel,
                       progress=progress, phase="jobs", total=len(by_job)):
        raise OperationCancelledError("cancelled while reading job records; nothing was changed")
    # A job's sign of life is any of its uploads under its whole destination, not only those in the scope given:
    # a cleanup of one partition must see that the job wrote into another a second ago. One listing per
    # destination, taken after the records.
    everywhere: dict[Destination, dict[str, list[UploadInfo]]] = {}
    for destination, _records in found.values():
        if destination not in everywhere:
            per_job: dict[str, list[UploadInfo]] = defaultdict(list)
            for u in store.list_multipart_uploads(bucket, destination.root):
                owner = job_id_of_key(destination, u.key)
                if owner is not None:
                    per_job[owner].append(u)
            everywhere[destination] = per_job
    return {job_id: _status(store, destination, job_id, records, successes=successes,
                            uploads=[*by_job[job_id], *everywhere[destination].get(job_id, [])], pending_uploads=None)
            for job_id, (destination, records) in found.items()}


def locate_job(store: S3Store, destination: Destination, job_id: str, *, threads: int = 8) -> JobStatus | None:
    """Job ``job_id`` as its records tell it, wherever they are relative to ``destination``: under it, under an
    ancestor (``destination`` is a partition of the job's table), or below it (``destination`` is a folder
    holding the job's table), the latter found from the job's pending uploads. None when it has no records."""
    for root in _ancestors(destination.root):
        here = Destination(destination.bucket, root.rstrip("/"))
        records = list(store.list_objects(destination.bucket, JobPaths(here, job_id).root))
        if records:
            uploads = [u for u in store.list_multipart_uploads(destination.bucket, here.root)
                       if job_id_of_key(here, u.key) == job_id]
            return _status(store, here, job_id, records, successes=_SuccessFiles(store), uploads=uploads,
                           pending_uploads=len(uploads))
    own = [u for u in store.list_multipart_uploads(destination.bucket, destination.root)
           if owner_of_key(u.key).job_id == job_id]
    return find_owning_jobs(store, destination.bucket, own, threads=threads).get(job_id)


def _ancestors(directory: str) -> list[str]:
    """``"a/b/"`` -> ``["a/b/", "a/", ""]``: the roots a destination owning keys below ``directory`` may have."""
    out = []
    parts = [p for p in directory.split("/") if p]
    for n in range(len(parts), -1, -1):
        out.append("".join(f"{p}/" for p in parts[:n]))
    return out


def _common_directory(keys: Iterable[str]) -> str:
    """The longest common directory (ending in '/', or "") of some keys."""
    dirs = [k.rsplit("/", 1)[0] + "/" if "/" in k else "" for k in keys]
    if not dirs:
        return ""
    common = dirs[0]
    for d in dirs[1:]:
        while not d.startswith(common):
            common = common[:-1].rsplit("/", 1)[0] + "/" if "/" in common[:-1] else ""
    return common
