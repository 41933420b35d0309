"""BENCHMARKS.md's tables, regenerated from the raw records (``bench/results/*.jsonl``, :mod:`bench.records`).

    python -m bench.report_tables                       # rewrite every generated block of BENCHMARKS.md
    python -m bench.report_tables --check               # exit 1 if BENCHMARKS.md is not what the records give
    python -m bench.report_tables --print peers         # one table to stdout

Every table is generated, never edited by hand: a block between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``
in BENCHMARKS.md is replaced with what :data:`TABLES` renders from the records. ``smoke-NAME`` blocks render the
smoke runs (``bench/results/smoke/``) with the same code, under a heading that says what they are.

Statistics (all here, tested in bench/tests/test_bench_report.py):

* a figure is the **median** of its runs, with an interval named for what it is (:func:`interval_text`): a
  percentile bootstrap of the median (10,000 resamples, fixed seed) can only land on the values themselves, and
  from up to 5 values it comes out as their range -- "min-max of 5, covers the median 94%" (the range of n values
  holds the median with probability 1 - 2 x 0.5^n), never "95% CI"; where it is narrower than the range, "95%
  bootstrap CI";
* a comparison is the median of **paired ratios**: two runs pair when they belong to the same session and round
  (``pair``) -- they ran back to back, interleaved ABBA, and shared the machine's load -- with its interval named
  the same way, and "one pair" for one;
* the raw count of runs is always shown, so that a reader sees how much a figure rests on.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import RESULTS_DIR, SMOKE_DIR, code_version, load

REPO_ROOT = Path(__file__).resolve().parents[1]
OUTPUT = REPO_ROOT / "BENCHMARKS.md"
MiB = 1024 * 1024
GiB = 1024 * MiB

Run = dict[str, Any]
Sessions = dict[str, dict[str, Any]]


# ---------------------------------------------------------------- statistics
def median(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def bootstrap_median_ci(values: Sequence[float], *, confidence: float = 0.95, resamples: int = 10_000,
                        seed: int = 0) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the median of ``values``; None below 3 values."""
    vals = [float(v) for v in values if v is not None]
    if len(vals) < 3:
        return None
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(vals, k=len(vals))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return meds[int(tail * (resamples - 1))], meds[int((1 - tail) * (resamples - 1))]


@dataclass(frozen=True)
class Summary:
    """A figure: the median of ``n`` values, its bootstrap interval (n >= 3) and range."""

    median: float | None
    n: int
    lo: float | None = None
    hi: float | None = None
    ci: tuple[float, float] | None = None

    @classmethod
    def of(cls, values: Iterable[float | None]) -> "Summary":
        vals = [float(v) for v in values if v is not None]
        if not vals:
            return cls(None, 0)
        return cls(statistics.median(vals), len(vals), min(vals), max(vals), bootstrap_median_ci(vals))


def pair_up(runs: Sequence[Run], num: str, den: str, *, key: str = "variant") -> list[tuple[Run, Run]]:
    """Runs of ``num`` and ``den`` that ran back to back: same session, same round (``pair``)."""
    by_round = {(r.get("session"), r.get("pair")): r for r in runs if r.get(key) == den}
    return [(r, by_round[(r.get("session"), r.get("pair"))]) for r in runs
            if r.get(key) == num and (r.get("session"), r.get("pair")) in by_round]


def paired_ratio(runs: Sequence[Run], num: str, den: str, value: Callable[[Run], float | None], *,
                 key: str = "variant") -> Summary:
    """The median of paired ratios ``value(num run) / value(den run)``, with its interval."""
    ratios = []
    for a, b in pair_up(runs, num, den, key=key):
        x, y = value(a), value(b)
        if x is not None and y:
            ratios.append(x / y)
    return Summary.of(ratios)


# ---------------------------------------------------------------- formatting
def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    if s >= 120:
        return f"{s / 60:,.1f} min"
    if s >= 1:
        return f"{s:,.2f} s"
    return f"{s * 1000:,.0f} ms"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def range_coverage(n: int) -> float:
    """How often the range (min-max) of ``n`` values holds their distribution's median: 1 - 2 x 0.5^n (93.75% for
    5, 50% for 2), whatever the distribution."""
    return 1 - 2 * 0.5 ** n


def interval_kind(s: Summary) -> str:
    """What a figure's interval is, named as it is: the percentile bootstrap of a median of few values can only
    land on the values themselves, and with up to 5 it is their range -- whose coverage of the median is
    :func:`range_coverage`, not 95%. So: ``"range"`` (2 values, or a bootstrap that came out as the range) or
    ``"bootstrap"`` (a 95% percentile-bootstrap interval narrower than the range); ``""`` for none."""
    if s.ci is None:
        return "range" if s.n >= 2 else ""
    return "range" if (s.ci[0], s.ci[1]) == (s.lo, s.hi) else "bootstrap"


def interval_text(s: Summary, fmt: Callable[[float], str], *, unit_n: str = "") -> str:
    """``min-max 0.53-0.63 of 5, covers the median 94%`` or ``95% bootstrap CI 0.53-0.63 of 12``."""
    kind = interval_kind(s)
    n = f"{s.n}{unit_n}"
    if kind == "range":
        assert s.lo is not None and s.hi is not None
        return f"min-max {fmt(s.lo)}-{fmt(s.hi)} of {n}, covers the median {range_coverage(s.n):.0%}"
    if kind == "bootstrap":
        assert s.ci is not None
        return f"95% bootstrap CI {fmt(s.ci[0])}-{fmt(s.ci[1])} of {n}"
    return ""


def fmt_figure(s: Summary, fmt: Callable[[float | None], str] = fmt_seconds) -> str:
    """``12.3 s (min-max 11.9-12.8 s of 5, covers the median 94%)``; a bootstrap interval from enough runs."""
    if s.median is None:
        return "–"
    text = interval_text(s, fmt)
    return f"{fmt(s.median)} ({text})" if text else fmt(s.median)


