"""The main job: PySpark writes a day-partitioned event dataset through mpcommit to an embedded S3 server.

``mpcommit demo`` (or ``python -m mpcommit.demo``) needs no credentials, no Docker and no running service:

1. starts moto's S3 server inside this process (:class:`~mpcommit.demo.embedded_s3.EmbeddedS3Server`);
2. generates web-shop events in Spark: most on one business day, with a tail of late arrivals from the days
   before it (as event streams look when yesterday's stragglers land in today's batch);
3. writes them as Parquet partitioned by ``day`` with :func:`mpcommit.spark.write` and prints the commit
   report and the ``_SUCCESS`` summary;
4. reads the table back with pyarrow's own S3 client and checks the row count, overall and per day, against
   what Spark generated, and that no multipart upload is left pending. Exits non-zero when anything differs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import warnings
from collections.abc import Sequence
from datetime import date, datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table

from ..errors import UsageError
from ..options import S3Options
from ..protocol.commit import CommitReport
from ..protocol.layout import parse_uri
from ..protocol.records.success import SuccessData
from ..store.s3 import store_for
from .embedded_s3 import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, EmbeddedS3Server, missing_demo_extra

BUCKET = "mpcommit-demo"
TABLE = f"s3://{BUCKET}/events"
#: The business day most events fall on; fixed, so that every run generates the same data.
BUSINESS_DAY = date(2024, 6, 15)
DEFAULT_ROWS = 200_000
#: Share of events that arrive late, and how the lateness spreads over earlier days (exponential, capped).
LATE_SHARE = 0.07
MEAN_DAYS_LATE = 1.5
MAX_DAYS_LATE = 10


def generate_events(spark: Any, rows: int, *, partitions: int = 4, seed: int = 7) -> Any:
    """A DataFrame of ``rows`` events: event_id, user_id, event_type, country, amount (purchases only),
    ts (UTC timestamp) and day (its date) -- deterministic for a given seed and partitioning."""
    from pyspark.sql import functions as F

    day_start = int(datetime(BUSINESS_DAY.year, BUSINESS_DAY.month, BUSINESS_DAY.day, tzinfo=timezone.utc).timestamp())
    event_types = ["page_view"] * 6 + ["search"] * 2 + ["add_to_cart", "add_to_cart", "purchase"]
    countries = ["DE", "DE", "FR", "US", "US", "US", "GB", "PL", "ES", "BR", "JP", "IN"]
    late = F.rand(seed + 1) < LATE_SHARE
    # Days late: 1 + an exponential draw, so yesterday gets most stragglers and older days fewer and fewer.
    days_late = F.least(F.lit(MAX_DAYS_LATE), 1 + F.floor(-F.log(1 - F.rand(seed + 2)) * MEAN_DAYS_LATE)).cast("int")
    # Traffic during the day peaks in the afternoon: the mean of two uniforms centres it at 13:00.
    second_of_day = ((F.rand(seed + 3) + F.rand(seed + 4)) / 2 * 86_400 + 3_600).cast("long") % 86_400
    offset = second_of_day - F.when(late, days_late).otherwise(0) * 86_400
    event_type = F.element_at(F.array(*[F.lit(t) for t in event_types]),
                              (F.rand(seed + 5) * len(event_types)).cast("int") + 1)
    df = (
        spark.range(0, rows, 1, partitions)
        .select(
            F.col("id").alias("event_id"),
            (F.rand(seed + 6) * 25_000).cast("long").alias("user_id"),
            event_type.alias("event_type"),
            F.element_at(F.array(*[F.lit(c) for c in countries]), (F.rand(seed + 7) * len(countries)).cast("int") + 1)
            .alias("country"),
            F.timestamp_seconds(F.lit(day_start) + offset).alias("ts"),
        )
        .withColumn("amount", F.when(F.col("event_type") == "purchase",
                                     F.round(F.rand(seed + 8) * 180 + 4.99, 2).cast("decimal(10,2)")))
        .withColumn("day", F.to_date("ts"))
    )
    return df


def run(rows: int = DEFAULT_ROWS, *, console: Console | None = None, spark_partitions: int = 4) -> int:
    """Run the demo; return the exit status (0 when the data read back matches what was written)."""
    if rows < 1:
        raise UsageError(f"--rows must be at least 1, got {rows}")
    # Before anything starts: name everything that is missing at once, rather than fail halfway.
    missing = [what for module, what in (("pyspark", "PySpark"), ("moto.server", "moto's S3 server (moto[server])"))
               if not _importable(module)]
    if missing:
        raise UsageError(missing_demo_extra(" and ".join(missing)))
    console = console or Console()
    started = time.monotonic()
    console.rule("[bold]mpcommit demo")
    with EmbeddedS3Server() as server:
        options = server.options()
        _create_bucket(server)
        console.print(f"Embedded S3 server (moto) at [bold]{server.endpoint_url}[/], bucket [bold]{BUCKET}[/]")
        spark = _spark_session(spark_partitions)
        try:
            from ..spark import write

            console.print(f"Spark {spark.version} ({spark.sparkContext.master}); generating {rows:,} events "
                          f"around {BUSINESS_DAY} with late arrivals ...")
            events = generate_events(spark, rows, partitions=spark_partitions)
            expected = {str(r["day"]): r["count"] for r in events.groupBy("day").count().collect()}
            report = write(events, TABLE, format="parquet", mode="overwrite", partition_by=["day"], s3=options)
        finally:
            spark.stop()
        _print_report(console, report)
        destination = parse_uri(TABLE)
        store = store_for(options)
        success = SuccessData.from_bytes(store.get_object(destination.bucket, destination.success_key),
                                         where=f"{TABLE}/_SUCCESS")
        _print_success(console, success)
        found = _read_back(server)
        pending = list(store.list_multipart_uploads(destination.bucket, destination.root))
    files = _files_per_partition(success.filenames, destination.root)
    return _verdict(console, rows=rows, expected=expected, found=found, report=report, pending=len(pending),
                    seconds=time.monotonic() - started, files=files)


# ---------------------------------------------------------------- pieces
def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package (moto, for moto.server)
        return False


def _create_bucket(server: EmbeddedS3Server) -> None:
    # Setup outside the commit protocol (mpcommit never creates buckets): a plain client from the one place
    # AWS clients are made.
    from ..store.session import s3_client

    options = S3Options(endpoint_url=server.endpoint_url, access_key_id=ACCESS_KEY_ID,
                        secret_access_key=SECRET_ACCESS_KEY, region=REGION)
    s3_client(options)[0].create_bucket(Bucket=BUCKET)


def _spark_session(partitions: int) -> Any:
    # Python workers must run this interpreter (the one mpcommit and pyarrow are installed in).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Everything here is on this machine: bind Spark to loopback (and skip its warning about the hostname).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{max(1, min(partitions, os.cpu_count() or 2))}]")
        .appName("mpcommit-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _read_back(server: EmbeddedS3Server) -> dict[str, int]:
    """Rows per day as pyarrow's C++ S3 client reads the table: an independent reader of what was committed."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from pyarrow import fs

    s3 = fs.S3FileSystem(access_key=ACCESS_KEY_ID, secret_key=SECRET_ACCESS_KEY, region=REGION, scheme="http",
                         endpoint_override=urlsplit(server.endpoint_url).netloc)
    destination = parse_uri(TABLE)
    dataset = ds.dataset(f"{destination.bucket}/{destination.prefix}", filesystem=s3, format="parquet",
                         partitioning=ds.partitioning(flavor="hive"))
    days = dataset.to_table(columns=["day"]).column("day").cast("string")
    counts = pc.value_counts(days)
    return {str(v["values"]): int(v["counts"]) for v in counts.to_pylist()}


