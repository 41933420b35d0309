"""``mpcommit demo``: the main job on an embedded S3 server -- no setup, no credentials, no Docker."""

from __future__ import annotations

import click

from ..demo.main_job import DEFAULT_ROWS, run


@click.command("demo")
@click.option("--rows", type=click.IntRange(min=1), default=DEFAULT_ROWS, show_default=True,
              help="Events to generate.")
def demo(rows: int) -> int:
    """Write a day-partitioned event dataset with PySpark through mpcommit to an embedded S3 server,
    print the commit report and the _SUCCESS summary, and read it back with pyarrow to check every row.

    Exits 1 when what is read back differs from what was written. The global --endpoint-url, --region and
    --profile options do not apply: the demo runs its own server.
    """
    return run(rows)
