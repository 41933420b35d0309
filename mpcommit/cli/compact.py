"""``mpcommit compact S3URI``: merge the small files of an existing dataset (see
:mod:`mpcommit.compaction.standalone`)."""

from __future__ import annotations

import time

import click
from rich import box
from rich.console import Console
from rich.table import Table

from ..compaction.planner import HIVE_SMALL_FILE_AVG, HIVE_TARGET_SIZE
from ..compaction.standalone import BinStatus, CompactionReport, Outcome
from ..compaction.standalone import compact as run_compact
from .common import (
    S3URI,
    SIZE,
    ProgressBars,
    cli_context,
    err_console,
    human_bytes,
    order_options,
    order_settings,
    out_console,
    print_json,
)

FORMATS = ("parquet", "json", "text", "csv", "csv-header")


#: Without a terminal (cron, a pipe), a progress line per phase at most this often, and when it ends.
PLAIN_PROGRESS_SECONDS = 10.0


class _Bars(ProgressBars):
    """Progress on stderr in every mode: rich's bars on a terminal; elsewhere (cron, CI, a pipe) plain lines --
    each phase's start, its count every :data:`PLAIN_PROGRESS_SECONDS`, and its end -- so that a long merge is
    never silent in a log."""

    LABELS = {
        **ProgressBars.LABELS,
        "list": "Listing files",
        "plan": "Planning bins",
        "merge": "Merging bins",
        "commit.complete": "Completing merged files",
        "commit.replace": "Deleting merged sources",
    }

    def __init__(self, *, every: float = PLAIN_PROGRESS_SECONDS) -> None:
        super().__init__()
        self._every = every
        self._last: dict[str, tuple[float, int]] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if phase not in self.LABELS:  # the commit's other steps are quick: no bar or line of their own
            return
        if self.enabled:
            super().__call__(phase, done, total or None)
            return
        now = time.monotonic()
        last = self._last.get(phase)
        finished = total is not None and done >= total
        if last is not None and last[1] == done:
            return
        if last is None or finished or now - last[0] >= self._every:
            self._last[phase] = (now, done)
            count = f"{done:,}/{total:,}" if total else f"{done:,}"
            self.console.print(f"mpcommit: {self.LABELS[phase].lower()}: {count}", soft_wrap=True)


@click.command(short_help="Merge small files of a dataset into large ones, with server-side copies.")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--target-size", type=SIZE, default=None, metavar="SIZE",
              help=f"Pack merged files up to this size. Default: {HIVE_TARGET_SIZE:,} bytes (Hive's).")
@click.option("--small-file-avg", type=SIZE, default=None, metavar="SIZE",
              help=f"Merge a partition when its average file is smaller. Default: {HIVE_SMALL_FILE_AVG:,} bytes (Hive's).")
@click.option("--format", "fmt", type=click.Choice(FORMATS, case_sensitive=False), default=None,
              help="The files' format, when their names do not say (csv-header: CSV whose files start with a "
                   "header line). Default: from the file suffixes.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing. Bins the real run would skip (CSV "
              "files that may or may not start with a header) are read as the real run reads them, and reported.")
@click.option("--summary", is_flag=True, help="Print the totals only, not a line per merged file (for cron logs).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@order_options
@click.pass_context
def compact(ctx: click.Context, uri: str, target_size: int | None, small_file_avg: int | None, fmt: str | None,
            dry_run: bool, summary: bool, as_json: bool, lease: float | None, max_wait: float | None) -> None:
    """Merge the small files of the dataset at S3URI, per partition directory, as a job of its own.

    Merged files are assembled in multipart uploads, mostly from server-side copies of their sources;
    they are completed first, then the sources deleted (each only if unchanged since planning). If the run
    is interrupted, `mpcommit jobs recover S3URI` finishes it: every row stays visible exactly once.
    Progress goes to stderr, as bars on a terminal and as plain lines otherwise.
    Exit status 1 when a partition could not be merged, or with --dry-run would not be (its files are left as
    they are).
    """
    with _Bars() as bars:
        report = run_compact(uri, s3=cli_context(ctx).s3, target_size=target_size, small_file_avg=small_file_avg,
                             format=fmt, dry_run=dry_run, progress=bars, order_settings=order_settings(lease, max_wait))
    if as_json:
        print_json(report.to_json())
    else:
        _print(report, summary=summary)
    skipped = report.skipped
    if skipped:
        err = err_console()
        would = report.outcome is Outcome.DRY_RUN
        for b in skipped:
            err.print(f"mpcommit: warning: {b.partition or '(root)'}: {len(b.sources)} files "
                      f"{'would not be' if would else 'not'} merged: {b.message}", soft_wrap=True)
        err.print(f"mpcommit: error: {len(skipped)} of {len(report.bins)} bins "
                  f"{'would be skipped by the real run' if would else 'could not be merged'}; their files "
                  f"{'would be' if would else 'were'} left as they are", soft_wrap=True)
        ctx.exit(1)


def _print(report: CompactionReport, *, summary: bool = False) -> None:
    out = out_console()
    if not report.bins:
        out.print(f"Nothing to compact under {report.uri}: {report.files_listed} files, {report.reason}.",
                  soft_wrap=True)
        return
    if summary:
        _print_summary(report, out)
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("partition", "files", "bytes", "format", "strategy", "status", "output"):
        table.add_column(column, justify="right" if column in ("files", "bytes") else "left", overflow="fold")
    for b in report.bins:
        table.add_row(b.partition or "(root)", str(len(b.sources)), human_bytes(b.bytes), b.group, b.strategy,
                      b.status.value, b.output.rsplit("/", 1)[-1])
    out.print(table)
    _print_summary(report, out)


def _print_summary(report: CompactionReport, out: Console) -> None:
    merged = report.merged
    if report.outcome is Outcome.DRY_RUN:
        planned = [b for b in report.bins if b.status is BinStatus.PLANNED]
        total = sum(len(b.sources) for b in planned)
        refused = f" {len(report.skipped)} bins would be skipped: see stderr." if report.skipped else ""
        out.print(f"Dry run: {len(planned)} merged files would replace {total} files "
                  f"({human_bytes(sum(b.bytes for b in planned))}); nothing was changed.{refused}", soft_wrap=True)
        return
    files = sum(len(b.sources) for b in merged)
    stats = report.stats
    out.print(
        f"Job {report.job_id}: {len(merged)} merged files replaced {files} files "
        f"({human_bytes(sum(b.bytes for b in merged))}); {human_bytes(stats.get('copied', 0))} copied server-side, "
        f"{human_bytes(stats.get('throughClient', 0))} through this client."
        if merged else f"Job {report.job_id}: nothing merged (rolled back).",
        soft_wrap=True,
    )
    if any(b.status is BinStatus.SKIPPED for b in report.bins):
        out.print("Some bins were skipped: see the messages on stderr.")
