"""The scene every reliability case runs in: it makes damage to anything but the job under test visible.

- old data in the destination ``t/`` (the planned job is an overwrite, so I5 is at stake);
- another job of the same destination, still writing: pending uploads and records (I6);
- sibling prefixes ``t2/``, ``t-x/``, ``tt/`` with objects, and in ``t2/`` a pending upload whose key even
  carries the job's id (never match by prefix or by id alone).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mpcommit import Job, S3Options
from mpcommit.protocol import faults
from mpcommit.protocol.layout import Destination, Table
from tests.reliability import crash_driver as plan

OLD = {f"t/dt={i % 3}/old-{i}.txt": f"old {i}\n".encode() for i in range(5)}
SIBLINGS = {"t2/keep.txt": b"sibling t2\n", "t-x/keep.txt": b"sibling t-x\n", "tt/_SUCCESS": b"{}"}
SIBLING_UPLOAD_KEY = f"t2/dt=0/part-00000-{plan.JOB_ID}.c000.txt"  # same job id, another destination
DELETE_BATCH = 2  # 5 old objects -> 3 delete batches, so that a crash can fall between two of them
EXPECTED = plan.expected({t: 0 for t in range(plan.TASKS)})


@dataclass
class Scene:
    backend: object
    bucket: str
    client: object
    other: Job

    @property
    def destination(self) -> Destination:
        return Destination(self.bucket, plan.PREFIX)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{plan.PREFIX}"

    @property
    def destination_table(self) -> Table:
        return Table(self.bucket, plan.PREFIX)


def make_scene(backend) -> Scene:
    client = backend.client
    bucket = backend.new_bucket("mpc-rel")
    for key, data in {**OLD, **SIBLINGS}.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)
    client.create_multipart_upload(Bucket=bucket, Key=SIBLING_UPLOAD_KEY)
    other = Job.create(f"s3://{bucket}/{plan.PREFIX}", mode="append", s3=backend.options, writer=plan.SMALL_PARTS,
                       job_id=plan.OTHER_JOB_ID)
    with other.spec.task(0, 0) as task:
        with task.create(partition="dt=0", ext="txt") as out:
            out.write(b"other job\n")
        task.commit()
    return Scene(backend, bucket, client, other)


def is_old(key: str) -> bool:
    return key in OLD


def is_success(key: str) -> bool:
    return key == f"{plan.PREFIX}/_SUCCESS"


@contextmanager
def small_delete_batches() -> Iterator[None]:
    import mpcommit.protocol.commit.replacing

    saved = mpcommit.protocol.commit.replacing.DELETE_BATCH
    mpcommit.protocol.commit.replacing.DELETE_BATCH = DELETE_BATCH
    try:
        yield
    finally:
        mpcommit.protocol.commit.replacing.DELETE_BATCH = saved


def run_job_in_process(scene: Scene, point: tuple[str, int] | None = None, *, options: S3Options | None = None,
                       tasks: int = plan.TASKS):
    """The planned overwrite job, committed in this process; with ``point``, an exception is raised there."""
    with small_delete_batches():
        if point is None:
            return plan.run_job(options or scene.backend.options, scene.bucket, tasks=tasks)
        with faults.installed(faults.fail_at(*point)):
            return plan.run_job(options or scene.backend.options, scene.bucket, tasks=tasks)


_REFERENCES: dict[str, str] = {}


def reference_bucket(backend) -> str:
    """A bucket where the same job (same id) ran uninterrupted in the same scene (to check I4 against)."""
    if backend.name not in _REFERENCES:
        scene = make_scene(backend)
        run_job_in_process(scene)
        _REFERENCES[backend.name] = scene.bucket
    return _REFERENCES[backend.name]
