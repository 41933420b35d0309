"""BENCHMARKS.md's section on the real peers (scenario ``peers``, ``bench/bench_spark_peers.py``), raw (``peers``)
and with the S3-like network (``peers.s3``): one section of its own, between markers, with its own target verdicts,
so that ``python -m bench.run_all --render-only --splice-peers`` rewrites it and nothing else."""

from __future__ import annotations

from typing import Any

from .bench_spark_peers import DOUBLES, LABELS, MASTER, ROW_BYTES, SPARK_TASKS, summarise
from .common import human_bytes, human_seconds, md_table, median

#: The networks in the order they are reported, with their results' keys.
NETWORKS = (("peers", "raw (no added latency; through the counting proxy)"),
            ("peers.s3", "with the S3-like network"))
SHORT = {"v1": "v1", "v2": "v2", "magic": "magic", "directory": "directory", "mpcommit": "mpcommit"}

START, END = "<!-- bench:peers -->", "<!-- /bench:peers -->"
TITLE = "## Real peers: Spark's own writers with the S3A committers"


def _x(sp: dict[str, float] | None) -> str:
    if not sp or not sp.get("n") or sp["paired"] != sp["paired"]:
        return "–"
    if sp["n"] <= 1:
        return f"{sp['paired']:.2f}x (one pair)"
    ci = sp.get("ci_lo", float("nan"))
    if ci == ci:  # three pairs or more: the bootstrap interval of the median ratio
        return f"**{sp['paired']:.2f}x** (95% CI {sp['ci_lo']:.2f}-{sp['ci_hi']:.2f}, range {sp['lo']:.2f}-{sp['hi']:.2f}, n={sp['n']})"
    return f"**{sp['paired']:.2f}x** (range {sp['lo']:.2f}-{sp['hi']:.2f}, n={sp['n']})"


def _range(median: float, lo: float, hi: float, n: int) -> str:
    if n <= 1:
        return human_seconds(median)
    return f"{human_seconds(median)} ({human_seconds(lo)}-{human_seconds(hi)})"


# ---------------------------------------------------------------- targets
def target_lines(results: dict[str, Any]) -> list[str]:
    """Issue 11's targets for the real peers, per network and size: mpcommit's end to end <= 1.0x and job commit
    <= 0.5x the magic committer's (paired ratios), requests per output file <= magic's, zero bytes copied."""
    lines: list[str] = []
    for key, label in NETWORKS:
        data = results.get(key)
        if not data or not data.get("runs"):
            continue
        for files, s in summarise(data).items():
            rows, ratios = s["rows"], s["ratios"].get("mpcommit")
            if "mpcommit" not in rows or "magic" not in rows or not ratios:
                continue
            mp, mg = rows["mpcommit"], rows["magic"]
            where = f"{files:,} files, {label}"
            e2e, jc = ratios["seconds"], ratios["job_commit"]
            lines.append(_line(e2e["paired"] <= 1.0, f"end to end, mpcommit ÷ Spark + S3A magic committer <= 1.0x ({where}): "
                                                     f"{_x(e2e)}" + _miss(e2e["paired"], 1.0, "slower") + _straddle(e2e, 1.0)))
            lines.append(_line(jc["paired"] <= 0.5, f"job commit, mpcommit ÷ S3A magic committer <= 0.5x ({where}): "
                                                    f"{_x(jc)} ({human_seconds(mp['job_commit'])} vs "
                                                    f"{human_seconds(mg['job_commit'])})" + _miss(jc["paired"], 0.5, "over")
                                                    + _straddle(jc, 0.5)))
            lines.append(_line(mp["requests_per_file"] <= mg["requests_per_file"],
                               f"requests per output file <= the magic committer's ({where}): "
                               f"**{mp['requests_per_file']:.2f} vs {mg['requests_per_file']:.2f}** "
                               f"({mp['requests_per_file'] / mg['requests_per_file']:.2f}x)"))
            copied = mp.get("copied_max", mp["copied"])  # zero in every run, not in the median one
            lines.append(_line(copied == 0, f"zero bytes copied server-side in every run ({where}): "
                                            f"**{human_bytes(copied)}** at most"))
    return lines


def _straddle(sp: dict[str, float], target: float) -> str:
    """A warning when the pairs' ratios fall on both sides of the target: the verdict is then not a firm one."""
    if sp.get("n", 0) > 1 and sp["lo"] <= target < sp["hi"]:
        return (f" -- but the pairs fall on both sides of {target:.1f}x ({sp['lo']:.2f}-{sp['hi']:.2f}x): "
                "not a firm verdict")
    return ""


