"""An independent checker of mpcommit's invariants (I1-I7 of SPEC.md), built on :mod:`tests.support.checks`.

It only lists the bucket and its pending multipart uploads (and reads objects) with a raw boto3 client, and
compares what it sees with the dataset the test expects. It imports nothing from mpcommit: a bug in the
library's own listing, layout or manifest code cannot hide a bug in what it left in the bucket.

What it knows of the protocol is only what SPEC.md promises: every data key carries its job id; a job's records
live under ``PREFIX/_temporary/mpcommit/JOBID/``; ``PREFIX/_SUCCESS`` is JSON naming the committed job and files;
readers skip names starting with ``_`` or ``.``.

Datasets are ``{key relative to the bucket: bytes}``. Every check raises :class:`InvariantViolation` (an
AssertionError) naming the invariant and what differs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.checks import all_keys, is_hidden, list_objects, pending_upload_entries, read_object

__all__ = [
    "BucketState",
    "InvariantViolation",
    "bucket_state",
    "check_aborted",
    "check_committed",
    "check_new_complete_or_old_whole",
    "check_not_visible",
    "check_old_data_whole",
    "check_others_untouched",
    "check_same_result",
    "check_unchanged",
    "dataset",
    "job_records",
    "job_uploads",
]


class InvariantViolation(AssertionError):
    pass


def _fail(invariant: str, message: str) -> InvariantViolation:
    return InvariantViolation(f"{invariant} violated: {message}")


def _root(prefix: str) -> str:
    return f"{prefix.strip('/')}/" if prefix.strip("/") else ""


@dataclass(frozen=True)
class BucketState:
    """Everything in a bucket: every object (key -> ETag) and every pending upload (key, upload id); and the
    bodies of the jobs' heartbeats (``JOBID/alive.json``), which a live job rewrites while a test runs."""

    objects: Mapping[str, str]
    uploads: frozenset[tuple[str, str]]
    heartbeats: Mapping[str, bytes] = dataclasses.field(default_factory=dict)

    def keys_of(self, job_id: str) -> set[str]:
        return {k for k in self.objects if job_id in k}

    def uploads_of(self, job_id: str) -> set[tuple[str, str]]:
        return {u for u in self.uploads if job_id in u[0]}


def bucket_state(client: Any, bucket: str) -> BucketState:
    objects: dict[str, str] = {}
    heartbeats: dict[str, bytes] = {}
    for obj in list_objects(client, bucket):
        objects[obj["Key"]] = obj["ETag"]
    for key in [k for k in objects if _heartbeat_job(k) is not None]:
        try:
            response = client.get_object(Bucket=bucket, Key=key)
        except client.exceptions.NoSuchKey:
            continue  # its job ended between the listing and the read: the listing's ETag stands
        with response["Body"] as body:
            heartbeats[key] = body.read()
        objects[key] = response["ETag"]  # the ETag of the body read, which may be a beat newer than the listing's
    uploads = frozenset((e["Key"], e["UploadId"]) for e in pending_upload_entries(client, bucket, ""))
    return BucketState(objects, uploads, heartbeats)


def _heartbeat_job(key: str) -> str | None:
    """The job whose heartbeat ``key`` is (``PREFIX/_temporary/mpcommit/JOBID/alive.json``), else None."""
    parts = f"/{key}".split("/")
    if len(parts) >= 5 and parts[-1] == "alive.json" and parts[-4:-2] == ["_temporary", "mpcommit"]:
        return parts[-2]
    return None


