"""``mpcommit lifecycle BUCKET``: show or install the rule that makes S3 abort incomplete uploads by itself
(see :mod:`mpcommit.operations.lifecycle`)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from ..errors import UsageError
from ..operations.lifecycle import RULE_ID, Change, install, show
from ..protocol.layout import parse_uri
from .common import cli_context, out_console, plural, print_json


def _bucket(value: str) -> str:
    """``my-bucket`` or ``s3://my-bucket``: lifecycle rules belong to the whole bucket, so no prefix."""
    text = value if "://" in value else f"s3://{value}"
    dest = parse_uri(text)
    if dest.prefix:
        raise UsageError(f"{value!r}: lifecycle rules apply to a whole bucket; give the bucket alone ({dest.bucket})")
    return dest.bucket


def _describe_filter(rule: dict[str, Any]) -> str:
    flt = rule.get("Filter")
    if flt is None:
        return f"prefix {rule['Prefix']!r}" if rule.get("Prefix") else "whole bucket"
    if not flt or flt == {"Prefix": ""}:
        return "whole bucket"
    if set(flt) == {"Prefix"}:
        return f"prefix {flt['Prefix']!r}"
    return ", ".join(f"{k}={v}" for k, v in flt.items())


def _describe_actions(rule: dict[str, Any]) -> str:
    actions = []
    if "AbortIncompleteMultipartUpload" in rule:
        actions.append(f"abort incomplete uploads after {rule['AbortIncompleteMultipartUpload'].get('DaysAfterInitiation')}d")
    if "Expiration" in rule:
        actions.append("expire " + ", ".join(f"{k}={v}" for k, v in rule["Expiration"].items()))
    if rule.get("Transitions"):
        actions.append(f"{len(rule['Transitions'])} transition(s)")
    if "NoncurrentVersionExpiration" in rule:
        actions.append("expire noncurrent versions")
    if rule.get("NoncurrentVersionTransitions"):
        actions.append("noncurrent transitions")
    return "; ".join(actions) or "-"


@click.command("lifecycle", short_help="Show or install the rule that aborts incomplete uploads.")
@click.argument("bucket", metavar="BUCKET")
@click.option("--abort-incomplete-days", "days", type=click.IntRange(min=1), metavar="N",
              help="Install (or update) a rule aborting multipart uploads N days after they start, keeping every "
                   "existing rule. Choose N longer than your longest job.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.pass_context
def lifecycle(ctx: click.Context, bucket: str, days: int | None, as_json: bool) -> None:
    """Show BUCKET's lifecycle rules and whether incomplete multipart uploads are aborted, or install that rule."""
    name = _bucket(bucket)
    store = cli_context(ctx).store()
    out = out_console()
    if days is not None:
        result = install(store, name, days)
        if as_json:
            print_json({"bucket": name, **result.to_json()})
            return
        kept = result.rules_before - (0 if result.change is Change.ADDED else 1)
        if result.change is Change.UNCHANGED:
            out.print(f"s3://{name} already aborts incomplete uploads after {plural(days, 'day')} (rule {RULE_ID}); "
                      "nothing changed.")
        else:
            verb = "Added" if result.change is Change.ADDED else "Updated"
            out.print(f"{verb} rule {RULE_ID} on s3://{name}: incomplete multipart uploads are aborted "
                      f"{plural(days, 'day')} after they start. Kept the {plural(kept, 'other rule')}.")
        for other in result.others:
            out.print(f"Note: rule {other.rule_id!r} aborts them too, after {plural(other.days, 'day')}; S3 applies "
                      "the earlier.")
        out.print("S3 applies it to live jobs' uploads too: keep N above your longest job's duration.")
        return
    rules, aborting = show(store, name)
    if as_json:
        print_json({"bucket": name, "rules": rules, "abortIncompleteRules": [r.to_json() for r in aborting]})
        return
    if rules:
        table = Table(title=f"Lifecycle rules of s3://{name}", title_justify="left")
        for column in ("ID", "Status", "Applies to", "Actions"):
            table.add_column(column, overflow="fold")
        for rule in rules:
            table.add_row(str(rule.get("ID") or "-"), str(rule.get("Status")), _describe_filter(rule), _describe_actions(rule))
        out.print(table)
    whole = [r for r in aborting if r.enabled and r.whole_bucket]
    if whole:
        best = min(whole, key=lambda r: r.days)
        out.print(f"Incomplete multipart uploads on s3://{name} are aborted {plural(best.days, 'day')} after they start "
                  f"(rule {best.rule_id!r}).")
    else:
        partial = " (only some prefixes are covered)" if aborting else ""
        out.print(f"No enabled rule aborts incomplete multipart uploads on the whole of s3://{name}{partial}: pending "
                  f"uploads are billed until someone aborts them. Install one with "
                  f"`mpcommit lifecycle {name} --abort-incomplete-days 7`.")