def _line(ok: bool, text: str) -> str:
    return f"- {'met' if ok else '**missed**'}: {text}"


def _miss(value: float, target: float, word: str) -> str:
    if value <= target:
        return ""
    return f" -- missed by {value / target - 1:.0%} ({value:.2f}x against {target:.1f}x); see *Why, and what would close it* below"


# ---------------------------------------------------------------- the section
def section(results: dict[str, Any], measured_line: Any) -> list[str]:
    present = [(key, label) for key, label in NETWORKS if results.get(key, {}).get("runs")]
    out = [START, TITLE, ""]
    if not present:
        return out + ["Not measured in this run (scenario `peers`).", "", END]
    first = results[present[0][0]]
    out += _machine(results, present)
    out += _intro(first)
    if SCOPE:
        out += [f"**What ran, and what is real.** {SCOPE}", ""]
    verdicts = target_lines(results)
    if verdicts:
        out += ["### Targets (issue 11)", "", *verdicts, ""]
        out += [f"**Why, and what would close it.** {WHY}", ""] if WHY else []
    for key, label in present:
        data = results[key]
        out += [f"### {label[0].upper() + label[1:]}", "", measured_line(data), ""]
        out += _network(data, key)
    out += _requests_section(results, present)
    out.append(END)
    return out


#: What the run of 2026-11-23 covered, and what it left out and why.
SCOPE = (
    "Every figure in this section is a real run of the real implementation: Spark's own writers with Hadoop's own "
    "committers, and mpcommit. Only the network of the second half is modelled (the proxy's S3-like latency and "
    "bandwidth). The Python re-implementations of FileOutputCommitter v1/v2 and the s3fs transaction in sections "
    "1-4 are models; this section is where the real FileOutputCommitter is measured. "
    "Raw: 1,000 files of 1 GiB of row data, all five writers; the plan's third round (a third magic/mpcommit "
    "pair) was stopped, so end to end and job commit rest on two pairs and show a range, not a bootstrap "
    "interval (it needs three). With the S3-like network: 1,000 files of 128 MiB, the magic committer and "
    "mpcommit only, two pairs in ABBA order. Not run: **10,000 files and the other three writers with latency**, "
    "for time: the raw half's eight runs took 42.5 min while the load average on the two shared cores rose from "
    "4 to 47 (other engineers' benchmarks), one magic run took 19 min at its worst, and 10,000 files sends ten "
    "times the requests per run (about 91,000 for the magic committer). Rerun them on a quieter machine with "
    "`python -m bench.run_all --scenarios peers` (its default plan holds them)."
)

