"""The full set of benchmark runs (issues 25 and 39), one after another, then BENCHMARKS.md's tables regenerated.

    python -m bench.full_run --list                 # the steps, their commands and expected durations
    python -m bench.full_run                        # everything (about 12 h on the 2-core machine)
    python -m bench.full_run --only peers-s3,commit-s3-100k
    python -m bench.full_run --missing              # only the steps not yet done at this product code
    python -m bench.full_run --records /tmp/rec     # records elsewhere (default bench/results, kept in git)

Meant for a quiet machine: every step appends its raw records (one JSON line per run) to
``bench/results/<scenario>.jsonl``; a step that fails is reported and the others still run.

A full run does not fit one working session, so the steps are spread over several, all at one product code. Each
step's end goes to a ledger, ``bench/results/full_run.jsonl`` (step, product code, commit, start, minutes, exit
status), kept in git: ``--missing`` runs the steps with no successful entry at the current product code (the last
commit that changed ``mpcommit/``), and ``--list`` shows each step's last measured duration beside its estimate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRATCH = REPO_ROOT / "bench" / "results" / "scratch"
LEDGER = REPO_ROOT / "bench" / "results" / "full_run.jsonl"


@dataclass(frozen=True)
class Step:
    name: str
    args: tuple[str, ...]
    # What the step takes on the 2-core machine: the ledger's durations of 2026-11-26/27 where it has one
    # (peers, commit, compaction's small sets, task, writer, door, stream), else the sum of the per-run times
    # in the records of 2026-11-26 (driver memory) or an estimate from smoke runs.
    estimate: str
    tables: str  # the BENCHMARKS.md tables it feeds


def steps() -> tuple[Step, ...]:
    return (
        Step("peers-raw", ("bench.bench_spark_peers", "--network", "raw", "--check-rows"),
             "60 min", "peers, peer-settings"),
        Step("peers-s3", ("bench.bench_spark_peers", "--network", "s3", "--tasks", "8", "--slots", "8"),
             "75 min", "peers, peer-settings"),
        Step("commit-raw-10k", ("bench.bench_commit_scale", "cpu", "--files", "10000", "--repeats", "10",
                                "--variants", "commit", "bare-crt", "bare", "--out", "scratch/commit_raw_10k"),
             "3 min", "commit-scale"),
        Step("commit-raw-100k", ("bench.bench_commit_scale", "cpu", "--files", "100000", "--repeats", "5",
                                 "--variants", "commit", "bare-crt", "--out", "scratch/commit_raw_100k"),
             "3 min", "commit-scale"),
        Step("commit-s3-10k", ("bench.bench_commit_scale", "cpu", "--network", "s3", "--files", "10000", "--repeats", "10",
                               "--variants", "commit", "bare-crt", "--out", "scratch/commit_s3_10k"),
             "2 min", "commit-scale, commit-rate"),
        Step("commit-s3-100k", ("bench.bench_commit_scale", "cpu", "--network", "s3", "--files", "100000", "--repeats", "5",
                                "--variants", "commit", "bare-crt", "--out", "scratch/commit_s3_100k"),
             "5 min", "commit-scale, commit-rate"),
        Step("commit-s3-cold-100k", ("bench.bench_commit_scale", "cpu", "--network", "s3-cold", "--files", "100000",
                                     "--repeats", "3", "--variants", "commit", "bare-crt", "--out", "scratch/commit_cold_100k"),
             "4 min", "commit-scale, commit-rate"),
        Step("driver-spark", ("bench.bench_driver_memory", "spark", "--files", "10000", "100000", "--repeats", "3"),
             "25 min", "driver-memory"),
        Step("driver-replay", ("bench.bench_driver_memory", "replay", "--files", "10000", "100000", "1000000"),
             "18 min", "driver-memory"),
        Step("driver-replay-referenced", ("bench.bench_driver_memory", "replay", "--referenced",
                                          "--files", "10000", "100000", "1000000"),
             "18 min", "driver-memory"),
        # json-mixed-3gib (2.69 GiB): the target is at >= 2 GiB, which json-mixed-2gib (1.76 GiB) is not.
        Step("compaction-s3-3gib", ("bench.bench_compaction", "--server", "localstack", "--network", "s3",
                                    "--datasets", "json-mixed-3gib", "--repeats", "5",
                                    "--variants", "multipart,rewrite-equal,rewrite", "--out", "bench/results/scratch/compaction_3gib.md"),
             "10 min", "compaction"),
        Step("compaction-s3-small", ("bench.bench_compaction", "--server", "localstack", "--network", "s3",
                                     "--datasets", "json-mixed,json-large,parquet-mixed", "--repeats", "10",
                                     "--variants", "multipart,rewrite-equal", "--out", "bench/results/scratch/compaction_s3.md"),
             "3 min", "compaction"),
        Step("compaction-raw-small", ("bench.bench_compaction", "--server", "localstack",
                                      "--datasets", "json-mixed,json-large,parquet-mixed", "--repeats", "10",
                                      "--variants", "multipart,rewrite-equal", "--out", "bench/results/scratch/compaction_raw.md"),
             "2 min", "compaction"),
        Step("task-s3", ("bench.bench_task_scale", "--network", "s3", "--repeats", "10", "--no-trace",
                         "--variants", "mpcommit,pyarrow", "--name", "scratch/task_scale_s3"),
             "36 min", "task-scale"),
        Step("task-raw", ("bench.bench_task_scale", "--network", "raw", "--repeats", "10", "--no-trace",
                          "--variants", "mpcommit,pyarrow", "--name", "scratch/task_scale_raw"),
             "7 min", "task-scale"),
        Step("writer-s3", ("bench.bench_writer", "--network", "s3", "--repeats", "10", "--size", "268435456",
                           "--name", "scratch/writer_depth"),
             "2 min", "writer"),
        Step("datasource-door", ("bench.bench_datasource", "door", "--repeats", "20", "--rows", "6000000"),
             "4 min", "datasource-door"),
        Step("stream-commit", ("bench.bench_datasource", "stream", "--batches", "20", "--files", "10", "100",
                               "--networks", "s3"),
             "1 min", "stream-commit"),
        # Issue 39: the peers as an executor runs them (bench/bench_executor.py's plan: 1,000 files raw, s3 and
        # s3-tail; 10,000 raw and s3; 5 interleaved rounds of 5 variants). The estimate is from its smoke run
        # (2026-11-28, load 15-36: one round of the two 1,000-file cells took 27 min, S3A's runs 2.4-6.8 min each),
        # scaled by the files: with one slot, S3A's tasks wait on their requests one after another, and the
        # 10,000-file cells with latency take about 2.5 h a round. On a quiet machine perhaps half.
        Step("executor", ("bench.bench_executor",), "24 h", "executor, targets"),
        Step("task-cpu", ("bench.bench_task_cpu", "--rounds", "5"), "15 min", "task-cpu, targets"),
        # Issue 39 item 4: the compaction's verdict at copy rates of 8 (sourced), 25 and 50 MB/s (assumed), each with
        # the client host's link capped at 10 Gb/s (an m5.8xlarge's). On versitygw over tmpfs: on LocalStack 77-99%
        # of the answers came later than the model's latency at every rate -- the server, not the rate, set the pace.
        *(Step(f"compaction-sensitivity-{rate}", ("bench.bench_compaction", "--server", "versitygw", "--network", "s3",
                                                   "--copy-rate", f"{rate}MB/s", "--host-bandwidth", "1250MB/s",
                                                   "--datasets", "json-mixed-3gib", "--repeats", "5",
                                                   "--variants", "multipart,rewrite-equal",
                                                   "--out", f"bench/results/scratch/compaction_copy{rate}.md"),
               est, "compaction-sensitivity") for rate, est in ((8, "10 min"), (25, "8 min"), (50, "7 min"))),
    )


def read_ledger(path: Path = LEDGER) -> list[dict]:
    """The ledger's entries, oldest first (an absent ledger is empty)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def record_step(step: Step, *, code: str, commit: str, started: str, minutes: float, exit_status: int,
                path: Path = LEDGER) -> dict:
    """Append one step's end to the ledger."""
    entry = {"step": step.name, "code": code, "commit": commit, "started": started, "minutes": round(minutes, 2),
             "exit": exit_status, "command": "python -m " + " ".join(step.args)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(entry, separators=(",", ":")) + "\n")
    return entry


