"""Listings proven complete (invariant I8): a fake server that paginates wrongly in each known way.

The store must never hand a caller a listing that may have lost keys: it either proves the listing complete
(if need be by listing again without URL encoding, the way around LocalStack's defect) or raises
InconsistentListingError.
"""

from __future__ import annotations

import logging

import pytest

from mpcommit.errors import InconsistentListingError, StoreError
from mpcommit.options import RetryPolicy, S3Options
from mpcommit.store.listing import ListedPage, PageSequence, round_trips_unencoded, uploads_of_key
from mpcommit.store.s3 import S3Store

FAST = S3Options(retry=RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0))
KEYS = sorted(f"t/dt=2024-01-0{i % 3}/h={i % 7}/part-{i:05d} x%é.csv" for i in range(2500))
DEFECTS = ["empty_after_truncated", "stuck_token", "backwards", "count_mismatch", "no_token", "repeated_page"]


class Meta:
    endpoint_url = "http://fake"


class FakeLister:
    """ListObjectsV2 (and ListMultipartUploads over the same keys) as S3 pages it, 1,000 to a page, or with
    one of the DEFECTS from the second page on."""

    meta = Meta()

    def __init__(self, keys, defect=None, page_size=1000):
        self.keys = sorted(keys)
        self.defect = defect
        self.page_size = page_size
        self.calls = 0

    def _page(self, names, start, token_of):
        self.calls += 1
        n = self.page_size
        chunk, rest = names[start : start + n], names[start + n :]
        token = token_of(start + n) if rest else None
        page_no = start // n + 1
        if self.defect and page_no >= 2:
            if self.defect == "empty_after_truncated":
                return [], False, None, 0
            if self.defect == "stuck_token":
                return chunk, bool(rest), token_of(start), len(chunk)
            if self.defect == "backwards":
                return names[start - 5 : start - 5 + n], bool(rest), token, n
            if self.defect == "count_mismatch":
                return chunk, bool(rest), token, len(chunk) + 3
            if self.defect == "no_token":
                return chunk, True, None, len(chunk)
            if self.defect == "repeated_page":
                return names[:n], True, token_of(n), n
        return chunk, bool(rest), token, len(chunk)

    def list_objects_v2(self, *, Bucket, Prefix="", ContinuationToken=None, Delimiter=None, **_):
        self.prefix = Prefix
        names = [k for k in self.keys if k.startswith(Prefix)]
        start = int(ContinuationToken) if ContinuationToken else 0
        chunk, truncated, token, count = self._page(names, start, str)
        page = {"Contents": [{"Key": k, "Size": 1, "ETag": '"e"'} for k in chunk], "IsTruncated": truncated,
                "KeyCount": count}
        if token is not None:
            page["NextContinuationToken"] = token
        return page

    def list_multipart_uploads(self, *, Bucket, Prefix="", KeyMarker=None, UploadIdMarker=None, **_):
        names = [k for k in self.keys if k.startswith(Prefix)]
        start = int(UploadIdMarker) if UploadIdMarker else 0
        chunk, truncated, token, _count = self._page(names, start, str)
        page = {"Uploads": [{"Key": k, "UploadId": f"u{i}"} for i, k in enumerate(chunk)], "IsTruncated": truncated}
        if token is not None:
            page["NextKeyMarker"], page["NextUploadIdMarker"] = "k", token
        return page


def store(encoded, unencoded=None):
    return S3Store(FAST, client=encoded, unencoded_listing_client=unencoded or FakeLister([], defect="stuck_token"))


def test_an_honest_server_is_listed_once_page_by_page():
    server, spare = FakeLister(KEYS), FakeLister(KEYS)
    objects = store(server, spare).list_objects("bkt", "t/")
    assert [o.key for o in objects] == KEYS
    assert server.calls == 3 and spare.calls == 0


