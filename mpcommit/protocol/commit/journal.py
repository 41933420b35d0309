"""From the tasks' results to the commit journal: which attempt of each task wins, every manifest validated
(I7) and what the commit will do, written down before it does any of it.

The journal decides the outcome: before it is written a failure means NOT COMMITTED (nothing is visible);
after, UNKNOWN until ``_SUCCESS`` (``recover`` finishes it from the journal).
"""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import IO

from ...errors import (
    CommitFailedError,
    CommitStateUnknownError,
    DuplicateTaskResultError,
    JobRolledBackError,
    JobStateError,
    ManifestError,
    MpcommitError,
    NoSuchKeyError,
    PreconditionFailedError,
    ProtocolError,
)
from ...modes import PartitionOverwrite, WriteMode
from ...store.conditional import Records, Taken
from ...store.s3 import S3Store
from ..layout import Destination, JobPaths, table_of
from ..records.job import CommitJournal, DeleteEntry, JobDescriptor, JobRollback, MergedFile, read_claim
from ..records.manifest import TaskManifest, TaskResult
from ..records.success import SuccessData, success_without_names
from . import committed
from .context import CommitContext
from .manifests import ManifestReader


def winners_by_task(results: Sequence[TaskResult], paths: JobPaths) -> dict[int, TaskResult]:
    """One result per task id, each of this job; anything else is refused before the commit starts."""
    job_id = paths.job_id
    by_task: dict[int, TaskResult] = {}
    for r in results:
        if not isinstance(r, TaskResult):
            raise ProtocolError(f"job.commit takes TaskResult values from task.commit(), got {type(r).__name__}")
        if r.job_id != job_id:
            raise ManifestError(f"a task result of job {r.job_id} was passed to the commit of job {job_id}; refused")
        if not r.manifest_key.startswith(paths.tasks):
            raise ManifestError(f"task result names manifest {r.manifest_key!r} outside job {job_id}; refused")
        if r.task_id in by_task:
            raise DuplicateTaskResultError(
                f"two results for task {r.task_id} (attempts {by_task[r.task_id].attempt} and {r.attempt}); pass "
                "exactly one result per task id. Nothing was committed."
            )
        by_task[r.task_id] = r
    return by_task


def validate_winners(by_task: dict[int, TaskResult], reader: ManifestReader, context: CommitContext, *,
                     merged: Sequence[MergedFile]) -> None:
    """Validate every winner's manifest before anything is completed (I7): a bad one must stop the commit while
    its outcome is still "not committed". Referenced (large) manifests are read here once and again when
    completing, so that the driver never holds all of them at once. With ``merged`` (a commit-time merge),
    every merged file is checked against the winners' staged files."""
    destination, job_id = reader.destination, reader.job_id
    winner_keys: set[str] = set()
    staged_keys: set[str] = set()

    def note(manifest: TaskManifest) -> None:
        if merged:  # only then are the keys worth holding
            winner_keys.update(u.key for u in manifest.uploads)
            staged_keys.update(f.key for f in manifest.staged)

    try:
        for r in by_task.values():
            if r.manifest is not None:
                r.manifest.validate(destination=destination, job_id=job_id, where=r.manifest_key)
                note(r.manifest)
        # Referenced manifests: read ahead in parallel, validated as they are read, each dropped at once.
        for manifest in reader.stream([r.manifest_key for r in by_task.values() if r.manifest is None], {}, context):
            note(manifest)
            del manifest  # not held while the next is read, nor through the completes
    except ManifestError:
        raise
    except MpcommitError as exc:
        raise CommitFailedError(f"job {job_id} was not committed, nothing was made visible: {exc}") from exc
    check_merged(merged, staged_keys=staged_keys, keys=winner_keys | staged_keys, job_id=job_id)


def check_merged(merged: Sequence[MergedFile], *, staged_keys: set[str], keys: set[str], job_id: str) -> None:
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


def replace_scope(mode: WriteMode, overwrite: PartitionOverwrite, partitions: Sequence[str]) -> tuple[str, ...]:
    """The partition paths an overwrite replaces ("" for all of the destination); () for other modes."""
    if mode is not WriteMode.OVERWRITE:
        return ()
    if overwrite is PartitionOverwrite.STATIC or "" in partitions:
        return ("",)
    return tuple(partitions)


def build_journal(descriptor: JobDescriptor, destination: Destination, by_task: dict[int, TaskResult], *,
                  delete: Sequence[DeleteEntry], merged: Sequence[MergedFile]) -> CommitJournal:
    """What the commit will do; its place in the table's order is added once taken."""
    partitions = sorted({p for r in by_task.values() for p in r.partitions})
    journal = CommitJournal(
        job_id=descriptor.job_id, bucket=destination.bucket, prefix=destination.prefix,
        mode=descriptor.mode, partition_overwrite=descriptor.partition_overwrite,
        started_ms=int(time.time() * 1000),
        winners=tuple(by_task[t].manifest_key for t in sorted(by_task)),
        replace=replace_scope(descriptor.mode, descriptor.partition_overwrite, partitions),
        purpose=descriptor.purpose,
        delete=tuple(delete),
        merged=tuple(merged),
    )
    try:
        journal.validate_merged()
    except ManifestError as exc:
        raise ProtocolError(f"job {descriptor.job_id} was not committed: {exc}") from exc
    return journal


