"""Issue 39's harness pieces without Spark or a server: the executor benchmark's validity gate and plan, and the
tables that read its records and the task side's (the executor-shaped peers, the task CPU before/after, the
targets table)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_executor import gate, parse_plan, tuned
from bench.report_tables import render_compaction_sensitivity, render_executor, render_targets, render_task_cpu
from tests.support.s3_network import S3_LIKE


def _stats(completes: int, upstream: float, held: float, drawn: float, late: int = 0, others: int = 0) -> dict:
    return {"ops": {"CompleteMultipartUpload": {"requests": completes, "upstream_seconds": upstream,
                                                "held_seconds": held, "latency_seconds": drawn, "late": late},
                    "UploadPart": {"requests": others, "late": 0}}}


def test_a_run_is_valid_when_the_server_kept_the_models_pace():
    ok = gate(_stats(100, upstream=1.0, held=7.0, drawn=8.0, others=300), S3_LIKE.to_json())
    assert ok["valid"] is True and round(ok["complete_ms"]) == 80 and ok["why"] == "ok"
    slow = gate(_stats(100, upstream=12.0, held=0.5, drawn=8.0, late=60, others=300), S3_LIKE.to_json())
    assert slow["valid"] is False
    assert "the server set the pace" in slow["why"] and "60 of 400 answers late" in slow["why"]
    assert gate(_stats(100, upstream=1.0, held=0.0, drawn=0.0), None)["valid"] is None  # raw: no floor
    assert gate({"ops": {}}, S3_LIKE.to_json())["why"] == "no store"


def test_with_a_tail_clipped_answers_are_not_late_but_their_added_time_is_bounded():
    from tests.support.s3_network import S3_TAIL

    def stats(clipped: int, clipped_seconds: float, late: int = 0) -> dict:
        s = _stats(1000, upstream=1.0, held=129.0, drawn=130.0, late=late)
        s["ops"]["UploadPart"] = {"requests": 2000, "late": 0, "latency_seconds": 90.0, "clipped": clipped,
                                  "clipped_seconds": clipped_seconds}
        return s

    # 150 low draws under a server that answered within the median, 2 ms over each: 0.3 s of the model's 220 s.
    few = gate(stats(150, 0.3), S3_TAIL.to_json())
    assert few["valid"] is True and few["late"] == 0 and few["clipped"] == 150
    assert few["clipped_time_share"] < 0.01
    # The same answers 40 ms over each: 6 s, 2.7% of the model's time -- the server slowed the run after all.
    many = gate(stats(150, 6.0), S3_TAIL.to_json())
    assert many["valid"] is False and "added 6.00 s to the model's 220.0 s" in many["why"]
    # Late answers (past the median) are judged as before, whatever was clipped.
    late = gate(stats(0, 0.0, late=70), S3_TAIL.to_json())
    assert late["valid"] is False and "70 of 3000 answers late" in late["why"]


def test_a_tail_run_failed_by_the_older_gate_says_so():
    from bench.report_tables import _older_gate

    run = {"session": "s1", "network": "s3-tail"}
    assert "counted a tail's low draws" in _older_gate({"s1": {"gate": {"late_share": 0.02}}}, run)
    assert _older_gate({"s1": {"gate": {"late_share": 0.02, "clipped_time_share": 0.02}}}, run) == ""
    assert _older_gate({"s1": {"gate": {"late_share": 0.02}}}, {**run, "network": "s3"}) == ""  # no tail: same test


def test_the_ideal_window_time_of_a_rounds_draws():
    from bench.bench_executor import ideal_window_seconds
    from tests.support.s3_network import S3_LIKE, S3_TAIL, draw_stream

    # No tail: 100 completes of 80 ms through 10 slots kept full take 10 waves.
    assert abs(ideal_window_seconds(1, 100, 10, S3_LIKE) - 0.8) < 1e-9
    # One slot: the draws' sum, the proxy's stream for the seed and the operation.
    stream = draw_stream(3900, "CompleteMultipartUpload")
    total = sum(S3_TAIL.latency_for("CompleteMultipartUpload", draw=stream.random()) for _ in range(50))
    assert abs(ideal_window_seconds(3900, 50, 1) - total) < 1e-9
    # More slots never take longer, and never less than the longest draw.
    times = [ideal_window_seconds(3903, 1000, k) for k in (8, 32, 256)]
    assert times == sorted(times, reverse=True) and times[-1] >= 4.0  # seed 3903 draws one answer of 4.4 s


def test_the_plan_and_the_tuned_variants():
    assert parse_plan("1000:raw,s3,s3-tail;10000:s3") == [(1000, "raw"), (1000, "s3"), (1000, "s3-tail"), (10000, "s3")]
    assert tuned("magic-tuned-128")["fs.s3a.committer.threads"] == "128"
    assert int(tuned("magic-tuned-128")["fs.s3a.connection.maximum"]) >= 96 + 2 * 128
    assert tuned("magic") == {}


def _executor_runs() -> list[dict]:
    runs = []
    cpu = {"mpcommit": (10.0, 40.0), "magic-tuned-32": (20.0, 110.0), "magic-tuned-128": (20.0, 100.0),
           "magic": (25.0, 130.0), "local-disk": (12.0, 50.0)}
    for pair in range(3):
        for variant, (small, large) in cpu.items():
            for files, c in ((1000, small), (10000, large)):
                runs.append({"kind": "run", "session": "e1", "variant": variant, "files_target": files, "files": files,
                             "network": "s3", "pair": pair, "seconds": c / 2, "job_commit_s": c / 20, "writer_s": c / 2 - c / 20,
                             "cpu_s": c + pair, "requests_total": 3 * files, "gate": {"complete_ms": 80, "drawn_ms": 80},
                             "valid": not (variant == "magic" and pair == 2)})
    return runs


def test_the_executor_table_pairs_valid_runs_and_names_the_invalid(tmp_path: Path):
    runs = _executor_runs()
    text = "\n".join(render_executor({"e1": {"started": "2026-11-28 00:00:00 UTC"}}, runs))
    assert "**1,000 files" in text and "**10,000 files" in text
    assert "| S3A magic, Hadoop's defaults | 3 (1 invalid) |" in text
    assert "Runs the validity gate failed" in text and "magic round 2" in text
    assert "Client CPU per extra file, 1,000 -> 10,000 files" in text
    # mpcommit: (40 - 10) / 9000 s = 3.33 ms per extra file; tuned-32: 10 ms -> 0.33x
    assert "3.33 ms" in text and "0.33x" in text
    assert "Where the client CPU goes" not in text  # no run recorded its split


def test_the_executor_table_splits_the_client_cpu_by_process():
    runs = _executor_runs()
    for r in runs:
        r["cpu_split_s"] = {"driver_python": 0.5, "jvm": r["cpu_s"] - 4.5, "python_workers": 4.0}
    text = "\n".join(render_executor({"e1": {"started": "2026-11-28 00:00:00 UTC"}}, runs))
    assert "Where the client CPU goes" in text
    # mpcommit at 1,000 files: cpu_s 10, 11, 12 -> JVM median 6.5 s
    assert "| 1,000, with the S3-like network (profile `s3`) | mpcommit.spark.write | 3 | 500 ms | 6.50 s | 4.00 s | 11.00 s |" in text


def test_the_targets_table_is_computed_from_the_records(tmp_path: Path):
    lines = [{"kind": "session", "session": "e1", "started": "2026-11-28 00:00:00 UTC", "git": {"code": "abc"}}]
    (tmp_path / "executor.jsonl").write_text("\n".join(json.dumps(r) for r in lines + _executor_runs()) + "\n")
    text = "\n".join(render_targets(tmp_path, head="abc"))
    row = next(line for line in text.splitlines() if line.startswith("| client CPU per extra file"))
    assert "0.33x" in row and "| met |" in row
    row = next(line for line in text.splitlines() if line.startswith("| end to end <= 0.33x the tuned magic committer at 32"))
    assert "0.36x" in row and "**missed**" in row  # 40 / 110 at 10,000 files
    other = next(line for line in text.splitlines() if "issue 25: `local[8]`" in line)
    assert "not measured" in other  # no peers records in this directory


def test_a_cell_whose_mpcommit_runs_all_failed_the_gate_is_measured_but_not_judged(tmp_path: Path):
    lines = [{"kind": "session", "session": "e1", "started": "2026-11-28 00:00:00 UTC", "git": {"code": "abc"}}]
    runs = [r for r in _executor_runs() if r["files_target"] == 1000]
    for r in runs:
        if r["variant"] == "mpcommit":
            r["valid"] = False
            r["gate"] = {"complete_ms": 117, "drawn_ms": 80, "late_share": 0.19}
    (tmp_path / "executor.jsonl").write_text("\n".join(json.dumps(r) for r in lines + runs) + "\n")
    text = "\n".join(render_targets(tmp_path, head="abc"))
    row = next(line for line in text.splitlines() if line.startswith("| end to end <= 0.33x the tuned magic committer at 32"))
    assert "every one of mpcommit's 3 runs failed the validity gate" in row and "117 ms" in row and "19%" in row
    assert "all runs, unjudged: 0.50x" in row  # 5 s / 10 s at 1,000 files
    assert row.endswith("| not shown (runs invalid) |") and "met" not in row


def test_mpcommit_at_equal_completes_in_flight_is_judged_when_its_defaults_failed_the_gate(tmp_path: Path):
    """The server on one core keeps the model's pace for 32 completes in flight but not for mpcommit's default
    window: the targets are judged on ``mpcommit-32``'s valid runs, and the row says so and why."""
    lines = [{"kind": "session", "session": "e1", "started": "2026-11-28 00:00:00 UTC", "git": {"code": "abc"}}]
    runs = [r for r in _executor_runs() if r["files_target"] == 1000]
    for r in [r for r in runs if r["variant"] == "mpcommit"]:
        r["valid"] = False
        r["gate"] = {"complete_ms": 117, "drawn_ms": 80, "late_share": 0.19}
        runs.append({**r, "variant": "mpcommit-32", "valid": True, "seconds": 2.0, "job_commit_s": 0.2,
                     "gate": {"complete_ms": 81, "drawn_ms": 80, "late_share": 0.0}})
    (tmp_path / "executor.jsonl").write_text("\n".join(json.dumps(r) for r in lines + runs) + "\n")
    text = "\n".join(render_targets(tmp_path, head="abc"))
    row = next(line for line in text.splitlines() if line.startswith("| end to end <= 0.33x the tuned magic committer at 32"))
    assert row.count("0.20x (") == 2 and "mpcommit with 32 requests in flight" in row  # 2 s / 10 s, and / 128's
    assert "all 3 runs at its defaults failed the validity gate" in row
    assert row.endswith("| met at 1,000 files; 10,000 not measured |")  # never "met" for a cell not run
    commit = next(line for line in text.splitlines() if line.startswith("| job commit <= 0.25x"))
    assert "0.20x (" in commit and "at 1,000 files" in commit  # 0.2 s / 1 s
    table = "\n".join(render_executor({"e1": {"started": "2026-11-28 00:00:00 UTC"}}, runs))
    assert "| mpcommit.spark.write, 32 in flight | 3 |" in table and "| mpcommit.spark.write | 3 (3 invalid) |" in table