@pytest.mark.parametrize("defect", DEFECTS)
def test_an_inconsistent_encoded_listing_is_repeated_unencoded_and_proven_complete(defect, caplog):
    encoded, unencoded = FakeLister(KEYS, defect=defect), FakeLister(KEYS)
    with caplog.at_level(logging.WARNING, logger="mpcommit.store.s3"):
        objects = store(encoded, unencoded).list_objects("bkt", "t/")
    assert [o.key for o in objects] == KEYS
    assert unencoded.calls == 3
    assert "listed it again without URL encoding" in caplog.text


@pytest.mark.parametrize("defect", DEFECTS)
def test_when_both_listings_are_inconsistent_the_store_refuses_and_names_the_server(defect):
    with pytest.raises(InconsistentListingError, match="inconsistent") as info:
        store(FakeLister(KEYS, defect=defect), FakeLister(KEYS, defect=defect)).list_objects("bkt", "t/")
    message = str(info.value)
    assert "nothing was deleted, aborted or committed" in message and "s3://bkt/t/" in message
    assert info.value.code == "InconsistentListing"


def test_a_kept_listing_holds_only_what_it_keeps_and_still_checks_every_page():
    server = FakeLister(KEYS)
    looked: list[str] = []
    kept = store(server).list_objects("bkt", "t/", keep=lambda k: looked.append(k) or k in KEYS[1::2])
    assert [o.key for o in kept] == KEYS[1::2] and looked == KEYS and server.calls == 3
    assert store(FakeLister(KEYS)).list_objects("bkt", "t/", keep=lambda k: False) == []
    for defect in DEFECTS:  # an inconsistent listing is refused whatever is kept
        with pytest.raises(InconsistentListingError):
            store(FakeLister(KEYS, defect=defect), FakeLister(KEYS, defect=defect)).list_objects(
                "bkt", "t/", keep=lambda k: False)
    # Listed again unencoded, the kept keys proven: the same answer as keeping after the listing.
    encoded, unencoded = FakeLister(KEYS, defect="backwards"), FakeLister(KEYS)
    assert [o.key for o in store(encoded, unencoded).list_objects("bkt", "t/", keep=lambda k: k in KEYS[::3])] == KEYS[::3]


def test_the_empty_page_after_a_truncated_one_is_named_as_such():
    with pytest.raises(InconsistentListingError, match="page 2 came back empty and final although page 1 said more"):
        store(FakeLister(KEYS, defect="empty_after_truncated"),
              FakeLister(KEYS, defect="empty_after_truncated")).list_objects("bkt", "t/")


def test_keys_that_raw_xml_would_alter_are_never_listed_unencoded():
    keys = sorted(KEYS[:1500] + ["t/dt=2024-01-00/line\rbreak.csv"])
    unencoded = FakeLister(keys)
    with pytest.raises(InconsistentListingError, match="not safe for key"):
        store(FakeLister(keys, defect="empty_after_truncated"), unencoded).list_objects("bkt", "t/")
    assert unencoded.calls == 0


def test_an_unencoded_listing_showing_a_key_raw_xml_may_have_altered_is_refused():
    late = "t/zz/new\nline.csv"  # beyond the first page, so the first listing never saw it
    with pytest.raises(InconsistentListingError, match="raw XML may alter"):
        store(FakeLister(KEYS, defect="empty_after_truncated"), FakeLister(KEYS + [late])).list_objects("bkt", "t/")


def test_an_unencoded_listing_that_lacks_a_key_seen_before_is_refused():
    with pytest.raises(InconsistentListingError, match="lost key"):
        store(FakeLister(KEYS, defect="empty_after_truncated"), FakeLister(KEYS[1:])).list_objects("bkt", "t/")


def test_children_with_a_limit_stop_at_the_first_page_that_reaches_it():
    server = FakeLister(KEYS)
    names = store(server).list_children("bkt", "t/", limit=1)
    assert names == [KEYS[0][len("t/"):]] and server.calls == 1


