"""Scenario 1: job commit vs number of files, mpcommit against the rename-based and deferred-complete
protocols (see :mod:`bench.baselines`), all on the same server in the same run.

For every size, every repeat runs every protocol back to back, in a rotated order; each run writes its own
files (not timed), then its task commits and its job commit are timed and its requests counted.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from .baselines import BareCompleteLoop, CommitProtocol, HadoopV1, HadoopV2, S3fsTransaction, Workload
from .common import (
    KiB,
    RequestMeter,
    S3CostModel,
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

BUCKET = "bench-commit"
VARIANTS = ("mpcommit", "bare", "s3fs", "v2", "v1")
LABELS = {
    "mpcommit": "mpcommit",
    "bare": "bare complete loop (floor)",
    "s3fs": "fsspec/s3fs transaction",
    "v2": "Hadoop FOC v2 (rename)",
    "v1": "Hadoop FOC v1 (rename)",
}
DEFAULT_SIZES = (100, 1_000, 10_000)
DEFAULT_FILES_PER_TASK = 100  # more files per task amortise the rename protocols' per-task LISTs
DEFAULT_FILE_SIZE = 16 * KiB
DEFAULT_THREADS = 32  # mpcommit's default commit concurrency (DEFAULT_COMMIT_THREADS)
#: From this many files on, the slow baselines run only DEFAULT_BIG_REPEATS times: on two shared cores one
#: repeat of all five protocols at 10,000 files costs several minutes of LocalStack time, mostly the baselines'.
DEFAULT_BIG = 10_000
DEFAULT_BIG_REPEATS = 1
SLOW_VARIANTS = ("s3fs", "v2", "v1")
PROJECTED_FILE_SIZE = 128 * 1024 * 1024  # a typical Parquet file, for the projection onto S3


class MpcommitProtocol(CommitProtocol):
    """mpcommit itself: tasks stream to final keys (TaskAttempt.create), task commit writes the manifest,
    job commit is ``Job.commit``."""

    name = "mpcommit"
    label = "mpcommit"

    def __init__(self, client: Any, workload: Workload, *, endpoint: str):
        super().__init__(client, workload)
        from mpcommit import Job
        from mpcommit.store.s3 import S3Store

        self.task_commit_concurrency = workload.threads
        self.job_commit_concurrency = workload.threads
        self.store = S3Store(s3_options(endpoint), client=client)
        self.job = Job.create(f"s3://{workload.bucket}/{workload.root.rstrip('/')}", mode="append",
                              s3=self.store.options, store=self.store, commit_threads=workload.threads)
        self.attempts: list[Any] = []
        self.results: list[Any] = []
        self.report: Any = None

    def write(self) -> None:
        body = self.w.payload()

        def write_task(task: int) -> Any:
            attempt = self.job.spec.task(task, 0, store=self.store)
            for _ in range(self.w.files_per_task):
                with attempt.create(ext="bin") as out:
                    out.write(body)
            return attempt

        with ThreadPoolExecutor(self.w.threads) as pool:
            self.attempts = list(pool.map(write_task, range(self.w.n_tasks)))

    def task_commit(self) -> None:
        with ThreadPoolExecutor(self.w.threads) as pool:
            self.results = list(pool.map(lambda a: a.commit(), self.attempts))

    def job_commit(self) -> None:
        self.report = self.job.commit(self.results)
        assert self.report.files == self.w.n_files, (self.report.files, self.w.n_files)


@dataclass
class Run:
    variant: str
    files: int
    repeat: int
    write_s: float
    task_commit_s: float
    job_commit_s: float
    write_requests: dict[str, int]
    task_commit_requests: dict[str, int]
    job_commit_requests: dict[str, int]
    copied_bytes: int
    copies: int
    task_commit_concurrency: int
    job_commit_concurrency: int
    load: float
    client_cpu_s: float = float("nan")  # this process's CPU during task + job commit
    server_cpu_s: float = float("nan")  # the S3 server's CPU during task + job commit
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def commit_s(self) -> float:
        return self.task_commit_s + self.job_commit_s

    @property
    def commit_requests(self) -> int:
        return sum(self.task_commit_requests.values()) + sum(self.job_commit_requests.values())


def _make(variant: str, client: Any, workload: Workload, endpoint: str, meter: RequestMeter) -> CommitProtocol:
    if variant == "mpcommit":
        return MpcommitProtocol(client, workload, endpoint=endpoint)
    if variant == "bare":
        return BareCompleteLoop(client, workload)
    if variant == "s3fs":
        return S3fsTransaction(client, workload, endpoint=endpoint, meter=meter)
    if variant == "v1":
        return HadoopV1(client, workload)
    if variant == "v2":
        return HadoopV2(client, workload)
    raise ValueError(variant)


def run_one(endpoint: str, variant: str, files: int, repeat: int, *, files_per_task: int, file_size: int,
            threads: int, cleaner: Any, server_pid: int | None = None) -> Run:
    import os

    from .common import server_cpu_seconds

    n_tasks = max(1, files // files_per_task)
    root = f"c{files}/{variant}/r{repeat}-{uuid.uuid4().hex[:6]}/"
    workload = Workload(bucket=BUCKET, root=root, job_id=str(uuid.uuid4()), n_tasks=n_tasks,
                        files_per_task=min(files_per_task, files), file_size=file_size, threads=threads)
    meter = RequestMeter(source_size=lambda _b, _k: file_size)
    client = meter.attach(make_client(endpoint))
    protocol = _make(variant, client, workload, endpoint, meter)
    try:
        s0 = meter.snapshot()
        t0 = time.perf_counter()
        protocol.write()
        t1 = time.perf_counter()
        s1 = meter.snapshot()
        c1, v1 = time.process_time(), server_cpu_seconds(server_pid)
        protocol.task_commit()
        t2 = time.perf_counter()
        s2 = meter.snapshot()
        protocol.job_commit()
        t3 = time.perf_counter()
        c3, v3 = time.process_time(), server_cpu_seconds(server_pid)
        s3 = meter.snapshot()
    finally:
        protocol.close()
    write_req = s1[0] - s0[0]
    task_req = s2[0] - s1[0]
    job_req = s3[0] - s2[0]
    copies = sum((task_req + job_req)[op] for op in RequestMeter.COPY_OPERATIONS)
    extra: dict[str, Any] = {}
    if isinstance(protocol, MpcommitProtocol):
        extra["store_counts"] = protocol.store.request_counts()
        extra["timings"] = {k: round(v, 4) for k, v in protocol.report.timings.items()}
    run = Run(
        variant=variant, files=workload.n_files, repeat=repeat, write_s=t1 - t0, task_commit_s=t2 - t1,
        job_commit_s=t3 - t2, write_requests=dict(write_req), task_commit_requests=dict(task_req),
        job_commit_requests=dict(job_req), copied_bytes=s3[1] - s1[1], copies=copies,
        task_commit_concurrency=protocol.task_commit_concurrency, job_commit_concurrency=protocol.job_commit_concurrency,
        load=os.getloadavg()[0], client_cpu_s=c3 - c1, server_cpu_s=v3 - v1, extra=extra,
    )
    empty_prefix(cleaner, BUCKET, root)
    return run


def run(endpoint: str, *, sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = 5, variants: tuple[str, ...] = VARIANTS,
        files_per_task: int = DEFAULT_FILES_PER_TASK, file_size: int = DEFAULT_FILE_SIZE,
        threads: int = DEFAULT_THREADS, big: int = DEFAULT_BIG, big_repeats: int = DEFAULT_BIG_REPEATS,
        server_pid: int | None = None, caps: Sequence[tuple[str, int, int]] = ()) -> dict[str, Any]:
    """``caps``: (variant, from this many files on, at most this many repeats; 0 = not run), on top of ``big``."""
    cleaner = make_client(endpoint)
    ensure_bucket(cleaner, BUCKET)
    runs: list[Run] = []
    started = time.perf_counter()
    big_sizes = [n for n in sizes if big and n >= big and big_repeats < repeats]
    for files in sizes:
        for repeat, variant in interleaved(variants, repeats):
            if files in big_sizes and variant in SLOW_VARIANTS and repeat >= big_repeats:
                continue
            if any(v == variant and files >= n0 and repeat >= most for v, n0, most in caps):
                continue
            r = run_one(endpoint, variant, files, repeat, files_per_task=files_per_task, file_size=file_size,
                        threads=threads, cleaner=cleaner, server_pid=server_pid)
            runs.append(r)
            log(f"commit: {files:>6} files {variant:<8} r{repeat}: task commit {r.task_commit_s:7.3f} s, "
                f"job commit {r.job_commit_s:7.3f} s, {r.commit_requests / r.files:.2f} req/file, "
                f"copied {human_bytes(r.copied_bytes)}, CPU client {r.client_cpu_s:.2f} s server {r.server_cpu_s:.2f} s "
                f"(write {r.write_s:.1f} s, load {r.load:.1f})")
    return {
        "scenario": "commit", "sizes": list(sizes), "repeats": repeats, "variants": list(variants),
        "files_per_task": files_per_task, "file_size": file_size, "threads": threads,
        "big": {"sizes": big_sizes, "repeats": big_repeats,
                "variants": [v for v in variants if v in SLOW_VARIANTS] if big_sizes else []},
        "caps": [list(c) for c in caps],
        "seconds": round(time.perf_counter() - started, 1),
        "runs": [asdict(r) | {"commit_s": r.commit_s} for r in runs],
    }


# ---------------------------------------------------------------- summarising
def _runs(data: dict[str, Any], variant: str, files: int) -> list[dict[str, Any]]:
    return sorted((r for r in data["runs"] if r["variant"] == variant and r["files"] == files), key=lambda r: r["repeat"])


def projected_seconds(r: dict[str, Any], model: S3CostModel, file_size: int | None = None) -> float:
    """One run's task commit + job commit projected onto S3, at its own file size or at ``file_size``."""
    total = 0.0
    copies_task = sum(r["task_commit_requests"].get(op, 0) for op in RequestMeter.COPY_OPERATIONS)
    copies_job = sum(r["job_commit_requests"].get(op, 0) for op in RequestMeter.COPY_OPERATIONS)
    per_copy = (r["copied_bytes"] / r["copies"]) if r["copies"] else 0
    size = per_copy if file_size is None else file_size
    total += model.phase_seconds(r["task_commit_requests"], copies_task * size, r["task_commit_concurrency"])
    total += model.phase_seconds(r["job_commit_requests"], copies_job * size, r["job_commit_concurrency"])
    return total


