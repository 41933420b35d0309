"""``mpcommit doctor S3URI``: probe a store where S3-compatible stores differ and say what is safe there
(:mod:`mpcommit.operations.doctor`; the same probes as docs/STORES.md's matrix)."""

from __future__ import annotations

from collections import Counter

import click
from rich.table import Table
from rich.text import Text

from ..operations.doctor import Diagnosis, diagnose, plan
from ..operations.probes import BEHAVIOURS, PROBE_FOLDER, Status
from .common import S3URI, cli_context, destination, err_console, out_console, plural, print_json

_STATUS_STYLE = {Status.AS_S3: "green", Status.WORKED_AROUND: "yellow", Status.LIMITS: "red",
                 Status.UNUSED: "dim", Status.FAILED: "red"}


@click.command("doctor", short_help="Probe the store under S3URI: what it does, what is safe there.")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--dry-run", is_flag=True, help="List the keys the probes would create, and write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.pass_context
def doctor(ctx: click.Context, uri: str, dry_run: bool, as_json: bool) -> None:
    """Run the store probes on hidden keys under S3URI/_temporary/mpcommit-doctor/RUN/ and remove them again.

    Prints what the store did for each behaviour mpcommit relies on (its row of docs/STORES.md), then which of
    mpcommit's features are safe on it and what to set or do. It writes about 1,030 small objects and a few
    multipart uploads (one with a 5 MiB part), all deleted or aborted before it exits, and takes a few seconds.
    Exit status 0 when every probe could tell, 1 when one could not (the text says which and why).
    """
    dest = destination(uri)
    store = cli_context(ctx).store()
    if dry_run:
        base, keys = plan(dest)
        store.head_bucket(dest.bucket)
        if as_json:
            print_json({"destination": dest.uri, "probeKeysUnder": base, "dryRun": True,
                        "wouldCreate": [{"key": k, "what": what} for k, what in keys]})
            return
        out = out_console()
        out.print(f"Dry run: nothing written. mpcommit doctor would create, under s3://{dest.bucket}/{base} "
                  f"(RUN: a time stamp and a random id), and remove before it exits:")
        kinds = Counter(what for _k, what in keys)
        listing = [k for k, _w in keys if "/list/" in k]
        for key, what in keys:
            if key in listing[1:-1]:
                continue
            out.print(f"  {what:17} {key[len(base):]}")
            if listing and key == listing[0]:
                out.print(f"  {'':17} ... ({len(listing) - 2:,} more objects like these)")
        out.print(", ".join(plural(n, what) for what, n in sorted(kinds.items())) + " in all; the upload of dates/object "
                  "holds a 5 MiB part.")
        return
    err = err_console()
    diagnosis = diagnose(store, dest, progress=lambda message: err.print(f"mpcommit doctor: {message}"))
    if as_json:
        print_json(diagnosis.to_json())
    else:
        _print(diagnosis)
    if not diagnosis.complete:
        ctx.exit(1)


def _print(diagnosis: Diagnosis) -> None:
    out = out_console()
    titles = {b.id: b for b in BEHAVIOURS}
    table = Table(title=f"{diagnosis.endpoint} (probed under {diagnosis.destination}/{PROBE_FOLDER}/, "
                        f"{diagnosis.seconds:.1f} s; removed again)", title_justify="left")
    for column in ("Behaviour", "This store", "AWS S3 (its docs)", ""):
        table.add_column(column, overflow="fold")
    for finding in diagnosis.findings:
        behaviour = titles.get(finding.probe)
        table.add_row(behaviour.title if behaviour else finding.probe, finding.value,
                      behaviour.aws if behaviour else "", Text(finding.status.value,
                                                               style=_STATUS_STYLE[finding.status]))
    out.print(table)
    differing = [f for f in diagnosis.findings if f.note and f.status is not Status.AS_S3]
    if differing:
        out.print("Where it differs, mpcommit:")
        for finding in differing:
            behaviour = titles.get(finding.probe)
            out.print(f"  - {behaviour.title if behaviour else finding.probe}: {finding.note}")
    failed = [f for f in diagnosis.findings if f.status is Status.FAILED]
    for finding in failed:
        out.print(f"  ! {finding.probe}: could not tell: {finding.detail or finding.value}")
    features = Table(title="mpcommit's features on this store", title_justify="left")
    for column in ("Feature", "Safe", "Why", "Do"):
        features.add_column(column, overflow="fold")
    for feature in diagnosis.features:
        features.add_row(feature.name, Text("yes" if feature.safe else "no", style="green" if feature.safe else "red"),
                         feature.why, feature.advice)
    out.print(features)
    if diagnosis.order_strays:
        out.print(f"The commit order of this table holds {plural(len(diagnosis.order_strays), 'key')} that no "
                  "version of mpcommit writes (a position is 20 ASCII digits up to 10^18); every job ignores them. "
                  "Remove them:")
        for key in diagnosis.order_strays:
            out.print(f"  aws s3 rm {key}")
