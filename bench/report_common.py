"""What BENCHMARKS.md's renderers share: the target lines of sections 1-5 and the *Measured ...* line under
every section. Both ``run_all`` (the whole report) and ``report_network`` (the same targets through the S3-like
network) read them from here, so that neither imports the other."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from . import bench_commit, bench_writer
from .common import REPO_ROOT, RESULTS_DIR, describe_ratio, human_bytes, human_seconds

ALL_SCENARIOS = ("network", "commit", "writer", "e2e", "partitions", "compaction", "peers")  # the order they run in


def target_line(ok: bool | None, text: str) -> str:
    mark = "met" if ok else ("**missed**" if ok is not None else "not measured")
    return f"- {mark}: {text}"


def disagree(spread: dict[str, float] | None, target: float, *, at_most: bool) -> str:
    """A warning when the ratio of the medians lands on the other side of the target than the paired median."""
    if not spread or spread.get("n", 0) <= 1:
        return ""
    ok_paired = spread["paired"] <= target if at_most else spread["paired"] >= target
    ok_medians = spread["of_medians"] <= target if at_most else spread["of_medians"] >= target
    if ok_paired == ok_medians:
        return ""
    return (f" -- but the ratio of the medians ({spread['of_medians']:.2f}x) lands on the other side of {target}x: "
            "the margin is within this run's noise, so the verdict is not a firm one")

def targets(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if "commit" in results:
        s = bench_commit.summarise(results["commit"])
        t = s["targets"].get("job_commit_vs_bare")
        if t:
            how = describe_ratio(t["spread"]) if t.get("spread") else f"{t['ratio']:.2f}x"
            lines.append(target_line(t["met"], f"job commit within 1.25x of the bare CompleteMultipartUpload loop at "
                                                f"{t['files']:,} files: **{how}**" + disagree(t.get("spread"), 1.25, at_most=True)
                                                + ("" if t["met"] else COMMIT_NOTE)))
        b = s["targets"].get("bytes_copied_vs_v1")
        if b:
            parts = ", ".join(f"{f['files']:,} files: {human_bytes(f['mpcommit'])} vs {human_bytes(f['v1'])}" for f in b["sizes"])
            lines.append(target_line(b["met"], f"at least 10x fewer bytes copied server-side than Hadoop v1 at every size ({parts})"))
    if "writer" in results:
        s = bench_writer.summarise(results["writer"])
        t = s["targets"].get("throughput_vs_s3transfer")
        if t:
            how = describe_ratio(t["spread"], "throughputs") if t.get("spread") else f"{t['ratio']:.2f}x"
            if not t["met"] and s.get("diagnostic_spread"):
                how += (f"; the same writer with 10 parts in flight: "
                        f"{describe_ratio(s['diagnostic_spread'], 'throughputs')}")
            lines.append(target_line(t["met"], f"writer throughput at least 0.9x of s3transfer's: **{how}**"
                                                + disagree(t.get("spread"), 0.9, at_most=False)
                                                + ("" if t["met"] else WRITER_THROUGHPUT_NOTE)))
        m = s["targets"].get("writer_memory_within_bound")
        if m:
            traced = f"Python heap peak **{human_bytes(m['traced_peak'])}** (tracemalloc), " if m.get("traced_peak") else ""
            over = ""
            if m.get("traced_peak") and m["traced_peak"] > m["bound"]:
                over = f"{human_bytes(m['traced_peak'] - m['bound'])} over the bound, "
            lines.append(target_line(m["met"], f"writer peak memory within its documented bound of {human_bytes(m['bound'])}: "
                                                f"{traced}{over}worst peak RSS above baseline "
                                                f"{human_bytes(m['peak_max'])}" + ("" if m["met"] else WRITER_MEMORY_NOTE)))
    if "e2e" in results:
        from . import bench_end_to_end

        t = bench_end_to_end.summarise(results["e2e"])["targets"].get("e2e_vs_floor")
        if t:
            lines.append(target_line(t["met"], t["text"] + disagree(t.get("spread"), 1.2, at_most=True)))
    else:
        lines.append(target_line(None, "end to end within 1.2x of the unsafe floor (scenario 4 not run)"))
    c = results.get("compaction")
    if c and "exit_status" in c:
        lines.append(target_line(c["exit_status"] == 0, "compaction's own checks (every merge row-exact; under 1% of "
                                                         "the data of sources >= 5 MiB through the client): see section 5"))
    return lines


COMMIT_NOTE = (
    ". Where the time goes: with the network out of the way, the client's CPU is the difference -- mpcommit's job "
    "commit spends about 25% more client CPU per file than the bare loop (see the CPU columns below: S3Store's "
    "funnel and tenacity around each call, validation, the bounded submission loop), and here the client and "
    "LocalStack share two cores. Projected onto S3, where the commit waits on the network, the two are within 1%.")

WRITER_THROUGHPUT_NOTE = (
    ". Why: the writer keeps at most `max_parts_in_flight` = 2 parts uploading (that is its memory bound), "
    "s3transfer up to 10; the diagnostic run of the same writer with 10 parts in flight, when present, shows how "
    "much of the gap that explains.")

WRITER_MEMORY_NOTE = (
    ". The documented bound counts the writer's part buffers only (one filling, `max_parts_in_flight` uploading); "
    "the measured peaks are the whole uploading process's, which also holds boto3's and the HTTP stack's "
    "allocations while parts are in flight. (Before commit e110292 the writer copied its buffer before waiting "
    "for a free slot, one whole part over the bound: 34.2 MiB of heap in this harness's first full run.)")

def measured_line(data: dict[str, Any]) -> str:
    meta = data.get("meta") or {}
    start = scenario_start(data)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(start)) if start else (meta.get("machine") or {}).get("date", "?")
    cmd = "python -m bench.run_all " + " ".join(meta.get("argv") or [])
    code = code_at(data)
    return (f"_Measured {when}, {human_seconds(data.get('wall_seconds', float('nan')))} of wall time, by `{cmd.strip()}`"
            + (f", against mpcommit at commit {code}" if code else "") + "._")


def scenario_start(data: dict[str, Any]) -> float | None:
    if data.get("started_at"):
        return float(data["started_at"])
    # Older results: the run's start plus the scenarios that ran before this one.
    meta = data.get("meta") or {}
    run_start = meta.get("started")
    if not run_start:
        return None
    start = float(run_start)
    for name in ALL_SCENARIOS:
        if name == data.get("scenario"):
            return start
        prev = RESULTS_DIR / f"{name}.json"
        if prev.exists():
            other = json.loads(prev.read_text())
            if (other.get("meta") or {}).get("started") == run_start:
                start += other.get("wall_seconds", 0)
    return start


def code_at(data: dict[str, Any]) -> str:
    """The commit that was checked out when a scenario started (the code can change under a long run: the
    scenarios that start fresh processes -- writer, partitions, Spark workers, compaction -- pick it up)."""
    start = scenario_start(data)
    if start is None:
        return ""
    r = subprocess.run(["git", "rev-list", "-1", f"--before={int(start)}", "HEAD"], cwd=REPO_ROOT,
                       capture_output=True, text=True)
    return r.stdout.strip()[:7]
