"""Commit at scale (issue 12, items 1-2): the driver's job commit against a bare boto3 CompleteMultipartUpload
loop at the same concurrency, on a STUB server (:mod:`bench.stub_s3`, another process) that costs next to
nothing per request, so that the client's own CPU is what is measured.

The tasks' side is not run: each repeat makes a fresh job and writes its task manifests (synthetic uploads:
key, upload id, parts) to the stub, untimed; the timed part is ``Job.commit`` (journal, completes, abort of
leftovers, ``_SUCCESS``, cleanup) or the bare loop over the same uploads. Client CPU is this process's CPU
(user + system, plus that of child processes in the multi-process variants) during the timed part.

    python -m bench.bench_commit_scale cpu --files 10000 --repeats 10 --variants commit bare-crt
    python -m bench.bench_commit_scale cpu --network s3 --files 100000 --repeats 5 --variants commit bare-crt
    python -m bench.bench_commit_scale memory --files 1000 10000 100000

Variants of ``cpu``: ``commit`` (``Job.commit``, completes through the AWS CRT, the default), ``bare-crt`` (**the
floor**: a bare loop of CompleteMultipartUpload on the same CRT client, :class:`mpcommit.store.crt_complete.
CrtCompleter`, on as many threads, nothing else -- retrying only a 503 SlowDown, which a run through the rate
limit needs to finish), ``bare`` (a bare boto3 loop: botocore's signer and urllib3, kept to show what the CRT
path saves, not a floor), ``commit-botocore`` / ``commit-boto3`` (the commit on the older request paths),
``commit-pN`` (N worker processes).

Per run, besides wall time and client CPU: the rate of completes through the one driver (files / the complete
phase), and through the S3-like network the 503 SlowDown answers the rate limit gave, the requests beyond one
complete per file (retries) and the proxy's and the stub's CPU. One JSON line per run goes to
``bench/results/commit_scale.jsonl`` (``--records DIR`` elsewhere).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .common import (
    RESULTS_DIR,
    abba,
    describe_ratio,
    log,
    machine_description,
    make_client,
    median,
    ratio_spread,
    s3_options,
)

BUCKET = "bench-scale"
THREADS = 32
FILES_PER_TASK = 100
MiB = 1024 * 1024


# ---------------------------------------------------------------- the stub server
class Stub:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.stub_s3", "--port", "0"], stdout=subprocess.PIPE,
                                     text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"stub server did not start: {line!r}")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"

    def cpu_seconds(self) -> float:
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def cpu_now() -> float:
    """CPU seconds of this process and of its waited-for children (the process pool's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# ---------------------------------------------------------------- the synthetic job
@dataclass
class Prepared:
    job: Any
    results: list[Any]
    uploads: list[tuple[str, str, str, str, int]]  # key, upload id, etag, crc, parts (for the bare loop)


def prepare(endpoint: str, files: int, *, parts: int = 1, processes: int = 1, keep_uploads: bool = True,
            prefix: str | None = None, referenced: bool = False, setup_endpoint: str | None = None,
            progress: Any = None) -> Prepared:
    """A fresh job whose tasks left ``files`` uploads of ``parts`` parts each, manifests written to the stub.
    ``referenced``: every task result names its manifest instead of carrying it (as large ones do), so that
    the commit reads them all from the store. ``setup_endpoint``: where the untimed set-up writes the
    manifests (the stub itself, when the job's ``endpoint`` is the S3-like network in front of it)."""
    from mpcommit import Job
    from mpcommit.protocol.layout import data_file_name
    from mpcommit.protocol.records.manifest import INLINE_MAX_PARTS, Part, PendingUpload, TaskManifest, TaskResult
    from mpcommit.store.s3 import S3Store

    store = S3Store(s3_options(endpoint))
    setup = S3Store(s3_options(setup_endpoint)) if setup_endpoint else store
    uri = f"s3://{BUCKET}/{prefix or 't-' + uuid.uuid4().hex[:8]}"
    job = Job.create(uri, mode="append", s3=store.options, store=store, commit_threads=THREADS, progress=progress,
                     **({"commit_processes": processes} if processes > 1 else {}))
    dest = job.destination
    results, bare = [], []
    n_tasks = max(1, files // FILES_PER_TASK)
    crc = "AAAAAA=="
    part_size = 5 * MiB
    for t in range(n_tasks):
        per_task = FILES_PER_TASK if files >= FILES_PER_TASK else files
        uploads = []
        for i in range(per_task):
            key = dest.root + f"dt={i % 10}/" + data_file_name(task_id=t, job_id=job.job_id, file_number=i, ext="bin")
            uid = f"u{t}x{i}x{uuid.uuid4().hex}"
            etag = '"%032x"' % (t * 1000 + i)
            ps = tuple(Part(n, etag, part_size, crc) for n in range(1, parts + 1))
            uploads.append(PendingUpload(key, uid, ps, part_size * parts, rows=100, partition=f"dt={i % 10}"))
            if keep_uploads:
                bare.append((key, uid, etag, crc, parts))
        nonce = uuid.uuid4().hex[:8]
        manifest = TaskManifest(job_id=job.job_id, bucket=dest.bucket, prefix=dest.prefix, task_id=t, attempt=0,
                                nonce=nonce, created_ms=int(time.time() * 1000), uploads=tuple(uploads))
        key = job.paths.task_manifest(t, 0, nonce)
        setup.put_object(dest.bucket, key, manifest.to_bytes())
        inline = manifest.part_count <= INLINE_MAX_PARTS and not referenced
        results.append(TaskResult(job_id=job.job_id, task_id=t, attempt=0, manifest_key=key,
                                  manifest=manifest if inline else None, files=len(uploads), bytes=manifest.bytes,
                                  rows=100 * len(uploads), partitions=tuple(sorted({u.partition for u in uploads}))))
    return Prepared(job, results, bare)


def bare_crt_loop(client: Any, credentials: Any, uploads: list[tuple[str, str, str, str, int]]) -> dict[str, int]:
    """The floor: CompleteMultipartUpload on the commit's own CRT client (signer and connections) over a thread
    pool of the commit's size, nothing else but a retry of 503 SlowDown (exponential backoff with full jitter,
    as AWS advises), without which a run through the rate limit could not finish. Returns the retries."""
    import random
    import threading

    from botocore.exceptions import ClientError

    from mpcommit.options import S3Options
    from mpcommit.store.crt_complete import CrtCompleter
    from mpcommit.store.s3 import CompletedPart

    opts = S3Options()
    completer = CrtCompleter(client, credentials, max_connections=opts.max_pool_connections,
                             connect_timeout=opts.connect_timeout, read_timeout=opts.read_timeout)
    retries = {"slowdown": 0}
    lock = threading.Lock()

    def complete(u: tuple[str, str, str, str, int]) -> None:
        key, uid, etag, crc, parts = u
        listed = [CompletedPart(n, etag, crc) for n in range(1, parts + 1)]
        for attempt in range(20):
            try:
                completer.complete(BUCKET, key, uid, listed)
                return
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "SlowDown" or attempt == 19:
                    raise
                with lock:
                    retries["slowdown"] += 1
                time.sleep(random.uniform(0, min(2.0, 0.05 * 2 ** attempt)))

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            for _ in pool.map(complete, uploads):
                pass
    finally:
        completer.close()
    return retries


def bare_loop(client: Any, uploads: list[tuple[str, str, str, str, int]]) -> None:
    """A bare boto3 loop: boto3's complete_multipart_upload over a thread pool of the same size, nothing else.
    Not the floor any more (botocore's signer and urllib3 cost several times the CRT's CPU): kept to show that."""

    def complete(u: tuple[str, str, str, str, int]) -> None:
        key, uid, etag, crc, parts = u
        client.complete_multipart_upload(
            Bucket=BUCKET, Key=key, UploadId=uid,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag, "ChecksumCRC32": crc} for n in range(1, parts + 1)]},
        )

    with ThreadPoolExecutor(THREADS) as pool:
        for _ in pool.map(complete, uploads):
            pass


