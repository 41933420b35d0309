"""A streaming query's driver as a process of its own, for tests that kill it: run by test_stream_kills.py (and by
the Connect tests' and benchmarks' helpers) as ``python stream_driver.py '<json>'``.

The query reads local JSON files (Spark's file source, one file per micro-batch: ``maxFilesPerTrigger``) and writes
them with ``format("mpcommit")`` to the table, with ``trigger(availableNow=True)``, so that a run ends by itself
once the input is used up. Started in a process group of its own (``start_new_session``), this process, its JVM
and the Python workers the JVM starts -- where a Python data source's stream ``commit`` runs -- are one group, which
``MPCOMMIT_FAULT=POINT:K:killgroup`` in the environment kills whole at that point (mpcommit/protocol/faults.py).

The json: ``endpoint`` (the S3 server), ``uri`` (the table), ``input`` (the folder), ``checkpoint``, and optionally
``partitionBy`` (default ``dt``), ``outputMode`` (default ``append``), ``options`` (more source options). Prints one
JSON line when the query ended by itself: its micro-batches' progress (batch id, input rows, the sink's commit
time as Spark measured it) and its exception, if any.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

SCHEMA = "id long, dt string"


def main(config: dict) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Inherited by the JVM and its Python workers: the group a killgroup fault kills (this process's, when started
    # with start_new_session: this process and the JVM; the workers' daemon makes a group of its own). Started in
    # its parent's group, a kill would take the parent (pytest) with it: refused.
    if "killgroup" in os.environ.get("MPCOMMIT_FAULT", "") and os.getpgid(0) != os.getpid():
        raise SystemExit("stream_driver.py: a killgroup fault needs this process to lead a process group of its own "
                         "(start it with start_new_session=True); its parent's group would be killed too")
    os.environ["MPCOMMIT_FAULT_GROUP"] = str(os.getpgid(0))
    warnings.filterwarnings("ignore")
    from pyspark.sql import SparkSession

    from tests.support.spark_s3a import JVM_CONF

    spark = (SparkSession.builder.master("local[2]").appName("mpcommit-stream-driver")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "2")
             .config(map=JVM_CONF)  # a short-lived JVM: the tests' settings (tests/support/spark_s3a.py)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        s3 = {"s3.endpointUrl": config["endpoint"], "s3.accessKeyId": "test", "s3.secretAccessKey": "test",
              "s3.region": "us-east-1"}
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(config["input"])
        if config.get("aggregate"):  # complete mode needs an aggregation
            df = df.groupBy("dt").count().withColumnRenamed("count", "id")
        writer = df.writeStream.format("mpcommit").options(**s3).options(**config.get("options", {}))
        if config.get("partitionBy", "dt"):
            writer = writer.option("partitionBy", config.get("partitionBy", "dt"))
        query = (writer.outputMode(config.get("outputMode", "append"))
                 .option("checkpointLocation", config["checkpoint"]).trigger(availableNow=True).start(config["uri"]))
        error = None
        try:
            query.awaitTermination()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            error = " ".join(str(exc).split())
        batches = [{"batchId": p["batchId"], "rows": p["numInputRows"],
                    "commitMs": p.get("durationMs", {}).get("addBatch")} for p in query.recentProgress]
        print(json.dumps({"batches": batches, "error": error}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
