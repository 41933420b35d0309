"""Store probes: the S3 behaviours mpcommit relies on, each checked by a few requests on hidden keys.

S3-compatible stores differ exactly where mpcommit's safety rests: conditional writes, whether a listing is
complete and in order, how ListMultipartUploads pages, what UploadPartCopy copies, what dates and tags a
multipart object gets. Each :class:`Probe` makes a few requests under ``PREFIX/_temporary/mpcommit-doctor/RUN/``,
says what the store did (:class:`Finding`: a short value for the matrix, a :class:`Status`, and what mpcommit
does about it) and leaves nothing behind (:func:`run_probes` cleans up whatever happens).

The same probes run against every test server (``tests/stores``, which writes docs/STORES.md) and against a
user's store (``mpcommit doctor``, mpcommit.operations.doctor). What AWS S3 documents for each is ``aws``:
taken from AWS's documentation (``aws_source``), not measured.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from enum import Enum
from typing import Any

from ..errors import (
    ChecksumMismatchError,
    InvalidPartError,
    NoSuchUploadError,
    PreconditionFailedError,
    StoreError,
    UnsupportedRequestError,
)
from ..options import RetryPolicy
from ..sizing import crc32_b64, multipart_etag
from ..store.conditional import PROBE_FOLDER as CONDITIONAL_FOLDER
from ..store.conditional import conditional_writes
from ..store.s3 import S3Store

#: Where the probes write, below the destination: hidden from readers (a leading ``_``) and apart from the
#: jobs' own ``_temporary/mpcommit/`` records, so that no job, `jobs list` or recovery ever mistakes them.
PROBE_FOLDER = "_temporary/mpcommit-doctor"
#: Keys in the listing probe: one more than a page, holding ``=`` (LocalStack 4.13 lost keys past 1,000 so).
LISTING_KEYS = 1001
#: Keys of the order probe, in UTF-8 byte order (S3's); UTF-16 order (Java's String) puts the emoji first. None
#: is a folder of another (``a`` beside ``a/b``): some stores cannot hold that (the ``key_and_folder`` probe).
ORDER_KEYS = ("a-", "a/b", "a=b", "a~", "\u00e9", "\ufffd", "\U0001f600")
#: Seconds between an upload's creation and its completion in the Last-Modified probe (dates have seconds).
DATE_GAP = 2.2


class Status(str, Enum):
    """How a store's answer compares with what AWS S3 documents, and what that means for mpcommit."""

    AS_S3 = "as S3"          # behaves as AWS S3 documents
    WORKED_AROUND = "differs, handled"   # differs; mpcommit copes (a fallback, a check of its own)
    LIMITS = "differs, limits"          # differs; a feature is unsafe or unavailable there (doctor says which)
    UNUSED = "differs, unused"          # differs in a request mpcommit does not send: it limits no feature
    FAILED = "probe failed"  # the probe could not tell (an unexpected error; the detail says which)


@dataclass(frozen=True)
class Finding:
    """One probe's answer on one store."""

    probe: str
    value: str                 # the matrix cell: what the store did, in a few words
    status: Status
    note: str = ""             # what mpcommit does about it, when it differs
    detail: str = ""           # requests and answers, for the curious

    def to_json(self) -> dict[str, Any]:
        return {"probe": self.probe, "value": self.value, "status": self.status.value, "note": self.note,
                "detail": self.detail}


@dataclass
class ProbeRun:
    """What the probes of one run share: the store, where they write, and what they created (for cleanup)."""

    store: S3Store
    bucket: str
    base: str                                  # PREFIX/_temporary/mpcommit-doctor/RUN/
    progress: Callable[[str], None] = lambda _message: None
    objects: set[str] = field(default_factory=set)
    uploads: list[tuple[str, str]] = field(default_factory=list)

    def key(self, name: str) -> str:
        return self.base + name

    def put(self, name: str, body: bytes, **params: Any) -> dict[str, Any]:
        key = self.key(name)
        self.objects.add(key)
        return self.store.request("put_object", bucket=self.bucket, key=key, Key=key, Body=body, **params)

    def create_upload(self, name: str) -> tuple[str, str, dict[str, Any]]:
        key = self.key(name)
        response = self.store.request("create_multipart_upload", bucket=self.bucket, key=key, Key=key,
                                      ChecksumAlgorithm="CRC32")
        upload_id = str(response["UploadId"])
        self.uploads.append((key, upload_id))
        self.objects.add(key)  # in case it gets completed
        return key, upload_id, response

    def upload_part(self, key: str, upload_id: str, number: int, body: bytes, crc32: str | None = None) -> dict[str, Any]:
        return self.store.request("upload_part", bucket=self.bucket, key=key, Key=key, UploadId=upload_id,
                                  PartNumber=number, Body=body, ChecksumAlgorithm="CRC32",
                                  ChecksumCRC32=crc32 or crc32_b64(body))

    def complete(self, key: str, upload_id: str, parts: Sequence[dict[str, Any]], **params: Any) -> dict[str, Any]:
        return self.store.request("complete_multipart_upload", bucket=self.bucket, key=key, Key=key,
                                  UploadId=upload_id, MultipartUpload={"Parts": list(parts)}, **params)


