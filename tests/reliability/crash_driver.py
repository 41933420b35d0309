"""The job every fault-matrix case runs, and a driver that runs it in a subprocess to be killed.

Run as a script (``python crash_driver.py '<json>'``) with ``MPCOMMIT_FAULT=point:k:kill`` set, it writes one task
attempt (role ``task``) or a whole job and its commit (role ``job``) against the given endpoint and is killed
with SIGKILL at that checkpoint. Imported, it gives the tests the same plan in-process and the dataset an
uninterrupted commit must produce.

Only mpcommit is imported, so that the script starts quickly in a fresh interpreter.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping

from mpcommit import Job, JobSpec, RetryPolicy, S3Options, WriterSettings
from mpcommit.protocol.layout import Destination
from mpcommit.protocol.records.manifest import TaskResult
from mpcommit.sizing import MiB

PREFIX = "t"
# Fixed job ids, so that keys -- and the fault proxy's decisions, which hash them -- repeat from run to run.
JOB_ID = "5eed0000-0000-4000-8000-00000000c0de"
OTHER_JOB_ID = "07e40000-0000-4000-8000-0000000000b2"
TASKS = 4
BIG_SIZE = 6 * MiB  # two parts at the 5 MiB initial part size: exercises writer.part_uploaded 1 and 2
SMALL_PARTS = WriterSettings(initial_part_size=5 * MiB, max_parts_in_flight=2, upload_threads=2)
RETRY = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.2)
ACCESS_KEY_ID = "test"
SECRET_ACCESS_KEY = "test"
#: Completes in one uninterrupted commit (files of the winners): used to choose "k" for after_complete.
FILES = 6


def options_for(endpoint_url: str, retry: RetryPolicy = RETRY) -> S3Options:
    return S3Options(endpoint_url=endpoint_url, region="us-east-1", access_key_id=ACCESS_KEY_ID,
                     secret_access_key=SECRET_ACCESS_KEY, retry=retry)


def _big(task_id: int, attempt: int) -> bytes:
    seed = hashlib.sha256(f"big {task_id} {attempt}".encode()).digest()
    return (seed * (BIG_SIZE // len(seed) + 1))[:BIG_SIZE]


def files_of(task_id: int, attempt: int) -> list[tuple[str, bytes]]:
    """(partition, bytes) of every file one attempt writes, in order. Bytes name the attempt, so that a
    checker can tell which attempt of a task became visible."""
    small = f"task {task_id} attempt {attempt}\n".encode()
    if task_id == 0:
        return [("dt=0", _big(task_id, attempt)), ("dt=1", small)]
    if task_id == 3:
        return [("dt=1", b""), ("dt=0", small)]  # a zero-byte file first
    return [(f"dt={task_id % 2}", small)]


def key_of(prefix: str, partition: str, task_id: int, job_id: str, number: int) -> str:
    return f"{prefix}/{partition}/part-{task_id:05d}-{job_id}.c{number:03d}.txt"


def expected(winners: Mapping[int, int], *, job_id: str = JOB_ID, prefix: str = PREFIX) -> dict[str, bytes]:
    """The visible dataset after committing attempt ``winners[t]`` of each task ``t``."""
    out: dict[str, bytes] = {}
    for task_id, attempt in winners.items():
        numbers: dict[str, int] = {}  # cNNN counts per partition directory of a task, as Spark's does
        for partition, data in files_of(task_id, attempt):
            number = numbers[partition] = numbers.get(partition, -1) + 1
            out[key_of(prefix, partition, task_id, job_id, number)] = data
    return out


def write_attempt(spec: JobSpec, task_id: int, attempt: int) -> TaskResult:
    with spec.task(task_id, attempt) as task:
        for partition, data in files_of(task_id, attempt):
            with task.create(partition=partition, ext="txt") as out:
                out.write(data)
                out.rows = data.count(b"\n")
        return task.commit()


def spec_for(options: S3Options, bucket: str, *, job_id: str = JOB_ID, prefix: str = PREFIX) -> JobSpec:
    return JobSpec(job_id=job_id, destination=Destination(bucket, prefix), s3=options, writer=SMALL_PARTS)


def run_job(options: S3Options, bucket: str, *, mode: str = "overwrite", job_id: str = JOB_ID,
            delete_batch: int | None = None, prefix: str = PREFIX, tasks: int = TASKS) -> object:
    """Create the job, write every task (plus a committed loser attempt of task 1), commit attempt 0 of each."""
    if delete_batch is not None:
        import mpcommit.protocol.commit.replacing

        mpcommit.protocol.commit.replacing.DELETE_BATCH = delete_batch  # several delete batches without seeding 1,000s of objects
    job = Job.create(f"s3://{bucket}/{prefix}", mode=mode, s3=options, writer=SMALL_PARTS, job_id=job_id,
                     commit_threads=1)
    results = [write_attempt(job.spec, t, 0) for t in range(tasks)]
    write_attempt(job.spec, 1, 1)  # a loser: committed by its task, never chosen by the driver
    return job.commit(results)


def main(argv: list[str]) -> int:
    args = json.loads(argv[1])
    options = options_for(args["endpoint"])
    if args["role"] == "task":
        spec = spec_for(options, args["bucket"], job_id=args.get("job_id", JOB_ID))
        result = write_attempt(spec, args["task_id"], args["attempt"])
        sys.stdout.buffer.write(result.to_bytes())
    elif args["role"] == "job":
        run_job(options, args["bucket"], mode=args.get("mode", "overwrite"), job_id=args.get("job_id", JOB_ID),
                delete_batch=args.get("delete_batch"))
    else:
        raise SystemExit(f"unknown role {args['role']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
