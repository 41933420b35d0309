"""The PySpark binding: ``mpcommit.spark.write(df, "s3://bucket/table", ...)``, and the same shaped like PySpark's
DataFrameWriter: ``mpcommit.spark.writer(df).mode("overwrite").partitionBy("dt").parquet("s3://bucket/table")``.

The PySpark binding; pyspark is imported here, by the Spark session catalog (catalog/spark_catalog.py's caller,
catalog/sync.py) and by the demo job -- nowhere else (tests/test_boundaries.py).
"""

from .fluent import DataFrameWriter, writer
from .table_schema import SchemaMismatchError, SchemaMismatchWarning
from .writer import write

__all__ = ["DataFrameWriter", "SchemaMismatchError", "SchemaMismatchWarning", "write", "writer"]