FLAT = sorted(f"t/dt=1/part-{i:05d} x%é.csv" for i in range(2500))


def test_a_child_range_lists_the_prefix_its_first_and_last_keys_share():
    server = FakeLister(FLAT)
    found = store(server).list_child_range("bkt", "t/dt=1/", first=FLAT[1200], last=FLAT[1250])
    assert server.prefix == "t/dt=1/part-012" and server.calls == 1
    assert [o.key for o in found.objects] == FLAT[1200:1251] and found.through is None


def test_a_child_range_stops_at_the_page_that_reaches_its_last_key():
    server = FakeLister(FLAT)
    found = store(server).list_child_range("bkt", "t/dt=1/", first=FLAT[0], last=FLAT[1500])
    assert [o.key for o in found.objects] == FLAT[:1501]
    assert server.calls == 2 and found.covers(FLAT[1500]) and found.through == FLAT[1999]


def test_a_child_range_read_to_its_end_covers_every_key_after_it():
    server = FakeLister(FLAT)
    found = store(server).list_child_range("bkt", "t/dt=1/", first=FLAT[2000], last=FLAT[-1] + "z")
    assert [o.key for o in found.objects] == FLAT[2000:] and found.through is None and found.covers(FLAT[-1] + "z")
    assert server.calls == 1


def test_a_child_range_read_to_its_end_over_several_pages_covers_every_key():
    server = FakeLister(FLAT)
    found = store(server).list_child_range("bkt", "t/dt=1/", first=FLAT[0], last=FLAT[-1])
    assert server.calls == 3 and [o.key for o in found.objects] == FLAT
    assert found.through is None and found.covers(FLAT[-1])


def test_a_child_range_past_its_page_budget_covers_only_what_its_pages_proved():
    server = FakeLister(FLAT)
    found = store(server).list_child_range("bkt", "t/dt=1/", first=FLAT[0], last=FLAT[-1], max_pages=2)
    assert server.calls == 2 and [o.key for o in found.objects] == FLAT[:2000]
    assert found.covers(FLAT[1999]) and not found.covers(FLAT[2000])


@pytest.mark.parametrize("defect", DEFECTS)
def test_an_inconsistent_child_range_is_listed_again_unencoded_or_refused(defect):
    """The range's second page is defective: listed again without URL encoding, as every listing is; refused
    when that listing is defective too."""
    encoded, unencoded = FakeLister(FLAT, defect=defect), FakeLister(FLAT)
    found = store(encoded, unencoded).list_child_range("bkt", "t/dt=1/", first=FLAT[5], last=FLAT[1500])
    assert [o.key for o in found.objects] == FLAT[5:1501] and unencoded.calls == 2
    with pytest.raises(InconsistentListingError):
        store(FakeLister(FLAT, defect=defect), FakeLister(FLAT, defect=defect)).list_child_range(
            "bkt", "t/dt=1/", first=FLAT[5], last=FLAT[1500])


def test_a_child_range_outside_its_prefix_or_below_it_is_refused():
    with pytest.raises(ValueError, match="not a range of keys under"):
        store(FakeLister(FLAT)).list_child_range("bkt", "t/dt=2/", first=FLAT[0], last=FLAT[1])
    with pytest.raises(ValueError, match="not both directly below"):
        store(FakeLister(FLAT)).list_child_range("bkt", "t/", first="t/dt=1/a/x", last="t/dt=1/a/y")


@pytest.mark.parametrize("defect", ["empty_after_truncated", "stuck_token", "backwards", "repeated_page"])
def test_an_inconsistent_upload_listing_is_refused(defect):
    with pytest.raises(InconsistentListingError, match="listing of uploads"):
        store(FakeLister(KEYS, defect=defect)).list_multipart_uploads("bkt", "t/")


def test_an_honest_upload_listing_is_complete():
    uploads = store(FakeLister(KEYS)).list_multipart_uploads("bkt", "t/")
    assert [u.key for u in uploads] == KEYS


