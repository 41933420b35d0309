"""The support matrix: the Spark tiers run on each combination of PySpark and Python the README promises, each in a
venv of its own (``make test-matrix``; ``make test`` runs the project's one venv).

    python -m tests.versions.matrix                     every combination, one after another, niced; then the
                                                        README's table is written from the records
    python -m tests.versions.matrix --only 3.10/3.5.9   one (Python/PySpark, as listed by --list)
    python -m tests.versions.matrix --table             the README's table from the recorded runs
    python -m tests.versions.matrix --write-readme      ... written into README.md, between its markers

Each combination gets ``.venv-matrix/pyPY-pysparkV/`` (ignored by git): the project installed editable with its
``test`` extra and ``pyspark[connect]==V``, and the checkout on the venv's path as ``make install`` puts it (Spark
finds the data source there). Its Spark tiers run on moto only (a Spark job tests mpcommit's binding to Spark, which
the store does not change; moto needs no server process) and with ``-n 0``: one process, one JVM at a time, on a
machine whose two cores are shared. Tests of doors a PySpark lacks skip and say why (marker ``pyspark4``), and so do
the Connect tests where the PySpark package ships no Connect server (3.5's).

Every run is recorded in ``tests/versions/results.jsonl`` (the last run of a combination replaces its line): the
versions, the counts from pytest's JUnit report, the date, how long it took, the commit, and a note when the tree run
was not the commit as it is. ``tests/versions/test_matrix.py`` keeps the README's table equal to those records.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tests" / "versions" / "results.jsonl"
README = REPO / "README.md"
VENVS = REPO / ".venv-matrix"
START, END = "<!-- support-matrix:start -->", "<!-- support-matrix:end -->"

#: The Spark tiers: the binding's tests (every door, its pure parts too), Connect, and the tests elsewhere that run a
#: Spark job through mpcommit (the session catalog, the commit-time merge as a Spark stage). Left out: tests/interop
#: (S3A's jars are fetched for one Hadoop, the default venv's PySpark's) and tests/cluster (a standalone cluster, minutes
#: per test, the same code paths as local mode).
TIERS = ("tests/spark", "tests/connect", "tests/catalog/test_spark_write.py", "tests/catalog/test_spark_catalog.py",
         "tests/compaction/test_commit_merge_spark.py")


@dataclass(frozen=True)
class Combination:
    python: str   # major.minor
    pyspark: str  # an exact release
    #: What a user installs beside it, as the README says (PySpark 3.5: a pyarrow that runs on NumPy 1).
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.python}/{self.pyspark}"

    @property
    def venv(self) -> Path:
        return VENVS / f"py{self.python}-pyspark{self.pyspark}"


#: What the README promises, each PySpark minor's latest patch on PyPI at the time of the run; ``make test`` is
#: Python 3.11 with PySpark 4.3.0 (.venv). PySpark 3.5 supports Python 3.8-3.11 (its pandas conversion imports
#: distutils, gone in 3.12); 4.x runs on 3.13. PySpark 3.5's extras pin NumPy below 2, and pyarrow 26 (which pip
#: picks where it has a wheel: Python 3.11 and later) needs NumPy 2 without declaring it.
ON_NUMPY_1 = ("pyarrow<26",)
COMBINATIONS = (
    Combination("3.10", "3.5.9", ON_NUMPY_1),
    Combination("3.11", "3.5.9", ON_NUMPY_1),
    Combination("3.10", "4.0.5"),
    Combination("3.12", "4.1.4"),
    Combination("3.12", "4.2.1"),
    Combination("3.13", "4.3.0"),
)


def find_python(version: str) -> str:
    """An interpreter of ``version``: pyenv's (``PYENV_ROOT``, default ~/.pyenv), else ``pythonX.Y`` on PATH."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    candidates.append(f"python{version}")
    for candidate in candidates:
        try:
            asked = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if asked.returncode == 0 and asked.stdout.strip() == version:
            return candidate
    raise SystemExit(f"no Python {version} here (looked in {root}/versions and on PATH): install it, e.g. "
                     f"pyenv install {version}")


