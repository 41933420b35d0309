"""The Spark path's driver memory bounded with the files (issue 25): the driver reads the task count from Spark's
plan without running anything, hands each task its share of the job's in-line budget, and a task past it names its
stored manifest instead of carrying it -- the files written and read back the same."""

from __future__ import annotations

import importlib

from mpcommit.protocol.records import manifest as manifest_module
from mpcommit.spark import write
from mpcommit.spark.writer import estimated_tasks
from tests.support.spark_tables import SPARK_MARKS, assert_clean, data_keys, read_table

pytestmark = SPARK_MARKS
writer_module = importlib.import_module("mpcommit.spark.writer")  # the package exports a function `writer` too


def test_the_task_count_comes_from_the_plan_without_a_job(spark, tmp_path) -> None:  # noqa: ANN001
    spark.range(0, 100, numPartitions=3).write.parquet(str(tmp_path / "p"))
    tracker = spark.sparkContext.statusTracker()
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions"))
    scanned = spark.read.parquet(str(tmp_path / "p"))
    repartitioned = spark.range(0, 100, numPartitions=2).repartition(13)
    grouped = spark.range(0, 100, numPartitions=2).selectExpr("id % 5 as k").groupBy("k").count()
    frames = [spark.range(0, 100, numPartitions=7), scanned, repartitioned, grouped]
    before = set(tracker.getJobIdsForGroup())
    estimates = [estimated_tasks(df) for df in frames]
    assert set(tracker.getJobIdsForGroup()) == before, "estimating the task count ran a Spark job"
    assert estimates[0] == 7
    assert estimates[1] == scanned.rdd.getNumPartitions()
    # Under adaptive execution, the count before coalescing: never fewer than the tasks that run.
    assert estimates[2] >= 13 and estimates[2] >= repartitioned.rdd.getNumPartitions()
    assert estimates[3] >= shuffle >= grouped.rdd.getNumPartitions()


def test_a_plan_that_would_run_a_job_to_count_its_tasks_is_not_counted(spark, tmp_path) -> None:  # noqa: ANN001
    """Without adaptive execution a broadcast join's plan has no known partitioning and making its RDD would run
    the broadcast: the count is then left unknown (the driver's own budget holds), and no job runs."""
    spark.range(0, 100, numPartitions=3).write.parquet(str(tmp_path / "p"))
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        small = spark.range(0, 5).withColumnRenamed("id", "k")
        scanned = spark.read.parquet(str(tmp_path / "p"))
        joined = scanned.join(small.hint("broadcast"), scanned["id"] == small["k"])
        tracker = spark.sparkContext.statusTracker()
        before = set(tracker.getJobIdsForGroup())
        assert estimated_tasks(joined) is None
        assert set(tracker.getJobIdsForGroup()) == before, "estimating the task count ran a Spark job"
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")


def test_tasks_past_their_share_name_their_manifests_and_the_write_is_whole(spark, backend, bucket, pyarrow_fs,
                                                                            monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(manifest_module, "INLINE_BUDGET_PARTS", 8)  # 4 tasks: 2 parts each in-line
    seen: list[list[bool]] = []
    real = writer_module.run_spark_tasks

    def recording(df, started):  # noqa: ANN001, ANN202
        results = real(df, started)
        seen.append([r.manifest is not None for r in results])
        return results

    monkeypatch.setattr(writer_module, "run_spark_tasks", recording)
    small = spark.range(0, 8, numPartitions=4).selectExpr("id", "id % 1 as k")  # 1 file per task: in-line
    wide = spark.range(0, 120, numPartitions=4).selectExpr("id", "id % 3 as k")  # 3 files per task: named
    write(small, f"s3://{bucket}/small", mode="overwrite", partition_by=["k"], s3=backend.options)
    report = write(wide, f"s3://{bucket}/wide", mode="overwrite", partition_by=["k"], s3=backend.options)
    assert seen == [[True] * 4, [False] * 4]
    assert report.files == 12 and report.rows == 120 and len(data_keys(backend.client, bucket, "wide")) == 12
    import pyarrow as pa

    table = read_table(pyarrow_fs, bucket, "wide", partitions=pa.schema([("k", pa.int64())]))
    assert sorted(table.column("id").to_pylist()) == list(range(120))
    assert_clean(backend.client, bucket, "wide")


def test_the_driver_budget_holds_where_the_count_is_unknown(spark, moto_backend, monkeypatch) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket()
    monkeypatch.setattr(manifest_module, "INLINE_BUDGET_PARTS", 6)
    monkeypatch.setattr(writer_module, "estimated_tasks", lambda df: None)  # as over Spark Connect
    seen: list[list[bool]] = []
    real = writer_module.run_spark_tasks

    def recording(df, started):  # noqa: ANN001, ANN202
        results = real(df, started)
        seen.append(sorted(r.manifest is not None for r in results))
        return results

    monkeypatch.setattr(writer_module, "run_spark_tasks", recording)
    df = spark.range(0, 120, numPartitions=4).selectExpr("id", "id % 3 as k")  # 3 parts a task: 2 fit in 6
    report = write(df, f"s3://{bucket}/t", mode="overwrite", partition_by=["k"], s3=moto_backend.options)
    assert seen == [[False, False, True, True]]
    assert report.files == 12 and report.rows == 120
    assert_clean(moto_backend.client, bucket, "t")