def _date_of(response: dict[str, Any]) -> datetime | None:
    """The server's clock at the response (its Date header)."""
    headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    try:
        return parsedate_to_datetime(headers["date"]).astimezone(timezone.utc) if "date" in headers else None
    except (TypeError, ValueError):
        return None


def _code(exc: StoreError) -> str:
    return exc.code or type(exc).__name__


def _refusal(exc: StoreError) -> str:
    if isinstance(exc, UnsupportedRequestError):
        return f"not implemented ({_code(exc)})"
    return f"error {_code(exc)}"


# ---------------------------------------------------------------- conditional writes
def _conditional_puts(run: ProbeRun) -> list[Finding]:
    """PutObject If-None-Match and If-Match, as the commit path asks them (mpcommit.store.conditional): the
    answer is remembered for this bucket in this process, so a commit that follows reuses it."""
    answer = conditional_writes(run.store, run.bucket, run.base)
    source = "" if answer.source == "probe" else f" (stated in S3Options, not probed: {answer.source})"
    notes = [n for n in answer.detail.split("; ") if n]

    def finding(probe: str, held: bool, header: str, as_s3: str) -> Finding:
        if held:
            return Finding(probe, as_s3 + source, Status.AS_S3)
        said = next((n.split(": ", 1)[1] for n in notes if n.startswith(header)), "not honoured")
        return Finding(probe, said + source, Status.LIMITS, _NO_CONDITIONAL, answer.detail)

    return [finding("put_if_none_match", answer.create_only, "If-None-Match", "412 on an existing key"),
            finding("put_if_match", answer.match_etag, "If-Match", "412 on a stale ETag")]


def _complete_if_none_match(run: ProbeRun) -> Finding:
    probe = "complete_if_none_match"
    run.put("cond/complete", b"existing")
    key, upload_id, _ = run.create_upload("cond/complete")
    part = run.upload_part(key, upload_id, 1, b"new")
    parts = [{"PartNumber": 1, "ETag": part["ETag"], "ChecksumCRC32": crc32_b64(b"new")}]
    try:
        run.complete(key, upload_id, parts, IfNoneMatch="*")
    except PreconditionFailedError:
        return Finding(probe, "412 on an existing key", Status.AS_S3)
    except StoreError as exc:
        return Finding(probe, _refusal(exc), Status.LIMITS, _NO_CONDITIONAL, str(exc))
    return Finding(probe, "ignored: replaced the key", Status.LIMITS, _NO_CONDITIONAL)


def _delete_if_match(run: ProbeRun) -> Finding:
    probe = "delete_if_match"
    etag = str(run.put("cond/delete", b"1")["ETag"])
    key = run.key("cond/delete")
    try:
        run.store.request("delete_object", bucket=run.bucket, key=key, Key=key,
                          IfMatch='"00000000000000000000000000000000"')
    except PreconditionFailedError:
        pass
    except UnsupportedRequestError as exc:
        return Finding(probe, _refusal(exc), Status.WORKED_AROUND, _UNCONDITIONAL_RELEASE, str(exc))
    except StoreError as exc:
        return Finding(probe, _refusal(exc), Status.WORKED_AROUND, _TURN_STAYS, str(exc))
    else:
        still = run.store.head_object(run.bucket, key) is not None
        return Finding(probe, "ignored: " + ("kept the key but answered success" if still else "deleted the key"),
                       Status.LIMITS, _TURN_NOTE)
    try:
        run.store.request("delete_object", bucket=run.bucket, key=key, Key=key, IfMatch=etag)
    except StoreError as exc:
        return Finding(probe, f"412 on a stale ETag, but refused the current one: {_code(exc)}", Status.WORKED_AROUND,
                       _TURN_STAYS, str(exc))
    return Finding(probe, "412 on a stale ETag", Status.AS_S3)


_NO_CONDITIONAL = ("concurrent jobs on one table cannot be ordered by the store: mpcommit refuses to race "
                   "concurrent destructive jobs on one table there (SPEC I9); run one at a time")
#: protocol/commit/turn.py's fallback where the store refuses a conditional delete (LocalStack 4.13).
_UNCONDITIONAL_RELEASE = ("a finisher gives its turn back by reading it first and deleting it only while it still "
                          "holds its own bytes (one that took the turn over wrote others)")
_TURN_STAYS = ("a finisher's turn given back after a failed finish stays until its lease ends: the next finisher "
               "waits that long")
_TURN_NOTE = ("a finisher giving its turn back after a failure can delete a turn another finisher took over "
              "meanwhile, so that two finish one commit side by side: run one `mpcommit jobs recover` per job at a time")


# ---------------------------------------------------------------- listings
def _listing_keys(base: str) -> list[str]:
    return [f"{base}list/dt=2024-01-0{i % 3}/k={i:04d}.csv" for i in range(LISTING_KEYS)]


