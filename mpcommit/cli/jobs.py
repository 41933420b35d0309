"""``mpcommit jobs list|recover|abort``: the jobs found under a destination's hidden prefix, and what to do
with the stuck ones (see :mod:`mpcommit.protocol.inventory` and :mod:`mpcommit.protocol.recovery`)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import click
from rich import box
from rich.table import Table
from rich.text import Text

from ..errors import JobStateError
from ..modes import JobState
from ..operations.uploads import DEFAULT_THREADS, UploadScope, list_uploads
from ..protocol.commit import JobCommitter
from ..protocol.inventory import JobStatus, list_table_jobs, locate_job
from ..protocol.layout import table_of
from ..protocol.recovery import RecoveryAction, RecoveryOutcome, recover
from ..store.s3 import S3Store
from .common import (
    DURATION,
    JOB_ID,
    S3URI,
    ProgressBars,
    cli_context,
    destination,
    err_console,
    fail,
    human_age,
    human_bytes,
    human_time,
    order_options,
    order_settings,
    out_console,
    plural,
    print_json,
    require_confirmation_possible,
)


@click.group(short_help="Jobs under a destination: list, recover (finish or roll back), abort.")
def jobs() -> None:
    """Jobs under a destination's hidden prefix: writing, committing (needs recover) or committed."""


def _status_json(s: JobStatus, now: float, stream: tuple[str, int] | None) -> dict[str, object]:
    age = s.age_seconds(now)
    return {
        "jobId": s.job_id, "state": s.state.value, "purpose": s.purpose, "mode": s.mode,
        "created": s.created_ms, "ageSeconds": round(age, 3) if age is not None else None, "records": s.records,
        "pendingUploads": s.pending_uploads, "pendingBytes": s.pending_bytes,
        "stream": {"queryId": stream[0], "batchId": stream[1]} if stream is not None else None,
    }


def _stream_batches(store: S3Store, statuses: list[JobStatus]) -> dict[str, tuple[str, int]]:
    """Job id -> (query id, micro-batch id) for the jobs that are micro-batches of a streaming query writing their
    table: the sink keeps one record per query (TABLE/_mpcommit/streams/QUERY.json), and names each micro-batch's
    jobs by the query's hash and the batch id (mpcommit.protocol.stream.batch_job_id)."""
    from ..protocol.stream import STREAMS_ROOT, batch_of_job

    found: dict[str, tuple[str, int]] = {}
    for table in {table_of(s.destination) for s in statuses}:
        root = f"{table.root}{STREAMS_ROOT}"
        for obj in store.list_objects(table.bucket, root):
            query_id = obj.key[len(root):].removesuffix(".json")
            if "/" in query_id or not obj.key.endswith(".json"):
                continue
            for s in statuses:
                batch = batch_of_job(query_id, s.job_id)
                if batch is not None and table_of(s.destination) == table:
                    found[s.job_id] = (query_id, batch)
    return found


