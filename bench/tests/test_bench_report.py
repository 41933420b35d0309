"""The raw records and the report generator (bench/records.py, bench/report_tables.py), from a fixture of raw
records written as the benchmarks write them: compact lines, sessions, pairing, intervals, the tables and the
splice into BENCHMARKS.md."""

import json
import math

import pytest

from bench import records, report_tables
from bench.report_tables import (
    Summary,
    bootstrap_median_ci,
    fmt_ratio,
    interval_kind,
    pair_up,
    paired_ratio,
    range_coverage,
    regenerate,
    render_commit_rate,
    render_commit_scale,
    render_driver_memory,
    render_peers,
    splice,
)


def _session(sid, *, cores=2, network="s3", **extra):
    return {"kind": "session", "session": sid, "started": "2026-11-26 10:00:00 UTC",
            "git": {"commit": "abc1234567", "dirty": False}, "machine": {"cpu": "AMD EPYC", "cores": cores, "memory_gib": 23.5},
            "load": [1.0, 1.0, 1.0], "network": network, "profile": {"name": network}, **extra}


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _peer(variant, pair, seconds, job_commit, *, session="s1", files=1000, requests=3000, complete_s=None):
    run = {"kind": "run", "session": session, "scenario": "peers", "variant": variant, "files_target": files,
           "pair": pair, "seconds": seconds, "job_commit_s": job_commit, "files": files, "bytes": 1 << 30,
           "rows_expected": 26843545, "tasks": 8, "slots": 8, "compression": "snappy", "pending_left": 0,
           "requests": {"CompleteMultipartUpload": files}, "requests_total": requests, "throttled": 0,
           "cpu": {"jvm": 50.0, "python_workers": 10.0, "driver_python": 1.0, "server": 20.0, "proxy": 4.0},
           "op_seconds": {"CompleteMultipartUpload": complete_s if complete_s is not None else files * 0.08}}
    if variant == "mpcommit":
        run["mp_timings"] = {"total": job_commit, "complete": job_commit - 0.5, "validate": 0.1}
    else:
        run["success"] = {"committer": "magic", "counters": {"committer_commits_completed": files},
                          "durations_ms": {"committer_commit_job.mean": {"n": 1, "sum": (job_commit - 1.0) * 1000},
                                           "committer_materialize_file.mean": {"n": files, "sum": files * 80}}}
    return run


def test_compact_rounds_floats_and_drops_what_is_empty():
    got = records.compact({"a": 1.23456789, "b": None, "c": float("nan"), "d": {}, "e": [0.1234567, 2], "f": True,
                           "g": {"h": None, "i": 3}})
    assert got == {"a": 1.2346, "e": [0.12346, 2], "f": True, "g": {"i": 3}}


