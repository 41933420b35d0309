"""Conditional writes: whether a store really honours them, and the one place every record that must be written
once, or replaced or deleted only while unchanged, is written through (:class:`Records`).

The per-table commit order (:mod:`mpcommit.protocol.order`), the commit barrier, the finishing turn and the
heartbeat all rest on ``PutObject`` with ``If-None-Match: *`` and ``If-Match``: of two writers creating one key,
exactly one succeeds and the other gets 412 PreconditionFailed. AWS S3 does this since 2024, and so do moto,
LocalStack, SeaweedFS and versitygw; but some S3-compatible stores accept the header and overwrite anyway, or
answer 501. A store is therefore asked, not trusted: the probe writes one hidden key twice with
``If-None-Match: *`` and once with a wrong ``If-Match``, and looks at what happened to the object, not only at
the answers. ``S3Options(conditional_writes=True|False)`` states the answer instead (for stores that forbid the
probe's writes, or to save its requests).

On a store without them nothing mpcommit does can be ordered against another process, so the policy is decided
here, once, for every record: such a store is used only when the user states that each table has one job at a
time (``S3Options(single_writer=True)``, the way delta-rs asks for ``AWS_S3_ALLOW_UNSAFE_RENAME`` on S3 without a
lock); otherwise the first record a job writes is refused by name (:class:`ConditionalWritesMissingError`).

Answers are kept per (endpoint, bucket) for the life of the process: a bucket's store does not change under a
running job.

One conditional write lives outside :class:`Records`: ``_SUCCESS`` (protocol/commit/journal.py), replaced only
while no later job's is there -- its body may be a file of a million names, and its rule is its own (it reads the
position of the one there, and keeps the later).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

from ..errors import (
    ConditionalWritesMissingError,
    MpcommitError,
    NoSuchKeyError,
    PreconditionFailedError,
    UnsupportedRequestError,
)
from .s3 import S3Store

#: Where the probe writes, below the prefix it is given (a hidden name, skipped by every reader).
PROBE_FOLDER = "_mpcommit/probe/"


@dataclass(frozen=True)
class ConditionalWrites:
    """What a store does with conditional PutObject requests."""

    #: ``If-None-Match: *`` on an existing key is refused (412) and the object is left as it was.
    create_only: bool
    #: ``If-Match`` with an ETag the object does not have is refused (412) and the object is left as it was.
    match_etag: bool
    #: How this was learnt: "probe", or "stated" (S3Options.conditional_writes).
    source: str = "probe"
    #: What the store answered where it did not honour a condition (for messages and ``mpcommit doctor``).
    detail: str = ""

    @property
    def ordered(self) -> bool:
        """Whether concurrent jobs on one table can be ordered by this store (create-only writes hold)."""
        return self.create_only


_ANSWERS: dict[tuple[str, str], ConditionalWrites] = {}
_LOCK = threading.Lock()


def conditional_writes(store: S3Store, bucket: str, prefix: str = "") -> ConditionalWrites:
    """The store's answer for ``bucket``: stated in its options, else probed once under ``prefix`` (a
    destination's root, "" or "table/") and remembered for the process."""
    stated = store.options.conditional_writes
    if stated is not None:
        return ConditionalWrites(stated, stated, source="stated")
    cache_key = (store.endpoint, bucket)
    with _LOCK:
        found = _ANSWERS.get(cache_key)
    if found is None:
        found = probe(store, bucket, prefix)
        with _LOCK:
            found = _ANSWERS.setdefault(cache_key, found)
    return found


def forget_answers() -> None:
    """Drop every remembered answer (tests that point one endpoint at differently behaving stores)."""
    with _LOCK:
        _ANSWERS.clear()


def probe(store: S3Store, bucket: str, prefix: str = "") -> ConditionalWrites:
    """Ask the store, on a new hidden key under ``prefix`` that is deleted afterwards: four PutObjects and a
    DeleteObject, plus a GetObject where an answer needs checking against the object."""
    key = f"{prefix}{PROBE_FOLDER}{uuid.uuid4().hex}"
    first, second, third = b"mpcommit probe: first\n", b"mpcommit probe: second\n", b"mpcommit probe: third\n"
    notes: list[str] = []
    try:
        etag = store.put_object(bucket, key, first, if_none_match=True, content_type="text/plain")
    except PreconditionFailedError:
        # Our own create, applied but its answer lost and the request retried (the key is new).
        if store.get_object(bucket, key) != first:
            raise
        etag = store.head_object(bucket, key).etag  # type: ignore[union-attr]
    try:
        create_only = _refused(store, bucket, key, first, notes, "If-None-Match: *",
                               lambda: store.put_object(bucket, key, second, if_none_match=True,
                                                        content_type="text/plain"))
        current = store.get_object(bucket, key)
        etag = store.head_object(bucket, key).etag if current != first else etag  # type: ignore[union-attr]
        wrong = '"0123456789abcdef0123456789abcdef"' if etag.strip('"') != "0123456789abcdef0123456789abcdef" else '"f"'
        match_etag = _refused(store, bucket, key, current, notes, "If-Match",
                              lambda: store.put_object(bucket, key, third, if_match=wrong, content_type="text/plain"))
        if match_etag:
            # The right ETag must let the write through, or If-Match refuses everything.
            try:
                store.put_object(bucket, key, third, if_match=etag, content_type="text/plain")
            except MpcommitError as exc:
                if not (isinstance(exc, PreconditionFailedError) and store.get_object(bucket, key) == third):
                    match_etag = False  # (an applied write whose answer was lost is retried into a 412: fine)
                    notes.append(f"If-Match with the object's own ETag was refused ({type(exc).__name__})")
    finally:
        try:
            store.delete_object(bucket, key)
        except MpcommitError:
            pass  # a hidden key of a few bytes; never worth failing a job over
    return ConditionalWrites(create_only, match_etag, source="probe", detail="; ".join(notes))


