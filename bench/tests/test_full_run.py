"""The full run's ledger: which steps are still to run at one product code."""

from __future__ import annotations

from pathlib import Path

from bench.full_run import last_minutes, missing_steps, read_ledger, record_step, steps


def _by_name(name: str):
    return next(s for s in steps() if s.name == name)


def test_a_step_done_at_the_current_code_is_not_missing_and_one_done_at_older_code_is(tmp_path: Path) -> None:
    ledger = tmp_path / "full_run.jsonl"
    record_step(_by_name("peers-s3"), code="new", commit="c2", started="t", minutes=73.2, exit_status=0, path=ledger)
    record_step(_by_name("task-s3"), code="old", commit="c1", started="t", minutes=36.0, exit_status=0, path=ledger)
    missing = {s.name for s in missing_steps(steps(), read_ledger(ledger), "new")}
    assert "peers-s3" not in missing
    assert "task-s3" in missing
    assert len(missing) == len(steps()) - 1


def test_a_failed_step_or_one_whose_plan_changed_since_is_still_missing(tmp_path: Path) -> None:
    ledger = tmp_path / "full_run.jsonl"
    record_step(_by_name("writer-s3"), code="c", commit="c", started="t", minutes=2.0, exit_status=1, path=ledger)
    entries = read_ledger(ledger)
    entries.append({"step": "stream-commit", "code": "c", "exit": 0, "minutes": 1.0,
                    "command": "python -m bench.bench_datasource stream --batches 5"})  # an older, smaller plan
    missing = {s.name for s in missing_steps(steps(), entries, "c")}
    assert {"writer-s3", "stream-commit"} <= missing


def test_the_listing_shows_the_last_successful_duration(tmp_path: Path) -> None:
    ledger = tmp_path / "full_run.jsonl"
    step = _by_name("commit-s3-10k")
    record_step(step, code="a", commit="a", started="t", minutes=1.4, exit_status=0, path=ledger)
    record_step(step, code="b", commit="b", started="t", minutes=9.9, exit_status=2, path=ledger)
    record_step(step, code="b", commit="b", started="t", minutes=1.3, exit_status=0, path=ledger)
    assert last_minutes(read_ledger(ledger)) == {"commit-s3-10k": 1.3}


def test_the_committed_ledger_names_only_known_steps_with_their_commands() -> None:
    known = {s.name: "python -m " + " ".join(s.args) for s in steps()}
    entries = read_ledger()
    assert entries, "bench/results/full_run.jsonl is kept in git"
    for e in entries:
        assert e["step"] in known, e
        assert {"code", "commit", "started", "minutes", "exit", "command"} <= set(e), e


def test_benchmarks_md_says_which_steps_are_left_at_the_code_of_its_commit(tmp_path: Path) -> None:
    from bench.report_tables import render_full_run

    ledger = tmp_path / "full_run.jsonl"
    record_step(_by_name("writer-s3"), code="head", commit="h", started="2026-11-27 00:13:13 UTC", minutes=2.0,
                exit_status=0, path=ledger)
    record_step(_by_name("peers-s3"), code="older", commit="o", started="2026-11-26 19:37:39 UTC", minutes=73.2,
                exit_status=0, path=ledger)
    text = "\n".join(render_full_run(tmp_path, head="head"))
    assert f"1 of {len(steps())} steps done" in text
    writer = next(line for line in text.splitlines() if line.startswith("| `writer-s3`"))
    peers = next(line for line in text.splitlines() if line.startswith("| `peers-s3`"))
    assert "done, 2026-11-27 00:13:13 UTC" in writer and "2.0 min (measured)" in writer
    assert "**to run**" in peers and "73 min (measured)" in peers