@jobs.command("list")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.pass_context
def list_command(ctx: click.Context, uri: str, as_json: bool) -> None:
    """List the jobs that have records under S3URI, with state, age, pending uploads and bytes."""
    dest = destination(uri)
    store = cli_context(ctx).store()
    with ProgressBars() as progress:
        with progress.status(f"Reading jobs under {dest.uri}"):
            statuses = list_table_jobs(store, dest)
        if any(s.pending_uploads for s in statuses):
            # Bytes held, measured in parallel (one ListParts per upload); counted from the same listing.
            held: dict[str, list[int]] = {}
            for u in list_uploads(store, UploadScope.parse(dest.uri), threads=DEFAULT_THREADS, progress=progress):
                if u.job_id is not None:
                    held.setdefault(u.job_id, []).append(u.bytes or 0)
            statuses = [replace(s, pending_uploads=len(held.get(s.job_id, [])), pending_bytes=sum(held.get(s.job_id, [])))
                        for s in statuses]
        else:
            statuses = [replace(s, pending_bytes=0) for s in statuses]
        streams = _stream_batches(store, statuses) if statuses else {}
    now = time.time()
    if as_json:
        print_json({"uri": dest.uri, "jobs": [_status_json(s, now, streams.get(s.job_id)) for s in statuses]})
        return
    out = out_console()
    if not statuses:
        out.print(f"No jobs under {dest.uri} (nothing in {dest.hidden_root}).")
        return
    # Narrower than 140 columns: only what fits beside a whole job id (--json always has everything).
    wide = out.width >= 140
    names = ["Job", "State", "Purpose", "Mode", "Created", "Age", "Records", "Uploads", "Bytes"]
    shown = names if wide else ["Job", "State", "Age", "Uploads", "Bytes"]
    table = Table(title=f"Jobs under {dest.uri}", title_justify="left", box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD)
    for name in shown:
        table.add_column(name, justify="left" if name in ("Job", "State", "Purpose", "Mode", "Created") else "right",
                         no_wrap=True)
    styles = {JobState.COMMITTING: "bold yellow", JobState.ROLLING_BACK: "yellow", JobState.COMMITTED: "green"}
    for s in statuses:
        cells = {
            "Job": s.job_id, "State": Text(s.state.value, style=styles.get(s.state, "")),
            "Purpose": f"stream #{streams[s.job_id][1]}" if s.job_id in streams else s.purpose or "?",
            "Mode": s.mode or "?", "Created": human_time(s.created_ms),
            "Age": human_age(s.age_seconds(now)), "Records": f"{s.records:,}", "Uploads": f"{s.pending_uploads:,}",
            "Bytes": human_bytes(s.pending_bytes),
        }
        table.add_row(*(cells[name] for name in shown))
    out.print(table)
    interrupted = [s for s in statuses if s.state in (JobState.COMMITTING, JobState.ROLLING_BACK)]
    for s in interrupted:
        if s.job_id in streams:
            query_id, batch_id = streams[s.job_id]
            # Either is safe: a recover ends the job in the table's commit order, where the query's replay of the
            # micro-batch finds it committed (or rolled back, and writes the batch again).
            out.print(f"Job {s.job_id} is micro-batch {batch_id} of streaming query {query_id}: restarting the query "
                      f"on its checkpoint finishes it (Spark replays the micro-batch); `mpcommit jobs recover "
                      f"{dest.uri} --job {s.job_id}` finishes it too, and the replay then finds it done.", soft_wrap=True)
    if any(s.job_id not in streams for s in interrupted):
        out.print(f"A commit or rollback was interrupted: finish it with `mpcommit jobs recover {dest.uri}`.")


def _action_json(a: RecoveryAction) -> dict[str, object]:
    return {"jobId": a.job_id, "action": a.action.value, "detail": a.detail,
            "report": a.report.summary() if a.report is not None else None}


@jobs.command("recover")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--job", "job_id", type=JOB_ID, metavar="ID", help="Only this job (rolled back if it is not committing).")
@click.option("--older-than", type=DURATION, metavar="DUR",
              help="Also roll back uncommitted jobs with no sign of life (a record or a new upload) for this long "
                   "(without it, writing jobs are left alone).")
