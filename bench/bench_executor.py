"""Issue 39, item 1: the peers as an executor runs them -- one task slot per core, pinned away from the server and
the network model, with a server fast enough never to set the pace, and every run judged by the proxy's counters.

On a cluster, one slot has one core: a committer whose tasks wait on one request after another (S3A's) adds that
waiting to each task's time, where on a 2-core machine running ``local[8]`` it hid behind other tasks' CPU. Here:

* **Pinning** (``taskset``): the S3 server and the network model's proxy on the first core, Spark (its driver, JVM
  and Python workers) on the others, ``local[N]`` with N = those cores: one slot per core. On this 2-core machine:
  ``local[1]`` on CPU 1, the server and the proxy on CPU 0. Other sessions' work still shares both cores: every
  run records the load average.
* **The server**: versitygw (posix backend) over a folder on tmpfs (``/dev/shm``), so that disk never sets the pace.
* **The network model** (``tests/support/s3_network.py``): ``raw`` (the proxy forwards and counts), ``s3`` (the
  latency floor) and ``s3-tail`` (latencies drawn from lognormal tails); the profile is switched at the proxy
  between cells, within one Spark session.
* **The validity gate**, per run, from the proxy's counters: the time per CompleteMultipartUpload at the proxy
  (server time + what the proxy held back) within 10% of the model's mean latency for it, and at most 2% of all
  answers late (the server alone took longer than the latency drawn and than the operation's median). With a tail,
  an answer whose draw from the tail's low end was under the server's own time, given within the median, is
  *clipped*, not late (the lognormal of a 30 ms median draws 5% of its latencies under 6 ms, under any server's
  own time); the time clipped answers added beyond their draws may be at most 2% of all the latency the model
  drew for the run (sessions from 2026-11-30 on; earlier sessions counted every answer past its draw as late).
  With a tail, every variant of a round draws its latencies from the round's seed, per operation (common random
  numbers: the n-th complete of each waits the same; ``draw_seed`` in the record; sessions from 2026-11-30 on).
  A run that fails is recorded as
  ``valid: false`` with the figures that failed it, never dropped; raw runs have no floor to be judged against
  (``valid`` absent). The tables show the valid runs' figures and count the others.
* **Client CPU**: every process of the Spark side (the Python driver, the JVM, its Python workers) runs in a
  cgroup of its own (cgroup v1 ``cpuacct``, created for the run and removed after): a run's CPU is the cgroup's
  ``cpuacct.usage`` across the write, whatever processes came and went. The server and the proxy are outside it.
  Where no cgroup can be made, the run says so and counts sampled processes instead (``cpu_source``).

Variants (each the real thing; every write ``mode("overwrite").partitionBy("p")``, snappy Parquet, the same cached
DataFrame):

* ``mpcommit``: ``mpcommit.spark.write`` at its defaults; ``mpcommit-32`` the same with 32 requests in flight at
  most (``S3Options.max_completes_in_flight``), the tuned peer's committer threads;
* ``magic-tuned-32`` / ``magic-tuned-128``: the S3A magic committer tuned as in the peers benchmark
  (``bench_spark_peers.S3A_TUNING``) with ``fs.s3a.committer.threads`` 32 or 128 and connections to match
  (``fs.s3a.connection.maximum`` >= ``fs.s3a.threads.max`` + 2 x the committer's threads: 500 covers both);
* ``magic``: the magic committer at Hadoop's defaults;
* ``python-handover``: the same rows handed to a Python worker as Arrow batches (``mapInArrow``, what
  ``mpcommit.spark.write`` runs its tasks in) and dropped there: nothing encoded, nothing written. Not a peer: the
  CPU any writer that runs in a Spark Python worker pays before it writes a byte, to split mpcommit's CPU into
  Spark's hand-over and mpcommit's own work;
* ``local-disk``: Spark's own writer and FileOutputCommitter to the local disk (no store, no commit over a network:
  the floor of the writer).

Each run records its end to end, the job commit (Spark's ``job commit time`` metric, mpcommit's report) and the
writer's part (the rest), so that every end-to-end splits into writer and commit; the local-disk writer is the
writer-only baseline. Cells: files (``tasks x partition values``: every task holds every value) x network, rounds
interleaved: in every round each cell's variants run back to back, the compared pair (mpcommit and
``magic-tuned-32``) in ABBA order, the others rotating (``bench_spark_peers.schedule``).

    python -m bench.bench_executor --smoke                 # one pair at 1,000 files, raw and s3 (~30 min)
    python -m bench.bench_executor                         # the full plan (~24 h at load 15-36; see full_run)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

BUCKET = "bench-exec"
VARIANTS = ("mpcommit", "mpcommit-32", "magic-tuned-32", "magic-tuned-128", "magic", "local-disk", "python-handover")
#: mpcommit's variants and the requests each keeps in flight at most (``S3Options.max_completes_in_flight``: the
#: job commit's completes, and a task's small-file requests): ``mpcommit`` at its default, ``mpcommit-32`` at the
#: tuned peer's 32 committer threads -- equal completes in flight, the job commit target's footing, and a load a
#: server on one core can answer at the model's latency where mpcommit's default window outruns it.
MPCOMMIT_IN_FLIGHT = {"mpcommit": None, "mpcommit-32": 32}
#: Variants that write to no store (nothing to list or empty there).
NO_STORE = ("local-disk", "python-handover")
LABELS = {
    "mpcommit": "mpcommit.spark.write",
    "mpcommit-32": "mpcommit.spark.write, 32 requests in flight (the peer's committer threads)",
    "magic-tuned-32": "S3A magic, tuned, 32 committer threads",
    "magic-tuned-128": "S3A magic, tuned, 128 committer threads",
    "magic": "S3A magic, Hadoop's defaults",
    "local-disk": "Spark's writer to local disk (no store)",
    "python-handover": "Spark's hand-over to a Python worker alone (mapInArrow, nothing written)",
}
#: (files, network) cells and the runs of each: the issue's plan, 5 interleaved pairs; the 1,000-file cell with
#: latency runs with the floor and with the tail.
DEFAULT_PLAN = "1000:raw,s3,s3-tail;10000:raw,s3"
SMOKE_PLAN = "1000:raw,s3"
DEFAULT_SIZE = "256MiB"
TASKS = 8
#: The validity gate: time per complete at the proxy within this factor of the model's mean, late answers at most
#: this share of all.
GATE_COMPLETE_FACTOR = 1.10
GATE_LATE_SHARE = 0.02
#: The tail's draws of round r start from this + r, per operation, for every variant of the round.
DRAW_SEED_BASE = 3900
#: With a tail: the time answers from its low end took beyond their draws (never beyond the median: those are late),
#: at most this share of all the latency the model drew for the run.
GATE_CLIPPED_TIME_SHARE = 0.02
CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")


def _drop_batches(batches: Any) -> Any:
    """A Python worker's task that takes every Arrow batch Spark hands it and keeps only their row count."""
    import pyarrow as pa

    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


