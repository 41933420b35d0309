"""A streaming query's driver as a process of its own, for tests that kill it: run by test_stream_kills.py (and by
the Connect tests' and benchmarks' helpers) as ``python stream_driver.py '<json>'``.

The query reads local JSON files (Spark's file source, one file per micro-batch: ``maxFilesPerTrigger``) and writes
them with ``format("mpcommit")`` to the table, with ``trigger(availableNow=True)``, so that a run ends by itself
once the input is used up. Started in a process group of its own (``start_new_session``), this process, its JVM
and the Python workers the JVM starts -- where a Python data source's stream ``commit`` runs -- are one group, which
``MPCOMMIT_FAULT=POINT:K:killgroup`` in the environment kills whole at that point (mpcommit/protocol/faults.py).

The json: ``endpoint`` (the S3 server), ``uri`` (the table), ``input`` (the folder), ``checkpoint``, and optionally
``partitionBy`` (default ``dt``), ``outputMode`` (default ``append``), ``options`` (more source options), and
``foreachBatch``: an application id, to write each micro-batch with ``foreachBatch`` and ``mpcommit.spark.write(...,
txn=Txn(app_id, batch_id))`` instead of the sink (PySpark 3.5 has no sink: this is how its users stream), with
``order`` (OrderSettings' fields) for its writes. Prints one
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
        if config.get("foreachBatch"):
            query = _foreach_batch(df, config).option("checkpointLocation", config["checkpoint"]) \
                .trigger(availableNow=True).start()
            _report(query)
            return
        if config.get("aggregate"):  # complete mode needs an aggregation
            df = df.groupBy("dt").count().withColumnRenamed("count", "id")
        writer = df.writeStream.format("mpcommit").options(**s3).options(**config.get("options", {}))
        if config.get("partitionBy", "dt"):
            writer = writer.option("partitionBy", config.get("partitionBy", "dt"))
        query = (writer.outputMode(config.get("outputMode", "append"))
                 .option("checkpointLocation", config["checkpoint"]).trigger(availableNow=True).start(config["uri"]))
        _report(query)
    finally:
        spark.stop()


def _foreach_batch(df: object, config: dict) -> object:
    """The query's writer with a ``foreachBatch`` function that commits each micro-batch as one version of the
    application ``config["foreachBatch"]``; each write's report goes to stdout (the test reads duplicates there)."""
    from mpcommit import S3Options, Txn
    from mpcommit.options import OrderSettings
    from mpcommit.spark import write

    s3 = S3Options(endpoint_url=config["endpoint"], access_key_id="test", secret_access_key="test",
                   region="us-east-1")

    def each(batch: object, batch_id: int) -> None:
        report = write(batch, config["uri"], mode="append", partition_by=config.get("partitionBy", "dt"), s3=s3,
                       txn=Txn(config["foreachBatch"], batch_id), order=OrderSettings(**config.get("order", {})))
        duplicate = report.duplicate_of.job_id if report.duplicate_of is not None else None
        print(json.dumps({"write": batch_id, "job": report.job_id, "duplicateOf": duplicate}), flush=True)

    return df.writeStream.foreachBatch(each)  # type: ignore[attr-defined]


def _report(query: object) -> None:
    error = None
    try:
        query.awaitTermination()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - reported to the test
        error = " ".join(str(exc).split())
    batches = [{"batchId": p["batchId"], "rows": p["numInputRows"],
                "commitMs": p.get("durationMs", {}).get("addBatch")} for p in query.recentProgress]  # type: ignore[attr-defined]
    print(json.dumps({"batches": batches, "error": error}), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