def _refused(store: S3Store, bucket: str, key: str, expected: bytes, notes: list[str], what: str,
             attempt: object) -> bool:
    """Whether ``attempt()`` (a conditional write that must not hold) was refused with 412 and left the object
    holding ``expected``."""
    try:
        attempt()  # type: ignore[operator]
    except PreconditionFailedError:
        if store.get_object(bucket, key) == expected:
            return True
        notes.append(f"{what}: answered 412 but changed the object anyway")
        return False
    except MpcommitError as exc:
        code = getattr(exc, "code", "") or type(exc).__name__
        notes.append(f"{what}: answered {code} instead of 412")
        return False
    notes.append(f"{what}: accepted a write whose condition did not hold")
    return False


# ---------------------------------------------------------------- the one seam
@dataclass(frozen=True)
class Held:
    """This process's record holds the key (written now, or earlier by a retry whose answer was lost)."""

    etag: str


@dataclass(frozen=True)
class Taken:
    """Another writer's record holds the key: its bytes and ETag (None for both: it was removed meanwhile)."""

    body: bytes | None
    etag: str | None


class Records:
    """Every record that must be created once, or replaced or deleted only while unchanged, in one bucket. The
    bodies a caller writes are its own alone (each carries a job id, a position or a random token), so a record
    read back with the very bytes this process sent is its own write, whose answer was lost and whose retry the
    store refused -- never another's."""

    def __init__(self, store: S3Store, bucket: str, writes: ConditionalWrites):
        self.store = store
        self.bucket = bucket
        self.writes = writes

    @classmethod
    def of(cls, store: S3Store, bucket: str, prefix: str = "") -> "Records":
        """The records of ``bucket``; refused by name on a store without conditional writes, unless the user
        stated that each table has one job at a time (:func:`require_ordered`)."""
        return cls(store, bucket, require_ordered(store, bucket, prefix))

    def read(self, key: str) -> tuple[bytes, str] | None:
        try:
            return self.store.get_object_and_etag(self.bucket, key)
        except NoSuchKeyError:
            return None

    def create(self, key: str, body: bytes) -> Held | Taken:
        """Create ``key`` holding ``body`` unless it exists (``If-None-Match: *``)."""
        if not self.writes.create_only:
            # One writer at a time, as the user stated: the store cannot decide it, so look first.
            found = self.read(key)
            if found is not None and found[0] != body:
                return Taken(*found)
            return Held(self.store.put_object(self.bucket, key, body))
        try:
            return Held(self.store.put_object(self.bucket, key, body, if_none_match=True))
        except PreconditionFailedError:
            found = self.read(key)
            if found is not None and found[0] == body:
                return Held(found[1])  # our own create, applied, its answer lost, its retry refused
            return Taken(*found) if found is not None else Taken(None, None)

    def replace(self, key: str, body: bytes, *, etag: str | None) -> Held | Taken:
        """Write ``body`` over the record whose ETag is ``etag`` (None: create it), only while it is still that
        record."""
        if etag is None:
            return self.create(key, body)
        if not self.writes.match_etag:
            found = self.read(key)
            if found is None or found[1] != etag:
                return Taken(*found) if found is not None else Taken(None, None)
            return Held(self.store.put_object(self.bucket, key, body))
        try:
            return Held(self.store.put_object(self.bucket, key, body, if_match=etag))
        except (PreconditionFailedError, NoSuchKeyError):
            found = self.read(key)
            if found is not None and found[0] == body:
                return Held(found[1])
            return Taken(*found) if found is not None else Taken(None, None)

    def delete(self, key: str, *, etag: str | None, body: bytes | None = None) -> bool:
        """Delete the record only while its ETag is ``etag`` (None: only while it holds ``body``). Where the store
        cannot make a delete conditional (LocalStack 4.13 answers NotImplemented), it is read first and deleted
        only while it holds ``body`` (or that ETag): between that read and the delete only a process that took
        the record's writer for gone could write it. Returns whether it was deleted (or was gone)."""
        if self.writes.match_etag and etag is not None:
            try:
                self.store.delete_object(self.bucket, key, if_match=etag)
                return True
            except (PreconditionFailedError, NoSuchKeyError):
                return False
            except UnsupportedRequestError:
                pass
        found = self.read(key)
        if found is None:
            return True
        if found[1] != etag and (body is None or found[0] != body):
            return False
        self.store.delete_object(self.bucket, key)
        return True


def require_ordered(store: S3Store, bucket: str, prefix: str = "") -> ConditionalWrites:
    """The store's conditional writes, refused by name where they do not hold and the user did not state that each
    table has one job at a time (``S3Options.single_writer``): such a store cannot order two processes acting on
    one job or one table, and every guarantee about concurrent jobs rests on that."""
    writes = conditional_writes(store, bucket, prefix)
    if writes.ordered or store.options.single_writer:
        return writes
    how = f"the probe found: {writes.detail}" if writes.source == "probe" and writes.detail else (
        "stated by S3Options(conditional_writes=False)" if writes.source == "stated" else "the probe found so")
    raise ConditionalWritesMissingError(
        f"the store at {store.endpoint} does not honour conditional writes in bucket {bucket!r} ({how}). mpcommit "
        "orders concurrent jobs, recoveries and aborts on a table by them, and cannot do so here. If each table in "
        "it has one job at a time (no concurrent writes, no `jobs abort` or `recover` beside a running job), "
        "state it with S3Options(single_writer=True) (option s3.singleWriter, CLI --single-writer); otherwise use "
        "a store that honours If-None-Match and If-Match (`mpcommit doctor` checks one). Nothing was written.")
