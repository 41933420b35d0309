#!/usr/bin/env python3
"""Abort orphaned multipart uploads under one or more S3 destinations: the cron-friendly `mpcommit uploads abort`.

Non-interactive (never asks), one log line per action on stderr, a summary line per destination, and
exit status 0 when everything selected was dealt with, 1 on a failure or an interruption, 2 on a usage error.
Safe to run every hour, and even twice at once:

* uploads of live jobs are never aborted: a job that is committing is left for `mpcommit jobs recover`, a job
  still writing is live while it was active within --older-than (see mpcommit.operations.uploads);
* an upload that vanishes between listing and aborting (another cleaner, or its job, got there first) is
  logged as "vanished", not as an error;
* SIGINT or SIGTERM (e.g. from `timeout`) stops cleanly after the requests in flight and logs what was done;
* with --older-than, dead jobs' records go too (`mpcommit jobs recover --older-than`, without finishing
  interrupted commits: those are logged for a person to finish with `mpcommit jobs recover`; --finish-commits
  lets the script finish them, --keep-records leaves records alone).

Example crontab line (hourly, uploads older than two days):

    17 * * * * /opt/venv/bin/python /opt/mpcommit/scripts/cleanup_orphaned_uploads.py --older-than 2d \
        s3://warehouse/events s3://warehouse/users >> /var/log/mpcommit-cleanup.log 2>&1
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections import Counter
from types import FrameType

import click

from mpcommit.cli.common import DURATION, JOB_ID, S3URI, human_age
from mpcommit.errors import MpcommitError, UsageError
from mpcommit.operations.uploads import DEFAULT_THREADS, AbortOutcome, AbortResult, CleanupReport, UploadScope, cleanup
from mpcommit.options import S3Options
from mpcommit.protocol.recovery import RecoveryAction, RecoveryOutcome, recover
from mpcommit.store.s3 import store_for

log = logging.getLogger("cleanup_orphaned_uploads")


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def _stop_on_signals(cancel: threading.Event) -> None:
    """SIGINT and SIGTERM ask for a clean stop; a second one ends the process at once."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if cancel.is_set():
            raise SystemExit(1)
        cancel.set()
        log.warning("received %s: finishing the requests in flight, then stopping", signal.Signals(signum).name)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _log_result(bucket: str):  # noqa: ANN202 - a callback
    def on_result(result: AbortResult) -> None:
        u = result.upload
        fields = f"s3://{bucket}/{u.key} upload={u.upload_id} bytes={u.bytes} job={u.job_id or '-'}"
        if result.outcome is AbortOutcome.ABORTED:
            log.info("aborted %s", fields)
        elif result.outcome is AbortOutcome.VANISHED:
            log.info("vanished %s (no longer pending: another cleaner or its job got there first)", fields)
        elif result.outcome is AbortOutcome.SKIPPED:
            log.warning("skipped %s: %s", fields, result.detail)
        elif result.outcome is AbortOutcome.FAILED:
            log.error("failed %s: %s", fields, result.detail)
    return on_result


