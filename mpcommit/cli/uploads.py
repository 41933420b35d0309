"""``mpcommit uploads list|abort``: see and clean up pending multipart uploads (see :mod:`mpcommit.operations.uploads`)."""

from __future__ import annotations

import time
from collections import Counter

import click
from rich.table import Table

from ..errors import OperationCancelledError
from ..operations.uploads import (
    DEFAULT_THREADS,
    AbortPlan,
    CleanupReport,
    InProgressUpload,
    UploadScope,
    cleanup,
    list_uploads,
)
from .common import (
    DURATION,
    JOB_ID,
    S3URI,
    ProgressBars,
    cli_context,
    err_console,
    fail,
    human_age,
    human_bytes,
    human_duration,
    human_time,
    interruptible,
    out_console,
    plural,
    print_json,
    require_confirmation_possible,
    short_id,
)

#: How many rows of a plan are shown before asking for confirmation (all of them go to --json).
PLAN_ROWS = 20

string_prefix_option = click.option(
    "--string-prefix", is_flag=True,
    help="Match the URI's path as a plain string prefix (s3://b/data1 then also matches data10/...). "
         "Default: the folder only.")
threads_option = click.option("--threads", type=click.IntRange(1, 256), default=DEFAULT_THREADS, show_default=True,
                              help="Parallel requests for ListParts and aborts.")


@click.group(short_help="Pending multipart uploads: list them, price them, abort the orphans.")
def uploads() -> None:
    """Pending multipart uploads: invisible in listings, billed until completed or aborted."""


@uploads.command("list")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--older-than", type=DURATION, metavar="DUR", help="Only uploads at least this old (90s, 30m, 24h, 7d).")
@string_prefix_option
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.pass_context
def list_command(ctx: click.Context, uri: str, older_than: float | None, string_prefix: bool, threads: int,
                 as_json: bool) -> None:
    """List every pending upload under S3URI with its age, parts, bytes held and owning job."""
    scope = UploadScope.parse(uri, string_prefix=string_prefix)
    store = cli_context(ctx).store()
    t0 = time.monotonic()
    with interruptible() as cancel, ProgressBars() as progress:
        try:
            found = list_uploads(store, scope, older_than=older_than, threads=threads, cancel=cancel,
                                 progress=progress)
        except OperationCancelledError as exc:
            fail(f"interrupted: {exc}")
            ctx.exit(1)
    seconds = time.monotonic() - t0
    now = time.time()
    total_bytes = sum(u.bytes or 0 for u in found)
    if as_json:
        print_json({
            "uri": scope.uri, "stringPrefix": scope.string_prefix, "olderThanSeconds": older_than,
            "count": len(found), "bytes": total_bytes, "seconds": round(seconds, 3),
            "uploads": [u.to_json(now) for u in found],
        })
        return
    out = out_console()
    if not found:
        age = f" older than {human_duration(older_than)}" if older_than is not None else ""
        out.print(f"No pending uploads{age} in {scope.describe()}.")
        return
    table = _uploads_table(found, now, title=f"Pending uploads in {scope.describe()}", width=out.width)
    table.add_section()
    blanks = [""] * (len(table.columns) - 5)
    table.add_row(plural(len(found), "upload"), *blanks, "", f"{sum(u.parts or 0 for u in found):,}",
                  human_bytes(total_bytes), "", style="bold")
    out.print(table)
    jobs = Counter(u.job_id for u in found if u.job_id)
    if jobs:
        out.print(f"{sum(jobs.values()):,} of them carry the ids of {plural(len(jobs), 'mpcommit job')}; "
                  "`mpcommit jobs list` shows which of those jobs still have records.")


def _uploads_table(found: list[InProgressUpload], now: float, *, title: str, width: int) -> Table:
    """Key, upload id, initiated, age, parts, bytes, job. Below 140 columns the upload id and the initiated
    time are left out and job ids shortened, so that keys stay readable (--json always has everything)."""
    wide = width >= 140
    table = Table(title=title, title_justify="left")
    table.add_column("Key", overflow="fold", ratio=1)
    if wide:
        table.add_column("Upload ID", no_wrap=True)
        table.add_column("Initiated", no_wrap=True)
    table.add_column("Age", justify="right", no_wrap=True)
    table.add_column("Parts", justify="right", no_wrap=True)
    table.add_column("Bytes", justify="right", no_wrap=True)
    table.add_column("Job", no_wrap=True)
    for u in found:
        job = (u.job_id if wide else short_id(u.job_id, 9)) if u.job_id else "-"
        ids = [short_id(u.upload_id), human_time(u.initiated)] if wide else []
        table.add_row(u.key, *ids, human_age(u.age_seconds(now)), "?" if u.parts is None else f"{u.parts:,}",
                      human_bytes(u.bytes), job)
    return table