# ---------------------------------------------------------------- CPU per file
def run_cpu(args: argparse.Namespace) -> dict[str, Any]:
    from .records import RecordLog

    stub = Stub()
    net = None
    try:
        make_client(stub.endpoint).create_bucket(Bucket=BUCKET)
        endpoint = stub.endpoint
        if args.network != "raw":
            # The commit and the bare loops all through the S3-like network (BENCHMARKS.md, "The network model":
            # latency per operation and the rate limit); the untimed set-up straight to the stub.
            from tests.support.s3_network import PROFILES, S3Network

            profile = PROFILES[args.network]
            if args.write_rate and profile.throttle is not None:
                # A stress case, not S3's documented rate: a prefix colder than the model's 3,500 writes/s.
                profile = dataclasses.replace(profile, name=f"{profile.name} (writes {args.write_rate:g}/s)",
                                              throttle=dataclasses.replace(profile.throttle, write_rate=args.write_rate))
            net = S3Network(stub.endpoint, profile).start()
            endpoint = net.endpoint_url
        client = make_client(endpoint)
        credentials = client._request_signer._credentials  # the floor signs with the client's own credentials
        variants = args.variants
        out: dict[str, Any] = {"machine": machine_description(), "stub": "bench.stub_s3 (asyncio, canned XML)",
                               "network": args.network,
                               "network_profile": net.profile.describe() if net is not None else "none (loopback)",
                               "threads": THREADS, "sizes": {}, "command": " ".join(sys.argv)}
        records = RecordLog("commit_scale", directory=args.records, network=args.network,
                            profile=net.profile.to_json() if net is not None else None, threads=THREADS,
                            server="bench.stub_s3 (another process)", files_per_task=FILES_PER_TASK)
        for files in args.files:
            runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
            schedule = abba(variants, args.repeats)
            log(f"{files:,} files: {len(schedule)} runs ({', '.join(variants)}), ABBA")
            for repeat, variant in schedule:
                processes = int(variant.split("-p")[1]) if "-p" in variant else 1
                # "commit-boto3": the commit with every request through boto3 (the lean complete path off);
                # "commit-botocore": completes signed by botocore and sent on urllib3 (mpcommit.store.lean);
                # "commit": the default, through the AWS CRT (mpcommit.store.crt_complete).
                lean = {"commit-boto3": "0", "commit-botocore": "botocore"}.get(variant.split("-p")[0], "1")
                os.environ["MPCOMMIT_LEAN_COMPLETE"] = lean
                prep = prepare(endpoint, files, processes=processes, keep_uploads=variant.startswith("bare"),
                               setup_endpoint=stub.endpoint)
                gc.collect()
                load = os.getloadavg()[0]
                if net is not None:
                    net.reset()
                    p0 = net.stats()["cpu_seconds"]
                timings: dict[str, float] = {}
                retried: dict[str, int] = {}
                outcome = "ok"
                s0, c0, w0 = stub.cpu_seconds(), cpu_now(), time.perf_counter()
                try:
                    if variant == "bare":
                        bare_loop(client, prep.uploads)
                    elif variant == "bare-crt":
                        retried = bare_crt_loop(client, credentials, prep.uploads)
                    else:
                        report = prep.job.commit(prep.results)
                        assert report.files == files, (report.files, files)
                        timings = dict(report.timings)
                except Exception as exc:  # noqa: BLE001 - a commit that fails under the rate limit is a result
                    outcome = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
                    log(f"  #{repeat} {variant}: {outcome}")
                w1, c1, s1 = time.perf_counter(), cpu_now(), stub.cpu_seconds()
                complete_s = timings.get("complete", w1 - w0)
                run = {"outcome": outcome, "wall_s": w1 - w0, "cpu_s": c1 - c0, "stub_cpu_s": s1 - s0, "load": load,
                       "cpu_ms_per_file": (c1 - c0) / files * 1000, "files_per_s": files / (w1 - w0),
                       "completes_per_s": files / complete_s if complete_s else None}
                if net is not None:
                    stats = net.stats()
                    run["network"] = stats.get("totals", {})
                    run["proxy_cpu_s"] = stats["cpu_seconds"] - p0
                    cmu = stats["ops"].get("CompleteMultipartUpload", {})
                    run["completes_sent"] = int(cmu.get("requests", 0))
                    run["slowdowns"] = int(stats["totals"].get("throttled", 0))
                    run["complete_slowdowns"] = int(cmu.get("throttled", 0))
                    run["retries"] = max(0, run["completes_sent"] - files)  # completes beyond one per file
                    run["max_in_flight"] = stats.get("max_in_flight")
                    run["requests"] = {op: int(v["requests"]) for op, v in stats["ops"].items()}
                runs[variant].append(run)
                records.run(variant=variant, files=files, pair=repeat, timings=timings, retried=retried,
                            **{k: v for k, v in run.items() if k != "network"}, proxy_totals=run.get("network"))
                log(f"  #{repeat} {variant:10s} wall {run['wall_s']:.2f}s cpu {run['cpu_ms_per_file']:.3f} ms/file "
                    f"({run['files_per_s']:,.0f} files/s, completes {run['completes_per_s'] or 0:,.0f}/s; "
                    f"stub {run['stub_cpu_s']:.1f}s; load {load:.2f}"
                    + (f"; 503s {run['slowdowns']}, retries {run['retries']}, proxy {run['proxy_cpu_s']:.1f}s"
                       if net is not None else "") + ")")
                del prep
            size: dict[str, Any] = {"runs": runs, "medians": {}, "ratios": {}}
            for v in variants:
                size["medians"][v] = {k: median(r[k] for r in runs[v]) for k in ("cpu_ms_per_file", "wall_s", "files_per_s", "load")}
            for floor in ("bare-crt", "bare"):
                if floor not in variants:
                    continue
                for v in variants:
                    if v.startswith("bare"):
                        continue
                    for measure in ("cpu_s", "wall_s"):
                        r = ratio_spread([x[measure] for x in runs[v]], [x[measure] for x in runs[floor]])
                        size["ratios"][f"{v}/{floor} {measure}"] = r
                        log(f"  {v}/{floor} {measure}: {describe_ratio(r)}")
            if "commit-botocore" in variants:  # the CRT path against the botocore lean path it replaces
                for v in variants:
                    if v.startswith("commit") and v != "commit-botocore":
                        r = ratio_spread([x["cpu_s"] for x in runs[v]], [x["cpu_s"] for x in runs["commit-botocore"]])
                        size["ratios"][f"{v}/commit-botocore cpu_s"] = r
                        log(f"  {v}/commit-botocore cpu_s: {describe_ratio(r)}")
            out["sizes"][str(files)] = size
        return out
    finally:
        if net is not None:
            net.stop()
        stub.stop()


