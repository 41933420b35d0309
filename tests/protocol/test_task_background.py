"""A task's files closed in the background (the sorted partition path): round trips of successive files overlap,
within the task's closing budget, and a failure aborts everything the attempt started. Against a slow in-memory
store whose counters show how many requests were in flight at once (no wall-clock assertions)."""

import threading
import time

import pytest

from mpcommit.errors import TransientStoreError
from mpcommit.options import WriterSettings
from mpcommit.protocol.layout import new_job_id, parse_uri
from mpcommit.protocol.task import JobSpec
from mpcommit.sizing import MiB


class SlowStore:
    """Every request takes ``delay`` seconds; counts requests in flight, bytes of parts in flight, and uploads."""

    def __init__(self, delay=0.03, fail_key_part=None, gather=0):
        self.delay = delay
        self.fail_key_part = fail_key_part
        self.lock = threading.Lock()
        # ``gather``: hold the first parts until that many requests are in flight (2 s at most, once): whether
        # the writer *can* keep that many going is then shown whatever the machine's scheduling; a writer that
        # sends one at a time leaves the first part waiting out the 2 s alone.
        self.gather = gather
        self.gathered = threading.Condition(self.lock)
        self.gate_open = not gather
        self.inflight = self.max_inflight = 0
        self.part_bytes = self.max_part_bytes = 0
        self.created = {}
        self.aborted = set()
        self.parts = {}
        self.objects = {}
        self.n = 0

    def _enter(self, nbytes=0, gate=False):
        with self.gathered:
            self.inflight += 1
            self.part_bytes += nbytes
            self.max_inflight = max(self.max_inflight, self.inflight)
            self.max_part_bytes = max(self.max_part_bytes, self.part_bytes)
            if gate and not self.gate_open:
                self.gathered.notify_all()
                self.gathered.wait_for(lambda: self.gate_open or self.inflight >= self.gather, timeout=2)
                self.gate_open = True
                self.gathered.notify_all()

    def _leave(self, nbytes=0):
        with self.lock:
            self.inflight -= 1
            self.part_bytes -= nbytes

    def create_multipart_upload(self, bucket, key, content_type=None):
        self._enter()
        try:
            time.sleep(self.delay)
            with self.lock:
                self.n += 1
                uid = f"u{self.n}"
                self.created[uid] = key
            return uid
        finally:
            self._leave()

    def upload_part(self, bucket, key, upload_id, number, body, crc32):
        self._enter(len(body), gate=True)  # parts go on the pool's threads; the task's own thread goes on
        try:
            time.sleep(self.delay)
            if self.fail_key_part and self.fail_key_part in key:
                raise TransientStoreError("injected", operation="upload_part")
            self.parts[(upload_id, number)] = len(body)
            return f'"e{number}"'
        finally:
            self._leave(len(body))

    def abort_multipart_upload(self, bucket, key, upload_id):
        with self.lock:
            self.aborted.add(upload_id)
        return True

    def put_object(self, bucket, key, data, content_type=None):
        self.objects[key] = bytes(data)
        return '"m"'

    def delete_objects(self, bucket, keys):
        pass


def spec(**settings):
    writer = WriterSettings(**{"initial_part_size": 5 * MiB, "upload_threads": 4, **settings})
    return JobSpec(job_id=new_job_id(), destination=parse_uri("s3://bkt/t"), writer=writer)


def write_files(task, n, size, *, background):
    block = b"d" * size
    for i in range(n):
        w = task.create(f"p={i:04d}", "bin", background=background)
        w.write(block)
        w.rows = 1
        w.close()


def test_background_files_overlap_their_round_trips():
    store = SlowStore(gather=4)
    with spec().task(0, store=store) as task:
        write_files(task, 40, 100_000, background=True)
        result = task.commit()
    assert result.files == 40 and result.bytes == 40 * 100_000
    assert sorted(u.partition for u in result.manifest.uploads) == [f"p={i:04d}" for i in range(40)]
    assert all(len(u.parts) == 1 and u.parts[0].size == 100_000 for u in result.manifest.uploads)
    # One file at a time would never have more than one request in flight; the pool's 4 threads all work.
    assert store.max_inflight == 4, store.max_inflight
    assert not store.aborted


def test_foreground_files_are_one_request_at_a_time():
    """The same load without background: the serial baseline the test above improves on (and a check that the
    counters can show it)."""
    store = SlowStore()
    with spec().task(0, store=store) as task:
        write_files(task, 10, 100_000, background=False)
        task.commit()
    assert store.max_inflight == 1


def test_closing_files_hold_at_most_the_closing_budget():
    store = SlowStore(delay=0.02)
    budget = 3 * MiB
    with spec(closing_bytes=budget, upload_threads=8).task(0, store=store) as task:
        write_files(task, 30, MiB, background=True)
        task.commit()
        assert task.closing_budget.peak <= budget
    # Parts of closing files in flight at once: never more than the budget (here 3 x 1 MiB files), though the
    # pool has 8 threads.
    assert store.max_part_bytes <= budget, store.max_part_bytes / MiB
    assert store.max_inflight >= 3


def test_failure_in_the_background_aborts_every_upload_the_attempt_started():
    store = SlowStore(fail_key_part="/p=0007/")  # the eighth file
    with pytest.raises(TransientStoreError):
        with spec().task(0, store=store) as task:
            write_files(task, 40, 100_000, background=True)
            task.commit()
    assert task.result is None
    assert store.created, "nothing was created"
    assert set(store.created) == store.aborted, f"left pending: {sorted(set(store.created) - store.aborted)}"
    assert not any(k.endswith(".json") for k in store.objects), "a manifest was written"


