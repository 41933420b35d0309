"""``mpcommit compact``: compact an existing dataset as a job of its own.

1. List the destination's data files and plan bins (per partition directory, Hive's rule).
2. Create a job (``purpose="compact"``). Merge every bin into an uncompleted multipart upload of a new file
   named with the job's id, and record it in a task manifest, one "task" per bin. A bin that cannot be
   merged (mixed schemas, an unreadable file, a source changed or deleted meanwhile) is skipped: its
   upload is aborted and its sources stay as they are.
3. Commit the job with one ``delete`` entry per source of a merged bin, pinned by the ETag it was merged
   from. The journal is written before anything is completed; the merged files are completed first, the
   sources deleted after (a source whose ETag changed is left alone). After a crash anywhere past the
   journal, ``mpcommit jobs recover`` finishes exactly this; before it, recovery rolls the job back and
   the sources were never touched. Either way every row is visible exactly once at the end.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import ExitStack
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..errors import CommitFailedError, MpcommitError, UsageError
from ..modes import Purpose
from ..options import OrderSettings, S3Options
from ..protocol.commit import CommitReport
from ..protocol.inventory import committing_jobs
from ..protocol.job import Job
from ..protocol.layout import (
    Destination,
    data_file_name,
    is_hidden_key,
    job_id_of_key,
    owner_of_key,
    parse_uri,
    table_of,
)
from ..protocol.nesting import NestedTables
from ..protocol.order import TableOrder
from ..protocol.task import record_manifest
from ..protocol.records.job import DeleteEntry
from ..protocol.records.manifest import PendingUpload, TaskResult
from ..pool import ProgressHook, lent_or_own, run_bounded
from ..store.s3 import S3Store, store_for
from .errors import MergeError, SourceChangedError
from .executor import DEFAULT_COPY_THREADS, DEFAULT_MERGE_THREADS, MergeStats, run_merge
from .kinds import Compression, FileKind, Format, detect_kind
from .merge_plan import prepare
from .parts import SourceObject
from .planner import Bin, Candidate, MergePolicy, explain_no_bins, plan_bins

#: Bins merged at once (each runs its parts on the shared part pool).
DEFAULT_BIN_THREADS = 4

class BinStatus(str, Enum):
    PLANNED = "planned"   # dry run
    MERGED = "merged"     # committed: the merged file is visible, its sources deleted
    SKIPPED = "skipped"   # could not be merged; sources left as they are


class Outcome(str, Enum):
    DRY_RUN = "dry_run"
    NOTHING_TO_DO = "nothing_to_do"
    COMMITTED = "committed"
    NOTHING_MERGED = "nothing_merged"  # every bin was skipped; the job was rolled back


@dataclass(frozen=True)
class BinReport:
    partition: str
    output: str
    sources: tuple[str, ...]
    bytes: int
    group: str
    status: BinStatus
    strategy: str = ""
    message: str = ""
    merged_bytes: int | None = None
    rows: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition, "output": self.output, "sources": list(self.sources),
            "files": len(self.sources), "bytes": self.bytes, "group": self.group, "status": self.status.value,
            "strategy": self.strategy, "message": self.message, "mergedBytes": self.merged_bytes, "rows": self.rows,
        }


@dataclass(frozen=True)
class CompactionReport:
    uri: str
    outcome: Outcome
    policy: MergePolicy
    bins: tuple[BinReport, ...]
    files_listed: int
    files_ignored: int
    job_id: str | None = None
    stats: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    commit: CommitReport | None = None
    #: Outcome NOTHING_TO_DO: why no bin was planned.
    reason: str = ""

    @property
    def merged(self) -> tuple[BinReport, ...]:
        return tuple(b for b in self.bins if b.status is BinStatus.MERGED)

    @property
    def skipped(self) -> tuple[BinReport, ...]:
        return tuple(b for b in self.bins if b.status is BinStatus.SKIPPED)

    def to_json(self) -> dict[str, Any]:
        merged = self.merged
        return {
            "uri": self.uri, "outcome": self.outcome.value, "jobId": self.job_id,
            "policy": {"smallFileAvg": self.policy.small_file_avg, "targetSize": self.policy.target_size},
            "filesListed": self.files_listed, "filesIgnored": self.files_ignored,
            "binsPlanned": len(self.bins), "binsMerged": len(merged), "binsSkipped": len(self.skipped),
            "filesMerged": sum(len(b.sources) for b in merged), "filesWritten": len(merged),
            "bytesMerged": sum(b.bytes for b in merged),
            "bins": [b.to_json() for b in self.bins],
            "stats": dict(self.stats), "requests": dict(self.requests),
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
            **({"reason": self.reason} if self.reason else {}),
        }


def _noop(_step: str, _done: int, _total: int | None) -> None:
    pass


@dataclass(frozen=True)
class _Planned:
    bin: Bin
    kind: FileKind
    number: int
    output: str


@dataclass
class Listing:
    """The data files under a destination as planner candidates, with their kinds; how many objects were
    listed, how many of them have an unknown format (left alone), and how many objects lie under each
    directory prefix (to choose between a listing and HEAD requests when checking sources again)."""

    candidates: list[Candidate]
    kinds: dict[str, FileKind]
    listed: int
    ignored: int
    under: Counter[str]
    #: Jobs whose records the listing showed (committing, writing, or records left behind).
    with_records: set[str] = field(default_factory=set)


def list_candidates(store: S3Store, destination: Destination, fmt: Format | None) -> Listing:
    """List the destination once: data files (hidden ones skipped) become candidates; the jobs whose records
    the listing shows are noted (their files stay where they are), and a folder holding another table with a
    job in flight is refused (its jobs are ordered by its own commit order, which this compaction is not in)."""
    candidates: list[Candidate] = []
    kinds: dict[str, FileKind] = {}
    under: Counter[str] = Counter()
    with_records: set[str] = set()
    nested = NestedTables(table_of(destination))
    listed = ignored = 0
    for obj in store.list_objects(destination.bucket, destination.root):
        directory = obj.key.rsplit("/", 1)[0] + "/" if "/" in obj.key else ""
        while True:
            under[directory] += 1
            if len(directory) <= len(destination.root):
                break
            directory = directory[:-1].rsplit("/", 1)[0] + "/" if "/" in directory[:-1] else ""
        if obj.key.endswith("/") or is_hidden_key(destination, obj.key):
            nested.add(obj.key)
            owner = owner_of_key(obj.key)
            if owner.root is not None and owner.job_id is not None:
                with_records.add(owner.job_id)
            continue
        listed += 1
        rel = obj.key[len(destination.root):]
        partition, _, name = rel.rpartition("/")
        kind = detect_kind(name, fmt)
        if kind is None:
            ignored += 1
            continue
        kinds[obj.key] = kind
        candidates.append(Candidate(obj.key, obj.size, obj.etag, partition, kind.group))
    busy = nested.in_flight()
    if busy:
        other, why = next(iter(sorted(busy.items())))
        raise UsageError(
            f"{destination.uri} holds another table, {other}, with a job in flight there ({why}): a compaction here "
            f"could merge that job's files while it commits. Compact that table by its own URI (mpcommit compact "
            f"{other}), or wait for its job to end. Nothing was changed.")
    if nested.roots:
        # An idle table nested here is its own table too: its files are merged only by a compaction of its own
        # URI, whose order sees that table's jobs (protocol/nesting.py).
        candidates = [c for c in candidates if not nested.covers(c.key)]
    return Listing(candidates, kinds, listed, ignored, under, with_records)


def jobs_in_flight(store: S3Store, destination: Destination, order: TableOrder, listing: Listing) -> set[str]:
    """Jobs whose files must stay where they are: those with records in the listing or above it (a partition's
    URI inside a table whose job is committing), and those holding an open place in the table's commit order.
    ``recover`` completes such a job's uploads again and must find its objects; its journal and its place both
    exist before any of its files is visible, so one look after the listing finds every such job."""
    busy = set(listing.with_records)
    table = order.table
    here = destination
    while True:
        busy |= committing_jobs(store, here)
        if here.prefix == table.prefix or not here.prefix:
            break
        here = Destination(here.bucket, here.prefix.rsplit("/", 1)[0] if "/" in here.prefix else "")
    view = order.view()
    busy |= {e.job_id for e in order.entries(view.open)}
    return busy


def compact(
    uri: str,
    *,
    s3: S3Options | None = None,
    target_size: int | str | None = None,
    small_file_avg: int | str | None = None,
    format: Format | str | None = None,  # noqa: A002 - the CLI's name for it
    dry_run: bool = False,
    progress: ProgressHook | None = None,
    store: S3Store | None = None,
    threads: int = DEFAULT_MERGE_THREADS,
    bin_threads: int = DEFAULT_BIN_THREADS,
    pool: Executor | None = None,
    copy_threads: int = DEFAULT_COPY_THREADS,
    copy_pool: Executor | None = None,
    order_settings: OrderSettings | None = None,
) -> CompactionReport:
    """Compact the dataset at ``uri``: see the module docstring. Returns what was planned and done.

    Raises UsageError for bad arguments (and for a folder holding another table), StoreError when the listing
    fails, CommitConflictError when an overwrite or compaction of the same files took effect while this one
    ran (nothing of it is visible; run it again), CommitStateUnknownError when the commit failed after its
    journal (run ``mpcommit jobs recover``). Bins that cannot be merged do not raise: they are reported as
    skipped, with the reason.
    """
    t0 = time.monotonic()
    progress = progress or _noop
    destination = parse_uri(uri)
    policy = MergePolicy.parse(small_file_avg=small_file_avg, target_size=target_size)
    fmt = Format.parse(format) if format else None
    options = s3 or S3Options()
    store = store or store_for(options)
    before = store.request_counts()
    timings: dict[str, float] = {}

    order = TableOrder(store, table_of(destination), order_settings)
    # What the table's order held before the listing: at commit, an overwrite or compaction touching these
    # sources that took effect since makes this compaction give up instead of bringing their rows back.
    since = order.snapshot()
    listing = list_candidates(store, destination, fmt)
    busy = jobs_in_flight(store, destination, order, listing)
    if busy:
        listing.candidates = [c for c in listing.candidates if job_id_of_key(destination, c.key) not in busy]
    kinds, listed, ignored = listing.kinds, listing.listed, listing.ignored
    progress("list", listed, listed)
    bins = plan_bins(listing.candidates, policy)
    timings["plan"] = time.monotonic() - t0
    progress("plan", len(bins), len(bins))

    job: Job | None = None
    if not dry_run and bins:
        job = Job.create(destination.uri, mode="append", s3=options, purpose=Purpose.COMPACT, store=store,
                         order=order_settings, progress=lambda step, done, total: progress(f"commit.{step}", done, total))
    job_id = job.job_id if job is not None else "<job>"
    planned = [_Planned(b, kinds[b.sources[0].key], i, _output_key(destination, b, kinds[b.sources[0].key], i, job_id))
               for i, b in enumerate(bins)]

    def report(outcome: Outcome, bin_reports: list[BinReport], **extra: Any) -> CompactionReport:
        after = store.request_counts()
        timings["total"] = time.monotonic() - t0
        return CompactionReport(
            uri=destination.uri, outcome=outcome, policy=policy, bins=tuple(bin_reports), files_listed=listed,
            files_ignored=ignored, requests={k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)},
            timings=timings, **extra,
        )

    if not bins:
        reason = explain_no_bins(listing.candidates, policy)
        if busy:
            reason += f" (files of {len(busy)} job(s) still in flight were left out)"
        return report(Outcome.NOTHING_TO_DO, [], reason=reason)
    if job is None:  # a dry run
        refusals = _predict_refusals(store, destination.bucket, planned, bin_threads)
        return report(Outcome.DRY_RUN, [
            _bin_report(p, BinStatus.SKIPPED, message=f"would be skipped: {refusals[p.number]}")
            if p.number in refusals else _bin_report(p, BinStatus.PLANNED) for p in planned])

    stats = MergeStats()
    try:
        with ExitStack() as owned:
            parts_pool = owned.enter_context(lent_or_own(pool, threads, "mpcommit-compact"))
            # Server-side copies of every bin share a pool of their own: they hold no bytes, only wait on the store.
            copiers = (copy_pool or parts_pool if pool is not None or copy_pool is not None
                       else owned.enter_context(lent_or_own(None, max(1, copy_threads), "mpcommit-copy")))
            t = time.monotonic()
            outcomes = _merge_all(job, store, planned, parts_pool, copiers, stats, bin_threads, progress,
                                  planning_pool=None if pool is None else parts_pool)
            timings["merge"] = time.monotonic() - t
            t = time.monotonic()
            outcomes = _verify_sources(store, destination.bucket, planned, outcomes, parts_pool, threads, listing.under)
            timings["verify"] = time.monotonic() - t
    except BaseException:
        job.abort()
        raise

    results = [o for o in outcomes if isinstance(o, TaskResult)]
    reports = [
        _bin_report(p, BinStatus.MERGED, pending=_pending_of(o)) if isinstance(o, TaskResult)
        else _bin_report(p, BinStatus.SKIPPED, message=str(o))
        for p, o in zip(planned, outcomes)
    ]
    if not results:
        job.abort()
        return report(Outcome.NOTHING_MERGED, reports, job_id=job.job_id, stats=stats.to_json())
    delete = [DeleteEntry(src.key, src.etag) for p, o in zip(planned, outcomes) if isinstance(o, TaskResult)
              for src in p.bin.sources]
    t = time.monotonic()
    try:
        committed = job.commit(results, delete=delete, since=since)
    except CommitFailedError:
        # Not committed, nothing of it visible (an earlier job replaced its sources meanwhile, or it could not
        # take its place): its merged uploads are aborted and the sources stay as they are.
        job.abort()
        raise
    timings["commit"] = time.monotonic() - t
    return report(Outcome.COMMITTED, reports, job_id=job.job_id, stats=stats.to_json(), commit=committed)


def _predict_refusals(store: S3Store, bucket: str, planned: list[_Planned], threads: int) -> dict[int, str]:
    """For a dry run: bins of CSV files whose names do not say whether they start with a header are planned as the
    real run plans them (a few small reads per file), so that the refusal the real run would meet -- every file
    starting with the same line, a header or data? -- is predicted. Other bins are not read."""
    ambiguous = [p for p in planned if p.kind.format is Format.CSV and p.kind.header is None]
    refusals: dict[int, str] = {}

    def plan(p: _Planned) -> str | None:
        try:
            prepare(store, bucket, [SourceObject(c.key, c.etag, c.size) for c in p.bin.sources], p.kind,
                    key=p.output, partition=p.bin.partition)
        except MergeError as exc:
            return str(exc)
        except MpcommitError as exc:
            return f"bin {p.number} ({p.output}) not merged: {exc}"
        return None

    def keep(p: _Planned, refusal: str | None) -> None:
        if refusal is not None:
            refusals[p.number] = refusal

    if ambiguous:
        run_bounded(plan, ambiguous, threads=threads, on_result=keep)
    return refusals


def _output_key(destination: Destination, b: Bin, kind: FileKind, number: int, job_id: str) -> str:
    if job_id == "<job>":
        name = f"part-{number:05d}-<job>.c000.{kind.ext}"
    else:
        name = data_file_name(task_id=number, job_id=job_id, file_number=0, ext=kind.ext)
    return f"{destination.root}{b.partition + '/' if b.partition else ''}{name}"


def _bin_report(p: _Planned, status: BinStatus, *, message: str = "", pending: PendingUpload | None = None) -> BinReport:
    big = sum(1 for s in p.bin.sources if s.size >= 5 * 1024 * 1024)
    if p.kind.format is Format.PARQUET:
        strategy = "concat" if big else "rewrite"
    elif not p.kind.compression.concatenates or (p.kind.header and p.kind.compression is not Compression.NONE):
        strategy = "recompress"
    else:
        strategy = "concat"
    return BinReport(
        partition=p.bin.partition, output=p.output, sources=p.bin.keys, bytes=p.bin.size, group=p.bin.group,
        status=status, strategy=strategy, message=message,
        merged_bytes=pending.size if pending else None, rows=pending.rows if pending else None,
    )


def _pending_of(result: TaskResult) -> PendingUpload | None:
    return result.manifest.uploads[0] if result.manifest and result.manifest.uploads else None


def _merge_all(job: Job, store: S3Store, planned: list[_Planned], parts_pool: Executor, copy_pool: Executor,
               stats: MergeStats, bin_threads: int, progress: ProgressHook, *,
               planning_pool: Executor | None = None) -> list[TaskResult | MergeError]:
    def one(p: _Planned) -> TaskResult | MergeError:
        try:
            return _merge_bin(job, store, p, parts_pool, copy_pool, stats, planning_pool)
        except MergeError as exc:
            return exc
        except MpcommitError as exc:  # a store failure on this bin: skip it, like any other
            return MergeError(f"bin {p.number} ({p.output}) not merged: {exc}")

    outcomes: dict[int, TaskResult | MergeError] = {}

    def keep(p: _Planned, outcome: TaskResult | MergeError) -> None:
        outcomes[p.number] = outcome

    run_bounded(one, planned, threads=bin_threads, on_result=keep, progress=progress, phase="merge",
                total=len(planned))
    return [outcomes[p.number] for p in planned]


def _merge_bin(job: Job, store: S3Store, p: _Planned, parts_pool: Executor, copy_pool: Executor,
               stats: MergeStats, planning_pool: Executor | None = None) -> TaskResult:
    bucket = job.destination.bucket
    sources = [SourceObject(c.key, c.etag, c.size) for c in p.bin.sources]
    task = prepare(store, bucket, sources, p.kind, key=p.output, partition=p.bin.partition, stats=stats,
                   pool=planning_pool)
    pending = run_merge(store, bucket, task, pool=parts_pool, copy_pool=copy_pool, stats=stats)
    try:
        return record_uploads(job, p.number, [pending], store=store)
    except BaseException:
        store.abort_multipart_upload(bucket, pending.key, pending.upload_id)
        raise


def record_uploads(job: Job, task_id: int, uploads: list[PendingUpload], *, store: S3Store) -> TaskResult:
    """Write a task manifest for uploads made outside a TaskAttempt (merges) and return its result."""
    return record_manifest(store, job.spec, task_id, 0, secrets.token_hex(4), uploads)


def _verify_sources(store: S3Store, bucket: str, planned: list[_Planned], outcomes: list[TaskResult | MergeError],
                    pool: Executor, threads: int, under: Counter[str]) -> list[TaskResult | MergeError]:
    """Just before the commit: a bin whose source changed or vanished since it was merged is dropped (its
    upload aborted), so that a merged file never brings back rows deleted meanwhile. The commit's deletes
    are pinned by ETag as well; this narrows the window to the commit itself.

    Per directory, one listing when it costs fewer requests than a HEAD per source (``under`` counts the
    objects below each directory, from the first listing)."""
    by_dir: dict[str, list[str]] = {}
    for p, o in zip(planned, outcomes):
        if isinstance(o, TaskResult):
            for src in p.bin.sources:
                by_dir.setdefault(src.key.rsplit("/", 1)[0] + "/" if "/" in src.key else "", []).append(src.key)

    def listed(directory: str, keys: list[str]) -> dict[str, str | None]:
        wanted = set(keys)
        found: dict[str, str | None] = dict.fromkeys(keys)
        for obj in store.list_objects(bucket, directory):
            if obj.key in wanted:
                found[obj.key] = obj.etag
        return found

    def headed(key: str) -> dict[str, str | None]:
        info = store.head_object(bucket, key)
        return {key: info.etag if info else None}

    checks: list[Callable[[], dict[str, str | None]]] = []
    for directory, keys in by_dir.items():
        if -(-under.get(directory, 0) // 1000) < len(keys):
            checks.append(functools.partial(listed, directory, keys))
        else:
            checks.extend(functools.partial(headed, key) for key in keys)
    current: dict[str, str | None] = {}
    run_bounded(lambda check: check(), checks, threads=threads, executor=pool,
                on_result=lambda _check, found: current.update(found))

    out: list[TaskResult | MergeError] = []
    for p, o in zip(planned, outcomes):
        if isinstance(o, TaskResult):
            changed = [s.key for s in p.bin.sources if current.get(s.key) != s.etag]
            if changed:
                pending = _pending_of(o)
                if pending is not None:
                    store.abort_multipart_upload(bucket, pending.key, pending.upload_id)
                o = SourceChangedError(
                    f"s3://{bucket}/{changed[0]} changed or was deleted while its bin was merged "
                    f"({len(changed)} source(s)); merge skipped, sources left as they are"
                )
        out.append(o)
    return out
