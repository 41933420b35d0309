"""Run by test_spark_catalog.py in a subprocess (one JVM per process; the shared test session has no Hive):
registrations through SparkSqlCatalog against a Hive-enabled Spark session with its own Derby metastore, on
``file:`` locations the JVM can resolve. Prints one JSON document of what Spark's catalog shows after each step.

    python -m tests.catalog.spark_hive_check WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from mpcommit.catalog import (
    CatalogError,
    Registration,
    RegistrationMode,
    SparkSqlCatalog,
    TableName,
)
from mpcommit.catalog.spark_catalog import scala_dict, scala_list
from mpcommit.protocol.records.success import PartitionStats


def session(workdir: str) -> Any:
    from pyspark.sql import SparkSession

    from tests.support.spark_s3a import JVM_OPTIONS

    spark = (
        SparkSession.builder.master("local[1]").appName("mpcommit-catalog-hive")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.warehouse.dir", f"{workdir}/warehouse")
        .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                f"jdbc:derby:;databaseName={workdir}/metastore_db;create=true")
        .config("spark.driver.extraJavaOptions", f"{JVM_OPTIONS} -Dderby.system.home={workdir}")
        .enableHiveSupport()
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(workdir: str) -> None:
    spark = session(workdir)
    out: dict[str, Any] = {"catalogImplementation": spark.conf.get("spark.sql.catalogImplementation")}
    catalog = SparkSqlCatalog(spark)
    ext = spark._jsparkSession.sessionState().catalog().externalCatalog()
    jvm = spark._jvm
    tloc = f"file:{workdir}/t"
    spark.sql("CREATE DATABASE db")
    spark.sql(f"CREATE EXTERNAL TABLE db.t (a INT) PARTITIONED BY (dt STRING, n INT) STORED AS PARQUET LOCATION '{tloc}'")
    t = TableName("db", "t")

    def partitions() -> dict[str, Any]:
        shown = {}
        for p in scala_list(jvm, ext.listPartitions("db", "t", jvm.scala.Option.empty())):
            spec = scala_dict(jvm, p.spec())
            params = scala_dict(jvm, p.parameters())
            shown[f"{spec['dt']}|{spec['n']}"] = {
                "location": str(jvm.org.apache.spark.sql.catalyst.catalog.CatalogUtils.URIToString(p.location())),
                "stats": str(p.stats().get().simpleString()) if p.stats().isDefined() else None,
                "numRows": params.get("numRows"), "lastJob": params.get("mpcommit.lastJobId"),
            }
        return shown

    def register(name: str, job: str, mode: RegistrationMode, stats: dict[str, PartitionStats], table: TableName = t,
                 location: str = tloc) -> None:
        try:
            result = catalog.register(table, Registration(location, job, mode, stats))
            out[name] = {"result": {"created": list(result.created), "updated": list(result.updated),
                                    "dropped": list(result.dropped), "unchanged": list(result.unchanged),
                                    "failed": {**result.not_registered, **result.not_updated}}}
        except CatalogError as exc:
            out[name] = {"error": type(exc).__name__, "message": str(exc)}
            return
        out[name]["partitions"] = partitions()

    register("add", "j1", RegistrationMode.APPEND, {
        "dt=2024-01-01/n=1": PartitionStats(2, 300, 30),
        "dt=a%27b%3Ac/n=2": PartitionStats(1, 100, 10),
        "dt=__HIVE_DEFAULT_PARTITION__/n=3": PartitionStats(1, 50, 5),
    })
    out["show_partitions"] = sorted(r.partition for r in spark.sql("SHOW PARTITIONS db.t").collect())
    register("append", "j2", RegistrationMode.APPEND, {"dt=2024-01-01/n=1": PartitionStats(1, 100, 10)})
    register("append_again", "j2", RegistrationMode.APPEND, {"dt=2024-01-01/n=1": PartitionStats(1, 100, 10)})
    register("dynamic", "j3", RegistrationMode.OVERWRITE_DYNAMIC, {"dt=a%27b%3Ac/n=2": PartitionStats(1, 7, 1)})

    # Spark reads through the registered location: one Parquet file in the n=1 partition.
    import pyarrow as pa
    import pyarrow.parquet as pq

    part_dir = f"{workdir}/t/dt=2024-01-01/n=1"
    os.makedirs(part_dir, exist_ok=True)
    pq.write_table(pa.table({"a": pa.array([1, 2, 3], pa.int32())}), f"{part_dir}/part-00000.parquet")
    out["read_n1"] = spark.sql("SELECT count(*) AS c FROM db.t WHERE n = 1").collect()[0].c

    # A static overwrite that wrote only n=1: the other partitions are dropped from the catalog, their
    # directories kept (the overwrite, not the catalog, deletes data).
    keep_dir = f"{workdir}/t/dt=a%27b%3Ac/n=2"
    os.makedirs(keep_dir, exist_ok=True)
    open(f"{keep_dir}/marker", "w").close()
    register("static", "j4", RegistrationMode.OVERWRITE, {"dt=2024-01-01/n=1": PartitionStats(1, 9, 2)})
    out["kept_dir_after_drop"] = os.path.exists(f"{keep_dir}/marker")

    uloc = f"file:{workdir}/u"
    spark.sql(f"CREATE EXTERNAL TABLE db.u (a INT) STORED AS PARQUET LOCATION '{uloc}'")
    u = TableName("db", "u")

    def table_stats(name: str) -> None:
        info = ext.getTable("db", "u")
        raw = spark._jsparkSession.sharedState().externalCatalog().unwrapped().client().getRawHiveTable("db", "u")
        hive = scala_dict(jvm, raw.hiveTableProps())
        out[name]["stats"] = str(info.stats().get().simpleString()) if info.stats().isDefined() else None
        out[name]["hive"] = {k: hive.get(k) for k in ("numFiles", "totalSize", "numRows", "mpcommit.lastJobId",
                                                      "DO_NOT_UPDATE_STATS")}

    register("flat_overwrite", "j5", RegistrationMode.OVERWRITE, {"": PartitionStats(2, 100, 7)}, table=u, location=uloc)
    table_stats("flat_overwrite")
    register("flat_append", "j6", RegistrationMode.APPEND, {"": PartitionStats(1, 50, 3)}, table=u, location=uloc)
    table_stats("flat_append")

    register("missing", "j7", RegistrationMode.APPEND, {"dt=1/n=1": PartitionStats(1, 1, 1)},
             table=TableName("db", "missing"))
    register("mismatch", "j8", RegistrationMode.APPEND, {"x=1": PartitionStats(1, 1, 1)})
    register("elsewhere", "j9", RegistrationMode.APPEND, {"dt=1/n=1": PartitionStats(1, 1, 1)},
             location="s3://bucket/t")
    spark.stop()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