def _walk(run: ProbeRun, prefix: str, **params: Any) -> tuple[list[str], int, str | None]:
    """Keys of a ListObjectsV2 (botocore's default: URL-encoded), pages, and the first inconsistency seen."""
    keys: list[str] = []
    pages = 0
    token: str | None = None
    while True:
        extra = {"ContinuationToken": token} if token else {}
        page = run.store.request("list_objects_v2", bucket=run.bucket, key=prefix, Prefix=prefix, **params, **extra)
        pages += 1
        keys.extend(str(o["Key"]) for o in page.get("Contents", []) or [])
        if not page.get("IsTruncated"):
            return keys, pages, None
        token = page.get("NextContinuationToken")
        if not token:
            return keys, pages, f"page {pages} is truncated without a continuation token"
        if pages > LISTING_KEYS:
            return keys, pages, "the pages do not end"


def _listing_past_a_page(run: ProbeRun) -> Finding:
    probe = "listing_past_1000"
    keys = _listing_keys(run.base)
    run.progress(f"writing {len(keys):,} small objects for the listing probe")
    run.objects.update(keys)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: run.store.request("put_object", bucket=run.bucket, key=k, Key=k, Body=b""), keys))
    listed, pages, problem = _walk(run, run.key("list/"))
    missing = len(set(keys) - set(listed))
    if problem is None and not missing and len(listed) == len(keys):
        return Finding(probe, f"complete ({len(keys):,} keys in {pages} pages)", Status.AS_S3)
    what = f"{len(listed):,} of {len(keys):,} keys in {pages} pages" + (f"; {problem}" if problem else "")
    return Finding(probe, f"incomplete: {what}", Status.WORKED_AROUND,
                   "every listing is checked page by page (SPEC I8); an inconsistent URL-encoded listing is repeated "
                   "without encoding and used only if that one is complete, else nothing is deleted, aborted or "
                   "committed from it (mpcommit.store.listing)", what)


def _listing_order(run: ProbeRun) -> Finding:
    probe = "listing_order"
    for name in ORDER_KEYS:
        run.put(f"order/{name}", b"")
    prefix = run.key("order/")
    listed = [k[len(prefix):] for k in _walk(run, prefix)[0]]
    utf8 = sorted(ORDER_KEYS, key=lambda k: k.encode("utf-8"))
    utf16 = sorted(ORDER_KEYS, key=lambda k: k.encode("utf-16-be"))
    if listed == utf8:
        return Finding(probe, "UTF-8 byte order", Status.AS_S3)
    if sorted(listed) != sorted(ORDER_KEYS):
        return Finding(probe, f"lost or altered keys: {listed!r}", Status.LIMITS, _ORDER_NOTE, repr(listed))
    kind = "UTF-16 order" if listed == utf16 else "unsorted"
    return Finding(probe, kind, Status.WORKED_AROUND, _ORDER_NOTE, repr(listed))


def _key_and_folder(run: ProbeRun) -> Finding:
    probe = "key_and_folder"
    run.put("nest/a", b"file")
    try:
        run.put("nest/a/b", b"below")
    except StoreError as exc:
        return Finding(probe, f"refused ({_code(exc)})", Status.LIMITS,
                       "a destination cannot sit below an object's key there (s3://b/t/... beside an object t): the "
                       "store refuses the job's first write, and mpcommit reports that refusal", str(exc))
    prefix = run.key("nest/")
    listed = _walk(run, prefix)[0]
    if sorted(listed) == [prefix + "a", prefix + "a/b"]:
        return Finding(probe, "both kept", Status.AS_S3)
    return Finding(probe, f"lists {[k[len(prefix):] for k in listed]!r}", Status.LIMITS, "", repr(listed))


_ORDER_NOTE = ("a listing out of UTF-8 order across pages is refused as inconsistent (SPEC I8); within one page "
               "order does not matter to mpcommit")


def _uploads_paging(run: ProbeRun) -> Finding:
    probe = "uploads_paging"
    made = [run.create_upload(f"mpu/{name}")[:2] for name in ("a", "b", "b", "b", "c")]
    prefix = run.key("mpu/")
    params: dict[str, Any] = {"Prefix": prefix, "MaxUploads": 2}
    found: list[tuple[str, str]] = []
    pages = 0
    refused = False
    while pages < 10:
        try:
            page = run.store.request("list_multipart_uploads", bucket=run.bucket, key=prefix, **params)
        except StoreError as exc:
            if exc.code != "InvalidArgument" or "UploadIdMarker" not in params:
                raise
            refused = True
            break
        pages += 1
        found.extend((str(u["Key"]), str(u["UploadId"])) for u in page.get("Uploads", []) or [])
        if not page.get("IsTruncated"):
            break
        params["KeyMarker"] = page.get("NextKeyMarker") or found[-1][0]
        params["UploadIdMarker"] = page.get("NextUploadIdMarker") or found[-1][1]
    if refused:
        return Finding(probe, "refuses its own UploadIdMarker (400 InvalidArgument); KeyMarker alone works",
                       Status.WORKED_AROUND,
                       "pages by KeyMarker alone and lists each page's last key on its own, accepted only when that "
                       "listing proves it holds every upload of the key (more than 1,000 pending uploads of one key "
                       "are refused)", f"{pages} page(s) before the refusal")
    if sorted(found) == sorted(made) and pages == 1:
        return Finding(probe, "ignores MaxUploads (one page)", Status.WORKED_AROUND,
                       "nothing to do: a listing in one page needs no markers", f"{len(found)} uploads in one page")
    if sorted(found) == sorted(made):
        return Finding(probe, "KeyMarker + UploadIdMarker", Status.AS_S3, "", f"{len(found)} uploads in {pages} pages")
    return Finding(probe, f"incomplete: {len(found)} of {len(made)} uploads", Status.WORKED_AROUND,
                   "an upload listing that is not proven complete is refused: nothing is aborted from it",
                   f"{pages} pages")


