"""Whether a change of the task side's code left its files as they were: :mod:`bench.bench_task_cpu`'s task run
by a named commit's product code and by this checkout's, against the stub server, and the task manifests' files
compared -- each file's key (the job id aside), size, rows, partition, and its parts' sizes and CRC32s (the parts'
bytes, as the manifest records them).

    python -m bench.task_files_same --before 9c0cbe0 [--values 1250,125,7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def child(endpoint: str, values: int, rows: int) -> dict[str, Any]:
    """One task in this process: the code it ran and its manifest's files, comparable across runs."""
    from unittest import mock

    import mpcommit

    from bench import bench_task_cpu as b
    from mpcommit import Job, S3Options
    from mpcommit.formats import make_format
    from mpcommit.protocol.records.manifest import TaskManifest
    from mpcommit.spark import tasks
    from mpcommit.spark.plan import TaskPlan
    from mpcommit.store.s3 import store_for

    options = S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test")
    job = Job.create(f"s3://{b.BUCKET}/same-{time.time_ns()}", mode="append", s3=options)
    plan = TaskPlan(spec=job.spec, fmt=make_format("parquet"), partition_columns=("p",), max_open_writers=8,
                    max_records_per_file=0)
    with mock.patch.object(tasks, "task_numbers", lambda: (0, 0)):
        result = tasks.run_task(plan, b.batches(values, rows))
    spec = job.spec
    manifest = result.manifest or TaskManifest.from_bytes(
        store_for(options).get_object(b.BUCKET, result.manifest_key), where=result.manifest_key,
        destination=spec.destination, job_id=spec.job_id)
    return {"code_path": str(Path(mpcommit.__file__).resolve().parent),
            "files": sorted([u.key[len(spec.destination.root):].replace(spec.job_id, "JOB"), u.size, u.rows,
                             u.partition, [[p.number, p.size, p.crc32] for p in u.parts]] for u in manifest.uploads)}


def main(argv: list[str] | None = None) -> int:
    from bench.bench_commit_scale import Stub
    from bench.bench_task_cpu import BUCKET, ROW_BYTES, TASK_BYTES, extract
    from bench.common import ensure_bucket, make_client

    p = argparse.ArgumentParser(prog="python -m bench.task_files_same", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True)
    p.add_argument("--values", default="1250,125,7")
    p.add_argument("--rows", type=int, default=TASK_BYTES // ROW_BYTES)
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]), int(a.child[2]))))
        return 0
    work = Path(tempfile.mkdtemp(prefix="task-files-same-"))
    stub = Stub()
    same = True
    try:
        ensure_bucket(make_client(stub.endpoint), BUCKET)
        before = extract(a.before, work / "before")
        for values in (int(v) for v in a.values.split(",")):
            files = {}
            for name, path in (("before", [str(before), str(REPO_ROOT)]), ("after", [str(REPO_ROOT)])):
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
                r = subprocess.run([sys.executable, "-m", "bench.task_files_same", "--before", a.before, "--child",
                                    stub.endpoint, str(values), str(a.rows)], capture_output=True, text=True,
                                   env=env, cwd=work, check=True)
                ran = json.loads(r.stdout.strip().splitlines()[-1])
                expected = str((before if name == "before" else REPO_ROOT) / "mpcommit")
                if ran["code_path"] != expected:
                    raise RuntimeError(f"the {name} run imported {ran['code_path']}, not {expected}")
                files[name] = ran["files"]
            equal = files["before"] == files["after"]
            same &= equal
            print(f"{values} values: {len(files['before'])} files before, {len(files['after'])} after; "
                  f"{'the same' if equal else 'DIFFERENT'} (keys, sizes, rows, partitions, parts' sizes and CRC32s)")
    finally:
        stub.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