def bucket_of(variant: str) -> str:
    return f"{BUCKET}-{variant}"


def tuned(variant: str) -> dict[str, str]:
    """The S3A settings of a tuned variant: the peers' tuning, with its committer threads."""
    from bench.bench_spark_peers import tuned_settings

    if not variant.startswith("magic-tuned-"):
        return {}
    threads = variant.rsplit("-", 1)[1]
    out = tuned_settings("magic-tuned")
    out["fs.s3a.committer.threads"] = threads
    out["fs.s3a.connection.maximum"] = str(max(500, 96 + 2 * int(threads)))
    return out


def variant_settings(variant: str) -> dict[str, str]:
    """Session settings of one variant's write (set for the write, then put back)."""
    from bench.bench_spark_peers import _CLOUD_PROTOCOL
    from bench.bench_spark_peers import variant_settings as peer_settings

    if variant == "local-disk":
        return peer_settings("v1", "")  # Spark's own commit protocol, FileOutputCommitter (algorithm 1, its default)
    if variant.startswith("magic"):
        return {**_CLOUD_PROTOCOL, "fs.s3a.committer.name": "magic", "fs.s3a.committer.magic.enabled": "true",
                **tuned(variant)}
    return {}


def parse_plan(text: str) -> list[tuple[int, str]]:
    """``"1000:raw,s3;10000:s3"`` -> [(1000, "raw"), (1000, "s3"), (10000, "s3")]."""
    cells = []
    for block in filter(None, (b.strip() for b in text.split(";"))):
        files, _, networks = block.partition(":")
        cells += [(int(files), n.strip()) for n in networks.split(",") if n.strip()]
    return cells


