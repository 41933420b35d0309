"""The commit protocols mpcommit is measured against, implemented here request for request.

Every protocol commits the same files: ``n_tasks`` tasks writing ``files_per_task`` files of ``file_size``
bytes each. A protocol has three phases: ``write`` (the tasks' output, not timed), ``task_commit`` and
``job_commit`` (both timed). All of them send their requests through one boto3 client with a
:class:`~bench.common.RequestMeter` attached, and run their parallel phases on ``threads`` threads -- the
same concurrency as mpcommit's job commit.

* :class:`HadoopV1` -- Hadoop's ``FileOutputCommitter``, algorithm 1, over S3A. Tasks write under
  ``_temporary/0/_temporary/attempt_.../``; task commit renames the attempt directory to
  ``_temporary/0/task_.../`` (S3A's directory rename: LIST, one CopyObject per file, DeleteObjects in pages of
  250); job commit lists the committed task directories and merges every file into the destination
  (``mergePaths``: a getFileStatus probe of the target -- its HEAD; S3A adds a one-key LIST, left out here, see
  :meth:`_HadoopFileOutputCommitter.get_file_status` -- then a file rename: CopyObject and DeleteObject), deletes ``_temporary`` and writes ``_SUCCESS``. Two copy-and-delete per file.
* :class:`HadoopV2` -- algorithm 2: task commit merges the attempt directory straight into the destination
  (one copy-and-delete per file); job commit deletes ``_temporary`` and writes ``_SUCCESS``.
* :class:`S3fsTransaction` -- fsspec/s3fs's ``fs.transaction``: inside a transaction s3fs opens every file
  with ``autocommit=False``, so closing it creates a multipart upload and uploads its part but does not
  complete it; ``end_transaction()`` then completes the deferred files one after another in the one process
  (``Transaction.complete`` -> ``S3File.commit`` -> ``CompleteMultipartUpload``), as s3fs does.
* :class:`BareCompleteLoop` -- the floor: the same uploads as mpcommit's (one part, CRC32 checksums), then
  nothing but a parallel loop of CompleteMultipartUpload on ``threads`` threads.

What is simplified, always in the baselines' favour: Hadoop's v1 job commit merges serially in the driver
and S3A copies at most 10 files of one rename at a time; here every phase gets the full ``threads``. S3A
also sends more probes per rename than modelled here (HEAD of the source, checks of the destination's
parent, fake directory markers), so the Hadoop request counts are a lower bound.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

S3A_BULK_DELETE_PAGE = 250  # fs.s3a.bulk.delete.page.size


@dataclass
class Workload:
    """Where and what a protocol commits."""

    bucket: str
    root: str  # destination prefix, ending in "/"
    job_id: str
    n_tasks: int
    files_per_task: int
    file_size: int
    threads: int

    @property
    def n_files(self) -> int:
        return self.n_tasks * self.files_per_task

    def payload(self) -> bytes:
        return (b"mpcommit-bench-" * (self.file_size // 15 + 1))[: self.file_size]

    def file_name(self, task: int, number: int, ext: str = "bin") -> str:
        return f"part-{task:05d}-{self.job_id}.c{number:03d}.{ext}"


class CommitProtocol:
    """One way of committing a workload: write (untimed), then task commit and job commit (timed)."""

    name = "?"
    label = "?"
    #: How many requests each timed phase keeps in flight (for the projection onto S3).
    task_commit_concurrency = 1
    job_commit_concurrency = 1

    def __init__(self, client: Any, workload: Workload):
        self.client = client
        self.w = workload

    def write(self) -> None:
        raise NotImplementedError

    def task_commit(self) -> None:
        pass

    def job_commit(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # helpers shared by the baselines
    def _pool_map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        with ThreadPoolExecutor(self.w.threads, thread_name_prefix=f"bench-{self.name}") as pool:
            return list(pool.map(fn, items))


# ---------------------------------------------------------------- Hadoop FileOutputCommitter over S3A
class _HadoopFileOutputCommitter(CommitProtocol):
    """The parts of FileOutputCommitter + S3AFileSystem both algorithms share."""

    def __init__(self, client: Any, workload: Workload):
        super().__init__(client, workload)
        self.task_commit_concurrency = workload.threads
        self.job_commit_concurrency = workload.threads
        w = workload
        self.job_attempt_dir = f"{w.root}_temporary/0/"

    def attempt_dir(self, task: int) -> str:
        return f"{self.job_attempt_dir}_temporary/attempt_{self.w.job_id}_m_{task:06d}_0/"

    def committed_task_dir(self, task: int) -> str:
        return f"{self.job_attempt_dir}task_{self.w.job_id}_m_{task:06d}/"

    def write(self) -> None:
        # S3A's block output stream writes a file smaller than one block as a single PUT on close.
        body = self.w.payload()

        def write_task(task: int) -> None:
            for i in range(self.w.files_per_task):
                self.client.put_object(Bucket=self.w.bucket, Key=self.attempt_dir(task) + self.w.file_name(task, i), Body=body)

        self._pool_map(write_task, list(range(self.w.n_tasks)))

    # S3A primitives -----------------------------------------------------------
    def get_file_status(self, key: str, *, directory_probe: bool = True) -> bool:
        """S3A's getFileStatus on a path: HEAD of the object, then a one-key LIST for a directory.

        ``directory_probe=False`` leaves the LIST out. It is used for the per-file probes of ``mergePaths``:
        LocalStack's LIST costs time in proportion to every object in the bucket (measured here: 4 ms at 100
        objects, 78 ms at 10,000), S3's does not, so sending one LIST per file would charge the baselines a
        quadratic cost that is the test server's, not S3's. Leaving it out favours the baselines.
        """
        try:
            self.client.head_object(Bucket=self.w.bucket, Key=key.rstrip("/"))
            return True
        except ClientError:
            pass
        if not directory_probe:
            return False
        r = self.client.list_objects_v2(Bucket=self.w.bucket, Prefix=key.rstrip("/") + "/", MaxKeys=1)
        return bool(r.get("KeyCount", 0))

    def list_files(self, prefix: str) -> list[str]:
        keys: list[str] = []
        kw: dict[str, Any] = {"Bucket": self.w.bucket, "Prefix": prefix}
        while True:
            r = self.client.list_objects_v2(**kw)
            keys += [o["Key"] for o in r.get("Contents", []) or []]
            if not r.get("IsTruncated"):
                return keys
            kw["ContinuationToken"] = r["NextContinuationToken"]

    def copy(self, src: str, dst: str) -> None:
        self.client.copy_object(Bucket=self.w.bucket, Key=dst, CopySource={"Bucket": self.w.bucket, "Key": src})

    def bulk_delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), S3A_BULK_DELETE_PAGE):
            page = keys[i : i + S3A_BULK_DELETE_PAGE]
            self.client.delete_objects(Bucket=self.w.bucket, Delete={"Objects": [{"Key": k} for k in page], "Quiet": True})

    def rename_directory(self, src_dir: str, dst_dir: str) -> None:
        """S3A's rename of a directory: list it, copy every file, then bulk-delete the sources."""
        keys = self.list_files(src_dir)
        for k in keys:
            self.copy(k, dst_dir + k[len(src_dir):])
        self.bulk_delete(keys)

    def rename_file(self, src: str, dst: str) -> None:
        """S3A's rename of one file: copy, then delete the source."""
        self.copy(src, dst)
        self.client.delete_object(Bucket=self.w.bucket, Key=src)

    def merge_paths(self, src_dir: str) -> None:
        """FileOutputCommitter.mergePaths of a directory into the (existing) destination: every file is
        probed at its target (getFileStatus) and renamed there. Run across files on the shared pool."""
        keys = self.list_files(src_dir)

        def merge_file(key: str) -> None:
            target = self.w.root + key[len(src_dir):]
            if self.get_file_status(target, directory_probe=False):
                self.client.delete_object(Bucket=self.w.bucket, Key=target)
            self.rename_file(key, target)

        for k in keys:
            merge_file(k)

    def cleanup_job(self) -> None:
        """cleanupJob: delete ``_temporary`` recursively (list, then bulk delete), then write _SUCCESS."""
        leftovers = self.list_files(f"{self.w.root}_temporary/")
        self.bulk_delete(leftovers)
        self.client.put_object(Bucket=self.w.bucket, Key=f"{self.w.root}_SUCCESS", Body=b"")


