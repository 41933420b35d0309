"""The support matrix's records and the README's table of them (tests/versions/matrix.py): every combination the
matrix names has been run, and the README shows exactly what those runs recorded. (The runs themselves are
``make test-matrix``, on demand: each is a venv and a Spark session of its own.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.versions import matrix


def test_the_readme_shows_what_the_matrix_runs_recorded() -> None:
    assert matrix.readme_block() == matrix.table(matrix.load()), \
        "README.md's support matrix differs from tests/versions/results.jsonl: python -m tests.versions.matrix " \
        "--write-readme"


def test_every_recorded_run_is_of_a_combination_of_the_matrix_and_every_combination_is_shown() -> None:
    recorded = {(matrix.minor(r["python"]), r["pyspark"]) for r in matrix.load()}
    named = {(c.python, c.pyspark) for c in matrix.COMBINATIONS}
    assert recorded <= named, f"recorded but no longer in the matrix: {sorted(recorded - named)}"
    shown = matrix.table(matrix.load())
    for c in matrix.COMBINATIONS:
        assert f"| {c.pyspark} | {c.python}" in shown, f"{c.name} missing from the README's table"


def test_pytests_report_is_counted_with_errors_as_failures(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="10" skipped="3" '
                      'failures="1" errors="2"></testsuite></testsuites>')
    assert matrix.junit_counts(report) == {"passed": 4, "skipped": 3, "failed": 3}


def test_a_new_run_replaces_the_last_one_of_its_combination(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix, "RESULTS", tmp_path / "results.jsonl")
    base = {"passed": 1, "skipped": 0, "failed": 0, "date": "2026-11-28", "commit": "abc", "seconds": 60}
    matrix.save({**base, "python": "3.10.13", "pyspark": "3.5.9"})
    matrix.save({**base, "python": "3.13.0", "pyspark": "4.3.0"})
    matrix.save({**base, "python": "3.10.14", "pyspark": "3.5.9", "passed": 7})
    assert [(r["python"], r["passed"]) for r in matrix.load()] == [("3.13.0", 1), ("3.10.14", 7)]
    assert matrix.table(matrix.load()).splitlines()[2].startswith("| 3.5.9 | 3.10.14 | 7 | 0 | 0 |"), \
        "the matrix's order: 3.5 first"
