"""Commit at scale (issues 12 and 25): the driver's job commit against the floor -- the commit's own request path
(the CRT transport, the adaptive window, the retry policy) with nothing of the commit around it -- on a STUB server
(:mod:`bench.stub_s3`, another process) that costs next to nothing per request, so that the client's own CPU is
what is measured; optionally through the S3-like network (:mod:`tests.support.s3_network`: latency per operation, 503
SlowDown beyond a partition's write rate).

The tasks' side is not run: each run makes a fresh job and writes its task manifests (synthetic uploads: key,
upload id, parts) to the stub, untimed; the timed part is ``Job.commit`` (journal, completes, abort of leftovers,
``_SUCCESS``, cleanup) or the bare loop over the same uploads. Every run is a process of its own (``run-one``),
started by this one, which keeps the stub and the proxy: the child prepares, says READY, and times its part only
when told GO, so that the stub's and the proxy's CPU are read around the timed part alone. Client CPU is the
child's CPU (user + system, plus that of its own children in the multi-process variants) during the timed part.

    python -m bench.bench_commit_scale cpu --files 10000 --repeats 10 --variants commit bare-crt
    python -m bench.bench_commit_scale cpu --network s3 --files 100000 --repeats 5 --variants commit bare-crt
    python -m bench.bench_commit_scale cpu --files 10000 --repeats 10 --variants commit commit@main \
        --tree main=/path/to/a/checkout/of/main          # the commit at other code, interleaved
    python -m bench.bench_commit_scale memory --files 1000 10000 100000

Variants of ``cpu``: ``commit`` (``Job.commit`` at this code, its defaults: completes on the CRT transport under the
adaptive window), ``bare-crt`` (**the floor**: the same completes -- ``S3Store.start_complete`` under the same
:class:`mpcommit.pool.Window` and retry policy, from the commit's threads up to ``S3Options.max_completes_in_flight``
-- and nothing else), ``bare`` (a bare boto3 loop on as many threads as the commit's, kept to show what the CRT
saves, not a floor), ``commit-boto3`` (the commit with ``complete_transport="boto3"``: completes on threads),
``commit-fixed`` (the window held at the commit's threads: ``max_completes_in_flight`` = 32, what the adaptation
buys), ``commit-pN`` (N worker processes: as ``commit-pN@NAME`` with a tree from before 2026-11-28; this code ignores the setting), ``commit@NAME`` (``Job.commit`` with mpcommit imported from the checkout given
by ``--tree NAME=PATH``: the comparison with code before a change).

Per run, besides wall time and client CPU: the rate of completes through the one driver (files / the complete
phase), and through the S3-like network the 503 SlowDown answers the rate limit gave, the requests beyond one
complete per file (retries), the most requests the proxy saw in flight and the proxy's and the stub's CPU; with
this code, the window's peak and halvings. One JSON line per run goes to ``bench/results/commit_scale.jsonl``
(``--records DIR`` elsewhere).
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
from pathlib import Path
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
REPO_ROOT = Path(__file__).resolve().parents[1]


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
        """The server's CPU (user + system), from /proc: psutil is a bench extra that a test venv may lack."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # utime and stime are the stat file's 14th and 15th fields (the 12th and 13th after the command's ")").
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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
            progress: Any = None, options: Any = None, real: bool = False) -> Prepared:
    """A fresh job whose tasks left ``files`` uploads of ``parts`` parts each, manifests written to the stub.
    ``referenced``: every task result names its manifest instead of carrying it (as large ones do), so that
    the commit reads them all from the store. ``setup_endpoint``: where the untimed set-up writes the
    manifests (the stub itself, when the job's ``endpoint`` is the S3-like network in front of it). ``real``:
    a real server (LocalStack, moto): each upload is created and given one small part, so that it can be
    completed."""
    from mpcommit import Job
    from mpcommit.protocol.layout import data_file_name
    from mpcommit.protocol.records.manifest import INLINE_MAX_PARTS, Part, PendingUpload, TaskManifest, TaskResult
    from mpcommit.store.s3 import S3Store

    store = S3Store(options or s3_options(endpoint))
    setup = S3Store(s3_options(setup_endpoint)) if setup_endpoint else store
    uri = f"s3://{BUCKET}/{prefix or 't-' + uuid.uuid4().hex[:8]}"
    job = Job.create(uri, mode="append", s3=store.options, store=store, commit_threads=THREADS, progress=progress,
                     **({"commit_processes": processes} if processes > 1 else {}))
    dest = job.destination
    results, bare = [], []
    n_tasks = max(1, files // FILES_PER_TASK)
    crc = "AAAAAA=="
    part_size = 5 * MiB
    made: dict[str, tuple[str, str]] = {}
    if real:  # every upload created with one small part, untimed, side by side
        client = make_client(setup_endpoint or endpoint)
        keys = [dest.root + f"dt={i % 10}/" + data_file_name(task_id=t, job_id=job.job_id, file_number=i, ext="bin")
                for t in range(n_tasks) for i in range(FILES_PER_TASK if files >= FILES_PER_TASK else files)]

        def create(key: str) -> None:
            uid = client.create_multipart_upload(Bucket=dest.bucket, Key=key, ChecksumAlgorithm="CRC32")["UploadId"]
            answer = client.upload_part(Bucket=dest.bucket, Key=key, UploadId=uid, PartNumber=1, Body=b"x",
                                        ChecksumAlgorithm="CRC32")
            made[key] = (uid, answer["ETag"])

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, keys))
        crc, part_size, parts = "jNwWgw==", 1, 1  # CRC32 of b"x"
    for t in range(n_tasks):
        per_task = FILES_PER_TASK if files >= FILES_PER_TASK else files
        uploads = []
        for i in range(per_task):
            key = dest.root + f"dt={i % 10}/" + data_file_name(task_id=t, job_id=job.job_id, file_number=i, ext="bin")
            uid, etag = made.get(key) or (f"u{t}x{i}x{uuid.uuid4().hex}", '"%032x"' % (t * 1000 + i))
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