def _summarize(report: CleanupReport) -> dict[str, object]:
    plan = report.plan
    return {
        "uri": report.scope.uri, "listed": report.listed, "selected": len(plan.selected) if plan else 0,
        "aborted": len(report.aborted), "bytesFreed": report.bytes_freed, "vanished": len(report.vanished),
        "notMatched": plan.not_matched if plan else 0, "protected": len(plan.protected) if plan else 0,
        "skipped": len(report.skipped), "failed": len(report.failed),
        "notDone": len(report.not_done), "dryRun": report.dry_run, "cancelled": report.cancelled,
        "seconds": round(report.seconds, 3), "ok": report.ok,
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("uris", nargs=-1, required=True, type=S3URI, metavar="S3URI...")
@click.option("--older-than", type=DURATION, metavar="DUR", help="Abort uploads at least this old (90s, 30m, 24h, 7d).")
@click.option("--job", "job_id", type=JOB_ID, metavar="ID", help="Abort the uploads of this job.")
@click.option("--dry-run", is_flag=True, help="Log what would be aborted; change nothing.")
@click.option("--string-prefix", is_flag=True, help="Match each URI's path as a plain string prefix, not a folder.")
@click.option("--threads", type=click.IntRange(1, 256), default=DEFAULT_THREADS, show_default=True)
@click.option("--endpoint-url", metavar="URL", help="S3 endpoint; default: boto3's (AWS_ENDPOINT_URL...).")
@click.option("--region", metavar="R")
@click.option("--profile", metavar="P")
@click.option("--keep-records", is_flag=True, help="Leave dead jobs' records under _temporary/ alone.")
@click.option("--finish-commits", is_flag=True, help="Also finish interrupted commits (makes their data visible).")
@click.option("--json", "as_json", is_flag=True, help="Also print the summaries as one JSON document on stdout.")
def command(uris: tuple[str, ...], older_than: float | None, job_id: str | None, dry_run: bool, string_prefix: bool,
            threads: int, endpoint_url: str | None, region: str | None, profile: str | None, keep_records: bool,
            finish_commits: bool, as_json: bool) -> int:
    """Abort orphaned multipart uploads under each S3URI that are older than DUR (or of job ID); with
    --older-than, also remove the records of jobs idle that long (interrupted commits are left and logged)."""
    if older_than is None and job_id is None:
        raise click.UsageError("give --older-than DUR (e.g. 2d) and/or --job ID; refusing to abort everything")
    if endpoint_url is not None and not endpoint_url.lower().startswith(("http://", "https://")):
        raise click.BadParameter(f"{endpoint_url!r} is not an http:// or https:// URL", param_hint="'--endpoint-url'")
    store = store_for(S3Options(endpoint_url=endpoint_url, region=region, profile=profile))
    cancel = threading.Event()
    _stop_on_signals(cancel)
    summaries = []
    ok = True
    for uri in uris:
        if cancel.is_set():
            log.warning("not started: %s (interrupted)", uri)
            ok = False
            continue
        scope = UploadScope.parse(uri, string_prefix=string_prefix)
        log.info("cleaning %s: %s%s%s", scope.describe(),
                 f"older than {human_age(older_than)}" if older_than is not None else "",
                 " and " if older_than is not None and job_id else "", f"of job {job_id}" if job_id else "")
        try:
            report = cleanup(store, scope, older_than=older_than, job_id=job_id, dry_run=dry_run, threads=threads,
                             cancel=cancel, on_result=_log_result(scope.bucket))
        except UsageError:
            raise
        except MpcommitError as exc:
            log.error("failed %s: %s", scope.uri, " ".join(str(exc).split()))
            summaries.append({"uri": scope.uri, "ok": False, "error": " ".join(str(exc).split())})
            ok = False
            continue
        if report.plan is not None:
            if report.plan.not_matched:
                log.info("left %d upload(s) alone: %s", report.plan.not_matched, _not_matched_reason(older_than, job_id))
            for reason, count in Counter(p.reason for p in report.plan.protected).most_common():
                log.info("protected %d upload(s): %s", count, reason)
            if dry_run:
                for u in report.plan.selected:
                    log.info("would abort s3://%s/%s upload=%s bytes=%s job=%s", scope.bucket, u.key, u.upload_id,
                             u.bytes, u.job_id or "-")
        summary = _summarize(report)
        if older_than is not None and not keep_records and not string_prefix and not report.cancelled:
            summary["records"] = _recover_records(store, uri, older_than, dry_run=dry_run, finish_commits=finish_commits)
            ok = ok and not summary["records"]["failed"]
        summaries.append(summary)
        ok = ok and report.ok
        state = "interrupted" if report.cancelled else ("dry run" if dry_run else "done")
        log.info("summary %s (%s): listed=%d selected=%d aborted=%d bytes_freed=%d vanished=%d not_matched=%d "
                 "protected=%d skipped=%d failed=%d not_done=%d %sseconds=%.1f", scope.uri, state, summary["listed"],
                 summary["selected"], summary["aborted"], summary["bytesFreed"], summary["vanished"],
                 summary["notMatched"], summary["protected"], summary["skipped"], summary["failed"],
                 summary["notDone"], _records_fields(summary.get("records"), dry_run=dry_run), report.seconds)
    if as_json:
        click.echo(json.dumps({"ok": ok, "destinations": summaries}, indent=2))
    return 0 if ok else 1


def _not_matched_reason(older_than: float | None, job_id: str | None) -> str:
    """Why uploads in the scope were not selected, for the log line that counts them."""
    young = f"younger than {human_age(older_than)}" if older_than is not None else ""
    other = f"not of job {job_id}" if job_id is not None else ""
    return " or ".join(part for part in (young, other) if part)


def _records_fields(records: dict[str, int] | None, *, dry_run: bool) -> str:
    """The jobs' records in the summary line (``jobs_skipped=1 ...``), so that a grep of the summaries counts a
    job left alone as it counts an upload; empty when the records were not looked at."""
    if records is None:
        return ""
    names = ("would_finish", "would_roll_back", "skipped", "failed") if dry_run else (
        "finished", "rolled_back", "skipped", "failed")
    return "".join(f"jobs_{name}={records[name]} " for name in names)


def _recover_records(store, uri: str, older_than: float, *, dry_run: bool, finish_commits: bool) -> dict[str, int]:  # noqa: ANN001
    """Dead jobs' records: `recover --older-than`, logged per job."""
    counts: Counter[str] = Counter()

    def on_action(action: RecoveryAction) -> None:
        counts[action.action.value] += 1
        level = logging.ERROR if action.action is RecoveryOutcome.FAILED else logging.INFO
        log.log(level, "job %s %s: %s", action.job_id, action.action.value, action.detail)

    recover(uri, store=store, older_than=older_than, dry_run=dry_run, finish_commits=finish_commits,
            on_action=on_action)
    return {name: counts.get(name, 0) for name in ("finished", "rolled_back", "skipped", "failed", "would_finish",
                                                     "would_roll_back")}


def main(argv: list[str] | None = None) -> int:
    _configure_logging()
    try:
        result = command.main(args=argv, prog_name="cleanup_orphaned_uploads.py", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        log.error("interrupted")
        return 1
    except UsageError as exc:
        log.error("%s", " ".join(str(exc).split()))
        return 2
    except MpcommitError as exc:
        log.error("%s", " ".join(str(exc).split()))
        return 1


if __name__ == "__main__":
    sys.exit(main())
