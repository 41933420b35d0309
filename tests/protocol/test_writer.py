"""The streaming writer against an in-memory fake store: deterministic concurrency and failure paths."""

import threading
import time

import pytest

from mpcommit.errors import ChecksumMismatchError, TransientStoreError
from mpcommit.options import WriterSettings
from mpcommit.protocol.writer import MultipartWriter
from mpcommit.sizing import MiB, crc32_b64


class FakeStore:
    """Records parts; optionally slow, failing, or echoing a wrong checksum."""

    def __init__(self, *, delay=0.0, fail_part=None, wrong_crc=False):
        self.delay, self.fail_part, self.wrong_crc = delay, fail_part, wrong_crc
        self.parts = {}
        self.aborted = []
        self.completed = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()

    def create_multipart_upload(self, bucket, key, content_type=None):
        return "upload-1"

    def upload_part(self, bucket, key, upload_id, number, body, crc32):
        with self.lock:
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            time.sleep(self.delay)
            if number == self.fail_part:
                raise TransientStoreError("injected", operation="upload_part")
            if self.wrong_crc:
                raise ChecksumMismatchError("echoed checksum differs", operation="upload_part")
            assert crc32 == crc32_b64(body)
            self.parts[number] = bytes(body)
            return f'"etag{number}"'
        finally:
            with self.lock:
                self.inflight -= 1

    def abort_multipart_upload(self, bucket, key, upload_id):
        self.aborted.append(upload_id)
        return True

    def complete_multipart_upload(self, *a, **k):  # pragma: no cover - a writer must never call this
        self.completed.append(a)
        raise AssertionError("the writer completed its upload")


SETTINGS = WriterSettings(initial_part_size=5 * MiB, parts_per_size_step=2, max_parts_in_flight=2, upload_threads=4)


def writer(store, settings=SETTINGS):
    return MultipartWriter(store, bucket="bkt", key="t/part-00000-x.c000.bin", settings=settings)


def test_parts_grow_and_the_upload_is_never_completed():
    store = FakeStore()
    data = bytes(range(256)) * (160 * 1024)  # 40 MiB
    with writer(store) as w:
        for i in range(0, len(data), 777_777):  # odd-sized writes cross part boundaries
            w.write(data[i : i + 777_777])
    pending = w.pending
    sizes = [p.size for p in pending.parts]
    # 5, 5, then 10, 10, then the 10 MiB left (step 2: size doubles every 2 parts)
    assert sizes == [5 * MiB, 5 * MiB, 10 * MiB, 10 * MiB, 10 * MiB]
    assert b"".join(store.parts[n] for n in sorted(store.parts)) == data
    assert pending.size == len(data) and not store.completed and not store.aborted
    assert all(p.crc32 == crc32_b64(store.parts[p.number]) for p in pending.parts)


def test_parts_in_flight_are_bounded():
    store = FakeStore(delay=0.05)
    with writer(store) as w:
        w.write(b"x" * (45 * MiB))
    assert store.max_inflight == SETTINGS.max_parts_in_flight
    assert len(w.pending.parts) >= 4


def test_zero_byte_file_is_one_empty_part():
    store = FakeStore()
    with writer(store) as w:
        pass
    assert [(p.number, p.size) for p in w.pending.parts] == [(1, 0)]


def test_an_exception_in_scope_aborts_the_upload():
    store = FakeStore()
    with pytest.raises(KeyError):
        with writer(store) as w:
            w.write(b"x" * (6 * MiB))
            raise KeyError("caller failed")
    assert store.aborted == ["upload-1"] and w.pending is None


def test_a_failed_part_aborts_and_surfaces_the_error():
    store = FakeStore(fail_part=2)
    with pytest.raises(TransientStoreError, match="injected"):
        with writer(store) as w:
            w.write(b"x" * (20 * MiB))
    assert store.aborted == ["upload-1"]


def test_a_checksum_mismatch_is_an_error_and_aborts():
    store = FakeStore(wrong_crc=True)
    with pytest.raises(ChecksumMismatchError):
        with writer(store) as w:
            w.write(b"x" * 10)
    assert store.aborted == ["upload-1"]


def test_write_after_close_is_refused():
    store = FakeStore()
    w = writer(store)
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x")


def test_tell_counts_bytes_written():
    store = FakeStore()
    with writer(store) as w:
        w.write(b"abc")
        w.write(bytearray(b"de"))
        w.write(memoryview(b"f"))
        assert w.tell() == 6


class DiscardingStore(FakeStore):
    """Holds each part only while it 'uploads' (slowly), as a real upload does, then drops it."""

    def upload_part(self, bucket, key, upload_id, number, body, crc32):
        time.sleep(0.05)
        return f'"etag{number}"'


def test_memory_stays_within_the_documented_bound():
    import tracemalloc

    settings = WriterSettings(initial_part_size=5 * MiB, parts_per_size_step=1000, max_parts_in_flight=2, upload_threads=4)
    bound = settings.initial_part_size * (settings.max_parts_in_flight + 1)
    chunk = b"x" * MiB
    store = DiscardingStore()
    tracemalloc.start()
    try:
        with writer(store, settings) as w:
            for _ in range(40):
                w.write(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One buffer filling plus two parts uploading; a copy made before waiting for a slot would add a fourth.
    assert peak <= bound + MiB, f"peak {peak / MiB:.1f} MiB above the bound of {bound / MiB:.0f} MiB"


class IdentityStore(DiscardingStore):
    """Remembers which object each part's body was (not its bytes) and its type."""

    def __init__(self):
        super().__init__()
        self.bodies = []

    def upload_part(self, bucket, key, upload_id, number, body, crc32):
        assert crc32 == crc32_b64(body)
        self.bodies.append((number, type(body), id(body), len(body)))
        time.sleep(0.01)
        return f'"etag{number}"'


def test_part_buffers_are_handed_over_and_reused_not_copied():
    settings = WriterSettings(initial_part_size=5 * MiB, parts_per_size_step=1000, max_parts_in_flight=2, upload_threads=4)
    store = IdentityStore()
    chunk = b"y" * MiB
    with writer(store, settings) as w:
        for _ in range(12 * 5 + 1):  # 12 full parts and a last one of 1 MiB
            w.write(chunk)
    assert len(store.bodies) == 13
    # Each body is the writer's own buffer (a bytearray the store sends as it is), not a bytes() copy of it ...
    assert {t for _, t, _, _ in store.bodies} == {bytearray}
    # ... and 13 parts went out of at most max_parts_in_flight + 1 buffers: buffers of uploaded parts are reused.
    ids = {i for _, _, i, _ in store.bodies}
    assert len(ids) <= settings.max_parts_in_flight + 1, f"{len(ids)} distinct part buffers for 13 parts"
    assert w.pending.size == 61 * MiB and [p.size for p in w.pending.parts][-1] == MiB


def test_memory_is_the_bound_exactly_no_transient_copies():
    """Tighter than the test above: no transient copy of a chunk or a part on top of the three part buffers
    (bytearray slice assignment copies its source first; ``bytes()`` of a part copies it)."""
    import tracemalloc

    settings = WriterSettings(initial_part_size=5 * MiB, parts_per_size_step=1000, max_parts_in_flight=2, upload_threads=4)
    bound = settings.initial_part_size * (settings.max_parts_in_flight + 1)
    chunk = b"z" * MiB
    store = DiscardingStore()
    tracemalloc.start()
    try:
        with writer(store, settings) as w:
            for _ in range(40):
                w.write(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= bound + 128 * 1024, f"peak {peak / MiB:.2f} MiB above the bound of {bound / MiB:.0f} MiB"
