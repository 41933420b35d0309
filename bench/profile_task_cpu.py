"""Where one task's CPU goes (issue 39, item 3): :mod:`bench.bench_task_cpu`'s task, run once in this process
under cProfile (timed by each thread's own CPU clock, so that waits and other threads' turns on the GIL do not count) -- the main thread and every Python thread the task starts (the upload pool's) -- with each
thread's own CPU read from ``/proc/self/task`` at the end (the CRT's native event-loop threads included, which no
Python profiler sees).

    python -m bench.profile_task_cpu --values 1250 [--top 40] [--out /tmp/task.pstats]

Profiling slows Python code more than native code: read the profile for where time goes, the benchmark for how
much. ``--no-profile`` gives the per-thread CPU alone (no profiler's overhead).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def thread_cpu() -> dict[int, tuple[str, float]]:
    """native thread id -> (its name, CPU seconds so far), for every thread of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
        fields = rest.split()
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / tick)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_task_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--values", type=int, default=1250)
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--sort", default="tottime")
    p.add_argument("--out", default=None, help="write the merged pstats here")
    p.add_argument("--no-profile", action="store_true")
    a = p.parse_args(argv)

    from unittest import mock

    from bench import bench_task_cpu as b
    from bench.bench_commit_scale import Stub
    from bench.common import ensure_bucket, make_client
    from mpcommit import Job, S3Options
    from mpcommit.formats import make_format
    from mpcommit.spark import tasks
    from mpcommit.spark.plan import TaskPlan

    stub = Stub()
    try:
        ensure_bucket(make_client(stub.endpoint), b.BUCKET)
        rows = a.rows or b.TASK_BYTES // b.ROW_BYTES
        data = b.batches(a.values, rows)
        options = S3Options(endpoint_url=stub.endpoint, region="us-east-1", access_key_id="test",
                            secret_access_key="test")
        job = Job.create(f"s3://{b.BUCKET}/prof-{time.time_ns()}", mode="append", s3=options)
        plan = TaskPlan(spec=job.spec, fmt=make_format("parquet"), partition_columns=("p",), max_open_writers=8,
                        max_records_per_file=0)
        with mock.patch.object(tasks, "task_numbers", lambda: (b.JOB_TASKS, 0)):
            tasks.run_task(plan, b.batches(4, 20_000))  # warm-up, as the benchmark's

        profiles: list[cProfile.Profile] = []
        names: dict[int, str] = {}

        def start_profile(*_: Any) -> None:
            # Called on a new Python thread's first event: from here on that thread has a profiler of its own.
            names[threading.get_native_id()] = threading.current_thread().name
            prof = cProfile.Profile(time.thread_time)
            profiles.append(prof)
            prof.enable()

        ended: dict[str, float] = {}
        run = threading.Thread.run

        def measured_run(self: threading.Thread) -> None:
            # The upload pool's threads end with the task (its pool shuts down): their CPU is read as they end.
            start = time.thread_time()
            try:
                run(self)
            finally:
                group = self.name.rsplit("_", 1)[0]
                ended[group] = ended.get(group, 0.0) + time.thread_time() - start

        threading.Thread.run = measured_run  # type: ignore[method-assign]
        before = thread_cpu()
        t0, u0 = time.perf_counter(), time.process_time()
        main_prof = cProfile.Profile(time.thread_time)
        if not a.no_profile:
            threading.setprofile(start_profile)
            main_prof.enable()
        with mock.patch.object(tasks, "task_numbers", lambda: (0, 0)):
            result = tasks.run_task(plan, data)
        if not a.no_profile:
            main_prof.disable()
            threading.setprofile(None)  # type: ignore[arg-type]
        wall, cpu = time.perf_counter() - t0, time.process_time() - u0
        after = thread_cpu()
        threading.Thread.run = run  # type: ignore[method-assign]
        names[threading.get_native_id()] = "main"
        for t in threading.enumerate():
            if t.native_id is not None:
                names.setdefault(t.native_id, t.name)

        print(f"{a.values} values: {result.files} files, {result.bytes / 2**20:.1f} MiB, process CPU {cpu:.2f} s, "
              f"wall {wall:.2f} s")
        groups: dict[str, float] = {}
        for tid, (comm, seconds) in after.items():
            spent = seconds - before.get(tid, (comm, 0.0))[1]
            name = names.get(tid, comm)
            group = name.rsplit("_", 1)[0] if name.startswith("mpcommit") else name
            groups[group] = groups.get(group, 0.0) + spent
        for group, seconds in ended.items():
            groups[f"{group} (ended)"] = seconds
        print("CPU by thread (group: seconds):")
        for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
            if seconds > 0:
                print(f"  {group:<40} {seconds:7.2f}")
        if a.no_profile:
            return 0
        stats = pstats.Stats(main_prof)
        for prof in profiles:
            prof.create_stats() if prof is not None else None
            stats.add(prof)
        if a.out:
            stats.dump_stats(a.out)
        text = io.StringIO()
        pstats.Stats(main_prof, stream=text).sort_stats(a.sort).print_stats(a.top)
        print("---- main thread ----")
        print(text.getvalue())
        text = io.StringIO()
        threads = pstats.Stats(profiles[0], stream=text) if profiles else None
        if threads is not None:
            for prof in profiles[1:]:
                threads.add(prof)
            threads.sort_stats(a.sort).print_stats(a.top)
            print("---- other Python threads ----")
            print(text.getvalue())
        return 0
    finally:
        stub.stop()


if __name__ == "__main__":
    raise SystemExit(main())
