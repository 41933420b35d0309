"""Issue 25's full set of benchmark runs, one after another, then BENCHMARKS.md's tables regenerated.

    python -m bench.full_run --list                 # the steps, their commands and expected durations
    python -m bench.full_run                        # everything (about 8 h on the 2-core machine; see below)
    python -m bench.full_run --only peers-s3,commit-s3-100k
    python -m bench.full_run --records /tmp/rec     # records elsewhere (default bench/results, kept in git)

Meant for a quiet machine: every step appends its raw records (one JSON line per run) to
``bench/results/<scenario>.jsonl``; a step that fails is reported and the others still run. The durations are
estimates from the 2026-11-24 runs' per-run times and the 2026-11-26 smoke runs (BENCHMARKS.md, "Method"), not
measurements of these exact plans.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRATCH = REPO_ROOT / "bench" / "results" / "scratch"


@dataclass(frozen=True)
class Step:
    name: str
    args: tuple[str, ...]
    estimate: str  # what a full run of this step takes, as estimated
    tables: str  # the BENCHMARKS.md tables it feeds


def steps() -> tuple[Step, ...]:
    return (
        Step("peers-raw", ("bench.bench_spark_peers", "--network", "raw", "--check-rows"),
             "80 min", "peers, peer-settings"),
        Step("peers-s3", ("bench.bench_spark_peers", "--network", "s3", "--tasks", "8", "--slots", "8"),
             "1.8 h", "peers, peer-settings"),
        Step("commit-raw-10k", ("bench.bench_commit_scale", "cpu", "--files", "10000", "--repeats", "10",
                                "--variants", "commit", "bare-crt", "bare", "--out", "scratch/commit_raw_10k"),
             "5 min", "commit-scale"),
        Step("commit-raw-100k", ("bench.bench_commit_scale", "cpu", "--files", "100000", "--repeats", "5",
                                 "--variants", "commit", "bare-crt", "--out", "scratch/commit_raw_100k"),
             "10 min", "commit-scale"),
        Step("commit-s3-10k", ("bench.bench_commit_scale", "cpu", "--network", "s3", "--files", "10000", "--repeats", "10",
                               "--variants", "commit", "bare-crt", "--out", "scratch/commit_s3_10k"),
             "10 min", "commit-scale, commit-rate"),
        Step("commit-s3-100k", ("bench.bench_commit_scale", "cpu", "--network", "s3", "--files", "100000", "--repeats", "5",
                                "--variants", "commit", "bare-crt", "--out", "scratch/commit_s3_100k"),
             "50 min", "commit-scale, commit-rate"),
        Step("commit-s3-cold-100k", ("bench.bench_commit_scale", "cpu", "--network", "s3-cold", "--files", "100000",
                                     "--repeats", "3", "--variants", "commit", "bare-crt", "--out", "scratch/commit_cold_100k"),
             "30 min", "commit-scale, commit-rate"),
        Step("driver-spark", ("bench.bench_driver_memory", "spark", "--files", "10000", "100000", "--repeats", "3"),
             "30 min", "driver-memory"),
        Step("driver-replay", ("bench.bench_driver_memory", "replay", "--files", "10000", "100000", "1000000"),
             "25 min", "driver-memory"),
        Step("driver-replay-referenced", ("bench.bench_driver_memory", "replay", "--referenced",
                                          "--files", "10000", "100000", "1000000"),
             "25 min", "driver-memory"),
        # json-mixed-3gib (2.69 GiB): the target is at >= 2 GiB, which json-mixed-2gib (1.76 GiB) is not.
        Step("compaction-s3-3gib", ("bench.bench_compaction", "--server", "localstack", "--network", "s3",
                                    "--datasets", "json-mixed-3gib", "--repeats", "5",
                                    "--variants", "multipart,rewrite-equal,rewrite", "--out", "bench/results/scratch/compaction_3gib.md"),
             "20 min", "compaction"),
        Step("compaction-s3-small", ("bench.bench_compaction", "--server", "localstack", "--network", "s3",
                                     "--datasets", "json-mixed,json-large,parquet-mixed", "--repeats", "10",
                                     "--variants", "multipart,rewrite-equal", "--out", "bench/results/scratch/compaction_s3.md"),
             "8 min", "compaction"),
        Step("compaction-raw-small", ("bench.bench_compaction", "--server", "localstack",
                                      "--datasets", "json-mixed,json-large,parquet-mixed", "--repeats", "10",
                                      "--variants", "multipart,rewrite-equal", "--out", "bench/results/scratch/compaction_raw.md"),
             "5 min", "compaction"),
        Step("task-s3", ("bench.bench_task_scale", "--network", "s3", "--repeats", "10", "--no-trace",
                         "--variants", "mpcommit,pyarrow", "--name", "scratch/task_scale_s3"),
             "35 min", "task-scale"),
        Step("task-raw", ("bench.bench_task_scale", "--network", "raw", "--repeats", "10", "--no-trace",
                          "--variants", "mpcommit,pyarrow", "--name", "scratch/task_scale_raw"),
             "10 min", "task-scale"),
        Step("writer-s3", ("bench.bench_writer", "--network", "s3", "--repeats", "10", "--size", "268435456",
                           "--name", "scratch/writer_depth"),
             "5 min", "writer"),
        Step("datasource-door", ("bench.bench_datasource", "door", "--repeats", "20", "--rows", "6000000"),
             "15 min", "datasource-door"),
        Step("stream-commit", ("bench.bench_datasource", "stream", "--batches", "20", "--files", "10", "100",
                               "--networks", "s3"),
             "10 min", "stream-commit"),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.full_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the steps and exit")
    ap.add_argument("--only", default="", help="comma-separated step names")
    ap.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md's tables at the end")
    a = ap.parse_args(argv)
    chosen = [s for s in steps() if not a.only or s.name in a.only.split(",")]
    if a.list:
        for s in chosen:
            print(f"{s.name:<26} {s.estimate:>7}  python -m {' '.join(s.args)}   -> {s.tables}")
        return 0
    SCRATCH.mkdir(parents=True, exist_ok=True)
    failed = []
    for s in chosen:
        cmd = [sys.executable, "-m", *s.args] + (["--records", a.records] if a.records else [])
        print(f"[full_run {time.strftime('%H:%M:%S')}] {s.name} (about {s.estimate}): {' '.join(cmd[2:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=REPO_ROOT)
        print(f"[full_run {time.strftime('%H:%M:%S')}] {s.name}: exit {rc} after {(time.perf_counter() - t0) / 60:.1f} min",
              flush=True)
        if rc:
            failed.append(s.name)
    if not a.no_report:
        subprocess.call([sys.executable, "-m", "bench.report_tables"] + (["--records", a.records] if a.records else []),
                        cwd=REPO_ROOT)
    if failed:
        print(f"[full_run] failed steps: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