def summarise(data: dict[str, Any], model: S3CostModel = S3CostModel()) -> dict[str, Any]:
    """Medians per (variant, size) and paired ratios against the bare loop and against mpcommit."""
    out: dict[str, Any] = {"rows": [], "targets": {}}
    sizes = data["sizes"]
    for files in sizes:
        base = _runs(data, "bare", files)
        mp = _runs(data, "mpcommit", files)
        for v in data["variants"]:
            rs = _runs(data, v, files)
            if not rs:
                continue
            row = {
                "variant": v, "files": files, "n": len(rs),
                "task_commit_s": median(r["task_commit_s"] for r in rs),
                "job_commit_s": median(r["job_commit_s"] for r in rs),
                "commit_s": median(r["commit_s"] for r in rs),
                "write_req_per_file": median(sum(r["write_requests"].values()) / r["files"] for r in rs),
                "commit_req_per_file": median(
                    (sum(r["task_commit_requests"].values()) + sum(r["job_commit_requests"].values())) / r["files"] for r in rs),
                "copied_bytes": median(r["copied_bytes"] for r in rs),
                "client_cpu_ms_per_file": median(1000 * r.get("client_cpu_s", float("nan")) / r["files"] for r in rs),
                "server_cpu_ms_per_file": median(1000 * r.get("server_cpu_s", float("nan")) / r["files"] for r in rs),
                "copies_per_file": median(r["copies"] / r["files"] for r in rs),
                "projected_s": median(projected_seconds(r, model) for r in rs),
                "projected_big_s": median(projected_seconds(r, model, PROJECTED_FILE_SIZE) for r in rs),
                "commit_vs_bare": paired_ratio([r["commit_s"] for r in rs], [b["commit_s"] for b in base]) if base else None,
                "job_vs_bare": paired_ratio([r["job_commit_s"] for r in rs], [b["job_commit_s"] for b in base]) if base else None,
                "commit_vs_mpcommit": paired_ratio([r["commit_s"] for r in rs], [m["commit_s"] for m in mp]) if mp else None,
                "ops": dict(sum((Counter(r["task_commit_requests"]) + Counter(r["job_commit_requests"]) for r in rs[:1]), Counter())),
            }
            out["rows"].append(row)
    by = {(r["variant"], r["files"]): r for r in out["rows"]}
    largest = max(sizes)
    mp, v1 = by.get(("mpcommit", largest)), by.get(("v1", largest))
    if mp and mp.get("job_vs_bare") is not None:
        from .common import ratio_spread

        spread = ratio_spread([r["job_commit_s"] for r in _runs(data, "mpcommit", largest)],
                              [r["job_commit_s"] for r in _runs(data, "bare", largest)])
        out["targets"]["job_commit_vs_bare"] = {"files": largest, "ratio": mp["job_vs_bare"], "target": 1.25,
                                                "met": mp["job_vs_bare"] <= 1.25, "spread": spread}
    fewer = []
    for files in sizes:
        m, h = by.get(("mpcommit", files)), by.get(("v1", files))
        if m and h:
            fewer.append({"files": files, "mpcommit": m["copied_bytes"], "v1": h["copied_bytes"],
                          "met": m["copied_bytes"] * 10 <= h["copied_bytes"]})
    if fewer:
        out["targets"]["bytes_copied_vs_v1"] = {"sizes": fewer, "met": all(f["met"] for f in fewer)}
    _ = v1
    return out


