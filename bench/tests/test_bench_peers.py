"""The real peers' benchmark logic (bench/bench_spark_peers.py, bench/report_peers.py) without Spark or a server:
the plan and its schedule, the event log's metrics, the pairing of runs into ratios, the verdicts and the splice
of the section into BENCHMARKS.md."""

import json

import pytest

from bench import report_peers
from bench.bench_spark_peers import EventLog, job_commit_seconds, parse_plan, schedule, shape, summarise


def test_the_plan_keeps_sizes_and_variants_in_order_and_refuses_unknown_names():
    plan = parse_plan("1000:magic=3,mpcommit=3,directory=2; 10000:magic=1,mpcommit")
    assert plan == {1000: {"magic": 3, "mpcommit": 3, "directory": 2}, 10000: {"magic": 1, "mpcommit": 1}}
    assert list(plan[1000]) == ["magic", "mpcommit", "directory"]
    with pytest.raises(ValueError, match="unknown variant 'staging'"):
        parse_plan("1000:staging=1")


def test_the_compared_pair_runs_back_to_back_abba_and_every_run_is_scheduled_once():
    runs = {"magic": 4, "mpcommit": 4, "directory": 2, "v1": 1}
    order = schedule(runs)
    assert sorted(order) == sorted((r, v) for v, n in runs.items() for r in range(n))
    pair = [v for _r, v in order if v in ("magic", "mpcommit")]
    assert pair == ["magic", "mpcommit", "mpcommit", "magic", "magic", "mpcommit", "mpcommit", "magic"]
    for r in range(4):  # the pair is adjacent within its round
        names = [v for rr, v in order if rr == r]
        i = names.index("magic")
        assert "mpcommit" in names[max(0, i - 1): i + 2]


def test_files_are_tasks_times_partition_values():
    sh = shape(1000, 1 << 30, tasks=4)
    assert sh["values"] == 250 and sh["files"] == 1000 and sh["rows"] == (1 << 30) // 40


def _event_log(tmp_path, events):
    path = tmp_path / "app-1"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return EventLog(path)


def test_the_event_log_gives_job_commit_task_commits_and_executor_cpu(tmp_path):
    plan = {"metrics": [{"accumulatorId": 7, "name": "job commit time"}],
            "children": [{"metrics": [{"accumulatorId": 8, "name": "task commit time"}]}]}
    task = {"Event": "SparkListenerTaskEnd",
            "Task Metrics": {"Executor CPU Time": 2_000_000_000, "Executor Deserialize CPU Time": 0,
                             "Executor Run Time": 3000, "JVM GC Time": 10},
            "Task Info": {"Accumulables": [{"ID": 8, "Update": 250}]}}
    log = _event_log(tmp_path, [
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart", "sparkPlanInfo": plan},
        {"Event": "SparkListenerJobStart"}, task, task, {"Event": "SparkListenerJobEnd"},
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerDriverAccumUpdates", "accumUpdates": [[7, 1234]]},
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"},
    ])
    got = log.window(timeout=1)
    assert got["complete"] and got["tasks"] == 2
    assert got["driver_metrics"] == {"job commit time": 1234}
    assert got["task_metrics"] == {"task commit time": 500}
    assert got["executor_cpu_s"] == pytest.approx(4.0)
    assert job_commit_seconds({"variant": "magic", "events": got}) == pytest.approx(1.234)
    assert job_commit_seconds({"variant": "mpcommit", "mp_timings": {"commit": 0.5}}) == 0.5


def _run(variant, repeat, seconds, commit, requests=3000, copied=0, files=1000):
    return {"variant": variant, "files_target": files, "repeat": repeat, "seconds": seconds,
            "load_before": [3.0, 3.0, 3.0], "cpu": {"jvm": 10.0},
            "proxy": {"ops": {"PutObject": {"requests": requests}}, "totals": {"requests": requests, "copied_bytes": copied,
                                                                            "request_bytes": 1 << 30}},
            "events": {"executor_cpu_s": 5.0, "driver_metrics": {"job commit time": commit * 1000},
                       "task_metrics": {"task commit time": 100}},
            "listing": {"files": files, "bytes": 1 << 30, "success": variant, "pending_uploads": 0},
            "rows": None, "mp_timings": {"commit": commit} if variant == "mpcommit" else None}


def test_ratios_pair_runs_of_the_same_round_and_the_verdicts_follow_the_targets():
    data = {"variants": ["magic", "mpcommit"], "runs": [
        _run("magic", 0, 100.0, 4.0, requests=10_000), _run("mpcommit", 0, 80.0, 1.0),
        _run("mpcommit", 1, 50.0, 3.0), _run("magic", 1, 50.0, 4.0, requests=10_000),  # a fast round: its own pair
        _run("magic", 2, 100.0, 4.0, requests=10_000), _run("mpcommit", 2, 90.0, 1.0),
    ]}
    s = summarise(data)[1000]
    e2e = s["ratios"]["mpcommit"]["seconds"]
    assert e2e["n"] == 3 and e2e["paired"] == pytest.approx(0.9)  # ratios 0.8, 1.0, 0.9
    assert s["rows"]["mpcommit"]["requests_per_file"] == 3.0 and s["rows"]["magic"]["requests_per_file"] == 10.0
    lines = report_peers.target_lines({"peers": data})
    assert [line.split(":")[0] for line in lines] == ["- met", "- met", "- met", "- met"]
    assert "both sides" not in lines[0]  # pair ratios 0.8, 1.0, 0.9: none over 1.0x
    assert "both sides of 0.5x (0.25-0.75x)" in lines[1]  # job commits 0.25, 0.75, 0.25: met, but not firmly

    data["runs"][1]["proxy"]["totals"]["copied_bytes"] = 5
    data["runs"][1]["seconds"] = 110.0  # ratios 1.1, 1.0, 0.9 -> 1.0: still met
    assert report_peers.target_lines({"peers": data})[0].startswith("- met")
    data["runs"][5]["seconds"] = 120.0  # ratios 1.1, 1.0, 1.2 -> 1.1
    lines = report_peers.target_lines({"peers": data})
    assert lines[0].startswith("- **missed**: end to end") and "missed by" in lines[0]
    assert "1.10x" in lines[0] and "10%" in lines[0]
    assert lines[3].startswith("- **missed**: zero bytes copied")


