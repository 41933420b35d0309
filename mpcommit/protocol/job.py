"""The driver side of the engine-neutral API: create a job, hand its spec to workers, commit or abort.

    job = Job.create("s3://bucket/table", mode="append")
    with job.spec.task(task_id=7, attempt=0) as task:
        with task.create(partition="dt=2024-01-01", ext="csv") as out:
            out.write(b"...")
        ref = task.commit()
    report = job.commit([ref])
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from enum import Enum

from ..errors import (
    CommitStateUnknownError,
    DestinationExistsError,
    JobStateError,
    ManifestError,
    NoSuchKeyError,
    TxnVersionError,
    UsageError,
)
from ..modes import PartitionOverwrite, Purpose, WriteMode
from ..options import OrderSettings, S3Options, WriterSettings
from ..pool import ProgressHook
from ..store.conditional import Held, Records, Taken
from ..store.s3 import S3Store, store_for
from .commit import DEFAULT_COMMIT_THREADS, AbortReport, CommitReport, JobCommitter
from .commit.committed import HandedOverResults
from .heartbeat import Heartbeat
from .layout import (
    HIDDEN_ROOT,
    ORDER_ROOT,
    Destination,
    JobPaths,
    check_job_id,
    new_job_id,
    normalize_partition,
    owner_of_key,
    parse_uri,
    table_of,
)
from .nesting import refuse_inside_another_table
from .order import OrderSnapshot, TableOrder
from .records.job import DeleteEntry, JobDescriptor, MergedFile
from .records.order import Txn, TxnRecord
from .records.manifest import TaskResult
from .records.success import SuccessData
from .task import JobSpec



class _Ended(Enum):
    """What this Job object already did: a job is committed or aborted once."""

    COMMITTED = "committed"
    ABORTED = "aborted"


class Job:
    """One write (or compaction) job on one destination, as seen by the driver."""

    def __init__(self, spec: JobSpec, descriptor: JobDescriptor, *, store: S3Store,
                 commit_threads: int = DEFAULT_COMMIT_THREADS, progress: ProgressHook | None = None,
                 overwrite_bucket_root: bool = False, order: OrderSettings | None = None,
                 heartbeat: bool = False, table_order: TableOrder | None = None):
        self.spec = spec
        self.descriptor = descriptor
        self.store = store
        self.order = order or OrderSettings()
        # ``table_order``: the table's order as this process reads it already (a stream's commit looked up the
        # query's ledger in it: the entries and ends it read are not read again).
        self._committer = JobCommitter(store, spec.destination, spec.job_id, threads=commit_threads, progress=progress,
                                       order=self.order, table_order=table_order)
        #: The driver's sign of life while the job is open (see protocol/heartbeat.py).
        self._heartbeat = (Heartbeat(store, spec.paths, self.order.heartbeat_seconds, owner=self).start()
                           if heartbeat else None)
        self._committer.heartbeat = self._heartbeat
        self._state_lock = threading.Lock()
        self._finished: _Ended | None = None
        self.created_at = time.monotonic()
        #: The caller's explicit consent to an overwrite that replaces the whole bucket (see Job.create).
        self.overwrite_bucket_root = overwrite_bucket_root
        #: The application version this job commits (Job.create's ``txn``), and the commit that holds that version
        #: already when the table had committed it before the job began (then nothing is written).
        self.txn: Txn | None = None
        self.duplicate_of: TxnRecord | None = None

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def destination(self) -> Destination:
        return self.spec.destination

    @property
    def paths(self) -> JobPaths:
        return self.spec.paths

    @property
    def ignored(self) -> bool:
        """Mode ``ignore`` met existing data: workers should write nothing; commit is a no-op."""
        return self.spec.ignored

    @classmethod
    def create(
        cls,
        uri: str,
        *,
        mode: str | WriteMode = "append",
        partition_overwrite: str | PartitionOverwrite = "static",
        s3: S3Options | None = None,
        writer: WriterSettings | None = None,
        commit_threads: int = DEFAULT_COMMIT_THREADS,
        job_id: str | None = None,
        purpose: str | Purpose = Purpose.WRITE,
        progress: ProgressHook | None = None,
        store: S3Store | None = None,
        overwrite_bucket_root: bool = False,
        order: OrderSettings | None = None,
        txn: Txn | None = None,
        commit_processes: int | None = None,
    ) -> "Job":
        """Start a job: check the destination against the mode, and record the job under its hidden prefix.

        Raises DestinationExistsError for mode ``error`` when the destination holds data, NoSuchBucketError
        when the bucket does not exist -- before any upload starts. An overwrite of a bucket's root (``s3://bucket``)
        replaces every object in the bucket, and is refused unless ``overwrite_bucket_root=True``.
        ``commit_processes`` is accepted and ignored, with a DeprecationWarning: the completes no longer run in worker
        processes (one process completes thousands of files a second on the CRT). ``order``: how the job keeps its place in
        the table's commit order (heartbeat, how long it waits for earlier jobs). ``job_id`` names the job instead
        of a random id; an id the destination already knows (its records, its ``_SUCCESS``, a pending upload or a
        file carrying it) is refused, since files of two runs with one id would take each other's keys -- checking
        costs one listing of the destination.
        ``txn`` names the application version this job commits (``Txn(app_id, version)``, as Delta Lake's
        ``txnAppId`` / ``txnVersion``): a job whose version the table committed already writes nothing and its
        commit says so (``CommitReport.duplicate_of``) -- the scheduler's re-run of a run that did commit, a
        ``foreachBatch`` replaying a batch -- and an older version is refused (TxnVersionError). The version is
        recorded with the commit's end in the table's order, and kept there for ever, whatever is collected.
        """
        if commit_processes is not None:
            warnings.warn("Job.create(commit_processes=...) is ignored: the completes no longer run in worker "
                          "processes (one process completes thousands of files a second); drop the argument",
                          DeprecationWarning, stacklevel=2)
        destination = parse_uri(uri)
        write_mode = WriteMode.parse(mode)
        overwrite = PartitionOverwrite.parse(partition_overwrite)
        check_bucket_root_overwrite(destination, write_mode, overwrite, allowed=overwrite_bucket_root)
        options = s3 or S3Options()
        store = store or store_for(options)
        check_partition_folders(destination)
        store.head_bucket(destination.bucket)
        refuse_inside_another_table(store, destination)
        ignored = False
        if write_mode in (WriteMode.ERROR, WriteMode.IGNORE) and destination_has_data(store, destination):
            if write_mode is WriteMode.ERROR:
                raise DestinationExistsError(
                    f"{destination.uri} already holds data and mode is 'error': choose mode 'append' or "
                    "'overwrite', or another destination. Nothing was written."
                )
            ignored = True
        duplicate_of = None
        if txn is not None and not ignored:
            duplicate_of = committed_already(store, destination, txn, order)
            ignored = duplicate_of is not None
        if job_id:
            refuse_known_job_id(store, destination, check_job_id(job_id))
        else:
            job_id = new_job_id()
        spec = JobSpec(job_id=job_id, destination=destination, s3=options, writer=writer or WriterSettings(), ignored=ignored)
        descriptor = JobDescriptor(
            job_id=job_id, bucket=destination.bucket, prefix=destination.prefix, mode=write_mode,
            partition_overwrite=overwrite, created_ms=int(time.time() * 1000), hostname=socket.gethostname(),
            purpose=Purpose.parse(purpose),
        )
        # Written first, so that cleanup tools can tell a live job's uploads from orphans. Through the one seam of
        # conditional writes: a store that cannot order jobs is refused here, before anything is uploaded.
        if isinstance(write_descriptor(store, spec.paths, descriptor), Taken):
            raise UsageError(f"job id {job_id} is already in use at {destination.uri} (its descriptor exists); "
                             "leave job_id out for a new random id. Nothing was written.")
        job = cls(spec, descriptor, store=store, commit_threads=commit_threads, progress=progress,
                  overwrite_bucket_root=overwrite_bucket_root, order=order, heartbeat=not ignored)
        job.txn, job.duplicate_of = txn, duplicate_of
        return job

    @classmethod
    def open(cls, uri: str, job_id: str, *, s3: S3Options | None = None, commit_threads: int = DEFAULT_COMMIT_THREADS,
             store: S3Store | None = None, overwrite_bucket_root: bool = False) -> "Job":
        """Reattach to an existing job from its descriptor (e.g. to abort it from another process)."""
        destination = parse_uri(uri)
        options = s3 or S3Options()
        store = store or store_for(options)
        paths = JobPaths(destination, check_job_id(job_id))
        data = store.get_object(destination.bucket, paths.descriptor)
        descriptor = JobDescriptor.from_bytes(data, where=f"s3://{destination.bucket}/{paths.descriptor}",
                                              destination=destination, job_id=job_id)
        spec = JobSpec(job_id=job_id, destination=destination, s3=options)
        return cls(spec, descriptor, store=store, commit_threads=commit_threads,
                   overwrite_bucket_root=overwrite_bucket_root)

    def commit(self, results: Sequence[TaskResult], *, extra_timings: dict[str, float] | None = None,
               delete: Sequence[DeleteEntry] = (), merged: Sequence[MergedFile] = (),
               since: OrderSnapshot | None = None, when_ended: Callable[[int], None] | None = None) -> CommitReport:
        """Complete exactly the given attempts (one per task id), abort every other upload of the job, apply
        the mode, write ``_SUCCESS`` and remove the job's records.

        ``merged``: files merged at commit time from the results' staged files (see
        :mod:`mpcommit.compaction.commit_merge`); completed in place of those staged files. ``delete`` and
        ``since``: a compaction's sources, and what it saw of the table's commit order before it listed them
        (:meth:`mpcommit.protocol.order.TableOrder.snapshot`): the commit gives up with CommitConflictError,
        nothing of it visible, if an earlier job replaced those sources meanwhile. ``when_ended``: see
        :meth:`JobCommitter.commit <mpcommit.protocol.commit.JobCommitter.commit>`.

        Registering the commit in a catalog is the catalog's business, above the protocol:
        :func:`mpcommit.catalog.commit_registered` commits and registers in one call.
        """
        if not self.ignored:
            # A dynamic overwrite replaces the whole root when files were written there (no partition).
            check_bucket_root_overwrite(self.destination, self.descriptor.mode, self.descriptor.partition_overwrite,
                                        allowed=self.overwrite_bucket_root,
                                        partitioned=not any("" in r.partitions for r in results))
        self._end(_Ended.COMMITTED)
        timings = {"write": time.monotonic() - self.created_at}
        timings.update(extra_timings or {})
        try:
            # Results handed over are the commit's own: passed as they are, for it to let go (HandedOverResults).
            given = results if isinstance(results, HandedOverResults) else list(results)
            report = self._committer.commit(self.descriptor, given, ignored=self.ignored,
                                            extra_timings=timings, delete=delete, merged=merged, since=since,
                                            when_ended=when_ended, txn=self.txn)
            if self.duplicate_of is not None:
                report = dataclasses.replace(report, duplicate_of=self.duplicate_of)
        except CommitStateUnknownError:
            self._stop_heartbeat()  # partly visible perhaps: only `recover` may act now, never abort
            raise
        except BaseException:
            # Definitely not committed (refused before the journal): the caller may fix and commit again, or abort.
            with self._state_lock:
                self._finished = None
            raise
        self._stop_heartbeat()
        return report

    def abort(self) -> AbortReport:
        """Abort every upload of this job and remove its records; nothing of it is visible afterwards."""
        with self._state_lock:
            if self._finished is _Ended.COMMITTED:
                raise JobStateError(
                    f"job {self.job_id} was committed, or its commit started and may be partly visible: it cannot "
                    f"be aborted. If the commit failed, finish it with `mpcommit jobs recover {self.destination.uri} "
                    f"--job {self.job_id}`."
                )
            self._finished = _Ended.ABORTED
        self._stop_heartbeat()
        return self._committer.abort()

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _end(self, how: _Ended) -> None:
        with self._state_lock:
            if self._finished is not None:
                raise JobStateError(f"job {self.job_id} was already {self._finished.value}; create a new job")
            self._finished = how

    def __repr__(self) -> str:
        return f"Job({self.destination.uri!r}, job_id={self.job_id!r}, mode={self.descriptor.mode.value!r})"


def check_bucket_root_overwrite(destination: Destination, mode: WriteMode, partition_overwrite: PartitionOverwrite,
                                *, allowed: bool, partitioned: bool = True) -> None:
    """Refuse an overwrite that would replace everything in a bucket, unless the caller said so explicitly.

    An overwrite replaces what lies under its destination; at a bucket's root that is every object in the bucket,
    other tables' data included. Spark does it without a word; here it takes ``overwrite_bucket_root=True``.
    ``partitioned``: whether the data goes to partition folders only (a dynamic overwrite then replaces just those).
    """
    if allowed or destination.prefix or mode is not WriteMode.OVERWRITE:
        return
    if partition_overwrite is PartitionOverwrite.DYNAMIC and partitioned:
        return
    kind = "A static overwrite" if partition_overwrite is PartitionOverwrite.STATIC else (
        "A dynamic overwrite of unpartitioned data")
    raise UsageError(
        f"refusing to overwrite {destination.uri}, the root of the bucket: {kind} replaces everything under its "
        f"destination, which here is every object in bucket {destination.bucket!r}, other tables' data included. "
        f"Write to a prefix such as s3://{destination.bucket}/table, or pass overwrite_bucket_root=True if the "
        "whole bucket is meant to hold only this data. Nothing was written."
    )


def write_descriptor(store: S3Store, paths: JobPaths, descriptor: JobDescriptor) -> Held | Taken:
    """The job's descriptor, created once (the one writer of descriptors: ``Job.create``, and the first task of a
    streaming micro-batch, whose job no ``Job.create`` makes). Taken when another one holds the key."""
    destination = paths.destination
    return Records.of(store, destination.bucket, table_of(destination).root).create(paths.descriptor,
                                                                                    descriptor.to_bytes())


def committed_already(store: S3Store, destination: Destination, txn: Txn,
                      order: OrderSettings | None = None) -> TxnRecord | None:
    """Before a job writes anything: the commit that holds ``txn``'s version already (the job is then a no-op
    that says so), None when the table has not committed it. TxnVersionError for a version older than the newest
    the table committed. (The commit decides again, against the places taken meanwhile.)"""
    newest = TableOrder(store, table_of(destination), order).txn_state(txn.app_id).newest
    if newest is None or newest.version < txn.version:
        return None
    if newest.version > txn.version:
        raise TxnVersionError(
            f"{destination.uri}: version {txn.version} of application {txn.app_id!r} is older than version "
            f"{newest.version}, which job {newest.job_id} committed (place {newest.position}); versions of one "
            "application commit in increasing order. Nothing was written.")
    return newest


def check_partition_folders(destination: Destination) -> None:
    """Refuse a destination whose trailing ``col=value`` folders are not spelled as Spark's writer spells them
    (``dt=a=b`` for ``dt=a%3Db``): a job of the table writing that partition by its values would write another
    folder, and the two would not be ordered against each other."""
    table = table_of(destination)
    inside = table.path_of(destination)
    if not inside:
        return
    canonical = normalize_partition(inside)
    if canonical != inside:
        raise UsageError(
            f"{destination.uri}: the partition folder {inside!r} is not spelled as Spark's writer spells it "
            f"({canonical!r}, Hive's escaping), so a write of the same partition by its values would land in another "
            f"folder. Write to {table.destination(canonical).uri}. Nothing was written.")


def destination_has_data(store: S3Store, destination: Destination) -> bool:
    """True when anything but mpcommit's hidden job records lies under the destination (``_SUCCESS`` counts,
    as an empty committed table is still a table)."""
    temporary = HIDDEN_ROOT.split("/", 1)[0] + "/"
    # Two names are enough: the hidden folder is one name, anything else is data.
    order = ORDER_ROOT.split("/", 1)[0] + "/"
    # Three names are enough: the two hidden folders are one name each, anything else is data.
    return any(child not in (temporary, order)
               for child in store.list_children(destination.bucket, destination.root, limit=3))


def refuse_known_job_id(store: S3Store, destination: Destination, job_id: str) -> None:
    """Refuse a caller's job id that the destination already knows: its records, its ``_SUCCESS``, a pending
    upload or a visible file carrying it (every key of a job carries its id, so a second run with one id
    would complete over the first run's files, or take them for its own). One listing of the destination."""
    paths = JobPaths(destination, job_id)
    where = None
    try:
        success = SuccessData.from_bytes(store.get_object(destination.bucket, destination.success_key),
                                         where=destination.success_key)
        if success.job_id == job_id:
            where = f"{destination.uri}/_SUCCESS names it"
    except (NoSuchKeyError, ManifestError):
        pass
    if where is None:
        for obj in store.list_objects(destination.bucket, destination.root):
            if obj.key.startswith(paths.root) or owner_of_key(obj.key).job_id == job_id:
                where = f"s3://{destination.bucket}/{obj.key} carries it"
                break
    if where is None:
        for upload in store.list_multipart_uploads(destination.bucket, destination.root):
            if owner_of_key(upload.key).job_id == job_id:
                where = f"a pending upload of s3://{destination.bucket}/{upload.key} carries it"
                break
    if where is not None:
        raise UsageError(
            f"job id {job_id} is already known at {destination.uri} ({where}): a job id names one run, and a second "
            "run with it would write over or adopt the first run's files. Leave job_id out for a new random id. "
            "Nothing was written.")
