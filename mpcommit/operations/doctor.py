"""``mpcommit doctor``: what a user's own store does where S3-compatible stores differ, and what that means for
mpcommit there.

It runs the store probes (:mod:`mpcommit.operations.probes`) on hidden keys under a destination, removes
everything they wrote, and turns their findings into features: which of mpcommit's features are safe on that
store, which are refused or unavailable, and which settings to use. The conditional-write answer is the one the
commit path itself asks for (:func:`mpcommit.store.conditional.conditional_writes`, remembered per bucket).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol.layout import Destination, table_of
from ..protocol.order import TableOrder
from ..store.s3 import S3Store
from .probes import BEHAVIOURS, Finding, Status, new_run_id, planned_keys, probe_base, run_probes


@dataclass(frozen=True)
class Feature:
    """One of mpcommit's features on this store: whether it is safe, why, and what to set or do."""

    name: str
    safe: bool
    why: str
    advice: str = ""
    #: The behaviours it is judged from: a finding that says "differs, limits" names a feature judged unsafe
    #: from it, so that "limits" always points at a "no" in the features' table.
    probes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"feature": self.name, "safe": self.safe, "why": self.why, "advice": self.advice,
                "probes": list(self.probes)}


@dataclass(frozen=True)
class Diagnosis:
    """What ``mpcommit doctor`` found on one store."""

    endpoint: str
    destination: str
    base: str
    findings: tuple[Finding, ...]
    features: tuple[Feature, ...]
    seconds: float
    #: Keys under the commit order of the destination's table that are no record of mpcommit's (a mistyped or
    #: hostile position): ignored by every job, and worth removing.
    order_strays: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Every probe could tell (none FAILED)."""
        return all(f.status is not Status.FAILED for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        titles = {b.id: b.title for b in BEHAVIOURS}
        return {
            "endpoint": self.endpoint, "destination": self.destination, "probeKeysUnder": self.base,
            "complete": self.complete, "seconds": round(self.seconds, 2),
            "findings": [{**f.to_json(), "title": titles.get(f.probe, f.probe)} for f in self.findings],
            "features": [x.to_json() for x in self.features],
            "orderStrays": list(self.order_strays),
        }


def plan(destination: Destination, run_id: str = "RUN") -> tuple[str, list[tuple[str, str]]]:
    """Where a run would write, and (key, what) of everything it would create there: the dry run's answer."""
    base = probe_base(destination.prefix, run_id)
    return base, planned_keys(base)


def diagnose(store: S3Store, destination: Destination, *, progress: Callable[[str], None] = lambda _m: None,
             run_id: str | None = None) -> Diagnosis:
    """Check the bucket, run every probe under the destination's hidden doctor folder, clean up, and judge."""
    store.head_bucket(destination.bucket)
    base = probe_base(destination.prefix, run_id or new_run_id())
    started = time.monotonic()
    findings = run_probes(store, destination.bucket, base, progress=progress)
    table = table_of(destination)
    strays = tuple(f"s3://{table.bucket}/{key}" for key in TableOrder(store, table).view().strays)
    return Diagnosis(store.endpoint, destination.uri, base, tuple(findings), tuple(features(findings)),
                     time.monotonic() - started, strays)