def test_a_record_log_writes_its_session_once_then_one_line_per_run(tmp_path):
    log = records.RecordLog("demo", directory=tmp_path, command="python -m bench.demo", network="s3")
    log.run(variant="a", pair=0, seconds=1.0)
    log.run(variant="b", pair=0, seconds=2.0)
    lines = (tmp_path / "demo.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["session", "run", "run"]
    sessions, runs = records.load([tmp_path / "demo.jsonl"])
    (sid, meta), = sessions.items()
    assert meta["command"] == "python -m bench.demo" and meta["network"] == "s3" and "commit" in meta["git"]
    assert [r["session"] for r in runs] == [sid, sid] and runs[1]["seconds"] == 2.0
    bad = _write(tmp_path / "bad.jsonl", [])
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        records.load([bad])


def test_the_median_interval_needs_three_values_and_holds_the_median():
    assert bootstrap_median_ci([1.0, 2.0]) is None
    values = [10.0, 11.0, 9.5, 10.5, 12.0, 9.0, 10.2]
    lo, hi = bootstrap_median_ci(values)
    assert lo <= 10.2 <= hi and 9.0 <= lo and hi <= 12.0
    assert bootstrap_median_ci(values) == (lo, hi)  # a fixed seed: the report regenerates identically
    s = Summary.of([3.0, None, 1.0, 2.0])
    assert (s.median, s.n, s.lo, s.hi) == (2.0, 3, 1.0, 3.0) and s.ci is not None


def test_runs_pair_only_within_a_session_and_round():
    runs = [_peer("mpcommit", 0, 50, 4), _peer("magic-tuned", 0, 100, 8),
            _peer("mpcommit", 1, 60, 4), _peer("magic-tuned", 1, 80, 8),
            _peer("mpcommit", 2, 70, 4),  # no partner in round 2
            _peer("magic-tuned", 0, 1000, 8, session="s2")]  # another session's round 0: not a partner
    pairs = pair_up(runs, "mpcommit", "magic-tuned")
    assert [(a["pair"], b["seconds"]) for a, b in pairs] == [(0, 100), (1, 80)]
    r = paired_ratio(runs, "mpcommit", "magic-tuned", lambda x: x["seconds"])
    assert r.n == 2 and r.median == pytest.approx((0.5 + 0.75) / 2)
    assert fmt_ratio(r) == "0.62x (min-max 0.50-0.75 of 2 pairs, covers the median 50%)"
    assert fmt_ratio(Summary.of([0.4])) == "0.40x (one pair)"
    assert fmt_ratio(Summary.of([])) == "–"
    # Five pairs: the bootstrap interval of the median is their range, and says so with its coverage (not "95%").
    assert fmt_ratio(Summary.of([0.5, 0.6, 0.55, 0.58, 0.52])) == \
        "**0.55x** (min-max 0.50-0.60 of 5 pairs, covers the median 94%)"
    # Enough pairs for the bootstrap to be narrower than the range: a 95% bootstrap interval, named so.
    many = Summary.of([0.5 + i / 100 for i in range(20)])
    assert interval_kind(many) == "bootstrap" and fmt_ratio(many) == "**0.59x** (95% bootstrap CI 0.56-0.64 of 20 pairs)"
    assert range_coverage(5) == 0.9375 and range_coverage(2) == 0.5


def test_the_peers_table_from_raw_records(tmp_path):
    lines = [_session("s1", tasks=8)]
    for pair, (mp, magic) in enumerate([(50, 100), (60, 100), (45, 90), (55, 100), (52, 104)]):
        order = [_peer("mpcommit", pair, mp, 4.0), _peer("magic-tuned", pair, magic, 11.0)]
        lines += order if pair % 2 == 0 else order[::-1]
        lines.append(_peer("magic", pair, magic * 1.5, 30.0, requests=9000))
    path = _write(tmp_path / "peers.jsonl", lines)
    sessions, runs = records.load([path])
    text = "\n".join(render_peers(sessions, runs))
    assert "**1,000 files, with the S3-like network (profile `s3`)**" in text
    row = next(line for line in text.splitlines() if line.startswith("| mpcommit.spark.write | 5 |"))
    assert "**0.50x** (min-max 0.50-0.60 of 5 pairs, covers the median 94%)" in row  # end to end: ratios 0.5, 0.6, 0.5, 0.55, 0.5
    assert "**0.36x**" in row  # job commit 4 / 11
    magic = next(line for line in text.splitlines() if line.startswith("| S3A magic, Hadoop's defaults | 5 |"))
    assert "| 9.00 |" in magic  # requests per file
    # the breakdown: 1,000 completes of 80 ms at the proxy over S3A's 10 s commitJob: 8 in flight
    brk = next(line for line in text.splitlines() if line.startswith("| S3A magic, tuned | 11.00 s"))
    assert "| 10.00 s | 1,000 | 80.0 | 8.0 | 1.00 s |" in brk
    assert "**Two cores.**" in text and "_15 runs in 1 session(s)" in text
    shape = next(line for line in text.splitlines() if line.startswith("| mpcommit.spark.write | 26,843,545 |"))
    assert "| 8 | 8 | 1,000 | snappy |" in shape


def test_the_commit_scale_tables_count_failures_and_judge_the_rate(tmp_path):
    lines = [_session("c1", threads=32)]
    for pair in range(3):
        lines.append({"kind": "run", "session": "c1", "variant": "commit", "files": 100000, "pair": pair,
                      "outcome": "ok" if pair else "failed: CommitStateUnknownError: SlowDown",
                      "wall_s": 40.0 + pair, "cpu_s": 25.0, "cpu_ms_per_file": 0.25, "completes_per_s": 2600.0 + pair,
                      "window_peak": 512, "slowdowns": 120, "retries": 120, "proxy_cpu_s": 12.0, "stub_cpu_s": 4.0})
        lines.append({"kind": "run", "session": "c1", "variant": "bare-crt", "files": 100000, "pair": pair, "outcome": "ok",
                      "wall_s": 40.0, "cpu_s": 20.0, "cpu_ms_per_file": 0.2, "completes_per_s": 2500.0,
                      "window_peak": 512, "slowdowns": 100, "retries": 100, "proxy_cpu_s": 12.0, "stub_cpu_s": 4.0})
    sessions, runs = records.load([_write(tmp_path / "commit_scale.jsonl", lines)])
    text = "\n".join(render_commit_scale(sessions, runs))
    commit = next(line for line in text.splitlines() if line.startswith("| `Job.commit` (CRT completes, adaptive window) |"))
    assert "| 3 (1 failed) |" in commit and "1.25x (min-max 1.25-1.25 of 2 pairs, covers the median 50%)" in commit  # CPU vs the floor, ok runs only
    assert "failed: CommitStateUnknownError" in text
    rate = "\n".join(render_commit_rate(sessions, runs))
    assert "| s3 | 100,000 | 32 | 3 | 1 | 2,602 (min-max 2,601-2,602 of 2, covers the median 50%) |" in rate and "**missed**" in rate  # < 3,000/s, a failure


def test_the_commit_is_compared_with_the_code_before_it_pair_by_pair(tmp_path):
    lines = [{**_session("c2", threads=32), "network": "raw", "profile": None,
              "trees": {"main": {"path": "/x", "commit": "959fa8e123"}}}]
    for pair in range(3):
        lines.append({"kind": "run", "session": "c2", "variant": "commit", "files": 10000, "pair": pair, "outcome": "ok",
                      "wall_s": 2.0, "cpu_s": 1.5 + pair, "cpu_ms_per_file": 0.15, "completes_per_s": 5000.0})
        lines.append({"kind": "run", "session": "c2", "variant": "commit@main", "files": 10000, "pair": pair,
                      "outcome": "ok", "wall_s": 2.5, "cpu_s": 2.0 + pair, "cpu_ms_per_file": 0.2,
                      "completes_per_s": 4000.0})
    sessions, runs = records.load([_write(tmp_path / "commit_scale.jsonl", lines)])
    text = "\n".join(render_commit_scale(sessions, runs))
    assert "against `commit@main`" in text
    row = next(line for line in text.splitlines() if line.startswith("| `Job.commit` (CRT completes"))
    assert "**0.80x** (min-max 0.80-0.80 of 3 pairs" in row  # wall 2.0 / 2.5 in every pair
    assert "| `Job.commit` at `main` (959fa8e123) | 3 |" in text


def test_runs_of_code_before_the_adaptive_window_are_labelled_as_such(tmp_path):
    lines = [_session("c3", threads=32)]
    for variant, peak in (("commit", None), ("bare-crt", None)):
        lines.append({"kind": "run", "session": "c3", "variant": variant, "files": 2000, "pair": 0, "outcome": "ok",
                      "wall_s": 1.0, "cpu_s": 0.3, "cpu_ms_per_file": 0.15, "completes_per_s": 2000.0,
                      **({"window_peak": peak} if peak else {})})
    sessions, runs = records.load([_write(tmp_path / "commit_scale.jsonl", lines)])
    text = "\n".join(render_commit_scale(sessions, runs))
    assert "(CRT completes, adaptive window)" not in text  # no record says the window ran
    assert "| `Job.commit` (CRT completes on fixed threads: code before the adaptive window) | 1 |" in text
    assert "| bare CRT loop on the same fixed threads (the floor) | 1 |" in text


def test_driver_memory_growth_is_judged_against_the_bound(tmp_path):
    lines = [_session("m1", mode="replay")]
    for files, rss, heap in ((10_000, 8.0, 6.0), (100_000, 40.0, 35.0), (1_000_000, 330.0, 300.0)):
        lines.append({"kind": "run", "session": "m1", "variant": "replay-referenced", "pair": 0, "files": files,
                      "tasks": files // 100, "inline": 0, "rss_growth_mib": rss, "heap_peak_mib": heap, "commit_s": 1.0,
                      "sites_at_success": [{"site": "mpcommit/protocol/commit.py:289", "mib": heap / 2, "blocks": files}]})
    sessions, runs = records.load([_write(tmp_path / "driver_memory.jsonl", lines)])
    text = "\n".join(render_driver_memory(sessions, runs))
    assert "10,000 -> 100,000 files: RSS +32.0 MiB, heap +29.0 MiB" in text
    assert "10,000 -> 1,000,000 files: RSS +322.0 MiB, heap +294.0 MiB -- **over** the 100 MiB bound" in text
    assert "| `mpcommit/protocol/commit.py:289` | 150.0 | 1,000,000 | 157 |" in text


def test_driver_memory_keeps_each_version_of_the_code_apart():
    before, after = _session("m1", mode="spark"), _session("m2", mode="spark")
    before["git"] = {"commit": "aaaaaaaaaa", "dirty": False}
    after["git"] = {"commit": "bbbbbbbbbb", "dirty": False}
    after["started"] = "2026-11-26 11:00:00 UTC"
    runs = [{"kind": "run", "session": sid, "variant": "spark", "pair": 0, "files": files, "tasks": files // 100,
             "inline": files // 100, "rss_growth_mib": rss, "commit_s": 1.0}
            for sid, files, rss in (("m1", 10_000, 20.0), ("m1", 100_000, 180.0), ("m2", 10_000, 22.0),
                                    ("m2", 100_000, 40.0))]
    text = "\n".join(render_driver_memory({"m1": before, "m2": after}, runs))
    assert text.index("**Code at aaaaaaaaaa**") < text.index("RSS +160.0 MiB") < text.index("**Code at bbbbbbbbbb**")
    assert text.index("**Code at bbbbbbbbbb**") < text.index("RSS +18.0 MiB")
    assert "RSS +20.0" not in text and "RSS +158.0" not in text  # never across versions


def test_the_splice_replaces_generated_blocks_and_nothing_else():
    doc = "# B\n\nhand-written\n\n<!-- table:x -->\nold\n<!-- /table:x -->\n\nmore\n<!-- table:y -->\n<!-- /table:y -->\n"
    new = regenerate(doc, {"x": ["", "| a |"], "y": ["y1"], "z": ["not in the document"]})
    assert new == ("# B\n\nhand-written\n\n<!-- table:x -->\n\n| a |\n\n<!-- /table:x -->\n\nmore\n"
                   "<!-- table:y -->\n\ny1\n\n<!-- /table:y -->\n")
    assert regenerate(new, {"x": ["", "| a |"], "y": ["y1"]}) == new  # idempotent
    with pytest.raises(ValueError, match="no <!-- /table:x -->"):
        splice("<!-- table:x -->\n", "x", ["a"])


def test_every_table_renders_with_no_records(tmp_path):
    for table in report_tables.TABLES:
        lines = report_tables.render(table, tmp_path)
        assert lines and all(isinstance(x, str) for x in lines)
    assert math.isclose(report_tables.median([1, 2, 3, None]), 2)


def test_percentile_is_a_measured_value_by_nearest_rank():
    values = [float(v) for v in range(1, 21)]  # 20 micro-batches
    assert report_tables.percentile(values, 50) == 10.0
    assert report_tables.percentile(values, 95) == 19.0
    assert report_tables.percentile([3.0], 95) == 3.0
    assert report_tables.percentile([None], 95) is None


def test_the_stream_commit_table_judges_the_target_at_100_files_with_latency():
    s = _session("s1")
    runs = [{"kind": "run", "session": "s1", "network": n, "files": f, "seconds": t, "pair": i}
            for i, t in enumerate([0.4, 0.5, 0.6]) for n, f in (("s3", 100), ("raw", 100))]
    text = "\n".join(report_tables.render_stream_commit({"s1": s}, runs))
    assert "| the S3-like network (profile `s3`) | 100 | 3 | 500 ms | 600 ms | 600 ms | met |" in text
    slow = [{**r, "seconds": r["seconds"] + 0.5} for r in runs]
    assert "| 1.10 s | 1.10 s | not met |" in "\n".join(report_tables.render_stream_commit({"s1": s}, slow))


def test_the_stream_commit_table_keeps_each_version_of_the_code_apart():
    before, after = _session("s1"), _session("s2")
    before["git"] = {"commit": "aaaaaaaaaa", "dirty": False}
    after["git"] = {"commit": "bbbbbbbbbb", "dirty": False}
    after["started"] = "2026-11-26 11:00:00 UTC"
    runs = [{"kind": "run", "session": sid, "network": "s3", "files": 100, "seconds": t + i / 100, "pair": i}
            for i in range(5) for sid, t in (("s1", 1.2), ("s2", 0.8))]
    text = "\n".join(report_tables.render_stream_commit({"s1": before, "s2": after}, runs))
    assert text.index("**Code at aaaaaaaaaa**") < text.index("**Code at bbbbbbbbbb**")
    assert text.count("| not met |") == 1 and text.count("| met |") == 1
    assert text.index("| not met |") < text.index("**Code at bbbbbbbbbb**") < text.index("| met |")


def test_the_door_table_says_whether_the_interval_clears_1_05x():
    s = _session("s1")
    runs = [{"kind": "run", "session": "s1", "variant": v, "pair": p, "rows": 100, "files": 8, "seconds": t}
            for p in range(5) for v, t in (("source", 1.0 + p / 100), ("writer", 1.0))]
    assert "**met**" in "\n".join(report_tables.render_datasource_door({"s1": s}, runs))
    slower = [{**r, "seconds": r["seconds"] * (1.5 if r["variant"] == "source" else 1)} for r in runs]
    assert "**not met**" in "\n".join(report_tables.render_datasource_door({"s1": s}, slower))


def test_the_task_scale_table_says_its_raw_runs_have_no_proxy():
    s = _session("s1", network="raw")
    runs = [{"kind": "run", "session": "s1", "variant": v, "pair": p, "partitions": 1000, "seconds": t, "commit_s": c,
             "files": 1000, "bytes": 1 << 30, "peak_rss": 1 << 26}
            for p in range(3) for v, t, c in (("mpcommit", 18.0, 5.0), ("pyarrow", 39.0, 0.0))]
    text = "\n".join(report_tables.render_task_scale({"s1": s}, runs))
    assert "**1,000 partitions in one task, raw (straight to the server, no proxy, no added latency)**" in text
    assert "counting proxy" not in text
    assert "**0.59x** (min-max 0.59-0.59 of 3 pairs, covers the median 75%)" in text


def _git(root, *args):
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_the_code_version_is_the_last_commit_that_changed_the_product_code(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "mpcommit").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "mpcommit" / "a.py").write_text("1\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "code")
    code = _git(tmp_path, "rev-parse", "--short=10", "HEAD")
    (tmp_path / "bench" / "results.jsonl").write_text("{}\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "records only")
    records_only = _git(tmp_path, "rev-parse", "--short=10", "HEAD")
    assert records.code_version(records_only, tmp_path) == code != records_only
    state = records.git_state(tmp_path)
    assert state["commit"] == records_only and state["code"] == code and not state["dirty"]
    (tmp_path / "mpcommit" / "a.py").write_text("2\n")
    assert records.git_state(tmp_path)["dirty"], "a change under mpcommit/ is not the committed code"
    _git(tmp_path, "commit", "-qam", "code again")
    assert records.code_version("HEAD", tmp_path) == _git(tmp_path, "rev-parse", "--short=10", "HEAD")
    assert records.code_version("0123456789", tmp_path) == "", "a commit git does not know has no version"


def test_the_versions_block_counts_each_records_file_s_runs_at_the_named_code(tmp_path):
    now = _session("now", git={"commit": "bbbbbbbbbb", "code": "aaaaaaaaaa", "dirty": False})
    dirty = _session("dirty", git={"commit": "bbbbbbbbbb", "code": "aaaaaaaaaa", "dirty": True})
    old = _session("old", git={"commit": "0ld0000000", "dirty": False})  # recorded before "code": its commit
    _write(tmp_path / "peers.jsonl", [old, _peer("mpcommit", 0, 30, 3, session="old"), now, dirty,
                                      _peer("mpcommit", 0, 30, 3, session="now"),
                                      _peer("magic-tuned", 0, 45, 4, session="now"),
                                      _peer("mpcommit", 0, 30, 3, session="dirty")])
    text = "\n".join(report_tables.render_code_versions(tmp_path, head="aaaaaaaaaa"))
    assert "**aaaaaaaaaa**" in text
    row = next(line for line in text.splitlines() if "`peers.jsonl`" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:4] == ["2", "2"], "two runs at the named code; the dirty one and the old one are not"
    assert "0ld0000000 (1)" in cells[4] and "aaaaaaaaaa +uncommitted changes under mpcommit/ (1)" in cells[4]
    assert "commit_scale" not in text, "a records file with no runs is not listed"


def test_a_table_never_mixes_runs_of_the_named_code_with_older_code(tmp_path):
    now = _session("now", git={"commit": "bbbbbbbbbb", "code": "aaaaaaaaaa", "dirty": False})
    old = _session("old", git={"commit": "0ld0000000", "dirty": False})
    lines = [old, now]
    for pair in range(3):
        lines += [_peer("mpcommit", pair, 30, 3, session="old"), _peer("magic-tuned", pair, 60, 6, session="old"),
                  _peer("mpcommit", pair, 20, 2, session="now"), _peer("magic-tuned", pair, 40, 8, session="now")]
    _write(tmp_path / "peers.jsonl", lines)
    peers = next(t for t in report_tables.TABLES if t.name == "peers")
    text = "\n".join(report_tables.render(peers, tmp_path, head="aaaaaaaaaa"))
    current, older = text.split("**At older code (0ld0000000), as measured then**")
    assert "**At the product code of this commit (aaaaaaaaaa)**" in current
    assert "**0.50x**" in current and "0.25x" in current, "20 s / 40 s end to end, 2 s / 8 s job commit"
    assert "**0.50x**" in older and "**0.50x**" in older and "0.25x" not in older, "30 / 60 s and 3 / 6 s"
    assert "code at aaaaaaaaaa;" in current and "code at 0ld0000000;" in older
    assert "_6 runs in 1 session(s)" in current and "_6 runs in 1 session(s)" in older
    # None at the named code (a product change since): each older version apart, newest first, never pooled.
    alone = "\n".join(report_tables.render(peers, tmp_path, head="cccccccccc"))
    assert "At the product code of this commit" not in alone and "_12 runs" not in alone
    newer, oldest = alone.split("**At older code (0ld0000000), as measured then**")
    assert "**At older code (aaaaaaaaaa), as measured then**" in newer and "0.25x" in newer
    assert "0.25x" not in oldest and "_6 runs in 1 session(s)" in oldest


def test_results_show_the_named_code_alone_and_history_keeps_every_older_version_apart(tmp_path):
    sessions = {name: _session(name, git={"commit": "b" * 10, "code": code, "dirty": False})
                for name, code in (("oldest", "1111111111"), ("older", "2222222222"), ("now", "aaaaaaaaaa"))}
    lines = list(sessions.values())
    for pair in range(3):
        lines += [_peer("mpcommit", pair, 30, 3, session="oldest"), _peer("magic-tuned", pair, 60, 6, session="oldest"),
                  _peer("mpcommit", pair, 10, 3, session="older"), _peer("magic-tuned", pair, 40, 4, session="older"),
                  _peer("mpcommit", pair, 20, 2, session="now"), _peer("magic-tuned", pair, 40, 8, session="now")]
    _write(tmp_path / "peers.jsonl", lines)
    peers = next(t for t in report_tables.TABLES if t.name == "peers")
    current = "\n".join(report_tables.render_current(peers, tmp_path, head="aaaaaaaaaa"))
    assert "**0.50x**" in current and "0.25x" in current and "_6 runs in 1 session(s)" in current
    assert "1111111111" not in current and "2222222222" not in current and "**0.75x**" not in current
    history = "\n".join(report_tables.render_history(peers, tmp_path, head="aaaaaaaaaa"))
    assert "aaaaaaaaaa" not in history, "the named code's runs are not history"
    newer, oldest = history.split("**At code 1111111111, as measured then**")
    assert "**At code 2222222222, as measured then**" in newer and "0.25x" in newer, "10 / 40 s end to end"
    assert "**0.50x**" in oldest and "0.25x" not in oldest
    # A product change since: the newest older version stands in Results, labelled; the rest stay in History.
    stand_in = "\n".join(report_tables.render_current(peers, tmp_path, head="cccccccccc"))
    assert stand_in.startswith("**At older code (aaaaaaaaaa), as measured then**") and "2222222222" not in stand_in
    rest = "\n".join(report_tables.render_history(peers, tmp_path, head="cccccccccc"))
    assert "At code aaaaaaaaaa" not in rest and "At code 2222222222" in rest and "At code 1111111111" in rest
    assert report_tables.render_history(peers, tmp_path / "none", head="aaaaaaaaaa") == ["_No runs at older code._"]