@uploads.command("abort")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--older-than", type=DURATION, metavar="DUR", help="Abort uploads at least this old (90s, 30m, 24h, 7d).")
@click.option("--job", "job_id", type=JOB_ID, metavar="ID", help="Abort the uploads of this job (even if it looks live).")
@click.option("--dry-run", is_flag=True, help="Show what would be aborted; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (needed when stdin is not a terminal).")
@string_prefix_option
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (the report) instead of text.")
@click.pass_context
def abort_command(ctx: click.Context, uri: str, older_than: float | None, job_id: str | None, dry_run: bool, yes: bool,
                  string_prefix: bool, threads: int, as_json: bool) -> None:
    """Abort pending uploads under S3URI that are older than DUR, or that belong to job ID.

    Uploads of a live job are never aborted unless that job is named with --job: a job that is committing is
    left for `mpcommit jobs recover`, a job still writing is live while it was active within DUR. Uploads that
    vanish meanwhile (another cleaner ran) are reported, not treated as errors.
    """
    if older_than is None and job_id is None:
        raise click.UsageError("refusing to abort without a selection: give --older-than DUR (e.g. 7d) and/or --job ID")
    require_confirmation_possible(yes=yes, dry_run=dry_run)
    scope = UploadScope.parse(uri, string_prefix=string_prefix)
    store = cli_context(ctx).store()
    out = out_console()
    err = err_console()

    with interruptible() as cancel, ProgressBars(err) as progress:
        def confirm(plan: AbortPlan) -> bool:
            if yes:
                return True
            with progress.paused():  # no redrawing while the question is on screen
                if not as_json:
                    _print_plan(out, plan, scope)
                return click.confirm(
                    f"Abort {plural(len(plan.selected), 'upload')} holding {human_bytes(plan.selected_bytes)} in "
                    f"{scope.describe()}?", default=False, err=True)

        report = cleanup(store, scope, older_than=older_than, job_id=job_id, dry_run=dry_run, threads=threads,
                         cancel=cancel, progress=progress, confirm=confirm)
    if as_json:
        print_json(report.to_json())
    else:
        _print_report(out, report)
    declined = any(r.detail == "not confirmed" for r in report.results)
    if report.failed:
        fail(f"could not abort {plural(len(report.failed), 'upload')}: {report.failed[0].detail}")
    elif report.cancelled:
        fail(f"interrupted: aborted {plural(len(report.aborted), 'upload')}; {plural(len(report.not_done), 'selected upload')} "
             "were not attempted")
    if not report.ok or declined:
        ctx.exit(1)


def _print_plan(out, plan: AbortPlan, scope: UploadScope) -> None:  # noqa: ANN001 - rich Console
    now = time.time()
    shown = list(plan.selected[:PLAN_ROWS])
    out.print(_uploads_table(shown, now, title=f"To abort in {scope.describe()}", width=out.width))
    if len(plan.selected) > PLAN_ROWS:
        out.print(f"... and {len(plan.selected) - PLAN_ROWS:,} more (--json lists them all)")
    _print_protected(out, plan)


def _print_protected(out, plan: AbortPlan) -> None:  # noqa: ANN001 - rich Console
    if not plan.protected:
        return
    reasons = Counter(p.reason for p in plan.protected)
    out.print(f"Left alone: {plural(len(plan.protected), 'upload')} of live jobs:")
    for reason, count in reasons.most_common():
        out.print(f"  {count:,} x {reason}")


def _print_report(out, report: CleanupReport) -> None:  # noqa: ANN001 - rich Console
    plan = report.plan
    scope = report.scope.describe()
    if plan is None:  # cancelled while listing
        out.print(f"Interrupted while listing {scope}: nothing was aborted.")
        return
    selection = []
    if report.older_than is not None:
        selection.append(f"older than {human_duration(report.older_than)}")
    if report.job_id:
        selection.append(f"of job {report.job_id}")
    what = " and ".join(selection)
    if report.dry_run:
        if plan.selected:
            _print_plan(out, plan, report.scope)
        else:
            _print_protected(out, plan)
        out.print(f"Dry run: would abort {plural(len(plan.selected), 'upload')} {what}, holding "
                  f"{human_bytes(plan.selected_bytes)}, of {report.listed:,} in {scope}. Nothing was changed.")
        return
    if not plan.selected and not report.vanished:
        _print_protected(out, plan)
        out.print(f"Nothing to abort: no upload {what} among {report.listed:,} in {scope}.")
        return
    if any(r.detail == "not confirmed" for r in report.results):
        out.print("Not confirmed: nothing was aborted.")
        return
    aborted = report.aborted
    out.print(f"Aborted {plural(len(aborted), 'upload')} {what} in {scope}, freeing {human_bytes(report.bytes_freed)} "
              f"({report.bytes_freed:,} bytes) in {report.seconds:.1f}s.")
    if report.vanished:
        gone = len(report.vanished)
        out.print(f"{plural(gone, 'upload')} {'was' if gone == 1 else 'were'} already gone (completed, or aborted by "
                  "another cleaner): nothing to do for them.")
    if report.skipped:
        out.print(f"Skipped {plural(len(report.skipped), 'upload')}: {report.skipped[0].detail}.")
    _print_protected(out, plan)
    if report.failed:
        out.print(f"Failed to abort {plural(len(report.failed), 'upload')}: {report.failed[0].detail}", style="bold red")
    if report.not_done:
        why = "interrupted" if report.cancelled else "stopped after the failure"
        left = len(report.not_done)
        out.print(f"{why.capitalize()}: {plural(left, 'selected upload')} {'was' if left == 1 else 'were'} not "
                  "attempted; run again to continue.")
    elif report.cancelled:
        out.print("Interrupted after the last upload; everything selected was handled.")