#: What the verdicts above rest on: written from the figures of the run of 2026-11-23 (the tables below); a new
#: run's figures may call for other words.
WHY = (
    "Wall times in this run are drowned by the machine's load (the 1-minute load average went from 4 to 47 on two "
    "cores during the raw half: one magic run took 112 s at load 4 and 19 min at load 40), so the end-to-end ratio "
    "rests on two pairs that disagree (1.10x in the calm first pair, 0.36x in the second, where the load rose "
    "under the magic run): **it is not a firm verdict either way**. CPU per run is the steadier measure: the "
    "whole job's CPU (Spark JVM + Python workers + Python driver) was about the same for mpcommit and the magic "
    "committer (see the CPU table), and the S3 server spent less on mpcommit's requests. "
    "**Job commit** is missed clearly, raw: in the calm pair 5.81 s vs 5.62 s (1.03x), not 0.5x. Both commits do "
    "the same irreducible work, one CompleteMultipartUpload per file in 32 parallel threads, which on LocalStack "
    "costs the server the same for either; the magic committer's job commit adds only a read of four "
    "`.pendingset` files. mpcommit's `commit` timing also holds steps Spark does elsewhere or not at all: "
    "`replace` (the overwrite's deletion, which Spark does before the job starts, outside its `job commit time`: "
    "mpcommit keeps the old data until the commit), `abort_leftovers` (a ListMultipartUploads) and the journal; "
    "and its completes run in one Python process (boto3, the GIL) that the load starves more than the JVM's "
    "threads. What would close it: start `abort_leftovers` and the destination listing of `replace` alongside the "
    "completes instead of before them, and complete from more than one process (or report the completes alone, "
    "which is what the magic committer's metric times); a 0.5x on job commit cannot come from the completes "
    "themselves, which both sides must send. "
    "**With the S3-like network** end to end is met in both pairs (0.27x and 0.45x), "
    "and the job commit lands at 0.47x with pairs on both sides of 0.5x (0.39x and 0.56x): met, not firmly. "
    "The end-to-end gap is mostly in the tasks: S3A writes a task's files one after another, each paying its "
    "round trips (about nine requests per file at 30 ms or more), while an mpcommit task uploads through one "
    "thread pool shared by all its open files (`upload_threads`) and sends three requests per file (this reading "
    "is from the two designs and the request counts; the tasks' time was not split further here); the magic committer's job commit (12.06 s median, its task commits 28 s summed) was not broken down "
    "further in this run. The job's CPU was 21.7 s for mpcommit vs 55.5 s for the magic committer per run "
    "(medians, the CPU table), the S3 server's 8.3 s vs 24.4 s. "
    "**End to end, what costs mpcommit**: its tasks convert Spark's rows to Arrow and encode Parquet in Python "
    "workers (the *Python workers* CPU column), and it writes **25% more bytes** for the same rows (1.2 GiB vs "
    "948.6 MiB): pyarrow keeps dictionary encoding whenever the dictionary fits its 1 MiB page limit, which every "
    "column of these small files (26,843 rows each) does, even for unique random doubles where a dictionary "
    "only adds bytes; parquet-mr falls back to plain encoding when the dictionary does not pay. The same table "
    "written by pyarrow alone: 1.16x of the raw row bytes with dictionaries, 0.93x with `use_dictionary=False`, "
    "which is the ratio seen here. Dropping a column's dictionary when it does not shrink the first page (as "
    "parquet-mr does) would close that part. "
    "**Requests per file** (3.02 vs 9.08) and **zero bytes copied** are met in every run: mpcommit sends per "
    "file one CreateMultipartUpload, one UploadPart and one CompleteMultipartUpload; the magic committer sends "
    "the same three plus two PutObject (its `.pending` manifest under `__magic` among them), one GetObject (the "
    "manifest read back at task commit) and three HeadObject per file. The directory staging committer is the "
    "one peer that matches mpcommit's 3.02 requests per file (its manifests go to the cluster filesystem, here "
    "local disk). FileOutputCommitter v1 and v2 copy every byte once (v2) or twice (v1), with about 20 "
    "requests per file."
)


def _machine(results: dict[str, Any], present: list[tuple[str, str]]) -> list[str]:
    """The machine and the load under each half of the scenario (its runs' own load averages, 1 min)."""
    meta = next((results[k].get("meta") for k, _ in present if results[k].get("meta")), None) or {}
    m = meta.get("machine") or {}
    out = []
    if m:
        out.append(f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')}, {m.get('memory', '?')}; {m.get('os', '?')}; "
                   f"{m.get('python', '?')}; {m.get('others', '')}; S3 server {m.get('server', '?')}.")
    for key, label in present:
        loads = [r["load_before"][0] for r in results[key]["runs"]]
        if loads:
            out.append(f"Load average (1 min) before each run, {label.split(' (')[0]}: median {median(loads):.1f}, "
                       f"range {min(loads):.1f}-{max(loads):.1f}, over {len(loads)} runs (2 cores, shared with "
                       "other engineers' work while measuring).")
    return out + [""] if out else out