# ---------------------------------------------------------------- memory
def run_memory_one(files: int, parts: int, processes: int, trace: bool = True) -> dict[str, Any]:
    """In a fresh process: peak memory of one commit -- with ``trace``, the Python heap's peak above what the
    caller holds (tracemalloc); without, the peak RSS growth (tracemalloc's own bookkeeping, a traceback per
    live block, would inflate RSS: the two are measured in separate runs)."""
    import tracemalloc

    import psutil

    stub = Stub()
    try:
        client = make_client(stub.endpoint)
        client.create_bucket(Bucket=BUCKET)
        prep = prepare(stub.endpoint, files, parts=parts, processes=processes, keep_uploads=False, referenced=True)
        gc.collect()
        me = psutil.Process()
        rss_before = me.memory_info().rss
        peak_rss = rss_before
        stop = False

        def sample() -> None:
            nonlocal peak_rss
            while not stop:
                peak_rss = max(peak_rss, me.memory_info().rss)
                time.sleep(0.01)

        import threading

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        if trace:
            tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        report = prep.job.commit(prep.results)
        wall = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        if trace:
            tracemalloc.stop()
        stop = True
        sampler.join()
        success = client.get_object(Bucket=BUCKET, Key=prep.job.destination.success_key)["Body"].read()
        assert report.files == files
        return {"files": files, "parts": parts, "processes": processes, "traced": trace,
                "traced_peak_mib": (peak - base) / MiB if trace else None,
                "rss_growth_mib": (peak_rss - rss_before) / MiB, "rss_before_mib": rss_before / MiB,
                "success_bytes": len(success), "wall_s": wall,
                "manifests_inline": sum(r.manifest is not None for r in prep.results), "tasks": len(prep.results)}
    finally:
        stub.stop()


