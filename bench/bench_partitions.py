"""Scenario 3: dynamic partitions in one task -- 10, 100 and 1,000 partitions written by one task through
mpcommit's :class:`~mpcommit.formats.partitioning.PartitionedWriter` (Parquet), on its three paths:

* ``open``: every partition gets its own open file at once (``max_open_writers`` = the number of partitions);
* ``sorted``: one open file; every other partition's rows are set aside on local disk and written afterwards
  sorted by partition, one file at a time (``max_open_writers=1``);
* ``auto``: the default (``max_open_writers`` = ``DEFAULT_MAX_OPEN_WRITERS``): open files up to that many
  partitions, the sorted write for the rest.

Every row batch (10,000 rows, Spark's default Arrow batch) spreads over all partitions, the hard case for
open files. Each measurement runs in its own subprocess: the rows are generated before the clock starts, then
the task writes, closes and commits its attempt (timed, with peak RSS above the baseline and the Arrow memory
pool's high-water mark), and the driver commits the job (timed separately).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import (
    MiB,
    empty_prefix,
    ensure_bucket,
    human_bytes,
    human_seconds,
    interleaved,
    log,
    make_client,
    md_table,
    median,
    paired_ratio,
    s3_options,
)

BUCKET = "bench-partitions"
MODES = ("open", "sorted", "auto")
LABELS = {"open": "open writers (one per partition)", "sorted": "sorted (spill, one file at a time)",
          "auto": "automatic (default max_open_writers)"}
DEFAULT_PARTITIONS = (10, 100, 1_000)
DEFAULT_DATA_SIZE = 64 * MiB
BATCH_ROWS = 10_000
ROW_BYTES = 24  # three 8-byte columns besides the partition column


def child(endpoint: str, partitions: int, mode: str, data_size: int, prefix: str) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    from mpcommit import Job
    from mpcommit.formats import make_format
    from mpcommit.formats.partitioning import DEFAULT_MAX_OPEN_WRITERS, PartitionedWriter

    from .bench_writer import _PeakSampler, _rss

    rng = np.random.default_rng(42)
    rows = max(BATCH_ROWS, data_size // ROW_BYTES)
    batches = []
    for start in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - start)
        batches.append(pa.record_batch({
            "part": pa.array(rng.integers(0, partitions, n, dtype=np.int32)),
            "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "x": pa.array(rng.random(n)),
            "y": pa.array(rng.integers(0, 1 << 62, n, dtype=np.int64)),
        }))
    max_open = {"open": partitions, "sorted": 1, "auto": DEFAULT_MAX_OPEN_WRITERS}[mode]
    job = Job.create(f"s3://{BUCKET}/{prefix}", mode="append", s3=s3_options(endpoint))
    fmt = make_format("parquet")
    task = job.spec.task(0, 0)
    pool = pa.default_memory_pool()
    arrow_before = pool.max_memory()
    base = _rss()
    with _PeakSampler() as sampler:
        t0 = time.perf_counter()
        out = PartitionedWriter(fmt=fmt, open_sink=lambda path, ext: task.create(path, ext, content_type=fmt.content_type),
                                partition_columns=("part",), max_open_writers=max_open)
        for b in batches:
            out.write(b)
        stats = out.close()
        result = task.commit()
        t1 = time.perf_counter()
    report = job.commit([result])
    t2 = time.perf_counter()
    return {
        "partitions": partitions, "mode": mode, "max_open_writers": max_open, "rows": rows, "data_bytes": rows * ROW_BYTES,
        "task_s": t1 - t0, "commit_s": t2 - t1, "files": report.files, "bytes": report.bytes,
        "peak_rss": max(0, sampler.peak - base), "arrow_peak": max(0, pool.max_memory() - arrow_before),
        "spilled_rows": stats.spilled_rows, "max_open": stats.max_open,
    }


def measure(endpoint: str, partitions: int, mode: str, data_size: int, repeat: int) -> dict[str, Any]:
    prefix = f"p{partitions}/{mode}-r{repeat}-{time.time_ns()}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-m", "bench.bench_partitions", "--child", "--endpoint", endpoint,
                        "--partitions", str(partitions), "--mode", mode, "--data-size", str(data_size), "--prefix", prefix],
                       capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"partitions child {partitions}/{mode} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out.update(repeat=repeat, load=os.getloadavg()[0])
    return out


def run(endpoint: str, *, partitions: tuple[int, ...] = DEFAULT_PARTITIONS, repeats: int = 5,
        modes: tuple[str, ...] = MODES, data_size: int = DEFAULT_DATA_SIZE, big: int = 1_000,
        big_repeats: int = 1) -> dict[str, Any]:
    """``big``: from this many partitions on, only ``big_repeats`` repeats (every file of the sorted path costs
    serial round trips, so 1,000 partitions take minutes per run on a loaded machine)."""
    cleaner = make_client(endpoint)
    ensure_bucket(cleaner, BUCKET)
    runs = []
    started = time.perf_counter()
    for p in partitions:
        n = big_repeats if big and p >= big and big_repeats < repeats else repeats
        for repeat, mode in interleaved(modes, n):
            r = measure(endpoint, p, mode, data_size, repeat)
            empty_prefix(cleaner, BUCKET, f"p{p}/")
            runs.append(r)
            log(f"partitions: {p:>5} {mode:<6} r{repeat}: task {r['task_s']:.2f} s, commit {r['commit_s']:.2f} s, "
                f"{r['files']} files, peak RSS +{human_bytes(r['peak_rss'])}, arrow +{human_bytes(r['arrow_peak'])}, "
                f"load {r['load']:.1f}")
    return {"scenario": "partitions", "partitions": list(partitions), "modes": list(modes), "repeats": repeats,
            "data_size": data_size, "batch_rows": BATCH_ROWS, "runs": runs, "big": big, "big_repeats": big_repeats,
            "seconds": round(time.perf_counter() - started, 1)}


def summarise(data: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for p in data["partitions"]:
        base = sorted((r for r in data["runs"] if r["partitions"] == p and r["mode"] == "open"), key=lambda r: r["repeat"])
        for mode in data["modes"]:
            rs = sorted((r for r in data["runs"] if r["partitions"] == p and r["mode"] == mode), key=lambda r: r["repeat"])
            if not rs:
                continue
            rows.append({
                "partitions": p, "mode": mode, "n": len(rs), "max_open_writers": rs[0]["max_open_writers"],
                "task_s": median(r["task_s"] for r in rs), "commit_s": median(r["commit_s"] for r in rs),
                "files": median(r["files"] for r in rs), "peak_rss": median(r["peak_rss"] for r in rs),
                "arrow_peak": median(r["arrow_peak"] for r in rs),
                "vs_open": paired_ratio([r["task_s"] for r in rs], [b["task_s"] for b in base]) if base else None,
                "mem_vs_open": paired_ratio([r["peak_rss"] for r in rs], [b["peak_rss"] for b in base]) if base else None,
            })
    return rows


def markdown(data: dict[str, Any]) -> str:
    rows = []
    for r in summarise(data):
        rows.append([f"{r['partitions']:,}", LABELS.get(r["mode"], r["mode"]), r["max_open_writers"], r["n"],
                     human_seconds(r["task_s"]), _x(r["vs_open"]), human_seconds(r["commit_s"]), f"{r['files']:,.0f}",
                     human_bytes(r["peak_rss"]), _x(r["mem_vs_open"]), human_bytes(r["arrow_peak"])])
    head = (f"One task writes {human_bytes(data['data_size'])} of rows ({data['batch_rows']:,}-row batches, each spread "
            f"over every partition) as Parquet; {data['repeats']} repeats per path, interleaved"
            + (f" ({data['big_repeats']} from {data['big']:,} partitions on)" if data.get("big") and data.get("big_repeats", 0) < data["repeats"] else "")
            + ".\n\n")
    return head + md_table(["partitions", "path", "max_open_writers", "runs", "task time", "÷ open", "job commit",
                            "files", "peak RSS above baseline", "÷ open", "Arrow pool peak"], rows, align="rlrrrrrrrrr")


def _x(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f}x"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true", required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--data-size", type=int, required=True)
    p.add_argument("--prefix", required=True)
    a = p.parse_args()
    print(json.dumps(child(a.endpoint, a.partitions, a.mode, a.data_size, a.prefix)))


if __name__ == "__main__":
    main()
