"""Task side at scale (issue 12, item 3): one task writes 1,000 Hive partitions of about 1.1 MiB of Parquet each,
next to pyarrow's own ``write_dataset(max_open_files=...)`` writing the same rows to the same server through
pyarrow's S3FileSystem (the outside reference).

Both get the same input: 10,000-row batches already in partition order (what a task's sort hands on), 48,000 rows
(``int32`` partition, ``int64`` id, ``float64``, ``int64``: ~1.1 MiB of Parquet) per partition. mpcommit runs its
default path (``max_open_writers`` = 8: eight open files, the rest set aside on local disk and written sorted by
partition, one file after another -- the path issue 12 is about); pyarrow keeps at most 8 files open too.

Variants (each run in its own subprocess, rows generated before the clock starts):

* ``mpcommit``: files closed in the background (``TaskAttempt.create(background=True)``, what the Spark writer uses):
  the upload is created while the first part fills, the last part goes out while the next file starts;
* ``serial``: the same path with ``background=False``: every file creates its upload and waits for its last part
  before the next file starts (mpcommit before this change);
* ``pyarrow``: ``pyarrow.dataset.write_dataset(..., max_open_files=8)`` to ``S3FileSystem``.

Times: the task's (rows in, files written, attempt committed) against pyarrow's whole call; the job commit that
makes mpcommit's files visible is timed apart. Memory: peak RSS above the child's baseline (2 ms sampler); a
separate traced run (tracemalloc slows Python's allocations) asserts the documented bound of
:func:`task_memory_bound` on the Python heap plus the Arrow pool's high-water mark, and that the bytes held by
files closing in the background never went over ``WriterSettings.closing_bytes``.

    python -m bench.bench_task_scale --network s3 --repeats 10      # ABBA, 10 pairs, moto server
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
    abba,
    describe_ratio,
    empty_prefix,
    ensure_bucket,
    human_bytes,
    log,
    machine_description,
    make_client,
    median,
    ratio_spread,
    s3_options,
    save_json,
    start_server,
)

BUCKET = "bench-task-scale"
VARIANTS = ("mpcommit", "pyarrow")
BATCH_ROWS = 10_000
ROWS_PER_PARTITION = 48_000
MAX_OPEN = 8


def task_memory_bound(settings: Any, *, max_open_writers: int, row_group_bytes: int, spill_buffer: int) -> int:
    """The documented bound of one task's buffers (mpcommit/formats/partitioning.py): every open file's format
    buffer and part buffers, the bytes held by files closing in the background, the spill's gathering buffer."""
    parts = settings.initial_part_size * (settings.max_parts_in_flight + 1)
    return max_open_writers * (row_group_bytes + parts) + settings.closing_bytes + spill_buffer


def _batches(partitions: int, rows: int) -> list[Any]:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(7)
    x = pa.array(rng.random(rows))
    y = pa.array(rng.integers(0, 1 << 62, rows, dtype=np.int64))
    out = []
    for p in range(partitions):
        ids = pa.array(np.arange(p * rows, (p + 1) * rows, dtype=np.int64))
        part = pa.array(np.full(rows, p, dtype=np.int32))
        for start in range(0, rows, BATCH_ROWS):
            n = min(BATCH_ROWS, rows - start)
            out.append(pa.record_batch([part.slice(start, n), ids.slice(start, n), x.slice(start, n), y.slice(start, n)],
                                       names=["part", "id", "x", "y"]))
    return out


