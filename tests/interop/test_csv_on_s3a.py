"""CSV written by ``mpcommit.spark.write`` to ``s3a://`` and read back by ``spark.read.csv`` over S3A with the same
options: the rows written (the cases of tests/spark/test_csv_spark.py, there read from a local copy)."""

from __future__ import annotations

from typing import Any

import pytest

from mpcommit.spark import write
from tests.support.backends import Backend
from tests.support.backends import on_backends
from tests.support.csv_cases import ROUND_TRIPS, SCHEMA, comparable, expected, make_rows

pytestmark = [pytest.mark.spark, pytest.mark.s3a,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]


@pytest.mark.parametrize("s3a_backend,case", on_backends(list(range(len(ROUND_TRIPS))), moto=(0,)),
                         indirect=["s3a_backend"])
def test_spark_reads_mpcommit_csv_over_s3a_as_written(s3a_spark: Any, s3a_backend: Backend, s3a_bucket: str,
                                                      case: int) -> None:
    spark, options = s3a_spark, ROUND_TRIPS[case]
    frame = spark.createDataFrame(make_rows(), SCHEMA).repartition(2)  # two files
    report = write(frame, f"s3a://{s3a_bucket}/t", format="csv", mode="overwrite", options=options,
                   s3=s3a_backend.options)
    assert report.files == 2
    back = spark.read.schema(frame.schema).options(**options).option("multiLine", "true").csv(f"s3a://{s3a_bucket}/t")
    assert sorted((comparable(r) for r in back.collect()), key=lambda r: r[0]) == expected(frame, options)