# ---------------------------------------------------------------- multipart objects
def _multipart_dates(run: ProbeRun) -> list[Finding]:
    """Initiated, Last-Modified, ETag and a repeated complete of one multipart object (one upload, one wait)."""
    key, upload_id, created = run.create_upload("dates/object")
    t_create = _date_of(created)
    listed = run.store.request("list_multipart_uploads", bucket=run.bucket, key=key, Prefix=key)
    initiated = next((u.get("Initiated") for u in listed.get("Uploads", []) or [] if u.get("UploadId") == upload_id),
                     None)
    findings = [_initiated_finding(initiated, t_create)]
    run.progress(f"waiting {DATE_GAP:.1f} s between an upload's start and its completion")
    time.sleep(DATE_GAP)
    bodies = [b"x" * (5 * 1024 * 1024), b"tail"]
    parts = []
    for number, body in enumerate(bodies, 1):
        etag = str(run.upload_part(key, upload_id, number, body)["ETag"])
        parts.append({"PartNumber": number, "ETag": etag, "ChecksumCRC32": crc32_b64(body)})
    completed = run.complete(key, upload_id, parts)
    t_complete = _date_of(completed)
    head = run.store.request("head_object", bucket=run.bucket, key=key, Key=key)
    findings.append(_last_modified_finding(head.get("LastModified"), t_create, t_complete))
    findings.append(_etag_finding(str(head.get("ETag", "")), [p["ETag"] for p in parts]))
    findings.append(_complete_twice(run, key, upload_id, parts, str(completed.get("ETag", ""))))
    return findings


def _initiated_finding(initiated: Any, t_create: datetime | None) -> Finding:
    probe = "uploads_initiated"
    if not isinstance(initiated, datetime):
        return Finding(probe, "not given", Status.LIMITS, _AGE_NOTE)
    stamp = initiated if initiated.tzinfo else initiated.replace(tzinfo=timezone.utc)
    if t_create is None:
        return Finding(probe, "given (the server sent no Date to compare with)", Status.FAILED)
    off = abs((stamp - t_create).total_seconds())
    if off <= 60:
        return Finding(probe, "the upload's start", Status.AS_S3)
    return Finding(probe, f"not the upload's start: {stamp.isoformat()}", Status.LIMITS, _AGE_NOTE,
                   f"{off:,.0f} s from the server's Date at creation")


_AGE_NOTE = ("ages of pending uploads are meaningless there: `uploads abort --older-than` would take every upload "
             "for old (live and committing jobs stay protected by their records); clean up by job (`--job ID`)")


def _last_modified_finding(modified: Any, t_create: datetime | None, t_complete: datetime | None) -> Finding:
    probe = "multipart_last_modified"
    if not isinstance(modified, datetime) or t_create is None or t_complete is None:
        return Finding(probe, "cannot tell (no dates)", Status.FAILED)
    stamp = modified if modified.tzinfo else modified.replace(tzinfo=timezone.utc)
    near_start = abs((stamp - t_create).total_seconds()) <= 1.0
    near_end = abs((stamp - t_complete).total_seconds()) <= 1.0
    detail = f"created {t_create.isoformat()}, completed {t_complete.isoformat()}, Last-Modified {stamp.isoformat()}"
    if near_start and not near_end:
        return Finding(probe, "the upload's start", Status.AS_S3, "", detail)
    if near_end and not near_start:
        return Finding(probe, "the completion", Status.WORKED_AROUND, _DATE_NOTE, detail)
    return Finding(probe, f"neither ({stamp.isoformat()})", Status.WORKED_AROUND, _DATE_NOTE, detail)


_DATE_NOTE = ("an overwrite tells a later job's files from the replaced ones by comparing Last-Modified with its "
              "journal's, per job (one newer file marks a job whose files all stay), which holds with either date")


def _etag_finding(etag: str, part_etags: list[str]) -> Finding:
    probe = "multipart_etag"
    try:
        expected = multipart_etag(part_etags)
    except ValueError:
        return Finding(probe, f"parts' ETags are not MD5s ({part_etags[0]})", Status.WORKED_AROUND, _ETAG_NOTE)
    if etag == expected:
        return Finding(probe, "MD5 of the parts' MD5s, -N", Status.AS_S3)
    return Finding(probe, f"other ({etag})", Status.WORKED_AROUND, _ETAG_NOTE, f"expected {expected}")


_ETAG_NOTE = ("a complete retried after its answer was lost, or repeated by a recovery, is recognised by the object's "
              "size and this ETag where the store answers NoSuchUpload to it (see below): with another ETag there, "
              "the recovery stops with CommitStateUnknownError instead of finishing")


