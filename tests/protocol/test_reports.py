"""What a person reads of a commit report: a few lines, not the dataclass's repr of every file name."""

from mpcommit.modes import CommitMode, CommitOutcome
from mpcommit.protocol.commit import CommitReport


def report(**extra) -> CommitReport:
    names = tuple(f"b/t/dt={i % 10}/part-{i:05d}-0b9c5e8e-8a5e-4c1e-9b7e-1d2f3a4b5c6d.c000.snappy.parquet"
                  for i in range(1000))
    values = dict(job_id="0b9c5e8e-8a5e-4c1e-9b7e-1d2f3a4b5c6d", uri="s3://b/t", mode=CommitMode.OVERWRITE,
                  outcome=CommitOutcome.COMMITTED, filenames=names, bytes=123_456_789, rows=2_000_000,
                  partitions=tuple(f"dt={i}" for i in range(10)), timings={"complete": 1.25, "total": 2.5},
                  deleted_objects=40, position=7)
    values.update(extra)
    return CommitReport(**values)  # type: ignore[arg-type]


def test_str_is_a_few_lines_naming_what_was_committed():
    text = str(report())
    lines = text.splitlines()
    assert len(lines) <= 5 and len(text) < 400, text
    assert lines[0] == "committed s3://b/t (overwrite) job 0b9c5e8e-8a5e-4c1e-9b7e-1d2f3a4b5c6d"
    assert "1,000 files, 123.5 MB, 2,000,000 rows in 10 partitions" in lines[1]
    assert "replaced 40 older objects" in text and "commit took 2.50s (complete 1.25s)" in text
    assert "part-00000" not in text  # file names are in report.filenames, not in what is printed


def test_str_of_an_ignored_write_and_of_a_commit_finished_elsewhere():
    assert "found existing data; nothing was written" in str(report(ignored=True, filenames=()))
    assert str(report(finished_elsewhere=True)).splitlines()[0].endswith("(finished by another process)")
    assert report(finished_elsewhere=True).summary()["finishedElsewhere"] is True