def _own_beat(key: str, before: bytes | None, after: bytes | None) -> bool:
    """Whether heartbeat ``key`` went from ``before`` to ``after`` by its job's own beating: both bodies name the
    key's job and the same writer (host and process), and the beat count went on from where it was. Another
    process's write names another writer; a second heartbeat of the same process (a recovery taking the job
    over) counts its beats from 1 again, and a job whose heartbeat stopped leaves it as it was."""
    job = _heartbeat_job(key)
    try:
        was, now = json.loads(before or b""), json.loads(after or b"")
    except ValueError:
        return False
    if not (isinstance(was, dict) and isinstance(now, dict)):
        return False
    same_writer = all(was.get(f) == now.get(f) for f in ("jobId", "hostname", "pid"))
    beats = (was.get("beat"), now.get("beat"))
    return (was.get("jobId") == job and same_writer and all(isinstance(b, int) for b in beats)
            and beats[1] > beats[0])


_BODIES: dict[tuple[str, str, str], bytes] = {}  # (bucket, key, ETag) -> bytes: objects never change in place


def dataset(client: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    """What a reader of the table at ``prefix`` sees: every visible key with its bytes. Bodies are read once per
    (key, ETag): a listing that shows the same ETag again shows the same bytes."""
    root = _root(prefix)
    out: dict[str, bytes] = {}
    for obj in list_objects(client, bucket, root):
        key = obj["Key"]
        if is_hidden(key[len(root):]):
            continue
        cache_key = (bucket, key, obj["ETag"])
        if cache_key not in _BODIES:
            if len(_BODIES) > 4096:
                _BODIES.clear()
            _BODIES[cache_key] = read_object(client, bucket, key)
        out[key] = _BODIES[cache_key]
    return out


def job_uploads(client: Any, bucket: str, job_id: str, prefix: str = "") -> list[tuple[str, str]]:
    """Pending uploads under ``prefix`` whose key carries ``job_id``."""
    return [(k, u) for k, u in _uploads(client, bucket, prefix) if job_id in k]


def job_records(client: Any, bucket: str, prefix: str, job_id: str) -> set[str]:
    """The job's records under ``PREFIX/_temporary/mpcommit/JOBID/``."""
    return all_keys(client, bucket, f"{_root(prefix)}_temporary/mpcommit/{job_id}/", exact_prefix=True)


def _uploads(client: Any, bucket: str, prefix: str) -> list[tuple[str, str]]:
    return [(e["Key"], e["UploadId"]) for e in pending_upload_entries(client, bucket, prefix)]


def _diff(expected: Mapping[str, bytes], actual: Mapping[str, bytes]) -> str:
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    changed = sorted(k for k in set(expected) & set(actual) if expected[k] != actual[k])
    return f"missing {missing[:5]}, unexpected {extra[:5]}, different bytes {changed[:5]}"


# ---------------------------------------------------------------- I1
def check_not_visible(client: Any, bucket: str, prefix: str, job_id: str, *, before: Mapping[str, bytes] | None = None) -> None:
    """I1: nothing of ``job_id`` is visible under ``prefix``; with ``before``, the visible dataset is exactly it."""
    seen = dataset(client, bucket, prefix)
    leaked = sorted(k for k in seen if job_id in k)
    if leaked:
        raise _fail("I1", f"files of job {job_id} are visible before its commit: {leaked[:5]}")
    if before is not None and seen != dict(before):
        raise _fail("I1", f"the visible data under {prefix!r} changed: {_diff(before, seen)}")


# ---------------------------------------------------------------- I2 / I4
def check_committed(
    client: Any, bucket: str, prefix: str, job_id: str, expected: Mapping[str, bytes], *,
    other: Mapping[str, bytes] | None = None, success: bool = True,
) -> None:
    """I2: after a successful commit exactly ``expected`` (plus ``other``, the data of other jobs that must
    remain) is visible under ``prefix``; none of the job's uploads or records remains; ``_SUCCESS`` names the
    job and exactly its files."""
    want = {**(other or {}), **expected}
    seen = dataset(client, bucket, prefix)
    if seen != want:
        raise _fail("I2", f"visible data of {prefix!r} after commit of {job_id}: {_diff(want, seen)}")
    left = job_uploads(client, bucket, job_id, prefix)
    if left:
        raise _fail("I2", f"{len(left)} uploads of committed job {job_id} still pending: {left[:3]}")
    records = job_records(client, bucket, prefix, job_id)
    if records:
        raise _fail("I2", f"records of committed job {job_id} remain: {sorted(records)[:5]}")
    if success:
        check_success(client, bucket, prefix, job_id, expected)


def check_success(client: Any, bucket: str, prefix: str, job_id: str, expected: Mapping[str, bytes]) -> dict[str, Any]:
    key = f"{_root(prefix)}_SUCCESS"
    try:
        doc = json.loads(read_object(client, bucket, key))
    except Exception as exc:  # noqa: BLE001
        raise _fail("I2", f"{key} is missing or not JSON after a commit ({exc})") from exc
    if doc.get("name") != "mpcommit.SuccessData/1" or doc.get("committer") != "mpcommit":
        raise _fail("I2", f"{key} does not identify mpcommit: {doc.get('name')!r}, {doc.get('committer')!r}")
    if doc.get("jobId") != job_id:
        raise _fail("I2", f"{key} names job {doc.get('jobId')}, expected {job_id}")
    if set(doc.get("filenames", ())) != set(expected) or doc.get("files") != len(expected):
        raise _fail("I2", f"{key} lists {doc.get('files')} files {sorted(doc.get('filenames', ()))[:3]}..., "
                          f"expected {len(expected)}")
    if doc.get("bytes") != sum(len(v) for v in expected.values()):
        raise _fail("I2", f"{key} counts {doc.get('bytes')} bytes, expected {sum(len(v) for v in expected.values())}")
    return doc


def check_same_result(client: Any, *, bucket: str, prefix: str, reference_bucket: str, job_id: str) -> None:
    """I4: the destination holds what an uninterrupted run of the same job left in ``reference_bucket``:
    the same visible files with the same bytes, the same _SUCCESS listing, and no upload or record of the job."""
    got, ref = dataset(client, bucket, prefix), dataset(client, reference_bucket, prefix)
    if got != ref:
        raise _fail("I4", f"recovered result differs from an uninterrupted commit: {_diff(ref, got)}")
    key = f"{_root(prefix)}_SUCCESS"
    got_s, ref_s = json.loads(read_object(client, bucket, key)), json.loads(read_object(client, reference_bucket, key))
    for field in ("jobId", "mode", "filenames", "files", "bytes", "rows", "partitions"):
        if got_s.get(field) != ref_s.get(field):
            raise _fail("I4", f"_SUCCESS field {field!r}: {got_s.get(field)!r} != uninterrupted {ref_s.get(field)!r}")
    records, uploads = job_records(client, bucket, prefix, job_id), job_uploads(client, bucket, job_id, prefix)
    if records or uploads:
        raise _fail("I4", f"leftovers after recovery: records {sorted(records)[:3]}, uploads {uploads[:3]}")


# ---------------------------------------------------------------- I3
def check_aborted(client: Any, bucket: str, prefix: str, job_id: str, *, before: Mapping[str, bytes] | None = None) -> None:
    """I3: nothing of ``job_id`` is visible, none of its uploads or records remains (and, with ``before``,
    the visible data is exactly what it was)."""
    check_not_visible(client, bucket, prefix, job_id, before=before)
    left = job_uploads(client, bucket, job_id, prefix)
    if left:
        raise _fail("I3", f"{len(left)} uploads of aborted job {job_id} still pending: {left[:3]}")
    records = job_records(client, bucket, prefix, job_id)
    if records:
        raise _fail("I3", f"records of aborted job {job_id} remain: {sorted(records)[:5]}")


# ---------------------------------------------------------------- I5
def check_old_data_whole(client: Any, bucket: str, old: Mapping[str, bytes]) -> None:
    """I5: every object of the old data is still there with its bytes."""
    existing = all_keys(client, bucket, "")
    present = {k: read_object(client, bucket, k) for k in old if k in existing}
    if present != dict(old):
        raise _fail("I5", f"old data was touched before the new data was complete: {_diff(old, present)}")


def check_new_complete_or_old_whole(
    client: Any, bucket: str, prefix: str, *, old: Mapping[str, bytes], new: Mapping[str, bytes],
) -> str:
    """I5 at any crash point of an overwrite: either the old data is whole, or every new file is complete.
    Returns which of the two holds ("old whole", "new complete" or "both")."""
    seen = dataset(client, bucket, prefix)
    old_whole = all(seen.get(k) == v for k, v in old.items())
    new_complete = all(seen.get(k) == v for k, v in new.items())
    if not (old_whole or new_complete):
        raise _fail("I5", f"old data partly removed while the new data is incomplete: "
                          f"old {_diff(old, {k: seen[k] for k in old if k in seen})}; new {_diff(new, {k: seen[k] for k in new if k in seen})}")
    return "both" if old_whole and new_complete else ("old whole" if old_whole else "new complete")


# ---------------------------------------------------------------- I6 / I7
def check_others_untouched(
    before: BucketState, after: BucketState, *, job_ids: Iterable[str] = (),
    may_delete: Callable[[str], bool] = lambda _key: False, may_write: Callable[[str], bool] = lambda _key: False,
) -> None:
    """I6: every object and pending upload that does not carry one of ``job_ids`` is as it was, except objects
    ``may_delete`` allows to disappear (an overwrite's replaced scope) and keys ``may_write`` allows to appear
    or change (``_SUCCESS``). A table's commit order only grows: new places and ends may appear (taken by the
    jobs under test), existing ones never change."""
    jobs = tuple(job_ids)
    allowed = may_write

    def may_write(key: str) -> bool:  # noqa: F811 - the caller's rule, and the order's new records
        return allowed(key) or ("/_mpcommit/order/" in f"/{key}" and key not in before.objects)

    def ours(key: str) -> bool:
        return any(j in key for j in jobs)

    for key, etag in before.objects.items():
        if ours(key) or may_write(key):
            continue
        now = after.objects.get(key)
        if now is None and not may_delete(key):
            raise _fail("I6", f"{key} (not of job {', '.join(jobs) or '-'}) was deleted")
        if now is not None and now != etag:
            # A job that is not under test may still be alive and beat its own heartbeat meanwhile (the scene's
            # other job does every 10 s): only a write by anyone else is the job under test's doing.
            if _own_beat(key, before.heartbeats.get(key), after.heartbeats.get(key)):
                continue
            raise _fail("I6", f"{key} (not of job {', '.join(jobs) or '-'}) was rewritten")
    appeared = sorted(k for k in set(after.objects) - set(before.objects) if not ours(k) and not may_write(k))
    if appeared:
        raise _fail("I6", f"objects of no job under test appeared: {appeared[:5]}")
    lost = sorted(u for u in before.uploads - after.uploads if not ours(u[0]))
    if lost:
        raise _fail("I6", f"uploads of other jobs were completed or aborted: {lost[:3]}")
    new_uploads = sorted(u for u in after.uploads - before.uploads if not ours(u[0]))
    if new_uploads:
        raise _fail("I6", f"uploads of no job under test appeared: {new_uploads[:3]}")


def check_unchanged(before: BucketState, after: BucketState, *, what: str = "I7") -> None:
    """Nothing at all changed in the bucket: no object written, rewritten or deleted, no upload completed,
    aborted or created (a refused manifest must not cause any of these)."""
    if dict(before.objects) != dict(after.objects) or before.uploads != after.uploads:
        gone = sorted(set(before.objects) - set(after.objects))
        new = sorted(set(after.objects) - set(before.objects))
        changed = sorted(k for k in set(before.objects) & set(after.objects) if before.objects[k] != after.objects[k])
        raise _fail(what, f"the bucket changed: deleted {gone[:3]}, created {new[:3]}, rewritten {changed[:3]}, "
                          f"uploads gone {sorted(before.uploads - after.uploads)[:2]}, "
                          f"uploads new {sorted(after.uploads - before.uploads)[:2]}")