def missing_steps(chosen: tuple[Step, ...] | list[Step], ledger: list[dict], code: str) -> list[Step]:
    """The steps of ``chosen`` with no successful ledger entry at product code ``code`` (for its own command:
    a step whose plan changed since is not done)."""
    done = {(e["step"], e.get("command")) for e in ledger if e.get("code") == code and e.get("exit") == 0}
    return [s for s in chosen if (s.name, "python -m " + " ".join(s.args)) not in done]


def last_minutes(ledger: list[dict]) -> dict[str, float]:
    """Each step's duration in its latest successful entry."""
    return {e["step"]: float(e["minutes"]) for e in ledger if e.get("exit") == 0}


def main(argv: list[str] | None = None) -> int:
    from bench.records import git_state

    ap = argparse.ArgumentParser(prog="python -m bench.full_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the steps and exit")
    ap.add_argument("--only", default="", help="comma-separated step names")
    ap.add_argument("--missing", action="store_true",
                    help="only the steps with no successful ledger entry at the current product code")
    ap.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md's tables at the end")
    a = ap.parse_args(argv)
    known = {s.name for s in steps()}
    unknown = [n for n in a.only.split(",") if n and n not in known]
    if unknown:
        ap.error(f"unknown steps {unknown}; --list names them")
    chosen = [s for s in steps() if not a.only or s.name in a.only.split(",")]
    ledger_path = Path(a.records) / "full_run.jsonl" if a.records else LEDGER
    ledger = read_ledger(ledger_path)
    state = git_state()
    if state["dirty"]:
        print("[full_run] warning: mpcommit/ has uncommitted changes; the records name the last product commit, "
              "which is not the code that runs", file=sys.stderr)
    if a.missing:
        chosen = missing_steps(chosen, ledger, state["code"])
    if a.list:
        measured = last_minutes(ledger)
        for s in chosen:
            took = f"{measured[s.name]:.1f} min" if s.name in measured else "-"
            print(f"{s.name:<26} {s.estimate:>7}  last took {took:>9}  python -m {' '.join(s.args)}   -> {s.tables}")
        return 0
    SCRATCH.mkdir(parents=True, exist_ok=True)
    failed = []
    for s in chosen:
        cmd = [sys.executable, "-m", *s.args] + (["--records", a.records] if a.records else [])
        print(f"[full_run {time.strftime('%H:%M:%S')}] {s.name} (about {s.estimate}): {' '.join(cmd[2:])}", flush=True)
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        state = git_state()
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=REPO_ROOT)
        minutes = (time.perf_counter() - t0) / 60
        print(f"[full_run {time.strftime('%H:%M:%S')}] {s.name}: exit {rc} after {minutes:.1f} min", flush=True)
        record_step(s, code=state["code"], commit=state["commit"], started=started, minutes=minutes, exit_status=rc,
                    path=ledger_path)
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