def markdown(data: dict[str, Any], model: S3CostModel = S3CostModel(), *, plot: str | None = None) -> str:
    """The scenario's section of BENCHMARKS.md (without its heading)."""
    s = summarise(data, model)
    big = data.get("big") or {}
    out: list[str] = []
    out.append(
        f"Each run commits N files written by N/{data['files_per_task']} tasks ({data['files_per_task']} files per task, "
        f"{human_bytes(data['file_size'])} each, one part). The write is not timed; the task commits and the job commit "
        f"are, and every request of both is counted through botocore's `before-send` event. Every protocol runs its "
        f"parallel phases on {data['threads']} threads (mpcommit's default commit concurrency). Repeats: "
        f"{data['repeats']} per protocol and size"
        + (f", except {', '.join(LABELS[v] for v in big['variants'])} at {', '.join(f'{n:,}' for n in big['sizes'])} "
           f"files: {big['repeats']} (one repeat of all five protocols at 10,000 files costs several minutes of the "
           "shared cores, mostly the baselines'; their figures there are single runs, paired with the same repeat "
           "of the floor)" if big.get("variants") else "") + ".")
    out.append("")
    out.append("The protocols (implemented request for request in `bench/baselines.py`):")
    out.append("")
    out.append("- **mpcommit**: tasks stream to the final keys and leave the uploads pending; task commit writes one "
               "manifest per task; job commit (`Job.commit`) validates, writes the journal, completes every upload, "
               "aborts leftovers, writes `_SUCCESS` and deletes the job's records.")
    out.append("- **bare complete loop**: the floor. The same uploads (one part, CRC32), then nothing but "
               "CompleteMultipartUpload in a parallel loop.")
    out.append("- **fsspec/s3fs transaction**: `fs.start_transaction()`; files written with s3fs inside it (closing "
               "one creates its multipart upload and uploads the part, but defers the complete); "
               "`fs.end_transaction()` completes them one after another in the one process, as s3fs does.")
    out.append("- **Hadoop FileOutputCommitter v2** over S3A: task commit merges the task attempt directory straight "
               "into the destination: per file a getFileStatus probe, CopyObject and DeleteObject.")
    out.append("- **Hadoop FileOutputCommitter v1** over S3A: task commit renames the attempt directory to "
               "`_temporary/0/task_*` (LIST, CopyObject per file, DeleteObjects in pages of 250); job commit merges "
               "every file again into the destination (probe, CopyObject, DeleteObject): two copy-and-delete per file.")
    out.append("")
    out.append("Simplifications: the Hadoop baselines run tasks in parallel on the thread pool and the files of one "
               "task one after another. That favours v1's job commit (Hadoop runs it serially in the driver) and goes "
               "against v1's task commit (S3A's directory rename copies several files at once); with 100 files per "
               "task, 100 and 1,000 files are 1 and 10 tasks, so the pool is full only from 3,200 files on (the "
               "latency runs below show it). "
               "S3A sends more probes per rename than modelled (a one-key LIST after each HEAD miss, checks of the "
               "destination's parent, directory markers), so the Hadoop request counts are lower bounds. The per-file "
               "LIST probe is left out on purpose: LocalStack's LIST time grows with the number of objects in the "
               "bucket (4 ms at 100 objects, 78 ms at 10,000, measured here), S3's does not.")
    out.append("")
    out.append("### Measured on the local server")
    out.append("")
    out.append(_measured_table(s))
    out.append("")
    out.append("Times are medians; ratios are medians of per-repeat ratios. v2 does its copying in the task commits, "
               "so compare it on the commit total. The CPU columns are the CPU time of the committing process and of "
               "the S3 server during the commit, per file: on shared cores they are steadier than wall time, and the "
               "client and the server compete for the same two cores here.")
    out.append("")
    out.append("### Requests, copies and the cost on S3")
    out.append("")
    out.append(f"Projected onto S3 from each run's request and copy counts, assuming {model.describe()}. Parallel "
               "phases divide by the same thread count as above -- optimistic wherever requests go one after another: the "
               "Hadoop baselines below 3,200 files (fewer tasks than threads), and mpcommit's journal, leftover aborts, "
               "`_SUCCESS` and clean-up; the measurements with latency (below) show by how much -- and s3fs's "
               "sequential completes by one. The last column "
               f"applies the same counts to {human_bytes(PROJECTED_FILE_SIZE)} files, a typical Parquet file size "
               "(only the copies depend on the size).")
    out.append("")
    rows = []
    for r in s["rows"]:
        rows.append([f"{r['files']:,}", LABELS.get(r["variant"], r["variant"]),
                     f"{r['write_req_per_file']:.2f}", f"{r['commit_req_per_file']:.2f}", f"{r['copies_per_file']:.0f}",
                     human_bytes(r["copied_bytes"]), human_seconds(r["projected_s"]), human_seconds(r["projected_big_s"])])
    out.append(md_table(["files", "protocol", "write requests per file", "commit requests per file", "copies per file",
                         "bytes copied server-side", f"on S3 at {human_bytes(data['file_size'])}/file",
                         f"on S3 at {human_bytes(PROJECTED_FILE_SIZE)}/file"], rows, align="rlrrrrrr"))
    out.append("")
    largest = max(data["sizes"])
    out.append(f"Requests of one commit (task commits + job commit) by operation, at {largest:,} files:")
    out.append("")
    op_rows = [[LABELS.get(r["variant"], r["variant"]),
                ", ".join(f"{op} {n:,}" for op, n in sorted(r["ops"].items(), key=lambda kv: -kv[1]))]
               for r in s["rows"] if r["files"] == largest]
    out.append(md_table(["protocol", "requests"], op_rows, align="ll"))
    out.append("")
    if plot:
        out.append(f"![Job commit vs number of files]({plot})")
        out.append("")
    out += _phase_table(data)
    fixed = []
    for files in data["sizes"]:
        rs = [r for r in data["runs"] if r["variant"] == "mpcommit" and r["files"] == files]
        if rs:
            t = [r["extra"].get("timings", {}) for r in rs]
            fixed.append(f"{human_seconds(median(x.get('total', 0) - x.get('complete', 0) for x in t))} at {files:,} files")
    if fixed:
        out.append("mpcommit's job commit outside its parallel completes (validation, journal, leftover aborts, "
                   "`_SUCCESS`, clean-up of the job's records; one request after another, each paying the network's "
                   "latency): " + ", ".join(fixed) + " (medians). The bare loop has none of these steps; they are what "
                   "its ratio to the loop measures at small sizes.")
        out.append("")
    return "\n".join(out)