def _complete_twice(run: ProbeRun, key: str, upload_id: str, parts: list[dict[str, Any]], etag: str) -> Finding:
    probe = "complete_twice"
    try:
        again = run.complete(key, upload_id, parts)
    except NoSuchUploadError:
        return Finding(probe, "NoSuchUpload", Status.WORKED_AROUND,
                       "a complete retried after its answer was lost, or repeated by a recovery, finds NoSuchUpload: "
                       "mpcommit then takes the object for its own when its size and multipart ETag (the MD5 of "
                       "exactly these parts' MD5s) are the upload's")
    except StoreError as exc:
        return Finding(probe, f"error {_code(exc)}", Status.WORKED_AROUND, "", str(exc))
    same = str(again.get("ETag", "")) == etag
    return Finding(probe, "200 again, same ETag" if same else "200 again, another ETag", Status.AS_S3)


def _part_checksum(run: ProbeRun) -> Finding:
    probe = "part_checksum"
    key, upload_id, _ = run.create_upload("checksum/object")
    echoed = run.upload_part(key, upload_id, 1, b"good").get("ChecksumCRC32")
    try:
        run.upload_part(key, upload_id, 2, b"bad", crc32=crc32_b64(b"something else"))
        verified = False
    except ChecksumMismatchError:
        verified = True
    except StoreError as exc:
        return Finding(probe, f"a wrong CRC32: {_code(exc)}", Status.WORKED_AROUND, _CRC_NOTE, str(exc))
    if verified and echoed == crc32_b64(b"good"):
        return Finding(probe, "verified and echoed", Status.AS_S3)
    value = ("verified, not echoed" if verified else
             "echoed, not verified" if echoed else "neither verified nor echoed")
    return Finding(probe, value, Status.WORKED_AROUND if verified or echoed else Status.LIMITS, _CRC_NOTE)


_CRC_NOTE = ("mpcommit sends a CRC32 with every part and compares the echo when there is one; where the store "
             "neither verifies nor echoes it, a part corrupted in transit goes unnoticed")


def _part_size_minimum(run: ProbeRun) -> Finding:
    probe = "part_size_minimum"
    key, upload_id, _ = run.create_upload("small-parts/object")
    parts = []
    for number, body in enumerate((b"a", b"b"), 1):
        etag = run.upload_part(key, upload_id, number, body)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag, "ChecksumCRC32": crc32_b64(body)})
    try:
        run.complete(key, upload_id, parts)
    except InvalidPartError as exc:
        return Finding(probe, f"refused at complete ({_code(exc)})", Status.AS_S3)
    return Finding(probe, "accepted", Status.WORKED_AROUND,
                   "mpcommit plans every part but the last at 5 MiB or more anyway (sizing.py, compaction/parts.py)")


def _copy_range(run: ProbeRun) -> list[Finding]:
    source = bytes(range(256)) * 40  # 10,240 bytes
    etag = str(run.put("copy/source", source)["ETag"])
    src = run.key("copy/source")
    key, upload_id, _ = run.create_upload("copy/target")
    findings = []
    try:
        result = run.store.request("upload_part_copy", bucket=run.bucket, key=key, Key=key, UploadId=upload_id,
                                   PartNumber=1, CopySource={"Bucket": run.bucket, "Key": src},
                                   CopySourceRange="bytes=100-4195", CopySourceIfMatch=etag)
        part = result["CopyPartResult"]
        entry = {"PartNumber": 1, "ETag": part["ETag"]}
        if part.get("ChecksumCRC32"):
            entry["ChecksumCRC32"] = part["ChecksumCRC32"]
        run.complete(key, upload_id, [entry])
        body = run.store.get_object(run.bucket, key)
        if body == source[100:4196]:
            findings.append(Finding("copy_range", "the range's exact bytes (inclusive)", Status.AS_S3))
        else:
            findings.append(Finding("copy_range", f"wrong bytes ({len(body):,} bytes for 4,096)", Status.LIMITS,
                                    _COPY_NOTE))
    except StoreError as exc:
        findings.append(Finding("copy_range", _refusal(exc), Status.LIMITS, _COPY_NOTE, str(exc)))
    findings.append(_copy_if_match(run, src))
    return findings


_COPY_NOTE = ("compaction assembles merged files from server-side copies of ranges: do not use merge=MergePolicy() "
              "or `mpcommit compact` there")


def _copy_if_match(run: ProbeRun, src: str) -> Finding:
    probe = "copy_if_match"
    key, upload_id, _ = run.create_upload("copy/stale")
    try:
        run.store.request("upload_part_copy", bucket=run.bucket, key=key, Key=key, UploadId=upload_id, PartNumber=1,
                          CopySource={"Bucket": run.bucket, "Key": src},
                          CopySourceIfMatch='"00000000000000000000000000000000"')
    except PreconditionFailedError:
        return Finding(probe, "412 on a stale ETag", Status.AS_S3)
    except StoreError as exc:
        return Finding(probe, _refusal(exc), Status.LIMITS, _COPY_IF_NOTE, str(exc))
    return Finding(probe, "ignored: copied", Status.LIMITS, _COPY_IF_NOTE)


