"""The main job, as a newcomer runs it: ``mpcommit demo`` in a fresh process, and its verdict logic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from mpcommit.cli.main import main as cli_main
from mpcommit.demo.main_job import _verdict
from mpcommit.modes import CommitMode, CommitOutcome
from mpcommit.protocol.commit import CommitReport

ROOT = Path(__file__).parents[2]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_demo_runs_end_to_end_and_reads_back_every_row() -> None:
    # The installed console script, as the README's `make demo` runs it; its own process, JVM and S3 server.
    script = Path(sys.executable).with_name("mpcommit")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "mpcommit.demo"]
    started = time.monotonic()
    done = subprocess.run([*command, "demo", "--rows", "30000"] if script.exists() else [*command, "--rows", "30000"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})  # rich wraps at 80 columns when not on a terminal
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "Commit report" in out and "_SUCCESS" in out and "Read back with pyarrow" in out
    assert "OK 30,000 rows in" in out and "no pending uploads" in out
    assert "2024-06-15" in out and "2024-06-14" in out, "one main day and late arrivals from the days before"
    print(f"demo with 30,000 rows took {took:.1f} s")


def report(rows: int | None) -> CommitReport:
    return CommitReport(job_id="j", uri="s3://b/t", mode=CommitMode.OVERWRITE, outcome=CommitOutcome.COMMITTED, rows=rows)


@pytest.mark.parametrize("expected,found,rows_in_report,pending,code", [
    ({"d1": 5, "d2": 5}, {"d1": 5, "d2": 5}, 10, 0, 0),
    ({"d1": 5, "d2": 5}, {"d1": 5, "d2": 4}, 10, 0, 1),   # a row lost
    ({"d1": 5, "d2": 5}, {"d1": 6, "d2": 4}, 10, 0, 1),   # same total, wrong partition
    ({"d1": 5, "d2": 5}, {"d1": 5, "d2": 5}, 9, 0, 1),    # the report miscounts
    ({"d1": 5, "d2": 5}, {"d1": 5, "d2": 5}, 10, 2, 1),   # uploads left pending
])
def test_demo_verdict_fails_on_any_difference(expected, found, rows_in_report, pending, code) -> None:  # noqa: ANN001
    console = Console(record=True, width=120)
    assert _verdict(console, rows=10, expected=expected, found=found, report=report(rows_in_report), pending=pending,
                    seconds=1.0, files={"d1": 1, "d2": 1}) == code
    assert ("MISMATCH" in console.export_text()) == bool(code)


def test_demo_is_a_cli_command(capsys) -> None:  # noqa: ANN001
    assert cli_main(["demo", "--help"]) == 0
    assert "--rows" in capsys.readouterr().out
    assert cli_main(["demo", "--rows", "0"]) == 2


def test_the_two_commit_timings_say_which_is_which() -> None:
    from mpcommit.demo.main_job import _print_report, _print_success
    from mpcommit.protocol.records.success import SuccessData

    console = Console(record=True, width=250)
    timings = {"write": 3.0, "complete": 0.2, "success": 0.01, "cleanup": 0.03, "commit": 0.51}
    _print_report(console, CommitReport(job_id="j", uri="s3://b/t", mode=CommitMode.OVERWRITE, outcome=CommitOutcome.COMMITTED,
                                        rows=10, timings=timings))
    _print_success(console, SuccessData(job_id="j", mode="overwrite", filenames=("t/a",), bytes=1, rows=10,
                                        partitions=(), timings={"complete": 0.2, "total": 0.47}))
    text = console.export_text()
    assert "0.51 s on the driver, job.commit() from call to return, _SUCCESS and cleanup included" in text
    assert "total 0.470  (total: the commit up to writing this file, which is why it is below the report's Commit)" in text