def test_the_splice_replaces_only_the_section_between_its_markers():
    text = "# Benchmarks\n\n## 5. Compaction\n\ntheirs\n"
    block = [report_peers.START, report_peers.TITLE, "", "first", report_peers.END]
    once = report_peers.splice(text, block, report_peers.START, report_peers.END)
    assert once.startswith(text.rstrip("\n")) and once.endswith(report_peers.END + "\n")
    block[3] = "second"
    twice = report_peers.splice(once + "\n## 7. Scale\n\nalso theirs\n", block, report_peers.START, report_peers.END)
    assert "first" not in twice and "second" in twice
    assert twice.count(report_peers.TITLE) == 1 and "theirs\n" in twice and twice.endswith("also theirs\n")


def test_tuned_variants_get_hadoop_s_advised_settings_per_bucket_and_defaults_get_none():
    from bench.bench_spark_peers import S3A_TUNING, bucket_conf, bucket_of, tuned_settings, variant_settings

    magic = tuned_settings("magic-tuned")
    assert magic["fs.s3a.committer.threads"] == "32" and magic["fs.s3a.fast.upload.buffer"] == "bytebuffer"
    assert magic["fs.s3a.committer.magic.track.commits.in.memory.enabled"] == "true"
    assert magic["fs.s3a.create.performance"] == "true"
    directory = tuned_settings("directory-tuned")
    assert "fs.s3a.fast.upload.buffer" not in directory and "fs.s3a.committer.magic.track.commits.in.memory.enabled" not in directory
    assert tuned_settings("magic") == {} and tuned_settings("mpcommit") == {}
    assert variant_settings("magic", "/tmp/s")["fs.s3a.committer.name"] == "magic"
    assert "fs.s3a.committer.threads" not in variant_settings("magic", "/tmp/s")  # Hadoop's default, labelled so
    assert variant_settings("magic-tuned", "/tmp/s")["fs.s3a.committer.threads"] == "32"
    conf = bucket_conf(["magic-tuned", "magic", "mpcommit"])
    assert conf[f"spark.hadoop.fs.s3a.bucket.{bucket_of('magic-tuned')}.threads.max"] == "96"
    assert not any(bucket_of("magic") + "." in k for k in conf)
    assert all(t["why"] and t["default"] for t in S3A_TUNING)
    assert bucket_of("directory-tuned") == "bench-peers-directory-tuned"  # a valid bucket name (no underscores)


def test_success_summary_keeps_what_breaks_the_job_commit_down():
    from bench.bench_spark_peers import success_summary

    body = json.dumps({"committer": "magic", "filenames": ["a"] * 100, "iostatistics": {
        "counters": {"committer_commits_completed": 1000, "op_rename": 0},
        "meanstatistics": {"committer_commit_job.mean": {"samples": 1, "sum": 9500},
                           "committer_materialize_file.mean": {"samples": 1000, "sum": 76000},
                           "op_rename.mean": {"samples": 0, "sum": 0}},
        "maximums": {"committer_materialize_file.max": 210, "op_rename.max": -1}},
        "diagnostics": {"fs.s3a.committer.threads": "32", "other": "x"}}).encode()
    s = success_summary(body)
    assert s["committer"] == "magic" and s["counters"] == {"committer_commits_completed": 1000}
    assert s["durations_ms"] == {"committer_commit_job.mean": {"n": 1, "sum": 9500},
                                 "committer_materialize_file.mean": {"n": 1000, "sum": 76000}}
    assert s["maximums_ms"] == {"committer_materialize_file.max": 210}
    assert s["diagnostics"] == {"fs.s3a.committer.threads": "32"}
    assert success_summary(b"") == {"committer": "0 bytes", "bytes": 0}


def test_a_run_record_states_what_was_written_and_the_time_per_operation():
    from bench.bench_spark_peers import run_record

    run = _run("mpcommit", 0, 60.0, 4.0)
    run["proxy"]["ops"]["CompleteMultipartUpload"] = {"requests": 1000, "upstream_seconds": 5.0, "held_seconds": 75.0}
    run["proxy"]["max_in_flight"] = 32
    run["load_after"] = [3.0, 3.0, 3.0]
    rec = run_record(run, shape={"rows": 10, "tasks": 4, "values": 250}, slots=2, compression="snappy",
                     settings={"commit_threads": 32}, codec_setting="snappy")
    assert rec["op_seconds"]["CompleteMultipartUpload"] == 80.0 and rec["requests"]["CompleteMultipartUpload"] == 1000
    assert (rec["tasks"], rec["slots"], rec["files"], rec["compression"], rec["pair"]) == (4, 2, 1000, "snappy", 0)
    assert rec["job_commit_s"] == 4.0 and rec["seconds"] == 60.0