def test_page_sequence_rules():
    check = PageSequence()
    assert check.add(ListedPage(["a", "b"], True, "t1"))
    assert not check.add(ListedPage(["c"], False))
    assert check.complete and check.problem is None

    repeats = PageSequence(strict=False)  # one key, several uploads
    assert repeats.add(ListedPage(["a", "a"], True, ("a", "u2")))
    assert not repeats.add(ListedPage(["a", "b"], False)) and repeats.complete

    unsorted = PageSequence()
    assert not unsorted.add(ListedPage(["b", "a"], True, "t1"))
    assert "out of order on page 1" in unsorted.problem and not unsorted.complete

    one_unsorted_page = PageSequence(strict=False)  # a single page cannot have lost another: order is moot
    assert not one_unsorted_page.add(ListedPage(["b", "a"], False)) and one_unsorted_page.complete

    empty_but_truncated = PageSequence()  # S3 may return an empty truncated page; only an empty *last* page lies
    assert empty_but_truncated.add(ListedPage(["a"], True, "t1"))
    assert empty_but_truncated.add(ListedPage([], True, "t2"))
    assert not empty_but_truncated.add(ListedPage(["b"], False)) and empty_but_truncated.complete


@pytest.mark.parametrize("key,safe", [
    ("t/dt=2024-01-01/part-0.csv", True), ("t/a b%c/é/日本", True), ("t/tab\there", True),
    ("t/cr\rhere", False), ("t/lf\nhere", False), ("t/nul\x00", False), ("t/bell\x07", False), ("t/\ufffe", False),
])
def test_which_keys_survive_raw_xml(key, safe):
    assert round_trips_unencoded(key) is safe