_COPY_IF_NOTE = ("a compaction pins every source by its ETag; there a source replaced while it runs could be merged "
                 "in its new form: run compactions when no job writes the table")


def _aborted_upload_part(run: ProbeRun) -> Finding:
    probe = "aborted_upload_part"
    key, upload_id, _ = run.create_upload("aborted/object")
    run.store.request("abort_multipart_upload", bucket=run.bucket, key=key, Key=key, UploadId=upload_id)
    # Asked once: a store that answers 5xx here (moto: 500) would otherwise be retried for many seconds.
    once = S3Store(replace(run.store.options, retry=RetryPolicy(max_attempts=1)))
    try:
        once.request("upload_part", bucket=run.bucket, key=key, Key=key, UploadId=upload_id, PartNumber=1,
                     Body=b"late", ChecksumAlgorithm="CRC32", ChecksumCRC32=crc32_b64(b"late"))
    except NoSuchUploadError:
        return Finding(probe, "NoSuchUpload", Status.AS_S3)
    except StoreError as exc:
        return Finding(probe, f"refused, but with {_code(exc)}", Status.WORKED_AROUND,
                       "the part is refused all the same (a 5xx is retried first, then fails the attempt)", str(exc))
    return Finding(probe, "accepted", Status.WORKED_AROUND,
                   "a task attempt still writing after its upload was aborted is not stopped by the store; "
                   "its upload can never be completed, and cleanup aborts it again")