@click.option("--dry-run", is_flag=True, help="Say what would be completed, deleted and rolled back; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@order_options
@click.pass_context
def recover_command(ctx: click.Context, uri: str, job_id: str | None, older_than: float | None, dry_run: bool,
                    as_json: bool, lease: float | None, max_wait: float | None) -> None:
    """Finish interrupted commits under S3URI from their journals, and roll back old or named uncommitted jobs.

    The result of finishing equals an uninterrupted commit. A job that showed a sign of life (a record, its
    driver's heartbeat or a new upload) within --older-than is left alone: it may be live. Several recoveries
    and the job's own driver may run at once: one finishes the job, the others say it was finished elsewhere.
    """
    dest = destination(uri)
    store = cli_context(ctx).store()
    out = out_console()
    with ProgressBars() as progress, progress.status(f"Recovering jobs under {dest.uri}"):
        actions = recover(dest, store=store, job_id=job_id, older_than=older_than, dry_run=dry_run,
                          order=order_settings(lease, max_wait))
    # The result only once the spinner is gone and every note the library logged on stderr while recovering is
    # out: printed job by job, a later job's note landed after an earlier job's line, in the middle of whatever
    # read the two streams next (issue 40).
    sys.stderr.flush()
    missing = job_id is not None and not actions
    ok = not missing and not any(a.action is RecoveryOutcome.FAILED for a in actions)
    if as_json:
        print_json({"uri": dest.uri, "actions": [_action_json(a) for a in actions], "ok": ok})
    elif not actions and not missing:
        out.print(f"No jobs under {dest.uri}: nothing to recover.")
    else:
        for a in actions:
            style = {RecoveryOutcome.FAILED: "bold red", RecoveryOutcome.SKIPPED: "dim"}.get(a.action, "")
            out.print(Text.assemble((f"{a.action.value:<12}", style), f" {a.job_id}  {a.detail}"))
    if missing:
        fail(f"no job {job_id} has records under {dest.uri}")
    if not ok:
        ctx.exit(1)


@jobs.command("abort")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--job", "job_id", type=JOB_ID, metavar="ID", required=True, help="The job to roll back.")
@click.option("--dry-run", is_flag=True, help="Show what would be rolled back; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (needed when stdin is not a terminal).")
@click.pass_context
def abort_command(ctx: click.Context, uri: str, job_id: str, dry_run: bool, yes: bool) -> None:
    """Roll back job ID under S3URI: abort all its uploads and remove its records.

    Refused for a job that is committing (its files may be partly visible): use `mpcommit jobs recover`.
    """
    require_confirmation_possible(yes=yes, dry_run=dry_run)
    dest = destination(uri)
    store = cli_context(ctx).store()
    out = out_console()
    with ProgressBars() as progress, progress.status(f"Looking up job {job_id}"):
        # Wherever its records are: under the URI, above it (the URI is a partition of its table) or below it
        # (the URI is a folder holding its table) -- the same lookup `uploads abort` makes.
        status = locate_job(store, dest, job_id)
        orphans = [] if status is not None else [
            u for u in list_uploads(store, UploadScope.parse(dest.uri), sizes=False) if u.job_id == job_id]
    if status is None and not orphans:
        fail(f"no job {job_id} under {dest.uri}: it has no records and no pending uploads there")
        ctx.exit(1)
    if status is not None and status.state is JobState.COMMITTING:
        raise JobStateError(
            f"job {job_id} is committing: its files may be partly visible and rolling back would lose them. "
            f"Finish it with `mpcommit jobs recover {status.destination.uri} --job {job_id}`."
        )
    where = status.destination if status is not None else dest
    uploads = status.pending_uploads if status is not None else len(orphans)
    state = status.state.value if status is not None else "no records anywhere"
    records = status.records if status is not None else 0
    if dry_run:
        out.print(f"Dry run: rolling back job {job_id} ({state}) of {where.uri} would abort "
                  f"{plural(uploads or 0, 'upload')} and remove {plural(records, 'record')}. Nothing was changed.")
        return
    if not yes:
        if not click.confirm(f"Roll back job {job_id} ({state}) of {where.uri}: abort {plural(uploads or 0, 'upload')} "
                             f"and remove {plural(records, 'record')}?", default=False, err=True):
            err_console().print("Not confirmed: nothing was changed.")
            ctx.exit(1)
    with ProgressBars() as progress, progress.status(f"Rolling back job {job_id}"):
        if status is not None:
            # The commit barrier first: a job that begins committing meanwhile is refused (JobStateError).
            report = JobCommitter(store, where, job_id).rollback(reason="`mpcommit jobs abort`")
            aborted, removed = report.aborted_uploads, report.deleted_records
        else:
            # No records anywhere: these uploads belong to no job that could still commit them.
            aborted = sum(store.abort_multipart_upload(dest.bucket, u.key, u.upload_id) for u in orphans)
            removed = 0
    out.print(f"Rolled back job {job_id} of {where.uri}: aborted {plural(aborted, 'upload')}, removed "
              f"{plural(removed, 'record')}. Nothing of it is pending any more.")