def _intro(data: dict[str, Any]) -> list[str]:
    shapes = data.get("shapes") or {}
    shape_text = "; ".join(f"{int(f):,} files: {sh['values']:,} values of `p`" for f, sh in sorted(shapes.items(), key=lambda kv: int(kv[0])))
    rows = next(iter(shapes.values()), {}).get("rows", 0)
    size = human_bytes(data.get("size", 0))
    tasks, master = data.get("tasks", SPARK_TASKS), data.get("master", MASTER)
    out = [
        "Spark's own `df.write.mode(\"overwrite\").partitionBy(\"p\").parquet(\"s3a://...\")` with Hadoop's committers, "
        "against `mpcommit.spark.write(df, \"s3a://...\", \"parquet\", mode=\"overwrite\", partition_by=[\"p\"])`: the "
        "same DataFrame, the same LocalStack, one Spark application per network with every variant's runs "
        "interleaved in it. Every variant here is the real, unmodified implementation (Spark "
        f"{data.get('spark_version', '?')}, hadoop-aws 3.5.0 with the AWS SDK v2, spark-hadoop-cloud 4.1.1 from "
        "`make s3a-install`); nothing in this section is a model. What is modelled is the network only, in the "
        "second half (the S3-like proxy of `bench/s3_network.py`, section 0); the server is LocalStack on the same two cores.",
        "",
        f"- **The data**: `spark.range(rows, numPartitions={tasks})` with `p = id % values` (int) and "
        f"{DOUBLES} `rand()` doubles: {ROW_BYTES} bytes of incompressible row data besides the partition column (which "
        f"lives in the path), so {rows:,} rows make {size}. Every one of the {tasks} tasks holds rows of every "
        "value of `p`, so each task writes one file per value and files = tasks × values "
        f"({shape_text}). Spark (parquet-mr) and mpcommit (pyarrow) both write snappy Parquet; "
        "the bytes they write differ (the *Parquet written* column, and below).",
        f"- **Spark**: `{master}` (this machine has 2 cores; driver and executors are one JVM), driver memory "
        f"{data.get('driver_memory', '?')}, event log on; one untimed warm-up write of each variant first.",
        "- **The committers**: **v1** and **v2** are `FileOutputCommitter` (algorithm 1 or 2) through Spark's own "
        "`SQLHadoopMapReduceCommitProtocol` and Parquet's `ParquetOutputCommitter`; **magic** and **directory** are "
        "the S3A committers through spark-hadoop-cloud's `PathOutputCommitProtocol` and "
        "`BindingParquetOutputCommitter`, the directory committer with conflict mode `append` (every run writes to a "
        "fresh prefix, which Spark's overwrite has checked) and its staging on the local `file://` filesystem "
        "(`fs.s3a.committer.staging.tmp.path`), which stands in for a cluster filesystem in local mode. S3A's "
        "settings are its defaults otherwise (32 committer threads, blocks buffered on disk, 64 MiB parts, "
        "`fs.s3a.create.performance` off); mpcommit's are its defaults (32 commit threads).",
        "- Spark 4 turns the magic committer on **by itself** once spark-hadoop-cloud is on the classpath "
        "(`SparkContext.enableMagicCommitterIfNeeded` sets the commit protocol, the Parquet committer and "
        "`fs.s3a.committer.name=magic` unless `spark.hadoop.fs.s3a.committer.magic.enabled=false`): so the "
        "magic committer is what a Spark 4 user with these jars gets, and v1/v2 here name Spark's own protocol "
        "and committer explicitly.",
        "- **End to end**: the wall time of the write call in the driver. **Job commit**: for Spark, the "
        "SQL metric `job commit time` that Spark's `FileFormatWriter` takes around the commit protocol's "
        "`commitJob` (from the event log's `SparkListenerDriverAccumUpdates`); **task commits** likewise "
        "(`task commit time`, summed over the tasks, so it can exceed the wall time); for mpcommit, the job "
        "commit is its report's `commit` timing (validate, journal, completes, `_SUCCESS`, clean-up).",
        "- **Requests and bytes**: every client sends through the counting proxy (S3A's `fs.s3a.endpoint` and "
        "mpcommit's endpoint both point at it): the raw half through the proxy with no shaping (it forwards and "
        "counts; section 0 gives the proxy's cost: about 0.9x of the direct throughput), the second half with the S3-like "
        "profile. Counts are per run (the proxy is reset before each write), divided by the files the run left.",
        "- **CPU**: `/proc` (psutil, sampled every 0.5 s so that Python workers that exit keep their time) of the "
        "Spark JVM (driver and executors in `local[2]`), of the Python workers under it (mpcommit's tasks run "
        "there; Spark's writers run none) and of the Python driver (mpcommit's job commit runs there); the tasks' "
        "own JVM time from the event log (`Executor CPU Time`; S3A's upload threads and the driver's commit are "
        "not task threads); the S3 server's and the proxy's.",
        "- **Checked every run**: the files and bytes left under the prefix, no pending uploads left, the "
        "`_SUCCESS` (the S3A committers' JSON names the committer; FileOutputCommitter's is empty); in the raw "
        "half, the first run of every variant and size also has its rows counted from every file's footer.",
        "",
    ]
    return out