def _delete_objects_quiet(run: ProbeRun) -> Finding:
    probe = "delete_objects_quiet"
    run.put("quiet/a", b"a")
    keys = [run.key("quiet/a"), run.key("quiet/never-written")]
    response = run.store.request("delete_objects", bucket=run.bucket, key=keys[0],
                                 Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    deleted, errors = response.get("Deleted") or [], response.get("Errors") or []
    if errors:
        return Finding(probe, f"errors for {len(errors)} key(s): {errors[0].get('Code')}", Status.WORKED_AROUND,
                       "NoSuchKey errors are taken as deleted; any other error fails the delete by name")
    if deleted:
        return Finding(probe, f"lists deleted keys too ({len(deleted)})", Status.WORKED_AROUND,
                       "mpcommit reads only the errors of a DeleteObjects answer")
    return Finding(probe, "errors only", Status.AS_S3)


def _lifecycle(run: ProbeRun) -> Finding:
    probe = "lifecycle"
    try:
        rules = run.store.get_lifecycle(run.bucket).rules
    except UnsupportedRequestError as exc:
        return Finding(probe, f"not implemented ({_code(exc)})", Status.LIMITS,
                       "no lifecycle safety net: run `mpcommit uploads abort --older-than 7d` (or "
                       "scripts/cleanup_orphaned_uploads.py) from cron", str(exc))
    return Finding(probe, f"supported ({len(rules)} rule(s) on this bucket)", Status.AS_S3)


# ---------------------------------------------------------------- the catalogue
@dataclass(frozen=True)
class Behaviour:
    """One row of the matrix: a behaviour mpcommit relies on, and what AWS S3 documents for it."""

    id: str
    title: str
    why: str          # what mpcommit relies on it for
    aws: str          # AWS S3's documented behaviour (from its docs, not measured here)
    aws_source: str   # where AWS documents it
    #: Whether mpcommit sends this request today; where it does not, a store that differs limits nothing
    #: (Status.UNUSED), and `doctor` must not say "limits" for it.
    used: bool = True


@dataclass(frozen=True)
class Check:
    """The requests that answer one or more behaviours, and the keys they create below the run's base."""

    name: str
    behaviours: tuple[str, ...]
    run: Callable[[ProbeRun], list[Finding]]
    keys: Callable[[str], list[tuple[str, str]]]


_AWS_CONDITIONAL = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-requests.html"
_AWS_API = "https://docs.aws.amazon.com/AmazonS3/latest/API/"

BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour("put_if_none_match", "PutObject `If-None-Match: *` on an existing key",
              "concurrent jobs on one table take numbered places in its commit order with it (protocol/order.py), so "
              "the store orders them, never clocks (SPEC I9); descriptors and journals are created so too",
              "412 Precondition Failed", _AWS_CONDITIONAL),
    Behaviour("put_if_match", "PutObject `If-Match` with a stale ETag",
              "a job's heartbeat and the table's _SUCCESS are replaced only if nobody changed them since they were "
              "read (SPEC I9)",
              "412 Precondition Failed", _AWS_CONDITIONAL),
    Behaviour("complete_if_none_match", "CompleteMultipartUpload `If-None-Match: *` on an existing key",
              "a file completed only where no other file is (SPEC I9); S3Store offers it, the commit does not send "
              "it yet",
              "412 Precondition Failed", _AWS_CONDITIONAL, used=False),
    Behaviour("delete_if_match", "DeleteObject `If-Match` with a stale ETag",
              "a finisher of a job's commit (its driver, a `jobs recover`) gives its turn (JOB/finishing.json) back "
              "only while no other finisher took it over (protocol/commit/turn.py)",
              "412 Precondition Failed", "https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-deletes.html"),
    Behaviour("listing_past_1000", f"ListObjectsV2 of {LISTING_KEYS:,} keys holding `=` (URL-encoded, botocore's default)",
              "overwrite, recovery and cleanup act on listings, and a key lost from one is old data left visible "
              "(SPEC I8)",
              "complete: up to 1,000 keys a page, a continuation token while truncated",
              _AWS_API + "API_ListObjectsV2.html"),
    Behaviour("listing_order", "Order of a listing (keys `a-`, `a/b`, `a=b`, `a~`, `é`, U+FFFD, an emoji)",
              "a listing of several pages is proven complete by its order across pages (SPEC I8)",
              "UTF-8 binary order", _AWS_API + "API_ListObjectsV2.html"),
    Behaviour("key_and_folder", "An object `a` beside an object `a/b`",
              "a destination's prefix is free text: any key may also be the folder of others' keys",
              "both exist (keys are flat names; `/` is only a character)",
              "https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html"),
    Behaviour("uploads_paging", "ListMultipartUploads paging (MaxUploads=2; a key with 3 uploads)",
              "cleanup and abort find every pending upload, past 1,000 (SPEC I3, I6, I8)",
              "KeyMarker + UploadIdMarker, up to 1,000 uploads a page", _AWS_API + "API_ListMultipartUploads.html"),
    Behaviour("uploads_initiated", "`Initiated` of a pending upload",
              "`uploads abort --older-than` and the liveness of writing jobs go by upload ages",
              "when the upload was initiated", _AWS_API + "API_MultipartUpload.html"),
    Behaviour("multipart_last_modified", "Last-Modified of a completed multipart object",
              "an overwrite tells the files it replaces from later jobs' files by date",
              "the date the multipart upload was initiated",
              "https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingMetadata.html"),
    Behaviour("multipart_etag", "ETag of a multipart object",
              "a complete repeated after a crash recognises its object by size and this ETag",
              "not an MD5 of the object's data", _AWS_API + "API_Object.html"),
    Behaviour("complete_twice", "CompleteMultipartUpload repeated after it succeeded",
              "a complete whose answer was lost is retried; recovery completes again",
              "not documented as an error within a short time; clients retry it",
              _AWS_API + "API_CompleteMultipartUpload.html"),
    Behaviour("part_checksum", "UploadPart with `ChecksumCRC32` (a right one, then a wrong one)",
              "a part corrupted on the way is refused, not committed",
              "a wrong checksum is refused; the right one is echoed",
              "https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html"),
    Behaviour("part_size_minimum", "A part below 5 MiB that is not the last",
              "part sizes are planned at 5 MiB or more (compaction's copies too)",
              "refused at complete: EntityTooSmall", "https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html"),
    Behaviour("copy_range", "UploadPartCopy of a byte range (`CopySourceRange`)",
              "compaction copies ranges of small files into merged ones server-side",
              "the inclusive range's bytes", _AWS_API + "API_UploadPartCopy.html"),
    Behaviour("copy_if_match", "UploadPartCopy `CopySourceIfMatch` with a stale ETag",
              "compaction pins every source it copies by its ETag",
              "412 Precondition Failed", _AWS_API + "API_UploadPartCopy.html"),
    Behaviour("aborted_upload_part", "UploadPart to an aborted upload",
              "an aborted attempt cannot keep adding to its upload",
              "refused: NoSuchUpload", _AWS_API + "API_AbortMultipartUpload.html"),
    Behaviour("delete_objects_quiet", "DeleteObjects with `Quiet` (a key that exists, one that does not)",
              "overwrite and cleanup delete in batches of 1,000 and read the errors",
              "only errors are listed; a missing key counts as deleted", _AWS_API + "API_DeleteObjects.html"),
    Behaviour("lifecycle", "GetBucketLifecycleConfiguration",
              "`mpcommit lifecycle` installs the rule that aborts forgotten uploads by itself",
              "supported (NoSuchLifecycleConfiguration when there is none)",
              _AWS_API + "API_GetBucketLifecycleConfiguration.html"),
)
BEHAVIOUR_IDS = tuple(b.id for b in BEHAVIOURS)
BY_ID = {b.id: b for b in BEHAVIOURS}


def _one(fn: Callable[[ProbeRun], Finding]) -> Callable[[ProbeRun], list[Finding]]:
    return lambda run: [fn(run)]


def _keys(*names: str, uploads: Sequence[str] = ()) -> Callable[[str], list[tuple[str, str]]]:
    return lambda base: [(base + n, "object") for n in names] + [(base + n, "multipart upload") for n in uploads]


