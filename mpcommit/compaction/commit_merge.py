"""Merging small outputs at job commit, before anything becomes visible (``write(..., merge=MergePolicy())``).

Tasks write through :class:`StagingSink`: a file that stays below one part is stored as a plain object
under the job's hidden prefix (``TaskAttempt.stage``) instead of a multipart upload; a larger one becomes a
multipart upload as usual. At job commit, before the journal:

1. :func:`plan_commit_merges` applies Hive's rule to each partition the job wrote (its average counts every
   file, staged or not) and packs the staged files of the small ones into bins;
2. each bin is merged into an uncompleted multipart upload (:func:`run_bin`), on the cluster as a Spark stage
   or on a thread pool; a bin that fails is simply not merged;
3. the commit journals the merged files with the staged files they replace (:class:`MergedFile`); it then
   completes them in place of those staged files, which are never moved in. Everything else is moved in or
   completed as it is. ``recover`` does the same from the journal.

A merged file takes the final key of its first source: a key of this job that nothing else of the job uses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ManifestScopeError
from ..options import S3Options
from ..protocol.layout import JobPaths
from ..protocol.records.job import MergedFile
from ..protocol.records.manifest import PendingUpload, StagedFile, TaskManifest, TaskResult, merge_rows
from ..pool import run_bounded
from ..store.s3 import S3Store, store_for
from .executor import run_merge
from .kinds import FileKind, Format, detect_kind
from .merge_plan import prepare
from .parts import SourceObject
from .planner import Candidate, MergePolicy, plan_bins

log = logging.getLogger(__name__)

#: Merges run at once on the driver when there is no Spark cluster to run them.
DEFAULT_MERGE_BINS_IN_PARALLEL = 4
#: Part uploads and copies in flight per merge.
MERGE_PART_THREADS = 8


# ---------------------------------------------------------------- in the task
class StagingSink:
    """A file sink that stages the file when it stays below ``limit`` bytes, else streams a multipart upload.

    Bytes are held in memory up to ``limit`` (one part: what a multipart writer would hold anyway); the first
    write beyond it opens the multipart writer and hands it what was held.
    """

    def __init__(self, task: Any, partition: str, ext: str, *, limit: int, content_type: str | None = None):
        self._task = task
        self._partition = partition
        self._ext = ext
        self._limit = limit
        self._content_type = content_type
        self._buffer = bytearray()
        self._writer: Any = None
        self._done = False
        self.rows: int | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._done:
            raise ValueError("write to a closed staging sink")
        view = memoryview(data).cast("B")
        if self._writer is not None:
            return int(self._writer.write(view))
        self._buffer += view
        if len(self._buffer) >= self._limit:
            self._writer = self._task.create(self._partition, self._ext, content_type=self._content_type)
            held, self._buffer = self._buffer, bytearray()
            self._writer.write(held)
        return len(view)

    def tell(self) -> int:
        return int(self._writer.tell()) if self._writer is not None else len(self._buffer)

    def flush(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return self._done

    @property
    def staged(self) -> bool:
        """True once closed as a staged file (not a multipart upload)."""
        return self._done and self._writer is None

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        if self._writer is not None:
            self._writer.rows = self.rows
            self._writer.close()
        else:
            self._task.stage(self._partition, self._ext, bytes(self._buffer), rows=self.rows)
            self._buffer = bytearray()

    def abort(self) -> None:
        if self._done and self._writer is None:
            return  # staged already: the task attempt's abort deletes it
        self._done = True
        self._buffer = bytearray()
        if self._writer is not None:
            self._writer.abort()


# ---------------------------------------------------------------- planning at the driver
@dataclass(frozen=True)
class BinJob:
    """One merge to run, small and picklable (it travels to a Spark executor): the staged sources, in order,
    and the final keys they would have had; the merged file takes the first of those."""

    s3: S3Options
    bucket: str
    key: str
    partition: str
    kind: FileKind
    sources: tuple[SourceObject, ...]
    final_keys: tuple[str, ...]
    rows: int | None = None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.sources)


@dataclass(frozen=True)
class BinOutcome:
    key: str
    upload: PendingUpload | None
    error: str = ""


def plan_commit_merges(
    manifests: Sequence[TaskManifest], policy: MergePolicy, *, s3: S3Options, csv_header: bool | None = None
) -> list[BinJob]:
    """The merges of a job commit: per partition and format, Hive's rule over every file of the winning
    attempts; only staged files are packed (files in multipart uploads cannot be read before completion)."""
    if not manifests:
        return []
    bucket = manifests[0].bucket
    staged: dict[str, StagedFile] = {}
    kinds: dict[str, FileKind] = {}
    candidates: list[Candidate] = []
    for m in manifests:
        for item in (*m.uploads, *m.staged):
            kind = _kind(item.key, csv_header)
            if kind is None:
                continue
            is_staged = isinstance(item, StagedFile)
            candidates.append(Candidate(item.key, item.size, item.etag if is_staged else "",  # type: ignore[union-attr]
                                        item.partition, kind.group, mergeable=is_staged))
            if is_staged:
                staged[item.key] = item  # type: ignore[assignment]
                kinds[item.key] = kind
    jobs = []
    for b in plan_bins(candidates, policy):
        files = [staged[c.key] for c in b.sources]
        jobs.append(BinJob(
            s3=s3, bucket=bucket, key=files[0].key, partition=b.partition, kind=kinds[files[0].key],
            sources=tuple(SourceObject(f.staged_key, f.etag, f.size) for f in files),
            final_keys=tuple(f.key for f in files), rows=merge_rows(f.rows for f in files),
        ))
    return jobs


def _kind(key: str, csv_header: bool | None) -> FileKind | None:
    kind = detect_kind(key.rsplit("/", 1)[-1])
    if kind is not None and kind.format is Format.CSV and csv_header is not None:
        kind = replace(kind, header=csv_header)
    return kind


# ---------------------------------------------------------------- running a bin (driver thread or Spark task)
def run_bin(job: BinJob) -> BinOutcome:
    """Merge one bin into an uncompleted multipart upload at ``job.key``. Never raises: a bin that cannot be
    merged reports why, and its staged files are then moved in as they are."""
    store = store_for(job.s3)
    try:
        task = prepare(store, job.bucket, job.sources, job.kind, key=job.key, partition=job.partition, rows=job.rows)
        pending = run_merge(store, job.bucket, task, threads=MERGE_PART_THREADS)
    except Exception as exc:  # noqa: BLE001 - merging is an optimisation: report and carry on without it
        log.warning("merge into s3://%s/%s skipped: %s", job.bucket, job.key, exc)
        return BinOutcome(job.key, None, f"{type(exc).__name__}: {exc}")
    return BinOutcome(job.key, pending)


#: Runs bins somewhere (a Spark stage) and returns their outcomes in any order.
Runner = Callable[[list[BinJob]], list[BinOutcome]]


def run_on_threads(jobs: list[BinJob], *, threads: int = DEFAULT_MERGE_BINS_IN_PARALLEL) -> list[BinOutcome]:
    outcomes: list[BinOutcome] = []
    run_bounded(run_bin, jobs, threads=threads, on_result=lambda _job, outcome: outcomes.append(outcome))
    return outcomes


@dataclass(frozen=True)
class CommitMerges:
    """What the commit-time merge did: the merged files for ``Job.commit(merged=...)`` and the bins skipped."""

    merged: tuple[MergedFile, ...]
    skipped: tuple[tuple[str, str], ...]  # (key, why)
    seconds: float
    source_files: int

    def summary(self) -> dict[str, Any]:
        return {"mergedFiles": len(self.merged), "sourceFiles": self.source_files, "skippedBins": len(self.skipped),
                "seconds": round(self.seconds, 4)}


def merge_at_commit(
    job: Any,
    results: Sequence[TaskResult],
    policy: MergePolicy,
    *,
    csv_header: bool | None = None,
    runner: Runner | None = None,
    store: S3Store | None = None,
) -> CommitMerges:
    """Plan and run the merges of a job about to be committed; pass ``.merged`` to ``job.commit``.

    ``runner`` runs the bins (e.g. as a Spark stage); without one they run on a thread pool here. If the
    runner fails as a whole, nothing is merged and the commit moves every file in as it is.
    """
    t0 = time.monotonic()
    store = store or job.store
    manifests = [_manifest(store, job, r) for r in results]
    jobs = plan_commit_merges(manifests, policy, s3=job.spec.s3, csv_header=csv_header)
    if not jobs:
        return CommitMerges((), (), time.monotonic() - t0, 0)
    try:
        outcomes = (runner or run_on_threads)(jobs)
    except Exception as exc:  # noqa: BLE001 - an optimisation failed as a whole: commit without it
        log.warning("commit-time merge of job %s failed (%s); committing the files unmerged", job.job_id, exc)
        outcomes = [BinOutcome(j.key, None, f"the merge stage failed: {exc}") for j in jobs]
    by_key = {o.key: o for o in outcomes}
    merged: list[MergedFile] = []
    skipped: list[tuple[str, str]] = []
    for j in jobs:
        outcome = by_key.get(j.key)
        if outcome is None or outcome.upload is None or outcome.upload.key != j.key:
            skipped.append((j.key, outcome.error if outcome else "no outcome"))
            continue
        merged.append(MergedFile(outcome.upload, j.final_keys))
    return CommitMerges(tuple(merged), tuple(skipped), time.monotonic() - t0,
                        sum(len(m.sources) for m in merged))


def _manifest(store: S3Store, job: Any, result: TaskResult) -> TaskManifest:
    if result.manifest is not None:
        return result.manifest
    paths = JobPaths(job.destination, job.job_id)
    if not result.manifest_key.startswith(paths.tasks):
        raise ManifestScopeError(f"task result names manifest {result.manifest_key!r} outside job {job.job_id}")
    data = store.get_object(job.destination.bucket, result.manifest_key)
    return TaskManifest.from_bytes(data, where=f"s3://{job.destination.bucket}/{result.manifest_key}",
                                   destination=job.destination, job_id=job.job_id)

