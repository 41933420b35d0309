"""Issue 39, item 3: the client CPU of one Spark task's write, per file, before and after a change of the product
code -- measured as the process's CPU time (``getrusage``: every thread of the task's Python worker), not wall time.

One task as :func:`mpcommit.spark.tasks.run_task` drives it (the Spark task's numbers stubbed, nothing else): Arrow
batches of 10,000 rows (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``) in, Parquet files out as pending
multipart uploads, the attempt committed (its manifest written). The rows are the peers benchmark's
(``bench_spark_peers``: ``id``, ``p = id % values``, four random doubles; 40 bytes a row): a task holds a contiguous
range of ids, so every batch holds every partition value, interleaved -- what each of Spark's tasks hands mpcommit
when the DataFrame is not sorted by the partition column. 1 GiB over 8 tasks: 128 MiB a task. ``values`` = 125 gives
the task's share of a 1,000-file job, 1,250 its share of a 10,000-file job.

The server is the stub (:mod:`bench.stub_s3`, another process, tens of microseconds a request): what is measured is
the client. The CPU per extra file of a round is ``(CPU at the larger values - CPU at the smaller) / extra files``,
both runs of the same code in the same round.

Variants: ``before`` runs the product code of a named commit (``--before``, default 5291bc9: main when issue 39 was
taken), extracted with ``git archive`` into a temporary directory put first on the child's ``PYTHONPATH``; ``after``
runs this checkout's. Each run is a fresh process; rounds interleave the two ABBA (A B, B A, ...), every size in
every round.

    python -m bench.bench_task_cpu --rounds 5                        # 125 and 1,250 values, 5 rounds
    python -m bench.bench_task_cpu --rounds 1 --records bench/results/smoke
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

BUCKET = "bench-task-cpu"
BATCH_ROWS = 10_000
ROW_BYTES = 40  # bench_spark_peers.ROW_BYTES: id + four doubles (the partition column lives in the path)
TASK_BYTES = 128 * 1024 * 1024  # 1 GiB over 8 tasks
JOB_TASKS = 8
DEFAULT_VALUES = (125, 1250)
BEFORE = "5291bc9"


def batches(values: int, rows: int, *, seed: int = 7) -> list[Any]:
    """The task's rows as Spark's Arrow batches: ids 0..rows-1, ``p = id % values`` (int), four random doubles."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - start)
        ids = np.arange(start, start + n, dtype=np.int64)
        cols = [pa.array(ids), pa.array((ids % values).astype(np.int32))]
        cols += [pa.array(rng.random(n)) for _ in range(4)]
        out.append(pa.record_batch(cols, names=["id", "p", "x0", "x1", "x2", "x3"]))
    return out


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def child(endpoint: str, values: int, rows: int) -> dict[str, Any]:
    """One task in this process: returns its CPU (user, system, main thread), wall time, files and requests."""
    from unittest import mock

    import mpcommit
    from mpcommit import Job, S3Options
    from mpcommit.formats import make_format
    from mpcommit.spark import tasks
    from mpcommit.spark.plan import TaskPlan
    from mpcommit.store.s3 import store_for

    data = batches(values, rows)
    options = S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test")
    job = Job.create(f"s3://{BUCKET}/v{values}-{time.time_ns()}", mode="append", s3=options)
    plan = TaskPlan(spec=job.spec, fmt=make_format("parquet"), partition_columns=("p",), max_open_writers=8,
                    max_records_per_file=0)
    # Warm-up, untimed: imports, the store's client and connections, a first Parquet file.
    with mock.patch.object(tasks, "task_numbers", lambda: (JOB_TASKS, 0)):
        tasks.run_task(plan, batches(4, 20_000))
    store = store_for(options)  # the task's own (one per process and options)
    store.reset_counts()
    u0, s0 = _cpu()
    main0, t0 = time.thread_time(), time.perf_counter()
    with mock.patch.object(tasks, "task_numbers", lambda: (0, 0)):
        result = tasks.run_task(plan, data)
    wall = time.perf_counter() - t0
    main = time.thread_time() - main0
    u1, s1 = _cpu()
    return {"code_path": str(Path(mpcommit.__file__).resolve().parent), "values": values, "rows": rows,
            "files": result.files, "bytes": result.bytes, "cpu_s": (u1 - u0) + (s1 - s0), "user_s": u1 - u0,
            "system_s": s1 - s0, "main_thread_cpu_s": main, "wall_s": wall,
            "requests": store.request_counts(),
            "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def extract(rev: str, into: Path) -> Path:
    """The product code (``mpcommit/``) of ``rev``, extracted into ``into``; returns the directory to put on the path."""
    archive = subprocess.run(["git", "archive", rev, "mpcommit"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(endpoint: str, code_dir: Path | None, values: int, rows: int, nice: int, cwd: Path) -> dict[str, Any]:
    """One run in a fresh process. Its working directory is not the checkout (``python -m`` puts the working
    directory first on the path, before ``PYTHONPATH``): the code imported is ``code_dir``'s, else the checkout's."""
    env = dict(os.environ)
    paths = ([str(code_dir)] if code_dir else []) + [str(REPO_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = ["nice", "-n", str(nice), sys.executable, "-m", "bench.bench_task_cpu", "--child", "--endpoint", endpoint,
           "--values", str(values), "--rows", str(rows)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"task-cpu child failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def per_file_ms(small: dict[str, Any], large: dict[str, Any]) -> float:
    """CPU per extra file between two runs of one code in one round, in milliseconds."""
    return 1000 * (large["cpu_s"] - small["cpu_s"]) / (large["files"] - small["files"])


def run(*, rounds: int, values: tuple[int, ...], rows: int, before: str, records_dir: str | None,
        nice: int, variants: tuple[str, ...] = ("before", "after")) -> list[dict[str, Any]]:
    from bench.bench_commit_scale import Stub
    from bench.common import abba, ensure_bucket, log, make_client
    from bench.records import RecordLog, code_version

    work = Path(tempfile.mkdtemp(prefix="bench-task-cpu-"))
    stub = Stub()
    out: list[dict[str, Any]] = []
    try:
        ensure_bucket(make_client(stub.endpoint), BUCKET)
        before_dir = extract(before, work / "before") if "before" in variants else None
        cwd = work / "run"  # empty: nothing importable
        cwd.mkdir()
        codes = {"before": code_version(before) or before, "after": code_version("HEAD") or "?"}
        records = RecordLog("task_cpu", directory=records_dir, server="bench.stub_s3 (another process)",
                            rows_per_task=rows, batch_rows=BATCH_ROWS, values=list(values), before=before,
                            codes=codes, nice=nice, job_tasks=JOB_TASKS,
                            measure="getrusage(RUSAGE_SELF) of the task's process around run_task: every thread")
        for pair, variant in abba(variants, rounds):
            for v in values:
                load = os.getloadavg()
                s0 = stub.cpu_seconds()
                r = measure(stub.endpoint, before_dir if variant == "before" else None, v, rows, nice, cwd)
                r.update(variant=variant, pair=pair, code_ran=codes[variant], server_cpu_s=stub.cpu_seconds() - s0,
                         load_before=list(load), load_after=list(os.getloadavg()))
                expected = str(before_dir / "mpcommit") if variant == "before" else str(REPO_ROOT / "mpcommit")
                if r["code_path"] != expected:
                    raise RuntimeError(f"the {variant} run imported {r['code_path']}, not {expected}")
                records.run(**r)
                out.append(r)
                log(f"task-cpu: {variant:<6} r{pair} {v:>5} values: {r['files']:>5} files, CPU {r['cpu_s']:6.2f} s "
                    f"(main thread {r['main_thread_cpu_s']:.2f}), wall {r['wall_s']:.1f} s, load {load[0]:.2f}")
        return out
    finally:
        stub.stop()
        shutil.rmtree(work, ignore_errors=True)


def summarise(runs: list[dict[str, Any]]) -> list[str]:
    import statistics

    lines = []
    by = {(r["variant"], r["pair"], r["values"]): r for r in runs}
    values = sorted({r["values"] for r in runs})
    for variant in dict.fromkeys(r["variant"] for r in runs):
        for v in values:
            cpu = [r["cpu_s"] for r in runs if r["variant"] == variant and r["values"] == v]
            lines.append(f"{variant:<6} {v:>5} values: CPU median {statistics.median(cpu):.2f} s "
                         f"(min {min(cpu):.2f}, max {max(cpu):.2f}, n={len(cpu)})")
        if len(values) >= 2:
            per = [per_file_ms(by[(variant, p, values[0])], by[(variant, p, values[-1])])
                   for p in sorted({r["pair"] for r in runs if r["variant"] == variant})
                   if (variant, p, values[0]) in by and (variant, p, values[-1]) in by]
            if per:
                lines.append(f"{variant:<6} CPU per extra file: median {statistics.median(per):.2f} ms "
                             f"(min {min(per):.2f}, max {max(per):.2f}, n={len(per)})")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_task_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--values", default=",".join(map(str, DEFAULT_VALUES)),
                   help="partition values per task, comma-separated (125: a 1,000-file job's task; 1,250: 10,000's)")
    p.add_argument("--rows", type=int, default=TASK_BYTES // ROW_BYTES, help="rows per task (default: 128 MiB)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--before", default=BEFORE, help="the commit whose product code the 'before' variant runs")
    p.add_argument("--variants", default="before,after")
    p.add_argument("--nice", type=int, default=5)
    p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.endpoint, int(a.values), a.rows)))
        return 0
    runs = run(rounds=a.rounds, values=tuple(int(v) for v in a.values.split(",")), rows=a.rows, before=a.before,
               records_dir=a.records, nice=a.nice, variants=tuple(a.variants.split(",")))
    print("\n".join(summarise(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