def _network(data: dict[str, Any], key: str) -> list[str]:
    out: list[str] = []
    plan = data.get("plan", "")
    out.append(f"Runs per size and variant: `{plan}` (the magic committer and mpcommit back to back in every round, "
               "ABBA from round to round; the others between them, in rotating order). "
               + (f"The child process exited with status {data.get('exit_status')}." if data.get("exit_status") else ""))
    out.append("")
    for files, s in summarise(data).items():
        rows, ratios = s["rows"], s["ratios"]
        table = []
        for v in ("mpcommit", "magic", "directory", "v2", "v1"):
            r = rows.get(v)
            if not r:
                continue
            rt = ratios.get(v, {})
            table.append([LABELS[v], r["n"], _range(r["seconds"], r["lo"], r["hi"], r["n"]),
                          "1.00x" if v == "magic" else _x(rt.get("seconds")),
                          _range(r["job_commit"], r["job_commit_lo"], r["job_commit_hi"], r["n"]),
                          "1.00x" if v == "magic" else _x(rt.get("job_commit")),
                          human_seconds(r["task_commit"]) if r["task_commit"] == r["task_commit"] else "–",
                          f"{r['requests_per_file']:.2f}", human_bytes(r["copied"]),
                          f"{r['files']:,.0f}, {human_bytes(r['bytes'])}", f"{r['load']:.1f}"])
        out.append(f"**{files:,} files** ({s['shape'].get('rows', 0):,} rows):")
        out.append("")
        out.append(md_table(["committer", "runs", "end to end (median, range)", "÷ magic", "job commit", "÷ magic",
                             "task commits (sum)", "requests per file", "copied server-side", "Parquet written",
                             "load (1 min)"], table, align="lrrlrlrrrrr"))
        out.append("")
        cpu = []
        for v in ("mpcommit", "magic", "directory", "v2", "v1"):
            r = rows.get(v)
            if not r:
                continue
            c = r["cpu"]
            own = c.get("jvm", 0.0) + c.get("python_workers", 0.0) + c.get("driver_python", 0.0)
            cpu.append([LABELS[v], f"{c.get('jvm', float('nan')):.1f} s", f"{r['executor_cpu']:.1f} s",
                        f"{c.get('python_workers', 0.0):.1f} s", f"{c.get('driver_python', float('nan')):.1f} s",
                        f"**{own:.1f} s**", f"{c.get('server', float('nan')):.1f} s", f"{c.get('proxy', float('nan')):.1f} s"])
        out.append(f"CPU per run at {files:,} files (medians):")
        out.append("")
        out.append(md_table(["committer", "Spark JVM (driver + executors)", "of it in tasks (executorCpuTime)",
                             "Python workers", "Python driver", "the job's total", "S3 server", "proxy"], cpu,
                            align="lrrrrrrr"))
        out.append("")
        mp = rows.get("mpcommit", {}).get("mp_timings")
        if mp:
            out.append("mpcommit's own timings (medians): " + ", ".join(
                f"{k} {human_seconds(v)}" for k, v in mp.items()) + ".")
            out.append("")
        checks = []
        for v, r in rows.items():
            bits = [f"`_SUCCESS`: {r['success']}"]
            if r.get("rows") is not None:
                bits.append(f"{r['rows']:,} rows")
            if r["pending_left"]:
                bits.append(f"**{r['pending_left']} pending uploads left**")
            checks.append(f"{SHORT[v]} ({', '.join(bits)})")
        out.append("Checks: " + "; ".join(checks) + ".")
        out.append("")
    return out


def _requests_section(results: dict[str, Any], present: list[tuple[str, str]]) -> list[str]:
    out = ["### Requests per output file, by operation", ""]
    out.append("From the raw half's runs (medians; the S3-like half's counts are given in its tables' *requests per "
               "file* column: the same requests, apart from retries). Every request of the write is counted, the "
               "tasks' and the commit's alike, set-up and Spark's own checks of the destination included.")
    out.append("")
    key = present[0][0]
    for files, s in summarise(results[key]).items():
        rows = s["rows"]
        variants = [v for v in ("mpcommit", "magic", "directory", "v2", "v1") if v in rows]
        ops = sorted({op for v in variants for op in rows[v]["ops_per_file"]})
        table = [[op, *[f"{rows[v]['ops_per_file'].get(op, 0.0):.2f}" if rows[v]["ops_per_file"].get(op) else "–"
                        for v in variants]] for op in ops]
        table.append(["**total**", *[f"**{rows[v]['requests_per_file']:.2f}**" for v in variants]])
        table.append(["bytes copied server-side", *[human_bytes(rows[v]["copied"]) for v in variants]])
        table.append(["bytes sent (request bodies)", *[human_bytes(rows[v]["up"]) for v in variants]])
        out.append(f"**{files:,} files**:")
        out.append("")
        out.append(md_table(["operation", *[SHORT[v] for v in variants]], table, align="l" + "r" * len(variants)))
        out.append("")
    return out


def splice(text: str, block: list[str], start: str, end: str, *, before: str | None = None) -> str:
    """``text`` with the lines between the ``start`` and ``end`` markers replaced by ``block`` (markers included
    in ``block``); without the markers, ``block`` goes before the first line starting with ``before``, or at the
    end."""
    body = "\n".join(block)
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        return head + body + tail
    if before is not None:
        idx = text.find("\n" + before)
        if idx >= 0:
            return text[: idx + 1] + body + "\n\n" + text[idx + 1:]
    return text.rstrip("\n") + "\n\n" + body + "\n"