def fmt_ratio(s: Summary, *, bold: bool = True) -> str:
    """``**0.58x** (min-max 0.53-0.63 of 5 pairs, covers the median 94%)``; "(one pair)"; "–" for none."""
    if s.median is None:
        return "–"
    head = f"**{s.median:.2f}x**" if bold and s.n >= 3 else f"{s.median:.2f}x"
    text = interval_text(s, lambda x: f"{x:.2f}", unit_n=" pairs")
    return f"{head} ({text})" if text else f"{head} (one pair)"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(headers) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    return (["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _num(n: float | None, digits: int = 2) -> str:
    return "–" if n is None else f"{n:,.{digits}f}"


def code_of(session: Mapping[str, Any]) -> str:
    """The version of the product code a session measured: the last commit changing ``mpcommit/`` at its commit
    (recorded since 2026-11-26 evening, else asked of git; the commit itself where git does not know it), marked
    when the work tree had changes under ``mpcommit/``."""
    g = session.get("git", {})
    commit = g.get("commit", "?")
    code = g.get("code") or (code_version(commit) if commit != "?" else "") or commit
    return f"{code}{' +uncommitted changes under mpcommit/' if g.get('dirty') else ''}"


def sessions_line(sessions: Sessions, runs: Sequence[Run]) -> str:
    """Which sessions the runs come from: dates, code version, machine, load -- said under every table."""
    used = [sessions[s] for s in dict.fromkeys(r.get("session") for r in runs) if s in sessions]
    if not used:
        return "_(sessions unknown)_"
    commits = sorted({code_of(s) for s in used})
    dates = sorted(s["started"] for s in used)
    machines = sorted({f"{m.get('cpu', '?')}, {m.get('cores', '?')} logical cores, {m.get('memory_gib', '?')} GiB"
                       for m in (s.get("machine", {}) for s in used)})
    loads = [s["load"][0] for s in used if s.get("load")]
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return (f"_{len(runs)} runs in {len(used)} session(s), {when}; code at {', '.join(commits)}; "
            f"{'; '.join(machines)}; load average (1 min) at the start {min(loads):.1f}-{max(loads):.1f}._"
            if loads else f"_{len(runs)} runs, {when}; code at {', '.join(commits)}._")


def shared_cores_note(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    cores = {sessions.get(r.get("session"), {}).get("machine", {}).get("cores") for r in runs}
    cores.discard(None)
    if cores and max(cores) <= 2:
        return ["", "**Two cores.** The S3 server, the network's proxy and the client (Spark, Python workers) share "
                "them: a client that sends more requests also pays for the server's and the proxy's CPU in its own "
                "wall time. Wall times here carry that contention; the CPU-per-file columns (client, server and "
                "proxy apart) carry the comparison."]
    return []


# ---------------------------------------------------------------- the tables
def _group(runs: Sequence[Run], *keys: str) -> dict[tuple[Any, ...], list[Run]]:
    out: dict[tuple[Any, ...], list[Run]] = {}
    for r in runs:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return out


def _network(sessions: Sessions, r: Run) -> str:
    """The network a run went through: its session's profile name (``s3``, ``s3-cold``, a stress variant), or
    ``raw``."""
    if isinstance(r.get("network"), str):
        return r["network"]
    session = sessions.get(r.get("session"), {})
    name = session.get("network") or "raw"
    profile = (session.get("profile") or {}).get("name")
    return name if name == "raw" or not profile or profile == "none" else str(profile)


def _with_network(sessions: Sessions, runs: Sequence[Run]) -> list[Run]:
    return [{**r, "network": _network(sessions, r)} for r in runs]


PEER_ORDER = ("mpcommit", "magic-tuned", "magic", "directory-tuned", "directory", "v2", "v1")
PEER_LABELS = {
    "mpcommit": "mpcommit.spark.write", "magic-tuned": "S3A magic, tuned", "magic": "S3A magic, Hadoop's defaults",
    "directory-tuned": "S3A directory staging, tuned", "directory": "S3A directory staging, Hadoop's defaults",
    "v2": "FileOutputCommitter v2", "v1": "FileOutputCommitter v1",
}
NETWORK_LABELS = {"raw": "raw (through the counting proxy, no added latency)",
                  "s3": "with the S3-like network (profile `s3`)", "s3-cold": "with the S3-like network, cold prefix (`s3-cold`)",
                  "s3-tail": "with the S3-like network's latency tail (profile `s3-tail`: lognormal, p99 10x the median)"}


def _job_cpu(r: Run) -> float | None:
    cpu = r.get("cpu") or {}
    parts = [cpu.get(k) for k in ("jvm", "python_workers", "driver_python")]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def _per_file_ms(x: float | None, r: Run) -> float | None:
    files = r.get("files") or r.get("files_target")
    return None if x is None or not files else x / files * 1000


def s3a_commit_breakdown(r: Run) -> dict[str, float | None]:
    """What a run's job commit was made of. S3A: its _SUCCESS IOStatistics -- commitJob's duration, the completes
    (``committer_materialize_file``: count and summed duration) -- and the proxy's summed time per
    CompleteMultipartUpload; mpcommit: its report's phases. ``in_flight`` = summed complete time / complete phase."""
    out: dict[str, float | None] = {"job_commit": r.get("job_commit_s")}
    complete_at_proxy = (r.get("op_seconds") or {}).get("CompleteMultipartUpload")
    if r.get("variant") == "mpcommit":
        t = r.get("mp_timings") or {}
        out.update(commit_job=t.get("total"), complete_phase=t.get("complete"),
                   completes=(r.get("requests") or {}).get("CompleteMultipartUpload"),
                   outside=(t.get("total") or 0) - (t.get("complete") or 0) if t.get("total") is not None else None)
        for k in ("validate", "replace", "abort_leftovers", "success", "cleanup"):
            out[k] = t.get(k)
        phase = t.get("complete")
    else:
        s = r.get("success") or {}
        durations = s.get("durations_ms") or {}
        counters = s.get("counters") or {}
        cj = (durations.get("committer_commit_job.mean") or {}).get("sum")
        mat = durations.get("committer_materialize_file.mean") or {}
        out.update(commit_job=cj / 1000 if cj is not None else None,
                   completes=counters.get("committer_commits_completed"),
                   complete_sum=mat.get("sum", 0) / 1000 if mat else None)
        phase = out["commit_job"]
        if out["job_commit"] is not None and phase is not None:
            out["outside"] = out["job_commit"] - phase
    out["mean_complete_ms"] = (complete_at_proxy / out["completes"] * 1000
                               if complete_at_proxy and out.get("completes") else None)
    out["in_flight"] = complete_at_proxy / phase if complete_at_proxy and phase else None
    return out


def render_peers(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    runs = _with_network(sessions, runs)
    out: list[str] = []
    for (network, files), rs in sorted(_group(runs, "network", "files_target").items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        variants = [v for v in PEER_ORDER if any(r["variant"] == v for r in rs)]
        base = "magic-tuned" if "magic-tuned" in variants else ("magic" if "magic" in variants else None)
        out += ["", f"**{files:,} files, {NETWORK_LABELS.get(network, network)}**", ""]
        rows = []
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            rows.append([
                PEER_LABELS.get(v, v), len(vr), fmt_figure(Summary.of(r["seconds"] for r in vr)),
                fmt_ratio(paired_ratio(rs, v, base, lambda r: r["seconds"])) if base and v != base else "1.00x" if v == base else "–",
                fmt_figure(Summary.of(r.get("job_commit_s") for r in vr)),
                fmt_ratio(paired_ratio(rs, v, base, lambda r: r.get("job_commit_s"))) if base and v != base else "1.00x" if v == base else "–",
                _num(median(r["requests_total"] / r["files"] for r in vr if r.get("files"))),
                _num(median(_per_file_ms(_job_cpu(r), r) for r in vr)),
                _num(median(_per_file_ms((r.get("cpu") or {}).get("server"), r) for r in vr)),
                _num(median(_per_file_ms((r.get("cpu") or {}).get("proxy"), r) for r in vr)),
                str(sum(r.get("throttled", 0) for r in vr)),
            ])
        out += md_table(["committer", "runs", "end to end (median)", f"÷ {PEER_LABELS.get(base or '', '–')}",
                         "job commit", f"÷ {PEER_LABELS.get(base or '', '–')}", "requests per file",
                         "CPU ms/file: job (JVM + Python)", "S3 server", "proxy", "503s"], rows)
        # What each run wrote: the same rows, tasks, slots, files, codec and bytes, or the table says otherwise.
        shape_rows = []
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            shape_rows.append([PEER_LABELS.get(v, v), _distinct(r.get("rows_expected") for r in vr),
                               _distinct(r.get("tasks") for r in vr), _distinct(r.get("slots") for r in vr),
                               _distinct(r.get("files") for r in vr), _distinct(r.get("compression") for r in vr),
                               fmt_bytes(median(r.get("bytes") for r in vr)),
                               _distinct(r.get("pending_left") for r in vr), _distinct(r.get("rows") for r in vr)])
        out += ["", "What every run wrote (distinct values across the runs; rows counted from the footers in the first "
                "round when asked):", ""]
        out += md_table(["committer", "rows", "tasks", "slots", "files", "codec", "bytes (median)",
                         "uploads left pending", "rows counted"], shape_rows)
        # Why: the job commit broken down.
        brk = []
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            parts = [s3a_commit_breakdown(r) for r in vr]
            brk.append([PEER_LABELS.get(v, v), fmt_seconds(median(p["job_commit"] for p in parts)),
                        fmt_seconds(median(p.get("commit_job") for p in parts)),
                        _num(median(p.get("completes") for p in parts), 0),
                        _num(median(p.get("mean_complete_ms") for p in parts), 1),
                        _num(median(p.get("in_flight") for p in parts), 1),
                        fmt_seconds(median(p.get("outside") for p in parts))])
        out += ["", "The job commit, broken down (medians): S3A's from its `_SUCCESS` IOStatistics "
                "(`committer_commit_job`, `committer_commits_completed`), mpcommit's from its report; for both, the "
                "proxy's time per CompleteMultipartUpload and the completes kept in flight (their summed time at the "
                "proxy ÷ the commit's complete phase):", ""]
        out += md_table(["committer", "job commit (Spark's metric / mpcommit's report)", "S3A commitJob / mpcommit's total",
                         "completes", "ms per complete at the proxy", "completes in flight", "outside the completes"], brk)
        out += ["", sessions_line(sessions, rs)]
        out += shared_cores_note(sessions, rs)
    return out or ["", "_No records yet._"]


def _distinct(values: Iterable[Any]) -> str:
    vals = sorted({v for v in values if v is not None}, key=str)
    if not vals:
        return "–"
    return ", ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in vals)


def render_peer_settings(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """The S3A settings in effect per variant, as the runs recorded them."""
    variants = [v for v in PEER_ORDER if v != "mpcommit" and any(r.get("variant") == v for r in runs)]
    if not variants:
        return ["", "_No records yet._"]
    keys = sorted({k for r in runs if r.get("variant") in variants for k in (r.get("settings") or {}) if k.startswith("fs.")})
    rows = []
    for k in keys:
        rows.append([f"`{k}`"] + [_distinct((r.get("settings") or {}).get(k) for r in runs if r.get("variant") == v)
                                 for v in variants])
    return ["", *md_table(["setting in effect"] + [PEER_LABELS[v] for v in variants], rows, "l" + "l" * len(variants))]


COMMIT_LABELS = {"commit": "`Job.commit` (CRT completes, adaptive window)",
                 "bare-crt": "bare loop on the same transport and window (the floor)",
                 "bare": "bare boto3 loop (not a floor)", "commit-botocore": "`Job.commit`, botocore lean path",
                 "commit-boto3": "`Job.commit`, every request through boto3"}
#: The network of the commit-at-scale runs without the proxy: straight to the stub.
COMMIT_NETWORK_LABELS = {**NETWORK_LABELS, "raw": "straight to the stub (no proxy, no added latency)"}


#: The same variants run by code from before the adaptive window (2026-11-26 morning's smoke runs): their records
#: carry no ``window_peak``, and their completes ran on a fixed number of threads.
PRE_WINDOW_LABELS = {"commit": "`Job.commit` (CRT completes on fixed threads: code before the adaptive window)",
                     "bare-crt": "bare CRT loop on the same fixed threads (the floor)"}


def _commit_label(v: str, sessions: Sessions, rs: Sequence[Run]) -> str:
    """A variant's label, as its records show it ran; ``commit@NAME`` names the checkout it ran (its commit, from
    the session's ``trees``)."""
    if "@" not in v:
        if v in PRE_WINDOW_LABELS and not any(r.get("window_peak") for r in rs if r["variant"] == v):
            return PRE_WINDOW_LABELS[v]
        return COMMIT_LABELS.get(v, v)
    name = v.split("@", 1)[1]
    trees = [sessions.get(r["session"], {}).get("trees", {}).get(name, {}) for r in rs if r["variant"] == v]
    commits = _distinct(t.get("commit") for t in trees)
    return f"`Job.commit` at `{name}` ({commits})"


def render_commit_scale(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Per size and network, and per plan (the variants a session ran together): each variant against the plan's
    reference -- the floor (``bare-crt``), or else the code it is compared with (a ``commit@NAME``)."""
    runs = [{**r, "plan": " ".join(sorted({x["variant"] for x in runs if x.get("session") == r.get("session")}))}
            for r in _with_network(sessions, runs)]
    out: list[str] = []
    groups = sorted(_group(runs, "network", "files", "plan").items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2]))
    for (network, files, _plan), rs in groups:
        variants = list(dict.fromkeys(r["variant"] for r in rs))
        before = [v for v in variants if "@" in v]
        base = "bare-crt" if "bare-crt" in variants else (before[-1] if before else None)
        vs = "floor" if base == "bare-crt" else f"`{base}`" if base else "floor"
        threads = _distinct(sessions.get(r["session"], {}).get("threads") for r in rs)
        out += ["", f"**{files:,} files, {COMMIT_NETWORK_LABELS.get(network, network)}, {threads} threads"
                + (f": against {vs}" if base and base != "bare-crt" else "") + "**", ""]
        rows = []
        rs_ok = [r for r in rs if r.get("outcome", "ok") == "ok"]  # a failed run pairs with nothing
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            ok = [r for r in vr if r.get("outcome", "ok") == "ok"]
            rows.append([
                _commit_label(v, sessions, rs), f"{len(vr)}" + (f" ({len(vr) - len(ok)} failed)" if len(ok) < len(vr) else ""),
                fmt_figure(Summary.of(r["wall_s"] for r in ok)),
                _num(median(r.get("completes_per_s") for r in ok), 0),
                fmt_figure(Summary.of(r["cpu_ms_per_file"] for r in ok), lambda x: "–" if x is None else f"{x:.3f}"),
                fmt_ratio(paired_ratio(rs_ok, v, base, lambda r: r["cpu_s"])) if base and v != base else "–",
                fmt_ratio(paired_ratio(rs_ok, v, base, lambda r: r["wall_s"])) if base and v != base else "–",
                _num(median(r.get("window_peak") for r in vr), 0),
                _num(median(r.get("max_in_flight") for r in vr), 0),
                _num(median(r.get("slowdowns") for r in vr), 0), _num(median(r.get("retries") for r in vr), 0),
                _num(median(_ms_per(r.get("proxy_cpu_s"), files) for r in vr), 3),
                _num(median(_ms_per(r.get("stub_cpu_s"), files) for r in vr), 3),
            ])
        out += md_table(["variant", "runs", "wall (median)", "completes/s through the driver", "client CPU ms/file",
                         f"÷ {vs}, CPU", f"÷ {vs}, wall", "window peak", "most in flight (proxy)", "503s (median)",
                         "retries (median)", "proxy CPU ms/file", "stub CPU ms/file"], rows)
        failed = [r for r in rs if r.get("outcome", "ok") != "ok"]
        for r in failed[:3]:
            out.append(f"\n- {r['variant']}, round {r.get('pair')}: {r['outcome']}")
        out += ["", sessions_line(sessions, rs)]
        out += shared_cores_note(sessions, rs)
    return out or ["", "_No records yet._"]


def _ms_per(seconds: float | None, files: int | None) -> float | None:
    return None if seconds is None or not files else seconds / files * 1000


def render_commit_rate(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Issue 25 item 6's measure: completes per second through one driver under the network model."""
    runs = [r for r in _with_network(sessions, runs) if r["network"] != "raw" and r["variant"] == "commit"]
    if not runs:
        return ["", "_No records yet: `python -m bench.bench_commit_scale cpu --network s3 ...` (see the method)._"]
    rows = []
    for (network, files), rs in sorted(_group(runs, "network", "files").items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        ok = [r for r in rs if r.get("outcome", "ok") == "ok"]
        rate = median(r.get("completes_per_s") for r in ok)
        rows.append([network, f"{files:,}", _distinct(sessions.get(r["session"], {}).get("threads") for r in rs),
                     len(rs), len(rs) - len(ok), fmt_figure(Summary.of(r.get("completes_per_s") for r in ok),
                                                            lambda x: "–" if x is None else f"{x:,.0f}"),
                     fmt_figure(Summary.of(r["wall_s"] for r in ok)),
                     fmt_figure(Summary.of(r["cpu_ms_per_file"] for r in ok), lambda x: "–" if x is None else f"{x:.3f}"),
                     _num(median(r.get("window_peak") for r in rs), 0),
                     _num(median(r.get("slowdowns") for r in rs), 0), _num(median(r.get("retries") for r in rs), 0),
                     _rate_verdict(files, rate, median(r["cpu_ms_per_file"] for r in ok), len(ok) < len(rs))])
    return ["", *md_table(["network", "files", "commit threads (the window's start)", "runs", "failed",
                           "completes/s (median)", "final time", "client CPU ms/file", "window peak", "503s",
                           "retries", "target: >= 3,000/s, <= 0.35 ms/file, no failure"], rows),
            "", sessions_line(sessions, runs)]


def render_commit_local(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """The commit against LocalStack or moto with real uploads: the adaptive window where the server is the limit,
    against the code before it (pairs of one session and round)."""
    if not runs:
        return ["", "_No records yet: `python -m bench.bench_commit_scale local --server localstack ...`._"]
    out: list[str] = []
    for (server, files), rs in sorted(_group([{**r, "server": sessions.get(r["session"], {}).get("server")}
                                              for r in runs], "server", "files").items(), key=lambda kv: str(kv[0])):
        variants = list(dict.fromkeys(r["variant"] for r in rs))
        base = next((v for v in variants if "@" in v), None)
        ok = [r for r in rs if r.get("outcome", "ok") == "ok"]
        rows = []
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            vok = [r for r in vr if r.get("outcome", "ok") == "ok"]
            rows.append([_commit_label(v, sessions, rs), f"{len(vr)}" + (f" ({len(vr) - len(vok)} failed)" if len(vok) < len(vr) else ""),
                         fmt_figure(Summary.of(r["wall_s"] for r in vok)),
                         fmt_figure(Summary.of(r.get("completes_per_s") for r in vok), lambda x: "–" if x is None else f"{x:,.0f}"),
                         fmt_ratio(paired_ratio(ok, v, base, lambda r: r["wall_s"])) if base and v != base else "–",
                         _num(median(r["cpu_ms_per_file"] for r in vok), 3),
                         _num(median(_ms_per(r.get("server_cpu_s"), files) for r in vok), 3),
                         _num(median(r.get("window_peak") for r in vr), 0), _num(median(r.get("window_final") for r in vr), 0)])
        out += ["", f"**{files:,} files on {server}, real uploads**", ""]
        out += md_table(["variant", "runs", "wall (median)", "completes/s (median)", f"÷ `{base}`, wall" if base else "÷",
                         "client CPU ms/file", "server CPU ms/file", "window peak", "window at the end"], rows)
        out += ["", sessions_line(sessions, rs)]
    return out


def _rate_verdict(files: int, rate: float | None, cpu: float | None, any_failed: bool) -> str:
    """Item 6's target is judged at its own size (100,000 files); smaller runs only show the rate."""
    if files < 100_000:
        return "– (judged at 100,000 files)"
    met = rate is not None and rate >= 3000 and cpu is not None and cpu <= 0.35 and not any_failed
    return "met" if met else "**missed**"


def runs_by_code(sessions: Sessions, runs: Sequence[Run]) -> dict[str, list[Run]]:
    """The runs by the commit of the code they measured, oldest first (by their first session's start): a table
    per version, so that a change is read against the code before it and never averaged with it."""
    by_code: dict[str, list[Run]] = {}
    for r in runs:
        by_code.setdefault(code_of(sessions.get(r.get("session"), {})), []).append(r)
    first = {code: min(sessions.get(r.get("session"), {}).get("started", "") for r in rs) for code, rs in by_code.items()}
    return {code: by_code[code] for code in sorted(by_code, key=lambda c: first[c])}


def render_driver_memory(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Issue 25 item 5: a table per version of the code measured (oldest first), growth computed within each."""
    failed = [r for r in runs if not r.get("files")]
    runs = [r for r in runs if r.get("files")]
    if not runs:
        return ["", "_No records yet._"] + [f"- failed: {r.get('variant')}: {r.get('failed')}" for r in failed]
    by_code = runs_by_code(sessions, runs)
    out: list[str] = []
    for code, rs in by_code.items():
        if len(by_code) > 1:
            out += ["", f"**Code at {code}**"]
        out += _driver_memory_of_one_code(sessions, rs)
    out += [f"- failed: {r.get('variant')} ({r.get('session')}): {r.get('failed')}" for r in failed]
    return out


def _driver_memory_of_one_code(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    out: list[str] = [""]
    rows = []
    for (variant, files), rs in sorted(_group(runs, "variant", "files").items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        rows.append([variant, f"{files:,}", len(rs), _distinct(r.get("tasks") for r in rs),
                     f"{_distinct(r.get('inline') for r in rs)}", fmt_figure(Summary.of(r.get("rss_growth_mib") for r in rs), _mib),
                     fmt_figure(Summary.of(r.get("heap_peak_mib") for r in rs), _mib),
                     _mib(median((r.get("rows_bytes") or 0) / MiB for r in rs)) if any(r.get("rows_bytes") for r in rs) else "–",
                     fmt_seconds(median(r.get("commit_s") for r in rs)),
                     _mib(median((r.get("jvm_rss_growth_mib")) for r in rs)) if any(r.get("jvm_rss_growth_mib") is not None for r in rs) else "–",
                     fmt_bytes(median(r.get("success_bytes") for r in rs))])
    out += md_table(["path", "files", "runs", "tasks", "results with the manifest in-line",
                     "driver RSS growth (peak)", "driver heap peak (tracemalloc)", "collected results (size)",
                     "job commit", "Spark JVM RSS growth (local mode: holds the executors too)", "`_SUCCESS`"], rows)
    growth = []
    for variant, rs in _group(runs, "variant").items():
        by_files = {f: median(r.get("rss_growth_mib") for r in g) for (f,), g in _group(rs, "files").items()}
        heap = {f: median(r.get("heap_peak_mib") for r in g) for (f,), g in _group(rs, "files").items()}
        for big in sorted(f for f in by_files if f and f > 10_000):
            if 10_000 in by_files and by_files[big] is not None and by_files[10_000] is not None:
                g_rss = by_files[big] - by_files[10_000]
                g_heap = (heap.get(big) or 0) - (heap.get(10_000) or 0)
                verdict = "" if big < 1_000_000 else (" -- **within** the 100 MiB bound" if max(g_rss, g_heap) < 100
                                                      else " -- **over** the 100 MiB bound (issue 25 item 5)")
                name = variant[0] if isinstance(variant, tuple) else variant
                growth.append(f"- {name}, 10,000 -> {big:,} files: RSS {g_rss:+.1f} MiB, heap {g_heap:+.1f} MiB{verdict}")
    if growth:
        out += ["", "Growth with the files (medians):", "", *growth]
    for variant, rs in _group([r for r in runs if r.get("sites_at_success")], "variant").items():
        top = max(rs, key=lambda r: r.get("files") or 0)
        out += ["", f"Where the heap is just before `_SUCCESS` is written ({variant[0]}, {top['files']:,} files; "
                "tracemalloc by allocation site, the 8 largest; `bench_driver_memory.py` is the collected results):", ""]
        out += md_table(["site", "MiB", "blocks", "bytes per file"],
                        [[f"`{s['site']}`", f"{s['mib']:.1f}", f"{s['blocks']:,}", f"{s['mib'] * MiB / top['files']:.0f}"]
                         for s in top["sites_at_success"][:8]], "lrrr")
    out += ["", sessions_line(sessions, runs)]
    return out


def _mib(x: float | None) -> str:
    return "–" if x is None else f"{x:,.1f} MiB"


COMPACTION_LABELS = {"multipart": "multipart merge (mpcommit)", "rewrite-equal": "download-and-rewrite, the merge's footing",
                     "rewrite": "download-and-rewrite, 8 connections, 1 file (old baseline)"}


def render_compaction(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    runs = _with_network(sessions, runs)
    out: list[str] = []
    for (network, dataset), rs in sorted(_group(runs, "network", "dataset").items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        size = median(r.get("data_bytes") for r in rs)
        out += ["", f"**{dataset} ({fmt_bytes(size)}, {_distinct(r.get('sources') for r in rs)} files), "
                f"{NETWORK_LABELS.get(network, network)}**", ""]
        rows = []
        for v in [v for v in ("multipart", "rewrite-equal", "rewrite") if any(r["variant"] == v for r in rs)]:
            vr = [r for r in rs if r["variant"] == v]
            ratio = paired_ratio(rs, "multipart", v, lambda r: r["seconds"]) if v != "multipart" else None
            speed = "–" if ratio is None else fmt_ratio(paired_ratio(rs, v, "multipart", lambda r: r["seconds"]), bold=False)
            rows.append([COMPACTION_LABELS.get(v, v), len(vr), fmt_figure(Summary.of(r["seconds"] for r in vr)),
                         fmt_ratio(ratio) if ratio else "–", speed, _distinct(r.get("outputs") for r in vr),
                         _num(median(r.get("requests_total") for r in vr), 0),
                         fmt_bytes(median(r.get("through_client") for r in vr)),
                         _num(median(r.get("client_cpu_s") for r in vr)), _num(median(r.get("server_cpu_s") for r in vr)),
                         _num(median(r.get("proxy_cpu_s") for r in vr)),
                         "yes" if all(r.get("rows_ok") for r in vr) else "**NO**"])
        out += md_table(["variant", "runs", "time (median)", "merge ÷ this", "merge's speed-up", "files written",
                         "requests", "through the client", "client CPU s", "server CPU s", "proxy CPU s", "rows exact"], rows)
        out += ["", sessions_line(sessions, rs)]
        out += shared_cores_note(sessions, rs)
    return out or ["", "_No records yet._"]


#: The copy rate a public source supports (Hadoop's measured 6-10 MB/s): where the compaction target is judged.
SOURCED_COPY_RATE = 8e6


def render_compaction_sensitivity(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Issue 39 item 4: the merge against the equal-footing rewrite at >= 2 GiB with latency, per server, copy rate
    of the model and cap on the client host's link (each from its session), the target judged at the rate a source
    supports -- with the share of answers the proxy found later than the model's latency: a server that answers
    late, not the model, set that row's pace."""
    rows = []
    keyed = []
    for r in runs:
        session = sessions.get(r.get("session"), {})
        profile = session.get("profile") or {}
        if not profile or (r.get("data_bytes") or 0) < 2 * GiB:
            continue
        keyed.append({**r, "copy_rate": profile.get("copy_rate"), "host": profile.get("host_bandwidth") or 0,
                      "server_name": _server_name(session.get("server"))})
    for (server, rate, host, dataset), rs in sorted(_group(keyed, "server_name", "copy_rate", "host", "dataset").items(),
                                                   key=lambda kv: (str(kv[0][0]), kv[0][1] or 0, kv[0][2] or 0, str(kv[0][3]))):
        speed = paired_ratio(rs, "rewrite-equal", "multipart", lambda r: r["seconds"])
        judged_here = rate == SOURCED_COPY_RATE
        verdict = ("–" if speed.median is None else
                   ("met" if speed.median >= 3 else "**missed**") if judged_here else
                   ("would be met" if speed.median >= 3 else "would be missed"))
        late = [r.get("late") for r in rs if r.get("late") is not None]
        rows.append([server, f"{(rate or 0) / 1e6:g} MB/s" + (" (sourced)" if judged_here else " (assumed)"),
                     f"{host * 8 / 1e9:g} Gb/s" if host else "none", f"{dataset} ({fmt_bytes(median(r.get('data_bytes') for r in rs))})",
                     fmt_figure(Summary.of(r["seconds"] for r in rs if r["variant"] == "multipart")),
                     fmt_figure(Summary.of(r["seconds"] for r in rs if r["variant"] == "rewrite-equal")),
                     f"{100 * min(late):.0f}-{100 * max(late):.0f}%" if late else "–",
                     fmt_ratio(speed), verdict])
    if not rows:
        return ["", "_No records yet: the full run's `compaction-sensitivity-*` steps._"]
    return ["", *md_table(["server", "copy rate per request", "client host's link", "dataset", "merge",
                           "rewrite (equal footing)", "answers late", "merge's speed-up",
                           "target >= 3x (judged at the sourced rate)"], rows, "lllrrrrrl"),
            "", sessions_line(sessions, [r for r in runs if r.get("data_bytes", 0) >= 2 * GiB])]


def _server_name(description: str | None) -> str:
    """The server a session names, in a word or two: 'LocalStack 4.13.1 (host mode, ...), through the S3-like
    network (...)' -> 'LocalStack 4.13.1'."""
    text = (description or "–").split(", through the")[0]
    return text.split(" (")[0].strip() or "–"


#: bench_task_scale's raw runs go straight to the server: no proxy counts them (the peers' raw runs have one).
TASK_SCALE_NETWORK_LABELS = {**NETWORK_LABELS, "raw": "raw (straight to the server, no proxy, no added latency)"}


def render_task_scale(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    runs = _with_network(sessions, runs)
    out: list[str] = []
    for (network, partitions), rs in sorted(_group(runs, "network", "partitions").items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        out += ["", f"**{partitions:,} partitions in one task, {TASK_SCALE_NETWORK_LABELS.get(network, network)}**", ""]
        rows = []
        for v in [v for v in ("mpcommit", "pyarrow", "serial") if any(r["variant"] == v for r in rs)]:
            vr = [r for r in rs if r["variant"] == v]
            rows.append([v, len(vr), fmt_figure(Summary.of(r["seconds"] for r in vr)),
                         fmt_seconds(median(r.get("commit_s") for r in vr)),
                         fmt_figure(Summary.of(r.get("total_s", r["seconds"] + r.get("commit_s", 0)) for r in vr)),
                         fmt_ratio(paired_ratio(rs, v, "pyarrow", lambda r: r.get("total_s", r["seconds"] + r.get("commit_s", 0))))
                         if v != "pyarrow" else "1.00x",
                         fmt_ratio(paired_ratio(rs, v, "pyarrow", lambda r: r["seconds"]), bold=False) if v != "pyarrow" else "1.00x",
                         _distinct(r.get("files") for r in vr), fmt_bytes(median(r.get("bytes") for r in vr)),
                         fmt_bytes(median(r.get("peak_rss") for r in vr)), _num(median(r.get("server_cpu_s") for r in vr))])
        out += md_table(["variant", "runs", "task (median)", "job commit", "task + job commit (files visible)",
                         "÷ pyarrow, files visible", "÷ pyarrow, task alone", "files", "bytes", "peak RSS above baseline",
                         "server CPU s"], rows)
        out += ["", sessions_line(sessions, rs)]
    return out or ["", "_No records yet._"]


def render_writer(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    runs = [r for r in _with_network(sessions, runs) if (r.get("pair") or 0) >= 0]
    out: list[str] = []
    for (network, size), rs in sorted(_group(runs, "network", "size").items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        out += ["", f"**One upload of {fmt_bytes(size)}, {NETWORK_LABELS.get(network, network)}**", ""]

        def tput(r: Run) -> float:
            return r["size"] / r["seconds"] / MiB

        rows = []
        for v in dict.fromkeys(r["variant"] for r in rs):
            vr = [r for r in rs if r["variant"] == v]
            rows.append([v, len(vr), fmt_figure(Summary.of(tput(r) for r in vr), lambda x: "–" if x is None else f"{x:.1f} MiB/s"),
                         fmt_bytes(median(r.get("peak") for r in vr)), fmt_bytes(median(r.get("bound") for r in vr))])
        out += md_table(["variant", "runs", "throughput (median)", "peak RSS above baseline", "buffering by its settings"], rows)
        pairs = [("mpcommit", "s3transfer2"), ("mpcommit4", "s3transfer4"), ("mpcommit4", "mpcommit")]
        lines = [f"- throughput {a} ÷ {b}: {fmt_ratio(paired_ratio(rs, a, b, tput))}" for a, b in pairs
                 if any(r["variant"] == a for r in rs) and any(r["variant"] == b for r in rs)]
        out += ["", *lines, "", sessions_line(sessions, rs)]
    return out or ["", "_No records yet._"]


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by the nearest-rank method: a value that was measured, never interpolated."""
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return None
    rank = max(1, -(-len(vals) * q // 100))  # ceil(n * q / 100), at least 1
    return vals[int(rank) - 1]


STREAM_NETWORKS = {"raw": "none (straight to the server)", "s3": "the S3-like network (profile `s3`)"}
TWO_CORES_WALL = ("Wall times on 2 shared cores: the S3 server (moto, a process of its own), the network's proxy and "
                  "the client share them with other sessions' work; the load average above says how busy they were.")
DOOR_LABELS = {"source": 'df.write.format("mpcommit")', "writer": "mpcommit.spark.writer(df)"}


def render_datasource_door(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Issue 24: the data source's batch write against the fluent writer on the same DataFrame."""
    out: list[str] = []
    for (rows,), rs in sorted(_group(runs, "rows").items(), key=lambda kv: kv[0][0] or 0):
        ratio = paired_ratio(rs, "source", "writer", lambda r: r["seconds"])
        rows_ = []
        for v in ("source", "writer"):
            vr = [r for r in rs if r["variant"] == v]
            rows_.append([DOOR_LABELS[v], len(vr), fmt_figure(Summary.of(r["seconds"] for r in vr)),
                          fmt_ratio(ratio) if v == "source" else "1.00x", _distinct(r.get("files") for r in vr)])
        if ratio.ci is not None:
            verdict = ("met" if ratio.ci[1] <= 1.05 else "not met" if ratio.ci[0] > 1.05 else
                       f"not shown: the interval reaches past 1.05x (median {ratio.median:.2f}x)")
        else:
            verdict = "– (too few pairs)"
        out += ["", f"**{rows:,} rows, Parquet, overwrite, ABBA pairs**", ""]
        out += md_table(["door", "runs", "wall (median)", "÷ writer(df), paired", "files"], rows_)
        out += ["", f"Target (issue 24): the data source <= 1.05x `writer(df)`: **{verdict}**.", "",
                sessions_line(sessions, rs), "", TWO_CORES_WALL]
    return out or ["", "_No records yet._"]


def render_stream_commit(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Issue 24: the streaming sink's commit per micro-batch, driver side, p50 and p95 -- a table per version of
    the code measured (oldest first), so that a change to the sink is read against the code before it."""
    if not runs:
        return ["", "_No records yet._"]
    by_code = runs_by_code(sessions, runs)
    out: list[str] = []
    for code, rs in by_code.items():
        rows = []
        for (network, files), group in sorted(_group(rs, "network", "files").items(),
                                              key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
            times = [r["seconds"] for r in group]
            p50, p95 = percentile(times, 50), percentile(times, 95)
            target = "–"
            if network == "s3" and files == 100:
                target = "met" if p95 is not None and p95 < 1 else "not met"
            rows.append([STREAM_NETWORKS.get(network, network), f"{files:,}", len(group), fmt_seconds(p50),
                         fmt_seconds(p95), fmt_seconds(max(times)), target])
        if len(by_code) > 1:
            out += ["", f"**Code at {code}**"]
        out += ["", *md_table(["network", "files per micro-batch", "micro-batches", "p50", "p95", "max",
                               "target: < 1 s at 100 files with latency (p95)"], rows), "", sessions_line(sessions, rs)]
    return [*out, "", TWO_CORES_WALL]


def render_network_model(_sessions: Sessions, _runs: Sequence[Run]) -> list[str]:
    from tests.support.s3_network import SOURCES

    return ["", *md_table(["parameter", "value", "source"], [[n, v, src] for n, v, src in SOURCES], "lll")]


def render_s3a_tuning(_sessions: Sessions, _runs: Sequence[Run]) -> list[str]:
    from .bench_spark_peers import S3A_TUNING

    return ["", *md_table(["setting", "tuned", "Hadoop 3.5.0's default", "for", "why"],
                          [[f"`{t['key']}`", t["value"], t["default"], t["applies"], t["why"]] for t in S3A_TUNING], "lllll")]


# ---------------------------------------------------------------- registry and splicing
@dataclass(frozen=True)
class Table:
    name: str
    scenario: str | None  # the records file (bench/results/<scenario>.jsonl); None: from code alone
    render: Callable[[Sessions, Sequence[Run]], list[str]]
    splits_by_code: bool = False  # renders a table per version of the code itself (runs_by_code)


TABLES: tuple[Table, ...] = (
    Table("network-model", None, render_network_model),
    Table("s3a-tuning", None, render_s3a_tuning),
    Table("peers", "peers", render_peers),
    Table("peer-settings", "peers", render_peer_settings),
    Table("commit-scale", "commit_scale", render_commit_scale),
    Table("commit-rate", "commit_scale", render_commit_rate),
    Table("commit-local", "commit_local", render_commit_local),
    Table("driver-memory", "driver_memory", render_driver_memory, splits_by_code=True),
    Table("compaction", "compaction", render_compaction),
    Table("task-scale", "task_scale", render_task_scale),
    Table("writer", "writer", render_writer),
    Table("datasource-door", "datasource_door", render_datasource_door),
    Table("stream-commit", "stream_commit", render_stream_commit, splits_by_code=True),
    Table("executor", "executor", lambda sessions, runs: render_executor(sessions, runs)),
    Table("compaction-sensitivity", "compaction", lambda sessions, runs: render_compaction_sensitivity(sessions, runs)),
    Table("task-cpu", "task_cpu", lambda sessions, runs: render_task_cpu(sessions, runs)),
)


def render(table: Table, directory: Path, head: str | None = None) -> list[str]:
    """``table`` from the records in ``directory``. Runs of different product code are never mixed: runs of the
    code at ``head`` (default: HEAD's version) first, under a heading that says so, then each older version
    apart, newest first, each under "as measured then" -- also when no run measured the code at ``head`` (a
    product change since the last full run): its figures are then labelled as older code's, never pooled."""
    sessions, runs = load([directory / f"{table.scenario}.jsonl"]) if table.scenario else ({}, [])
    if not runs or table.splits_by_code:
        return table.render(sessions, runs)
    head = head or code_version("HEAD") or "?"
    by_code = runs_by_code(sessions, runs)
    if list(by_code) == [head]:
        return table.render(sessions, runs)
    out: list[str] = []
    for code in [head, *reversed([c for c in by_code if c != head])]:
        if code not in by_code:
            continue
        title = (f"**At the product code of this commit ({head})**" if code == head
                 else f"**At older code ({code}), as measured then**")
        out += [title, "", *table.render(sessions, by_code[code]), ""]
    return out[:-1]


def render_current(table: Table, directory: Path, head: str | None = None) -> list[str]:
    """The Results block of ``table``: only the runs of the product code at ``head`` (default: HEAD's version).
    When no run measured that code yet (a product change since the last full run), the newest older version's
    runs, labelled as such. Every other version's runs are in :func:`render_history`'s block, never here."""
    sessions, runs = load([directory / f"{table.scenario}.jsonl"]) if table.scenario else ({}, [])
    if not runs:
        return table.render(sessions, runs)
    head = head or code_version("HEAD") or "?"
    by_code = runs_by_code(sessions, runs)
    older = [c for c in by_code if c != head]
    if head in by_code:
        title = ([f"**At the product code of this commit ({head})**; the runs of older code are in the History "
                  "section, as measured then.", ""] if older else [])
        return [*title, *table.render(sessions, by_code[head])]
    newest = older[-1]
    return [f"**At older code ({newest}), as measured then**: no run has measured the product code of this commit "
            f"({head}) yet; the runs of still older code are in the History section.", "",
            *table.render(sessions, by_code[newest])]


def render_history(table: Table, directory: Path, head: str | None = None) -> list[str]:
    """The History block of ``table``: each version of the product code that :func:`render_current` does not
    show, newest first, apart and as measured then (its tables' footers give the dates)."""
    sessions, runs = load([directory / f"{table.scenario}.jsonl"]) if table.scenario else ({}, [])
    head = head or code_version("HEAD") or "?"
    by_code = runs_by_code(sessions, runs)
    shown = head if head in by_code else (list(by_code)[-1] if by_code else None)
    out: list[str] = []
    for code in reversed([c for c in by_code if c != shown]):
        out += [f"**At code {code}, as measured then**", "", *table.render(sessions, by_code[code]), ""]
    return out[:-1] or ["_No runs at older code._"]


def render_code_versions(results: Path, head: str | None = None) -> list[str]:
    """Issue 25's "at one named commit": for each records file, how many of its runs measured the product code as
    it is at ``head`` (default: HEAD's :func:`~bench.records.code_version`) and which older versions the rest
    measured -- so that a reader sees at once which tables describe the code of this commit."""
    head = head or code_version("HEAD") or "?"
    rows = []
    for scenario in dict.fromkeys(t.scenario for t in TABLES if t.scenario):
        sessions, runs = load([results / f"{scenario}.jsonl"])
        if not runs:
            continue
        by_code = runs_by_code(sessions, runs)
        older = {code: len(rs) for code, rs in by_code.items() if code != head}
        rows.append([", ".join(t.name for t in TABLES if t.scenario == scenario), f"`{scenario}.jsonl`",
                     len(by_code.get(head, [])), sum(older.values()),
                     ", ".join(f"{code} ({n})" for code, n in reversed(older.items())) or "–"])
    return [f"Product code at this commit: **{head}** (the last commit that changed `mpcommit/`).", "",
            *md_table(["tables", "records", f"runs at {head}", "runs at older code", "older versions (runs), newest first"],
                      rows, "llrrl")]


# ---------------------------------------------------------------- the executor-shaped peers (issue 39 item 1)
EXECUTOR_ORDER = ("mpcommit", "mpcommit-32", "magic-tuned-32", "magic-tuned-128", "magic", "local-disk", "python-handover")
EXECUTOR_LABELS = {
    "mpcommit": "mpcommit.spark.write", "mpcommit-32": "mpcommit.spark.write, 32 in flight",
    "magic-tuned-32": "S3A magic, tuned, 32 threads",
    "magic-tuned-128": "S3A magic, tuned, 128 threads", "magic": "S3A magic, Hadoop's defaults",
    "local-disk": "Spark's writer to local disk",
    "python-handover": "Spark's hand-over to a Python worker alone (nothing written; not a peer)",
}
EXECUTOR_BASE = "magic-tuned-32"


def judged(runs: Sequence[Run]) -> list[Run]:
    """The runs a figure may use: every run but those the validity gate failed (``valid: false``)."""
    return [r for r in runs if r.get("valid") is not False]


def per_extra_file(runs: Sequence[Run], variant: str, value: Callable[[Run], float | None] = lambda r: r.get("cpu_s"),
                   ) -> list[tuple[tuple[Any, Any], float]]:
    """(session, pair) -> ``value`` per extra file between the smallest and the largest cell of one variant in one
    round of one session (both runs judged valid), in milliseconds. Sizes are a session's own: two sessions that
    ran different cells (200 and 2,000 files; 1,000 and 10,000) each give their rounds."""
    out = []
    by = {(r.get("session"), r.get("pair"), r.get("files_target")): r for r in judged(runs) if r["variant"] == variant}
    sizes: dict[Any, set[int]] = {}
    for session, _pair, files in by:
        sizes.setdefault(session, set()).add(files)
    for (session, pair, files), r in by.items():
        small, large = min(sizes[session]), max(sizes[session])
        if small == large or files != large or (session, pair, small) not in by:
            continue
        s_run = by[(session, pair, small)]
        a, b = value(r), value(s_run)
        extra = (r.get("files") or large) - (s_run.get("files") or small)
        if a is not None and b is not None and extra > 0:
            out.append(((session, pair), (a - b) / extra * 1000))
    return out


def _extra_file_cells(runs: Sequence[Run]) -> dict[tuple[str, int, int], list[Run]]:
    """(network, smallest, largest cell of files) -> the runs of the sessions that ran both, for every session that
    ran two sizes or more in one network."""
    sizes: dict[tuple[Any, Any], set[int]] = {}
    for r in runs:
        sizes.setdefault((r.get("session"), r.get("network")), set()).add(r.get("files_target"))
    out: dict[tuple[str, int, int], list[Run]] = {}
    for r in runs:
        found = sizes[(r.get("session"), r.get("network"))]
        if len(found) >= 2:
            out.setdefault((str(r.get("network")), min(found), max(found)), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: kv[0]))


def per_file_ratio(runs: Sequence[Run], num: str, den: str) -> Summary:
    """The median of paired ratios of CPU per extra file, ``num`` over ``den`` (same session and round)."""
    a, b = dict(per_extra_file(runs, num)), dict(per_extra_file(runs, den))
    return Summary.of(a[k] / b[k] for k in a if k in b and b[k])


def _older_gate(sessions: Sessions, run: Run) -> str:
    """Said of a run with a tail judged by a session before the gate told a tail's low draws (clipped) from late
    answers: its late answers include those."""
    gate = (sessions.get(run.get("session")) or {}).get("gate") or {}
    if run.get("network") != "s3-tail" or "clipped_time_share" in gate:
        return ""
    return " (its session's gate counted a tail's low draws under the server's own time as late too)"


def render_executor(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Issue 39 item 1: per cell (files x network), every variant's valid runs against the tuned magic committer at
    32 threads, paired by round; the runs the validity gate failed counted, with why."""
    out: list[str] = []
    for (network, files), rs in sorted(_group(runs, "network", "files_target").items(),
                                       key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        ok = judged(rs)
        variants = [v for v in EXECUTOR_ORDER if any(r["variant"] == v for r in rs)]
        out += ["", f"**{files:,} files, {NETWORK_LABELS.get(network, network)}**", ""]
        rows = []
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            vok = judged(vr)
            failed = len(vr) - len(vok)
            gates = [r.get("gate") or {} for r in vok]
            rows.append([
                EXECUTOR_LABELS.get(v, v), f"{len(vr)}" + (f" ({failed} invalid)" if failed else ""),
                fmt_figure(Summary.of(r["seconds"] for r in vok)),
                fmt_ratio(paired_ratio(ok, v, EXECUTOR_BASE, lambda r: r["seconds"])) if v != EXECUTOR_BASE else "1.00x",
                fmt_seconds(median(r.get("writer_s") for r in vok)), fmt_seconds(median(r.get("job_commit_s") for r in vok)),
                fmt_ratio(paired_ratio(ok, v, EXECUTOR_BASE, lambda r: r.get("job_commit_s")), bold=False)
                if v != EXECUTOR_BASE else "1.00x",
                fmt_figure(Summary.of(r.get("cpu_s") for r in vok), lambda x: "–" if x is None else f"{x:,.1f} s"),
                fmt_ratio(paired_ratio(ok, v, EXECUTOR_BASE, lambda r: r.get("cpu_s")), bold=False) if v != EXECUTOR_BASE else "1.00x",
                fmt_ratio(paired_ratio(ok, v, "local-disk", lambda r: r.get("cpu_s")), bold=False) if v != "local-disk" else "1.00x",
                _num(median(r["requests_total"] / r["files"] for r in vok if r.get("files") and r.get("requests_total"))),
                _num(median(g.get("complete_ms") for g in gates), 0) + " / " + _num(median(g.get("drawn_ms") for g in gates), 0)
                if any(g.get("complete_ms") for g in gates) else "–",
            ])
        out += md_table(["variant", "runs", "end to end (valid runs)", f"÷ {EXECUTOR_LABELS[EXECUTOR_BASE]}", "writer",
                         "job commit", "÷ tuned-32", "client CPU (cgroup)", "÷ tuned-32", "÷ local disk",
                         "requests per file", "ms per complete at the proxy / the model's"], rows)
        invalid = [r for r in rs if r.get("valid") is False]
        if invalid:
            out += ["", "Runs the validity gate failed (not in the figures above): " + "; ".join(
                f"{r['variant']} round {r.get('pair')}: {(r.get('gate') or {}).get('why')}{_older_gate(sessions, r)}"
                for r in invalid)]
        out += ["", sessions_line(sessions, rs)]
    for (network, small, large), rs in _extra_file_cells(runs).items():
        rows = []
        for v in [v for v in EXECUTOR_ORDER if any(r["variant"] == v for r in rs)]:
            per = Summary.of(x for _, x in per_extra_file(rs, v))
            rows.append([EXECUTOR_LABELS.get(v, v), fmt_figure(per, lambda x: "–" if x is None else f"{x:.2f} ms"),
                         fmt_ratio(per_file_ratio(rs, v, EXECUTOR_BASE), bold=False) if v != EXECUTOR_BASE else "1.00x"])
        out += ["", f"**Client CPU per extra file, {small:,} -> {large:,} files, "
                f"{NETWORK_LABELS.get(network, network)}** (each round's two runs of a variant)", ""]
        out += md_table(["variant", "CPU per extra file", f"÷ {EXECUTOR_LABELS[EXECUTOR_BASE]}"], rows)
    split_rows = []
    for (network, files), rs in sorted(_group(runs, "network", "files_target").items(),
                                       key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        for v in [v for v in EXECUTOR_ORDER if any(r["variant"] == v and r.get("cpu_split_s") for r in rs)]:
            vok = [r for r in judged(rs) if r["variant"] == v and r.get("cpu_split_s")]
            if vok:
                split_rows.append([f"{files:,}, {NETWORK_LABELS.get(network, network)}", EXECUTOR_LABELS.get(v, v), len(vok)]
                                  + [fmt_seconds(median((r["cpu_split_s"] or {}).get(k) for r in vok))
                                     for k in ("driver_python", "jvm", "python_workers")]
                                  + [fmt_seconds(median(r.get("cpu_s") for r in vok))])
    if split_rows:
        out += ["", "**Where the client CPU goes** (medians of the valid runs; each process's CPU read at the run's "
                "start and end, the cgroup's total beside it: a worker that ended within a run is in the total only)", ""]
        out += md_table(["files, network", "variant", "runs", "driver (Python)", "JVM (driver and executor)",
                         "Python workers", "all (cgroup)"], split_rows)
    return out or ["", "_No records yet: `python -m bench.bench_executor` (the full run's `executor` step)._"]


def render_task_cpu(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    """Issue 39 item 3: one task's client CPU (process CPU, every thread) before and after, per cell of partition
    values, and per extra file within each round -- a table per code compared against ("before" is whatever commit
    a session named: medians over two baselines would mean nothing)."""
    if not runs:
        return ["", "_No records yet: `python -m bench.bench_task_cpu` (the full run's `task-cpu` step)._"]
    baselines: dict[str, set[Any]] = {}
    for r in runs:
        if r["variant"] == "before":
            baselines.setdefault(str(r.get("code_ran")), set()).add(r["session"])
    if len(baselines) < 2:
        return _render_task_cpu_one(sessions, runs)
    out: list[str] = []
    for baseline, in_sessions in baselines.items():
        out += ["", f"**Against {baseline}**"] + _render_task_cpu_one(sessions, [r for r in runs if r["session"] in in_sessions])
    return out


def _render_task_cpu_one(sessions: Sessions, runs: Sequence[Run]) -> list[str]:
    from .bench_task_cpu import JOB_TASKS, per_file_ms

    out: list[str] = []
    values = sorted({r["values"] for r in runs})
    codes = {v: _distinct(r.get("code_ran") for r in runs if r["variant"] == v) for v in ("before", "after")}
    rows = []
    for v in values:
        rs = [r for r in runs if r["values"] == v]
        for variant in ("before", "after"):
            vr = [r for r in rs if r["variant"] == variant]
            if not vr:
                continue
            rows.append([f"{v:,} ({v * JOB_TASKS:,}-file job)", f"{variant} ({codes[variant]})", len(vr),
                         _distinct(r.get("files") for r in vr),
                         fmt_figure(Summary.of(r["cpu_s"] for r in vr), lambda x: "–" if x is None else f"{x:.2f} s"),
                         fmt_figure(Summary.of(r.get("main_thread_cpu_s") for r in vr), lambda x: "–" if x is None else f"{x:.2f} s"),
                         fmt_seconds(median(r.get("wall_s") for r in vr)),
                         _num(median(sum((r.get("requests") or {}).values()) / r["files"] for r in vr if r.get("files"))),
                         fmt_ratio(paired_ratio(rs, "after", "before", lambda r: r["cpu_s"])) if variant == "after" else ""])
    out += ["", *md_table(["partition values per task", "code", "runs", "files", "process CPU (median)",
                           "of it the task's thread", "wall", "requests per file", "after ÷ before, paired"], rows)]
    per_rows = []
    by = {(r["session"], r["pair"], r["variant"], r["values"]): r for r in runs}
    for variant in ("before", "after"):
        per = [per_file_ms(by[(s_, p_, variant, values[0])], r) for (s_, p_, vv, n), r in by.items()
               if vv == variant and n == values[-1] and (s_, p_, variant, values[0]) in by]
        per_rows.append([f"{variant} ({codes[variant]})", fmt_figure(Summary.of(per), lambda x: "–" if x is None else f"{x:.2f} ms")])
    ratios = []
    for (s_, p_, vv, n), r in by.items():
        keys = [(s_, p_, "after", values[0]), (s_, p_, "before", values[-1]), (s_, p_, "before", values[0])]
        if vv == "after" and n == values[-1] and all(k in by for k in keys):
            ratios.append(per_file_ms(by[keys[0]], r) / per_file_ms(by[keys[2]], by[keys[1]]))
    per_rows.append(["after ÷ before, paired by round", fmt_ratio(Summary.of(ratios))])
    out += ["", f"CPU per extra file, {values[0]:,} -> {values[-1]:,} values (each round's two runs of one code):", "",
            *md_table(["", "CPU per extra file"], per_rows), "", sessions_line(sessions, runs)]
    return out


def _executor_rows(results: Path, head: str) -> list[list[str]]:
    """Issue 39's executor targets. End to end and job commit are judged with latency (the ``s3`` cells); client
    CPU on the raw network where it was measured (no waits for the model's latency; the same work), else with
    latency. Each from the newest code that has such runs (the head's first), named when it is older."""
    sessions, runs = load([results / "executor.jsonl"])
    latency, code = _newest_per_cell(sessions, runs, head, lambda r: r.get("network") == "s3")
    rows = _executor_latency_rows(latency, code, head)
    raw, raw_code = _newest_with(sessions, runs, head, lambda r: r.get("network") == "raw")
    if {"mpcommit", EXECUTOR_BASE} <= {r["variant"] for r in raw}:
        rows[2], rows[3] = _executor_cpu_rows(raw, raw_code, head, rows[2], rows[3])
    return rows


def _newest_per_cell(sessions: Sessions, runs: Sequence[Run], head: str, keep: Callable[[Run], bool],
                     ) -> tuple[list[Run], str | None]:
    """The runs ``keep`` takes, each cell of files from the head's code when it has runs of that cell, else from
    the newest code that has (a cell that takes most of a day to run is not dropped when the code changes after it
    ran); with the code's name, or the older codes' per cell when any is older than the head's."""
    by_code = runs_by_code(sessions, runs)
    codes = ([head] if head in by_code else []) + [c for c in reversed(by_code) if c != head]
    chosen: dict[Any, tuple[str, list[Run]]] = {}
    for code in codes:
        for r in by_code[code]:
            if keep(r) and chosen.setdefault(r.get("files_target"), (code, []))[0] == code:
                chosen[r.get("files_target")][1].append(r)
    if not chosen:
        return [], None
    older = {files: code for files, (code, _) in chosen.items() if code != head}
    name = head if not older else "; ".join(f"{files:,} files at {code}" for files, code in sorted(older.items()))
    return [r for _, rs in chosen.values() for r in rs], name


def _newest_with(sessions: Sessions, runs: Sequence[Run], head: str, keep: Callable[[Run], bool],
                 ) -> tuple[list[Run], str | None]:
    """The runs ``keep`` takes of the head's code when it has any, else of the newest code that has."""
    by_code = runs_by_code(sessions, runs)
    for code in ([head] if head in by_code else []) + list(reversed(by_code)):
        kept = [r for r in by_code[code] if keep(r)]
        if kept:
            return kept, code
    return [], None


def _executor_cpu_rows(raw: Sequence[Run], code: str | None, head: str, total_row: list[str], per_row: list[str],
                       ) -> tuple[list[str], list[str]]:
    """The client CPU targets from the raw cells: the total at 1,000 and 10,000 files against the tuned magic
    committer (and the local-disk writer where it ran), and CPU per extra file between each session's smallest and
    largest cell. The latency cells' figures follow, as they were."""
    note = _code_note(code, head)
    cells = sorted({r.get("files_target") for r in raw})

    def ratio(files: int, den: str) -> Summary:
        return paired_ratio(judged([r for r in raw if r.get("files_target") == files]), "mpcommit", den,
                            lambda r: r.get("cpu_s"))

    shown = []
    for files in cells:
        base, local = ratio(files, EXECUTOR_BASE), ratio(files, "local-disk")
        if base.median is not None:
            shown.append(f"{fmt_ratio(base, bold=False)} at {files:,} files"
                         + (f" ({fmt_ratio(local, bold=False)} of the local-disk writer's)" if local.median else ""))
    judged_at = {files: ratio(files, EXECUTOR_BASE).median for files in (1_000, 10_000)}
    local_at = [ratio(files, "local-disk").median for files in (1_000, 10_000)]
    if any(v is not None and v > 0.5 for v in judged_at.values()) or any(v is not None and v > 1.0 for v in local_at):
        total_verdict = "**missed**"
    elif all(v is not None for v in judged_at.values()):
        total_verdict = "met" if all(v is not None for v in local_at) else "met against the magic committer; " \
            "the local-disk writer not run at 1,000 and 10,000 files"
    else:
        total_verdict = "not measured at " + " and ".join(f"{f:,}" for f, v in judged_at.items() if v is None) + " files"
    total = [total_row[0], "raw network: " + ("; ".join(shown) or "–") + note + "; with latency: " + total_row[1],
             total_verdict]
    pers = [(small, large, per_file_ratio(rs, "mpcommit", EXECUTOR_BASE))
            for (_network, small, large), rs in _extra_file_cells(raw).items()]
    pers = [(small, large, p) for small, large, p in pers if p.median is not None]
    per = [per_row[0], "raw network: " + ("; ".join(f"{fmt_ratio(p, bold=False)} from {small:,} to {large:,} files"
                                                     for small, large, p in pers) or "–") + note,
           _verdict([p.median for _, _, p in pers], lambda v: v <= 0.6)]
    return total, per


def _executor_latency_rows(latency: Sequence[Run], code: str | None, head: str) -> list[list[str]]:
    """The latency targets, judged on mpcommit at its defaults where any of its runs passed the validity gate, else
    on ``mpcommit-32`` (32 requests in flight, the peer's committer threads) where any of those did, saying so; the
    job commit's always at equal completes in flight when ``mpcommit-32`` has valid runs (the target's footing)."""
    note = _code_note(code, head)
    cells = sorted({r.get("files_target") for r in latency})
    valid_of = {v: judged([r for r in latency if r["variant"] == v]) for v in ("mpcommit", "mpcommit-32")}
    if not valid_of["mpcommit"] and valid_of["mpcommit-32"]:
        failed = [r for r in latency if r["variant"] == "mpcommit"]
        footing = ("; mpcommit with 32 requests in flight (the peer's committer threads): "
                   + (f"all {len(failed)} runs at its defaults failed the validity gate, the server on one core "
                      "outrun by its deeper window" if failed else "its defaults not run"))
        return _executor_latency_judged(latency, cells, "mpcommit-32", "mpcommit-32", footing + note)
    if not valid_of["mpcommit"]:
        return _executor_latency_unjudged(latency, cells, note)
    commit_variant = "mpcommit-32" if valid_of["mpcommit-32"] else "mpcommit"
    return _executor_latency_judged(latency, cells, "mpcommit", commit_variant, note)


EXECUTOR_TARGET_LABELS = (
    "end to end <= 0.33x the tuned magic committer at 32 threads (stated at 128), executor-shaped, with latency, "
    "1,000 and 10,000 files (issue 39)",
    "job commit <= 0.25x the tuned magic committer's (issue 39)",
    "client CPU <= 0.5x the tuned magic committer's and <= 1.0x Spark's writer to local disk (issue 39)",
    "client CPU per extra file <= 0.6x the tuned magic committer's (issue 39)")


def _executor_latency_unjudged(latency: Sequence[Run], cells: list[Any], note: str) -> list[list[str]]:
    labels = EXECUTOR_TARGET_LABELS
    if not latency:
        return [[label, "not measured yet (`python -m bench.full_run --only executor`)", "not measured"]
                for label in labels]
    mine = [r for r in latency if r["variant"] == "mpcommit"]
    if mine:
        # Measured, but every mpcommit run failed the validity gate: no verdict, and the figures of all runs shown
        # as what they are (unjudged), so that an invalid cell is never read as "not measured".
        gates = [r.get("gate") or {} for r in mine]
        why = (f"every one of mpcommit's {len(mine)} runs failed the validity gate (the server set the pace: "
               f"{_num(median(g.get('complete_ms') for g in gates), 0)} ms a complete at the proxy against the "
               f"model's {_num(median(g.get('drawn_ms') for g in gates), 0)}, "
               f"{_num(median(100 * g['late_share'] for g in gates if g.get('late_share') is not None), 0)}% "
               "of answers late)")

        def unjudged(value: Callable[[Run], float | None], den: str) -> str:
            return "; ".join(f"{fmt_ratio(paired_ratio([r for r in latency if r.get('files_target') == f], 'mpcommit', den, value), bold=False)} at {f:,} files"
                             for f in cells)

        return [
            [labels[0], f"{why}; all runs, unjudged: {unjudged(lambda r: r['seconds'], EXECUTOR_BASE)}" + note,
             "not shown (runs invalid)"],
            [labels[1], f"all runs, unjudged: {unjudged(lambda r: r.get('job_commit_s'), EXECUTOR_BASE)}" + note,
             "not shown (runs invalid)"],
            [labels[2], f"all runs, unjudged: {unjudged(lambda r: r.get('cpu_s'), EXECUTOR_BASE)}; against the "
             f"local-disk writer: {unjudged(lambda r: r.get('cpu_s'), 'local-disk')}" + note, "not shown (runs invalid)"],
            [labels[3], ("one cell of files only" if len(cells) < 2 else "–") + note, "not measured"],
        ]

    return [[label, "no run of mpcommit at its defaults" + note, "not measured"] for label in labels]


def _executor_latency_judged(latency: Sequence[Run], cells: list[Any], mp: str, mp_commit: str, note: str,
                             ) -> list[list[str]]:
    """The latency targets from ``mp``'s valid runs (the job commit's from ``mp_commit``'s), paired by round."""
    labels = EXECUTOR_TARGET_LABELS

    def cellwise(value: Callable[[Run], float | None], den: str, num: str = mp) -> list[tuple[int, Summary]]:
        return [(f, paired_ratio(judged([r for r in latency if r.get("files_target") == f]), num, den, value))
                for f in cells]

    def text(items: list[tuple[int, Summary]]) -> str:
        return "; ".join(f"{fmt_ratio(s, bold=False)} at {f:,} files" for f, s in items if s.median is not None) or "–"

    e2e, e2e_128 = cellwise(lambda r: r["seconds"], EXECUTOR_BASE), cellwise(lambda r: r["seconds"], "magic-tuned-128")
    commit = cellwise(lambda r: r.get("job_commit_s"), EXECUTOR_BASE, mp_commit)
    commit_note = " (at equal completes in flight: mpcommit with 32)" if mp_commit != mp else ""
    cpu, cpu_local = cellwise(lambda r: r.get("cpu_s"), EXECUTOR_BASE), cellwise(lambda r: r.get("cpu_s"), "local-disk")
    per = per_file_ratio(latency, mp, EXECUTOR_BASE)
    unmeasured = [f for f in (1_000, 10_000) if f not in cells]

    def in_cells(verdict: str) -> str:
        """A verdict of the cells measured: never "met" for a cell of files that was not run."""
        if verdict != "met" or not unmeasured:
            return verdict
        return (f"met at {', '.join(f'{f:,}' for f in cells)} files; "
                f"{' and '.join(f'{f:,}' for f in unmeasured)} not measured")

    return [
        [labels[0], text(e2e) + (f"; against 128 threads: {text(e2e_128)}" if any(s.median for _, s in e2e_128) else "")
         + note, in_cells(_verdict([s.median for _, s in e2e], lambda v: v <= 0.33))],
        [labels[1], text(commit) + commit_note + note,
         in_cells(_verdict([s.median for _, s in commit], lambda v: v <= 0.25))],
        [labels[2], f"{text(cpu)}; against the local-disk writer: {text(cpu_local)}" + note,
         in_cells(_bounds_verdict([(s.median, 0.5) for _, s in cpu] + [(s.median, 1.0) for _, s in cpu_local]))],
        [labels[3], (fmt_ratio(per, bold=False) if per.median is not None else "–") + note,
         _verdict([per.median], lambda v: v <= 0.6)],
    ]


# ---------------------------------------------------------------- the targets table (top of BENCHMARKS.md)
def _target_runs(results: Path, scenario: str, head: str) -> tuple[Sessions, list[Run], str | None]:
    """The runs a target is judged on: those of the product code at ``head``, else the newest older code's (named in
    the row), else none."""
    sessions, runs = load([results / f"{scenario}.jsonl"])
    by_code = runs_by_code(sessions, runs)
    if head in by_code:
        return sessions, by_code[head], head
    if by_code:
        newest = list(by_code)[-1]
        return sessions, by_code[newest], newest
    return sessions, [], None


def _verdict(values: Sequence[float | None], ok: Callable[[float], bool]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "not measured"
    return "met" if len(known) == len(values) and all(ok(v) for v in known) else "**missed**"


def _bounds_verdict(figures: Sequence[tuple[float | None, float]]) -> str:
    """Met when every figure is measured and at most its bound."""
    if not any(v is not None for v, _ in figures):
        return "not measured"
    return "met" if all(v is not None and v <= bound for v, bound in figures) else "**missed**"


def _code_note(code: str | None, head: str) -> str:
    if code in (None, head):
        return ""
    return f" (at older code {code})" if " files at " not in code else f" (older code for some cells: {code})"


def _peer_rows(results: Path, head: str) -> list[list[str]]:
    sessions, runs, code = _target_runs(results, "peers", head)
    runs = [r for r in _with_network(sessions, runs) if r["network"] == "s3"]
    note = _code_note(code, head)
    cells: dict[str, list[tuple[int, Summary]]] = {"e2e": [], "commit": []}
    requests = []
    for files in (1000, 10000):
        rs = [r for r in runs if r.get("files_target") == files]
        cells["e2e"].append((files, paired_ratio(rs, "mpcommit", "magic-tuned", lambda r: r["seconds"])))
        cells["commit"].append((files, paired_ratio(rs, "mpcommit", "magic-tuned", lambda r: r.get("job_commit_s"))))
        per = {v: median(r["requests_total"] / r["files"] for r in rs if r["variant"] == v and r.get("files"))
               for v in ("mpcommit", "magic-tuned")}
        requests.append((files, per["mpcommit"], per["magic-tuned"]))

    def cell(items: list[tuple[int, Summary]]) -> str:
        return "; ".join(f"{fmt_ratio(s, bold=False)} at {f:,} files" for f, s in items if s.median is not None) or "–"

    req_text = "; ".join(f"{a:.2f} against {b:.2f} at {f:,} files" for f, a, b in requests
                         if a is not None and b is not None) or "–"
    req_ok = [a < b if a is not None and b is not None else None for _, a, b in requests]
    req_verdict = ("not measured" if not any(v is not None for v in req_ok) else
                   "met" if all(req_ok) else "met at " + ", ".join(f"{f:,}" for (f, _, _), v in zip(requests, req_ok) if v)
                   if any(req_ok) else "**missed**")
    return [
        ["end to end <= 0.33x the tuned magic committer, with latency (issue 25: `local[8]` on 2 cores)",
         cell(cells["e2e"]) + note, _verdict([s.median for _, s in cells["e2e"]], lambda v: v <= 0.33)],
        ["job commit <= 0.25x the tuned magic committer's, with latency (issue 25)", cell(cells["commit"]) + note,
         _verdict([s.median for _, s in cells["commit"]], lambda v: v <= 0.25)],
        ["requests per file below the tuned magic committer's (issue 25)", req_text + note, req_verdict],
    ]


def _commit_rate_row(results: Path, head: str) -> list[str]:
    sessions, runs, code = _target_runs(results, "commit_scale", head)
    runs = [r for r in _with_network(sessions, runs) if r["variant"] == "commit" and r.get("files") == 100_000]
    warm = [r for r in runs if r["network"] == "s3"]
    cold = [r for r in runs if r["network"] == "s3-cold"]
    ok = [r for r in warm if r.get("outcome", "ok") == "ok"]
    rate, wall = median(r.get("completes_per_s") for r in ok), median(r["wall_s"] for r in ok)
    cpu = median(r.get("cpu_ms_per_file") for r in ok)
    cold_rate = median(r.get("completes_per_s") for r in cold if r.get("outcome", "ok") == "ok")
    if rate is None:
        return ["a commit of 100,000 files through one driver (issue 25)", "–", "not measured"]
    text = (f"{rate:,.0f}/s, {fmt_seconds(wall)}, {cpu:.3f} ms a file (medians of {len(ok)})"
            + (f"; cold prefix {cold_rate:,.0f}/s" if cold_rate else "") + _code_note(code, head))
    verdict = _rate_verdict(100_000, rate, cpu, len(ok) < len(warm))
    return [">= 3,000 completes/s through one driver, 100,000 files in <= 40 s, <= 0.35 ms client CPU a file "
            "(issue 25)", text, verdict if not (verdict == "met" and wall is not None and wall > 40) else "**missed**"]


def _compaction_row(results: Path, head: str) -> list[str]:
    sessions, every_run = load([results / "compaction.jsonl"])
    # The model's own copy rate (8 MB/s, sourced): the plain profile, or the sensitivity step run at that rate (its
    # network named "s3, copies at 8 MB/s, ..." by the profile, with the client host's link capped) -- of the newest
    # code that ran either (a later run at an assumed rate alone does not hide it).
    plain = lambda r: r["network"] == "s3"  # noqa: E731
    at_8 = lambda r: str(r["network"]).startswith("s3, copies at 8 MB/s")  # noqa: E731
    big = [r for r in _with_network(sessions, every_run) if (r.get("data_bytes") or 0) >= 2 * GiB]
    sourced, code = _newest_with(sessions, big, head, lambda r: plain(r) or at_8(r))
    runs = [r for r in sourced if plain(r)] or [r for r in sourced if at_8(r)]
    label = ">= 3x faster than an equal-footing rewrite, >= 2 GiB with latency (issue 25)"
    if not runs:
        return [label, "–", "not measured"]
    # Where servers differ, the one that answered late least: the model, not the server, should set the pace.
    by_server = _group([{**r, "server_name": _server_name(sessions.get(r.get("session"), {}).get("server"))}
                        for r in runs], "server_name")
    (server,), runs = min(by_server.items(), key=lambda kv: median(r.get("late") or 0 for r in kv[1]) or 0)
    speed = paired_ratio(runs, "rewrite-equal", "multipart", lambda r: r["seconds"])
    size = median(r.get("data_bytes") for r in runs)
    late = median(r.get("late") for r in runs if r.get("late") is not None)
    capped = ", the client host's link capped at 10 Gb/s" if runs[0]["network"] != "s3" else ""
    return [label, f"{fmt_ratio(speed, bold=False)} at {fmt_bytes(size)} on {server}, the model's copy rate 8 MB/s"
            f"{capped}" + (f" ({100 * late:.0f}% of answers late)" if late is not None else "")
            + _code_note(code, head), _verdict([speed.median], lambda v: v >= 3)]


def _driver_row(results: Path, head: str) -> list[str]:
    sessions, runs, code = _target_runs(results, "driver_memory", head)
    runs = [r for r in runs if r.get("variant") == "replay-referenced" and r.get("files")]
    by_files = {f: median(r.get("rss_growth_mib") for r in g) for (f,), g in _group(runs, "files").items()}
    label = "driver growth 10,000 -> 1,000,000 files < 100 MiB, manifests streamed (issue 25)"
    if by_files.get(10_000) is None or by_files.get(1_000_000) is None:
        return [label, "–", "not measured"]
    growth = by_files[1_000_000] - by_files[10_000]
    return [label, f"{growth:+.1f} MiB RSS (the referenced replay)" + _code_note(code, head),
            _verdict([growth], lambda v: v < 100)]


def _task_cpu_row(results: Path, head: str) -> list[str]:
    """Issue 39's before/after of the task side: CPU per extra file, mpcommit's own, per round -- one clause per
    code compared against (issue 39's baseline and later ones: "before" is whatever commit a session named), the
    verdict "cut" only where an interval of after ÷ before lies below 1."""
    from .bench_task_cpu import per_file_ms

    sessions, runs, code = _target_runs(results, "task_cpu", head)
    label = "the task side's CPU per file cut, before and after (issue 39, one task of 1,250 interleaved partitions)"
    baselines: dict[str, set[Any]] = {}
    for r in runs:
        if r["variant"] == "before":
            baselines.setdefault(str(r.get("code_ran")), set()).add(r["session"])
    clauses, cut_against = [], []
    for baseline, in_sessions in baselines.items():
        by = {(r["session"], r["pair"], r["variant"], r["values"]): r for r in runs if r["session"] in in_sessions}
        if not by:
            continue
        small_n, large_n = min(v for (_, _, _, v) in by), max(v for (_, _, _, v) in by)
        per: dict[str, list[float]] = {"before": [], "after": []}
        ratios = []
        for (session, pair, variant, values), r in by.items():
            small = by.get((session, pair, variant, small_n))
            if values != large_n or small is None:
                continue
            per[variant].append(per_file_ms(small, r))
            b_large, b_small = by.get((session, pair, "before", large_n)), by.get((session, pair, "before", small_n))
            if variant == "after" and b_large and b_small:
                ratios.append(per_file_ms(small, r) / per_file_ms(b_small, b_large))
        if not per["after"]:
            continue
        ratio = Summary.of(ratios)
        clauses.append(f"against {baseline}: {fmt_figure(Summary.of(per['before']), _ms)} before, "
                       f"{fmt_figure(Summary.of(per['after']), _ms)} after; after ÷ before {fmt_ratio(ratio, bold=False)}")
        upper = {"bootstrap": ratio.ci[1] if ratio.ci else None, "range": ratio.hi}.get(interval_kind(ratio))  # as shown
        if upper is not None and upper < 1.0:
            cut_against.append(baseline)
    if not clauses:
        return [label, "–", "not measured"]
    return [label, "process CPU per extra file, " + "; ".join(clauses) + _code_note(code, head),
            f"cut (against {', '.join(cut_against)})" if cut_against else "**not shown cut**"]


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f} ms"


def render_targets(results: Path, head: str | None = None) -> list[str]:
    """The targets and what the records say of each, computed like every other table (issue 39 item 5): each
    figure from the runs of the product code at ``head``, or, where none measured it yet, the newest older code's,
    named in its row."""
    head = head or code_version("HEAD") or "?"
    rows = [*_executor_rows(results, head), _task_cpu_row(results, head), *_peer_rows(results, head),
            _commit_rate_row(results, head), _compaction_row(results, head), _driver_row(results, head)]
    return [f"Generated from the records (`python -m bench.report_tables`); product code at this commit: **{head}**.",
            "", *md_table(["target", "measured", ""], rows, "lll")]


def render_full_run(results: Path, head: str | None = None) -> list[str]:
    """The full run's steps (:func:`bench.full_run.steps`): each one's command, what it takes (its last measured
    duration from the ledger, else the estimate) and whether it has run to its end at the product code of
    ``head`` -- what is left before every table describes one named commit."""
    from .full_run import last_minutes, missing_steps, read_ledger, steps

    head = head or code_version("HEAD") or "?"
    ledger = read_ledger(results / "full_run.jsonl")
    missing = {s.name for s in missing_steps(steps(), ledger, head)}
    measured = last_minutes(ledger)
    done_at = {e["step"]: e["started"] for e in ledger if e.get("code") == head and e.get("exit") == 0}
    rows, left = [], 0.0
    for s in steps():
        m = measured.get(s.name)
        took = f"{m:.0f} min (measured)" if m and m >= 10 else f"{m:.1f} min (measured)" if m else f"{s.estimate} (estimate)"
        if s.name in missing:
            left += measured.get(s.name) or float(s.estimate.split()[0]) * (60 if s.estimate.endswith(" h") else 1)
        rows.append([f"`{s.name}`", f"`python -m {' '.join(s.args)}`", s.tables, took,
                     f"done, {done_at[s.name]}" if s.name in done_at else "**to run**"])
    return [f"At the product code of this commit (**{head}**): {len(steps()) - len(missing)} of {len(steps())} "
            f"steps done; the rest take about {left / 60:.1f} h (`python -m bench.full_run --missing`).", "",
            *md_table(["step", "command", "tables", "takes", f"at {head}"], rows, "lllrl")]


def blocks(results: Path = RESULTS_DIR, smoke: Path = SMOKE_DIR) -> dict[str, list[str]]:
    """Every generated block by its marker name: the tables from ``results`` (the runs of this commit's code in
    the Results blocks, older code's in the ``history-*`` ones), and ``smoke-*`` from ``smoke``."""
    out: dict[str, list[str]] = {"code-versions": render_code_versions(results), "full-run": render_full_run(results),
                                 "targets": render_targets(results)}
    for t in TABLES:
        out[t.name] = render_current(t, results)
        if t.scenario:
            out[f"history-{t.name}"] = render_history(t, results)
            out[f"smoke-{t.name}"] = render(t, smoke)
    return out


def splice(text: str, name: str, lines: Sequence[str]) -> str:
    """``text`` with the block between ``<!-- table:name -->`` and ``<!-- /table:name -->`` replaced by ``lines``
    (the markers stay). A block that is not in the text is left out: the document decides where tables go."""
    start, end = f"<!-- table:{name} -->", f"<!-- /table:{name} -->"
    i = text.find(start)
    if i < 0:
        return text
    j = text.find(end, i)
    if j < 0:
        raise ValueError(f"BENCHMARKS.md: {start} has no {end}")
    body = "\n".join(lines).strip("\n")
    # Blank lines around the body: a table right after an HTML comment is not a table to every renderer.
    return text[: i + len(start)] + "\n\n" + body + "\n\n" + text[j:]


def regenerate(text: str, generated: Mapping[str, Sequence[str]]) -> str:
    for name, lines in generated.items():
        text = splice(text, name, lines)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report_tables", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default=str(RESULTS_DIR), help="directory of the raw records")
    ap.add_argument("--smoke", default=str(SMOKE_DIR), help="directory of the smoke runs' records")
    ap.add_argument("--output", default=str(OUTPUT))
    ap.add_argument("--check", action="store_true", help="exit 1 if the output is not what the records give")
    ap.add_argument("--print", dest="show", metavar="TABLE", help="print one table (or smoke-TABLE) and exit")
    a = ap.parse_args(argv)
    if a.show:
        name = a.show.removeprefix("smoke-")
        table = next(t for t in TABLES if t.name == name)
        print("\n".join(render(table, Path(a.smoke if a.show.startswith("smoke-") else a.records))))
        return 0
    generated = blocks(Path(a.records), Path(a.smoke))
    path = Path(a.output)
    text = path.read_text()
    new = regenerate(text, generated)
    if a.check:
        if new != text:
            print(f"{path} is not what the records give: run python -m bench.report_tables", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
