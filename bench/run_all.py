"""Run the benchmarks and write BENCHMARKS.md and bench/results/ (``make bench``).

    python -m bench.run_all                         # everything, LocalStack, full sizes (see the duration in BENCHMARKS.md)
    python -m bench.run_all --quick                 # small sizes, 5 repeats: a few minutes
    python -m bench.run_all --scenarios commit --commit-sizes 100,1000 --repeats 5
    python -m bench.run_all --backend moto          # moto's server instead of LocalStack
    python -m bench.run_all --networks raw          # only on the bare loopback server (no S3-like network)
    python -m bench.run_all --render-only           # rewrite the report from bench/results/*.json

Its report goes to bench/results/scratch/run_all.md: BENCHMARKS.md is generated from the raw records
(``python -m bench.report_tables``; issue 25's runs: ``python -m bench.full_run``).

The harness starts its own S3 server on a free loopback port and stops it at the end. With ``--networks raw,s3``
(the default) every scenario runs twice, back to back: straight to that server ("raw") and through the S3-like
network (``tests/support/s3_network.py``: per-operation latency and a per-connection bandwidth cap, in a proxy process of
its own). Raw results of every run go to ``bench/results/<scenario>.json`` (``<scenario>.s3.json`` through the
network); BENCHMARKS.md is rendered from them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import bench_commit, bench_network, bench_writer, report_network, report_peers
from .report_common import (
    ALL_SCENARIOS,
    measured_line as _measured_line,
    targets as _targets,
)
from tests.support.s3_network import S3_LIKE, S3Network
from .common import (
    REPO_ROOT,
    RESULTS_DIR,
    S3CostModel,
    human_bytes,
    human_seconds,
    log,
    machine_description,
    md_table,
    parse_size,
    save_json,
    start_server,
)

#: The all-in-one suite's own report (it predates issue 25). BENCHMARKS.md is generated from the raw records by
#: ``python -m bench.report_tables`` (``python -m bench.full_run`` runs issue 25's set): this suite no longer
#: overwrites it unless told to with ``--output BENCHMARKS.md``.
OUTPUT = REPO_ROOT / "bench" / "results" / "scratch" / "run_all.md"
PLOT = RESULTS_DIR / "commit_scaling.png"
NETWORKS = ("raw", "s3")
#: Through the S3-like network, protocols whose commit is sequential or copy-bound cost minutes per run: s3fs
#: completes one file at a time (80 ms each), so it runs once at 1,000 files and not at 10,000.
S3_COMMIT_CAPS = (("s3fs", 1_000, 1), ("s3fs", 10_000, 0))


def result_name(scenario: str, network: str) -> str:
    return scenario if network == "raw" else f"{scenario}.{network}"
OPTIONAL_MODULES = {"partitions": "bench.bench_partitions", "e2e": "bench.bench_end_to_end",
                    "compaction": "bench.bench_compaction"}


def _optional(name: str) -> Any | None:
    """The module of an optional scenario, or None when it is not there (yet) or cannot be imported."""
    try:
        mod = importlib.import_module(OPTIONAL_MODULES[name])
    except ImportError as exc:
        log(f"{name}: skipped ({exc})")
        return None
    if not callable(getattr(mod, "run", None)) and not callable(getattr(mod, "main", None)):
        log(f"{name}: skipped ({OPTIONAL_MODULES[name]} has neither run() nor main())")
        return None
    return mod


def _git_state() -> str:
    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return r.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--", "src")
    return head + (" (with uncommitted changes under src/)" if dirty else "")


# ---------------------------------------------------------------- running
def run_scenarios(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with start_server(args.backend) as server:
        log(f"server: {server.version} at {server.endpoint_url}")
        meta = {"machine": machine_description(server), "git": _git_state(), "backend": args.backend,
                "argv": sys.argv[1:], "started": time.time(), "networks": list(args.networks),
                "profile": S3_LIKE.to_json()}
        net = S3Network(server.endpoint_url, S3_LIKE).start() if "s3" in args.networks else None
        try:
            for name in args.scenarios:
                for network in (("raw",) if name == "network" else args.networks):
                    ep = server.endpoint_url if network == "raw" else net.endpoint_url  # type: ignore[union-attr]
                    data = _run_one(name, network, ep, server, net if network == "s3" else None, args)
                    if data is None:
                        continue
                    data["meta"] = meta
                    save_json(result_name(name, network), data)
                    results[result_name(name, network)] = data
                if name == "commit" and net is not None and args.threads_sweep:
                    data = _threads_sweep(net, args)
                    data["meta"] = meta
                    save_json("commit_threads.s3", data)
                    results["commit_threads.s3"] = data
        finally:
            if net is not None:
                net.stop()
        meta["finished"] = time.time()
        meta["machine"]["load_end"] = "load average at end %.2f / %.2f / %.2f" % os.getloadavg()
        for key, data in results.items():  # every scenario's saved copy gets the end of the run too
            save_json(key, data)
    return results


def _run_one(name: str, network: str, ep: str, server: Any, net: S3Network | None,
             args: argparse.Namespace) -> dict[str, Any] | None:
    t0 = time.perf_counter()
    started_at = time.time()
    log(f"== scenario {name} ({network})")
    if net is not None:
        net.reset()
        cpu0 = net.cpu_seconds()
    if name == "network":
        data = bench_network.run(ep, repeats=args.repeats, size=args.writer_size, server_pid=server.pid)
    elif name == "commit":
        data = bench_commit.run(ep, sizes=args.commit_sizes, repeats=args.repeats,
                                files_per_task=args.files_per_task, threads=args.commit_threads,
                                big=args.big, big_repeats=args.big_repeats, server_pid=server.pid,
                                caps=S3_COMMIT_CAPS if network == "s3" else ())
    elif name == "writer":
        data = bench_writer.run(ep, size=args.writer_size, repeats=args.repeats, variants=bench_writer.EQUAL_VARIANTS)
    elif name == "peers":
        from . import bench_spark_peers

        data = bench_spark_peers.run(server, net, network, plan=getattr(args, f"peers_plan_{network}"),
                                     size=args.peers_size, tasks=args.peers_tasks, slots=args.peers_slots)
    else:
        mod = _optional(name)
        if mod is None:
            return None
        if not callable(getattr(mod, "run", None)):
            extra = ["--endpoint", ep, "--endpoint-description",
                     f"{server.version}, through the S3-like network ({S3_LIKE.describe()})"] if net is not None else []
            data = _call_main(name, mod, args, extra)
        else:
            kwargs: dict[str, Any] = {"repeats": args.repeats}
            if name == "partitions":
                kwargs.update(partitions=args.partitions, data_size=args.partition_data, big=args.partitions_big,
                              big_repeats=args.big_repeats)
            if name == "e2e":
                kwargs["size"] = args.e2e_size
            data = _call_run(mod, ep, kwargs)
    data["wall_seconds"] = round(time.perf_counter() - t0, 1)
    data["started_at"] = started_at
    data["network"] = {"name": network}
    if net is not None:
        data["network"].update(profile=net.profile.to_json(), description=net.profile.describe(),
                               proxy_cpu_s=round(net.cpu_seconds() - cpu0, 2), proxy_stats=net.stats())
    log(f"== scenario {name} ({network}) done in {human_seconds(data['wall_seconds'])}")
    return data


def _threads_sweep(net: S3Network, args: argparse.Namespace) -> dict[str, Any]:
    """mpcommit's job commit and the bare loop at several commit thread counts, through the S3-like network."""
    t0 = time.perf_counter()
    started_at = time.time()
    out: dict[str, Any] = {"scenario": "commit_threads", "files": args.threads_sweep_files, "by_threads": {},
                           "started_at": started_at}
    for threads in args.threads_sweep:
        log(f"== commit threads sweep: {threads} threads")
        net.reset()
        data = bench_commit.run(net.endpoint_url, sizes=(args.threads_sweep_files,), repeats=args.threads_sweep_repeats,
                                variants=("mpcommit", "bare"), files_per_task=args.files_per_task, threads=threads)
        stats = net.stats()["ops"].get("CompleteMultipartUpload", {})
        data["completes"] = {"requests": stats.get("requests", 0), "late": stats.get("late", 0)}
        out["by_threads"][str(threads)] = data
    out["wall_seconds"] = round(time.perf_counter() - t0, 1)
    out["network"] = {"name": "s3", "profile": net.profile.to_json(), "description": net.profile.describe()}
    return out


