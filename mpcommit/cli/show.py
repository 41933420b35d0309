"""``mpcommit show S3URI``: the ``_SUCCESS`` summary a commit wrote last, for people (or as JSON).

Besides mpcommit's own, it reads the _SUCCESS of Hadoop's S3A committers (a table Spark wrote on ``s3a://``)."""

from __future__ import annotations

import json
import time

import click
from rich.table import Table

from ..errors import ManifestError, NoSuchKeyError
from ..modes import Purpose
from ..protocol.records.success import SuccessData
from .common import S3URI, cli_context, destination, fail, human_age, human_bytes, human_time, out_console, print_json

#: Committed files listed by default; --files lists them all.
FILES_SHOWN = 10
PARTITIONS_SHOWN = 10


@click.command("show", short_help="The _SUCCESS summary of the last commit to S3URI, and what it covers.")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--files", "all_files", is_flag=True, help="List every committed file, not only the first few.")
@click.option("--json", "as_json", is_flag=True, help="Print the _SUCCESS document itself.")
@click.pass_context
def show(ctx: click.Context, uri: str, all_files: bool, as_json: bool) -> None:
    """Show the _SUCCESS summary of the last commit to S3URI: job, time, mode, files, bytes, rows, timings.

    It describes that commit only: the whole table after an overwrite, only the added files after an append,
    only the merged files after `mpcommit compact` (whose rows are the table's own, unchanged).
    """
    dest = destination(uri)
    store = cli_context(ctx).store()
    where = f"s3://{dest.bucket}/{dest.success_key}"
    try:
        data = store.get_object(dest.bucket, dest.success_key)
    except NoSuchKeyError:
        fail(f"no {where}: nothing was committed to {dest.uri} (or not by a committer that writes _SUCCESS)")
        ctx.exit(1)
    s3a = _s3a_success(data)
    if s3a is not None:
        if as_json:
            print_json(s3a)
        else:
            _show_s3a(where, s3a, all_files)
        return
    try:
        success = SuccessData.from_bytes(data, where=where)
    except ManifestError as exc:
        what = "an empty file (Hadoop's FileOutputCommitter writes those)" if not data.strip() else "not mpcommit's"
        fail(f"{where} is {what}: {exc}" if data.strip() else f"{where} is {what}")
        ctx.exit(1)
    if as_json:
        print_json(json.loads(data))
        return
    out = out_console()
    out.print(describes(success, dest.uri))
    table = Table(title=where, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    age = human_age(time.time() - success.timestamp_ms / 1000)
    table.add_row("Job", success.job_id)
    table.add_row("Committed", f"{human_time(success.timestamp_ms)} ({age} ago)" +
                  (f" on {success.hostname}" if success.hostname else ""))
    table.add_row("Mode", success.mode + (f" ({success.purpose.value})" if success.purpose is not Purpose.WRITE else ""))
    table.add_row("Files", f"{success.files:,}")
    table.add_row("Bytes", f"{human_bytes(success.bytes)} ({success.bytes:,})")
    table.add_row("Rows", f"{success.rows:,}" if success.rows is not None else "unknown")
    parts = list(success.partitions)
    listed = ", ".join(parts[:PARTITIONS_SHOWN]) + (f", ... ({len(parts) - PARTITIONS_SHOWN:,} more)"
                                                    if len(parts) > PARTITIONS_SHOWN else "")
    table.add_row("Partitions", f"{len(parts):,}" + (f": {listed}" if parts else ""))
    if success.timings:
        table.add_row("Timings", "  ".join(f"{k} {v:.3f}s" for k, v in success.timings.items()))
    out.print(table)
    names = success.filenames if all_files else success.filenames[:FILES_SHOWN]
    if names:
        out.print("Files:")
        for name in names:
            out.print(f"  {name}", markup=False)
        if len(success.filenames) > len(names):
            out.print(f"  ... and {len(success.filenames) - len(names):,} more (--files lists them all)")


#: The ``name`` of the _SUCCESS that Hadoop's S3A committers (magic, directory, partitioned staging) write.
S3A_SUCCESS_NAME = "org.apache.hadoop.fs.s3a.commit.files.SuccessData/"


def _s3a_success(data: bytes) -> dict | None:
    """The S3A committers' _SUCCESS document, or None when ``data`` is something else."""
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    name = obj.get("name") if isinstance(obj, dict) else None
    return obj if isinstance(name, str) and name.startswith(S3A_SUCCESS_NAME) else None


def _show_s3a(where: str, doc: dict, all_files: bool) -> None:
    """A summary of an S3A committer's _SUCCESS: a table Spark (or another Hadoop job) wrote through S3A."""
    out = out_console()
    table = Table(title=where, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_row("Committer", f"Hadoop S3A, {doc.get('committer') or 'unknown'} committer (not mpcommit)")
    table.add_row("Job", str(doc.get("jobId") or "unknown"))
    stamp = doc.get("timestamp")
    if isinstance(stamp, int):
        table.add_row("Committed", f"{human_time(stamp)} ({human_age(time.time() - stamp / 1000)} ago)" +
                      (f" on {doc['hostname']}" if doc.get("hostname") else ""))
    names = [str(n) for n in doc.get("filenames") or []]
    # S3A lists at most 100 files in _SUCCESS; its counter says how many it committed.
    metrics = doc.get("metrics") if isinstance(doc.get("metrics"), dict) else {}
    committed = metrics.get("committer_commits_completed")
    files = f"{committed:,}" if isinstance(committed, int) else f"{len(names):,}+"
    table.add_row("Files", files + (f" ({len(names):,} listed in _SUCCESS)" if len(names) != committed else ""))
    size = metrics.get("committer_bytes_committed")
    if isinstance(size, int):
        table.add_row("Bytes", f"{human_bytes(size)} ({size:,})")
    table.add_row("Rows", "unknown (S3A does not count them)")
    out.print(table)
    shown = names if all_files else names[:FILES_SHOWN]
    if shown:
        out.print("Files:")
        for name in shown:
            out.print(f"  {name}", markup=False)
        if len(names) > len(shown):
            out.print(f"  ... and {len(names) - len(shown):,} more (--files lists them all)")


def describes(success: SuccessData, uri: str) -> str:
    """What the _SUCCESS describes, in a sentence: always the last commit, which is the whole table only after
    an overwrite (or a first write); after an append or a compaction it is not."""
    files = f"{success.files:,} file" + ("" if success.files == 1 else "s")
    if success.purpose is Purpose.COMPACT:
        merged = (f"merged {success.merged_from:,} small files into the {files} below"
                  if success.merged_from is not None else f"wrote the {files} below from smaller ones")
        return (f"The last commit to {uri} was a compaction (job {success.job_id}): it {merged}. The table's rows "
                "did not change; this describes that compaction, not the whole table.")
    if success.mode == "append":
        return (f"The last commit to {uri} was an append (job {success.job_id}): it added the {files} below. Files "
                "committed earlier are not counted here.")
    if success.mode == "overwrite-dynamic":
        return (f"The last commit to {uri} was a dynamic overwrite (job {success.job_id}): the {files} below "
                "replaced the partitions they are in; other partitions were kept and are not counted here.")
    return (f"The last commit to {uri} was a write in mode {success.mode} (job {success.job_id}): the {files} below "
            "were the whole table after it.")