def test_a_latency_cell_not_run_again_at_the_head_is_judged_on_the_newest_code_that_ran_it(tmp_path: Path):
    """The head's code ran 1,000 files with latency; 10,000 files (most of a day) ran only at older code: the
    targets read each cell from the newest code that ran it, and name the older code and its cell."""
    lines = [{"kind": "session", "session": "old", "started": "2026-11-28 00:00:00 UTC", "git": {"code": "old1"}},
             {"kind": "session", "session": "new", "started": "2026-11-29 00:00:00 UTC", "git": {"code": "abc"}}]
    old = [{**r, "session": "old"} for r in _executor_runs()]
    new = [{**r, "session": "new", "seconds": r["seconds"] / 2} for r in _executor_runs() if r["files_target"] == 1000
           and r["variant"] != "mpcommit"] + [{**r, "session": "new", "seconds": r["seconds"] / 4}
                                               for r in _executor_runs() if r["files_target"] == 1000 and r["variant"] == "mpcommit"]
    (tmp_path / "executor.jsonl").write_text("\n".join(json.dumps(r) for r in lines + old + new) + "\n")
    row = next(line for line in "\n".join(render_targets(tmp_path, head="abc")).splitlines()
               if line.startswith("| end to end <= 0.33x the tuned magic committer at 32"))
    # 1,000 files at the head: (10 / 8) / (20 / 4) = 0.25x; 10,000 at old1: (40 / 2) / (110 / 2) = 0.36x.
    assert "0.25x (" in row and "at 1,000 files" in row and "0.36x (" in row and "at 10,000 files" in row
    assert "(older code for some cells: 10,000 files at old1)" in row and row.endswith("| **missed** |")


