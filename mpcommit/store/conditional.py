"""Whether a store really honours S3's conditional writes, found out once per bucket.

The per-table commit order (:mod:`mpcommit.protocol.order`) rests on ``PutObject`` with ``If-None-Match: *``:
of two writers creating one key, exactly one succeeds and the other gets 412 PreconditionFailed. AWS S3 does
this since 2024, and so do moto, LocalStack, SeaweedFS and versitygw; but some S3-compatible stores accept the
header and overwrite anyway, or answer 501. A store is therefore asked, not trusted: the probe writes one hidden
key twice with ``If-None-Match: *`` and once with a wrong ``If-Match``, and looks at what happened to the
object, not only at the answers. ``S3Options(conditional_writes=True|False)`` states the answer instead (for
stores that forbid the probe's writes, or to save its three requests).

Answers are kept per (endpoint, bucket) for the life of the process: a bucket's store does not change under a
running job.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

from ..errors import MpcommitError, PreconditionFailedError
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