CHECKS: tuple[Check, ...] = (
    Check("conditional PutObject (If-None-Match, If-Match)", ("put_if_none_match", "put_if_match"),
          _conditional_puts, lambda base: [(f"{base}{CONDITIONAL_FOLDER}<random id>", "object")]),
    Check("conditional CompleteMultipartUpload", ("complete_if_none_match",),
          _one(_complete_if_none_match),
          _keys("cond/complete", uploads=["cond/complete"])),
    Check("conditional DeleteObject", ("delete_if_match",),
          _one(_delete_if_match), _keys("cond/delete")),
    Check("a listing past 1,000 keys", ("listing_past_1000",),
          _one(_listing_past_a_page),
          lambda base: [(k, "object") for k in _listing_keys(base)]),
    Check("the order of a listing", ("listing_order",),
          _one(_listing_order), _keys(*(f"order/{n}" for n in ORDER_KEYS))),
    Check("a key beside a folder of the same name", ("key_and_folder",),
          _one(_key_and_folder), _keys("nest/a", "nest/a/b")),
    Check("ListMultipartUploads paging", ("uploads_paging",),
          _one(_uploads_paging),
          _keys(uploads=[f"mpu/{n}" for n in ("a", "b", "b", "b", "c")])),
    Check("a multipart object's dates and ETag", ("uploads_initiated", "multipart_last_modified", "multipart_etag", "complete_twice"),
          _multipart_dates, _keys("dates/object", uploads=["dates/object"])),
    Check("part checksums", ("part_checksum",),
          _one(_part_checksum), _keys(uploads=["checksum/object"])),
    Check("the 5 MiB part minimum", ("part_size_minimum",),
          _one(_part_size_minimum), _keys(uploads=["small-parts/object"])),
    Check("UploadPartCopy", ("copy_range", "copy_if_match"),
          _copy_range, _keys("copy/source", "copy/target", uploads=["copy/target", "copy/stale"])),
    Check("UploadPart after abort", ("aborted_upload_part",),
          _one(_aborted_upload_part), _keys(uploads=["aborted/object"])),
    Check("DeleteObjects Quiet", ("delete_objects_quiet",),
          _one(_delete_objects_quiet), _keys("quiet/a")),
    Check("bucket lifecycle", ("lifecycle",),
          _one(_lifecycle), lambda base: []),
)


# ---------------------------------------------------------------- running them
def probe_base(prefix: str, run_id: str) -> str:
    """``PREFIX/_temporary/mpcommit-doctor/RUN/`` for a destination prefix (``""`` for a bucket's root)."""
    folder = f"{prefix.rstrip('/')}/" if prefix.strip("/") else ""
    return f"{folder}{PROBE_FOLDER}/{run_id}/"


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def planned_keys(base: str) -> list[tuple[str, str]]:
    """(key, what) of everything the probes create below ``base``: what a dry run lists."""
    seen: set[tuple[str, str]] = set()
    out = []
    for check in CHECKS:
        for item in check.keys(base):
            if item not in seen or item[1] != "object":  # a key may have several uploads, but is one object
                seen.add(item)
                out.append(item)
    return out


def run_probes(store: S3Store, bucket: str, base: str, *, progress: Callable[[str], None] = lambda _m: None,
               only: Sequence[str] | None = None) -> list[Finding]:
    """Run every check (or those named in ``only``) under ``base``, then remove all they created -- whatever
    happens, and whatever they left (everything under ``base`` is listed, deleted and aborted). One finding per
    behaviour, in :data:`BEHAVIOURS` order; a check that fails unexpectedly gives FAILED findings naming the error."""
    run = ProbeRun(store, bucket, base, progress)
    by_id: dict[str, Finding] = {}
    try:
        for check in CHECKS:
            if only is not None and check.name not in only:
                continue
            progress(f"probing {check.name}")
            try:
                for finding in check.run(run):
                    by_id[finding.probe] = judged(finding)
            except StoreError as exc:
                for behaviour_id in check.behaviours:
                    by_id.setdefault(behaviour_id, Finding(behaviour_id, f"probe failed: {_code(exc)}", Status.FAILED,
                                                           "", str(exc)))
    finally:
        progress("cleaning up the probe keys")
        cleanup(run)
    return [by_id[b] for b in BEHAVIOUR_IDS if b in by_id]


def judged(finding: Finding) -> Finding:
    """``finding`` as ``doctor`` and the matrix show it: a store that differs in a request mpcommit does not send
    limits nothing, whatever the probe made of the answer."""
    if BY_ID[finding.probe].used or finding.status in (Status.AS_S3, Status.FAILED):
        return finding
    return replace(finding, status=Status.UNUSED, note="mpcommit does not send this request: nothing depends on it")


def cleanup(run: ProbeRun) -> tuple[int, int]:
    """Abort every upload and delete every object under the run's base: those recorded and any the listings show.
    Returns (uploads aborted, objects deleted)."""
    store, bucket = run.store, run.bucket
    uploads = set(run.uploads)
    try:
        uploads.update((u.key, u.upload_id) for u in store.list_multipart_uploads(bucket, run.base))
    except StoreError:
        pass  # the recorded ones are still aborted below
    aborted = sum(1 for key, upload_id in uploads if store.abort_multipart_upload(bucket, key, upload_id))
    keys = set(run.objects)
    try:
        keys.update(o.key for o in store.list_objects(bucket, run.base))
    except StoreError:
        pass
    existing = sorted(keys)
    if existing:
        store.delete_objects(bucket, existing)
    return aborted, len(existing)