def child(variant: str, endpoint: str, prefix: str, partitions: int, rows: int, trace: bool) -> dict[str, Any]:
    import tracemalloc

    import pyarrow as pa

    from .bench_writer import _PeakSampler, _rss

    batches = _batches(partitions, rows)
    pool = pa.default_memory_pool()
    result: dict[str, Any] = {"variant": variant, "partitions": partitions, "rows": partitions * rows}
    if variant in ("mpcommit", "serial"):
        from mpcommit import Job
        from mpcommit.formats import make_format
        from mpcommit.formats.partitioning import SPILL_BUFFER_BYTES, PartitionedWriter

        job = Job.create(f"s3://{BUCKET}/{prefix}", mode="append", s3=s3_options(endpoint))
        fmt = make_format("parquet")
        task = job.spec.task(0, 0)
        task.store.head_bucket(BUCKET)  # warm the connection pool
        background = variant == "mpcommit"
        result["bound"] = task_memory_bound(job.spec.writer, max_open_writers=MAX_OPEN,
                                            row_group_bytes=fmt.row_group_bytes, spill_buffer=SPILL_BUFFER_BYTES)
        result["closing_bytes"] = job.spec.writer.closing_bytes
        arrow_before, base = pool.max_memory(), _rss()
        if trace:
            tracemalloc.start()
        with _PeakSampler() as sampler:
            t0 = time.perf_counter()
            out = PartitionedWriter(
                fmt=fmt, partition_columns=("part",), max_open_writers=MAX_OPEN,
                open_sink=lambda path, ext: task.create(path, ext, content_type=fmt.content_type, background=background))
            for b in batches:
                out.write(b)
            stats = out.close()
            attempt = task.commit()
            t1 = time.perf_counter()
        if trace:
            result["traced_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        report = job.commit([attempt])
        t2 = time.perf_counter()
        result.update(seconds=t1 - t0, commit_s=t2 - t1, files=report.files, bytes=report.bytes,
                      spilled_partitions=stats.spilled_partitions, closing_peak=task.closing_budget.peak)
    elif variant == "pyarrow":
        import pyarrow.dataset as ds
        from pyarrow import fs as pafs

        host = endpoint.split("://", 1)[1]
        s3 = pafs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1", endpoint_override=host,
                               scheme="http")
        s3.get_file_info(BUCKET)  # warm up
        arrow_before, base = pool.max_memory(), _rss()
        if trace:
            tracemalloc.start()
        with _PeakSampler() as sampler:
            t0 = time.perf_counter()
            ds.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches)),
                             f"{BUCKET}/{prefix}", format="parquet", filesystem=s3,
                             partitioning=ds.partitioning(pa.schema([("part", pa.int32())]), flavor="hive"),
                             max_open_files=MAX_OPEN, existing_data_behavior="overwrite_or_ignore",
                             basename_template="part-{i}.parquet")
            t1 = time.perf_counter()
        if trace:
            result["traced_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        infos = [i for i in s3.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True))
                 if i.type == pafs.FileType.File]
        result.update(seconds=t1 - t0, commit_s=0.0, files=len(infos), bytes=sum(i.size for i in infos))
    else:
        raise ValueError(variant)
    result["peak_rss"] = max(0, sampler.peak - base)
    result["arrow_peak"] = max(0, pool.max_memory() - arrow_before)
    return result


