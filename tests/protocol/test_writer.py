"""The streaming writer against an in-memory fake store: deterministic concurrency and failure paths."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpcommit.errors import ChecksumMismatchError, ProtocolError, TransientStoreError
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


class CountingPool(ThreadPoolExecutor):
    """A thread pool that remembers what it was handed, by function name."""

    def __init__(self):
        super().__init__(4)
        self.submitted = []

    def submit(self, fn, *args, **kwargs):
        self.submitted.append(fn.__name__)
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("size", [0, 100_000, 7 * MiB])
def test_a_background_file_on_a_store_that_cannot_poll_is_created_at_open_on_the_pool(size):
    store, pool = FakeStore(), CountingPool()
    w = MultipartWriter(store, bucket="bkt", key="t/f.bin", settings=SETTINGS, executor=pool, background=True)
    try:
        assert pool.submitted == ["_ensure_created"]  # the upload exists (and is aborted with its job) from now
        w.write(b"x" * size)
        w.close()
        pending = w.done.result(timeout=30)
    finally:
        pool.shutdown()
    assert pool.submitted[0] == "_ensure_created" and set(pool.submitted[1:]) == {"_upload_part"}
    assert pending.upload_id == "upload-1" and pending.size == size
    assert b"".join(store.parts[n] for n in sorted(store.parts)) == b"x" * size


def test_a_background_file_aborted_before_its_close_leaves_no_upload():
    store, pool = FakeStore(), CountingPool()
    created = []
    store.create_multipart_upload = lambda *a, **k: created.append(a) or "upload-1"
    w = MultipartWriter(store, bucket="bkt", key="t/f.bin", settings=SETTINGS, executor=pool, background=True)
    w.write(b"x" * 1000)
    w.abort()
    pool.shutdown()
    assert len(created) == len(store.aborted) <= 1 and store.parts == {}


# ---------------------------------------------------------------- a small background file on a store that polls
class UnwaitedStore(FakeStore):
    """A FakeStore that also sends a create and a part without waiting: each answered from a thread of its own,
    the create once ``release`` is set; ``fail_first_create`` fails the first attempt (as a 503 would)."""

    def __init__(self, *, fail_first_create=False):
        super().__init__()
        self.release = threading.Event()
        self.release.set()
        self.fail_first_create = fail_first_create
        self.created = []
        self.sent_unwaited = []

    def create_multipart_upload(self, bucket, key, content_type=None):
        with self.lock:
            self.created.append(f"upload-{len(self.created) + 1}")
            return self.created[-1]

    def start_create_multipart_upload(self, bucket, key, done, content_type=None):
        def answer():
            self.release.wait(10)
            if self.fail_first_create:
                self.fail_first_create = False
                done(None, TransientStoreError("injected 503", operation="create_multipart_upload"))
            else:
                self.sent_unwaited.append("create")
                done(self.create_multipart_upload(bucket, key), None)
        threading.Thread(target=answer).start()
        return True

    def start_upload_part(self, bucket, key, upload_id, number, body, crc32, done):
        def answer():
            self.sent_unwaited.append("part")
            try:
                done(self.upload_part(bucket, key, upload_id, number, body, crc32), None)
            except Exception as exc:  # noqa: BLE001 - as the store reports a failed attempt
                done(None, exc)
        threading.Thread(target=answer).start()
        return True


def background_writer(store, pool):
    return MultipartWriter(store, bucket="bkt", key="t/f.bin", settings=SETTINGS, executor=pool, background=True)


def test_a_small_background_file_goes_out_with_no_pool_thread():
    store, pool = UnwaitedStore(), CountingPool()
    w = background_writer(store, pool)
    try:
        w.write(b"x" * 100_000)
        w.close()
        pending = w.done.result(timeout=30)
    finally:
        pool.shutdown()
    assert pool.submitted == [] and store.sent_unwaited == ["create", "part"]
    assert pending.upload_id == "upload-1" and [p.size for p in pending.parts] == [100_000]
    assert store.parts == {1: b"x" * 100_000} and store.aborted == []


def test_a_failed_first_attempt_goes_on_through_the_pool_with_its_retries():
    store, pool = UnwaitedStore(fail_first_create=True), CountingPool()
    w = background_writer(store, pool)
    try:
        w.write(b"y" * 1000)
        w.close()
        pending = w.done.result(timeout=30)
    finally:
        pool.shutdown()
    assert pool.submitted == ["_upload_part"]  # it created the upload and sent the part
    assert pending.upload_id == "upload-1" and store.parts == {1: b"y" * 1000}


def test_an_abort_while_the_create_is_unanswered_aborts_the_upload_it_made():
    store, pool = UnwaitedStore(), CountingPool()
    store.release.clear()
    w = background_writer(store, pool)
    w.write(b"z" * 1000)
    w.close()  # the create is on its way, unanswered
    aborting = threading.Thread(target=w.abort)
    aborting.start()
    aborting.join(0.2)
    assert aborting.is_alive(), "the abort waits for the create's answer"
    store.release.set()
    aborting.join(10)
    pool.shutdown(wait=True)
    assert store.created == ["upload-1"] and "upload-1" in store.aborted and store.parts == {}
    with pytest.raises(ProtocolError, match="aborted"):
        w.done.result(timeout=10)


def test_a_fault_at_the_create_fails_the_file_and_aborts_its_upload():
    from mpcommit.protocol import faults

    store, pool = UnwaitedStore(), CountingPool()
    with faults.installed(faults.fail_at("writer.created")):
        w = background_writer(store, pool)
        w.write(b"z" * 1000)
        w.close()
        with pytest.raises(faults.InjectedFault):
            w.done.result(timeout=10)
    pool.shutdown(wait=True)
    assert store.created == ["upload-1"] and store.aborted == ["upload-1"] and store.parts == {}


def test_a_small_background_file_on_a_real_server_is_the_pending_upload_s3_holds(moto_backend):
    """Against moto through the CRT transport: the task's small files are created and sent with no pool thread,
    and what the manifest records is what S3 holds (completed by the job's commit, read back by boto3)."""
    from mpcommit import Job

    bucket = moto_backend.new_bucket()
    job = Job.create(f"s3://{bucket}/t", s3=moto_backend.options)
    assert hasattr(job.store.completer(bucket), "start")  # the CRT sends this store's requests
    with job.spec.task(0, 0) as task:
        pool = task._pool()
        submitted = []
        real_submit = pool.submit
        pool.submit = lambda fn, *a, **k: (submitted.append(fn.__name__), real_submit(fn, *a, **k))[1]
        for i in range(5):
            w = task.create(f"p={i}", "bin", background=True)
            w.write(f"file {i}\n".encode() * (i + 1))
            w.rows = i + 1
            w.close()
        result = task.commit()
    assert submitted == [] and result.files == 5
    job.commit([result])
    for i in range(5):
        (key,) = [o.key for o in job.store.list_objects(bucket, f"t/p={i}/")]
        assert moto_backend.client.get_object(Bucket=bucket, Key=key)["Body"].read() == f"file {i}\n".encode() * (i + 1)


def test_a_task_aborted_before_its_small_files_answers_are_read_leaves_no_upload(moto_backend):
    """The answers of a small file's requests are read only where the task's thread pumps the store: an abort that
    comes first reads them, and aborts every upload they created (none is left for the job's cleanup)."""
    from mpcommit import Job

    bucket = moto_backend.new_bucket()
    job = Job.create(f"s3://{bucket}/t", s3=moto_backend.options)
    task = job.spec.task(0, 0)
    for i in range(6):
        w = task.create(f"p={i}", "bin", background=True)
        w.write(b"row\n" * (i + 1))
        w.close()  # its create is on its way (a close pumps once, without waiting)
    task.abort()
    counts = job.store.request_counts()
    assert counts.get("create_multipart_upload", 0) >= 6 and counts.get("abort_multipart_upload", 0) >= 6
    listed = moto_backend.client.list_multipart_uploads(Bucket=bucket, Prefix="t/p=")
    assert listed.get("Uploads", []) == []
    assert [o.key for o in job.store.list_objects(bucket, "t/p=")] == []