class HadoopV1(_HadoopFileOutputCommitter):
    name = "v1"
    label = "Hadoop FileOutputCommitter v1 (S3A rename)"

    def task_commit(self) -> None:
        def commit_task(task: int) -> None:
            self.get_file_status(self.attempt_dir(task))          # taskAttemptDirStatus
            self.get_file_status(self.committed_task_dir(task))   # exists(committedTaskPath)
            self.rename_directory(self.attempt_dir(task), self.committed_task_dir(task))

        self._pool_map(commit_task, list(range(self.w.n_tasks)))

    def job_commit(self) -> None:
        # getAllCommittedTaskPaths: list the job attempt directory.
        self.client.list_objects_v2(Bucket=self.w.bucket, Prefix=self.job_attempt_dir, Delimiter="/")
        self._pool_map(lambda t: self.merge_paths(self.committed_task_dir(t)), list(range(self.w.n_tasks)))
        self.cleanup_job()


class HadoopV2(_HadoopFileOutputCommitter):
    name = "v2"
    label = "Hadoop FileOutputCommitter v2 (S3A rename)"

    def task_commit(self) -> None:
        def commit_task(task: int) -> None:
            self.get_file_status(self.attempt_dir(task))  # taskAttemptDirStatus
            self.get_file_status(self.w.root)            # mergePaths: the destination exists (a directory)
            self.merge_paths(self.attempt_dir(task))

        self._pool_map(commit_task, list(range(self.w.n_tasks)))

    def job_commit(self) -> None:
        self.cleanup_job()