def _print_report(console: Console, report: CommitReport) -> None:
    table = Table(title="Commit report", title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    table.add_row("Job", report.job_id)
    table.add_row("Destination", report.uri)
    table.add_row("Outcome", f"{report.outcome.value} (mode {report.mode.value})")
    table.add_row("Files", f"{report.files:,}")
    table.add_row("Bytes", f"{_human_bytes(report.bytes)} ({report.bytes:,})")
    table.add_row("Rows", f"{report.rows:,}" if report.rows is not None else "unknown")
    table.add_row("Partitions", f"{len(report.partitions):,}")
    table.add_row("Write (Spark tasks)", f"{report.timings.get('write', 0.0):.2f} s")
    table.add_row("Commit", f"{report.timings.get('commit', 0.0):.2f} s on the driver, job.commit() from call to "
                  f"return, _SUCCESS and cleanup included ({_steps(report.timings)})")
    console.print(table)


def _steps(timings: dict[str, float]) -> str:
    steps = ("complete", "replace", "abort_leftovers", "success", "cleanup")
    return ", ".join(f"{s} {timings[s]:.3f}" for s in steps if s in timings)


def _print_success(console: Console, success: SuccessData) -> None:
    table = Table(title=f"{TABLE}/_SUCCESS (written last by the commit)", title_justify="left", show_header=False,
                  box=None, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    table.add_row("Committer", f"{_success_name(success)}, job {success.job_id}")
    table.add_row("Date", f"{datetime.fromtimestamp(success.timestamp_ms / 1000, timezone.utc).isoformat()} on "
                  f"{success.hostname or '?'}")
    table.add_row("Mode", success.mode)
    table.add_row("Files", f"{success.files:,} ({_human_bytes(success.bytes)})")
    table.add_row("Rows", f"{success.rows:,}" if success.rows is not None else "unknown")
    parts = list(success.partitions)
    shown = ", ".join(parts[:3]) + (f" ... {parts[-1]}" if len(parts) > 3 else "")
    table.add_row("Partitions", f"{len(parts)}: {shown}")
    table.add_row("Timings (s)", "  ".join(f"{k} {v:.3f}" for k, v in success.timings.items()) +
                  "  (total: the commit up to writing this file, which is why it is below the report's Commit)")
    console.print(table)


def _success_name(success: SuccessData) -> str:
    from ..protocol.records.success import SUCCESS_NAME

    return f"mpcommit ({SUCCESS_NAME})"


def _files_per_partition(filenames: Sequence[str], prefix: str) -> dict[str, int]:
    """``{"2024-06-15": 4, ...}``: committed files per ``day=`` directory, from the _SUCCESS file list."""
    out: dict[str, int] = {}
    for name in filenames:
        rel = name[len(prefix):] if name.startswith(prefix) else name
        folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
        day = folder.split("=", 1)[1] if folder.startswith("day=") else folder
        out[day] = out.get(day, 0) + 1
    return out


def _verdict(console: Console, *, rows: int, expected: dict[str, int], found: dict[str, int], report: CommitReport,
             pending: int, seconds: float, files: dict[str, int]) -> int:
    table = Table(title="Read back with pyarrow's S3 client: rows per day", title_justify="left")
    table.add_column("day")
    table.add_column("files", justify="right")
    table.add_column("generated", justify="right")
    table.add_column("read back", justify="right")
    for day in sorted(set(expected) | set(found)):
        gen, got = expected.get(day, 0), found.get(day, 0)
        table.add_row(day, str(files.get(day, 0)), f"{gen:,}", f"{got:,}" if got == gen else f"[red]{got:,}[/]")
    total = sum(found.values())
    table.add_row("[bold]total", f"[bold]{sum(files.values())}", f"[bold]{sum(expected.values()):,}", f"[bold]{total:,}")
    console.print(table)
    problems = []
    if total != rows or sum(expected.values()) != rows:
        problems.append(f"read back {total:,} rows, generated {sum(expected.values()):,}, asked for {rows:,}")
    if found != expected:
        problems.append("rows per day differ between what Spark generated and what was read back")
    if report.rows != rows:
        problems.append(f"the commit report counts {report.rows} rows, not {rows:,}")
    if pending:
        problems.append(f"{pending} multipart upload{'' if pending == 1 else 's'} left pending")
    if problems:
        for p in problems:
            console.print(f"[bold red]MISMATCH[/] {p}")
        return 1
    console.print(f"[bold green]OK[/] {total:,} rows in {len(found)} day partitions read back exactly as written; "
                  f"no pending uploads. Took {seconds:.1f} s.")
    return 0


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpcommit.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"events to generate (default {DEFAULT_ROWS:,})")
    args = parser.parse_args(argv)
    try:
        return run(args.rows)
    except UsageError as exc:
        print(f"mpcommit demo: error: {exc}", file=sys.stderr)
        return 2
