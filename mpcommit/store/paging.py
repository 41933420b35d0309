"""The store's paginated listings -- objects, a prefix's children, pending uploads, an upload's parts -- each
made through the store's one funnel (:mod:`.funnel`: counted, retried, errors translated) and proven complete
by :mod:`.listing`'s checks before anyone acts on it (invariant I8), with the ways around two servers' listing
defects: LocalStack's URL-encoded ListObjectsV2 past 1,000 keys, and versitygw refusing its own UploadIdMarker.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from botocore.handlers import set_list_objects_encoding_type_url

from ..errors import InconsistentListingError, StoreError
from .funnel import Funnel
from .listing import ListedPage, PageSequence, round_trips_unencoded, uploads_of_key
from .session import s3_client
from .values import ObjectInfo, ObjectRange, UploadInfo

log = logging.getLogger(__name__)


@dataclass
class _Walk:
    """One pass over a ListObjectsV2 listing: what it returned and whether its pages were consistent."""

    check: PageSequence
    objects: list[ObjectInfo] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    #: None when the walk read the listing to its end; else the greatest name its pages covered (a walk stopped
    #: early: by ``limit``, past ``stop_after``, after ``max_pages``).
    through: str | None = None

    @property
    def problem(self) -> str | None:
        return self.check.problem

    def names(self) -> set[str]:
        return {o.key for o in self.objects} | set(self.prefixes)


def _inconsistent(operation: str, what: str, bucket: str, prefix: str, problem: str, detail: str = "") -> StoreError:
    extra = f"; {detail}" if detail else ""
    known = (" (LocalStack 4.13.x loses every page after the first 1,000 keys holding '=' when keys are URL-encoded)"
             if operation == "list_objects_v2" else "")
    return InconsistentListingError(
        f"the server's listing of {what} under s3://{bucket}/{prefix} is inconsistent: {problem}{extra}. "
        f"Some entries may be missing, so nothing was deleted, aborted or committed from it. This is a defect of "
        f"the S3 server{known}: use a server whose listings paginate correctly, or report it to its maintainers.",
        operation=operation, code="InconsistentListing", bucket=bucket, key=prefix,
    )


def _check_under(prefix: str, keys: list[str], operation: str, bucket: str) -> None:
    """Every key a listing returns must lie under the prefix asked for: a server that decodes the prefix wrongly
    would otherwise hand an overwrite keys of another table to delete."""
    stray = next((k for k in keys if not k.startswith(prefix)), None)
    if stray is not None:
        raise _inconsistent(operation, "keys", bucket, prefix, f"it returned {stray!r}, which is not under the "
                            "prefix asked for")



class PagedListings:
    """The listings of one store. Remembers what it learnt about the server: that its URL-encoded object listings
    break (then a second client lists unencoded), that it refuses its own UploadIdMarker."""

    def __init__(self, store: Funnel, unencoded_client: Any | None = None):
        self.store = store
        self._unencoded: Any | None = unencoded_client
        self._lock = threading.Lock()
        self._warned = False
        #: The server refuses its own UploadIdMarker (versitygw 1.8): upload listings page by KeyMarker alone.
        self.uploads_by_key = False

    def uploads(self, bucket: str, prefix: str = "") -> list[UploadInfo]:
        """Every pending upload under ``prefix``, across all pages (KeyMarker + UploadIdMarker), proven complete.

        A server that refuses its own UploadIdMarker (versitygw 1.8: ``InvalidArgument``) is paged by KeyMarker
        alone; the uploads of each page's last key that the next page would skip are listed on their own
        (:meth:`_add_rest_of_key`), and accepted only when that listing proves it holds them all. The store remembers
        the refusal (:attr:`uploads_by_key`), so later listings skip the refused request.
        """
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        check = PageSequence(strict=False)  # a key repeats for each of its uploads
        found: list[UploadInfo] = []
        seen: set[tuple[str, str]] = set()
        while True:
            try:
                page = self.store._call("list_multipart_uploads", bucket=bucket, key=prefix, **params)
            except StoreError as exc:
                if "UploadIdMarker" not in params or exc.code != "InvalidArgument":
                    raise
                # The server refused the markers it gave: list the rest of the boundary key on its own, then
                # continue after that key.
                self._refuses_upload_id_marker(exc)
                del params["UploadIdMarker"]
                self._add_rest_of_key(bucket, prefix, params["KeyMarker"], found, seen)
                continue
            uploads = [UploadInfo(u["Key"], u["UploadId"], u.get("Initiated")) for u in page.get("Uploads", []) or []]
            _check_under(prefix, [u.key for u in uploads], "list_multipart_uploads", bucket)
            for upload in uploads:
                if (upload.key, upload.upload_id) not in seen:
                    seen.add((upload.key, upload.upload_id))
                    found.append(upload)
            next_key, next_id = page.get("NextKeyMarker") or "", page.get("NextUploadIdMarker") or ""
            if not next_key and not next_id and uploads:
                # S3 may leave the markers out; clients then continue after the last entry.
                next_key, next_id = uploads[-1].key, uploads[-1].upload_id
            by_key = self.uploads_by_key
            marker: Hashable | None = (next_key or None) if by_key else ((next_key, next_id) if next_key or next_id else None)
            if not check.add(ListedPage([u.key for u in uploads], bool(page.get("IsTruncated")), marker)):
                break
            params["KeyMarker"] = next_key
            if by_key:
                self._add_rest_of_key(bucket, prefix, next_key, found, seen)
            else:
                params["UploadIdMarker"] = next_id
        if check.problem is not None:
            raise _inconsistent("list_multipart_uploads", "uploads", bucket, prefix, check.problem)
        return found

    def _refuses_upload_id_marker(self, exc: StoreError) -> None:
        if not self.uploads_by_key:
            self.uploads_by_key = True
            log.warning("the server at %s refused the UploadIdMarker it returned itself (%s); listing pending uploads "
                        "by key marker, each page's last key listed on its own", self.store.endpoint, exc.code)

    def _add_rest_of_key(self, bucket: str, prefix: str, key: str, found: list[UploadInfo],
                         seen: set[tuple[str, str]]) -> None:
        """Append the uploads of ``key`` not in ``seen`` (the ones paging by key marker would skip), from a listing
        of that key alone; InconsistentListingError when that listing does not prove it holds them all."""
        page = self.store._call("list_multipart_uploads", bucket=bucket, key=key, Bucket=bucket, Prefix=key)
        entries = page.get("Uploads", []) or []
        ids, problem = uploads_of_key(key, [(u["Key"], u["UploadId"]) for u in entries], bool(page.get("IsTruncated")))
        if problem is not None:
            raise _inconsistent("list_multipart_uploads", "uploads", bucket, prefix, problem,
                                "the server refuses the UploadIdMarker it returned, so the rest of that key's "
                                "uploads cannot be listed")
        initiated = {u["UploadId"]: u.get("Initiated") for u in entries if u["Key"] == key}
        for upload_id in ids:
            if (key, upload_id) not in seen:
                seen.add((key, upload_id))
                found.append(UploadInfo(key, upload_id, initiated.get(upload_id)))

    def parts(self, bucket: str, key: str, upload_id: str) -> list[tuple[int, int, str]]:
        """(part number, size, etag) of every part uploaded so far, proven complete."""
        params: dict[str, Any] = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
        check = PageSequence()
        found: list[tuple[int, int, str]] = []
        while True:
            page = self.store._call("list_parts", bucket=bucket, key=key, **params)
            parts = [(int(p["PartNumber"]), int(p.get("Size", 0)), str(p.get("ETag", ""))) for p in page.get("Parts", []) or []]
            found.extend(parts)
            marker = page.get("NextPartNumberMarker")
            if not check.add(ListedPage([n for n, _s, _e in parts], bool(page.get("IsTruncated")),
                                        str(marker) if marker not in (None, "", 0, "0") else None)):
                break
            params["PartNumberMarker"] = marker
        if check.problem is not None:
            raise _inconsistent("list_parts", f"parts of upload {upload_id}", bucket, key, check.problem)
        return found

    def objects(self, bucket: str, prefix: str = "", *, keep: Callable[[str], bool] | None = None) -> list[ObjectInfo]:
        """Every object under ``prefix``, proven complete (invariant I8): see :meth:`_list_proven`. ``keep``: only
        the objects whose key it accepts are kept, page by page -- every page is still checked -- so that a
        caller interested in a few of many keys does not hold them all until the listing ends."""
        walk = self._list_proven_walk(bucket, prefix, delimiter=None, keep=keep)
        return walk.objects

    def children(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[str]:
        """Names directly below ``prefix`` (objects and "folders", the latter ending in '/'), in key order.

        ``limit`` stops after that many names: enough to tell whether a prefix is empty without listing it all.
        """
        objects, prefixes = self._list_proven(bucket, prefix, delimiter="/", limit=limit)
        names = sorted([p[len(prefix):] for p in prefixes] + [o.key[len(prefix):] for o in objects])
        return names[:limit] if limit is not None else names

    def child_range(self, bucket: str, prefix: str, *, first: str, last: str,
                    max_pages: int | None = None) -> ObjectRange:
        """The objects directly below ``prefix`` (delimiter '/': nothing of its sub-"folders") whose keys lie from
        ``first`` to ``last``, with their ETags, proven complete as far as :attr:`ObjectRange.through` says.

        The listing is of the longest prefix ``first`` and ``last`` share (the folder's files whose names start
        as theirs do) and stops at the first page that reaches ``last``, or after ``max_pages`` pages: a folder
        holding many other files costs the pages of the range, not of the folder. Not StartAfter, which would
        bound the range from below exactly: LocalStack 4.13.1, asked for URL-encoded keys, compares StartAfter
        with the encoded keys and answers a StartAfter holding '=' (any Hive partition's) with an empty listing
        that no page check can tell from a true one. A ``prefix`` of '' lists the bucket root's own objects."""
        if not first.startswith(prefix) or not last.startswith(prefix) or last < first:
            raise ValueError(f"the range {first!r}..{last!r} is not a range of keys under {prefix!r}")
        shared = os.path.commonprefix([first, last])
        if "/" in shared[len(prefix):]:
            raise ValueError(f"{first!r} and {last!r} are not both directly below {prefix!r}")
        walk = self._list_proven_walk(bucket, shared, delimiter="/", stop_after=last, max_pages=max_pages)
        return ObjectRange(tuple(o for o in walk.objects if first <= o.key <= last), walk.through)

    def _list_proven(self, bucket: str, prefix: str, *, delimiter: str | None,
                     limit: int | None = None) -> tuple[list[ObjectInfo], list[str]]:
        walk = self._list_proven_walk(bucket, prefix, delimiter=delimiter, limit=limit)
        return walk.objects, walk.prefixes

    def _list_proven_walk(self, bucket: str, prefix: str, *, delimiter: str | None, limit: int | None = None,
                          stop_after: str | None = None, max_pages: int | None = None,
                          keep: Callable[[str], bool] | None = None) -> _Walk:
        """A ListObjectsV2 listing whose pages form a consistent sequence, or InconsistentListingError.

        botocore asks for URL-encoded keys by default, and that is the listing LocalStack 4.13.x breaks
        (see ``listing.py``). When the encoded pages are inconsistent and every key they showed survives raw
        XML, the listing is repeated without encoding; it is accepted only if it is itself consistent, holds
        every key seen before and nothing that raw XML could have altered. Otherwise nothing is returned:
        a caller must never delete, abort or commit from a listing that may have lost keys.
        """
        first = self._walk_v2(self.store._client, bucket, prefix, delimiter, limit, stop_after=stop_after,
                              max_pages=max_pages, keep=keep)
        if first.problem is None:
            return first
        where = f"s3://{bucket}/{prefix}"
        seen = first.names()
        unsafe = next((k for k in seen if not round_trips_unencoded(k)), None)
        if unsafe is not None:
            raise _inconsistent("list_objects_v2", "objects", bucket, prefix, first.problem,
                                f"listing again without URL encoding is not safe for key {unsafe!r}")
        # With ``keep`` both walks hold only the kept keys: the checks below vouch for those, the ones acted on.
        second = self._walk_v2(self._unencoded_listing_client(), bucket, prefix, delimiter, limit,
                               stop_after=stop_after, max_pages=max_pages, keep=keep)
        if second.problem is not None:
            raise _inconsistent("list_objects_v2", "objects", bucket, prefix, first.problem,
                                f"listing again without URL encoding was inconsistent too: {second.problem}")
        names = second.names()
        # A walk that stopped early vouches only for the names up to where it stopped.
        missing = next((k for k in seen if k not in names and (second.through is None or k <= second.through)), None)
        if missing is not None and limit is None:
            raise _inconsistent("list_objects_v2", "objects", bucket, prefix, first.problem,
                                f"listing again without URL encoding lost key {missing!r}")
        unsafe = next((k for k in names if not round_trips_unencoded(k)), None)
        if unsafe is not None:
            raise _inconsistent("list_objects_v2", "objects", bucket, prefix, first.problem,
                                f"listing again without URL encoding showed key {unsafe!r}, which raw XML may alter")
        if not self._warned:
            self._warned = True
            log.warning("the server's URL-encoded listing of %s was inconsistent (%s); listed it again without "
                        "URL encoding and that listing is complete (%d keys). Later listings do the same.",
                        where, first.problem, len(names))
        return second

    def _walk_v2(self, client: Any, bucket: str, prefix: str, delimiter: str | None, limit: int | None, *,
                 stop_after: str | None = None, max_pages: int | None = None,
                 keep: Callable[[str], bool] | None = None) -> _Walk:
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if delimiter:
            params["Delimiter"] = delimiter
        # Delimiter listings may repeat a common prefix at a page boundary; keys are unique.
        walk = _Walk(PageSequence(strict=delimiter is None))
        while True:
            page = self.store._call("list_objects_v2", client=client, bucket=bucket, key=prefix, **params)
            objects = [ObjectInfo(o["Key"], int(o.get("Size", 0)), str(o.get("ETag", "")), o.get("LastModified"))
                       for o in page.get("Contents", []) or []]
            prefixes = [str(cp["Prefix"]) for cp in page.get("CommonPrefixes", []) or []]
            _check_under(prefix, [o.key for o in objects] + prefixes, "list_objects_v2", bucket)
            walk.objects.extend(objects if keep is None else [o for o in objects if keep(o.key)])
            walk.prefixes.extend(p for p in prefixes if not walk.prefixes or p != walk.prefixes[-1])
            count = page.get("KeyCount")
            entries = list(heapq.merge([o.key for o in objects], prefixes)) if prefixes else [o.key for o in objects]
            more = walk.check.add(ListedPage(entries, bool(page.get("IsTruncated")), page.get("NextContinuationToken"),
                                             int(count) if count is not None else None))
            if not more:
                walk.through = None  # read to its end (or inconsistent: then the caller never uses it)
                return walk
            if entries:
                walk.through = max(entries[-1], walk.through or "")
            elif walk.through is None:
                walk.through = prefix
            if ((limit is not None and len(walk.objects) + len(walk.prefixes) >= limit)
                    or (stop_after is not None and walk.through >= stop_after)
                    or (max_pages is not None and walk.check.pages >= max_pages)):
                return walk
            params["ContinuationToken"] = page["NextContinuationToken"]

    def _unencoded_listing_client(self) -> Any:
        """A second client whose ListObjectsV2 requests leave out ``EncodingType=url`` (made on first need)."""
        with self._lock:
            if self._unencoded is None:
                client = s3_client(self.store.options)[0]
                client.meta.events.unregister("before-parameter-build.s3.ListObjectsV2", set_list_objects_encoding_type_url)
                self._unencoded = client
            return self._unencoded