def gate(stats: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Any]:
    """The run's validity from the proxy's counters: the time per complete at the proxy (the server's time to the
    answer plus what the proxy held back) against the model's mean latency for a complete, and the share of late
    answers. ``valid`` is None where there is no floor to judge against (raw, or no completes)."""
    from tests.support.s3_network import NetworkProfile

    ops = stats.get("ops") or {}
    complete = ops.get("CompleteMultipartUpload") or {}
    n = int(complete.get("requests") or 0)
    total = sum(int(v.get("requests") or 0) for v in ops.values())
    late = sum(int(v.get("late") or 0) for v in ops.values())
    out: dict[str, Any] = {"completes": n, "requests": total, "late": late,
                           "late_share": late / total if total else None}
    # With a tail: answers whose low draw was under the server's own time, given within the median (the proxy's
    # ``clipped``). Not late -- the server did not set their pace -- but the time they added beyond their draws
    # is bounded like the late answers' share, so that a run the server slowed by many small overruns still fails.
    clipped = sum(int(v.get("clipped") or 0) for v in ops.values())
    added = sum(float(v.get("clipped_seconds") or 0) for v in ops.values())
    drawn_all = sum(float(v.get("latency_seconds") or 0) for v in ops.values())
    if clipped:
        out.update(clipped=clipped, clipped_share=clipped / total if total else None,
                   clipped_time_share=added / drawn_all if drawn_all else None)
    if not n or not profile:
        return {**out, "valid": None, "why": "no store" if not total else "no completes" if not n else "raw: no floor"}
    model = NetworkProfile.from_json(profile)
    floor = model.mean_latency("CompleteMultipartUpload")
    if not floor:
        return {**out, "valid": None, "why": "raw: no floor"}
    per = (float(complete.get("upstream_seconds") or 0) + float(complete.get("held_seconds") or 0)) / n
    drawn = float(complete.get("latency_seconds") or 0) / n  # what the model asked of these completes
    out.update(complete_ms=per * 1000, model_mean_ms=floor * 1000, drawn_ms=drawn * 1000,
               factor=per / drawn if drawn else None)
    reasons = []
    if drawn and per > GATE_COMPLETE_FACTOR * drawn:
        reasons.append(f"{per * 1000:.0f} ms per complete, over {GATE_COMPLETE_FACTOR:.2f}x the model's "
                       f"{drawn * 1000:.0f} ms: the server set the pace")
    if total and late / total > GATE_LATE_SHARE:
        reasons.append(f"{late} of {total} answers late ({late / total:.1%} > {GATE_LATE_SHARE:.0%})")
    if drawn_all and added / drawn_all > GATE_CLIPPED_TIME_SHARE:
        reasons.append(f"{clipped} answers past their draws from the tail's low end added {added:.2f} s to the "
                       f"model's {drawn_all:.1f} s ({added / drawn_all:.1%} > {GATE_CLIPPED_TIME_SHARE:.0%})")
    return {**out, "valid": not reasons, "why": "; ".join(reasons) or "ok"}


