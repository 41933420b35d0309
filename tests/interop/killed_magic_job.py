"""A Spark job on ``s3a://`` through the S3A magic committer that never finishes: run in a subprocess by
test_mpcommit_on_spark_tables.py and killed there with SIGKILL mid-write, so that it leaves what a crashed
S3A job leaves -- pending multipart uploads under the table's final keys, described under ``__magic``.

    python -m tests.interop.killed_magic_job ENDPOINT BUCKET PREFIX

Four tasks on two cores: tasks 0 and 1 write their file and finish (the magic committer initiates and uploads
each file's one part when the task closes it, and leaves the upload for the job commit to complete); tasks 2
and 3 then sleep in the JVM until killed. Prints READY once the session is up.
"""

from __future__ import annotations

import sys

from tests.support.spark_s3a import MAGIC_COMMITTER, point_bucket_at, session_settings, spark_session

#: The tasks that write and finish before the job hangs.
FINISHING_TASKS = 2


def main(endpoint_url: str, bucket: str, prefix: str) -> None:
    spark, _ = spark_session(master="local[2]", app="mpcommit-killed-magic-job")
    point_bucket_at(spark, bucket, endpoint_url)
    print("READY", flush=True)
    # Thread.sleep through reflect: the hang is in the JVM, which the SIGKILL of this process group ends.
    df = spark.range(0, 4000, numPartitions=4).selectExpr(
        "id", "concat('row-', id) AS name",
        f"CASE WHEN spark_partition_id() >= {FINISHING_TASKS} "
        "THEN reflect('java.lang.Thread', 'sleep', CAST(600000 AS BIGINT)) END AS hang")
    with session_settings(spark, MAGIC_COMMITTER):
        df.write.parquet(f"s3a://{bucket}/{prefix}")
    print("FINISHED (the test should have killed this job)", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