def run_memory(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    out: dict[str, Any] = {"machine": machine_description(), "rows": rows, "command": " ".join(sys.argv)}
    cases = [(f, 1) for f in args.files] + [(f, 1000) for f in args.files_1000_parts]
    for files, parts in cases:
        row: dict[str, Any] = {}
        for trace in (True, False):
            r = subprocess.run([sys.executable, "-m", "bench.bench_commit_scale", "memory-one", str(files), str(parts),
                                str(args.processes)] + ([] if trace else ["--no-trace"]),
                               capture_output=True, text=True, check=True)
            one = json.loads(r.stdout.strip().splitlines()[-1])
            if trace:
                row = one
            else:
                row["rss_growth_mib"], row["rss_before_mib"], row["wall_untraced_s"] = (
                    one["rss_growth_mib"], one["rss_before_mib"], one["wall_s"])
        log(f"  {files:,} files x {parts} parts: traced peak {row['traced_peak_mib']:.1f} MiB, peak RSS growth "
            f"(untraced run) {row['rss_growth_mib']:.1f} MiB, _SUCCESS {row['success_bytes'] / MiB:.1f} MiB")
        rows.append(row)
    one_part = {r["files"]: r for r in rows if r["parts"] == 1}
    failed = []
    if 10_000 in one_part and 100_000 in one_part:
        growth = one_part[100_000]["traced_peak_mib"] - one_part[10_000]["traced_peak_mib"]
        rss_growth = one_part[100_000]["rss_growth_mib"] - one_part[10_000]["rss_growth_mib"]
        out["growth_10k_100k_mib"] = {"traced": growth, "rss": rss_growth}
        log(f"growth 10,000 -> 100,000 files: traced {growth:.1f} MiB, RSS {rss_growth:.1f} MiB (bound: 50 MiB)")
        if not (growth < 50 and rss_growth < 50):
            failed.append(f"driver memory grew {growth:.1f} MiB traced / {rss_growth:.1f} MiB RSS from 10,000 to "
                          "100,000 files (bound 50 MiB)")
    out["failed"] = failed
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{args.out}.json").write_text(json.dumps(out, indent=1, default=str))
    assert not failed, failed[0]  # the bound, asserted (after the figures are saved)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    cpu = sub.add_parser("cpu")
    cpu.add_argument("--files", type=int, nargs="+", default=[10_000])
    cpu.add_argument("--repeats", type=int, default=10)
    cpu.add_argument("--variants", nargs="+", default=["commit", "bare-crt"])
    cpu.add_argument("--network", choices=("raw", "s3", "s3-cold", "s3-2026-11"), default="raw",
                     help="raw: straight to the stub; s3: through the S3-like network (tests/support/s3_network.py); "
                          "s3-cold: the same with the whole bucket one partition (3,500 writes/s in all)")
    cpu.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    cpu.add_argument("--write-rate", type=float, default=0,
                     help="override the rate limit's writes/s per partition (a stress case below S3's 3,500)")
    cpu.add_argument("--threads", type=int, default=THREADS,
                     help=f"commit threads and the loops' threads (default {THREADS}, the commit's default)")
    cpu.add_argument("--out", default="commit_scale")
    mem = sub.add_parser("memory")
    mem.add_argument("--files", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    mem.add_argument("--files-1000-parts", type=int, nargs="*", default=[100, 1_000])
    mem.add_argument("--processes", type=int, default=1)
    mem.add_argument("--out", default="commit_scale_memory")
    one = sub.add_parser("memory-one")
    one.add_argument("files", type=int)
    one.add_argument("parts", type=int)
    one.add_argument("processes", type=int)
    one.add_argument("--no-trace", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "memory-one":
        print(json.dumps(run_memory_one(args.files, args.parts, args.processes, trace=not args.no_trace)))
        return
    if args.cmd == "cpu" and args.threads != THREADS:
        globals()["THREADS"] = args.threads
    data = run_cpu(args) if args.cmd == "cpu" else run_memory(args)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{args.out}.json").write_text(json.dumps(data, indent=1, default=str))
    log(f"wrote {RESULTS_DIR / (args.out + '.json')}")


if __name__ == "__main__":
    main()