def claim_journal(store: S3Store, destination: Destination, journal: CommitJournal) -> None:
    """Create the journal with ``If-None-Match: *``: the commit's side of the barrier between a commit and a
    rollback of one job (the rollback claims the same key first, :func:`claim_rollback`). Then the job's
    descriptor must still be there: a rollback that ran to its end before this removed it (and its own claim).
    Raises JobRolledBackError when a rollback got there first (nothing of this job is visible), and
    CommitStateUnknownError when the answer could not be had."""
    paths = JobPaths(destination, journal.job_id)
    records = Records.of(store, destination.bucket, table_of(destination).root)
    try:
        if isinstance(records.create(paths.journal, journal.to_bytes()), Taken):
            # A rollback's record holds the key (or held it, and the rollback finished and removed it).
            raise JobRolledBackError(
                f"job {journal.job_id} was rolled back by another process (`jobs abort`, `recover` or an orphan "
                f"cleanup) before its commit began; nothing of it was made visible. Run the job again.")
        if store.head_object(destination.bucket, paths.descriptor) is None:
            store.delete_objects(destination.bucket, [paths.journal, paths.heartbeat])
            raise JobRolledBackError(
                f"job {journal.job_id} was rolled back by another process before its commit began (its records are "
                "gone); nothing of it was made visible. Run the job again.")
    except JobRolledBackError:
        raise
    except MpcommitError as exc:
        # The journal may or may not have been written; either way no upload was completed, so a recover
        # would only complete exactly what this commit would have. Say so rather than guess.
        raise CommitStateUnknownError(
            f"job {journal.job_id}: writing the commit journal failed ({exc}); nothing was completed. "
            f"Run `mpcommit jobs recover {destination.uri} --job {journal.job_id}` or commit again.",
            job_id=journal.job_id, destination=destination.uri,
        ) from exc


def claim_rollback(store: S3Store, destination: Destination, job_id: str, reason: str) -> tuple[JobRollback, bool]:
    """The rollback's side of the barrier: create the job's journal key holding a rollback record. Returns the
    record that holds and whether it is this call's (else an earlier rollback's, interrupted); raises
    JobStateError when the key holds a commit journal -- the job is committing and only ``recover`` may act on
    it."""
    paths = JobPaths(destination, job_id)
    record = JobRollback(job_id, destination.bucket, destination.prefix, int(time.time() * 1000),
                         socket.gethostname(), reason)
    taken = Records.of(store, destination.bucket, table_of(destination).root).create(paths.journal, record.to_bytes())
    if not isinstance(taken, Taken):
        return record, True
    if taken.body is None:
        return claim_rollback(store, destination, job_id, reason)  # it went meanwhile: claim again
    try:
        found = read_claim(taken.body, where=paths.journal, destination=destination, job_id=job_id)
    except ManifestError as exc:
        raise JobStateError(f"job {job_id}: its journal key holds a record that cannot be read ({exc}); it is not "
                            "rolled back. Inspect it before acting.") from exc
    if isinstance(found, JobRollback):
        return found, False
    raise JobStateError(
        f"job {job_id} is committing (its commit journal exists): its files may be partly visible and rolling back "
        f"would lose them. Finish it with `mpcommit jobs recover {destination.uri} --job {job_id}`.")


def write_success(store: S3Store, destination: Destination, success: SuccessData, *, match_etag: bool) -> bool:
    """Write ``_SUCCESS`` unless a job later in the commit order wrote it already: the file then keeps describing
    the latest commit, whichever of two concurrent jobs finishes last. With ``match_etag`` (the store honours
    If-Match) the read and the write are one atomic step; else they are two. Returns whether it was written.

    Beyond ``committed.SPILL_AT`` files the body (~75 bytes a file) is written to a local temporary file and sent
    from there, never built whole in memory; the file is closed (and so removed) however the write ends."""
    if success.files <= committed.SPILL_AT:
        return _write_success(store, destination, success, success.to_bytes(), match_etag=match_etag)
    with tempfile.TemporaryFile(prefix="mpcommit-success-", dir=committed.SPILL_DIRECTORY) as body:
        success.write_to(body)
        return _write_success(store, destination, success, body, match_etag=match_etag)


def _write_success(store: S3Store, destination: Destination, success: SuccessData, body: bytes | IO[bytes], *,
                   match_etag: bool) -> bool:
    bucket, key = destination.bucket, destination.success_key

    def sent() -> bytes | IO[bytes]:
        if not isinstance(body, bytes):
            body.seek(0)  # a file body: from its start on every attempt
        return body

    def which_commit(chunks: Iterator[bytes]) -> SuccessData | None:
        # Only the job and its place matter here: the names stream past, never decoded (a million are ~75 MB).
        try:
            return success_without_names(chunks, where=f"s3://{bucket}/{key}")[0]
        except ManifestError:
            return None  # not ours to keep (another tool's _SUCCESS): replaced

    for _attempt in range(20):
        try:
            current, etag = store.read_object_and_etag(bucket, key, which_commit)
        except NoSuchKeyError:
            try:
                store.put_object(bucket, key, sent(), if_none_match=match_etag)
                return True
            except PreconditionFailedError:
                continue  # another job wrote it first: look again
        if (current is not None and current.position is not None and success.position is not None
                and current.position > success.position and current.job_id != success.job_id):
            return False
        del current
        try:
            store.put_object(bucket, key, sent(), if_match=etag if match_etag else None)
            return True
        except PreconditionFailedError:
            continue
    return False