# ---------------------------------------------------------------- fsspec / s3fs transactions
class S3fsTransaction(CommitProtocol):
    name = "s3fs"
    label = "fsspec/s3fs transaction"
    job_commit_concurrency = 1  # Transaction.complete commits one file after another

    def __init__(self, client: Any, workload: Workload, *, endpoint: str, meter: Any):
        super().__init__(client, workload)
        import s3fs

        from .common import ACCESS_KEY, REGION, SECRET_KEY

        self.fs = s3fs.S3FileSystem(
            key=ACCESS_KEY, secret=SECRET_KEY, endpoint_url=endpoint, skip_instance_cache=True,
            client_kwargs={"region_name": REGION},
            config_kwargs={"s3": {"addressing_style": "path"}, "max_pool_connections": 64,
                           "request_checksum_calculation": "when_required",
                           "response_checksum_validation": "when_required"},
        )
        self.fs.connect()
        meter.attach(self.fs.s3)

    def write(self) -> None:
        body = self.w.payload()
        self.fs.start_transaction()

        def write_task(task: int) -> None:
            for i in range(self.w.files_per_task):
                with self.fs.open(f"{self.w.bucket}/{self.w.root}{self.w.file_name(task, i)}", "wb") as f:
                    f.write(body)

        self._pool_map(write_task, list(range(self.w.n_tasks)))
        assert len(self.fs.transaction.files) == self.w.n_files, "s3fs did not defer every file"

    def job_commit(self) -> None:
        self.fs.end_transaction()

    def close(self) -> None:
        try:
            self.fs.close_session(self.fs.loop, self.fs.s3)
        except Exception:  # noqa: BLE001 - best effort
            pass


# ---------------------------------------------------------------- the floor
class BareCompleteLoop(CommitProtocol):
    name = "bare"
    label = "bare CompleteMultipartUpload loop (floor)"

    def __init__(self, client: Any, workload: Workload):
        super().__init__(client, workload)
        self.job_commit_concurrency = workload.threads
        self._uploads: list[tuple[str, str, str, str]] = []
        self._lock = threading.Lock()

    def write(self) -> None:
        from mpcommit.sizing import crc32_b64

        body = self.w.payload()
        crc = crc32_b64(body)

        def write_task(task: int) -> None:
            for i in range(self.w.files_per_task):
                key = self.w.root + self.w.file_name(task, i)
                uid = self.client.create_multipart_upload(Bucket=self.w.bucket, Key=key, ChecksumAlgorithm="CRC32")["UploadId"]
                etag = self.client.upload_part(Bucket=self.w.bucket, Key=key, UploadId=uid, PartNumber=1, Body=body,
                                               ChecksumAlgorithm="CRC32", ChecksumCRC32=crc)["ETag"]
                with self._lock:
                    self._uploads.append((key, uid, etag, crc))

        self._pool_map(write_task, list(range(self.w.n_tasks)))

    def job_commit(self) -> None:
        def complete(u: tuple[str, str, str, str]) -> None:
            key, uid, etag, crc = u
            self.client.complete_multipart_upload(
                Bucket=self.w.bucket, Key=key, UploadId=uid,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag, "ChecksumCRC32": crc}]},
            )

        self._pool_map(complete, self._uploads)