def _call_main(name: str, mod: Any, args: argparse.Namespace, extra: list[str] | None = None) -> dict[str, Any]:
    """A scenario written as its own program (``main(argv)``, its own server, a Markdown report): run it with
    this run's backend and repeats, and keep its report."""
    import tempfile

    # Its report goes to a scratch file (its default path is a file of its own in git), then into BENCHMARKS.md.
    out = Path(tempfile.mkdtemp(prefix=f"bench-{name}-")) / f"{name}.md"
    argv = ["--server", "localstack" if args.backend == "localstack" else "embedded",
            "--repeats", str(max(5, args.repeats)), *(extra or []), "--out", str(out)]
    saved = sys.argv
    sys.argv = [f"{OPTIONAL_MODULES[name]}", *argv]  # its report quotes its own command line
    try:
        rc = mod.main(argv)
    finally:
        sys.argv = saved
    text = out.read_text() if out.exists() else ""
    shutil.rmtree(out.parent, ignore_errors=True)
    return {"scenario": name, "markdown": text, "exit_status": rc, "argv": argv[:-2]}


def _call_run(mod: Any, endpoint: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Call a scenario module's ``run(endpoint, **kwargs)``, passing only the keywords it takes."""
    import inspect

    params = inspect.signature(mod.run).parameters
    accepted = {k: v for k, v in kwargs.items() if k in params or any(p.kind is p.VAR_KEYWORD for p in params.values())}
    data = mod.run(endpoint, **accepted)
    return data if isinstance(data, dict) else {"result": data}


def load_results(names: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    keys = [result_name(n, net) for n in names for net in NETWORKS] + ["commit_threads.s3"]
    for key in keys:
        path = RESULTS_DIR / f"{key}.json"
        if path.exists():
            out[key] = json.loads(path.read_text())
    return out


# ---------------------------------------------------------------- the plot
def plot(commit: dict[str, Any], model: S3CostModel, path: Path = PLOT) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return None
    s = bench_commit.summarise(commit, model)
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    styles = {"mpcommit": ("#d62728", "o", 2.6), "bare": ("#7f7f7f", "s", 1.6), "s3fs": ("#1f77b4", "^", 1.6),
              "v2": ("#2ca02c", "D", 1.6), "v1": ("#9467bd", "v", 1.6)}
    panels = [
        ("commit_s", "Measured commit time (task commits + job commit)\non the local server, median", "seconds"),
        ("projected_s", f"Projected onto S3 at {human_bytes(commit['file_size'])} per file", "seconds (projected)"),
        ("projected_big_s", f"Projected onto S3 at {human_bytes(bench_commit.PROJECTED_FILE_SIZE)} per file",
         "seconds (projected)"),
    ]
    for ax, (field, title, ylabel) in zip(axes, panels):
        for v in commit["variants"]:
            pts = sorted((r["files"], r[field]) for r in s["rows"] if r["variant"] == v)
            if not pts:
                continue
            color, marker, width = styles.get(v, ("black", "x", 1.5))
            ax.plot([p[0] for p in pts], [max(p[1], 1e-3) for p in pts], marker=marker, color=color, linewidth=width,
                    label=bench_commit.LABELS.get(v, v))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("files committed")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Job commit vs number of files: mpcommit and the alternatives (same server, same run)", fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- BENCHMARKS.md
def render(results: dict[str, Any], model: S3CostModel = S3CostModel(), note: str = "") -> str:
    # The run of the first scenario that has one (the network scenario may come from a run of its own).
    first = next((results[k] for k in ALL_SCENARIOS if k != "network" and results.get(k, {}).get("meta")), None)
    meta = (first or {}).get("meta") or next((d.get("meta") for d in results.values() if d.get("meta")), {}) or {}
    machine = meta.get("machine", {})
    out: list[str] = ["# Benchmarks", ""]
    out.append("mpcommit against the alternatives it replaces, measured side by side in one run against one S3 server. "
               "Rerun everything with `make bench` (or `python -m bench.run_all --help` for scenarios and sizes); "
               "the raw figures of every run are written to `bench/results/*.json` (kept out of git).")
    out.append("")
    out.append("How to read the figures: this machine's cores are shared with other work, so absolute times are noisy. "
               "Every comparison is therefore made within one run: the variants are interleaved (A B C, B C A, ... "
               "never all of A then all of B), each figure is the median over the repeats, and each ratio is the "
               "median of the per-repeat ratios of variants that ran back to back.")
    out.append("")
    out.append("## Machine and run")
    out.append("")
    labels = {"date": "date", "cpu": "CPU", "cores": "cores", "memory": "memory", "os": "OS", "python": "Python",
              "boto3": "AWS SDK", "others": "other libraries", "load": "load (start)", "load_end": "load (end)",
              "server": "S3 server"}
    rows = [[labels.get(k, k), v] for k, v in machine.items()]
    rows.append(["code", f"mpcommit at commit {meta.get('git', '?')} when the run started (each section names the "
                         "commit it ran against)"])
    if meta.get("started") and meta.get("finished"):
        rows.append(["duration", human_seconds(meta["finished"] - meta["started"])])
    if meta.get("argv") is not None:
        rows.append(["command", "`python -m bench.run_all " + " ".join(meta["argv"]) + "`"])
    if meta.get("networks"):
        rows.append(["networks", ", ".join({"raw": "raw (straight to the loopback server)",
                                            "s3": f"S3-like ({S3_LIKE.describe()}; section 0)"}[n] for n in meta["networks"])])
    out.append(md_table(["", ""], rows, align="ll"))
    out.append("")
    if note:
        out += [f"Note on this run: {note}", ""]

    out.append("## Targets")
    out.append("")
    out += _targets(results)
    out += report_network.s3_targets(results)
    out.append("")
    if any(k.endswith(".s3") for k in results):
        out += report_network.headline_table(results)
    if "network" in results or any(k.endswith(".s3") for k in results):
        out += report_network.network_section(results)

    if "commit" in results:
        out += _commit_section(results["commit"], model)
        out += report_network.s3_subsection("commit", results, model)
    if "writer" in results:
        out += _writer_section(results["writer"])
        out += report_network.s3_subsection("writer", results, model)
    for name, title in (("partitions", "3. Dynamic partitions in one task"), ("e2e", "4. End to end: a PySpark job"),
                        ("compaction", "5. Compaction")):
        if name in results:
            out += _optional_section(name, title, results[name])
        else:
            out += [f"## {title}", "", "Not measured in this run (the scenario's module is not there yet, or it was not selected).", ""]
        out += report_network.s3_subsection(name, results, model)
    out += report_peers.section(results, _measured_line)
    return "\n".join(out) + "\n"


def splice_peers(text: str, results: dict[str, Any]) -> str:
    """``text`` (an existing BENCHMARKS.md) with only the real peers' section rendered anew (between its markers,
    or appended at the end); the rest, which other runs measured and other hands edit, stays as it is."""
    return report_peers.splice(text, report_peers.section(results, _measured_line), report_peers.START,
                               report_peers.END)


def _commit_section(data: dict[str, Any], model: S3CostModel) -> list[str]:
    out = ["## 1. Job commit vs number of files", "", _measured_line(data), ""]
    out.append(bench_commit.markdown(data, model, plot=os.path.relpath(PLOT, REPO_ROOT)))
    return out


def _writer_section(data: dict[str, Any]) -> list[str]:
    out = ["## 2. One task's write: throughput and peak memory", "", _measured_line(data), ""]
    out.append(
        f"One file of {human_bytes(data['size'])} streamed by mpcommit's `MultipartWriter` (then completed) vs boto3's "
        "`upload_fileobj` (s3transfer) of the same bytes from a non-seekable stream, each with its default settings, "
        f"each in a fresh subprocess; {data['repeats']} repeats, interleaved. Peak memory is the process's RSS above "
        "its baseline after imports and client set-up (`ru_maxrss`, and a 2 ms psutil sampler). The Python-heap "
        "column is one separate traced run per side (tracemalloc slows allocation, so it is kept out of the timed runs). "
        "The third row, when present, is a diagnostic, not a target: the same writer with s3transfer's concurrency "
        "(10 parts in flight, 10 threads), to show how much of a throughput difference is the number of parts in flight.")
    out.append("")
    out.append(bench_writer.markdown(data))
    out.append("")
    return out


def _optional_section(name: str, title: str, data: dict[str, Any]) -> list[str]:
    out = [f"## {title}", "", _measured_line(data), ""]
    mod = _optional(name)
    text = None
    if data.get("markdown"):
        # A report of its own: keep it, its headings moved below this section's.
        lines = data["markdown"].splitlines()
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        text = "\n".join("##" + l if l.startswith("#") else l for l in lines).strip()
        text = re.sub(r" --out [^`\s]+", "", text)  # the scratch file it was told to write to
        text += f"\n\n(From `python -m {OPTIONAL_MODULES[name]} {' '.join(data.get('argv', []))}`, exit status {data.get('exit_status')}.)"
    elif mod is not None and callable(getattr(mod, "markdown", None)):
        try:
            text = mod.markdown(data)
        except Exception as exc:  # noqa: BLE001 - fall back to the raw figures
            log(f"{name}: markdown() failed: {exc}")
    if text is None:
        shown = {k: v for k, v in data.items() if k not in ("meta", "runs")}
        text = "```json\n" + json.dumps(shown, indent=1, default=str)[:6000] + "\n```"
    out.append(text)
    out.append("")
    return out


def _x(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f}x"


# ---------------------------------------------------------------- entry point
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("localstack", "moto"), default="localstack")
    p.add_argument("--scenarios", default=",".join(ALL_SCENARIOS),
                   help=f"comma-separated, from {','.join(ALL_SCENARIOS)} (default: all that exist)")
    p.add_argument("--quick", action="store_true", help="small sizes for a fast check (commit 100,1000; writer 64 MiB; ...)")
    p.add_argument("--repeats", type=int, default=5, help="repeats per variant (default 5)")
    p.add_argument("--commit-sizes", default=None, help="files per commit (default 100,1000,10000)")
    p.add_argument("--files-per-task", type=int, default=bench_commit.DEFAULT_FILES_PER_TASK)
    p.add_argument("--commit-threads", type=int, default=bench_commit.DEFAULT_THREADS)
    p.add_argument("--big", type=int, default=bench_commit.DEFAULT_BIG,
                   help="from this many files on, the slow baselines (s3fs, v1, v2) run --big-repeats times "
                        f"(default {bench_commit.DEFAULT_BIG:,}); 0 disables")
    p.add_argument("--big-repeats", type=int, default=bench_commit.DEFAULT_BIG_REPEATS)
    p.add_argument("--writer-size", default=None, help="bytes of the writer scenario (default 1GiB)")
    p.add_argument("--partitions", default=None, help="partition counts of scenario 3 (default 10,100,1000)")
    p.add_argument("--partition-data", default="16MiB", help="bytes of rows one task writes in scenario 3 (default 16MiB)")
    p.add_argument("--partitions-big", type=int, default=1000,
                   help="from this many partitions on, scenario 3 runs --big-repeats times (default 1000); 0 disables")
    p.add_argument("--e2e-size", default=None, help="approximate data size of scenario 4 (default 1GiB)")
    p.add_argument("--peers-plan-raw", default=None,
                   help="scenario peers, raw: runs per size and variant (default: bench_spark_peers.DEFAULT_PLAN)")
    p.add_argument("--peers-plan-s3", default=None, help="scenario peers, through the S3-like network: the same")
    p.add_argument("--peers-size", default="1GiB", help="row data of scenario peers (default 1GiB)")
    p.add_argument("--peers-tasks", type=int, default=4, help="Spark tasks of scenario peers (default 4)")
    p.add_argument("--peers-slots", type=int, default=2,
                   help="task slots of scenario peers' local Spark, local[N] (default 2, the cores)")
    p.add_argument("--networks", default=",".join(NETWORKS),
                   help="raw (straight to the server), s3 (through the S3-like network), or both (default raw,s3)")
    p.add_argument("--threads-sweep", default="8,32,64",
                   help="through the S3-like network, also commit at these thread counts (mpcommit and the bare loop); "
                        "empty to skip")
    p.add_argument("--threads-sweep-files", type=int, default=1000)
    p.add_argument("--threads-sweep-repeats", type=int, default=3)
    p.add_argument("--render-only", action="store_true", help="no run: rewrite BENCHMARKS.md and the plot from bench/results")
    p.add_argument("--splice-peers", action="store_true",
                   help="rewrite only the real peers' parts of the existing report (its own section, between its markers), "
                        "from bench/results/peers*.json; the rest of the file stays as it is")
    p.add_argument("--output", default=str(OUTPUT),
                   help="where to write the report (default bench/results/scratch/run_all.md)")
    p.add_argument("--note", default="", help="a sentence about the run, printed under 'Machine and run'")
    a = p.parse_args(argv)
    a.scenarios = tuple(s.strip() for s in a.scenarios.split(",") if s.strip())
    a.networks = tuple(n.strip() for n in a.networks.split(",") if n.strip())
    if set(a.networks) - set(NETWORKS) or not a.networks:
        p.error(f"--networks: choose among {', '.join(NETWORKS)}")
    a.threads_sweep = tuple(int(x) for x in a.threads_sweep.split(",") if x.strip())
    unknown = set(a.scenarios) - set(ALL_SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    defaults = {"commit_sizes": "100,1000,10000", "writer_size": "1GiB", "partitions": "10,100,1000", "e2e_size": "1GiB"}
    if a.quick:
        defaults = {"commit_sizes": "100,1000", "writer_size": "64MiB", "partitions": "10,100", "e2e_size": "64MiB"}
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.commit_sizes = tuple(int(x) for x in str(a.commit_sizes).split(","))
    a.partitions = tuple(int(x) for x in str(a.partitions).split(","))
    a.writer_size = parse_size(a.writer_size)
    a.partition_data = parse_size(a.partition_data)
    a.e2e_size = parse_size(a.e2e_size)
    a.peers_size = parse_size(a.peers_size)
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    if args.render_only:
        results = load_results(ALL_SCENARIOS)
    else:
        results = run_scenarios(args)
        # Keep the other scenarios' last results in the report when only some were rerun.
        for name, data in load_results(ALL_SCENARIOS).items():
            results.setdefault(name, data)
    model = S3CostModel()
    if "commit" in results:
        path = plot(results["commit"], model)
        if path:
            log(f"plot: {path}")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.splice_peers and out.exists():
        out.write_text(splice_peers(out.read_text(), results))
    else:
        out.write_text(render(results, model, args.note))
    log(f"wrote {args.output} in {human_seconds(time.perf_counter() - t0)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