def ideal_window_seconds(seed: int, requests: int, slots: int, profile: Any = None,
                         op: str = "CompleteMultipartUpload") -> float:
    """How long ``requests`` requests of ``op`` take through ``slots`` slots kept full -- each started the moment
    one ends, with no client time -- when each waits the latency the proxy draws for it from ``seed`` (the n-th
    request the n-th draw of ``op``'s stream, as :meth:`tests.support.s3_network.Proxy.draw` gives it; ``profile``
    the tail's, default ``S3_TAIL``): what a committer's completes can take at best in a round with that seed."""
    import heapq

    from tests.support.s3_network import S3_TAIL, draw_stream

    profile = profile or S3_TAIL
    stream = draw_stream(seed, op)
    free = [0.0] * slots  # when each slot is next free
    end = 0.0
    for _ in range(requests):
        start = heapq.heappop(free)
        done = start + profile.latency_for(op, draw=stream.random())
        heapq.heappush(free, done)
        end = max(end, done)
    return end


def set_profile(proxy: str, profile: dict[str, Any]) -> None:
    """Switch the proxy's shaping (its control API), between cells."""
    req = urllib.request.Request(f"{proxy}/__proxy/profile", data=json.dumps(profile).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()


# ---------------------------------------------------------------- the cgroup of the Spark side
class CpuGroup:
    """A cgroup v1 ``cpuacct`` group for the Spark side's processes: a child put in it at its start takes every
    process it starts with it; ``usage()`` is their CPU seconds so far, exited processes included."""

    def __init__(self, name: str):
        self.path = CGROUP_ROOT / name
        self.path.mkdir()

    @staticmethod
    def problem() -> str | None:
        if not (CGROUP_ROOT / "cpuacct.usage").exists():
            return f"no cgroup v1 cpuacct hierarchy at {CGROUP_ROOT}"
        if not os.access(CGROUP_ROOT, os.W_OK):
            return f"{CGROUP_ROOT} is not writable"
        return None

    def enter(self) -> None:
        """Put the calling process in the group (a child's ``preexec_fn``)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def usage(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:  # processes still leaving
                time.sleep(0.2)


def cpu_usage(path: str) -> float | None:
    """The child's view of its cgroup: CPU seconds of every process in it so far."""
    try:
        return int(Path(path, "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- the child: Spark and the runs
def child(args: argparse.Namespace) -> int:
    from bench.bench_spark_peers import (
        ROW_BYTES,
        CpuMeter,
        EventLog,
        _listing,
        _proxy_call,
        effective_s3a,
        job_commit_seconds,
        peers_dataframe,
        schedule,
        session_conf,
        task_commit_seconds,
    )
    from bench.common import empty_prefix, ensure_bucket, log, make_client, s3_options
    from bench.records import RecordLog
    from mpcommit.spark import write as mp_write
    from tests.support.s3_network import NONE, PROFILES
    from tests.support.spark_s3a import s3a_jars_problem, session_has_s3a, session_settings, spark_session

    problem = s3a_jars_problem()
    if problem:
        raise SystemExit(f"bench_executor: {problem}")
    work = Path(tempfile.mkdtemp(prefix="bench-executor-"))
    eventlog_dir = work / "eventlog"
    variants = tuple(args.variants.split(","))
    conf = {
        **session_conf(work, args.endpoint, tasks=args.tasks, driver_memory=args.driver_memory),
        # The JVM as users run it: the tests' C1-only compiler and serial collector (tests/support/spark_s3a.py,
        # for short-lived test JVMs) would charge the JVM peers CPU they do not spend on a cluster.
        "spark.driver.extraJavaOptions": "",
        "spark.executor.extraJavaOptions": "",
    }
    for v in variants:
        for key, value in tuned(v).items():
            conf[f"spark.hadoop.fs.s3a.bucket.{bucket_of(v)}.{key[len('fs.s3a.'):]}"] = value
    spark, _ = spark_session(master=f"local[{args.slots}]", app="mpcommit-bench-executor", conf=conf)
    if not session_has_s3a(spark):
        raise SystemExit("bench_executor: the Spark JVM has no S3A classes")
    spark.sparkContext.setLogLevel("WARN")
    elog = EventLog(next(eventlog_dir.glob(f"{spark.sparkContext.applicationId}*")))
    sampled = None
    if not args.cgroup:
        sampled = CpuMeter(None, None)
        sampled.find_jvm()
        sampled.start()
    # Where the CPU goes (the driver's Python, the JVM, the Python workers): read per process at each run's start
    # and end only -- no sampling thread, whose own CPU the cgroup would charge to the run. The cgroup's total
    # stays the figure; a worker that ended within a run is missing from the split (its residue says how much).
    split_meter = CpuMeter(None, None)
    split_meter.find_jvm()
    direct = make_client(args.upstream)
    for v in variants:
        if v not in NO_STORE:
            ensure_bucket(direct, bucket_of(v))
    records = RecordLog("executor", directory=args.records, command=args.command or None,
                        spark=spark.version, master=f"local[{args.slots}]", tasks=args.tasks, size=args.size,
                        plan=args.plan, variants=list(variants), spark_cpus=args.spark_cpus, server_cpus=args.server_cpus,
                        server="versitygw (posix backend on tmpfs)", nice=args.nice,
                        cpu_source="cgroup v1 cpuacct (driver, JVM, Python workers)" if args.cgroup else
                        "sampled processes (no cgroup could be made)",
                        gate={"complete_factor": GATE_COMPLETE_FACTOR, "late_share": GATE_LATE_SHARE,
                              "late": "past its draw and the operation's median (a tail's low draws: clipped)",
                              "clipped_time_share": GATE_CLIPPED_TIME_SHARE})

    def dataframe(n_rows: int, values: int) -> Any:
        return peers_dataframe(spark, n_rows, values, tasks=args.tasks)

    def one_write(variant: str, df: Any, prefix: str) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if variant in MPCOMMIT_IN_FLIGHT:
            options = s3_options(args.endpoint)
            if MPCOMMIT_IN_FLIGHT[variant] is not None:
                options = dataclasses.replace(options, max_completes_in_flight=MPCOMMIT_IN_FLIGHT[variant])
            report = mp_write(df, f"s3a://{bucket_of(variant)}/{prefix.rstrip('/')}", "parquet", mode="overwrite",
                              partition_by=["p"], s3=options)
            info["mp_timings"] = {k: round(v, 4) for k, v in report.timings.items()}
        elif variant == "local-disk":
            with session_settings(spark, variant_settings(variant)):
                df.write.mode("overwrite").partitionBy("p").parquet(f"file://{work}/local/{prefix.rstrip('/')}")
        elif variant == "python-handover":
            rows = df.mapInArrow(_drop_batches, "rows long").collect()
            info["rows_seen"] = sum(r["rows"] for r in rows)
        else:
            with session_settings(spark, variant_settings(variant)):
                df.write.mode("overwrite").partitionBy("p").parquet(f"s3a://{bucket_of(variant)}/{prefix.rstrip('/')}")
        return info

    def local_listing(prefix: str) -> dict[str, Any]:
        root = work / "local" / prefix.rstrip("/")
        files = [p for p in root.rglob("*.parquet")]
        out = {"files": len(files), "bytes": sum(p.stat().st_size for p in files), "pending_uploads": 0}
        shutil.rmtree(root, ignore_errors=True)
        return out

    def cpu_now() -> float | None:
        if args.cgroup:
            return cpu_usage(args.cgroup)
        assert sampled is not None
        return sum(sampled.snapshot().values())

    effective: dict[str, Any] = {}
    try:
        warm = dataframe(20_000, 2)
        for v in variants:
            one_write(v, warm, "warmup/")
            if v == "local-disk":
                local_listing("warmup/")
            elif v == "python-handover":
                pass
            else:
                empty_prefix(direct, bucket_of(v), "warmup/")
                if v not in MPCOMMIT_IN_FLIGHT:
                    effective[v] = effective_s3a(spark, bucket_of(v), variant_settings(v))
        elog.window()
        cells = parse_plan(args.plan)
        frames: dict[int, Any] = {}
        for files in sorted({f for f, _ in cells}):
            values = max(1, round(files / args.tasks))
            frames[files] = dataframe(max(1, args.size // ROW_BYTES), values).cache()
            frames[files].count()  # cached before any run: every variant writes the same rows, none pays for them
        order = schedule({v: args.pairs for v in variants})
        for pair in range(args.pairs):
            for files, network in cells:
                profile = NONE if network == "raw" else PROFILES[network]
                set_profile(args.endpoint, profile.to_json())
                for _, variant in [(r, v) for r, v in order if r == pair]:
                    prefix = f"n{files}-{network}/r{pair}/"
                    load = os.getloadavg()
                    # Every variant of a round draws the tail's latencies from the round's seed, per operation:
                    # common random numbers, so that a pair differs by its committers, not by their luck in draws.
                    draw_seed = DRAW_SEED_BASE + pair
                    _proxy_call(args.endpoint, f"reset?seed={draw_seed}", "POST")
                    s0 = split_meter.snapshot()
                    c0 = cpu_now()
                    t0 = time.perf_counter()
                    info = one_write(variant, frames[files], prefix)
                    seconds = time.perf_counter() - t0
                    c1 = cpu_now()
                    split = CpuMeter.delta(s0, split_meter.snapshot())
                    stats = _proxy_call(args.endpoint, "stats")
                    ev = elog.window()
                    if variant == "local-disk":
                        listing = local_listing(prefix)
                    elif variant == "python-handover":
                        listing = {"files": 0, "bytes": 0, "pending_uploads": 0}
                    else:
                        listing = _listing(direct, bucket_of(variant), prefix)
                        empty_prefix(direct, bucket_of(variant), prefix)
                    run = {"variant": variant, "files_target": files, "repeat": pair, "events": ev, **info}
                    job_commit = job_commit_seconds(run)
                    verdict = gate(stats, None if network == "raw" else profile.to_json())
                    totals = stats.get("totals") or {}
                    record = {
                        "variant": variant, "files_target": files, "network": network, "pair": pair,
                        "seconds": seconds, "job_commit_s": job_commit, "writer_s": seconds - job_commit,
                        "task_commit_s": task_commit_seconds(run), "cpu_s": (c1 - c0) if c0 is not None and c1 is not None else None,
                        "cpu_split_s": split,
                        "executor_cpu_s": ev.get("executor_cpu_s"), "gc_s": ev.get("gc_s"), "tasks_run": ev.get("tasks"),
                        "files": listing["files"], "bytes": listing["bytes"], "pending_left": listing.get("pending_uploads"),
                        "success": listing.get("success"), "mp_timings": info.get("mp_timings"),
                        "requests": {op: int(v["requests"]) for op, v in (stats.get("ops") or {}).items() if v.get("requests")},
                        "requests_total": int(totals.get("requests", 0)), "late": int(totals.get("late", 0)),
                        "max_in_flight": stats.get("max_in_flight"), "gate": verdict, "draw_seed": draw_seed,
                        "load_before": list(load), "load_after": list(os.getloadavg()),
                        "settings": effective.get(variant, {}),
                    }
                    if verdict.get("valid") is not None:
                        record["valid"] = verdict["valid"]
                    records.run(**record)
                    log(f"executor: {variant:<16} {files:>6} files {network:<7} r{pair}: {seconds:7.1f} s "
                        f"(job commit {job_commit:.2f} s), CPU {record['cpu_s'] or 0:.1f} s, {listing['files']} files, "
                        f"gate {verdict['why']}, load {load[0]:.2f}")
    finally:
        if sampled is not None:
            sampled.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


# ---------------------------------------------------------------- the parent: server, proxy, cgroup, pinning
def _pin(pid: int, cpus: str) -> None:
    """Every thread of ``pid`` onto ``cpus`` (``taskset -a``: a Go server's threads exist before we pin it)."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, capture_output=True)


def cpu_split() -> tuple[str, str, int]:
    """(the server's and proxy's CPUs, Spark's CPUs, Spark's slots): the first core for the server side, the rest
    for Spark, one slot each."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("bench_executor needs at least 2 cores: one for the server side, one for Spark")
    return str(cores[0]), ",".join(map(str, cores[1:])), len(cores) - 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m bench.bench_executor", description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", default=None, help=f"files:networks cells (default {DEFAULT_PLAN!r})")
    p.add_argument("--pairs", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--size", default=DEFAULT_SIZE, help=f"row data per write (default {DEFAULT_SIZE})")
    p.add_argument("--tasks", type=int, default=TASKS)
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--nice", type=int, default=5, help="niceness of the whole benchmark (shared machine)")
    p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    p.add_argument("--smoke", action="store_true", help=f"one pair of {SMOKE_PLAN!r}, records in bench/results/smoke")
    # the child's
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--upstream", help=argparse.SUPPRESS)
    p.add_argument("--slots", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--cgroup", default="", help=argparse.SUPPRESS)
    p.add_argument("--spark-cpus", default="", help=argparse.SUPPRESS)
    p.add_argument("--server-cpus", default="", help=argparse.SUPPRESS)
    p.add_argument("--command", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        from bench.common import parse_size

        a.size = parse_size(a.size)
        return child(a)
    from bench.common import log, start_versitygw
    from bench.records import SMOKE_DIR
    from tests.support.s3_network import NONE, S3Network

    if a.smoke:
        a.plan, a.pairs = a.plan or SMOKE_PLAN, 1
        a.records = a.records or str(SMOKE_DIR)
    plan = a.plan or DEFAULT_PLAN
    server_cpus, spark_cpus, slots = cpu_split()
    os.nice(a.nice)
    data = Path(tempfile.mkdtemp(prefix="mpcommit-bench-exec-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    group = None
    problem = CpuGroup.problem()
    if problem is None:
        group = CpuGroup(f"mpcommit-bench-executor-{os.getpid()}")
    else:
        log(f"executor: no cgroup ({problem}); CPU from sampled processes instead")
    server = None
    try:
        server, upstream = start_versitygw(data, server_cpus)
        with S3Network(upstream, NONE) as net:
            _pin(net.pid or 0, server_cpus)
            cmd = [sys.executable, "-m", "bench.bench_executor", "--child", "--endpoint", net.endpoint_url,
                   "--upstream", upstream, "--plan", plan, "--pairs", str(a.pairs), "--variants", a.variants,
                   "--size", a.size, "--tasks", str(a.tasks), "--slots", str(slots), "--driver-memory", a.driver_memory,
                   "--spark-cpus", spark_cpus, "--server-cpus", server_cpus, "--nice", str(a.nice),
                   "--command", "python -m bench.bench_executor " + " ".join(argv)]
            if a.records:
                cmd += ["--records", a.records]
            if group is not None:
                cmd += ["--cgroup", str(group.path)]
            log(f"executor: server and proxy on CPU {server_cpus}, Spark local[{slots}] on CPU {spark_cpus}; plan "
                f"{plan}, {a.pairs} pair(s)")
            rc = subprocess.call(["taskset", "-c", spark_cpus, *cmd], cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                 preexec_fn=group.enter if group is not None else None)
        return rc
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        if group is not None:
            group.remove()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