# ---------------------------------------------------------------- a server that refuses its own UploadIdMarker
class KeyMarkerOnlyUploads:
    """ListMultipartUploads as versitygw 1.8 answers it: uploads sorted by key then initiation, ``page_size`` to a
    page with NextKeyMarker and NextUploadIdMarker; KeyMarker alone lists the keys after it; KeyMarker with an
    UploadIdMarker answers 400 InvalidArgument (its lister looks for that id among the keys *after* the marker)."""

    meta = Meta()

    def __init__(self, uploads, page_size=1000):
        self.uploads = list(uploads)  # (key, upload id) in initiation order
        self.page_size = page_size
        self.requests = []

    def list_multipart_uploads(self, *, Bucket, Prefix="", KeyMarker=None, UploadIdMarker=None, **_):
        from botocore.exceptions import ClientError

        self.requests.append({"Prefix": Prefix, "KeyMarker": KeyMarker, "UploadIdMarker": UploadIdMarker})
        if KeyMarker and UploadIdMarker:
            raise ClientError({"Error": {"Code": "InvalidArgument", "Message": "Invalid uploadId marker"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "ListMultipartUploads")
        rows = sorted((k, i, u) for i, (k, u) in enumerate(self.uploads)
                      if k.startswith(Prefix) and (not KeyMarker or k > KeyMarker))
        chunk = rows[: self.page_size]
        page = {"Uploads": [{"Key": k, "UploadId": u} for k, _i, u in chunk], "IsTruncated": len(rows) > len(chunk)}
        if page["IsTruncated"]:
            page["NextKeyMarker"], page["NextUploadIdMarker"] = chunk[-1][0], chunk[-1][2]
        return page


def _uploads(per_key):
    """(key, id) pairs: ``per_key[i]`` uploads of key t/kNNNN, in initiation order (ids say which key)."""
    return [(f"t/k{i:04d}", f"id-{i}-{n}") for i, count in enumerate(per_key) for n in range(count)]


def test_uploads_past_a_page_are_all_listed_where_the_server_refuses_its_own_upload_id_marker(caplog):
    # 1,100 uploads, three of a key at each page boundary (entries 999-1001, 1999-2001) and at a key marker page.
    per_key = [1] * 999 + [3] + [1] * 997 + [3] + [1] * 100 + [2]
    uploads = _uploads(per_key)
    server = KeyMarkerOnlyUploads(uploads)
    s = store(server)
    with caplog.at_level(logging.WARNING, logger="mpcommit.store.s3"):
        listed = s.list_multipart_uploads("bkt", "t/")
    assert sorted((u.key, u.upload_id) for u in listed) == sorted(uploads)
    assert len(listed) == len(uploads)
    assert s.pages_uploads_by_key and "refused the UploadIdMarker" in caplog.text
    # Its one refused request, then by key marker, each boundary key listed on its own.
    refused = [r for r in server.requests if r["UploadIdMarker"]]
    assert len(refused) == 1
    assert {r["Prefix"] for r in server.requests if r["Prefix"] != "t/"} == {"t/k0999", "t/k1997"}

    # The store remembers: a second listing sends no UploadIdMarker at all.
    server.requests.clear()
    assert len(s.list_multipart_uploads("bkt", "t/")) == len(uploads)
    assert not [r for r in server.requests if r["UploadIdMarker"]]


def test_a_key_with_more_uploads_than_a_page_is_refused_where_the_server_cannot_page_within_it():
    server = KeyMarkerOnlyUploads(_uploads([1] * 10 + [25] + [1] * 5), page_size=8)
    with pytest.raises(InconsistentListingError, match="more pending uploads than one page holds") as info:
        store(server).list_multipart_uploads("bkt", "t/")
    assert "nothing was deleted, aborted or committed" in str(info.value)


def test_a_longer_key_after_the_boundary_key_proves_its_uploads_complete():
    # The first page ends inside t/k0001's three uploads; its own listing (Prefix=t/k0001) is truncated too, but
    # keys under that prefix (t/k0001x...) follow its uploads on that page, so they are all there.
    uploads = [("t/k0000", "a1"), ("t/k0000", "a2"), ("t/k0001", "b1"), ("t/k0001", "b2"), ("t/k0001", "b3")]
    uploads += [(f"t/k0001x{i:02d}", f"c{i}") for i in range(10)] + [("t/k0002", "d")]
    server = KeyMarkerOnlyUploads(uploads, page_size=4)
    listed = store(server).list_multipart_uploads("bkt", "t/")
    assert sorted((u.key, u.upload_id) for u in listed) == sorted(uploads)
    relisted = [r for r in server.requests if r["Prefix"] == "t/k0001"]
    assert relisted and server.requests[0]["Prefix"] == "t/"


def test_another_invalid_argument_is_not_taken_for_the_marker_refusal():
    class Refuses(KeyMarkerOnlyUploads):
        def list_multipart_uploads(self, **kw):
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "InvalidArgument", "Message": "bad prefix"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "ListMultipartUploads")

    with pytest.raises(StoreError, match="InvalidArgument"):
        store(Refuses([])).list_multipart_uploads("bkt", "t/")


@pytest.mark.parametrize("entries,truncated,ids,problem", [
    ([("k", "1"), ("k", "2")], False, ["1", "2"], None),
    ([("k", "1"), ("k", "2")], True, ["1", "2"], "more pending uploads than one page holds"),
    ([("k", "1"), ("kz", "9")], True, ["1"], None),                 # a longer key follows: k's are all here
    ([], False, [], None),                                          # gone meanwhile (completed or aborted)
    ([], True, [], "more pending uploads than one page holds"),
    ([("k", "1"), ("j", "2")], False, [], "outside that prefix"),
    ([("kz", "1"), ("k", "2")], False, [], "out of order"),
])
def test_uploads_of_key_rules(entries, truncated, ids, problem):
    got, why = uploads_of_key("k", entries, truncated)
    assert got == ids
    assert (why is None) if problem is None else (problem in why)