def _measured_table(s: dict[str, Any], *, projected: bool = False) -> str:
    rows = []
    for r in s["rows"]:
        row = [f"{r['files']:,}", LABELS.get(r["variant"], r["variant"]), r["n"],
               human_seconds(r["task_commit_s"]), human_seconds(r["job_commit_s"]), human_seconds(r["commit_s"]),
               _x(r["job_vs_bare"]), _x(r["commit_vs_bare"]), _x(r["commit_vs_mpcommit"]),
               _ms(r["client_cpu_ms_per_file"]), _ms(r["server_cpu_ms_per_file"])]
        if projected:
            row.append(human_seconds(r["projected_s"]))
        rows.append(row)
    headers = ["files", "protocol", "runs", "task commits", "job commit", "commit total", "job commit ÷ floor",
               "commit total ÷ floor", "commit total ÷ mpcommit", "client CPU per file", "server CPU per file"]
    if projected:
        headers.append("commit total projected by the model")
    return md_table(headers, rows, align="rl" + "r" * (len(headers) - 2))


def _phase_table(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    phases = ("validate", "complete", "replace", "abort_leftovers", "success", "cleanup", "total")
    prow = []
    for files in data["sizes"]:
        rs = [r for r in data["runs"] if r["variant"] == "mpcommit" and r["files"] == files]
        if rs:
            prow.append([f"{files:,}"] + [human_seconds(median(r["extra"].get("timings", {}).get(p, float("nan")) for r in rs))
                                          for p in phases])
    if prow:
        out.append("mpcommit's job commit by phase (medians, from `CommitReport.timings`):")
        out.append("")
        out.append(md_table(["files", *phases], prow, align="r" * (len(phases) + 1)))
        out.append("")
    return out


def describe_caps(data: dict[str, Any]) -> str:
    caps = data.get("caps") or []
    if not caps:
        return ""
    parts = [f"{LABELS.get(v, v)} from {n0:,} files on: " + ("not run" if most == 0 else f"{most} repeat{'s' if most > 1 else ''}")
             for v, n0, most in caps]
    return "; ".join(parts)


def markdown_network(data: dict[str, Any], model: S3CostModel = S3CostModel()) -> str:
    """The same scenario through the S3-like network: measured times beside the projection model's (the network's
    latencies are the model's, so the two should agree where the protocol, not the local server, sets the pace)."""
    s = summarise(data, model)
    out = [f"The same runs through the S3-like network: {data['repeats']} repeats per protocol and size, interleaved"
           + (f" (except {describe_caps(data)}: sequential or copy-bound protocols at S3 latency cost minutes per run "
              "on two shared cores)" if data.get("caps") else "") + f"; {data['threads']} threads as above.", ""]
    out.append(_measured_table(s, projected=True))
    out.append("")
    skipped = [(v, n0) for v, n0, most in data.get("caps") or [] if most == 0]
    for v, n0 in skipped:
        rows = [r for r in s["rows"] if r["variant"] == v]
        if rows:
            last = max(rows, key=lambda r: r["files"])
            per_file = last["commit_s"] / last["files"]
            out.append(f"{LABELS.get(v, v)} was not run from {n0:,} files on: at its commit time per file measured "
                       f"with {last['files']:,} files, {n0:,} files would take {human_seconds(per_file * n0)} "
                       f"(the model projects {human_seconds(last['projected_s'] / last['files'] * n0)}).")
            out.append("")
    out += _phase_table(data)
    fixed = []
    for files in data["sizes"]:
        rs = [r for r in data["runs"] if r["variant"] == "mpcommit" and r["files"] == files]
        if rs:
            t = [r["extra"].get("timings", {}) for r in rs]
            fixed.append(f"{human_seconds(median(x.get('total', 0) - x.get('complete', 0) for x in t))} at {files:,} files")
    if fixed:
        out.append("mpcommit's job commit outside its parallel completes (validation, journal, leftover aborts, "
                   "`_SUCCESS`, clean-up of the job's records; one request after another, each paying the network's "
                   "latency): " + ", ".join(fixed) + " (medians). The bare loop has none of these steps; they are what "
                   "its ratio to the loop measures at small sizes.")
        out.append("")
    return "\n".join(out)


def _ms(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f} ms"


def _x(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f}x"
