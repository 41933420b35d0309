"""``mpcommit catalog sync S3URI --table db.name``: register the last commit to S3URI in a table catalog, from
its ``_SUCCESS`` alone (no listing) -- what a failed registration after a commit left out, or a commit made
without ``table=``. Safe to repeat: partitions already carrying the job's statistics are left as they are."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from ..catalog import CatalogRegistrationError, CatalogResult, TableName, resolve_catalog, sync
from ..catalog.base import describe
from ..errors import UsageError
from .common import S3URI, cli_context, out_console, print_json

#: Partitions listed per action in the human output; --json lists them all.
PARTITIONS_SHOWN = 10


class TableNameType(click.ParamType):
    """``database.table``."""

    name = "DB.NAME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return str(TableName.parse(str(value)))
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


@click.group("catalog")
def catalog() -> None:
    """Register committed data in a table catalog: the AWS Glue Data Catalog or a Spark session catalog.

    Writes register themselves when given a table (catalog.commit_registered, write(..., table=...)); this
    finishes a registration that failed after its data commit, or registers a commit made without one.
    """


@catalog.command("sync")
@click.argument("uri", type=S3URI, metavar="S3URI")
@click.option("--table", required=True, type=TableNameType(), help="The table to register into, as database.table.")
@click.option("--catalog", "catalog_name", type=click.Choice(["glue", "spark"]), default="glue", show_default=True,
              help="glue: the AWS Glue Data Catalog (credentials and region of the global options). spark: the "
                   "session catalog of a Hive-enabled local Spark session (hive-site.xml decides the metastore).")
@click.option("--glue-endpoint-url", metavar="URL", help="Glue endpoint (LocalStack, moto). Default: boto3's "
              "AWS_ENDPOINT_URL_GLUE / AWS_ENDPOINT_URL, else AWS. The S3 --endpoint-url is not used for Glue.")
@click.option("--glue-catalog-id", metavar="ID", help="The account id of another account's Glue Data Catalog.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document.")
@click.pass_context
def sync_command(ctx: click.Context, uri: str, table: str, catalog_name: str, glue_endpoint_url: str | None,
                 glue_catalog_id: str | None, as_json: bool) -> None:
    """Register the last commit to S3URI (its _SUCCESS) in --table: new partitions with their locations,
    numFiles/totalSize/numRows from the commit, and the drops of a static overwrite."""
    options = cli_context(ctx)
    target = resolve_catalog(catalog_name, s3=options.s3, glue_endpoint_url=glue_endpoint_url,
                             glue_catalog_id=glue_catalog_id)
    try:
        result = sync(uri, table=table, catalog=target, s3=options.s3, store=options.store())
    except CatalogRegistrationError as exc:
        if as_json and exc.result is not None:
            print_json(_document(uri, exc.result))
        raise
    if as_json:
        print_json(_document(uri, result))
        return
    _print(uri, result)


def _document(uri: str, result: CatalogResult) -> dict[str, Any]:
    return {
        "uri": uri, "table": result.table, "catalog": result.catalog, "ok": result.ok,
        "created": list(result.created), "updated": list(result.updated), "dropped": list(result.dropped),
        "unchanged": list(result.unchanged), "notRegistered": dict(result.not_registered),
        "notUpdated": dict(result.not_updated),
    }


def _print(uri: str, result: CatalogResult) -> None:
    out = out_console()
    table = Table(title=f"{uri} -> {result.catalog} table {result.table}", title_justify="left", show_header=False,
                  box=None, pad_edge=False)
    table.add_column("action", style="bold", no_wrap=True)
    table.add_column("partitions", overflow="fold")
    for label, paths in (("Created", result.created), ("Updated", result.updated), ("Dropped", result.dropped),
                         ("Unchanged", result.unchanged)):
        names = [describe(p) for p in paths]
        listed = ", ".join(names[:PARTITIONS_SHOWN]) + (f", ... ({len(names) - PARTITIONS_SHOWN:,} more)"
                                                         if len(names) > PARTITIONS_SHOWN else "")
        table.add_row(label, f"{len(names):,}" + (f": {listed}" if names else ""))
    out.print(table)