def bare_crt_loop(endpoint: str, uploads: list[tuple[str, str, str, str, int]]) -> dict[str, Any]:
    """The floor: the commit's completes and nothing else -- ``S3Store.start_complete`` on the store's own CRT
    transport, under the commit's adaptive window (from its threads up to ``max_completes_in_flight``) and retry
    policy, started from this thread. Returns what the window went through."""
    from mpcommit.pool import Window, run_windowed
    from mpcommit.store.retry import Attempts, slows_down
    from mpcommit.store.s3 import CompletedPart, S3Store

    store = S3Store(s3_options(endpoint))
    policy = store.options.retry
    window = Window(THREADS, ceiling=store.completes_in_flight(BUCKET))

    def start(u: tuple[str, str, str, str, int], done: Any) -> None:
        key, uid, etag, crc, parts = u
        store.start_complete(BUCKET, key, uid, [CompletedPart(n, etag, crc) for n in range(1, parts + 1)], done)

    try:
        run_windowed(start, uploads, window=window, retries=lambda first: Attempts(policy, started=first),
                     slow_down=slows_down)
    finally:
        store.close()
    return {"window_peak": window.peak, "window_final": window.limit, "window_halvings": window.halvings,
            "window_slowdowns": window.slowdowns}


def bare_loop(client: Any, uploads: list[tuple[str, str, str, str, int]]) -> None:
    """A bare boto3 loop: boto3's complete_multipart_upload over a thread pool of the same size, nothing else.
    Not the floor (botocore's signer and urllib3 cost several times the CRT's CPU): kept to show that."""

    def complete(u: tuple[str, str, str, str, int]) -> None:
        key, uid, etag, crc, parts = u
        client.complete_multipart_upload(
            Bucket=BUCKET, Key=key, UploadId=uid,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag, "ChecksumCRC32": crc} for n in range(1, parts + 1)]},
        )

    with ThreadPoolExecutor(THREADS) as pool:
        for _ in pool.map(complete, uploads):
            pass