def install(combination: Combination) -> Path:
    """The combination's venv, made or brought up to date; returns its interpreter."""
    python = combination.venv / "bin" / "python"
    stamp = combination.venv / ".installed"
    wanted = f"{(REPO / 'pyproject.toml').stat().st_mtime_ns} {combination.pyspark} {' '.join(combination.extra)}"
    if stamp.exists() and stamp.read_text() == wanted and python.exists():
        return python
    if not python.exists():
        subprocess.run([find_python(combination.python), "-m", "venv", str(combination.venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run(["nice", "-n", "10", *pip, "--upgrade", "pip"], check=True)
    subprocess.run(["nice", "-n", "10", *pip, "-e", f"{REPO}[test]", f"pyspark[connect]=={combination.pyspark}",
                    *combination.extra], check=True, cwd=REPO)
    # As `make install`: PySpark finds pyspark_mpcommit by listing sys.path, which an editable install hides.
    subprocess.run([str(python), "-c", "import sysconfig; open(sysconfig.get_path('purelib') + "
                    f"'/mpcommit-checkout.pth', 'w').write({str(REPO)!r} + '\\n')"], check=True)
    stamp.write_text(wanted)
    return python


def run(combination: Combination, *, note: str = "", pytest_args: list[str] | None = None) -> dict[str, Any]:
    """Run the Spark tiers on ``combination``; its record (also appended to the results)."""
    python = install(combination)
    versions = json.loads(subprocess.run(
        [str(python), "-c", "import json, platform, pyspark; print(json.dumps([platform.python_version(), "
         "pyspark.__version__]))"], check=True, capture_output=True, text=True).stdout)
    report = combination.venv / "junit.xml"
    # Both tiers (MPCOMMIT_TIER=all): the long tier's Spark tests -- the foreachBatch kill, the stream trials' other
    # seeds -- are what a version's change would break first.
    env = {**os.environ, "MPCOMMIT_TEST_BACKENDS": "moto", "MPCOMMIT_TIER": "all", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("CI", None)  # the S3A jars are the default venv's Hadoop's: their tests skip here, and must not fail
    started = time.monotonic()
    done = subprocess.run(["nice", "-n", "10", str(python), "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-q",
                           "-rs", f"--junitxml={report}", *TIERS, *(pytest_args or [])], cwd=REPO, env=env)
    seconds = time.monotonic() - started
    counts = junit_counts(report)
    record = {
        "python": versions[0], "pyspark": versions[1], "date": datetime.date.today().isoformat(),
        **counts, "seconds": round(seconds), "exit": done.returncode, "commit": commit(), "note": note,
        "tiers": list(TIERS), "tier": env["MPCOMMIT_TIER"], "args": pytest_args or [],
    }
    save(record)
    return record


def junit_counts(path: Path) -> dict[str, int]:
    """passed / skipped / failed (failures and errors) from pytest's JUnit report."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "skipped", "failures", "errors")}
    failed = total["failures"] + total["errors"]
    return {"passed": total["tests"] - total["skipped"] - failed, "skipped": total["skipped"], "failed": failed}


def commit() -> str:
    """The checkout's commit, with ``+changes`` when its tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(not a git checkout)"
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=REPO).returncode != 0
    return head + ("+changes" if dirty else "")


# ---------------------------------------------------------------- the records and the README's table
def load() -> list[dict[str, Any]]:
    if not RESULTS.exists():
        return []
    return [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def save(record: dict[str, Any]) -> None:
    """Add ``record``, replacing an earlier run of the same combination (same Python and PySpark minor versions)."""
    key = (minor(record["python"]), record["pyspark"])
    kept = [r for r in load() if (minor(r["python"]), r["pyspark"]) != key]
    RESULTS.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in [*kept, record]))


def table(records: list[dict[str, Any]]) -> str:
    """The README's table of what was run, in the order of :data:`COMBINATIONS`; a combination with no run
    recorded yet is a row that says so, never left out."""
    order = {(c.python, c.pyspark): i for i, c in enumerate(COMBINATIONS)}
    rows = sorted(records, key=lambda r: order.get((minor(r["python"]), r["pyspark"]), len(order)))
    run = {(minor(r["python"]), r["pyspark"]) for r in records}
    lines = ["| PySpark | Python | passed | skipped | failed | run on | minutes | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['pyspark']} | {r['python']} | {r['passed']} | {r['skipped']} | {r['failed']} | "
                     f"{r['date']} ({r['commit']}) | {r['seconds'] / 60:.0f} | {r.get('note') or ''} |")
    for c in COMBINATIONS:
        if (c.python, c.pyspark) not in run:
            lines.append(f"| {c.pyspark} | {c.python} | - | - | - | not run yet | - | "
                         f"`make test-matrix MATRIX_ARGS='--only {c.name}'` |")
    return "\n".join(lines)


def readme_block() -> str:
    """What README.md holds between the markers."""
    text = README.read_text()
    start, end = text.index(START) + len(START), text.index(END)
    return text[start:end].strip()


def write_readme() -> None:
    text = README.read_text()
    start, end = text.index(START) + len(START), text.index(END)
    README.write_text(text[:start] + "\n" + table(load()) + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", default=[], help="a combination, PY/PYSPARK (see --list)")
    parser.add_argument("--list", action="store_true", help="the combinations")
    parser.add_argument("--table", action="store_true", help="print the README's table from the records")
    parser.add_argument("--write-readme", action="store_true", help="write that table into README.md")
    parser.add_argument("--note", default="", help="recorded with the run (e.g. what differs from the commit)")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(c.name for c in COMBINATIONS))
        return 0
    if args.table or args.write_readme:
        if args.write_readme:
            write_readme()
        print(table(load()))
        return 0
    chosen = [c for c in COMBINATIONS if not args.only or c.name in args.only]
    unknown = set(args.only) - {c.name for c in COMBINATIONS}
    if unknown:
        parser.error(f"unknown combination(s) {sorted(unknown)}; --list shows them")
    failed = 0
    for combination in chosen:
        print(f"== {combination.name}: {combination.venv}", file=sys.stderr, flush=True)
        record = run(combination, note=args.note, pytest_args=args.pytest_args)
        print(f"== {combination.name}: {record['passed']} passed, {record['skipped']} skipped, {record['failed']} "
              f"failed in {record['seconds'] / 60:.0f} min", file=sys.stderr, flush=True)
        failed += record["failed"] > 0 or record["exit"] not in (0, 1)
    if README.read_text().count(START) == 1:
        write_readme()
    print(table(load()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