def test_failure_stops_new_files_soon():
    store = SlowStore(delay=0.01, fail_key_part="/p=2/")
    opened = 0
    with pytest.raises(TransientStoreError):
        with spec().task(0, store=store) as task:
            for i in range(500):
                w = task.create(f"p={i}", "bin", background=True)
                opened += 1
                w.write(b"x" * 1000)
                w.close()
            task.commit()
    assert opened < 500  # a later create raised the failure instead of going on
    assert set(store.created) == store.aborted


def test_writer_aborted_before_its_upload_exists_creates_none():
    store = SlowStore(delay=0.2)
    with spec(upload_threads=1).task(0, store=store) as task:
        first = task.create("p=0", "bin", background=True)  # its create takes the only thread for 0.2 s
        second = task.create("p=1", "bin", background=True)  # queued behind it
        second.abort()
        first.abort()
    assert len(store.created) <= 1 and set(store.created) == store.aborted


@pytest.mark.parametrize("background", [True, False])
def test_closed_files_keep_no_buffers(background):
    """Memory of a task writing many small files stays flat: a closed file keeps no part buffer (a spare
    buffer taken for a next part that never comes, or kept alive by its futures, would hold a whole part each)."""
    import tracemalloc

    store = SlowStore(delay=0.002)
    closing = 4 * MiB
    with spec(initial_part_size=8 * MiB, closing_bytes=closing).task(0, store=store) as task:
        tracemalloc.start()
        try:
            write_files(task, 30, MiB, background=background)
            task.commit()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # The file filling (1 MiB) and the closing files' bytes; 30 files x 8 MiB if buffers were kept.
    assert peak <= closing + 3 * MiB, f"peak {peak / MiB:.1f} MiB"


def test_sorted_partition_path_overlaps_files_and_keeps_every_row():
    """The spilled, sorted path of PartitionedWriter (one open file, the rest set aside) through background
    files: requests of successive files overlap, and the manifest names every partition's file with its rows."""
    import pyarrow as pa

    from mpcommit.formats import make_format
    from mpcommit.formats.partitioning import PartitionedWriter

    store = SlowStore(delay=0.02)
    fmt = make_format("csv")
    with spec().task(0, store=store) as task:
        out = PartitionedWriter(fmt=fmt, partition_columns=("p",), max_open_writers=1,
                                open_sink=lambda path, ext: task.create(path, ext, background=True))
        for start in range(0, 2000, 500):
            out.write(pa.record_batch({"p": pa.array([i % 25 for i in range(start, start + 500)]),
                                       "v": pa.array(range(start, start + 500))}))
        stats = out.close()
        result = task.commit()
    assert stats.spilled_partitions == 25 and result.files == 25 and result.rows == 2000
    assert sorted(u.rows for u in result.manifest.uploads) == [80] * 25
    assert store.max_inflight >= 3, store.max_inflight


def test_commit_sees_every_background_file_even_when_recording_it_is_slow(monkeypatch):
    """A file counts as done for the commit only once the task has recorded it (a commit woken by the file's
    completion before the task's record would call it still open, or leave it out of the manifest)."""
    from mpcommit.protocol.task import TaskAttempt

    record = TaskAttempt._finished

    def slow_record(self, pending):
        time.sleep(0.05)
        record(self, pending)

    monkeypatch.setattr(TaskAttempt, "_finished", slow_record)
    store = SlowStore(delay=0.01)
    with spec().task(0, store=store) as task:
        write_files(task, 5, 1000, background=True)
        result = task.commit()
    assert result.files == 5 and len(result.manifest.uploads) == 5


def test_file_numbers_count_per_partition_directory_as_sparks_do():
    """cNNN starts at c000 in every partition directory of a task and counts up within one (a partition that
    rolls over to a second file under maxRecordsPerFile gets c001), as Spark's writers name files."""
    with spec().task(3, store=SlowStore(delay=0)) as task:
        keys = [task.next_key(p, "csv") for p in ("dt=1", "dt=2", "dt=1", "", "dt=2", "dt=3")]
    names = [k.rsplit("/", 1)[-1].split("-", 2)[-1].split(".", 1)[1] for k in keys]
    assert names == ["c000.csv", "c000.csv", "c001.csv", "c000.csv", "c001.csv", "c000.csv"]
    assert len(set(keys)) == len(keys)


def test_a_commit_names_the_writers_still_open_and_no_finished_or_aborted_one():
    """What the attempt tracks as open: a writer from its creation until it finished (its upload recorded) or was
    aborted -- each taken out by its own finish, however many files the attempt wrote before."""
    from mpcommit.errors import ProtocolError

    with spec().task(0, store=SlowStore(delay=0)) as task:
        write_files(task, 30, 1000, background=True)
        dropped = task.create("p=dropped", "bin", background=True)
        dropped.write(b"x")
        dropped.abort()
        left = task.create("p=left", "bin", background=False)
        left.write(b"y")
        task.drain()
        with pytest.raises(ProtocolError, match="writers still open") as raised:
            task.commit()
        assert "p=left/" in str(raised.value) and "p=dropped" not in str(raised.value)
        assert "p=0000" not in str(raised.value)
        left.rows = 1
        left.close()
        result = task.commit()
    assert result.files == 31 and "p=dropped" not in result.partitions
