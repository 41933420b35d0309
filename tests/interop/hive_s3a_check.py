"""Run by test_catalog_on_s3a.py in a subprocess (a Hive-enabled session needs its own JVM and Derby metastore):
``mpcommit.spark.write(..., table=)`` into an external Hive table located on ``s3a://``, and
``writer(df, table=...).save()`` into a Spark table (USING parquet) with no path, then what Spark's catalog and
readers show. Prints one JSON document.

    python -m tests.interop.hive_s3a_check WORKDIR ENDPOINT BUCKET
"""

from __future__ import annotations

import json
import sys
from typing import Any

from mpcommit.options import S3Options
from mpcommit.spark import write, writer
from tests.support.spark_s3a import REGION, point_bucket_at, s3a_spark_conf, spark_session

#: Partition values Spark escapes in paths, a null, and a plain one.
DAYS = ["2024-01-01", "a/b:c", "50% off", None]


def rows_of(df: Any) -> list[list[Any]]:
    return sorted(([r.id, r.name, r.dt, r.n] for r in df.select("id", "name", "dt", "n").collect()), key=repr)


def main(workdir: str, endpoint_url: str, bucket: str) -> None:
    spark, _ = spark_session(master="local[1]", app="mpcommit-hive-s3a", conf={
        **s3a_spark_conf(),
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": f"{workdir}/warehouse",
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={workdir}/metastore_db;create=true",
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={workdir}",
    })
    # The metastore resolves partition locations with the session's Hadoop configuration.
    point_bucket_at(spark, bucket, endpoint_url)
    s3 = S3Options(endpoint_url=endpoint_url, region=REGION, access_key_id="test", secret_access_key="test")
    location = f"s3a://{bucket}/events"
    out: dict[str, Any] = {"catalogImplementation": spark.conf.get("spark.sql.catalogImplementation")}
    spark.sql("CREATE DATABASE db")
    spark.sql("CREATE EXTERNAL TABLE db.events (id BIGINT, name STRING) PARTITIONED BY (dt STRING, n INT) "
              f"STORED AS PARQUET LOCATION '{location}'")

    first = spark.createDataFrame([(i, f"name-{i}", DAYS[i % len(DAYS)], (i // len(DAYS)) % 2) for i in range(40)],
                                  "id long, name string, dt string, n int").repartition(2)
    report = write(first, location, mode="append", partition_by=["dt", "n"], table="db.events", s3=s3)
    out["first"] = {"written": rows_of(first), "committed_partitions": sorted(report.partitions),
                    "table": rows_of(spark.table("db.events")),
                    "show_partitions": sorted(r.partition for r in spark.sql("SHOW PARTITIONS db.events").collect())}

    # Dynamic overwrite of one partition: the catalog's other partitions and their rows stay.
    second = spark.createDataFrame([(100 + i, f"new-{i}", "2024-01-01", 0) for i in range(3)],
                                   "id long, name string, dt string, n int")
    write(second, location, mode="overwrite", partition_overwrite="dynamic", partition_by=["dt", "n"],
          table="db.events", s3=s3)
    spark.catalog.refreshTable("db.events")  # the session caches the files it listed for the first read
    out["second"] = {"written": rows_of(second), "table": rows_of(spark.table("db.events")),
                     "show_partitions": sorted(r.partition for r in spark.sql("SHOW PARTITIONS db.events").collect()),
                     "partition_location": spark.sql(
                         "DESCRIBE FORMATTED db.events PARTITION (dt='a/b:c', n=1)").filter("col_name = 'Location'")
                     .collect()[0].data_type}

    # The catalog route (issue 38): a table Spark reads natively, written by naming it alone -- its location,
    # format and partition columns from the session catalog; a write that contradicts it refused before writing.
    spark.sql("CREATE TABLE db.native (id BIGINT, name STRING, dt STRING) USING parquet PARTITIONED BY (dt) "
              f"LOCATION 's3a://{bucket}/native'")
    third = spark.createDataFrame([(i, f"n{i}", f"d{i % 2}") for i in range(6)], "id long, name string, dt string")
    report = writer(third, table="db.native", s3=s3).mode("append").save()
    spark.catalog.refreshTable("db.native")
    out["native"] = {"uri": report.uri,
                     "partitions": sorted(report.partitions),
                     "table": sorted([r.id, r.name, r.dt] for r in spark.table("db.native").collect()),
                     "show_partitions": sorted(r.partition for r in spark.sql("SHOW PARTITIONS db.native").collect())}
    try:
        writer(third, table="db.native", s3=s3).mode("append").partitionBy("name").parquet(f"s3a://{bucket}/native")
        out["native"]["refused"] = None
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["native"]["refused"] = f"{type(exc).__name__}: {exc}"
    spark.stop()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