def _task_cpu_session(session: str, before_code: str, before_ms: float, after_ms: float) -> list[dict]:
    runs = []
    for pair in range(6):
        for variant, ms in (("before", before_ms), ("after", after_ms)):
            small = 1.0 + 0.01 * pair
            for values, cpu in ((125, small), (1250, small + ms * (1250 - 125) / 1000 * (1 + 0.02 * pair))):
                runs.append({"kind": "run", "session": session, "pair": pair, "variant": variant, "values": values,
                             "files": values, "cpu_s": cpu, "code_ran": before_code if variant == "before" else "abc"})
    return runs


def test_the_task_cpu_target_names_each_baseline_and_says_cut_only_where_the_interval_is_below_one(tmp_path: Path):
    """Two sessions of the head's code: one against issue 39's baseline (2 ms -> 1 ms a file), one against the
    code just before a later change (1 ms -> 1 ms): each its clause; the verdict is the first's."""
    lines = [{"kind": "session", "session": s, "started": f"2026-11-29 0{i}:00:00 UTC", "git": {"code": "abc"}}
             for i, s in enumerate(("t1", "t2"))]
    runs = _task_cpu_session("t1", "3aed9ad", 2.0, 1.0) + _task_cpu_session("t2", "79812b3", 1.0, 1.0)
    (tmp_path / "task_cpu.jsonl").write_text("\n".join(json.dumps(r) for r in lines + runs) + "\n")
    row = next(line for line in "\n".join(render_targets(tmp_path, head="abc")).splitlines()
               if line.startswith("| the task side's CPU per file cut"))
    assert "against 3aed9ad: " in row and "after ÷ before 0.50x" in row
    assert "against 79812b3: " in row and "after ÷ before 1.00x" in row
    assert row.endswith("| cut (against 3aed9ad) |")
    sessions = {sid: {"started": "2026-11-29 00:00:00 UTC"} for sid in ("t1", "t2")}
    text = "\n".join(render_task_cpu(sessions, runs))
    assert "**Against 3aed9ad**" in text and "**Against 79812b3**" in text
    assert "| before (3aed9ad) |" in text and "| before (79812b3) |" in text and "3aed9ad, 79812b3" not in text
    (tmp_path / "task_cpu.jsonl").write_text("\n".join(json.dumps(r) for r in lines[1:] + runs[len(runs) // 2:]) + "\n")
    row = next(line for line in "\n".join(render_targets(tmp_path, head="abc")).splitlines()
               if line.startswith("| the task side's CPU per file cut"))
    assert row.endswith("| **not shown cut** |")


def test_the_task_cpu_table_shows_before_after_per_extra_file():
    runs = []
    for pair in range(3):
        for variant, (small, large) in (("before", (5.0, 23.0)), ("after", (3.0, 8.0))):
            for values, cpu in ((125, small), (1250, large)):
                runs.append({"session": "t1", "pair": pair, "variant": variant, "values": values, "files": values,
                             "cpu_s": cpu, "main_thread_cpu_s": cpu / 2, "wall_s": cpu * 2, "code_ran": variant,
                             "requests": {"create_multipart_upload": values, "upload_part": values, "put_object": 1}})
    text = "\n".join(render_task_cpu({"t1": {"started": "2026-11-28 00:00:00 UTC"}}, runs))
    assert "16.00 ms" in text and "4.44 ms" in text  # (23 - 5) / 1125 and (8 - 3) / 1125
    assert "after ÷ before, paired by round | **0.28x**" in text


def test_the_compaction_sensitivity_is_judged_at_the_sourced_copy_rate():
    sessions, runs = {}, []
    for sid, rate in (("c8", 8e6), ("c50", 50e6)):
        sessions[sid] = {"started": "2026-11-28 00:00:00 UTC", "profile": {"copy_rate": rate, "host_bandwidth": 1.25e9}}
        for pair in range(3):
            merge = 10.0 if rate == 8e6 else 4.0
            runs += [{"session": sid, "pair": pair, "variant": "multipart", "dataset": "d", "seconds": merge,
                      "data_bytes": 3 << 30},
                     {"session": sid, "pair": pair, "variant": "rewrite-equal", "dataset": "d", "seconds": 20.0,
                      "data_bytes": 3 << 30}]
    text = "\n".join(render_compaction_sensitivity(sessions, runs))
    eight = next(line for line in text.splitlines() if "| 8 MB/s (sourced)" in line)
    fifty = next(line for line in text.splitlines() if "| 50 MB/s (assumed)" in line)
    assert "10 Gb/s" in eight and "**2.00x**" in eight and eight.endswith("| **missed** |")
    assert "**5.00x**" in fifty and fifty.endswith("| would be met |")


def test_the_cpu_targets_read_the_raw_cells_each_session_its_own_sizes(tmp_path: Path):
    """Client CPU is judged on the raw network where it ran: per extra file within each session (200 -> 2,000 in
    one, 1,000 -> 10,000 in another), the total at 1,000 and 10,000 files; the latency cells' figures follow."""
    lines = [{"kind": "session", "session": s, "started": f"2026-11-29 0{i}:00:00 UTC", "git": {"code": "abc"}}
             for i, s in enumerate(("e1", "r1", "r2"))]
    runs = [r for r in _executor_runs() if r["files_target"] == 1000]  # with latency, one cell
    cpu = {"r1": {"mpcommit": (9.0, 14.4), "magic-tuned-32": (11.0, 20.0)},  # 3 ms and 5 ms per extra file
           "r2": {"mpcommit": (12.0, 39.0), "magic-tuned-32": (30.0, 120.0)}}  # 3 ms and 10 ms
    sizes = {"r1": (200, 2000), "r2": (1000, 10000)}
    for session, variants in cpu.items():
        for pair in range(3):
            for variant, values in variants.items():
                for files, c in zip(sizes[session], values):
                    runs.append({"kind": "run", "session": session, "variant": variant, "files_target": files,
                                 "files": files, "network": "raw", "pair": pair, "seconds": c, "cpu_s": c,
                                 "job_commit_s": 1.0, "valid": None})
    (tmp_path / "executor.jsonl").write_text("\n".join(json.dumps(r) for r in lines + runs) + "\n")
    text = "\n".join(render_targets(tmp_path, head="abc"))
    per = next(line for line in text.splitlines() if line.startswith("| client CPU per extra file"))
    assert "raw network: 0.60x (" in per and "from 200 to 2,000 files; 0.30x (" in per
    assert per.index("0.30x") < per.index("from 1,000 to 10,000 files")
    assert per.endswith("| met |")
    total = next(line for line in text.splitlines() if line.startswith("| client CPU <= 0.5x"))
    for figure, files in (("0.82x", "200"), ("0.40x", "1,000"), ("0.33x", "10,000")):
        assert f"{figure} (" in total and f"at {files} files" in total
    assert total.index("raw network:") < total.index("; with latency: 0.52x")  # (10 + pair) / (20 + pair)
    assert "met against the magic committer" in total  # no local-disk runs at 1,000 and 10,000
    table = "\n".join(render_executor({}, runs))
    assert "Client CPU per extra file, 200 -> 2,000 files" in table and "1,000 -> 10,000 files" in table


def test_the_compaction_target_reads_the_newest_code_that_ran_the_sourced_rate(tmp_path: Path):
    """A newer code's runs at an assumed rate alone (50 MB/s) do not hide the older code's sourced-rate runs."""
    lines = []
    for sid, code, rate, merge, started in (("c8", "old", 8e6, 10.0, "2026-11-29 04:00:00 UTC"),
                                            ("c50", "new", 50e6, 4.0, "2026-11-29 08:00:00 UTC")):
        lines.append({"kind": "session", "session": sid, "started": started, "git": {"code": code},
                      "network": "s3", "profile": {"name": f"s3, copies at {rate / 1e6:.0f} MB/s, host link 10 Gb/s",
                                                   "copy_rate": rate, "host_bandwidth": 1.25e9}})
        for pair in range(3):
            lines += [{"kind": "run", "session": sid, "pair": pair, "variant": v, "dataset": "d", "seconds": s,
                       "data_bytes": 3 << 30} for v, s in (("multipart", merge), ("rewrite-equal", 20.0))]
    (tmp_path / "compaction.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    row = next(line for line in "\n".join(render_targets(tmp_path, head="new")).splitlines()
               if line.startswith("| >= 3x faster than an equal-footing rewrite"))
    assert "2.00x" in row and "copy rate 8 MB/s" in row and "(at older code old)" in row
    assert row.endswith("| **missed** |")


def test_the_compaction_target_is_read_on_the_server_that_answered_late_least(tmp_path: Path):
    """The same code and rate on two servers: each shown apart with its share of late answers, and the target read
    on the one the model set the pace of (LocalStack answering 90% late, versitygw 2%)."""
    lines = []
    for sid, server, merge, late in (("ls", "LocalStack 4.13.1 (host mode, S3 only, separate process)", 18.0, 0.9),
                                     ("vg", "versitygw-v1.8.0 (posix backend on tmpfs, separate process)", 5.0, 0.02)):
        lines.append({"kind": "session", "session": sid, "started": "2026-11-29 04:00:00 UTC", "git": {"code": "c"},
                      "network": "s3", "server": f"{server}, through the S3-like network (s3)",
                      "profile": {"name": "s3, copies at 8 MB/s, host link 10 Gb/s", "copy_rate": 8e6,
                                  "host_bandwidth": 1.25e9}})
        for pair in range(3):
            lines += [{"kind": "run", "session": sid, "pair": pair, "variant": v, "dataset": "d", "seconds": s,
                       "data_bytes": 3 << 30, "late": late} for v, s in (("multipart", merge), ("rewrite-equal", 20.0))]
    (tmp_path / "compaction.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    row = next(line for line in "\n".join(render_targets(tmp_path, head="c")).splitlines()
               if line.startswith("| >= 3x faster than an equal-footing rewrite"))
    assert "4.00x" in row and "on versitygw-v1.8.0" in row and "(2% of answers late)" in row
    assert row.endswith("| met |")
    sessions = {line["session"]: line for line in lines if line["kind"] == "session"}
    table = "\n".join(render_compaction_sensitivity(sessions, [line for line in lines if line["kind"] == "run"]))
    localstack = next(line for line in table.splitlines() if line.startswith("| LocalStack 4.13.1 |"))
    versitygw = next(line for line in table.splitlines() if line.startswith("| versitygw-v1.8.0 |"))
    assert "| 90-90% |" in localstack and "**1.11x**" in localstack
    assert "| 2-2% |" in versitygw and "**4.00x**" in versitygw