def measure(endpoint: str, variant: str, partitions: int, rows: int, repeat: int, *, trace: bool = False) -> dict[str, Any]:
    prefix = f"r{repeat}-{variant}-{time.time_ns()}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "bench.bench_task_scale", "--child", variant, "--endpoint", endpoint, "--prefix", prefix,
           "--partitions", str(partitions), "--rows", str(rows)] + (["--trace"] if trace else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"task-scale child {variant} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out.update(repeat=repeat, load=os.getloadavg()[0], prefix=prefix)
    return out


def run(endpoint: str, *, partitions: int = 1000, rows: int = ROWS_PER_PARTITION, repeats: int = 10,
        variants: tuple[str, ...] = VARIANTS, trace: bool = True, network: str = "raw", server_pid: int | None = None,
        net: Any = None, records: Any = None) -> dict[str, Any]:
    from .common import server_cpu_seconds

    cleaner = make_client(endpoint)
    ensure_bucket(cleaner, BUCKET)
    runs, traced = [], []
    started = time.perf_counter()
    if trace:
        for v in (v for v in variants if v != "pyarrow"):  # the bound is mpcommit's; pyarrow's RSS is reported
            t = measure(endpoint, v, partitions, rows, -1, trace=True)
            empty_prefix(cleaner, BUCKET, t["prefix"] + "/")
            traced.append(t)
            log(f"task-scale {network}: {v:<8} traced: heap {human_bytes(t['traced_peak'])} + arrow {human_bytes(t['arrow_peak'])}"
                f", RSS +{human_bytes(t['peak_rss'])}" + (f", bound {human_bytes(t['bound'])}, closing peak "
                f"{human_bytes(t['closing_peak'])}" if "bound" in t else ""))
    for repeat, variant in abba(variants, repeats):
        s0 = server_cpu_seconds(server_pid)
        p0 = net.stats()["cpu_seconds"] if net is not None else None
        if net is not None:
            net.reset()
        r = measure(endpoint, variant, partitions, rows, repeat)
        r["server_cpu_s"] = server_cpu_seconds(server_pid) - s0
        if net is not None:
            stats = net.stats()
            r["proxy_cpu_s"] = stats["cpu_seconds"] - p0
            r["throttled"] = int(stats["totals"].get("throttled", 0))
            r["requests_total"] = int(stats["totals"].get("requests", 0))
        # The task's time and the job commit that makes its files visible: pyarrow's files are visible when its
        # call returns, mpcommit's after the driver's commit (issue 25: compare the two, not the task alone).
        r["total_s"] = r["seconds"] + r["commit_s"]
        empty_prefix(cleaner, BUCKET, r["prefix"] + "/")
        runs.append(r)
        if records is not None:
            records.run(pair=repeat, **{k: v for k, v in r.items() if k not in ("repeat", "prefix")})
        save_json(f"task_scale_{network}_partial", {"variants": list(variants), "runs": runs, "traced": traced})
        log(f"task-scale {network}: {variant:<8} r{repeat}: {r['seconds']:.2f} s (+ job commit {r['commit_s']:.2f} s), "
            f"{r['files']} files, {human_bytes(r['bytes'])}, RSS +{human_bytes(r['peak_rss'])}, load {r['load']:.1f}")
    return {"scenario": "task_scale", "network": network, "partitions": partitions, "rows_per_partition": rows,
            "repeats": repeats, "variants": list(variants), "runs": runs, "traced": traced,
            "seconds": round(time.perf_counter() - started, 1)}


def check_bounds(data: dict[str, Any]) -> list[str]:
    """The documented memory bound, asserted: raises AssertionError naming the run that broke it."""
    lines = []
    for t in data["traced"] + data["runs"]:
        if "bound" not in t:
            continue
        held = t.get("traced_peak", 0) + t["arrow_peak"]
        assert t["closing_peak"] <= t["closing_bytes"], f"closing files held {t['closing_peak']} > {t['closing_bytes']}"
        assert t["peak_rss"] <= t["bound"], f"{t['variant']} r{t['repeat']}: RSS +{t['peak_rss']} above the bound {t['bound']}"
        if "traced_peak" in t:
            assert held <= t["bound"], f"{t['variant']}: heap + arrow {held} above the bound {t['bound']}"
            lines.append(f"{t['variant']} (traced): Python heap {human_bytes(t['traced_peak'])} + Arrow pool "
                         f"{human_bytes(t['arrow_peak'])} = {human_bytes(held)} <= bound {human_bytes(t['bound'])}; "
                         f"closing files held at most {human_bytes(t['closing_peak'])} of {human_bytes(t['closing_bytes'])}")
    return lines


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    by = {v: sorted((r for r in data["runs"] if r["variant"] == v), key=lambda r: r["repeat"]) for v in data["variants"]}
    out: dict[str, Any] = {"rows": {}}
    for v, rs in by.items():
        out["rows"][v] = {"n": len(rs), "seconds": median(r["seconds"] for r in rs), "lo": min(r["seconds"] for r in rs),
                          "hi": max(r["seconds"] for r in rs), "commit_s": median(r["commit_s"] for r in rs),
                          "files": median(r["files"] for r in rs), "bytes": median(r["bytes"] for r in rs),
                          "peak_rss": median(r["peak_rss"] for r in rs), "peak_rss_max": max(r["peak_rss"] for r in rs),
                          "load": median(r["load"] for r in rs)}
    if by.get("mpcommit") and by.get("pyarrow"):
        out["vs_pyarrow"] = ratio_spread([r["seconds"] for r in by["mpcommit"]], [r["seconds"] for r in by["pyarrow"]])
        # Equal footing: mpcommit's task and the job commit that makes its files visible, against pyarrow's call.
        out["vs_pyarrow_with_commit"] = ratio_spread([r["seconds"] + r["commit_s"] for r in by["mpcommit"]],
                                                     [r["seconds"] + r["commit_s"] for r in by["pyarrow"]])
    if by.get("serial") and by.get("mpcommit"):
        out["serial_vs_background"] = ratio_spread([r["seconds"] for r in by["serial"]], [r["seconds"] for r in by["mpcommit"]])
    return out


def markdown(data: dict[str, Any]) -> str:
    s = summarise(data)
    lines = ["| variant | runs | task time, median (range) | job commit | files | bytes | peak RSS above baseline, median (worst) | load (1-min, median) |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for v, r in s["rows"].items():
        lines.append(f"| {v} | {r['n']} | {r['seconds']:.2f} s ({r['lo']:.2f}-{r['hi']:.2f}) | {r['commit_s']:.2f} s | "
                     f"{r['files']:,.0f} | {human_bytes(r['bytes'])} | {human_bytes(r['peak_rss'])} ({human_bytes(r['peak_rss_max'])}) | {r['load']:.1f} |")
    text = "\n".join(lines)
    if "vs_pyarrow" in s:
        text += (f"\n\nTask and job commit (files visible), mpcommit ÷ pyarrow: **{describe_ratio(s['vs_pyarrow_with_commit'])}**; "
                 f"the task alone: {describe_ratio(s['vs_pyarrow'])}.")
    if "serial_vs_background" in s:
        text += f" Serial (before) ÷ background (after): **{describe_ratio(s['serial_vs_background'])}**."
    return text


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", choices=("mpcommit", "serial", "pyarrow"))
    p.add_argument("--endpoint")
    p.add_argument("--prefix")
    p.add_argument("--partitions", type=int, default=1000)
    p.add_argument("--rows", type=int, default=ROWS_PER_PARTITION)
    p.add_argument("--trace", action="store_true")
    p.add_argument("--network", choices=("raw", "s3"), default="s3")
    p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--no-trace", action="store_true")
    p.add_argument("--backend", default="moto")
    p.add_argument("--name", default=None, help="results file name (bench/results/NAME.json)")
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.endpoint, a.prefix, a.partitions, a.rows, a.trace)))
        return
    variants = tuple(a.variants.split(","))
    from .records import RecordLog

    with start_server(a.backend) as server:
        meta = {"machine": machine_description(server), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "command": " ".join(sys.argv)}
        if a.network == "s3":
            from tests.support.s3_network import S3_LIKE, S3Network

            records = RecordLog("task_scale", directory=a.records, network="s3", profile=S3_LIKE.to_json(),
                                server=server.version, partitions=a.partitions, rows_per_partition=a.rows,
                                max_open_files=MAX_OPEN)
            with S3Network(server.endpoint_url, S3_LIKE) as net:
                data = run(net.endpoint_url, partitions=a.partitions, rows=a.rows, repeats=a.repeats, variants=variants,
                           trace=not a.no_trace, network="s3", server_pid=server.pid, net=net, records=records)
        else:
            records = RecordLog("task_scale", directory=a.records, network="raw", server=server.version,
                                partitions=a.partitions, rows_per_partition=a.rows, max_open_files=MAX_OPEN)
            data = run(server.endpoint_url, partitions=a.partitions, rows=a.rows, repeats=a.repeats, variants=variants,
                       trace=not a.no_trace, network="raw", server_pid=server.pid, records=records)
    data["meta"] = meta
    path = save_json(a.name or f"task_scale_{a.network}", data)
    print(markdown(data))
    for line in check_bounds(data):
        print(line)
    log(f"saved {path}")


if __name__ == "__main__":
    main()
