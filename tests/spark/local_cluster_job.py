"""Run as a subprocess by test_local_cluster.py: one write with master ``local-cluster[2,1,1024]``.

Two executors, each a separate JVM with its own Python workers, so the job spec really travels to other
processes. Prints one JSON line on stdout: the report, the driver JVM's pid and, per task, the pid of the
JVM whose Python worker ran it. Usage: ``python local_cluster_job.py ENDPOINT BUCKET``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings


def main(endpoint: str, bucket: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore")
    from pyspark.sql import SparkSession

    from mpcommit.options import RetryPolicy, S3Options
    from mpcommit.spark import write
    from tests.support.spark_s3a import JVM_CONF

    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("mpcommit-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(map=JVM_CONF)
        # Wait for both executors before scheduling, so that tasks spread over both.
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        options = S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test",
                            retry=RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.2))

        def record_jvm(task_id: int, attempt: int, batches: int) -> None:
            if batches != 1:
                return
            import boto3

            # The Python worker is forked by pyspark's daemon, a child of the executor's JVM.
            with open(f"/proc/{os.getppid()}/stat") as f:
                jvm = int(f.read().rsplit(")", 1)[1].split()[1])
            boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                         region_name="us-east-1").put_object(
                Bucket=bucket, Key=f"_evidence/task-{task_id}.json", Body=json.dumps({"jvm": jvm}).encode())

        from pyspark.sql import functions as F

        df = spark.range(0, 40_000, 1, 4).select("id", (F.col("id") % 7).cast("string").alias("k"), F.rand(3).alias("v"))
        report = write(df, f"s3://{bucket}/t", mode="overwrite", partition_by=["k"], s3=options, _task_hook=record_jvm)
        driver_jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        print(json.dumps({"report": report.summary(), "filenames": list(report.filenames), "driver_jvm": driver_jvm,
                          "executors": executors}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