def features(findings: list[Finding] | tuple[Finding, ...]) -> list[Feature]:
    """mpcommit's features judged from the findings (a behaviour not probed counts as not known to be safe)."""
    by = {f.probe: f for f in findings}

    def status(probe: str) -> Status:
        found = by.get(probe)
        return found.status if found is not None else Status.FAILED

    def value(probe: str) -> str:
        found = by.get(probe)
        return found.value if found is not None else "not probed"

    def ok(*probes: str) -> bool:
        return all(status(p) in (Status.AS_S3, Status.WORKED_AROUND) for p in probes)

    out = []
    ordered = status("put_if_none_match") is Status.AS_S3 and status("put_if_match") is Status.AS_S3
    out.append(Feature(
        "concurrent jobs on one table", ordered,
        "conditional writes hold (PutObject If-None-Match / If-Match answer 412 and leave the object)" if ordered else
        f"conditional writes do not hold here (If-None-Match: {value('put_if_none_match')}; If-Match: "
        f"{value('put_if_match')}): mpcommit refuses concurrent destructive jobs on one table",
        "S3Options(conditional_writes=True) states it and saves the per-bucket probe" if ordered else
        "run one writing job per table at a time", ("put_if_none_match", "put_if_match")))
    listings = ok("listing_past_1000", "listing_order")
    worked = status("listing_past_1000") is Status.WORKED_AROUND or status("listing_order") is Status.WORKED_AROUND
    out.append(Feature(
        "overwrite, recovery and cleanup (listings proven complete)", listings,
        ("listings past 1,000 keys are complete and in order" if listings and not worked else
         f"listings are checked page by page and this store's were not consistent ({value('listing_past_1000')}; "
         f"{value('listing_order')}): mpcommit lists again without URL encoding and refuses a listing it cannot "
         "prove complete" if listings else
         f"listings cannot be trusted here ({value('listing_past_1000')}; {value('listing_order')})"),
        "" if listings and not worked else "expect InconsistentListingError where a listing cannot be proven "
        "complete: nothing is deleted from it", ("listing_past_1000", "listing_order")))
    out.append(Feature(
        "pending-upload cleanup (uploads list/abort, the cleanup script)", ok("uploads_paging"),
        f"ListMultipartUploads: {value('uploads_paging')}",
        "" if status("uploads_paging") is Status.AS_S3 else by["uploads_paging"].note if "uploads_paging" in by else "",
        ("uploads_paging",)))
    ages = status("uploads_initiated") is Status.AS_S3
    out.append(Feature(
        "age-based cleanup (--older-than)", ages, f"Initiated of a pending upload: {value('uploads_initiated')}",
        "" if ages else "abort by job instead: `mpcommit uploads abort S3URI --job ID`", ("uploads_initiated",)))
    lifecycle = status("lifecycle") is Status.AS_S3
    out.append(Feature(
        "lifecycle safety net (mpcommit lifecycle)", lifecycle, f"bucket lifecycle: {value('lifecycle')}",
        "`mpcommit lifecycle BUCKET --abort-incomplete-days 7`" if lifecycle else
        "schedule `mpcommit uploads abort S3URI --older-than 7d --yes` (or scripts/cleanup_orphaned_uploads.py)",
        ("lifecycle",)))
    repeat = ok("complete_twice", "multipart_etag") and (
        status("complete_twice") is Status.AS_S3 or status("multipart_etag") is Status.AS_S3)
    out.append(Feature(
        "retried completes and recovery", repeat,
        f"a repeated complete: {value('complete_twice')}; multipart ETag: {value('multipart_etag')}",
        "" if repeat else "a recovery cannot recognise files it completed before a crash: it stops with "
        "CommitStateUnknownError; check such files by hand (`mpcommit show`, the journal) before re-running",
        ("complete_twice", "multipart_etag")))
    turns = ok("delete_if_match")
    out.append(Feature(
        "one finisher per commit (a driver and `jobs recover` take turns)", turns,
        f"DeleteObject If-Match: {value('delete_if_match')}",
        "" if turns else "run one `mpcommit jobs recover` per job at a time, and not while its driver may still be "
        "committing", ("delete_if_match",)))
    copies = status("copy_range") is Status.AS_S3
    pinned = status("copy_if_match") is Status.AS_S3
    out.append(Feature(
        "compaction (merge=MergePolicy(), mpcommit compact)", copies, f"UploadPartCopy ranges: {value('copy_range')}",
        "" if copies else "do not merge or compact on this store", ("copy_range",)))
    out.append(Feature(
        "compaction while jobs write the table", copies and pinned, f"CopySourceIfMatch: {value('copy_if_match')}",
        "" if copies and pinned else "compact only while no job writes the table (sources are not pinned by ETag "
        "here)" if copies else "do not merge or compact on this store", ("copy_range", "copy_if_match")))
    crc = status("part_checksum") is Status.AS_S3
    out.append(Feature(
        "part integrity (CRC32 per part)", status("part_checksum") is not Status.LIMITS,
        f"UploadPart ChecksumCRC32: {value('part_checksum')}",
        "" if crc else "the store does not verify parts: corruption in transit is caught only by the echo, if any",
        ("part_checksum",)))
    nested = status("key_and_folder") is Status.AS_S3
    out.append(Feature(
        "destinations below an object's key", nested, f"an object `a` beside `a/b`: {value('key_and_folder')}",
        "" if nested else "choose destinations whose prefix is not also an object's key", ("key_and_folder",)))
    return out