# ---------------------------------------------------------------- one run, in a process of its own
def run_one(spec: dict[str, Any]) -> None:
    """A child's run: prepare, say READY, wait for GO, time the variant, print its figures as one JSON line.
    With ``tree``, mpcommit comes from that checkout (put first on the path before anything imports it)."""
    if spec.get("tree"):
        sys.path.insert(0, spec["tree"])
    import mpcommit

    variant, files = spec["variant"], spec["files"]
    base = variant.split("@")[0]
    processes = int(base.split("-p")[1]) if "-p" in base else 1
    options = None
    if base == "commit-boto3":
        options = dataclasses.replace(s3_options(spec["endpoint"]), complete_transport="boto3")
    elif base == "commit-fixed":  # the CRT transport with the window held at the commit's threads
        options = dataclasses.replace(s3_options(spec["endpoint"]), max_completes_in_flight=THREADS)
    windows: list[Any] = []
    if hasattr(mpcommit, "pool"):  # this code's commit keeps its completes' window on the Placer: read it after
        from mpcommit.protocol.commit import placing

        place_all = placing.Placer.place_all

        def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return place_all(self, *args, **kwargs)
            finally:
                windows.append(getattr(self, "window", None))

        placing.Placer.place_all = recording  # type: ignore[method-assign]
    prep = prepare(spec["endpoint"], files, processes=processes, keep_uploads=variant.startswith("bare"),
                   setup_endpoint=spec["setup_endpoint"], options=options, real=bool(spec.get("real")))
    client = make_client(spec["endpoint"]) if variant == "bare" else None
    gc.collect()
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        return
    out: dict[str, Any] = {"outcome": "ok", "mpcommit": os.path.dirname(os.path.dirname(mpcommit.__file__))}
    c0, w0 = cpu_now(), time.perf_counter()
    try:
        if variant == "bare":
            bare_loop(client, prep.uploads)
        elif variant == "bare-crt":
            out.update(bare_crt_loop(spec["endpoint"], prep.uploads))
        else:
            report = prep.job.commit(prep.results)
            assert report.files == files, (report.files, files)
            out["timings"] = dict(report.timings)
    except Exception as exc:  # noqa: BLE001 - a commit that fails under the rate limit is a result
        out["outcome"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
    out["wall_s"], out["cpu_s"] = time.perf_counter() - w0, cpu_now() - c0
    window = next((w for w in windows if w is not None), None)
    if window is not None:
        out.update(window_peak=window.peak, window_final=window.limit, window_halvings=window.halvings,
                   window_slowdowns=window.slowdowns)
    print("RESULT " + json.dumps(out), flush=True)


def run_child(spec: dict[str, Any], before: Any, after: Any) -> dict[str, Any]:
    """Run one variant in a fresh process; ``before()`` and ``after()`` are called around its timed part only."""
    tree = spec.get("tree")
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_commit_scale", "run-one", json.dumps(spec)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"run-one did not get ready ({tree or 'this code'}): {line!r}")
        before()
        proc.stdin.write("GO\n")
        proc.stdin.flush()
        result = None
        for line in proc.stdout:
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
                break
        after()
        if result is None:
            raise RuntimeError(f"run-one gave no result ({tree or 'this code'})")
        return result
    finally:
        proc.stdin.close()
        proc.wait(60)


# ---------------------------------------------------------------- CPU per file
def run_cpu(args: argparse.Namespace) -> dict[str, Any]:
    from .records import RecordLog

    trees = dict(t.split("=", 1) for t in args.tree)
    for v in args.variants:
        if "@" in v and v.split("@", 1)[1] not in trees:
            raise SystemExit(f"variant {v}: no --tree {v.split('@', 1)[1]}=PATH")
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
        variants = args.variants
        out: dict[str, Any] = {"machine": machine_description(), "stub": "bench.stub_s3 (asyncio, canned XML)",
                               "network": args.network,
                               "network_profile": net.profile.describe() if net is not None else "none (loopback)",
                               "threads": THREADS, "sizes": {}, "command": " ".join(sys.argv)}
        records = RecordLog("commit_scale", directory=args.records, network=args.network,
                            profile=net.profile.to_json() if net is not None else None, threads=THREADS,
                            server="bench.stub_s3 (another process)", files_per_task=FILES_PER_TASK,
                            trees={name: _tree_state(path) for name, path in trees.items()} or None)
        for files in args.files:
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            schedule = abba(variants, args.repeats)
            log(f"{files:,} files: {len(schedule)} runs ({', '.join(variants)}), ABBA, each in a process of its own")
            for repeat, variant in schedule:
                spec = {"variant": variant, "files": files, "endpoint": endpoint, "setup_endpoint": stub.endpoint,
                        "threads": THREADS, "tree": trees.get(variant.split("@", 1)[1]) if "@" in variant else None}
                sample: dict[str, float] = {}

                def before() -> None:
                    if net is not None:
                        net.reset()
                        sample["proxy"] = net.stats()["cpu_seconds"]
                    sample["stub"], sample["load"] = stub.cpu_seconds(), os.getloadavg()[0]

                def after() -> None:
                    sample["stub"] = stub.cpu_seconds() - sample["stub"]

                child = run_child(spec, before, after)
                timings = child.get("timings") or {}
                complete_s = timings.get("complete", child["wall_s"])
                run = {"outcome": child["outcome"], "wall_s": child["wall_s"], "cpu_s": child["cpu_s"],
                       "stub_cpu_s": sample["stub"], "load": sample["load"],
                       "cpu_ms_per_file": child["cpu_s"] / files * 1000, "files_per_s": files / child["wall_s"],
                       "completes_per_s": files / complete_s if complete_s else None,
                       **{k: child[k] for k in ("window_peak", "window_final", "window_halvings", "window_slowdowns")
                          if k in child}}
                if net is not None:
                    stats = net.stats()
                    run["network"] = stats.get("totals", {})
                    run["proxy_cpu_s"] = stats["cpu_seconds"] - sample["proxy"]
                    cmu = stats["ops"].get("CompleteMultipartUpload", {})
                    run["completes_sent"] = int(cmu.get("requests", 0))
                    run["slowdowns"] = int(stats["totals"].get("throttled", 0))
                    run["complete_slowdowns"] = int(cmu.get("throttled", 0))
                    run["retries"] = max(0, run["completes_sent"] - files)  # completes beyond one per file
                    run["max_in_flight"] = stats.get("max_in_flight")
                    run["requests"] = {op: int(v["requests"]) for op, v in stats["ops"].items()}
                runs[variant].append(run)
                records.run(variant=variant, files=files, pair=repeat, timings=timings,
                            **{k: v for k, v in run.items() if k != "network"}, proxy_totals=run.get("network"))
                if run["outcome"] != "ok":
                    log(f"  #{repeat} {variant}: {run['outcome']}")
                log(f"  #{repeat} {variant:10s} wall {run['wall_s']:.2f}s cpu {run['cpu_ms_per_file']:.3f} ms/file "
                    f"({run['files_per_s']:,.0f} files/s, completes {run['completes_per_s'] or 0:,.0f}/s; "
                    f"stub {run['stub_cpu_s']:.1f}s; load {sample['load']:.2f}"
                    + (f"; window peak {run['window_peak']}, halvings {run.get('window_halvings', 0)}"
                       if "window_peak" in run else "")
                    + (f"; 503s {run['slowdowns']}, retries {run['retries']}, in flight <= {run['max_in_flight']}, "
                       f"proxy {run['proxy_cpu_s']:.1f}s" if net is not None else "") + ")")
            size: dict[str, Any] = {"runs": runs, "medians": {}, "ratios": {}}
            for v in variants:
                ok = [r for r in runs[v] if r["outcome"] == "ok"] or runs[v]
                size["medians"][v] = {k: median(r[k] for r in ok) for k in ("cpu_ms_per_file", "wall_s", "files_per_s", "load")}
            for base in ("bare-crt", "bare", *[v for v in variants if "@" in v]):
                if base not in variants:
                    continue
                for v in variants:
                    if v == base or v.startswith("bare") or "@" in v:
                        continue
                    for measure in ("cpu_s", "wall_s"):
                        r = ratio_spread([x[measure] for x in runs[v]], [x[measure] for x in runs[base]])
                        size["ratios"][f"{v}/{base} {measure}"] = r
                        log(f"  {v}/{base} {measure}: {describe_ratio(r)}")
            out["sizes"][str(files)] = size
        return out
    finally:
        if net is not None:
            net.stop()
        stub.stop()


def run_local(args: argparse.Namespace) -> dict[str, Any]:
    """The commit against a real local server (LocalStack or moto, its own process): what the adaptive window does
    where the server, not the network, is the limit -- it must not make small commits or these servers worse."""
    from .common import start_server
    from .records import RecordLog

    trees = dict(t.split("=", 1) for t in args.tree)
    server = start_server(args.server)
    try:
        make_client(server.endpoint_url).create_bucket(Bucket=BUCKET)
        records = RecordLog("commit_local", directory=args.records, server=server.version, threads=THREADS,
                            files_per_task=FILES_PER_TASK,
                            trees={name: _tree_state(path) for name, path in trees.items()} or None)
        out: dict[str, Any] = {"machine": machine_description(), "server": server.version, "runs": []}
        for files in args.files:
            for repeat, variant in abba(args.variants, args.repeats):
                spec = {"variant": variant, "files": files, "endpoint": server.endpoint_url,
                        "setup_endpoint": server.endpoint_url, "threads": THREADS, "real": True,
                        "tree": trees.get(variant.split("@", 1)[1]) if "@" in variant else None}
                sample: dict[str, float] = {}

                def before() -> None:
                    sample["server"], sample["load"] = server.cpu_seconds(), os.getloadavg()[0]

                def after() -> None:
                    sample["server"] = server.cpu_seconds() - sample["server"]

                child = run_child(spec, before, after)
                timings = child.get("timings") or {}
                run = {"outcome": child["outcome"], "wall_s": child["wall_s"], "cpu_s": child["cpu_s"],
                       "server_cpu_s": sample["server"], "load": sample["load"],
                       "cpu_ms_per_file": child["cpu_s"] / files * 1000,
                       "completes_per_s": files / timings["complete"] if timings.get("complete") else None,
                       **{k: child[k] for k in ("window_peak", "window_final", "window_halvings", "window_slowdowns")
                          if k in child}}
                records.run(variant=variant, files=files, pair=repeat, timings=timings, **run)
                out["runs"].append({"variant": variant, "files": files, **run})
                log(f"  #{repeat} {variant:12s} {files:,} files on {args.server}: wall {run['wall_s']:.2f}s, "
                    f"completes {run['completes_per_s'] or 0:,.0f}/s, client {run['cpu_ms_per_file']:.3f} ms/file, "
                    f"server {run['server_cpu_s']:.1f}s, window peak {run.get('window_peak', '-')}; "
                    f"load {sample['load']:.1f}" + ("" if run["outcome"] == "ok" else f"; {run['outcome']}"))
        return out
    finally:
        server.stop()


def _tree_state(path: str) -> dict[str, Any]:
    """Which code a ``--tree`` checkout holds (its commit, and whether mpcommit/ has changes there)."""
    from .records import git_state

    return {"path": path, **git_state(Path(path))}


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
    cpu.add_argument("--network", choices=("raw", "s3", "s3-cold", "s3-tail", "s3-2026-11"), default="raw",
                     help="raw: straight to the stub; s3: through the S3-like network (tests/support/s3_network.py); "
                          "s3-cold: the same with the whole bucket one partition (3,500 writes/s in all); "
                          "s3-tail: s3 with each request's latency drawn from a lognormal (p99 10x the median)")
    cpu.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    cpu.add_argument("--write-rate", type=float, default=0,
                     help="override the rate limit's writes/s per partition (a stress case below S3's 3,500)")
    cpu.add_argument("--threads", type=int, default=THREADS,
                     help=f"commit threads and the loops' threads (default {THREADS}, the commit's default)")
    cpu.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                     help="a checkout whose mpcommit the variant commit@NAME runs (e.g. main=/tmp/main-checkout)")
    cpu.add_argument("--out", default="commit_scale")
    mem = sub.add_parser("memory")
    mem.add_argument("--files", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    mem.add_argument("--files-1000-parts", type=int, nargs="*", default=[100, 1_000])
    mem.add_argument("--processes", type=int, default=1)
    mem.add_argument("--out", default="commit_scale_memory")
    local = sub.add_parser("local", help="against LocalStack or moto, real uploads")
    local.add_argument("--server", choices=("localstack", "moto"), default="localstack")
    local.add_argument("--files", type=int, nargs="+", default=[2_000])
    local.add_argument("--repeats", type=int, default=3)
    local.add_argument("--variants", nargs="+", default=["commit", "commit-boto3"])
    local.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    local.add_argument("--records", default=None)
    local.add_argument("--out", default="commit_local")
    child = sub.add_parser("run-one")
    child.add_argument("spec")
    one = sub.add_parser("memory-one")
    one.add_argument("files", type=int)
    one.add_argument("parts", type=int)
    one.add_argument("processes", type=int)
    one.add_argument("--no-trace", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "run-one":
        spec = json.loads(args.spec)
        globals()["THREADS"] = spec.get("threads", THREADS)
        run_one(spec)
        return
    if args.cmd == "memory-one":
        print(json.dumps(run_memory_one(args.files, args.parts, args.processes, trace=not args.no_trace)))
        return
    if args.cmd == "cpu" and args.threads != THREADS:
        globals()["THREADS"] = args.threads
    data = run_cpu(args) if args.cmd == "cpu" else run_local(args) if args.cmd == "local" else run_memory(args)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{args.out}.json").write_text(json.dumps(data, indent=1, default=str))
    log(f"wrote {RESULTS_DIR / (args.out + '.json')}")


if __name__ == "__main__":
    main()
