"""Proving a paginated listing complete (invariant I8), as pure logic over the pages a server returned.

S3 lists keys in ascending UTF-8 byte order, 1,000 to a page, and says ``IsTruncated`` with a continuation
marker while more follow. A server that breaks that contract must never be taken at its word: LocalStack
4.13.x, asked for URL-encoded keys (botocore's default for ListObjectsV2) under keys holding ``=``, answers
the first page truncated and the second empty and not truncated, so every key after the first 1,000 is
silently missing. An overwrite that trusted it left old files visible beside the new ones.

:class:`PageSequence` is fed the pages in order and names the first reason they cannot form a complete
listing; the store (``store/s3.py``) decides what to do about it. :func:`round_trips_unencoded` says whether a
key survives a listing without URL encoding, which is the store's way around the LocalStack defect.

ListMultipartUploads pages by two markers: the last key of a page and the last upload id of that key, so that a
key with many uploads can span pages. versitygw 1.8 refuses the UploadIdMarker it returned itself
(``InvalidArgument: Invalid uploadId marker``) and honours KeyMarker alone, which skips the rest of that key's
uploads. The store then pages by key and lists the boundary key's uploads on their own (``Prefix=key``):
:func:`uploads_of_key` says whether that one page proves it holds all of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ListedPage", "PageSequence", "round_trips_unencoded", "uploads_of_key"]


@dataclass(frozen=True)
class ListedPage:
    """What one page of a listing says about itself.

    ``entries`` are the page's sort keys in the order the server gave them (object keys, common prefixes,
    upload keys or part numbers); ``marker`` is where the next page starts, None when the page names none;
    ``count`` is the server's own count of the page's entries (ListObjectsV2's KeyCount) when it gives one.
    """

    entries: Sequence[Any]
    truncated: bool
    marker: Hashable | None = None
    count: int | None = None


class PageSequence:
    """Checks pages in order and keeps the first inconsistency found (``problem``), None while consistent.

    Inconsistent: a page that claims more follow and is followed by an empty last page; a truncated page
    without a marker, or whose marker does not advance (a repeat of one already used); entries out of
    order within a page or going backwards across pages; a page whose own count disagrees with its entries.
    ``strict`` says entries are unique (object keys, part numbers); upload listings repeat a key for each
    of its uploads, and delimiter listings may repeat a common prefix at a page boundary.
    """

    def __init__(self, *, strict: bool = True):
        self.strict = strict
        self.pages = 0
        self.problem: str | None = None
        self._last: Any = None
        self._unordered: str | None = None
        self._markers: set[Hashable] = set()
        self._after_truncated = False

    @property
    def complete(self) -> bool:
        """True once a consistent last (not truncated) page was added."""
        return self.problem is None and self.pages > 0 and not self._after_truncated

    def add(self, page: ListedPage) -> bool:
        """Check one page; returns True when another page should be requested (truncated and consistent)."""
        self.pages += 1
        n = self.pages
        if self.problem is not None:
            return False
        if page.count is not None and page.count != len(page.entries):
            return self._fail(f"page {n} says it holds {page.count} entries but lists {len(page.entries)}")
        if self._after_truncated and not page.entries and not page.truncated:
            return self._fail(f"page {n} came back empty and final although page {n - 1} said more followed "
                              "(IsTruncated)")
        if page.entries:
            first, last = min(page.entries), max(page.entries)
            if self._last is not None and (first < self._last or (self.strict and first == self._last)):
                return self._fail(f"entries go backwards at page {n}: {first!r} after {self._last!r}")
            self._last = last
            # Order within a page only matters to a listing of several pages (moto, for one, does not sort
            # the one page of uploads it returns): the first page is held back until a second one comes.
            disorder = next((b for a, b in zip(page.entries, page.entries[1:]) if b < a or (self.strict and b == a)),
                            None)
            if disorder is not None and self._unordered is None:
                self._unordered = f"entries out of order on page {n} at {disorder!r}"
            if self._unordered is not None and (n > 1 or page.truncated):
                return self._fail(self._unordered)
        self._after_truncated = page.truncated
        if not page.truncated:
            return False
        if page.marker is None or page.marker == "":
            return self._fail(f"page {n} is truncated but names no marker to continue from")
        if page.marker in self._markers:
            return self._fail(f"page {n} is truncated but its marker {page.marker!r} does not advance")
        self._markers.add(page.marker)
        return True

    def _fail(self, problem: str) -> bool:
        self.problem = problem
        self._after_truncated = False
        return False


def uploads_of_key(key: str, entries: Sequence[tuple[str, str]], truncated: bool) -> tuple[list[str], str | None]:
    """The upload ids of ``key`` on the first page of a ListMultipartUploads under ``Prefix=key`` (``entries`` are
    its (key, upload id) pairs in the server's order), and why that page does not prove it holds every upload of
    ``key`` -- None when it does.

    Keys under the prefix ``key`` sort after ``key`` itself, so its uploads come first: the page proves them all
    when it is not truncated, or when a longer key follows them. A truncated page of nothing but ``key`` (more
    uploads of one key than a page holds) proves nothing, nor does a page out of order or off the prefix.
    """
    keys = [k for k, _ in entries]
    stray = next((k for k in keys if not k.startswith(key)), None)
    if stray is not None:
        return [], f"the listing of the uploads of {key!r} (Prefix={key!r}) showed the key {stray!r} outside that prefix"
    disorder = next((b for a, b in zip(keys, keys[1:]) if b < a), None)
    if disorder is not None:
        return [], f"the listing of the uploads of {key!r} is out of order at {disorder!r}"
    mine = [upload_id for k, upload_id in entries if k == key]
    if truncated and (not keys or keys[-1] == key):
        return mine, (f"the key {key!r} has more pending uploads than one page holds ({len(mine)} listed, truncated), "
                      "and the server cannot page within one key")
    return mine, None


# XML 1.0 cannot carry most control characters at all, and a parser turns a carriage return into a line
# feed; a line feed itself is ambiguous on the way back for the same reason. Keys holding any of them only
# survive a listing with URL encoding.
_UNSAFE_BELOW_SPACE = frozenset(chr(c) for c in range(0x20)) - {"\t"}


def round_trips_unencoded(key: str) -> bool:
    """True when ``key`` comes back unchanged from a listing without ``EncodingType=url`` (raw XML text)."""
    return not any(ch in _UNSAFE_BELOW_SPACE or "\ufffe" <= ch <= "\uffff" or "\ud800" <= ch <= "\udfff"
                   for ch in key)
